//! A pull's entries must lie under the operands the client asked for.
//!
//! Entry paths start with the name of the source operand they belong to. A client that
//! pulls `hetch://srv/dataset` into `~` writes every entry under `~/dataset`; a server
//! that announced `.ssh/authorized_keys` instead would write next to the destination
//! (the scp flaw CVE-2019-6111). So the receiving side of a pull accepts only entries
//! whose first component is the last name of one of the requested paths. A request for
//! the server's root itself (an empty path) names no operand the client can know in
//! advance: it accepts the first new name it sees, and only that one.

use std::sync::Mutex;

use hetch_proto::Entry;

use crate::error::EngineError;

/// The operand names a pull accepts, bound as entries arrive.
#[derive(Debug)]
pub(crate) struct TopCheck {
    /// One slot per requested operand: its name, or `None` until the first entry of
    /// an operand whose name was not known (the server's root) binds it.
    slots: Mutex<Vec<Option<Vec<u8>>>>,
}

impl TopCheck {
    /// The check for a pull of the wire paths `pulled`; `None` when there is nothing to
    /// check (a push or a local copy).
    pub fn new(pulled: Option<&[Vec<u8>]>) -> Option<TopCheck> {
        let slots = pulled?.iter().map(|p| last_name(p)).collect();
        Some(TopCheck {
            slots: Mutex::new(slots),
        })
    }

    /// Errors (a protocol violation by `peer`, ending the session) unless every entry
    /// of `batch` lies under one of the operands.
    pub fn check(&self, peer: &str, batch: &[Entry]) -> Result<(), EngineError> {
        let mut slots = self.slots.lock().expect("tops lock");
        for e in batch {
            let top = e.path.split(|b| *b == b'/').next().unwrap_or_default();
            if slots.iter().any(|s| s.as_deref() == Some(top)) {
                continue;
            }
            match slots.iter_mut().find(|s| s.is_none()) {
                Some(free) if !top.is_empty() => *free = Some(top.to_vec()),
                _ => {
                    return Err(EngineError::unexpected(
                        peer,
                        format!(
                            "the server sent {}, which is not under any path asked for; refusing to write outside the requested operands",
                            hetch_proto::escape_bytes(&e.path)
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The last name of a wire path (`a/b/` gives `b`); `None` for the root itself.
fn last_name(wire: &[u8]) -> Option<Vec<u8>> {
    wire.split(|b| *b == b'/')
        .rfind(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_proto::EntryKind;

    fn entry(path: &str) -> Entry {
        Entry {
            id: 1,
            path: path.as_bytes().to_vec(),
            kind: EntryKind::Dir,
            mode: 0o755,
            mtime_sec: 0,
            mtime_nsec: 0,
            xattrs: Vec::new(),
        }
    }

    #[test]
    fn entries_must_start_with_a_requested_name() {
        let c = TopCheck::new(Some(&[b"data/set".to_vec(), b"x/".to_vec()])).unwrap();
        assert!(c
            .check("h", &[entry("set"), entry("set/a/b"), entry("x/y")])
            .is_ok());
        let err = c.check("h", &[entry(".ssh/authorized_keys")]).unwrap_err();
        assert!(err.to_string().contains(".ssh/authorized_keys"), "{err}");
        assert!(c.check("h", &[entry("data/set")]).is_err());
    }

    #[test]
    fn the_root_binds_the_first_name_only() {
        let c = TopCheck::new(Some(&[Vec::new()])).unwrap();
        assert!(c
            .check("h", &[entry("srvroot"), entry("srvroot/f")])
            .is_ok());
        assert!(c.check("h", &[entry(".bashrc")]).is_err());
        assert!(TopCheck::new(None).is_none());
    }

    #[test]
    fn last_names() {
        assert_eq!(last_name(b"a/b/"), Some(b"b".to_vec()));
        assert_eq!(last_name(b"./a/."), Some(b"a".to_vec()));
        assert_eq!(last_name(b""), None);
        assert_eq!(last_name(b"."), None);
    }
}
