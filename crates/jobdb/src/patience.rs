//! How long a unit whose attempt failed waits before it is handed out again, and how
//! a transaction the database gave up on (a deadlock, a serialization conflict) is run
//! again.
//!
//! A failed attempt is most often the destination or the network away for a while (a
//! disk full, a node restarting): trying again at once spends the unit's attempts in
//! a second. Each failed attempt therefore waits longer than the one before (as
//! rsync's and FTS3's retries, webhooks here, and TCP itself do): `first`, then three
//! times that, and so on up to `most`.

use std::future::Future;
use std::time::Duration;

use crate::DbError;

/// The waits between a unit's attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// The wait after the first failed attempt, in milliseconds.
    pub first_ms: u64,
    /// The longest wait, in milliseconds.
    pub most_ms: u64,
}

/// Default first wait: long enough for a connection refused while a node restarts.
pub const FIRST_WAIT_MS: u64 = 5_000;
/// Default longest wait.
pub const MOST_WAIT_MS: u64 = 120_000;
/// The longest any wait may be, whatever is configured: a day. It bounds the
/// numbers written into the SQL (a configured wait of centuries would overflow a
/// `BIGINT` when added to the time), and no fault worth waiting for lasts longer.
pub const MAX_WAIT_MS: u64 = 86_400_000;
/// Each wait is this many times the one before.
const GROWTH: u64 = 3;
/// Waits computed one by one in the SQL; beyond, the longest.
const STEPS: u64 = 24;

impl Default for Patience {
    fn default() -> Patience {
        Patience {
            first_ms: FIRST_WAIT_MS,
            most_ms: MOST_WAIT_MS,
        }
    }
}

impl Patience {
    /// The wait after failed attempt number `failed` (1 for the first).
    pub fn wait_ms(&self, failed: u64) -> u64 {
        let mut wait = self.first_ms;
        for _ in 1..failed.min(STEPS) {
            wait = wait.saturating_mul(GROWTH);
        }
        wait.min(self.most_ms.max(self.first_ms)).min(MAX_WAIT_MS)
    }

    /// SQL for the wait after the failure of the attempt a unit's `attempts` column
    /// counts before it (its old value, as an `UPDATE`'s `SET` reads it): a `CASE`
    /// over the numbers, computed here (not from anyone's input).
    pub(crate) fn wait_sql(&self) -> String {
        let mut sql = String::from("CASE attempts");
        for before in 0..STEPS {
            sql.push_str(&format!(" WHEN {before} THEN {}", self.wait_ms(before + 1)));
        }
        sql.push_str(&format!(" ELSE {} END", self.wait_ms(STEPS)));
        sql
    }
}

/// Most times a transaction is run when the database keeps giving it up.
const TRIES: u32 = 8;

/// Runs transaction `f` again when the database gave it up to break a deadlock or a
/// serialization conflict (PostgreSQL's 40P01 and 40001): nothing of it was kept, so
/// running it again is safe, and it then goes through. After [`TRIES`], the last
/// error. Between tries a short random wait, growing, so that the two that collided
/// do not collide again.
pub(crate) async fn again<T, F, Fut>(mut f: F) -> Result<T, DbError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, DbError>>,
{
    let mut tries = 1;
    loop {
        match f().await {
            Err(e) if e.is_conflict() && tries < TRIES => {
                let ms = rand::random::<u64>() % (5 * u64::from(tries)) + 1;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                tries += 1;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wait_is_three_times_the_last_up_to_the_longest() {
        let p = Patience {
            first_ms: 5_000,
            most_ms: 120_000,
        };
        let waits: Vec<u64> = (1..=6).map(|n| p.wait_ms(n)).collect();
        assert_eq!(waits, [5_000, 15_000, 45_000, 120_000, 120_000, 120_000]);
        assert_eq!(p.wait_ms(u64::MAX), 120_000);
        let none = Patience {
            first_ms: 0,
            most_ms: 0,
        };
        assert_eq!(none.wait_ms(3), 0);
        // A longest wait below the first is taken as the first.
        let odd = Patience {
            first_ms: 10,
            most_ms: 1,
        };
        assert_eq!(odd.wait_ms(5), 10);
        // Configured waits beyond a day are a day.
        let long = Patience {
            first_ms: u64::MAX,
            most_ms: u64::MAX,
        };
        assert_eq!(long.wait_ms(1), MAX_WAIT_MS);
        assert!(long
            .wait_sql()
            .ends_with(&format!("ELSE {MAX_WAIT_MS} END")));
        let sql = p.wait_sql();
        assert!(sql.starts_with("CASE attempts WHEN 0 THEN 5000 WHEN 1 THEN 15000"));
        assert!(sql.ends_with("ELSE 120000 END"));
    }
}
