//! Each copying subcommand's arguments turned into the library's job, in one
//! `TryFrom` each: `cp`, `sync`, `predict`, `watch` and `verify`. What the flags cannot
//! mean together is a one-line usage error (exit code 2); what they name and cannot
//! be read (a token file, a directory) fails the command (exit code 1).

use hetch_copy::CopyJob;
use hetch_engine::Verify;

use crate::location::Location;
use crate::usage::{usage, ArgsError};
use crate::{CpArgs, PredictArgs, SyncArgs, VerifyArgs, WatchArgs};

/// Parses operands; `Err` is the usage error.
fn parse_locations(paths: &[String]) -> Result<Vec<Location>, ArgsError> {
    paths
        .iter()
        .map(|p| hetch_copy::parse_operand(p).map_err(ArgsError::Usage))
        .collect()
}

impl TryFrom<&CpArgs> for CopyJob {
    type Error = ArgsError;

    fn try_from(a: &CpArgs) -> Result<Self, ArgsError> {
        copy_job(a, false, None)
    }
}

impl TryFrom<&SyncArgs> for CopyJob {
    type Error = ArgsError;

    fn try_from(a: &SyncArgs) -> Result<Self, ArgsError> {
        copy_job(&a.cp, true, None)
    }
}

impl TryFrom<&PredictArgs> for CopyJob {
    type Error = ArgsError;

    /// A dry run of the copy, predicted at the path's rate.
    fn try_from(a: &PredictArgs) -> Result<Self, ArgsError> {
        copy_job(&a.cp, false, Some(a.rate))
    }
}

/// The rate a dry run predicts at: the path's (if known) or the copy's own rate
/// limit, whichever is lower.
fn predicted_rate(path: Option<u64>, rate_limit: u64) -> Option<u64> {
    match (path, rate_limit) {
        (p, 0) => p,
        (Some(p), l) => Some(p.min(l)),
        (None, l) => Some(l),
    }
}

/// `cp` (`sync`: mirroring); `predict` is a dry run with the path's rate, if known.
fn copy_job(a: &CpArgs, sync: bool, predict: Option<Option<u64>>) -> Result<CopyJob, ArgsError> {
    let mut locs = parse_locations(&a.paths)?;
    let dest = locs.pop().expect("clap requires two operands");
    if let Location::Local(d) = &dest {
        // Before anything is copied: a copy into itself would nest the tree.
        let overlap = locs.iter().find_map(|s| match s {
            Location::Local(s) => hetch_copy::copy_into_itself(s, d),
            _ => None,
        });
        if let Some(msg) = overlap {
            return usage(msg);
        }
    }
    let mut opts = a.tuning.engine()?;
    opts.rate_limit = a.streams.rate_limit.unwrap_or(0);
    opts.compression = a.streams.compress;
    opts.no_clobber = a.no_clobber;
    opts.fsync = a.fsync;
    opts.preserve_special_modes = a.preserve_special_modes;
    opts.specials = a.specials || a.specials_and_devices;
    opts.devices = a.devices || a.specials_and_devices;
    a.keep.apply(&mut opts);
    opts.checksum_skip = a.checksum_skip;
    opts.retry_changed = a.retry_changed;
    opts.trust_journal = a.trust_journal;
    a.integrity.apply(&mut opts);
    if a.checksum_skip && a.integrity.verify == Verify::None {
        return usage("--checksum-skip needs a digest: not with --verify none");
    }
    if a.follow {
        if locs.iter().any(|l| !matches!(l, Location::Local(_))) {
            return usage("--follow needs local sources: run hetch where the files are written");
        }
        if matches!(dest, Location::Object(_)) {
            return usage(
                "--follow into an object store is not supported (objects cannot grow): follow into a directory or a hetch:// server",
            );
        }
        a.follow_args
            .apply(&mut opts, false)
            .map_err(ArgsError::Usage)?;
    }
    opts.delete = a.mirror.request(sync).map_err(ArgsError::Usage)?;
    opts.dry_run = a.mirror.dry_run || predict.is_some();
    if opts.dry_run && (a.follow || a.manifest.is_some()) {
        return usage("--dry-run changes nothing: not with --follow or --manifest");
    }
    opts.filter = a.filter.filter().map_err(ArgsError::Usage)?;
    if opts.delete.is_some() && a.follow {
        return usage("mirroring deletes after everything was copied: not with --follow");
    }
    let tune = a.streams.autotune();
    let client = a
        .conn
        .client_for(&locs, &dest, a.tuning.socket(), tune.clone().ok())?;
    let confine_to = match &a.confine_to {
        Some(d) => {
            Some(std::fs::canonicalize(d).map_err(|e| anyhow::anyhow!("{}: {e}", d.display()))?)
        }
        None => None,
    };
    let link_rate = predicted_rate(predict.flatten(), opts.rate_limit);
    Ok(CopyJob {
        opts,
        streams: a.streams.count(),
        autotune_off: tune.err(),
        link_rate,
        encrypt: !a.streams.no_encrypt,
        client,
        manifest: a.manifest.clone(),
        filter: a.filter.request(),
        retry: a.retry.policy(),
        confine_to,
        dest_server: a.conn.dest_server()?,
        ..CopyJob::new(locs, dest)
    })
}

impl TryFrom<&WatchArgs> for CopyJob {
    type Error = ArgsError;

    /// Following the directory forever.
    fn try_from(a: &WatchArgs) -> Result<Self, ArgsError> {
        let dest = match Location::parse(&a.dst) {
            Ok(Location::Object(_)) => return usage(
                "watching into an object store is not supported (objects cannot grow): watch into a directory or a hetch:// server",
            ),
            Ok(d) => d,
            Err(msg) => return usage(msg),
        };
        std::fs::metadata(&a.dir).map_err(|e| anyhow::anyhow!("{}: {e}", a.dir.display()))?;
        if !a.dir.is_dir() {
            return usage(format!(
                "{}: not a directory; hetch watch ships what appears under a directory",
                a.dir.display()
            ));
        }
        let mut opts = a.tuning.engine()?;
        opts.rate_limit = a.streams.rate_limit.unwrap_or(0);
        opts.compression = a.streams.compress;
        a.integrity.apply(&mut opts);
        a.follow_args
            .apply(&mut opts, true)
            .map_err(ArgsError::Usage)?;
        if a.remove_source {
            if opts.verify == Verify::None {
                return usage(
                    "--remove-source deletes only what was verified: not with --verify none",
                );
            }
            opts.remove_source = true;
            // A file already at the destination is deleted only on a matching digest.
            opts.checksum_skip = true;
            opts.file_digests = true;
        }
        opts.filter = a.filter.filter().map_err(ArgsError::Usage)?;
        let sources = vec![Location::Local(a.dir.clone())];
        let tune = a.streams.autotune();
        let client = a
            .conn
            .client_for(&sources, &dest, a.tuning.socket(), tune.clone().ok())?;
        Ok(CopyJob {
            opts,
            streams: a.streams.count(),
            autotune_off: tune.err(),
            encrypt: !a.streams.no_encrypt,
            client,
            // A watch opens new sessions forever by itself.
            retry: hetch_copy::RetryPolicy::NEVER,
            ..CopyJob::new(sources, dest)
        })
    }
}

impl TryFrom<&VerifyArgs> for CopyJob {
    type Error = ArgsError;

    /// A comparison of the destination with the source, on one stream.
    fn try_from(a: &VerifyArgs) -> Result<Self, ArgsError> {
        let mut locs = parse_locations(&[a.src.clone(), a.dst.clone()])?;
        let dest = locs.pop().expect("two operands");
        let mut opts = a.tuning.engine()?;
        opts.checksum = a.checksum;
        opts.compare_only = true;
        a.keep.apply(&mut opts);
        let client = a.conn.client_for(&locs, &dest, a.tuning.socket(), None)?;
        Ok(CopyJob {
            opts,
            streams: 1,
            autotune_off: Some("a comparison: one stream"),
            client,
            retry: a.retry.policy(),
            ..CopyJob::new(locs, dest)
        })
    }
}
