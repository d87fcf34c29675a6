//! Shared-secret tokens authenticating clients to the server.

use std::path::{Path, PathBuf};

use rand::RngCore;

use crate::fsutil;
use crate::NetError;

/// Name of the token file in the server's state directory.
const TOKEN_FILE: &str = "token";

/// Shortest token accepted, on both sides: short enough for any hand-made secret, long
/// enough that guessing is hopeless at the rate the server lets anyone try.
pub const MIN_TOKEN_LEN: usize = 16;

/// Reads a token file (trailing whitespace trimmed). An empty or short token, or a
/// file that group or others may read or write, is an error naming the file.
pub fn read_token_file(path: &Path) -> Result<Vec<u8>, NetError> {
    fsutil::check_private(path)?;
    let mut bytes = std::fs::read(path).map_err(|e| NetError::file(path, e))?;
    // Editors and `echo` add a final newline that is not part of the secret.
    let len = bytes.trim_ascii_end().len();
    bytes.truncate(len);
    if bytes.is_empty() {
        return Err(NetError::file(path, "token file is empty"));
    }
    check_token_len(&bytes).map_err(|e| NetError::file(path, e))?;
    Ok(bytes)
}

/// Refuses tokens shorter than [`MIN_TOKEN_LEN`], saying how to make a good one.
pub fn check_token_len(token: &[u8]) -> Result<(), String> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "token is {} bytes, at least {MIN_TOKEN_LEN} are required \
             (make one with `openssl rand -hex 32`)",
            token.len()
        ));
    }
    Ok(())
}

/// Loads `state_dir/token`, creating a random 32-byte hex token (mode 0600) on first
/// start. Returns the token and its path.
///
/// The token is the 64 ASCII hex characters themselves (as bytes), exactly what
/// [`read_token_file`] returns for a copy of the file, so clients can use the file as-is.
pub fn load_or_create_token(state_dir: &Path) -> Result<(Vec<u8>, PathBuf), NetError> {
    load_or_create_named_token(state_dir, TOKEN_FILE)
}

/// [`load_or_create_token`] for the token file `name` in `state_dir` (a second token
/// of the same kind, such as the job service's workers').
pub fn load_or_create_named_token(
    state_dir: &Path,
    name: &str,
) -> Result<(Vec<u8>, PathBuf), NetError> {
    let path = state_dir.join(name);
    if !fsutil::exists(&path)? {
        fsutil::create_private_dir(state_dir)?;
        let mut secret = [0u8; 32];
        // ThreadRng is a CSPRNG seeded from the OS.
        rand::rng().fill_bytes(&mut secret);
        let token = hex::encode(secret);
        // If another process created the file meanwhile, its token wins (read below).
        fsutil::write_atomic(&path, token.as_bytes(), 0o600, false)?;
    }
    let token = read_token_file(&path)?;
    Ok((token, path))
}

/// Constant-time equality of two tokens.
///
/// Every byte of the longer input is visited whatever the contents, so the time taken
/// reveals at most the lengths; tokens of different length are never equal.
pub fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    // Keep the optimiser from turning the accumulation into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn token_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let (t1, path) = load_or_create_token(&state).unwrap();
        assert_eq!(path, state.join("token"));
        assert_eq!(t1.len(), 64);
        assert!(t1
            .iter()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (t2, _) = load_or_create_token(&state).unwrap();
        assert_eq!(t1, t2);
        // No temporary files left behind.
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 1);
    }

    #[test]
    fn two_states_get_different_tokens() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert_ne!(
            load_or_create_token(a.path()).unwrap().0,
            load_or_create_token(b.path()).unwrap().0
        );
    }

    #[test]
    fn read_trims_trailing_whitespace() {
        let dir = tempfile::tempdir().unwrap();
        let p = private(&dir, "t", " secret value of 32 bytes \r\n\n");
        assert_eq!(read_token_file(&p).unwrap(), b" secret value of 32 bytes");
    }

    /// Writes a file with mode 0600.
    fn private(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    #[test]
    fn short_token_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = private(&dir, "short-token", "123456789012345\n");
        let err = read_token_file(&p).unwrap_err().to_string();
        assert!(err.contains("short-token"), "{err}");
        assert!(err.contains("15 bytes, at least 16"), "{err}");
        std::fs::write(&p, "1234567890123456\n").unwrap();
        assert_eq!(read_token_file(&p).unwrap(), b"1234567890123456");
    }

    #[test]
    fn token_readable_by_others_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let p = private(&dir, "open-token", "a good long token value\n");
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = read_token_file(&p).unwrap_err().to_string();
            assert!(err.contains(&format!("chmod 600 {}", p.display())), "{err}");
            assert!(err.contains("open-token"), "{err}");
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read_token_file(&p).is_ok());
    }

    #[test]
    fn empty_token_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = private(&dir, "empty-token", "\n  \n");
        let err = read_token_file(&p).unwrap_err();
        assert!(matches!(&err, NetError::File { path, .. } if *path == p));
        assert!(err.to_string().contains("empty-token"), "{err}");
    }

    #[test]
    fn missing_token_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope");
        let err = read_token_file(&p).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn tokens_equal_cases() {
        assert!(tokens_equal(b"abc", b"abc"));
        assert!(tokens_equal(b"", b""));
        assert!(!tokens_equal(b"abc", b"abd"));
        assert!(!tokens_equal(b"xbc", b"abc"));
        assert!(!tokens_equal(b"abc", b"abcd"));
        assert!(!tokens_equal(b"abcd", b"abc"));
        assert!(!tokens_equal(b"", b"a"));
        // A shorter token padded with zeros must not match.
        assert!(!tokens_equal(b"ab", b"ab\0"));
    }
}
