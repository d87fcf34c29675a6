//! Plans waiting for their confirmation. An acting tool returns a plan and a token;
//! only that token carries the plan out, once, before it expires. The token is
//! random (128 bits); the audit log names the plan by its number, and a `confirm`
//! call's token by its first characters only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::actions::{Action, Operands};

/// Most plans waiting at once; the oldest is dropped for a new one.
pub const MAX_WAITING: usize = 64;

/// A plan made and not yet carried out.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Its number, for the audit log and the assistant.
    pub id: u64,
    /// What confirming it does.
    pub action: Action,
    /// What the plan promised (what confirming may not exceed).
    pub numbers: Numbers,
    /// Where its locations led when it was made (a copy or sync): confirming refuses
    /// if they now lead elsewhere.
    pub operands: Option<Operands>,
    made: Instant,
}

/// What a copy or sync plan would do, from its dry run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Numbers {
    /// Entries created.
    pub files: u64,
    /// Bytes of those.
    pub bytes: u64,
    /// Files replaced.
    pub replaced: u64,
    /// Bytes of those.
    pub replaced_bytes: u64,
    /// Entries deleted.
    pub deleted: u64,
}

impl Numbers {
    /// How `now` goes beyond `self` (what was confirmed), if it does.
    pub fn exceeded_by(&self, now: &Numbers) -> Option<String> {
        let checks = [
            ("entries to copy", self.files, now.files),
            ("bytes to copy", self.bytes, now.bytes),
            ("files to replace", self.replaced, now.replaced),
            ("bytes to replace", self.replaced_bytes, now.replaced_bytes),
            ("entries to delete", self.deleted, now.deleted),
        ];
        checks
            .iter()
            .find(|(_, was, is)| is > was)
            .map(|(what, was, is)| format!("{what}: {is} now, {was} in the plan"))
    }
}

/// The waiting plans, by token.
pub struct Plans {
    ttl: Duration,
    next: u64,
    waiting: HashMap<String, Plan>,
}

/// Why a token carries nothing out.
#[derive(Debug, PartialEq, Eq)]
pub enum Unconfirmed {
    /// Never issued, already used, or dropped.
    Unknown,
    /// Issued, but too long ago.
    Expired(u64),
}

impl Plans {
    /// No plans; tokens live `ttl`.
    pub fn new(ttl: Duration) -> Plans {
        Plans {
            ttl,
            next: 1,
            waiting: HashMap::new(),
        }
    }

    /// Keeps a plan; returns its number and token.
    pub fn add(
        &mut self,
        action: Action,
        numbers: Numbers,
        operands: Option<Operands>,
    ) -> (u64, String) {
        let now = Instant::now();
        self.waiting
            .retain(|_, p| now.duration_since(p.made) < self.ttl);
        if self.waiting.len() >= MAX_WAITING {
            let oldest = self
                .waiting
                .iter()
                .min_by_key(|(_, p)| p.id)
                .map(|(t, _)| t.clone());
            if let Some(t) = oldest {
                self.waiting.remove(&t);
            }
        }
        let id = self.next;
        self.next += 1;
        let token = format!("hc-{:032x}", rand::random::<u128>());
        self.waiting.insert(
            token.clone(),
            Plan {
                id,
                action,
                numbers,
                operands,
                made: now,
            },
        );
        (id, token)
    }

    /// Takes the plan `token` confirms (once: the token is spent).
    pub fn take(&mut self, token: &str) -> Result<Plan, Unconfirmed> {
        let plan = self.waiting.remove(token).ok_or(Unconfirmed::Unknown)?;
        if plan.made.elapsed() >= self.ttl {
            return Err(Unconfirmed::Expired(plan.id));
        }
        Ok(plan)
    }

    /// Seconds a token lives.
    pub fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cancel(t: u64) -> Action {
        Action::Cancel { transfer: t }
    }

    #[test]
    fn a_token_works_once_and_expires() {
        let mut p = Plans::new(Duration::from_millis(200));
        let (id, token) = p.add(cancel(1), Numbers::default(), None);
        let (_, other) = p.add(cancel(2), Numbers::default(), None);
        assert_ne!(token, other);
        assert_eq!(p.take(&token).unwrap().id, id);
        assert_eq!(p.take(&token).unwrap_err(), Unconfirmed::Unknown);
        assert_eq!(p.take("hc-guess").unwrap_err(), Unconfirmed::Unknown);
        std::thread::sleep(Duration::from_millis(250));
        assert!(matches!(p.take(&other), Err(Unconfirmed::Expired(_))));
    }

    #[test]
    fn waiting_plans_are_bounded() {
        let mut p = Plans::new(Duration::from_secs(60));
        let (_, first) = p.add(cancel(0), Numbers::default(), None);
        for i in 1..=MAX_WAITING as u64 {
            p.add(cancel(i), Numbers::default(), None);
        }
        assert_eq!(p.waiting.len(), MAX_WAITING);
        assert_eq!(p.take(&first).unwrap_err(), Unconfirmed::Unknown);
    }

    #[test]
    fn growth_beyond_the_plan_is_named() {
        let planned = Numbers {
            files: 3,
            bytes: 100,
            ..Default::default()
        };
        assert_eq!(planned.exceeded_by(&planned), None);
        let mut more = planned;
        more.bytes = 101;
        assert!(planned
            .exceeded_by(&more)
            .unwrap()
            .starts_with("bytes to copy"));
        more = planned;
        more.deleted = 1;
        assert!(planned.exceeded_by(&more).is_some());
    }
}
