//! hetch's manual, generated from its command line (a `clap::Command`), so that what
//! the packages install cannot drift from what the binary accepts:
//!
//! - [`completions`]: `hetch completions SHELL`, a completion script on stdout.
//! - [`man`]: `hetch man DIR`, one man page for `hetch` and one per subcommand.
//!
//! The binary passes its own command; the functions know nothing of hetch's flags.

#![deny(missing_docs)]

pub mod completions;
pub mod man;

pub use completions::CompletionsArgs;
pub use man::{ManArgs, ManError};
