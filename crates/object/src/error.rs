//! Errors from object stores, sorted into what a user can act on.

/// What went wrong talking to an object store.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Credentials, region or endpoint could not be worked out.
    #[error("{0}")]
    Config(String),
    /// The bucket does not exist.
    #[error("{bucket}: no such bucket{at}")]
    NoSuchBucket {
        /// The bucket, as a URL (`s3://NAME`).
        bucket: String,
        /// " at ENDPOINT", for messages.
        at: String,
    },
    /// The store refused the credentials or the request.
    #[error("{url}: access denied ({why})")]
    Denied {
        /// The object or prefix.
        url: String,
        /// The store's error code or message.
        why: String,
    },
    /// The object does not exist.
    #[error("{url}: no such object")]
    NotFound {
        /// The object.
        url: String,
    },
    /// The object changed (another ETag) while it was being read.
    #[error("{url}: object changed while being read; copy it again")]
    Changed {
        /// The object.
        url: String,
    },
    /// Anything else (after the retries the client makes with backoff).
    #[error("{url}: {what}")]
    Other {
        /// The object or prefix.
        url: String,
        /// What the store or the connection said.
        what: String,
    },
}

impl ObjectError {
    /// Whether a call on a multipart upload failed because the upload is gone
    /// (completed, aborted or expired).
    pub fn is_upload_gone(&self) -> bool {
        matches!(self, ObjectError::Other { what, .. } if what.contains(crate::bucket::UPLOAD_GONE))
    }

    /// Whether the error concerns the whole store (bad credentials, no bucket): the
    /// transfer stops rather than failing every object one by one.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            ObjectError::Config(_) | ObjectError::NoSuchBucket { .. } | ObjectError::Denied { .. }
        )
    }

    /// Sorts an `object_store` error about `url` (in `bucket`, at `endpoint`).
    pub(crate) fn from_store(
        e: object_store::Error,
        bucket: &str,
        url: &str,
        endpoint: &str,
    ) -> ObjectError {
        use object_store::Error as E;
        let text = full_text(&e);
        // S3's code, Azure's, and GCS's words.
        if ["NoSuchBucket", "ContainerNotFound", "bucket does not exist"]
            .iter()
            .any(|c| text.contains(c))
        {
            return ObjectError::NoSuchBucket {
                bucket: bucket.to_string(),
                at: format!(" at {endpoint}"),
            };
        }
        let url = url.to_string();
        match e {
            E::NotFound { .. } => ObjectError::NotFound { url },
            E::Precondition { .. } => ObjectError::Changed { url },
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => ObjectError::Denied {
                url,
                why: s3_code(&text).unwrap_or("permission denied").to_string(),
            },
            _ => match s3_code(&text) {
                Some(c @ ("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AccessDenied")) => {
                    ObjectError::Denied {
                        url,
                        why: c.to_string(),
                    }
                }
                _ => ObjectError::Other {
                    url,
                    what: one_line(&text),
                },
            },
        }
    }
}

impl ObjectError {
    /// Sorts an HTTP error response (`status`, `body`) about `url`.
    pub(crate) fn from_status(
        status: u16,
        body: &str,
        bucket: &str,
        url: &str,
        endpoint: &str,
    ) -> ObjectError {
        let code = s3_code(body);
        match (status, code) {
            (_, Some("NoSuchBucket")) => ObjectError::NoSuchBucket {
                bucket: bucket.to_string(),
                at: format!(" at {endpoint}"),
            },
            (401 | 403, c) => ObjectError::Denied {
                url: url.to_string(),
                why: c.unwrap_or("permission denied").to_string(),
            },
            (404, _) => ObjectError::NotFound {
                url: url.to_string(),
            },
            (s, c) => ObjectError::Other {
                url: url.to_string(),
                what: format!(
                    "HTTP {s}: {}",
                    c.map_or_else(|| one_line(body), str::to_string)
                ),
            },
        }
    }
}

/// The error and all its sources, as one string.
fn full_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// The S3 error code in a response body (`<Code>AccessDenied</Code>`).
fn s3_code(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(&text[start..start + len])
}

/// Collapses a multi-line message (XML bodies) to one line of sensible length.
fn one_line(s: &str) -> String {
    let joined: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(400) {
        Some((i, _)) => format!("{}...", &joined[..i]),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_s3_codes() {
        let body = "Client error with status 403: <?xml?><Error><Code>InvalidAccessKeyId</Code><Message>x</Message></Error>";
        assert_eq!(s3_code(body), Some("InvalidAccessKeyId"));
        assert_eq!(s3_code("no xml"), None);
        assert_eq!(one_line("a\n  b\tc"), "a b c");
    }
}
