//! A test OIDC issuer on 127.0.0.1: its keys, a tiny HTTP(S) server for its discovery
//! document and JWKS that counts the requests it gets, its login endpoints (see
//! [`crate::oidc_login`]; enabled by [`TestIssuer::enable_login`]), token signing, and
//! a clock the test moves by hand. `hetch-oidc`'s tests check the verifier against it; the
//! service's and the binary's tests log users in with it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// The audience the tests configure and sign for.
pub const AUDIENCE: &str = "hetch-service";

/// A signing key of the test issuer, with its public JWK.
pub struct TestKey {
    /// Its key id.
    pub kid: String,
    /// The algorithm it signs with by default.
    pub alg: Algorithm,
    /// The private key.
    pub encoding: EncodingKey,
    /// The public key as the issuer publishes it.
    pub jwk: Value,
    /// The public key as PEM (SPKI) and DER, for the HMAC-confusion forgery.
    pub public_pem: String,
    /// The same, DER.
    pub public_der: Vec<u8>,
}

/// An RSA key; generated once per index per test binary, since 2048-bit generation
/// is the slow part of these tests.
pub fn rsa_key(index: usize, kid: &str) -> TestKey {
    static KEYS: OnceLock<Mutex<Vec<rsa::RsaPrivateKey>>> = OnceLock::new();
    let private = {
        let mut keys = KEYS.get_or_init(Default::default).lock().unwrap();
        while keys.len() <= index {
            keys.push(rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap());
        }
        keys[index].clone()
    };
    let public = private.to_public_key();
    TestKey {
        kid: kid.into(),
        alg: Algorithm::RS256,
        encoding: EncodingKey::from_rsa_der(private.to_pkcs1_der().unwrap().as_bytes()),
        jwk: json!({
            "kty": "RSA", "kid": kid, "use": "sig",
            "n": b64(&public.n().to_bytes_be()),
            "e": b64(&public.e().to_bytes_be()),
        }),
        public_pem: public.to_public_key_pem(LineEnding::LF).unwrap(),
        public_der: public.to_public_key_der().unwrap().as_bytes().to_vec(),
    }
}

/// A P-256 key.
pub fn ec_key(kid: &str) -> TestKey {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    // Uncompressed point: 0x04, x, y.
    let point = pair.public_key_raw();
    assert_eq!(point.len(), 65);
    TestKey {
        kid: kid.into(),
        alg: Algorithm::ES256,
        encoding: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
        jwk: json!({
            "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256",
            "x": b64(&point[1..33]), "y": b64(&point[33..]),
        }),
        public_pem: pair.public_key_pem(),
        public_der: pair.public_key_raw().to_vec(),
    }
}

/// An Ed25519 key.
pub fn ed_key(kid: &str) -> TestKey {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    TestKey {
        kid: kid.into(),
        alg: Algorithm::EdDSA,
        encoding: EncodingKey::from_ed_pem(pair.serialize_pem().as_bytes()).unwrap(),
        jwk: json!({"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64(pair.public_key_raw())}),
        public_pem: pair.public_key_pem(),
        public_der: pair.public_key_raw().to_vec(),
    }
}

/// Base64url without padding, as JWKs spell numbers and points.
pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Unix time now, in seconds.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims that the verifier accepts from `issuer`, for subject "alice", expiring in an
/// hour; tests change or remove fields.
pub fn claims(issuer: &str) -> Value {
    json!({
        "iss": issuer, "aud": AUDIENCE, "sub": "alice",
        "iat": now(), "exp": now() + 3600,
    })
}

/// `claims` signed by `key` with its algorithm and kid.
pub fn sign(key: &TestKey, claims: &Value) -> String {
    sign_as(key, key.alg, &key.kid, claims)
}

/// `claims` signed by `key` with the given header algorithm and kid.
pub fn sign_as(key: &TestKey, alg: Algorithm, kid: &str, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// What the server answers, and what it was asked.
#[derive(Default)]
pub struct ServerState {
    /// The discovery document served.
    pub discovery: Vec<u8>,
    /// The JWKS served.
    pub jwks: Vec<u8>,
    /// How often the discovery document was asked for.
    pub discovery_hits: usize,
    /// How often the JWKS was asked for.
    pub jwks_hits: usize,
    /// The login endpoints' client and codes.
    pub login: crate::oidc_login::LoginState,
    /// The issuer identifier (the ID tokens' `iss`).
    pub issuer: String,
}

/// The test issuer's HTTP(S) server.
pub struct TestIssuer {
    /// The issuer identifier: its base URL.
    pub url: String,
    /// What it serves and counts.
    pub state: Arc<Mutex<ServerState>>,
}

impl TestIssuer {
    /// A plain-HTTP issuer on 127.0.0.1 publishing `keys`.
    pub async fn start(keys: &[&TestKey]) -> Self {
        Self::start_with(keys, None).await
    }

    /// An issuer publishing `keys`, over TLS when `tls` is given.
    pub async fn start_with(keys: &[&TestKey], tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let state = Arc::new(Mutex::new(ServerState {
            issuer: url.clone(),
            ..ServerState::default()
        }));
        let issuer = Self { url, state };
        issuer.set_discovery(json!({
            "issuer": issuer.url,
            "jwks_uri": format!("{}/jwks", issuer.url),
            "authorization_endpoint": format!("{}/authorize", issuer.url),
            "token_endpoint": format!("{}/token", issuer.url),
        }));
        issuer.set_keys(keys);
        let state = issuer.state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(stream, state).await,
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, state).await
                            }
                        }
                    }
                });
            }
        });
        issuer
    }

    /// Publishes `keys` (replacing the JWKS).
    pub fn set_keys(&self, keys: &[&TestKey]) {
        let jwks = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
        self.set_jwks_body(serde_json::to_vec(&jwks).unwrap());
    }

    /// Serves `body` as the JWKS, whatever it holds.
    pub fn set_jwks_body(&self, body: Vec<u8>) {
        self.state.lock().unwrap().jwks = body;
    }

    /// Serves `doc` as the discovery document.
    pub fn set_discovery(&self, doc: Value) {
        self.state.lock().unwrap().discovery = serde_json::to_vec(&doc).unwrap();
    }

    /// Registers the one client that may log users in: `client_id` with
    /// `redirect_uri` (and `secret`, if confidential); ID tokens are signed by `key`.
    pub fn enable_login(
        &self,
        key: &TestKey,
        client_id: &str,
        redirect_uri: &str,
        secret: Option<&str>,
    ) {
        self.state.lock().unwrap().login.setup = Some(crate::oidc_login::LoginSetup {
            key: key.encoding.clone(),
            alg: key.alg,
            kid: key.kid.clone(),
            client_id: client_id.into(),
            redirect_uri: redirect_uri.into(),
            secret: secret.map(Into::into),
            extra_claims: json!({}),
            override_claims: json!({}),
        });
    }

    /// Changes the registered client's setup (after [`TestIssuer::enable_login`]).
    pub fn login_setup(&self, change: impl FnOnce(&mut crate::oidc_login::LoginSetup)) {
        let mut state = self.state.lock().unwrap();
        change(state.login.setup.as_mut().expect("enable_login first"));
    }

    /// Reads the login endpoints' state (codes given out, refusals).
    pub fn login_state<T>(&self, read: impl FnOnce(&crate::oidc_login::LoginState) -> T) -> T {
        read(&self.state.lock().unwrap().login)
    }

    /// How often the JWKS was fetched.
    pub fn jwks_hits(&self) -> usize {
        self.state.lock().unwrap().jwks_hits
    }

    /// How often the discovery document was fetched.
    pub fn discovery_hits(&self) -> usize {
        self.state.lock().unwrap().discovery_hits
    }
}

/// Answers one request: GET of the discovery document or the JWKS, the login
/// endpoints, 404 otherwise.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, state: Arc<Mutex<ServerState>>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
        if request.len() > 64 * 1024 {
            return;
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if length > 64 * 1024 {
        return;
    }
    while request.len() < head_end + length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let body = &request[head_end..head_end + length];
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let path = words.next().unwrap_or("").to_owned();
    let answer = {
        let mut state = state.lock().unwrap();
        match path.as_str() {
            "/.well-known/openid-configuration" => {
                state.discovery_hits += 1;
                Some(json_answer(state.discovery.clone()))
            }
            "/jwks" => {
                state.jwks_hits += 1;
                Some(json_answer(state.jwks.clone()))
            }
            _ => {
                let issuer = state.issuer.clone();
                let auth = header("authorization");
                crate::oidc_login::handle(
                    &mut state.login,
                    &issuer,
                    &method,
                    &path,
                    auth.as_deref(),
                    body,
                )
            }
        }
    };
    let answer = answer.unwrap_or(crate::oidc_login::Answer {
        status: "404 Not Found",
        content_type: "text/plain",
        body: b"not found".to_vec(),
        location: None,
    });
    let location = answer
        .location
        .map_or(String::new(), |l| format!("Location: {l}\r\n"));
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&answer.body).await;
    let _ = stream.shutdown().await;
}

fn json_answer(body: Vec<u8>) -> crate::oidc_login::Answer {
    crate::oidc_login::Answer {
        status: "200 OK",
        content_type: "application/json",
        body,
        location: None,
    }
}

/// A clock that stands still until the test moves it.
pub struct ManualClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    /// A clock at the current instant.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl hetch_oidc::Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + *self.offset.lock().unwrap()
    }
}

/// A private CA and a TLS acceptor for 127.0.0.1 with a certificate it signed.
pub fn private_ca() -> (String, tokio_rustls::TlsAcceptor) {
    private_ca_for(&[])
}

/// [`private_ca`], its certificate also valid for the host names `names`.
pub fn private_ca_for(names: &[&str]) -> (String, tokio_rustls::TlsAcceptor) {
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hetch-oidc test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let ca = rcgen::Issuer::from_params(&ca_params, &ca_key);

    let server_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let sans = std::iter::once("127.0.0.1").chain(names.iter().copied());
    let server_params =
        rcgen::CertificateParams::new(sans.map(String::from).collect::<Vec<_>>()).unwrap();
    let server_cert = server_params.signed_by(&server_key, &ca).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(server_key.serialize_der()).unwrap(),
        )
        .unwrap();
    (
        ca_cert.pem(),
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    )
}
