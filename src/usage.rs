//! Bad usage found after flag parsing: one line on stderr and exit code 2 (like
//! clap's own), told apart from failures of what the arguments name (exit code 1).

use std::process::ExitCode;

/// Why a subcommand's arguments make no configuration.
pub enum ArgsError {
    /// Bad usage, in one line (exit code 2).
    Usage(String),
    /// Something the arguments name could not be used (exit code 1).
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for ArgsError {
    fn from(e: anyhow::Error) -> Self {
        ArgsError::Failed(e)
    }
}

/// A usage error, as a result.
pub fn usage<T>(msg: impl Into<String>) -> Result<T, ArgsError> {
    Err(ArgsError::Usage(msg.into()))
}

/// Reports bad usage found after flag parsing (exit code 2, like clap's own).
pub fn usage_error(msg: &str) -> ExitCode {
    errln!("hetch: error: {}", hetch_proto::escape_text(msg));
    ExitCode::from(2)
}

/// The configuration `input` (a subcommand's arguments) makes, or the exit code once
/// bad usage is reported.
pub fn config_of<I, T>(input: I) -> anyhow::Result<Result<T, ExitCode>>
where
    T: TryFrom<I, Error = ArgsError>,
{
    match T::try_from(input) {
        Ok(config) => Ok(Ok(config)),
        Err(ArgsError::Usage(msg)) => Ok(Err(usage_error(&msg))),
        Err(ArgsError::Failed(e)) => Err(e),
    }
}
