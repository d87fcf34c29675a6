//! Parsing sizes, rates and durations given on the command line (shared by the `hetch`
//! and `hetch-lab` binaries), and showing byte counts.

use std::time::Duration;

/// Parses a size of [`parse_size`]'s form, or `off`: no size at all (`u64::MAX`), as
/// a threshold that is never reached (`--split-size off`).
pub fn parse_size_or_off(s: &str) -> Result<u64, String> {
    match s {
        "off" => Ok(u64::MAX),
        _ => parse_size(s),
    }
}

/// Parses a size: a number with an optional binary suffix (`K`, `M`, `G`, `T`, also
/// written `KiB`, `MiB`, ...), since block sizes and buffers are powers of two.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 4M, 512K, 1G)"))?;
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "'{s}': unknown size suffix '{suffix}' (use K, M, G or T)"
            ))
        }
    };
    checked(s, n * mult as f64)
}

/// `bytes` as a `u64`, or an error naming `s` when it does not fit (a float cast
/// would saturate silently).
fn checked(s: &str, bytes: f64) -> Result<u64, String> {
    if bytes.is_finite() && bytes < u64::MAX as f64 {
        Ok(bytes as u64)
    } else {
        Err(format!("'{s}' is too large"))
    }
}

/// Largest socket buffer the kernel takes: `SO_SNDBUF`/`SO_RCVBUF` are C `int`s.
pub const MAX_SOCKET_BUFFER: u64 = i32::MAX as u64;

/// Parses a socket buffer size ([`parse_size`], at most [`MAX_SOCKET_BUFFER`]).
pub fn parse_socket_buffer(s: &str) -> Result<u32, String> {
    let n = parse_size(s)?;
    if n > MAX_SOCKET_BUFFER {
        return Err(format!(
            "'{s}': a socket buffer is at most {MAX_SOCKET_BUFFER} bytes (2 GiB less one)"
        ));
    }
    Ok(n as u32)
}

/// Parses a stall timeout: 2 s to 1 h, or 0 for none.
pub fn parse_stall_timeout(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    // Peers send keep-alives every second: shorter timeouts would trip on scheduling.
    if d.is_zero()
        || (std::time::Duration::from_secs(2)..=std::time::Duration::from_secs(3600)).contains(&d)
    {
        Ok(d)
    } else {
        Err(format!(
            "'{s}': a stall timeout is 2s to 1h (3600s), or 0 for none"
        ))
    }
}

/// Parses a block size: a size that is a power of two between 1 KiB and 256 MiB.
pub fn parse_block_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    hetch_integrity::check_block_size(n).map_err(|e| e.to_string())?;
    Ok(n)
}

/// Parses a rate in bytes per second with SI suffixes (`500M` or `500MB` = 500,000,000
/// B/s, `2G`), binary ones (`100MiB`), or in bits per second when it ends with `bit` or
/// `bps` (`4gbit` = 500,000,000 B/s).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (body, per_bit) = match t.strip_suffix("bit").or_else(|| t.strip_suffix("bps")) {
        Some(b) => (b.to_string(), true),
        None => (
            t.trim_end_matches("b/s").trim_end_matches("/s").to_string(),
            false,
        ),
    };
    let digits = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(digits);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a rate (e.g. 500M, 2G, 4gbit)"))?;
    // Bytes unless it ends in `bit` or `bps`: `MB` is the MB/s that progress and the
    // web page show (10^6), `MiB` a binary one, as sizes are written.
    let mult = match suffix {
        "" | "b" => 1e0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => (1u64 << 10) as f64,
        "mi" | "mib" => (1u64 << 20) as f64,
        "gi" | "gib" => (1u64 << 30) as f64,
        "ti" | "tib" => (1u64 << 40) as f64,
        _ => {
            return Err(format!(
                "'{s}': unknown rate suffix '{suffix}' (use K, M, G, T, MB, MiB, or e.g. 4gbit)"
            ))
        }
    };
    checked(s, n * mult / if per_bit { 8.0 } else { 1.0 })
}

/// Formats bytes for people (binary units).
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Formats whole seconds for people, to two units at most: `45 s`, `3 min 20 s`,
/// `2 h 05 min`, `3 d 04 h`.
pub fn human_seconds(s: u64) -> String {
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {:02} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Parses a duration: `50ms`, `0.5s`, `100us`, `10m`, `1h`, or a bare number of
/// milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1e-3)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!(
            "'{s}': expected a duration like 50ms, 0.1s, 10m or 1h"
        )),
    }
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01: Howard
/// Hinnant's `civil_from_days`, which counts in 400-year eras of 146097 days from
/// 0000-03-01 so that leap days fall at the end of each year.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, [0, 11]
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Now, as milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A Unix time in milliseconds as RFC 3339 UTC with milliseconds
/// (`2026-11-26T12:34:56.789Z`), as logs and JSON records carry it.
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let day = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        day / 3600,
        day / 60 % 60,
        day % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::human_seconds;

    #[test]
    fn seconds_read_in_two_units_at_most() {
        let cases = [
            (0, "0 s"),
            (59, "59 s"),
            (60, "1 min 00 s"),
            (200, "3 min 20 s"),
            (7_500, "2 h 05 min"),
            (86_399, "23 h 59 min"),
            (273_600, "3 d 04 h"),
            (u64::MAX, "213503982334601 d 07 h"),
        ];
        for (s, want) in cases {
            assert_eq!(human_seconds(s), want);
        }
    }

    #[test]
    fn rfc3339_names_the_utc_instant() {
        assert_eq!(super::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) 23:59:59.999
        assert_eq!(
            super::rfc3339_ms(951_868_799_999),
            "2000-02-29T23:59:59.999Z"
        );
    }

    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("4Q").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_block_size("64K").unwrap(), 64 << 10);
        assert!(parse_block_size("3K").is_err());
        assert!(parse_block_size("512").is_err());
        // No silent saturation.
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("1e400").is_err());
        assert!(parse_rate("99999999999999999T").is_err());
    }

    #[test]
    fn socket_buffers_fit_the_kernel_s_int() {
        assert_eq!(parse_socket_buffer("64M").unwrap(), 64 << 20);
        assert_eq!(parse_socket_buffer("2147483647").unwrap(), i32::MAX as u32);
        let err = parse_socket_buffer("4G").unwrap_err();
        assert!(err.contains("4G") && err.contains("at most"), "{err}");
        assert!(parse_socket_buffer("2G").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("500M").unwrap(), 500_000_000);
        assert_eq!(parse_rate("2G").unwrap(), 2_000_000_000);
        assert_eq!(parse_rate("4gbit").unwrap(), 500_000_000);
        assert_eq!(parse_rate("100MB/s").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1000").unwrap(), 1000);
        // Sizes' spellings: decimal MB as progress shows rates, binary MiB.
        assert_eq!(parse_rate("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_rate("10mb").unwrap(), 10_000_000);
        assert_eq!(parse_rate("10MiB").unwrap(), 10 << 20);
        assert_eq!(parse_rate("10MiB/s").unwrap(), 10 << 20);
        assert_eq!(parse_rate("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_rate("2KB").unwrap(), 2_000);
        assert_eq!(parse_rate("800mbps").unwrap(), 100_000_000);
        assert!(parse_rate("10MX").is_err());
        assert_eq!(parse_rate("8Mibit").unwrap(), 1 << 20);
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_duration("0.1s").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("100").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("-1ms").is_err() && parse_duration("fast").is_err());
    }
}
