//! Where a worker says what it does: a unit stopped because its lease could not be
//! kept, the service unreachable, a unit that failed. The library never prints; the
//! binary passes [`Log::stderr`], tests keep the lines to check them.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::sync::Arc;

/// Takes one line at a time (without a newline, nor the worker's name).
#[derive(Clone)]
pub struct Log(Arc<dyn Fn(&str) + Send + Sync>);

impl Log {
    /// Lines to `f`.
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Log {
        Log(Arc::new(f))
    }

    /// Lines to standard error, each after `prefix` (e.g. `hetch worker NAME: `).
    pub fn stderr(prefix: String) -> Log {
        Log::new(move |line| _ = writeln!(std::io::stderr(), "{prefix}{line}"))
    }

    /// Says `line`.
    pub fn say(&self, line: &str) {
        (self.0)(line)
    }
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Log")
    }
}
