//! A client of the transfer service's HTTPS API, for `hetch job` and `hetch worker`:
//! the token as for `cp`, and the service's key pinned on first use as for `cp`. Each
//! route is a method taking and returning the API's types; what goes wrong is a
//! [`ClientError`] that says whether asking again may help.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use hetch_net::{KnownHosts, NetError, TlsClient, Trust};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::object_ranges::{check_upload, MAX_RANGES_PAGE, MAX_RANGE_DIGESTS, MAX_RANGE_PARTS};
use crate::{
    ClaimRequest, ClaimedUnit, ErrorBody, FileRow, FilesQuery, FinishAll, FinishAllReply,
    FinishReply, FinishRequest, HeartbeatReply, HeartbeatRequest, JobSpec, JobView, ListQuery,
    RangesReply, RangesRequest, ScheduleSpec, ScheduleView, UploadReply, UploadRequest, MAX_FILES,
};

/// Why a call to the service did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service refused the caller (401 or 403): asking again will not help.
    #[error("{0}")]
    NotAllowed(String),
    /// The service could not be reached, or its answer was cut off: asking again
    /// later may succeed.
    #[error("{0}")]
    Unreachable(String),
    /// The service answered with an error of its own (any other 4xx or 5xx): its
    /// one line, after the service's name.
    #[error("{service}: {message}")]
    Service {
        /// The service, `HOST:PORT`.
        service: String,
        /// The HTTP status.
        status: u16,
        /// The service's one line.
        message: String,
        /// The field of a submitted job the error is about, when it names one.
        field: Option<String>,
    },
    /// What answered is not a hetch service, or its answer is not what the API says
    /// (a field missing, a number out of bounds, too many rows).
    #[error("{0}")]
    Invalid(String),
    /// A job id or state that cannot be sent as asked (checked before any call).
    #[error("{0}")]
    BadArgument(String),
    /// Setting up the connection: the TLS identity, the pinned key, the known-hosts
    /// file, or the first handshake that learns the key.
    #[error(transparent)]
    Net(#[from] NetError),
}

impl ClientError {
    /// Whether asking again later may succeed: the service could not be reached, or
    /// held the caller to its share for now (429: a connection cap or the request
    /// rate; 503: every connection busy).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable(_)
                | ClientError::Service {
                    status: 429 | 503,
                    ..
                }
        )
    }

    /// Whether the service refused the caller: its token (or its kind of token).
    pub fn is_not_allowed(&self) -> bool {
        matches!(self, ClientError::NotAllowed(_))
    }
}

/// What [`Client::wait`] saw at one look.
#[derive(Debug)]
pub enum Look<'a> {
    /// The job, as it is now.
    Job(&'a JobView),
    /// Why the service did not answer (it is looked at again).
    Lost(&'a ClientError),
}

/// The longest pause between two looks of [`Client::wait`] at a service it lost.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// What a call answers, or why not.
pub type Result<T> = std::result::Result<T, ClientError>;

/// The service's API, as this client reaches it.
pub struct Client {
    http: reqwest::Client,
    tls: TlsClient,
    base: String,
    token: String,
    host: String,
}

impl Client {
    /// A client of the service at `service` (as [`service_address`] takes it), its
    /// key pinned by `fingerprint` or the known-hosts file, presenting `token`.
    pub async fn new(
        service: &str,
        fingerprint: Option<hetch_net::Fingerprint>,
        known_hosts: Option<PathBuf>,
        token: Vec<u8>,
    ) -> Result<Client> {
        let service = &service_address(service).map_err(ClientError::BadArgument)?;
        let token = String::from_utf8(token)
            .map_err(|_| ClientError::BadArgument("the token is not text".into()))?;
        let trust = match fingerprint {
            Some(fp) => Trust::Pinned(fp),
            None => Trust::KnownHosts(KnownHosts {
                path: known_hosts.unwrap_or_else(KnownHosts::default_path),
            }),
        };
        let tls = TlsClient::new(service, trust)?;
        if tls.pinned().is_none() {
            // First use: one handshake through hetch's own connect learns the key
            // (checking the server holds it); from then on the HTTPS client's
            // connections must present that same key.
            hetch_net::connect(service, &Default::default(), Some(&tls)).await?;
        }
        let config = tls
            .rustls_config()
            .expect("the key is known after a handshake");
        let http = reqwest::Client::builder()
            .use_preconfigured_tls((*config).clone())
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(120))
            // Well before the service closes an idle connection (its --idle-timeout,
            // 60 s by default), so that a call never goes out on one it is closing.
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| ClientError::Invalid(format!("HTTPS client: {}", root_cause(&e))))?;
        Ok(Client {
            http,
            tls,
            base: format!("https://{service}"),
            token,
            host: service.to_string(),
        })
    }

    /// Submits a job (`POST /api/jobs`): the job as the service took it (planning).
    pub async fn submit(&self, spec: &JobSpec) -> Result<JobView> {
        self.call(true, "/api/jobs", Some(spec)).await
    }

    /// Jobs, newest first (`GET /api/jobs`).
    pub async fn list(&self, q: &ListQuery) -> Result<Vec<JobView>> {
        let mut path = String::from("/api/jobs?");
        if let Some(limit) = q.limit {
            path.push_str(&format!("limit={limit}&"));
        }
        if let Some(state) = &q.state {
            path.push_str(&format!("state={}", path_segment(state)?));
        }
        self.call(false, path.trim_end_matches(['&', '?']), None::<&()>)
            .await
    }

    /// Job `id` (`GET /api/jobs/{id}`).
    pub async fn job(&self, id: &str) -> Result<JobView> {
        let path = format!("/api/jobs/{}", path_segment(id)?);
        self.call(false, &path, None::<&()>).await
    }

    /// Cancels job `id` (`POST /api/jobs/{id}/cancel`): the job, cancelled.
    pub async fn cancel(&self, id: &str) -> Result<JobView> {
        let path = format!("/api/jobs/{}/cancel", path_segment(id)?);
        self.call(true, &path, None::<&()>).await
    }

    /// Looks at job `id` every `every` until it has ended (done, failed or
    /// cancelled): `seen` is given each look, the last one too, which is returned.
    /// While the service cannot be reached (it is restarting), `seen` is told why,
    /// and it is looked at again, less and less often, for up to `retry_for` in a
    /// row; then that error is returned.
    pub async fn wait(
        &self,
        id: &str,
        every: Duration,
        retry_for: Duration,
        mut seen: impl FnMut(Look<'_>),
    ) -> Result<JobView> {
        let mut lost_since = None;
        let mut pause = every;
        loop {
            match self.job(id).await {
                Ok(j) => {
                    (lost_since, pause) = (None, every);
                    seen(Look::Job(&j));
                    if j.is_finished() {
                        return Ok(j);
                    }
                }
                Err(e) if e.is_transient() => {
                    let since = *lost_since.get_or_insert_with(tokio::time::Instant::now);
                    let left = retry_for.saturating_sub(since.elapsed());
                    if left.is_zero() {
                        return Err(e);
                    }
                    seen(Look::Lost(&e));
                    pause = (pause * 2).clamp(every, MAX_PAUSE).min(left);
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Runs job `id`'s unfinished units again (`POST /api/jobs/{id}/retry`).
    pub async fn retry(&self, id: &str) -> Result<JobView> {
        let path = format!("/api/jobs/{}/retry", path_segment(id)?);
        self.call(true, &path, None::<&()>).await
    }

    /// Rows `q.from..q.to` of job `job`'s listing (`GET /api/jobs/{id}/files`): at
    /// most [`MAX_FILES`] are asked for, and more than were asked for are refused.
    pub async fn files(&self, job: &str, q: FilesQuery) -> Result<Vec<FileRow>> {
        let count =
            q.to.checked_sub(q.from)
                .filter(|&n| n <= MAX_FILES)
                .ok_or_else(|| {
                    ClientError::BadArgument(format!("listing rows {}..{}", q.from, q.to))
                })?;
        let path = format!(
            "/api/jobs/{}/files?from={}&to={}",
            path_segment(job)?,
            q.from,
            q.to
        );
        let rows: Vec<FileRow> = self.call(false, &path, None::<&()>).await?;
        if rows.len() as u64 > count {
            return Err(self.invalid(format!("{} listing rows for {count} asked for", rows.len())));
        }
        Ok(rows)
    }

    /// A worker takes up to `req.max` units under a lease (`POST /api/work/claim`).
    pub async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedUnit>> {
        let units: Vec<ClaimedUnit> = self.call(true, "/api/work/claim", Some(req)).await?;
        if units.len() > req.max as usize {
            return Err(self.invalid(format!("{} units for a claim of {}", units.len(), req.max)));
        }
        Ok(units)
    }

    /// A worker extends its leases (`POST /api/work/heartbeat`): the units it still
    /// holds.
    pub async fn heartbeat(&self, req: &HeartbeatRequest) -> Result<HeartbeatReply> {
        self.call(true, "/api/work/heartbeat", Some(req)).await
    }

    /// Makes a recurring mirror (`POST /api/schedules`).
    pub async fn create_schedule(&self, spec: &ScheduleSpec) -> Result<ScheduleView> {
        self.call(true, "/api/schedules", Some(spec)).await
    }

    /// The caller's schedules, newest first (all of them for the service's token).
    pub async fn schedules(&self) -> Result<Vec<ScheduleView>> {
        self.call(false, "/api/schedules", None::<&()>).await
    }

    /// Schedule `id`, with its newest runs.
    pub async fn schedule(&self, id: &str) -> Result<ScheduleView> {
        let path = format!("/api/schedules/{}", path_segment(id)?);
        self.call(false, &path, None::<&()>).await
    }

    /// Pauses (`pause`: `pause`) or resumes (`resume`) schedule `id`.
    pub async fn schedule_action(&self, id: &str, action: &str) -> Result<ScheduleView> {
        let path = format!("/api/schedules/{}/{action}", path_segment(id)?);
        self.call(true, &path, None::<&()>).await
    }

    /// Deletes schedule `id` (its jobs stay); answers it as it was.
    pub async fn delete_schedule(&self, id: &str) -> Result<ScheduleView> {
        let path = format!("/api/schedules/{}", path_segment(id)?);
        self.send(reqwest::Method::DELETE, &path, None::<&()>).await
    }

    /// A worker reports a unit it holds as done or failed (`POST /api/work/finish`).
    pub async fn finish(&self, req: &FinishRequest) -> Result<FinishReply> {
        self.call(true, "/api/work/finish", Some(req)).await
    }

    /// Reports several units' ends at once (`POST /api/work/finish-all`). An answer
    /// that does not name the reports' units, one for one in their order, is refused.
    pub async fn finish_all(&self, req: &FinishAll) -> Result<FinishAllReply> {
        let reply: FinishAllReply = self.call(true, "/api/work/finish-all", Some(req)).await?;
        let named = reply.answers.len() == req.reports.len()
            && (reply.answers.iter().zip(&req.reports))
                .all(|(a, r)| a.job == r.job && a.seq == r.seq);
        if !named {
            return Err(
                self.invalid("answer to finish-all: not one answer per report, in order".into())
            );
        }
        Ok(reply)
    }

    /// A range unit of a file going into an object store learns the file's upload
    /// (`POST /api/work/upload`): the one recorded, or the one it created
    /// (`req.upload`) if none was. An answer that is no upload id is refused.
    pub async fn upload(&self, req: &UploadRequest) -> Result<UploadReply> {
        let reply: UploadReply = self.call(true, "/api/work/upload", Some(req)).await?;
        check_upload(&reply.upload).map_err(|e| self.invalid(format!("answer to upload: {e}")))?;
        Ok(reply)
    }

    /// A commit unit of a file going into an object store reads a page of what its
    /// ranges reported (`POST /api/work/ranges`). A page over the bounds a worker
    /// reports within ([`crate::object_ranges`]), or not in block order, is refused:
    /// the commit sizes nothing by what the service says.
    pub async fn ranges(&self, req: &RangesRequest) -> Result<RangesReply> {
        let reply: RangesReply = self.call(true, "/api/work/ranges", Some(req)).await?;
        check_ranges_page(req.from, &reply)
            .map_err(|e| self.invalid(format!("answer to ranges: {e}")))?;
        Ok(reply)
    }

    /// Calls the API (a POST sends `body`, or `{}`); a 4xx or 5xx becomes the
    /// service's one-line error, an answer not of type `T` an invalid one.
    async fn call<T: DeserializeOwned>(
        &self,
        post: bool,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T> {
        let method = match post {
            true => reqwest::Method::POST,
            false => reqwest::Method::GET,
        };
        self.send(method, path, body).await
    }

    /// [`Client::call`] with any method (a DELETE is sent without a body).
    async fn send<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T> {
        let url = format!("{}{path}", self.base);
        let req = match (method, body) {
            (reqwest::Method::POST, Some(body)) => self.http.post(url).json(body),
            (reqwest::Method::POST, None) => {
                self.http.post(url).json(&Value::Object(Default::default()))
            }
            (reqwest::Method::DELETE, _) => self.http.delete(url),
            (_, _) => self.http.get(url),
        };
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.not_sent(&e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
        let v: Value = serde_json::from_str(&text).map_err(|_| {
            ClientError::Invalid(format!(
                "{}: not a hetch service (answered {status})",
                self.host
            ))
        })?;
        // It answered as the service does: its key can be trusted from now on.
        if let Some(fp) = self.tls.record_learned()? {
            _ = writeln!(
                std::io::stderr(),
                "hetch: first connection to {}: trusting its key {fp} from now on",
                self.host
            );
        }
        if !status.is_success() {
            let body = serde_json::from_value::<ErrorBody>(v).unwrap_or(ErrorBody {
                error: "(no error message)".into(),
                field: None,
            });
            if status.as_u16() == 401 || status.as_u16() == 403 {
                return Err(ClientError::NotAllowed(format!(
                    "{}: {}",
                    self.host, body.error
                )));
            }
            return Err(ClientError::Service {
                service: self.host.clone(),
                status: status.as_u16(),
                message: body.error,
                field: body.field,
            });
        }
        serde_json::from_value(v).map_err(|e| self.invalid(format!("answer to {path}: {e}")))
    }

    /// Why a request got no answer: the service presented another key than the
    /// pinned one (said as `hetch cp` says it for a server), or it could not be
    /// reached.
    fn not_sent(&self, e: &reqwest::Error) -> ClientError {
        match self.tls.key_changed(e) {
            Some(changed) => ClientError::Net(changed),
            None => self.unreachable(e),
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        ClientError::Unreachable(format!("{}: {}", self.host, root_cause(e)))
    }

    fn invalid(&self, what: String) -> ClientError {
        ClientError::Invalid(format!("{}: {what}", self.host))
    }

    /// The service, `HOST:PORT`.
    pub fn service(&self) -> &str {
        &self.host
    }

    /// The service's key, once pinned.
    pub fn pinned(&self) -> Option<hetch_net::Fingerprint> {
        self.tls.pinned()
    }

    /// The token this client presents (handed to a unit's own process only).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether `token` is the one this client presents to the service.
    pub fn is_token(&self, token: &[u8]) -> bool {
        hetch_net::tokens_equal(token, self.token.as_bytes())
    }
}

/// The service at `s`, as `hetch job --service` and `hetch worker --service` take it,
/// as `HOST:PORT`: what the service prints (`https://HOST:PORT`, or its web address,
/// which ends in `/`), `HOST:PORT`, or a host alone (`HOST`, `https://HOST`, `[::1]`)
/// meaning the service's default port ([`crate::DEFAULT_PORT`]). Anything else (an
/// `http://` URL, a path, a malformed host or port) is one line naming `s`.
pub fn service_address(s: &str) -> std::result::Result<String, String> {
    let bad = |why: &str| format!("{s}: {why} (expected https://HOST[:PORT] or HOST[:PORT])");
    let rest = match s.split_once("://") {
        Some(("https", rest)) => rest,
        Some((scheme, _)) => return Err(bad(&format!("{scheme}:// is not the service's"))),
        None => s,
    };
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.contains('/') {
        return Err(bad("a path after the host"));
    }
    hetch_location::host_port(host, crate::DEFAULT_PORT).map_err(|e| bad(&e))
}

/// The innermost error of a request: the one that says what went wrong.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// A job id (or a job state) as one path segment or query value: ids are hex, states
/// are words; anything else is refused here.
pub fn path_segment(id: &str) -> Result<&str> {
    match !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        true => Ok(id),
        false => Err(ClientError::BadArgument(format!("{id:?} is not a job id"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_are_taken_as_they_print_themselves() {
        for (given, want) in [
            ("https://127.0.0.1:7000", "127.0.0.1:7000"),
            ("https://127.0.0.1:7000/", "127.0.0.1:7000"),
            ("127.0.0.1:7000", "127.0.0.1:7000"),
            ("svc.example.org", "svc.example.org:7879"),
            ("https://svc", "svc:7879"),
            ("[::1]:7000", "[::1]:7000"),
            ("https://[::1]", "[::1]:7879"),
        ] {
            assert_eq!(service_address(given).as_deref(), Ok(want), "{given}");
        }
        for (bad, why) in [
            ("http://h:1", "http:// is not"),
            ("ftp://h", "ftp:// is not"),
            ("https://h:1/api/jobs", "a path"),
            ("h:1/x", "a path"),
            ("h:0", "port"),
            ("[::1:7000", "]"),
            ("", "no host"),
            ("not a host", "not a host name"),
        ] {
            let e = service_address(bad).unwrap_err();
            assert!(
                e.starts_with(&format!("{bad}: ")) && e.contains(why),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn only_plain_ids_become_path_segments() {
        assert_eq!(path_segment("0123abcdef").unwrap(), "0123abcdef");
        for bad in ["", "../x", "a/b", "a?b", "a b", &"a".repeat(65)] {
            let e = path_segment(bad).unwrap_err();
            assert!(matches!(e, ClientError::BadArgument(_)), "{bad:?}: {e}");
            assert!(!e.is_transient() && !e.is_not_allowed());
        }
    }
}

/// Whether `page`, an answer to a ranges request from block `from`, is within the
/// bounds a worker's reports are kept in and in block order from `from`; else one
/// line saying what is not.
fn check_ranges_page(from: u64, page: &RangesReply) -> std::result::Result<(), String> {
    if let Some(u) = &page.upload {
        check_upload(u)?;
    }
    if page.ranges.len() > MAX_RANGES_PAGE {
        return Err(format!("{} ranges in one page", page.ranges.len()));
    }
    let mut next = from;
    for r in &page.ranges {
        if r.first < next || r.end <= r.first {
            return Err(format!("range {}..{} out of order", r.first, r.end));
        }
        if r.parts.len() > MAX_RANGE_PARTS || r.digests.len() > MAX_RANGE_DIGESTS {
            return Err(format!(
                "range {}..{} over the report bounds",
                r.first, r.end
            ));
        }
        next = r.end;
    }
    match page.next {
        Some(n) if n < next || page.ranges.is_empty() => Err(format!("next page at {n}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod ranges_page_tests {
    use super::*;
    use crate::ReportedRange;

    fn range(first: u64, end: u64) -> ReportedRange {
        ReportedRange {
            first,
            end,
            size: 1,
            parts: vec!["p".into()],
            digests: vec!["ab".repeat(32); (end - first) as usize],
        }
    }

    /// A page of ranges the service sends a commit is believed only within the
    /// bounds and order of what workers report: else refused, naming what is wrong.
    #[test]
    fn a_crafted_page_of_ranges_is_refused() {
        let page = |ranges: Vec<ReportedRange>, next| RangesReply {
            upload: Some("up".into()),
            ranges,
            next,
        };
        assert!(check_ranges_page(0, &page(vec![range(0, 2), range(2, 4)], Some(4))).is_ok());
        assert!(check_ranges_page(4, &page(vec![], None)).is_ok());
        for (from, bad) in [
            (0, page(vec![range(2, 4), range(0, 2)], None)),
            (4, page(vec![range(0, 2)], None)),
            (0, page(vec![range(0, 2)], Some(1))),
            (0, page(vec![], Some(0))),
            (0, page(vec![range(0, 1); MAX_RANGES_PAGE + 1], None)),
            (
                0,
                RangesReply {
                    upload: Some("a b".into()),
                    ranges: vec![],
                    next: None,
                },
            ),
        ] {
            let e = check_ranges_page(from, &bad).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
        let mut big = range(0, 1);
        big.parts = vec!["p".into(); MAX_RANGE_PARTS + 1];
        assert!(check_ranges_page(0, &page(vec![big], None)).is_err());
    }
}
