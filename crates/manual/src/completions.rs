//! `hetch completions SHELL`: the shell's completion script, for packages to install
//! (bash-completion's directory, zsh's `site-functions`, fish's `vendor_completions.d`)
//! or for a user to load (`source <(hetch completions bash)`).

use std::io::Write;

use clap_complete::Shell;

/// `hetch completions`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

impl CompletionsArgs {
    /// Writes the completion script of `cmd` (named `bin`) for the chosen shell to `out`.
    pub fn run(&self, mut cmd: clap::Command, bin: &str, out: &mut dyn Write) {
        clap_complete::generate(self.shell, &mut cmd, bin, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(shell: Shell) -> String {
        let cmd = clap::Command::new("tool")
            .subcommand(clap::Command::new("alpha"))
            .subcommand(clap::Command::new("beta").subcommand(clap::Command::new("gamma")));
        let mut out = Vec::new();
        CompletionsArgs { shell }.run(cmd, "tool", &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_shell_names_every_subcommand() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let s = script(shell);
            for sub in ["alpha", "beta", "gamma"] {
                assert!(s.contains(sub), "{shell}: no {sub} in\n{s}");
            }
        }
        assert!(script(Shell::Bash).contains("complete -F _tool"));
    }
}
