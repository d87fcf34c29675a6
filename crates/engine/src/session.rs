//! Plumbing shared by both sides of a session: the control writer task and the way a
//! session's tasks are run and torn down.

use std::path::PathBuf;
use std::time::Duration;

use hetch_proto::Frame;
use tokio::io::{split, AsyncWrite, ReadHalf};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::EngineError;
use crate::liveness::{Liveness, StopSignal};
use crate::wire::{FrameReader, FrameWriter};
use crate::{BoxStream, Options, Transport};

/// Depth of the queue in front of the control writer.
pub(crate) const CONTROL_QUEUE: usize = 4096;

/// What every session starts from (see [`open`]).
pub(crate) struct Opened {
    /// The peer, for messages.
    pub peer: String,
    /// The control stream's reading half.
    pub control: FrameReader<ReadHalf<BoxStream>>,
    /// The data streams, each with its frame MAC when plain TCP carries it, or its lane
    /// when the peer is in this process.
    pub data: Vec<crate::DataStream>,
    /// What [`run_tasks`] ends with.
    pub end: Ending,
    /// How a lost data stream is joined again, when it can be.
    pub rejoin: Option<crate::rejoin::Rejoining>,
}

/// The control writer and the silence watch, for [`run_tasks`].
pub(crate) struct Ending {
    ctl_writer: tokio::task::JoinHandle<Result<(), EngineError>>,
    watch: Watch,
    /// The task reading the control stream, once spawned (see [`Ending::reads_control`]).
    control_reader: Option<tokio::task::Id>,
}

impl Ending {
    /// Task `id` reads the control stream: when it is what broke, no reason from the
    /// peer can follow, and none is waited for.
    pub(crate) fn reads_control(&mut self, id: tokio::task::Id) {
        self.control_reader = Some(id);
    }
}

/// Starts a session on `transport`, whichever side: the transport watched for
/// silence, its control stream split, and a task that writes queued control frames,
/// with the queue's sender (apart, so that it moves into [`run_tasks`], which drops
/// it: the writer ends once every sender is gone).
pub(crate) fn open(transport: Transport, opts: &Options) -> (Opened, mpsc::Sender<Frame>) {
    let (transport, watch) = Watch::new(transport, opts);
    let peer = transport.peer.clone();
    let (ctl_r, ctl_w) = split(transport.control);
    // Lanes are there when the peer is in this process, its control stream a pipe.
    let buffer = crate::wire::buffer_for(!transport.lanes.is_empty());
    let (ctl_tx, ctl_rx) = mpsc::channel(CONTROL_QUEUE);
    let ctl_writer = tokio::spawn(control_writer(
        FrameWriter::with_buffer(ctl_w, &peer, buffer),
        ctl_rx,
        opts.served_root.clone(),
    ));
    // Streams on lanes (one process) are never lost.
    let rejoin = transport
        .rejoin
        .filter(|_| transport.lanes.is_empty())
        .map(|r| crate::rejoin::Rejoining::new(r, transport.data_mac, &peer));
    let opened = Opened {
        rejoin,
        control: FrameReader::with_buffer(ctl_r, &peer, buffer),
        data: Transport::data_streams(transport.data, transport.data_mac, transport.lanes)
            .collect(),
        peer,
        end: Ending {
            ctl_writer,
            watch,
            control_reader: None,
        },
    };
    (opened, ctl_tx)
}

/// Writes queued control frames, flushing whenever the queue runs dry, and closes the
/// stream when every sender is gone. Messages in them name paths under `served_root` (a
/// server's root) relative to it: this is the one place every message to the peer
/// passes, so no error built anywhere in the engine shows the peer the server's layout.
pub(crate) async fn control_writer<W: AsyncWrite + Unpin>(
    mut w: FrameWriter<W>,
    mut rx: mpsc::Receiver<Frame>,
    served_root: Option<PathBuf>,
) -> Result<(), EngineError> {
    let root = shown_root(served_root.as_deref());
    let mut finished = false;
    while let Some(mut frame) = rx.recv().await {
        // The summary is a sink's last word: every file's report is queued before it,
        // so what comes after concerns files already settled (a keep-alive, or a
        // resend that a writer decided while another block failed the file). The peer
        // may close at any moment once it has the summary, and a frame arriving then
        // would make its kernel reset the connection.
        if !finished {
            finished = matches!(frame, Frame::Finished(_));
            if let Some(root) = &root {
                relative_messages(&mut frame, root);
            }
            w.send(&frame).await?;
        }
        // Whenever the queue runs dry, dropped frames included: the summary may have
        // gone into the buffer with a frame queued behind it, and the peer waits for it.
        if rx.is_empty() {
            w.flush().await?;
        }
    }
    w.shutdown().await
}

/// The root as messages name it, if naming paths relative to it hides anything ("/"
/// hides nothing: every path is under it).
fn shown_root(served_root: Option<&std::path::Path>) -> Option<String> {
    served_root
        .map(|r| r.to_string_lossy().trim_end_matches('/').to_string())
        .filter(|r| !r.is_empty())
}

/// Rewrites the messages of `frame`, about to go to a server's client, so that paths
/// under `served_root` (the server's root, if it serves one) are named relative to
/// it. Every message of a session passes here (see [`control_writer`]); a server's
/// range sessions, which write their own control frames, call it themselves.
pub fn below_served_root(frame: &mut Frame, served_root: Option<&std::path::Path>) {
    if let Some(root) = shown_root(served_root) {
        relative_messages(frame, &root);
    }
}

/// Rewrites the messages of `frame` so that paths under `root` are named relative to it.
fn relative_messages(frame: &mut Frame, root: &str) {
    let message = match frame {
        Frame::FileDone { error: Some(m), .. } => m,
        Frame::FileError { message, .. } => message,
        Frame::Error(e) => &mut e.message,
        _ => return,
    };
    if message.contains(root) {
        let below = format!("{root}/");
        *message = message.replace(&below, "").replace(root, ".");
    }
}

/// What watches a running session from outside its tasks.
#[derive(Default)]
pub(crate) struct Watch {
    /// Noticing a peer that went quiet, and keeping ours from looking so.
    pub live: Option<Liveness>,
    /// A request to stop.
    pub stop: Option<StopSignal>,
}

impl Watch {
    /// Wraps `transport`'s streams for `opts`' stall timeout and takes its stop signal.
    pub(crate) fn new(transport: Transport, opts: &Options) -> (Transport, Watch) {
        let (transport, live) = Liveness::watch(transport, opts.stall_timeout);
        let stop = opts.stop.clone();
        (transport, Watch { live, stop })
    }
}

/// A session task that ended: which one, and how.
type Ended = Result<(tokio::task::Id, Result<(), EngineError>), tokio::task::JoinError>;

/// What woke the session loop.
enum Event {
    Done(Option<Ended>),
    Tick,
    Stop,
}

/// Runs a session's tasks to the end. On the first error, tells the peer (best effort,
/// through the control writer), stops every task and returns that error. `watch`
/// sends keep-alives, ends a session whose peer went quiet, and one asked to stop.
pub(crate) async fn run_tasks(
    mut tasks: JoinSet<Result<(), EngineError>>,
    ctl_tx: mpsc::Sender<Frame>,
    end: Ending,
) -> Result<(), EngineError> {
    let Ending {
        ctl_writer,
        watch,
        control_reader,
    } = end;
    let mut failure = None;
    // Whether the first failure broke the control stream.
    let mut control_broke = false;
    let mut tick = tokio::time::interval(
        watch
            .live
            .as_ref()
            .map_or(Duration::from_secs(3600), Liveness::tick),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = async {
        match watch.stop {
            Some(s) => s.raised().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    loop {
        let event = tokio::select! {
            done = tasks.join_next_with_id() => Event::Done(done),
            _ = tick.tick(), if watch.live.is_some() => Event::Tick,
            _ = &mut stop => Event::Stop,
        };
        let done = match event {
            Event::Done(Some(done)) => done,
            Event::Done(None) => break,
            Event::Tick => {
                let live = watch.live.as_ref().expect("ticks only when watched");
                if let Err(e) = live.check() {
                    failure = Some(e);
                    break;
                }
                // Best effort: a full queue means frames are going out anyway.
                let _ = ctl_tx.try_send(Frame::KeepAlive);
                continue;
            }
            Event::Stop => {
                failure = Some(EngineError::ShuttingDown);
                break;
            }
        };
        let (id, result) = match done {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => (e.id(), Ok(())),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        if let Err(e) = result {
            control_broke = Some(id) == control_reader;
            failure = Some(e);
            break;
        }
    }
    match failure {
        None => {
            drop(ctl_tx);
            match &watch.live {
                // Even the last frames must not wait for a peer that went away.
                Some(live) => match tokio::time::timeout(live.stall(), ctl_writer).await {
                    Ok(r) => r.expect("control writer panicked"),
                    Err(_) => live.check(),
                },
                None => ctl_writer.await.expect("control writer panicked"),
            }
        }
        Some(mut e) => {
            // A data stream often breaks before the control stream delivers the peer's
            // reason (e.g. its disk is full): give the other tasks a moment to report
            // it, and prefer the peer's own words over "connection lost". Not when the
            // control stream itself broke (a damaged TLS record): nothing can come.
            if matches!(e, EngineError::Connection { .. }) && !control_broke {
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
                while let Ok(Some(done)) =
                    tokio::time::timeout_at(deadline, tasks.join_next()).await
                {
                    if let Ok(Err(peer @ EngineError::Peer { .. })) = done {
                        e = peer;
                        break;
                    }
                }
            }
            // A peer's own error need not be echoed back to it.
            if !matches!(
                e,
                EngineError::Peer { .. }
                    | EngineError::Connection { .. }
                    | EngineError::ClosedEarly { .. }
            ) {
                let _ = ctl_tx.try_send(Frame::Error(e.to_frame()));
            }
            drop(ctl_tx);
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            // Give the error frame a moment to leave; the peer may already be gone.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), ctl_writer).await;
            Err(e)
        }
    }
}

/// Whether every byte of `buf` is zero (such blocks travel without payload).
pub(crate) fn is_zero(buf: &[u8]) -> bool {
    let (words, tail) = buf.split_at(buf.len() & !7);
    // Word-sized compares; most data blocks fail on the first word.
    words
        .chunks_exact(8)
        .all(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")) == 0)
        && tail.iter().all(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary leaves even when a frame was queued behind it and the queue then
    /// stays open (the sink's tasks wait for the source to end its data streams): a
    /// dropped frame once skipped the flush, and the summary sat in the buffer while
    /// both ends waited for each other.
    #[tokio::test]
    async fn the_summary_is_flushed_when_a_frame_queued_behind_it_is_dropped() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (tx, rx) = mpsc::channel(8);
        tx.send(Frame::Finished(Default::default())).await.unwrap();
        tx.send(Frame::KeepAlive).await.unwrap();
        let writer = tokio::spawn(control_writer(FrameWriter::new(ours, "peer"), rx, None));
        let mut r = crate::wire::FrameReader::new(theirs, "peer");
        // A hang guard only: the frame is there at once, or never.
        let got = tokio::time::timeout(Duration::from_secs(30), r.next_control()).await;
        let frame = got.expect("the summary never left the buffer").unwrap();
        assert!(matches!(frame, Some(Frame::Finished(_))), "{frame:?}");
        drop(tx);
        writer.await.unwrap().unwrap();
        // Nothing after the summary: the stream just ends.
        assert!(r.next_control().await.unwrap().is_none());
    }

    #[test]
    fn messages_to_the_peer_name_paths_below_the_root_only() {
        let mut f = Frame::FileDone {
            file: 1,
            error: Some("/srv/root/a/b: exists; /srv/root is full; /srv/rooted stays".into()),
            digest: None,
        };
        relative_messages(&mut f, "/srv/root");
        let Frame::FileDone { error: Some(m), .. } = f else {
            panic!()
        };
        assert_eq!(m, "a/b: exists; . is full; .ed stays");
    }
}
