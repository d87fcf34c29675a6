//! What ends a copy, and whether another session may get past it.

use std::error::Error;

use hetch_engine::EngineError;
#[cfg(feature = "cloud")]
use hetch_object::ObjectError;
use hetch_storage::StorageError;

/// Why a copy (or one session of it) failed.
///
/// Each variant that wraps another crate's error shows it as it is (its message and
/// causes unchanged), so that what a user reads does not depend on which layer the
/// failure came through.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The job asks for what cannot be done (sources on two servers, a path that
    /// escapes a server's root, an operand that does not exist...). Final.
    #[error("{0}")]
    Refused(String),
    /// A local operand could not be looked at.
    #[error("{path}")]
    Operand {
        /// The operand, as shown to the user.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The engine ended a session (lost connection, stall, a peer's error...).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// An object store refused or failed (configuration, credentials, requests).
    #[cfg(feature = "cloud")]
    #[error(transparent)]
    Object(#[from] ObjectError),
    /// The manifest could not be written.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Opening or running a session with a server failed.
    #[error(transparent)]
    Session(SessionError),
}

/// How a session with a server failed, with its causes (opaque: it is shown, and
/// [`CopyError::is_transient`] reads it).
#[derive(Debug)]
pub struct SessionError(anyhow::Error);

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl Error for SessionError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        (*self.0).source()
    }
}

impl CopyError {
    /// A session's failure, with its causes.
    pub(crate) fn session(e: impl Into<anyhow::Error>) -> Self {
        CopyError::Session(SessionError(e.into()))
    }

    /// Whether another session may get past this failure (a lost, stalled or damaged
    /// connection, a server restarting): the rule of [`hetch_session::is_transient`].
    pub fn is_transient(&self) -> bool {
        // The wrapped error, not `self`: a transparent variant hides it from `source`.
        match self {
            CopyError::Refused(_) | CopyError::Operand { .. } => false,
            CopyError::Engine(e) => hetch_session::is_transient_error(e),
            #[cfg(feature = "cloud")]
            CopyError::Object(e) => hetch_session::is_transient_error(e),
            CopyError::Storage(e) => hetch_session::is_transient_error(e),
            // Not through `SessionError::source`: that starts below the error itself.
            CopyError::Session(e) => hetch_session::is_transient(&e.0),
        }
    }
}

impl CopyError {
    /// Whether the session was lost to damage on the way (a TLS record or handshake
    /// that failed its checks, a plain frame's MAC): the server is there.
    pub fn is_damage(&self) -> bool {
        match self {
            CopyError::Engine(e) => hetch_session::is_damage_error(e),
            CopyError::Session(e) => hetch_session::is_damage_error(e.0.as_ref()),
            _ => false,
        }
    }
}

/// An error and its causes on one line, without repeating a cause already quoted.
pub fn one_line(e: &(dyn Error + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        next = cause.source();
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A lost connection, the transient failure of the tests.
    pub(crate) fn lost() -> CopyError {
        CopyError::Engine(EngineError::Connection {
            peer: "h:1".into(),
            cause: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        })
    }

    #[test]
    fn losses_are_transient_and_refusals_final() {
        assert!(lost().is_transient());
        assert!(!CopyError::Refused("no".into()).is_transient());
        let CopyError::Engine(engine) = lost() else {
            unreachable!()
        };
        assert!(
            CopyError::session(engine).is_transient(),
            "a session's loss"
        );
        // A relay's loss, as the source server reports it, with context on top.
        let peer = anyhow::Error::from(EngineError::Peer {
            peer: "h:1".into(),
            code: hetch_proto::ErrorCode::Unavailable,
            message: "relay to b: connection lost".into(),
        });
        let relayed = CopyError::session(peer.context("relaying"));
        assert!(relayed.is_transient(), "found below the context");
        assert_eq!(
            one_line(&relayed),
            "relaying: h:1: relay to b: connection lost"
        );
    }

    #[test]
    fn one_line_names_each_cause_once() {
        let e = CopyError::Operand {
            path: "a/b".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(one_line(&e), "a/b: entity not found");
        let twice = CopyError::Operand {
            path: "a/b: entity not found".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(one_line(&twice), "a/b: entity not found");
    }
}
