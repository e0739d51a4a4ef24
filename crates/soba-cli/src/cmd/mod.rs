//! One `cmd_*` function per subcommand, and the dispatcher.

mod budget;
mod demo;
mod replay;

use crate::cli::{Cli, Command};
use crate::error::{CliError, CliResult};

/// Runs the parsed command line.
pub fn dispatch(cli: Cli) -> CliResult {
    match cli.command {
        Some(command) => match command {
            Command::Budget(args) => budget::cmd_budget(&args),
            Command::Demo(args) => demo::cmd_demo(&args),
            Command::Replay(args) => replay::cmd_replay(&args, &cli.global.set),
        },
        None => Err(CliError::user("the interactive agent is not built yet")
            .hint("run `soba --help` for the commands available")),
    }
}
