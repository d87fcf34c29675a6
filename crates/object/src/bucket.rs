//! One bucket of an object store (S3, GCS, or an Azure container): listing, ranged
//! reads, single and multipart writes.
//!
//! The protocols (signing, retries with backoff on throttling and server errors,
//! pagination, checksum headers) are `object_store`'s; this wraps them in the
//! operations the engine needs and turns their errors into [`ObjectError`]s that name
//! the object. The providers differ only in how a bucket is opened (see `cloud.rs` for
//! GCS and Azure) and in one S3 request made here (a multipart upload with metadata).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore,
    ObjectStoreExt, PutOptions, PutPayload, RetryConfig,
};

use crate::config::S3Config;
use crate::direct::{Answer, Direct, Signer};
use crate::error::ObjectError;
use crate::url::Scheme;

/// Metadata key for the source file's modification time (`SECONDS.NANOS`).
pub const MTIME_META: &str = "hetch-mtime";
/// Metadata key for the object's whole-file BLAKE3 digest (hex), where it is known
/// before the object is written (single-request uploads).
pub const BLAKE3_META: &str = "hetch-blake3";

/// The upload id of an Azure blob's blocks (Azure has none: blocks wait, uncommitted,
/// under the blob's name).
pub const AZURE_UPLOAD: &str = "uncommitted-blocks";

/// An object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Last-modified time (seconds, nanoseconds).
    pub modified: (i64, u32),
    /// Entity tag: reads check it, so that an object replaced mid-read is noticed.
    pub etag: Option<String>,
}

/// An object with its metadata.
#[derive(Debug, Clone)]
pub struct ObjectHead {
    /// What a listing says.
    pub info: ObjectInfo,
    /// The source file's modification time, if hetch wrote the object.
    pub source_mtime: Option<(i64, u32)>,
    /// The whole-object BLAKE3 digest, if hetch wrote the object in one request.
    pub blake3: Option<[u8; 32]>,
}

/// What the error of a call on a multipart upload that is gone says (see
/// [`ObjectError::is_upload_gone`]).
pub(crate) const UPLOAD_GONE: &str = "no longer exists at the store";

/// Metadata stored with an object.
#[derive(Debug, Clone, Default)]
pub struct PutMeta {
    /// The source file's modification time.
    pub mtime: Option<(i64, u32)>,
    /// The whole-object BLAKE3 digest.
    pub blake3: Option<[u8; 32]>,
}

/// A bucket to read and write.
#[derive(Clone)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    /// The same store, for multipart uploads that a journal can resume.
    parts: Arc<dyn MultipartStore>,
    scheme: Scheme,
    name: String,
    endpoint: String,
    /// S3 and Azure: the requests made here rather than through object_store (see
    /// `direct.rs`).
    pub(crate) direct: Option<Direct>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({} at {})", self.url(""), self.endpoint)
    }
}

/// Requests are retried with exponential backoff on throttling (429, 503 SlowDown),
/// server errors and timeouts, for up to this long.
const RETRY_TIMEOUT: Duration = Duration::from_secs(180);

impl Bucket {
    /// A client for `bucket` (nothing is sent until the first request).
    pub fn open(cfg: &S3Config, bucket: &str) -> Result<Bucket, ObjectError> {
        let mut client = client_options(cfg.ca_bundle.as_deref())?;
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(&cfg.region)
            // The body is covered by the x-amz-checksum-sha256 header, which is signed;
            // signing the payload's hash as well makes the store hash every body twice
            // (MinIO: 4.6 s instead of 3.8 s of CPU per GiB uploaded).
            .with_checksum_algorithm(Checksum::SHA256)
            .with_unsigned_payload(true)
            .with_retry(retry_config());
        match (&cfg.access_key, &cfg.secret_key) {
            (Some(a), Some(s)) => {
                b = b.with_access_key_id(a).with_secret_access_key(s);
                if let Some(t) = &cfg.session_token {
                    b = b.with_token(t);
                }
            }
            _ => b = b.with_skip_signature(true),
        }
        if let Some(e) = &cfg.endpoint {
            // On-premises stores (MinIO, Ceph) are addressed path-style.
            b = b.with_endpoint(e).with_virtual_hosted_style_request(false);
            client = client.with_allow_http(e.starts_with("http://"));
        }
        let store = b
            .with_client_options(client)
            .build()
            .map_err(|e| ObjectError::Config(format!("s3://{bucket}: {e}")))?;
        let mut http = reqwest::Client::builder().timeout(Duration::from_secs(60));
        if let Some(ca) = &cfg.ca_bundle {
            let pem = std::fs::read(ca)
                .map_err(|e| ObjectError::Config(format!("{}: {e}", ca.display())))?;
            for c in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| ObjectError::Config(format!("{}: {e}", ca.display())))?
            {
                http = http.add_root_certificate(c);
            }
        }
        let http = http
            .build()
            .map_err(|e| ObjectError::Config(format!("s3://{bucket}: {e}")))?;
        let endpoint = cfg.endpoint_name();
        let store = Arc::new(store);
        let direct = Direct {
            signer: Signer::S3 {
                store: store.clone(),
                region: cfg.region.clone(),
                signed: cfg.access_key.is_some(),
            },
            base_url: format!("{endpoint}/{bucket}"),
            http,
        };
        let mut b = Bucket::of(Scheme::S3, bucket, endpoint, store);
        b.direct = Some(direct);
        Ok(b)
    }

    /// Bucket `name` of `store` (of kind `scheme`, reached at `endpoint`).
    pub(crate) fn of<S: ObjectStore + MultipartStore>(
        scheme: Scheme,
        name: &str,
        endpoint: String,
        store: Arc<S>,
    ) -> Bucket {
        Bucket {
            store: store.clone(),
            parts: store,
            scheme,
            name: name.to_string(),
            endpoint,
            direct: None,
        }
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The endpoint, for messages and for keying resume state.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `SCHEME://BUCKET/KEY`, for messages.
    pub fn url(&self, key: &str) -> String {
        format!("{}://{}/{key}", self.scheme.as_str(), self.name)
    }

    fn err(&self, key: &str, e: object_store::Error) -> ObjectError {
        let bucket = self.url("");
        ObjectError::from_store(
            e,
            bucket.trim_end_matches('/'),
            &self.url(key),
            &self.endpoint,
        )
    }

    /// An error about a multipart upload: "not found" means the upload is gone.
    fn upload_err(&self, key: &str, upload: &str, e: object_store::Error) -> ObjectError {
        match self.err(key, e) {
            ObjectError::NotFound { url } => ObjectError::Other {
                url,
                what: format!(
                    "multipart upload {upload} {UPLOAD_GONE} (aborted or expired); run the copy again to start over"
                ),
            },
            other => other,
        }
    }

    fn path(&self, key: &str) -> Result<Path, ObjectError> {
        Path::parse(key).map_err(|e| ObjectError::Other {
            url: self.url(key),
            what: format!("not a usable object key: {e}"),
        })
    }

    /// Checks that the bucket exists and the credentials may list it (one request), so
    /// that bad credentials or a missing bucket stop a transfer with one clear error.
    pub async fn probe(&self, prefix: &str) -> Result<(), ObjectError> {
        let mut s = self.list(prefix);
        match s.next().await {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Whether `key` names an object, or a prefix with objects under it (`key/...`).
    pub async fn exists(&self, key: &str) -> Result<bool, ObjectError> {
        let trimmed = key.trim_end_matches('/');
        if !trimmed.is_empty() && !key.ends_with('/') && self.head(trimmed).await?.is_some() {
            return Ok(true);
        }
        match self.list(trimmed).next().await {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(e),
            None => Ok(false),
        }
    }

    /// Lists the objects under `prefix` (a "directory": `prefix/...`; empty for the
    /// whole bucket), in key order, page by page as the stream is read.
    pub fn list(&self, prefix: &str) -> BoxStream<'_, Result<ObjectInfo, ObjectError>> {
        let prefix = prefix.trim_end_matches('/');
        let p = match (prefix.is_empty(), self.path(prefix)) {
            (true, _) => None,
            (false, Ok(p)) => Some(p),
            (false, Err(e)) => return futures_util::stream::once(async { Err(e) }).boxed(),
        };
        let url_prefix = prefix.to_string();
        self.store
            .list(p.as_ref())
            .map(move |r| match r {
                Ok(m) => Ok(ObjectInfo {
                    key: m.location.to_string(),
                    size: m.size,
                    modified: whole_seconds(&m.last_modified),
                    etag: m.e_tag,
                }),
                Err(e) => Err(self.err(&url_prefix, e)),
            })
            .boxed()
    }

    /// One level of the "directory" `prefix` (`prefix/...`; empty for the bucket's top):
    /// the objects directly in it, and the names of the prefixes below it (each
    /// listed once, however many objects they hold).
    pub async fn list_dir(
        &self,
        prefix: &str,
    ) -> Result<(Vec<ObjectInfo>, Vec<String>), ObjectError> {
        let prefix = prefix.trim_end_matches('/');
        let p = match prefix.is_empty() {
            true => None,
            false => Some(self.path(prefix)?),
        };
        let r = self
            .store
            .list_with_delimiter(p.as_ref())
            .await
            .map_err(|e| self.err(prefix, e))?;
        let objects = r
            .objects
            .into_iter()
            .map(|m| ObjectInfo {
                key: m.location.to_string(),
                size: m.size,
                modified: whole_seconds(&m.last_modified),
                etag: m.e_tag,
            })
            .collect();
        let dirs = r
            .common_prefixes
            .into_iter()
            .filter_map(|d| d.filename().map(str::to_string))
            .collect();
        Ok((objects, dirs))
    }

    /// The object at `key` with its metadata; `None` when there is none.
    pub async fn head(&self, key: &str) -> Result<Option<ObjectHead>, ObjectError> {
        let opts = GetOptions {
            head: true,
            ..Default::default()
        };
        let r = match self.store.get_opts(&self.path(key)?, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => {
                return match self.err(key, e) {
                    ObjectError::NotFound { .. } => Ok(None),
                    other => Err(other),
                }
            }
        };
        let mut source_mtime = None;
        let mut blake3 = None;
        for (k, v) in r.attributes.iter() {
            if let Attribute::Metadata(name) = k {
                match meta_name(self.scheme, name.as_ref()).as_ref() {
                    MTIME_META => source_mtime = parse_mtime(v.as_ref()),
                    BLAKE3_META => {
                        blake3 = hex::decode(v.as_ref()).ok().and_then(|d| d.try_into().ok())
                    }
                    _ => {}
                }
            }
        }
        let m = r.meta;
        Ok(Some(ObjectHead {
            info: ObjectInfo {
                key: key.to_string(),
                size: m.size,
                modified: whole_seconds(&m.last_modified),
                etag: m.e_tag,
            },
            source_mtime,
            blake3,
        }))
    }

    /// Reads `range` of `key`. With `etag`, the read fails with
    /// [`ObjectError::Changed`] if the object is no longer that version.
    pub async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
    ) -> Result<Bytes, ObjectError> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        let r = self.get_ranged(key, range, etag).await?;
        let data = r.bytes().await.map_err(|e| self.err(key, e))?;
        if data.len() as u64 != want {
            // The object is shorter than listed: it was replaced.
            return Err(ObjectError::Changed { url: self.url(key) });
        }
        Ok(data)
    }

    /// Reads `buf.len()` bytes of `key` from `offset` into `buf`, as
    /// [`Bucket::get_range`] does, the body going straight into `buf` as it arrives
    /// (no buffer of its own: one copy fewer per byte, and no fresh pages to fault
    /// in for every block).
    pub async fn get_range_into(
        &self,
        key: &str,
        offset: u64,
        etag: Option<&str>,
        buf: &mut [u8],
    ) -> Result<(), ObjectError> {
        self.get_run_into(key, offset, etag, &mut [buf]).await
    }

    /// Reads consecutive bytes of `key` from `offset` into `bufs`, filling each in
    /// turn, with one ranged GET (checked as [`Bucket::get_range`] checks it): the
    /// body is split into the buffers as it arrives.
    pub async fn get_run_into(
        &self,
        key: &str,
        offset: u64,
        etag: Option<&str>,
        bufs: &mut [&mut [u8]],
    ) -> Result<(), ObjectError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let range = offset..offset + total as u64;
        let mut body = self.get_ranged(key, range, etag).await?.into_stream();
        let mut bufs = bufs.iter_mut().filter(|b| !b.is_empty());
        let (mut into, mut at) = (bufs.next(), 0);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.err(key, e))?;
            let mut chunk = &chunk[..];
            while !chunk.is_empty() {
                // More than asked for: not the range (or not the version) listed.
                let Some(buf) = into.as_deref_mut() else {
                    return Err(ObjectError::Changed { url: self.url(key) });
                };
                let n = chunk.len().min(buf.len() - at);
                buf[at..at + n].copy_from_slice(&chunk[..n]);
                (chunk, at) = (&chunk[n..], at + n);
                if at == buf.len() {
                    (into, at) = (bufs.next(), 0);
                }
            }
        }
        if into.is_some() {
            // The object is shorter than listed: it was replaced.
            return Err(ObjectError::Changed { url: self.url(key) });
        }
        Ok(())
    }

    /// The ranged GET of `range` of `key` (not empty), checked to be version `etag`.
    async fn get_ranged(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
    ) -> Result<object_store::GetResult, ObjectError> {
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: etag.map(str::to_string),
            ..Default::default()
        };
        let r = self
            .store
            .get_opts(&self.path(key)?, opts)
            .await
            .map_err(|e| self.err(key, e))?;
        // A store that ignores If-Match (some emulators) still names the version it
        // sent.
        if let (Some(want), Some(got)) = (etag, r.meta.e_tag.as_deref()) {
            if want.trim_matches('"') != got.trim_matches('"') {
                return Err(ObjectError::Changed { url: self.url(key) });
            }
        }
        Ok(r)
    }

    /// Writes `data` as `key` in one request (the store checks its SHA-256).
    pub async fn put(&self, key: &str, data: Bytes, meta: &PutMeta) -> Result<(), ObjectError> {
        let opts = PutOptions {
            attributes: attributes(self.scheme, meta),
            ..Default::default()
        };
        self.store
            .put_opts(&self.path(key)?, PutPayload::from_bytes(data), opts)
            .await
            .map_err(|e| self.err(key, e))?;
        Ok(())
    }

    /// Starts a multipart upload of `key` whose object will carry `meta`; returns its
    /// upload id. (object_store's resumable multipart API takes no metadata, so on S3
    /// this one request is made here, signed with object_store's SigV4 signer; the parts
    /// and the completion go through object_store. On GCS and Azure an object written
    /// in parts carries no metadata: its mtime is the store's.)
    pub async fn create_multipart(&self, key: &str, meta: &PutMeta) -> Result<String, ObjectError> {
        let direct = self.direct.as_ref().filter(|_| self.scheme == Scheme::S3);
        let Some(direct) = direct else {
            let id = self.parts.create_multipart(&self.path(key)?).await;
            // Azure has no upload to create (blocks wait, uncommitted, under the blob's
            // name) and says so with an empty id, which the journal would take for no
            // upload at all: it gets a name, which Azure's calls ignore.
            return match id.map_err(|e| self.err(key, e))? {
                id if id.is_empty() => Ok(AZURE_UPLOAD.into()),
                id => Ok(id),
            };
        };
        let mut headers = vec![("x-amz-checksum-algorithm".to_string(), "SHA256".into())];
        for (k, v) in attributes(Scheme::S3, meta).iter() {
            if let Attribute::Metadata(name) = k {
                headers.push((format!("x-amz-meta-{name}"), v.to_string()));
            }
        }
        let url = direct.url(key, "uploads");
        let failed = |a: Option<Answer>, what: String| self.answer_err(key, a, what);
        let a = direct
            .send(http::Method::POST, &url, &headers, Bytes::new(), failed)
            .await?;
        xml_field(&a.body, "UploadId")
            .map(str::to_string)
            .ok_or_else(|| self.other(key, format!("no UploadId in: {}", a.body)))
    }

    /// The error a direct request's failure makes: the store's answer sorted as
    /// object_store's errors are, or `what` happened.
    pub(crate) fn answer_err(&self, key: &str, a: Option<Answer>, what: String) -> ObjectError {
        match a {
            Some(a) => ObjectError::from_status(
                a.status,
                &a.body,
                self.url("").trim_end_matches('/'),
                &self.url(key),
                &self.endpoint,
            ),
            None => self.other(key, format!("request failed: {what}")),
        }
    }

    /// Its kind of store.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub(crate) fn other(&self, key: &str, what: String) -> ObjectError {
        ObjectError::Other {
            url: self.url(key),
            what,
        }
    }

    /// Uploads part `index` (from 0) of an upload; returns what completing needs.
    pub async fn put_part(
        &self,
        key: &str,
        upload: &str,
        index: usize,
        data: Bytes,
    ) -> Result<String, ObjectError> {
        let id = upload.to_string();
        self.parts
            .put_part(&self.path(key)?, &id, index, PutPayload::from_bytes(data))
            .await
            .map(|p| p.content_id)
            .map_err(|e| self.upload_err(key, upload, e))
    }

    /// Completes an upload from its parts, in order.
    pub async fn complete_multipart(
        &self,
        key: &str,
        upload: &str,
        parts: Vec<String>,
    ) -> Result<(), ObjectError> {
        let id = upload.to_string();
        let parts = parts
            .into_iter()
            .map(|content_id| PartId { content_id })
            .collect();
        self.parts
            .complete_multipart(&self.path(key)?, &id, parts)
            .await
            .map_err(|e| self.upload_err(key, upload, e))?;
        Ok(())
    }

    /// Aborts an upload: the store drops its parts.
    pub async fn abort_multipart(&self, key: &str, upload: &str) -> Result<(), ObjectError> {
        let id = upload.to_string();
        match self.parts.abort_multipart(&self.path(key)?, &id).await {
            Ok(()) => Ok(()),
            // Already gone (completed or aborted before): nothing is left behind.
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Deletes `key` (no error if it does not exist).
    pub async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        match self.store.delete(&self.path(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key, e)),
        }
    }
}

/// How every provider's client connects: generous timeouts for big parts, and the
/// extra certificate authorities of `ca` (a PEM bundle) trusted.
pub(crate) fn client_options(ca: Option<&std::path::Path>) -> Result<ClientOptions, ObjectError> {
    let mut client = ClientOptions::new()
        .with_timeout(Duration::from_secs(300))
        .with_connect_timeout(Duration::from_secs(10));
    if let Some(ca) = ca {
        let bad = |e: &dyn std::fmt::Display| ObjectError::Config(format!("{}: {e}", ca.display()));
        let pem = std::fs::read(ca).map_err(|e| bad(&e))?;
        for c in object_store::Certificate::from_pem_bundle(&pem).map_err(|e| bad(&e))? {
            client = client.with_root_certificate(c);
        }
    }
    Ok(client)
}

/// How every provider's requests are retried.
pub(crate) fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            base: 2.0,
        },
        max_retries: 10,
        retry_timeout: RETRY_TIMEOUT,
    }
}

/// A last-modified time in whole seconds: listings give milliseconds but HEAD only
/// seconds, and an object's time must not depend on how it was found.
fn whole_seconds(t: &chrono::DateTime<chrono::Utc>) -> (i64, u32) {
    (t.timestamp(), 0)
}

/// A metadata name as `scheme`'s store takes it, and back: Azure's must be C#
/// identifiers, so its `-` is `_` there (the S3 and GCS names stay as earlier versions
/// wrote them).
fn meta_name(scheme: Scheme, name: &str) -> std::borrow::Cow<'_, str> {
    match scheme {
        Scheme::Azure if name.contains('_') => name.replace('_', "-").into(),
        Scheme::Azure if name.contains('-') => name.replace('-', "_").into(),
        _ => name.into(),
    }
}

fn attributes(scheme: Scheme, meta: &PutMeta) -> Attributes {
    let mut a = Attributes::new();
    if let Some((s, ns)) = meta.mtime {
        a.insert(
            Attribute::Metadata(meta_name(scheme, MTIME_META).into_owned().into()),
            format!("{s}.{ns:09}").into(),
        );
    }
    if let Some(d) = meta.blake3 {
        a.insert(
            Attribute::Metadata(meta_name(scheme, BLAKE3_META).into_owned().into()),
            hex::encode(d).into(),
        );
    }
    a
}

/// A key as it goes in a URL path: every byte but unreserved ones and `/`
/// percent-encoded (as object_store encodes paths, so both sign the same bytes).
pub(crate) fn encode_key(key: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const KEEP: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    key.split('/')
        .map(|seg| utf8_percent_encode(seg, KEEP).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// The text of `<name>...</name>` in an XML body.
fn xml_field<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = body.find(&open)? + open.len();
    let len = body[start..].find(&format!("</{name}>"))?;
    Some(&body[start..start + len])
}

fn parse_mtime(v: &str) -> Option<(i64, u32)> {
    let (s, ns) = v.split_once('.')?;
    Some((s.parse().ok()?, ns.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtimes_round_trip_through_metadata() {
        let a = attributes(
            Scheme::S3,
            &PutMeta {
                mtime: Some((1_700_000_000, 5)),
                blake3: None,
            },
        );
        let v = a.get(&Attribute::Metadata(MTIME_META.into())).unwrap();
        assert_eq!(v.as_ref(), "1700000000.000000005");
        assert_eq!(parse_mtime(v.as_ref()), Some((1_700_000_000, 5)));
        assert_eq!(parse_mtime("garbage"), None);
        // Azure takes identifiers only, and gives them back.
        let a = attributes(
            Scheme::Azure,
            &PutMeta {
                mtime: Some((1, 2)),
                blake3: None,
            },
        );
        let (k, _) = a.iter().next().unwrap();
        let Attribute::Metadata(name) = k else {
            panic!()
        };
        assert_eq!(name.as_ref(), "hetch_mtime");
        assert_eq!(meta_name(Scheme::Azure, name), MTIME_META);
    }

    #[test]
    fn keys_are_encoded_per_segment() {
        assert_eq!(encode_key("a b/ünï/x~y.z"), "a%20b/%C3%BCn%C3%AF/x~y.z");
        let body = "<InitiateMultipartUploadResult><UploadId>abc-1</UploadId></InitiateMultipartUploadResult>";
        assert_eq!(xml_field(body, "UploadId"), Some("abc-1"));
    }
}
