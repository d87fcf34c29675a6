//! Object store clients for a copy's operands.

use std::collections::HashMap;
use std::sync::Arc;

use hetch_object::{
    AzureConfig, Bucket, GcsConfig, ObjectError, ObjectLocation, ObjectUrl, S3Config, S3Options,
    Scheme,
};

/// Bucket clients, one per bucket, from one resolved configuration per provider.
pub struct Buckets<'a> {
    opts: &'a S3Options,
    s3: Option<S3Config>,
    open: HashMap<(Scheme, String), Arc<Bucket>>,
}

impl<'a> Buckets<'a> {
    /// No configuration is resolved until an operand of its provider needs it.
    pub fn new(opts: &'a S3Options) -> Self {
        Buckets {
            opts,
            s3: None,
            open: HashMap::new(),
        }
    }

    /// The client and location of `url`.
    pub fn location(&mut self, url: &ObjectUrl) -> Result<ObjectLocation, ObjectError> {
        let at = (url.scheme, url.bucket.clone());
        let bucket = match self.open.get(&at) {
            Some(b) => b.clone(),
            None => {
                let b = Arc::new(match url.scheme {
                    Scheme::S3 => {
                        if self.s3.is_none() {
                            self.s3 = Some(S3Config::resolve(self.opts)?);
                        }
                        let cfg = self.s3.as_ref().expect("resolved above");
                        Bucket::open(cfg, &url.bucket)?
                    }
                    Scheme::Gcs => Bucket::open_gcs(&GcsConfig::resolve(), &url.bucket)?,
                    Scheme::Azure => Bucket::open_azure(&AzureConfig::resolve()?, &url.bucket)?,
                });
                self.open.insert(at, b.clone());
                b
            }
        };
        Ok(ObjectLocation {
            bucket,
            url: url.clone(),
        })
    }
}
