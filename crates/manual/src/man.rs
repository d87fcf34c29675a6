//! `hetch man DIR`: man pages in section 1, `hetch.1` and one per subcommand, nested
//! ones included (`hetch-job-submit.1`); hidden subcommands get none.

use std::fmt;
use std::path::{Path, PathBuf};

/// `hetch man`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The directory to write the pages to (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Why the pages could not be written: the directory and the cause, on one line.
#[derive(Debug)]
pub struct ManError {
    dir: PathBuf,
    cause: std::io::Error,
}

impl fmt::Display for ManError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: cannot write man pages: {}",
            self.dir.display(),
            self.cause
        )
    }
}

impl std::error::Error for ManError {}

impl ManArgs {
    /// Writes the pages of `cmd` and its subcommands into the directory; returns the
    /// files written.
    pub fn run(&self, cmd: clap::Command) -> Result<Vec<PathBuf>, ManError> {
        let failed = |cause| ManError {
            dir: self.dir.clone(),
            cause,
        };
        std::fs::create_dir_all(&self.dir).map_err(failed)?;
        // `help` is clap's, not a command of the program: it gets no page.
        let mut cmd = cmd.disable_help_subcommand(true);
        // Building names the subcommands as their pages are named: `hetch-job-submit`.
        cmd.build();
        let mut written = Vec::new();
        write_pages(&cmd, &self.dir, &mut written).map_err(failed)?;
        Ok(written)
    }
}

/// Writes the page of `cmd`, then those of its visible subcommands, recursively.
fn write_pages(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let page = clap_mangen::Man::new(cmd.clone());
    written.push(page.generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> clap::Command {
        clap::Command::new("tool")
            .about("A tool")
            .version("1.0")
            .subcommand(clap::Command::new("alpha").about("First"))
            .subcommand(clap::Command::new("hidden").hide(true))
            .subcommand(clap::Command::new("beta").subcommand(clap::Command::new("gamma")))
    }

    #[test]
    fn one_page_per_visible_command_nested_ones_included() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new/man1");
        let written = ManArgs { dir: dir.clone() }.run(tool()).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["tool-alpha.1", "tool-beta-gamma.1", "tool-beta.1", "tool.1"]
        );
        assert_eq!(written.len(), 4);
        let page = std::fs::read_to_string(dir.join("tool-alpha.1")).unwrap();
        assert!(
            page.starts_with(".ie") || page.contains(".TH tool-alpha 1"),
            "{page}"
        );
        assert!(page.contains(".SH NAME"), "{page}");
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let dir = file.join("man1");
        let e = ManArgs { dir: dir.clone() }.run(tool()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{}: cannot write man pages: ", dir.display())),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }
}
