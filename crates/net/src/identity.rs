//! The server's TLS key and self-signed certificate.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::fsutil;
use crate::{Fingerprint, NetError};

/// File names inside the state directory.
const KEY_FILE: &str = "key.pem";
const CERT_FILE: &str = "cert.pem";

/// The name in the certificate and the SNI name clients send. Clients do not check
/// it (they pin the fingerprint), but a fixed name keeps certificates uniform.
pub(crate) const SERVER_NAME: &str = "hetch";

/// The rustls crypto provider used on both sides: ring, because the workspace does
/// not build aws-lc-rs.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's TLS key and self-signed certificate.
#[derive(Debug)]
pub struct ServerIdentity {
    /// Fingerprint of the certificate, printed at start for clients to pin.
    pub fingerprint: Fingerprint,
    /// Built once at load time, so a key that does not match the certificate is
    /// reported at start rather than at the first connection.
    config: Arc<rustls::ServerConfig>,
}

impl ServerIdentity {
    /// Loads `key.pem`/`cert.pem` from `state_dir`, creating them (mode 0600) and the
    /// directory on first start. Returns whether they were created.
    ///
    /// The key is an ECDSA P-256 key; the certificate is self-signed for the name
    /// `hetch`. Each file is written atomically, key first. An existing key is never
    /// replaced: a key without a certificate (a crash between the two writes, or a
    /// deleted certificate) gets a new certificate signed by that same key, and a
    /// certificate without its key is an error, because silently re-keying would make
    /// every client see a changed host key. A key file that group or others may read is
    /// refused.
    pub fn load_or_create(state_dir: &Path) -> Result<(Self, bool), NetError> {
        let key_path = state_dir.join(KEY_FILE);
        let cert_path = state_dir.join(CERT_FILE);
        let have_key = fsutil::exists(&key_path)?;
        let have_cert = fsutil::exists(&cert_path)?;
        let created = match (have_key, have_cert) {
            (true, true) => false,
            (false, true) => {
                return Err(NetError::file(
                    &key_path,
                    format!(
                        "missing while {} exists; restore the key, or delete the certificate \
                         to create a new identity (clients will then report a changed host key)",
                        cert_path.display()
                    ),
                ))
            }
            (true, false) => {
                // The key may be in use elsewhere or backed up: keep it, certify it again.
                fsutil::check_private(&key_path)?;
                let key_pem =
                    std::fs::read_to_string(&key_path).map_err(|e| NetError::file(&key_path, e))?;
                let cert_pem = certify(&key_pem).map_err(|e| {
                    NetError::file(&key_path, format!("cannot make a certificate for it: {e}"))
                })?;
                fsutil::write_atomic(&cert_path, cert_pem.as_bytes(), 0o600, false)?;
                true
            }
            (false, false) => {
                fsutil::create_private_dir(state_dir)?;
                let (key_pem, cert_pem) = generate()
                    .map_err(|e| NetError::file(&key_path, format!("cannot generate: {e}")))?;
                // Create-if-absent: a key that appeared meanwhile (another process
                // starting at once) is never overwritten; it then has no certificate
                // yet or gets its own, and the load below finds out which.
                if fsutil::write_atomic(&key_path, key_pem.as_bytes(), 0o600, false)? {
                    fsutil::write_atomic(&cert_path, cert_pem.as_bytes(), 0o600, false)?;
                }
                true
            }
        };
        Ok((Self::load(&key_path, &cert_path)?, created))
    }

    fn load(key_path: &Path, cert_path: &Path) -> Result<Self, NetError> {
        fsutil::check_private(key_path)?;
        let key = PrivateKeyDer::from_pem_file(key_path)
            .map_err(|e| NetError::file(key_path, format!("cannot read private key: {e}")))?;
        let certs = CertificateDer::pem_file_iter(cert_path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| NetError::file(cert_path, format!("cannot read certificate: {e}")))?;
        let Some(leaf) = certs.first() else {
            return Err(NetError::file(cert_path, "no certificate in file"));
        };
        let fingerprint = Fingerprint::of(leaf);
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| NetError::file(cert_path, format!("TLS setup: {e}")))?
            // Clients authenticate with the token inside the TLS session instead.
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| {
                NetError::file(
                    key_path,
                    format!("unusable with {}: {e}", cert_path.display()),
                )
            })?;
        Ok(ServerIdentity {
            fingerprint,
            config: Arc::new(config),
        })
    }

    /// A rustls server configuration (TLS 1.3 only) for this identity.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }
}

/// A new key and self-signed certificate, as PEM (key, certificate).
fn generate() -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    Ok((key.serialize_pem(), self_signed(&key)?))
}

/// A new self-signed certificate for the existing key `key_pem`, as PEM.
fn certify(key_pem: &str) -> Result<String, rcgen::Error> {
    self_signed(&rcgen::KeyPair::from_pem(key_pem)?)
}

fn self_signed(key: &rcgen::KeyPair) -> Result<String, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, SERVER_NAME);
    Ok(params.self_signed(key)?.pem())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn create_then_reload_keeps_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/b");
        let (first, created) = ServerIdentity::load_or_create(&state).unwrap();
        assert!(created);
        let (second, created) = ServerIdentity::load_or_create(&state).unwrap();
        assert!(!created);
        assert_eq!(first.fingerprint, second.fingerprint);
        // The fingerprint is the hash of the certificate on disk.
        let pem = std::fs::read(state.join(CERT_FILE)).unwrap();
        let der = CertificateDer::from_pem_slice(&pem).unwrap();
        assert_eq!(Fingerprint::of(&der), first.fingerprint);
    }

    #[test]
    fn files_are_private_and_no_temporaries_remain() {
        let dir = tempfile::tempdir().unwrap();
        ServerIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(mode(&dir.path().join(KEY_FILE)), 0o600);
        assert_eq!(mode(&dir.path().join(CERT_FILE)), 0o600);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [CERT_FILE, KEY_FILE]);
    }

    #[test]
    fn new_state_dir_is_0700() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        ServerIdentity::load_or_create(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
    }

    #[test]
    fn different_dirs_give_different_identities() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let (a, _) = ServerIdentity::load_or_create(a.path()).unwrap();
        let (b, _) = ServerIdentity::load_or_create(b.path()).unwrap();
        assert_ne!(a.fingerprint, b.fingerprint);
    }

    /// A missing certificate is made again for the existing key; the key file is never
    /// rewritten.
    #[test]
    fn key_without_cert_keeps_the_key() {
        let dir = tempfile::tempdir().unwrap();
        ServerIdentity::load_or_create(dir.path()).unwrap();
        let key_path = dir.path().join(KEY_FILE);
        let key_before = std::fs::read(&key_path).unwrap();
        std::fs::remove_file(dir.path().join(CERT_FILE)).unwrap();
        let (_, created) = ServerIdentity::load_or_create(dir.path()).unwrap();
        assert!(created, "a new certificate is a new identity for clients");
        assert_eq!(std::fs::read(&key_path).unwrap(), key_before);
        // The new certificate carries the old key's public half.
        let key = rcgen::KeyPair::from_pem(&String::from_utf8(key_before).unwrap()).unwrap();
        let cert_pem = std::fs::read(dir.path().join(CERT_FILE)).unwrap();
        let der = CertificateDer::from_pem_slice(&cert_pem).unwrap();
        let spki = key.public_key_raw();
        assert!(
            der.windows(spki.len()).any(|w| w == spki),
            "cert is for another key"
        );
    }

    #[test]
    fn key_readable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        ServerIdentity::load_or_create(dir.path()).unwrap();
        let key_path = dir.path().join(KEY_FILE);
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = ServerIdentity::load_or_create(dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("chmod 600 {}", key_path.display())),
            "{err}"
        );
        // Also when the certificate has to be made again: nothing is written.
        std::fs::remove_file(dir.path().join(CERT_FILE)).unwrap();
        assert!(ServerIdentity::load_or_create(dir.path()).is_err());
        assert!(!dir.path().join(CERT_FILE).exists());
    }

    #[test]
    fn cert_without_key_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        ServerIdentity::load_or_create(dir.path()).unwrap();
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        let err = ServerIdentity::load_or_create(dir.path()).unwrap_err();
        assert!(matches!(&err, NetError::File { path, .. } if path.ends_with(KEY_FILE)));
    }

    #[test]
    fn mismatched_key_is_reported() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        ServerIdentity::load_or_create(a.path()).unwrap();
        ServerIdentity::load_or_create(b.path()).unwrap();
        std::fs::copy(b.path().join(KEY_FILE), a.path().join(KEY_FILE)).unwrap();
        let err = ServerIdentity::load_or_create(a.path()).unwrap_err();
        assert!(matches!(err, NetError::File { .. }), "{err}");
    }
}
