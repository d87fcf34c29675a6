//! One MinIO server per test process, shared by every case that needs S3, each case in
//! a bucket of its own ([`shared_minio`], [`fresh_bucket`]).

use std::path::Path;

use hetch_bench::minio::{minio_binary, Minio};

use crate::shared::{self, Shared};

/// The MinIO server of this test process, started on first use under
/// [`shared::watchdog`] (stopped, its directory removed, when the process ends). The
/// binary is never built here: `bench/install-minio.sh` (which `bash test.sh` runs)
/// puts it in `target/tools/bin`. Panics with the reason, in every case that asks,
/// when it cannot start.
pub fn shared_minio() -> &'static Minio {
    static MINIO: Shared<Minio> = Shared::new();
    MINIO.get_or_start(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let bin =
            minio_binary(&repo, false).map_err(|e| format!("{e:#} (the S3 cases need it)"))?;
        let dir = shared::dir("minio").map_err(|e| format!("shared MinIO: {e}"))?;
        // Its log (data.log) lands in `dir` too, and goes with it.
        let data = dir.join("data");
        Minio::start_with(&bin, &data, |server| shared::watchdog(&server, &dir)).map_err(|e| {
            // The failed server's drop killed its watchdog with it: the directory is
            // left to us.
            let _ = std::fs::remove_dir_all(&dir);
            format!("shared MinIO: {e:#}")
        })
    })
}

/// A new bucket of the shared MinIO, named `PREFIX` and a suffix no other case of any
/// test process has.
pub fn fresh_bucket(prefix: &str) -> String {
    let name = shared::unique_name(prefix);
    shared_minio()
        .create_bucket(&name)
        .unwrap_or_else(|e| panic!("create bucket {name}: {e:#}"));
    name
}
