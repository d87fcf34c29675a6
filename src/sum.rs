//! `hetch sum`: whole-file digests of local files and trees and of objects, in the
//! format `b3sum -c` (or md5sum, sha256sum) checks.

use std::process::ExitCode;

use crate::location::Location;
use crate::usage::usage_error;
use crate::SumArgs;

/// Prints the digests of `a.paths` on stdout (objects first, as they are met, then the
/// local files), each error on stderr; exit code 3 when something could not be read.
pub async fn run(a: SumArgs, s3: &hetch_object::S3Options) -> anyhow::Result<ExitCode> {
    let (bs, threads, algo) = (a.block_size, a.threads, a.checksum);
    let locs: Vec<_> = match a.paths.iter().map(|p| Location::parse(p)).collect() {
        Ok(l) => l,
        Err(msg) => return Ok(usage_error(&msg)),
    };
    let mut paths = Vec::new();
    let mut errors = Vec::new();
    let mut buckets = hetch_copy::Buckets::new(s3);
    for l in locs {
        match l {
            Location::Local(p) => paths.push(p),
            Location::Object(url) => {
                let loc = buckets.location(&url)?;
                let mut out = crate::out::Stdout;
                errors.extend(
                    hetch_object::sum_objects(&loc, algo, bs, threads * 4, &mut out).await?,
                );
            }
            Location::Remote { .. } => {
                return Ok(usage_error(
                    "hetch sum reads local files and s3://, gs://, az:// objects",
                ))
            }
        }
    }
    let more = tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::new(crate::out::Stdout);
        let errors = hetch_engine::sum::write_manifest(&paths, algo, bs, threads, &mut out)?;
        std::io::Write::flush(&mut out)?;
        Ok::<_, std::io::Error>(errors)
    })
    .await??;
    errors.extend(more);
    for e in &errors {
        eprintln!("hetch: error: {}", hetch_proto::escape_text(e));
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
