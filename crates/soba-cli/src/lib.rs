//! The `soba` command: clap commands, configuration, the TUI, `soba replay`
//! (a caller of the `soba-replay` crate), printing and exit codes. The only
//! crate that prints.

mod cli;
mod cmd;
mod error;
pub mod logging;
mod output;
/// The interactive agent's terminal UI (`soba` without a subcommand); public
/// so its frames can be snapshot-tested from the integration tests.
pub mod tui;

pub use error::{CliError, ErrorKind};

use error::Exit;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

/// Runs the command line `args` (program name first) and returns the exit
/// code; errors are printed to stderr here, once.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let parsed = match cli::Cli::try_parse_from(args) {
        Ok(parsed) => parsed,
        Err(err) => {
            let code = if err.use_stderr() { 2 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    match cmd::dispatch(parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => err.report(),
    }
}
