//! `soba completions <shell>`: prints a completion script for bash, zsh,
//! fish, elvish or PowerShell (clap_complete).

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::error::CliResult;

/// Runs `soba completions`.
pub fn cmd_completions(args: &CompletionsArgs) -> CliResult {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "soba", &mut script);
    let mut stdout = crate::output::stdout();
    stdout.write_all(&script)?;
    Ok(stdout.flush()?)
}
