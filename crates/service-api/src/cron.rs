//! Five-field cron expressions (`MINUTE HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK`, in UTC)
//! for recurring mirrors, parsed strictly: numbers, `*`, ranges `A-B`, steps `/N` and
//! lists `,` only (no names, no `@hourly`, no seconds field), every number in its
//! field's bounds. As in Vixie cron, when both day fields are restricted a day matching
//! either is due. Written here rather than taken from a crate: it is ~150 lines, needs
//! no calendar library (UTC only: `hetch_units::civil_from_days`), and its errors name the field.

/// A parsed expression: each field as a bit set of the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Whether the day-of-month and day-of-week fields were `*` (unrestricted).
    any_day: bool,
    any_weekday: bool,
}

/// Longest expression taken.
pub const MAX_CRON: usize = 200;

/// How far ahead a next time is looked for: eight years, the longest gap between two
/// 29 Februaries (2096 to 2104). An expression due less often (`0 0 30 2 *`, never)
/// is refused.
const HORIZON_MINUTES: u64 = 8 * 366 * 1440;

const MINUTE_MS: u64 = 60_000;

impl std::str::FromStr for Cron {
    type Err = String;

    fn from_str(s: &str) -> Result<Cron, String> {
        if s.len() > MAX_CRON {
            return Err(format!("cron: longer than {MAX_CRON} bytes"));
        }
        let fields: Vec<&str> = s.split_ascii_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "cron {s:?}: 5 fields (minute hour day-of-month month day-of-week), not {}",
                fields.len()
            ));
        }
        let field = |i: usize, name: &str, lo: u32, hi: u32| {
            parse_field(fields[i], lo, hi).map_err(|e| format!("cron {s:?}: {name}: {e}"))
        };
        let mut weekdays = field(4, "day-of-week", 0, 7)?;
        // 7 is Sunday, as 0 is.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        let cron = Cron {
            minutes: field(0, "minute", 0, 59)?,
            hours: field(1, "hour", 0, 23)?,
            days: field(2, "day-of-month", 1, 31)?,
            months: field(3, "month", 1, 12)?,
            weekdays,
            any_day: fields[2] == "*",
            any_weekday: fields[4] == "*",
        };
        if cron.next_after(0).is_none() {
            return Err(format!("cron {s:?}: never due"));
        }
        Ok(cron)
    }
}

/// One field: a list of `*`, `N`, `A-B`, each with an optional `/STEP`.
fn parse_field(f: &str, lo: u32, hi: u32) -> Result<u64, String> {
    let mut set = 0u64;
    for item in f.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(number(s)?)),
            None => (item, None),
        };
        let (from, to) = match range {
            "*" => (lo, hi),
            r => match r.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                // `N/STEP` runs from N to the field's end, as in Vixie cron.
                None if step.is_some() => (number(r)?, hi),
                None => (number(r)?, number(r)?),
            },
        };
        if from < lo || to > hi || from > to {
            return Err(format!("{range:?} is not within {lo}-{hi}"));
        }
        let step = step.unwrap_or(1);
        if step == 0 || step > hi {
            return Err(format!("step {step} is not within 1-{hi}"));
        }
        let mut v = from;
        while v <= to {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

/// A number of one or two digits, nothing else.
fn number(s: &str) -> Result<u32, String> {
    if s.is_empty() || s.len() > 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a number (names are not taken)"));
    }
    s.parse().map_err(|_| format!("{s:?} is not a number"))
}

impl Cron {
    /// The first due time after `after` (milliseconds since the epoch, UTC), on a
    /// whole minute; `None` if there is none within eight years.
    pub fn next_after(&self, after: u64) -> Option<u64> {
        let start = after / MINUTE_MS + 1;
        // A day number from a u64 of milliseconds is below 2^38: no overflow.
        let civil = |day: u64| hetch_units::civil_from_days(day as i64);
        let mut m = start;
        while m - start <= HORIZON_MINUTES {
            let day = m / 1440;
            let (_, month, dom) = civil(day);
            if self.months & (1 << month) == 0 || !self.day_matches(day, dom) {
                m = (day + 1) * 1440;
                continue;
            }
            let hour = (m % 1440) / 60;
            if self.hours & (1 << hour) == 0 {
                m = (m / 60 + 1) * 60;
                continue;
            }
            if self.minutes & (1 << (m % 60)) == 0 {
                m += 1;
                continue;
            }
            return m.checked_mul(MINUTE_MS);
        }
        None
    }

    /// The shortest time between two of its due times, in milliseconds, or less (never
    /// more): within a day, the closest two times of day its minute and hour fields
    /// allow; across midnight, from a day's last to the next day's first, where two
    /// days in a row are ever both due (else a day more).
    pub fn shortest_gap_ms(&self) -> u64 {
        let times: Vec<u64> = (0..1440u64)
            .filter(|m| self.hours & (1 << (m / 60)) != 0 && self.minutes & (1 << (m % 60)) != 0)
            .collect();
        let (Some(first), Some(last)) = (times.first(), times.last()) else {
            // No time of day: never due (refused when parsed).
            return u64::MAX;
        };
        let within = times.windows(2).map(|w| w[1] - w[0]).min();
        let mut across = 1440 - last + first;
        if !self.two_days_in_a_row() {
            across += 1440;
        }
        within.map_or(across, |w| w.min(across)) * MINUTE_MS
    }

    /// Whether two days in a row are ever both due: looked for over 28 years, after
    /// which dates fall on the same weekdays again (within 1901-2099).
    fn two_days_in_a_row(&self) -> bool {
        let due = |day: u64| {
            let (_, month, dom) = hetch_units::civil_from_days(day as i64);
            self.months & (1 << month) != 0 && self.day_matches(day, dom)
        };
        let mut yesterday = false;
        for day in 0..28 * 366 {
            let today = due(day);
            if yesterday && today {
                return true;
            }
            yesterday = today;
        }
        false
    }

    fn day_matches(&self, day: u64, dom: u32) -> bool {
        let by_date = self.days & (1 << dom) != 0;
        // 1970-01-01 was a Thursday (4).
        let by_weekday = self.weekdays & (1 << ((day + 4) % 7)) != 0;
        match (self.any_day, self.any_weekday) {
            (false, false) => by_date || by_weekday,
            _ => by_date && by_weekday,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn civil(day: u64) -> (i64, u32, u32) {
        hetch_units::civil_from_days(day as i64)
    }

    /// 2026-11-28 04:30:00 UTC, a Saturday.
    const T: u64 = 1_795_840_200_000;

    fn next(expr: &str, after: u64) -> u64 {
        expr.parse::<Cron>().unwrap().next_after(after).unwrap()
    }

    #[test]
    fn next_times() {
        assert_eq!(civil(T / 86_400_000), (2026, 11, 28));
        // Every hour on the hour.
        assert_eq!(next("0 * * * *", T), T + 30 * MINUTE_MS);
        // Every 15 minutes: 04:45.
        assert_eq!(next("*/15 * * * *", T), T + 15 * MINUTE_MS);
        // Mondays at 02:00: 2026-11-30.
        assert_eq!(next("0 2 * * 1", T), T + (2 * 1440 - 150) * MINUTE_MS);
        // Sunday as 7: 2026-11-29 00:00.
        assert_eq!(next("0 0 * * 7", T), T + (1440 - 270) * MINUTE_MS);
        // Day 1 of the month or a Sunday (both restricted: either).
        assert_eq!(next("0 0 1 * 0", T), T + (1440 - 270) * MINUTE_MS);
        // 1 January: 2027-01-01 00:00 is 34 days minus 04:30 ahead.
        assert_eq!(next("0 0 1 1 *", T), T + (34 * 1440 - 270) * MINUTE_MS);
        // 29 February: 2028.
        let leap = next("0 0 29 2 *", T);
        assert_eq!(civil(leap / 86_400_000), (2028, 2, 29));
        // Strictly after: at a due time, the next one.
        assert_eq!(next("* * * * *", T), T + MINUTE_MS);
    }

    #[test]
    fn the_shortest_gap_is_within_a_day_or_across_midnight() {
        let gap = |expr: &str| expr.parse::<Cron>().unwrap().shortest_gap_ms() / MINUTE_MS;
        assert_eq!(gap("* * * * *"), 1);
        assert_eq!(gap("*/15 * * * *"), 15);
        assert_eq!(gap("0 * * * *"), 60);
        assert_eq!(gap("0 12 * * *"), 1440);
        // 23:00 and the next day's 00:00.
        assert_eq!(gap("0 0,23 * * *"), 60);
        // On the 15th only: 23:00 is never followed by a due 00:00.
        assert_eq!(gap("0 0,23 15 * *"), 23 * 60);
        // 23:59, then 00:00: a minute apart, where two days in a row are due.
        assert_eq!(gap("0,59 0,23 * * *"), 1);
        assert_eq!(gap("0,59 0,23 1 1 *"), 59);
        // The 31st, then the 1st of the next month.
        assert_eq!(gap("0,59 0,23 1,31 * *"), 1);
        // Saturday and Sunday.
        assert_eq!(gap("0,59 0,23 * * 6,0"), 1);
        // Weekly: at least a day (a bound, never more than the real gap).
        assert!((1440..=7 * 1440).contains(&gap("0 2 * * 1")));
    }

    #[test]
    fn garbage_is_refused_naming_the_field() {
        for (expr, says) in [
            ("", "5 fields"),
            ("* * * *", "5 fields"),
            ("* * * * * *", "5 fields"),
            ("60 * * * *", "minute"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day-of-month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day-of-week"),
            ("*/0 * * * *", "step"),
            ("5-1 * * * *", "minute"),
            ("* * * JAN *", "names"),
            ("@hourly", "5 fields"),
            ("-1 * * * *", "minute"),
            ("1,,2 * * * *", "minute"),
            ("0 0 30 2 *", "never"),
            ("+1 * * * *", "minute"),
        ] {
            let e = expr.parse::<Cron>().unwrap_err();
            assert!(e.starts_with("cron"), "{expr}: {e}");
            assert!(e.contains(says), "{expr}: {e}");
        }
        assert!("x".repeat(MAX_CRON + 1).parse::<Cron>().is_err());
    }
}
