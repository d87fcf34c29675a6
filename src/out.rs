//! Standard output, for what the commands print there (listings, digests, JSON): a
//! reader that stops reading (`hetch job ls | head -1`, `hetch sum DIR | true`) ends
//! the process quietly, as SIGPIPE ends coreutils' and rsync's, instead of a panic
//! (`println!`'s, exit code 101) or an error line. Only standard output does: the
//! process otherwise ignores SIGPIPE (Rust's runtime sets that), so that a peer
//! closing a TCP connection stays an error the transfer handles, never the end of
//! the process.
//!
//! Standard error never ends the process and never panics (`eprintln!` panics when the
//! write fails: a closed pipe, `2>/dev/full`): what fails there is dropped ([`say`]),
//! and the command's exit code still says how it went.

use std::io::{self, Write};

/// Prints `format!($($arg)*)` on standard output ([`print`]); an `io::Result`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::print(format_args!($($arg)*))
    };
}

/// Prints `format!($($arg)*)` and a newline on standard output ([`print`]); an
/// `io::Result`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints `format!($($arg)*)` on standard error ([`say`]), as `eprint!` but never
/// panicking.
#[cfg_attr(not(feature = "service"), allow(unused_macros))] // `hetch job wait`'s alone
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::out::say(format_args!($($arg)*))
    };
}

/// Prints `format!($($arg)*)` and a newline on standard error ([`say`]), as
/// `eprintln!` but never panicking.
macro_rules! errln {
    () => {
        $crate::out::say(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::say(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes `text` on standard error; a failure is dropped, because standard error is
/// where it would be reported: nothing is left to tell, and the exit code stands.
pub fn say(text: std::fmt::Arguments) {
    let _ = io::stderr().write_fmt(text);
}

/// Writes `text` on standard output, ending the process quietly when its reader has
/// gone (see the module doc); any other error is returned.
pub fn print(text: std::fmt::Arguments) -> io::Result<()> {
    Stdout.write_fmt(text)
}

/// Standard output as a writer (for what writes to an `io::Write`), with a closed
/// pipe ending the process quietly (see the module doc).
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        quiet_on_closed_pipe(io::stdout().write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        quiet_on_closed_pipe(io::stdout().flush())
    }
}

/// `r`, unless it is the error of a reader that has gone: then the process ends.
fn quiet_on_closed_pipe<T>(r: io::Result<T>) -> io::Result<T> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => die_of_sigpipe(),
        r => r,
    }
}

/// Ends the process as SIGPIPE ends a program that does not ignore it: the shell
/// sees a death by that signal (exit status 141), and nothing is printed.
fn die_of_sigpipe() -> ! {
    // SAFETY: setting one signal's action back to its default and raising it in
    // this thread touches no memory of the process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Only where the signal is blocked in this thread: the same status, by hand.
    std::process::exit(128 + libc::SIGPIPE)
}

/// Reports a failure to print what a command prints at its end (a summary), where
/// the caller has no error to return: one line on stderr.
pub fn or_say(r: io::Result<()>) {
    if let Err(e) = r {
        errln!("hetch: error: writing to standard output: {e}");
    }
}
