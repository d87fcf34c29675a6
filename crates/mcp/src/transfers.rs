//! Transfers started through the MCP server: each a `hetch cp` or `hetch sync`
//! child, its latest progress, and its result once it ends.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::actions::{Operands, Spec};
use crate::runner::Finished;

/// Most transfers remembered; the oldest ended one is forgotten for a new one.
pub const MAX_REMEMBERED: usize = 256;

/// One transfer.
pub struct Transfer {
    /// Its number.
    pub id: u64,
    /// What it does.
    pub spec: Spec,
    /// Its checked locations.
    pub ops: Operands,
    /// When it started (Unix ms).
    pub started_ms: u64,
    state: Mutex<State>,
    ended: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    progress: Value,
    ended: Option<(u64, Finished)>,
    cancel: Option<oneshot::Sender<()>>,
    cancelled: bool,
}

impl Transfer {
    /// A running transfer; `cancel` stops its child.
    pub fn new(id: u64, spec: Spec, ops: Operands, cancel: oneshot::Sender<()>) -> Transfer {
        Transfer {
            id,
            spec,
            ops,
            started_ms: hetch_units::now_ms(),
            state: Mutex::new(State {
                cancel: Some(cancel),
                ..Default::default()
            }),
            ended: tokio::sync::watch::Sender::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a progress line.
    pub fn set_progress(&self, p: &Value) {
        self.state().progress = p.clone();
    }

    /// Records the end (a finished copy's progress is complete). The result is kept
    /// without its lists of names (up to 1,000 each; the first ones are kept apart).
    pub fn finish(&self, mut f: Finished) {
        if let Some(o) = f.json.as_object_mut() {
            o.remove("errors");
            o.remove("deleted_paths");
        }
        let mut s = self.state();
        if f.code == Some(0) && s.progress.is_object() {
            for (done, total) in [("bytes", "total_bytes"), ("files", "total_files")] {
                s.progress[done] = s.progress[total].clone();
            }
        }
        s.ended = Some((hetch_units::now_ms(), f));
        s.cancel = None;
        drop(s);
        self.ended.send_replace(true);
    }

    /// Becomes true when it ends.
    pub fn ended(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ended.subscribe()
    }

    /// Whether it still runs.
    pub fn running(&self) -> bool {
        self.state().ended.is_none()
    }

    /// Stops it (its child is killed; what it wrote resumes on a retry). False if it
    /// had ended.
    pub fn cancel(&self) -> bool {
        let mut s = self.state();
        match s.cancel.take() {
            Some(tx) => {
                s.cancelled = true;
                let _ = tx.send(());
                true
            }
            None => false,
        }
    }

    /// Bytes done and in all, and a line for a progress notification.
    pub fn progress(&self) -> (f64, Option<f64>, String) {
        let s = self.state();
        let p = &s.progress;
        let done = p["bytes"].as_f64().unwrap_or(0.0);
        let total = p["total_bytes"].as_f64();
        let msg = format!(
            "{} of {} files",
            p["files"].as_u64().unwrap_or(0),
            p["total_files"].as_u64().unwrap_or(0)
        );
        (done, total, msg)
    }

    /// Its state as the assistant sees it; `result` holds the same fields as
    /// `hetch cp --json` once it ended.
    pub fn view(&self) -> Value {
        let s = self.state();
        let mut v = json!({
            "transfer": self.id,
            "action": if self.spec.mirror { "sync" } else { "copy" },
            "sources": self.ops.sources,
            "destination": self.ops.destination,
            "started": hetch_units::rfc3339_ms(self.started_ms),
            "progress": s.progress,
        });
        match &s.ended {
            None => v["state"] = "running".into(),
            Some((at, f)) => {
                v["state"] = state_name(s.cancelled, f).into();
                v["ended"] = hetch_units::rfc3339_ms(*at).into();
                v["exit_code"] = f.code.into();
                v["result"] = f.json.clone();
                v["errors"] = json!(f.lines.messages);
                if self.spec.mirror {
                    v["deleted"] = json!(f.lines.deleted);
                }
            }
        }
        v
    }
}

/// How a transfer ended: done, partial (some files failed: exit code 3), failed or
/// cancelled.
fn state_name(cancelled: bool, f: &Finished) -> &'static str {
    match f.code {
        Some(0) => "done",
        _ if cancelled => "cancelled",
        Some(3) => "partial",
        _ => "failed",
    }
}

/// The remembered transfers, oldest first.
#[derive(Default)]
pub struct Transfers {
    list: Mutex<VecDeque<Arc<Transfer>>>,
}

impl Transfers {
    /// Remembers a new transfer (forgetting the oldest ended one if full), unless
    /// `max` run already (checked and added under one lock).
    pub fn add_below(&self, t: Arc<Transfer>, max: usize) -> bool {
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        if l.iter().filter(|t| t.running()).count() >= max {
            return false;
        }
        if l.len() >= MAX_REMEMBERED {
            if let Some(i) = l.iter().position(|t| !t.running()) {
                l.remove(i);
            }
        }
        l.push_back(t);
        true
    }

    /// Transfer `id`, if remembered.
    pub fn get(&self, id: u64) -> Option<Arc<Transfer>> {
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.iter().find(|t| t.id == id).cloned()
    }

    /// All remembered, newest first.
    pub fn all(&self) -> Vec<Arc<Transfer>> {
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.iter().rev().cloned().collect()
    }

    /// How many run.
    pub fn running(&self) -> usize {
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.iter().filter(|t| t.running()).count()
    }
}
