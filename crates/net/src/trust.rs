//! Client-side trust: pinned fingerprints, the known-hosts file, and the rustls
//! verifier that enforces them.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};

use crate::identity::{provider, SERVER_NAME};
use crate::{BoxStream, Fingerprint, NetError, SessionKey};

/// A known-hosts file: lines `host:port sha256:<hex>`, `#` comments.
///
/// Hosts are compared as written (no resolution, no case folding), so `srv:7000` and
/// `10.0.0.5:7000` are different entries. When a host has several lines, the first wins.
#[derive(Debug, Clone)]
pub struct KnownHosts {
    /// The file.
    pub path: PathBuf,
}

impl KnownHosts {
    /// The default file: `$HETCH_CONFIG_DIR/known_hosts`, else
    /// `$XDG_CONFIG_HOME/hetch/known_hosts`, else `$HOME/.config/hetch/known_hosts`.
    ///
    /// Empty variables count as unset (as the XDG specification says). Without any of
    /// them the path is relative, `.config/hetch/known_hosts`.
    pub fn default_path() -> PathBuf {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(dir) = var("HETCH_CONFIG_DIR") {
            return PathBuf::from(dir).join("known_hosts");
        }
        if let Some(dir) = var("XDG_CONFIG_HOME") {
            return PathBuf::from(dir).join("hetch/known_hosts");
        }
        let home = var("HOME").map(PathBuf::from).unwrap_or_default();
        home.join(".config/hetch/known_hosts")
    }

    /// The pinned fingerprint of `host` (as `host:port`), if any.
    ///
    /// A missing file means no host is known. Any malformed line is an error naming the
    /// file and line, even one for another host: a damaged file should be noticed.
    pub fn lookup(&self, host: &str) -> Result<Option<Fingerprint>, NetError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(NetError::file(&self.path, e)),
        };
        let mut found = None;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| {
                NetError::file(
                    &self.path,
                    format!("line {}: {why} (expected `host:port sha256:<hex>`)", i + 1),
                )
            };
            let mut fields = line.split_whitespace();
            let (Some(name), Some(fp), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(bad("not two fields".to_string()));
            };
            let fp: Fingerprint = fp.parse().map_err(|e| bad(format!("{e}")))?;
            if found.is_none() && name == host {
                found = Some(fp);
            }
        }
        Ok(found)
    }

    /// Records a fingerprint for `host` (creating the file and its directory).
    ///
    /// The line is appended; existing lines are left alone.
    pub fn record(&self, host: &str, fp: Fingerprint) -> Result<(), NetError> {
        if host.is_empty() || host.contains(char::is_whitespace) || host.starts_with('#') {
            return Err(NetError::file(
                &self.path,
                format!("cannot record host {host:?}: not a host:port"),
            ));
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| NetError::file(dir, format!("cannot create directory: {e}")))?;
        }
        let io = |e: std::io::Error| NetError::file(&self.path, format!("cannot write: {e}"));
        // A file edited by hand may lack its final newline; do not glue onto that line.
        let needs_newline = std::fs::read(&self.path)
            .map(|b| !b.is_empty() && !b.ends_with(b"\n"))
            .unwrap_or(false);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(io)?;
        let line = format!("{}{host} {fp}\n", if needs_newline { "\n" } else { "" });
        // One write call, so concurrent appenders do not interleave within a line.
        f.write_all(line.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)
    }
}

/// How a client decides to trust a server's certificate.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Exactly this fingerprint (`--fingerprint`).
    Pinned(Fingerprint),
    /// The fingerprint in this known-hosts file; on first use, accept and record it.
    KnownHosts(KnownHosts),
}

/// Client-side TLS: a connector that checks the server against a [`Trust`] policy.
///
/// One client serves any number of connections (control and data streams) to its
/// host. With [`Trust::KnownHosts`] and no recorded entry, the first connection whose
/// handshake succeeds fixes the fingerprint for this client; every later connection
/// through the same client must present that same certificate. The fingerprint is
/// written to the file only by [`TlsClient::record_learned`], which the caller calls
/// once the server has proven that it speaks hetch: a TLS server that is something else
/// (a web server on a mistyped port) leaves no entry behind.
#[derive(Debug)]
pub struct TlsClient {
    host: String,
    pub(crate) config: Arc<rustls::ClientConfig>,
    /// The fingerprint connections must present; `None` until first use in TOFU mode.
    /// Shared with the verifier so a learned pin applies to later handshakes.
    pin: Arc<Mutex<Option<Fingerprint>>>,
    /// Where a first-use fingerprint is recorded (None for [`Trust::Pinned`]).
    known_hosts: Option<KnownHosts>,
    /// A fingerprint learned on first use and not recorded yet.
    learned: Mutex<Option<Fingerprint>>,
}

impl TlsClient {
    /// Makes a client for `host` (`host:port`, as written in the known-hosts file).
    ///
    /// Reads the known-hosts file now (a malformed file is an error here).
    pub fn new(host: &str, trust: Trust) -> Result<Self, NetError> {
        let (pin, known_hosts) = match trust {
            Trust::Pinned(fp) => (Some(fp), None),
            Trust::KnownHosts(kh) => (kh.lookup(host)?, Some(kh)),
        };
        let pin = Arc::new(Mutex::new(pin));
        let provider = provider();
        let verifier = Arc::new(PinVerifier {
            pin: pin.clone(),
            algorithms: provider.signature_verification_algorithms,
        });
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| NetError::Tls {
                host: host.to_string(),
                reason: format!("TLS setup: {e}"),
            })?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(TlsClient {
            host: host.to_string(),
            config: Arc::new(config),
            pin,
            known_hosts,
            learned: Mutex::new(None),
        })
    }

    /// Records a fingerprint learned on first use in the known-hosts file, once the
    /// server has shown it speaks hetch. Returns it when it was recorded now (for a
    /// "trusting this key from now on" message), `None` when there was nothing to do.
    pub fn record_learned(&self) -> Result<Option<Fingerprint>, NetError> {
        let Some(fp) = lock(&self.learned).take() else {
            return Ok(None);
        };
        let Some(kh) = &self.known_hosts else {
            return Ok(None);
        };
        // Another process may have recorded the host meanwhile.
        match kh.lookup(&self.host)? {
            Some(expected) if expected != fp => Err(self.changed(expected, fp)),
            Some(_) => Ok(None),
            None => kh.record(&self.host, fp).map(|()| Some(fp)),
        }
    }

    /// The TLS configuration (TLS 1.3, this client's pin check) for other protocols
    /// to the same host (the service's HTTPS API), once the pin is known: pinned,
    /// recorded, or learned by a [`connect`](crate::connect) through this client.
    /// `None` before that, because until then the verifier accepts any certificate
    /// and only `connect` checks what a first handshake presented.
    pub fn rustls_config(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.pinned().map(|_| self.config.clone())
    }

    /// The `host:port` this client was made for.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The fingerprint the server must present: the pinned or recorded one, or the one
    /// learned by the first successful connection; `None` before first use. A caller
    /// can compare this before and after [`connect`](crate::connect) to tell the user
    /// that a new host was recorded.
    pub fn pinned(&self) -> Option<Fingerprint> {
        *lock(&self.pin)
    }

    /// Where the pin comes from, for [`NetError::HostKeyChanged`].
    fn pin_source(&self) -> String {
        match &self.known_hosts {
            Some(kh) => kh.path.display().to_string(),
            None => "--fingerprint".to_string(),
        }
    }

    fn changed(&self, expected: Fingerprint, actual: Fingerprint) -> NetError {
        NetError::HostKeyChanged {
            host: self.host.clone(),
            expected,
            actual,
            known_hosts: self.pin_source(),
        }
    }

    /// Runs the TLS handshake over `tcp` and enforces the trust policy.
    /// Also returns the connection's exported [`SessionKey`].
    pub(crate) async fn handshake(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> Result<(BoxStream, SessionKey), NetError> {
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let name = ServerName::try_from(SERVER_NAME).expect("static name is valid");
        let (buffered, _) = crate::conn::read_buffered(tcp, crate::conn::TLS_READ_BUFFER);
        let stream = connector
            .connect(name, buffered)
            .await
            .map_err(|e| self.handshake_error(e))?;
        let (_, conn) = stream.get_ref();
        let actual = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| Fingerprint::of(c))
            .ok_or_else(|| NetError::Tls {
                host: self.host.clone(),
                reason: "server sent no certificate".to_string(),
            })?;
        self.confirm(actual)?;
        let key = SessionKey::export(conn).map_err(|e| NetError::Tls {
            host: self.host.clone(),
            reason: format!("cannot export the session key: {e}"),
        })?;
        Ok((Box::new(stream), key))
    }

    /// Checks the certificate of a completed handshake against the pin, learning it on
    /// first use (it is recorded later, see [`TlsClient::record_learned`]). Done after
    /// the handshake (not in the verifier) so only a server that proved possession of
    /// the key is learned; the check is repeated for pinned hosts too because resumed
    /// sessions skip the verifier.
    fn confirm(&self, actual: Fingerprint) -> Result<(), NetError> {
        let mut pin = lock(&self.pin);
        if let Some(expected) = *pin {
            return if expected == actual {
                Ok(())
            } else {
                Err(self.changed(expected, actual))
            };
        }
        let Some(kh) = &self.known_hosts else {
            unreachable!("a --fingerprint client always has a pin")
        };
        // Another process may have recorded the host since this client was made.
        match kh.lookup(&self.host)? {
            Some(expected) if expected != actual => return Err(self.changed(expected, actual)),
            Some(_) => {}
            None => *lock(&self.learned) = Some(actual),
        }
        *pin = Some(actual);
        Ok(())
    }

    /// Turns a failed handshake into an error, recognising the verifier's pin mismatch.
    fn handshake_error(&self, e: std::io::Error) -> NetError {
        self.key_changed(&e).unwrap_or_else(|| NetError::Tls {
            host: self.host.clone(),
            reason: e.to_string(),
        })
    }

    /// The [`NetError::HostKeyChanged`] that error `e` (or any error it was caused
    /// by) stands for, when a handshake through this client's TLS configuration was
    /// refused because the server presented another key than the pinned one: what
    /// another protocol's client over [`TlsClient::rustls_config`] (the service's
    /// HTTPS API) reports, said as `connect` says it. `None` for any other error.
    pub fn key_changed(&self, e: &(dyn std::error::Error + 'static)) -> Option<NetError> {
        let mut cur = Some(e);
        while let Some(err) = cur {
            if let Some(m) = pin_mismatch(err) {
                return Some(self.changed(m.expected, m.actual));
            }
            cur = err.source();
        }
        None
    }
}

/// The verifier's rejection, if `e` is it: a rustls error, alone or inside I/O errors
/// (an I/O error's `source` skips the error it wraps, and HTTP clients wrap the TLS
/// stream's I/O error in one of their own).
fn pin_mismatch<'a>(mut e: &'a (dyn std::error::Error + 'static)) -> Option<&'a PinMismatch> {
    while let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        e = inner;
    }
    match e.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(other))) => {
            other.downcast_ref::<PinMismatch>()
        }
        _ => None,
    }
}

fn lock(pin: &Mutex<Option<Fingerprint>>) -> std::sync::MutexGuard<'_, Option<Fingerprint>> {
    // The guarded value is a plain Copy value that is always consistent, so a panic
    // elsewhere while holding the lock does not make it unusable.
    pin.lock().unwrap_or_else(|e| e.into_inner())
}

/// The verifier's rejection, carried through rustls inside `CertificateError::Other`
/// so that `connect` can report both fingerprints.
#[derive(Debug, thiserror::Error)]
#[error("certificate {actual} does not match pinned {expected}")]
struct PinMismatch {
    expected: Fingerprint,
    actual: Fingerprint,
}

/// Accepts exactly the pinned certificate (any certificate before first use),
/// ignoring names, issuers and dates: the certificate is self-signed and its
/// fingerprint is the whole identity. The handshake signature is still verified, which
/// proves the server holds the certificate's private key.
#[derive(Debug)]
struct PinVerifier {
    pin: Arc<Mutex<Option<Fingerprint>>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let actual = Fingerprint::of(end_entity);
        match *lock(&self.pin) {
            Some(expected) if expected != actual => Err(rustls::Error::InvalidCertificate(
                CertificateError::Other(OtherError(Arc::new(PinMismatch { expected, actual }))),
            )),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // The configuration only offers TLS 1.3; refuse rather than trust blindly
        // should this ever be reached.
        Err(rustls::Error::General(
            "TLS 1.2 is not accepted; hetch requires TLS 1.3".to_string(),
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(byte: u8) -> Fingerprint {
        Fingerprint([byte; 32])
    }

    /// A pin mismatch reported by another protocol's client (the service's HTTPS
    /// client wraps the TLS stream's I/O error in an I/O error of its own, under its
    /// own errors) is told apart from any other error, and said as `connect` says it.
    #[test]
    fn a_pin_mismatch_is_found_inside_other_errors() {
        #[derive(Debug, thiserror::Error)]
        #[error("request failed")]
        struct Outer(#[source] std::io::Error);
        let client = TlsClient::new("h:1", Trust::Pinned(fp(1))).unwrap();
        let tls = rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
            PinMismatch {
                expected: fp(1),
                actual: fp(2),
            },
        ))));
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let e = Outer(std::io::Error::other(io));
        let changed = client.key_changed(&e).expect("found").to_string();
        assert!(
            changed.contains("h:1") && changed.contains(&fp(2).to_string()),
            "{changed}"
        );
        let other = Outer(std::io::Error::other("connection refused"));
        assert!(client.key_changed(&other).is_none());
    }

    #[test]
    fn record_then_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("sub/dir/known_hosts"),
        };
        assert_eq!(kh.lookup("a:1").unwrap(), None);
        kh.record("a:1", fp(1)).unwrap();
        kh.record("b:2", fp(2)).unwrap();
        assert_eq!(kh.lookup("a:1").unwrap(), Some(fp(1)));
        assert_eq!(kh.lookup("b:2").unwrap(), Some(fp(2)));
        assert_eq!(kh.lookup("a:2").unwrap(), None);
        let text = std::fs::read_to_string(&kh.path).unwrap();
        assert_eq!(text, format!("a:1 {}\nb:2 {}\n", fp(1), fp(2)));
    }

    #[test]
    fn comments_blank_lines_and_missing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("known_hosts"),
        };
        std::fs::write(
            &kh.path,
            format!(
                "# hetch hosts\n\n   \n  # indented comment\n[::1]:7000 {}",
                fp(3)
            ),
        )
        .unwrap();
        assert_eq!(kh.lookup("[::1]:7000").unwrap(), Some(fp(3)));
        kh.record("c:3", fp(4)).unwrap();
        assert_eq!(kh.lookup("[::1]:7000").unwrap(), Some(fp(3)));
        assert_eq!(kh.lookup("c:3").unwrap(), Some(fp(4)));
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("known_hosts"),
        };
        std::fs::write(&kh.path, format!("# ok\na:1 {}\nb:2 sha256:zz\n", fp(1))).unwrap();
        let err = kh.lookup("a:1").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(&err, NetError::File { path, .. } if *path == kh.path));
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("known_hosts"), "{msg}");

        std::fs::write(&kh.path, "just-one-field\n").unwrap();
        let msg = kh.lookup("x:1").unwrap_err().to_string();
        assert!(msg.contains("line 1"), "{msg}");

        std::fs::write(&kh.path, format!("a:1 {} extra\n", fp(1))).unwrap();
        assert!(kh.lookup("a:1").is_err());
    }

    #[test]
    fn first_entry_wins() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("known_hosts"),
        };
        kh.record("a:1", fp(1)).unwrap();
        kh.record("a:1", fp(2)).unwrap();
        assert_eq!(kh.lookup("a:1").unwrap(), Some(fp(1)));
    }

    #[test]
    fn record_refuses_bad_host() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("known_hosts"),
        };
        assert!(kh.record("a b:1", fp(1)).is_err());
        assert!(kh.record("", fp(1)).is_err());
    }
}

#[cfg(test)]
mod default_path_tests {
    use super::*;

    // The only test in this crate that touches the environment, and the only code that
    // reads these variables is `default_path`, so it cannot race with other tests.
    #[test]
    fn default_path_precedence() {
        let saved: Vec<_> = ["HETCH_CONFIG_DIR", "XDG_CONFIG_HOME", "HOME"]
            .iter()
            .map(|k| (*k, std::env::var_os(k)))
            .collect();
        std::env::set_var("HETCH_CONFIG_DIR", "/h");
        std::env::set_var("XDG_CONFIG_HOME", "/x");
        std::env::set_var("HOME", "/home/u");
        assert_eq!(KnownHosts::default_path(), PathBuf::from("/h/known_hosts"));
        std::env::set_var("HETCH_CONFIG_DIR", "");
        assert_eq!(
            KnownHosts::default_path(),
            PathBuf::from("/x/hetch/known_hosts")
        );
        std::env::remove_var("XDG_CONFIG_HOME");
        assert_eq!(
            KnownHosts::default_path(),
            PathBuf::from("/home/u/.config/hetch/known_hosts")
        );
        for (k, v) in saved {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
    }
}
