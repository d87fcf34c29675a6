//! `hetch sum`: whole-file digests of local files and trees and of objects, in the
//! format `b3sum -c` (or md5sum, sha256sum) checks; `hetch sum --check` checks them,
//! any byte in a name.

use std::process::ExitCode;

use anyhow::Context;

use hetch_engine::sum::Checked;
use hetch_proto::{escape_bytes, escape_text};

use crate::location::Location;
use crate::usage::usage_error;
use crate::SumArgs;

/// Prints the digests of `a.paths` on stdout (objects first, as they are met, then the
/// local files), each error on stderr; exit code 3 when something could not be read.
#[cfg_attr(not(feature = "cloud"), allow(unused_variables))]
pub async fn run(a: SumArgs, s3: &hetch_copy::S3Options) -> anyhow::Result<ExitCode> {
    let (bs, threads, algo) = (a.block_size, a.threads, a.checksum);
    if a.check {
        return tokio::task::spawn_blocking(move || check(&a)).await?;
    }
    let locs: Vec<_> = match a
        .paths
        .iter()
        .map(|p| hetch_copy::parse_operand(p))
        .collect()
    {
        Ok(l) => l,
        Err(msg) => return Ok(usage_error(&msg)),
    };
    let mut paths = Vec::new();
    let mut errors = Vec::new();
    #[cfg(feature = "cloud")]
    let mut buckets = hetch_copy::Buckets::new(s3);
    for l in locs {
        match l {
            Location::Local(p) => paths.push(p),
            #[cfg(not(feature = "cloud"))]
            Location::Object(_) => unreachable!("refused by parse_operand"),
            #[cfg(feature = "cloud")]
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
        let written = hetch_engine::sum::write_manifest(&paths, algo, bs, threads, &mut out)?;
        std::io::Write::flush(&mut out)?;
        Ok::<_, std::io::Error>(written)
    })
    .await?
    .context("writing to standard output")?;
    for name in &more.not_for_b3sum {
        errln!("hetch: warning: {name}: b3sum --check cannot check this name (not UTF-8): it fails its line and checks the others; hetch sum --check checks it");
    }
    errors.extend(more.errors);
    for e in &errors {
        errln!("hetch: error: {}", escape_text(e));
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// `hetch sum --check MANIFEST...`: `NAME: OK` or `NAME: FAILED` on stdout for each
/// file, as b3sum prints them (names escaped; `-q`: only what failed), a line on
/// stderr for each line that is not a manifest line; exit code 3 unless all check.
fn check(a: &SumArgs) -> anyhow::Result<ExitCode> {
    let mut all_ok = true;
    for m in &a.paths {
        let shown = escape_text(m);
        let file = std::fs::File::open(m).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
        let tell = |c: Checked| match c {
            Checked::Ok(_) if a.quiet => Ok(()),
            Checked::Ok(n) => outln!("{}: OK", escape_bytes(&n)),
            Checked::Failed(n, None) => outln!("{}: FAILED", escape_bytes(&n)),
            Checked::Failed(n, Some(e)) => {
                outln!("{}: FAILED ({})", escape_bytes(&n), escape_text(&e))
            }
            Checked::BadLine(i) => {
                let algo = a.checksum.name();
                errln!("hetch: error: {shown}: line {i}: not a {algo} manifest line");
                Ok(())
            }
        };
        let mut lines = std::io::BufReader::new(file);
        let c = hetch_engine::sum::check_manifest(
            &mut lines,
            a.checksum,
            a.block_size,
            a.threads,
            &tell,
        )?;
        all_ok &= c.failed == 0 && c.bad_lines == 0;
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
