//! The per-session secret that binds data streams to the control connection.
//!
//! Both ends export it from the TLS session of the control connection (RFC 8446
//! exporter, [`EXPORTER_LABEL`]), so it never travels and differs for every control
//! connection: nothing derived from it is of any use in another session. From it come
//! the proof a data stream presents when it joins ([`SessionKey::stream_proof`]) and
//! the key of the per-frame MAC of plain data streams ([`SessionKey::frame_mac_key`]).

use crate::tokens_equal;

/// The TLS exporter label both ends use.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-hetch-session";

/// Domain-separation contexts for BLAKE3's key derivation: one key per purpose, so a
/// value computed for one purpose is never valid for another.
const PROOF_CONTEXT: &str = "hetch 2025-06 data-stream join proof";
const FRAME_MAC_CONTEXT: &str = "hetch 2025-06 plain data-frame MAC";
const OPERATION_CONTEXT: &str = "hetch 2026-11 operation on kept connections";

/// A secret exported from the TLS session of one control connection.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret itself.
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    /// Exports the key from an established TLS 1.3 connection (either side).
    pub(crate) fn export<D>(conn: &rustls::ConnectionCommon<D>) -> Result<Self, rustls::Error> {
        conn.export_keying_material([0u8; 32], EXPORTER_LABEL, None)
            .map(SessionKey)
    }

    /// A key from raw bytes (tests, and sessions that run without TLS in one process).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        SessionKey(bytes)
    }

    /// The proof that connection `generation` (0 the first, one more each time the
    /// stream is joined again) of data stream `index` of `session` was opened by the
    /// holder of this key. A relay that sees it on a plain stream can only present it
    /// again for the same connection of the same slot of the same session, which the
    /// server takes once.
    pub fn stream_proof(&self, session: &[u8; 16], index: u16, generation: u32) -> [u8; 32] {
        let key = blake3::derive_key(PROOF_CONTEXT, &self.0);
        let mut h = blake3::Hasher::new_keyed(&key);
        h.update(session);
        h.update(&index.to_le_bytes());
        h.update(&generation.to_le_bytes());
        *h.finalize().as_bytes()
    }

    /// Whether `proof` is [`SessionKey::stream_proof`] of `session`, `index` and
    /// `generation` (compared in constant time).
    pub fn proof_matches(
        &self,
        session: &[u8; 16],
        (index, generation): (u16, u32),
        proof: &[u8; 32],
    ) -> bool {
        tokens_equal(&self.stream_proof(session, index, generation), proof)
    }

    /// The key of operation `session` (its welcome's id) on connections kept from
    /// this key's session: each operation's frames have their own MAC key, so none
    /// recorded from one operation passes in another over the same connections.
    pub fn for_operation(&self, session: &[u8; 16]) -> SessionKey {
        let key = blake3::derive_key(OPERATION_CONTEXT, &self.0);
        let mut h = blake3::Hasher::new_keyed(&key);
        h.update(session);
        SessionKey(*h.finalize().as_bytes())
    }

    /// The key of the MAC that protects the frames of plain (`--no-encrypt`) data
    /// streams; the engine derives one key per stream from it.
    pub fn frame_mac_key(&self) -> [u8; 32] {
        blake3::derive_key(FRAME_MAC_CONTEXT, &self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_depend_on_key_session_and_index() {
        let a = SessionKey::from_bytes([1; 32]);
        let b = SessionKey::from_bytes([2; 32]);
        let p = a.stream_proof(&[7; 16], 0, 0);
        assert!(a.proof_matches(&[7; 16], (0, 0), &p));
        assert!(
            !b.proof_matches(&[7; 16], (0, 0), &p),
            "another session's key"
        );
        assert!(!a.proof_matches(&[8; 16], (0, 0), &p), "another session id");
        assert!(
            !a.proof_matches(&[7; 16], (1, 0), &p),
            "another stream index"
        );
        assert!(
            !a.proof_matches(&[7; 16], (0, 1), &p),
            "the stream's next connection"
        );
    }

    #[test]
    fn purposes_get_different_keys() {
        let k = SessionKey::from_bytes([3; 32]);
        assert_ne!(k.frame_mac_key(), k.stream_proof(&[0; 16], 0, 0));
        assert_ne!(k.frame_mac_key(), [3; 32]);
        let (one, two) = (k.for_operation(&[1; 16]), k.for_operation(&[2; 16]));
        assert_ne!(one.frame_mac_key(), two.frame_mac_key());
        assert_ne!(one.frame_mac_key(), k.frame_mac_key());
        assert_eq!(
            one.frame_mac_key(),
            k.for_operation(&[1; 16]).frame_mac_key()
        );
        assert_eq!(format!("{k:?}"), "SessionKey(..)");
    }
}
