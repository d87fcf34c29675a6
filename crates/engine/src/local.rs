//! Local copies through the same engine: source and sink in one process, joined by
//! in-memory pipes instead of sockets, and blocks handed from one to the other by
//! reference (see `lane.rs`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::dest::DestSpec;
use crate::error::EngineError;
use crate::operand::{Destination, Operand};
use crate::progress::{Progress, Report};
use crate::{run_sink_into, run_source_from, Options, Transport};

/// Bytes buffered in each in-memory pipe (control frames only: blocks go on lanes).
const PIPE: usize = 1 << 20;

/// Copies `operands` to `dest` on this machine with `streams` data pipes. Progress is
/// reported on `progress` as the sending side sees it.
pub async fn copy_local(
    opts: Options,
    operands: Vec<PathBuf>,
    dest: DestSpec,
    streams: usize,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    let operands = operands.into_iter().map(Operand::Local).collect();
    copy_between(opts, operands, Destination::Local(dest), streams, progress).await
}

/// Copies `operands` (local paths or objects) to `dest` (a local path or an object
/// store prefix) in this process, through the same engine as [`copy_local`].
pub async fn copy_between(
    opts: Options,
    operands: Vec<Operand>,
    dest: Destination,
    streams: usize,
    progress: Arc<Progress>,
) -> Result<Report, EngineError> {
    // Both ends are in this process: neither can go quiet without the other knowing,
    // and nothing is saved by compressing a block handed over by reference.
    let opts = Options {
        stall_timeout: None,
        compression: crate::Compression::Off,
        ..opts
    };
    let (src, dst) = Transport::in_process_pair(streams, PIPE, ("local receiver", "local sender"));
    let sink_progress = Arc::new(Progress::default());
    // The sink's warnings (a destination that cannot keep what was asked for) are the
    // user's as much as the source's: shown and counted with them.
    let shared = progress.clone();
    sink_progress.set_log(Box::new(move |line: &str| {
        if let Some(w) = line.strip_prefix("warning: ") {
            shared.warn(w);
        }
    }));
    // The source writes manifest lines from the sink's reports; the sink must not too.
    let sink_opts = Options {
        manifest: None,
        ..opts.clone()
    };
    // A block stays in the source's buffer until the sink has written it, and the
    // sink's pool goes unused: the source gets both sides' budgets, the same memory
    // in all as two ends of a pipe.
    let opts = Options {
        buffer_memory: 2 * opts.effective_buffer_memory(),
        ..opts
    };
    let store = dest.into_store();
    let sink = tokio::spawn(run_sink_into(sink_opts, store, dst, sink_progress));
    let source = run_source_from(opts, operands, src, progress).await;
    let sink = sink.await.expect("sink task panicked");
    // The sink's error is the cause when both fail (the source only sees a closed pipe).
    match (source, sink) {
        (Ok(mut report), Ok(sink_report)) => {
            report.summary = sink_report.summary;
            Ok(report)
        }
        (_, Err(e)) => Err(e),
        (Err(e), Ok(_)) => Err(e),
    }
}
