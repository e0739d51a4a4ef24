//! The `soba` command: clap commands, one call into the workspace library
//! (`soba-workspace`) per command, the TUI (`soba-tui`) for `soba` alone,
//! `soba replay` (a caller of the `soba-replay` crate), printing and exit
//! codes.

mod cli;
mod cmd;
mod error;
pub mod logging;
mod output;

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
