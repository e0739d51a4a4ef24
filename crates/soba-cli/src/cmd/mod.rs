//! One `cmd_*` function per subcommand, and the dispatcher.

mod budget;
pub(crate) mod capsule;
mod compact;
mod completions;
mod config;
mod demo;
mod import;
mod replay;
mod run;
pub(crate) mod sessions;
mod show;
mod stats;

use crate::cli::{Cli, Command};
use crate::error::CliResult;

/// Runs the parsed command line.
pub fn dispatch(cli: Cli) -> CliResult {
    match cli.command {
        Some(command) => match command {
            Command::Budget(args) => budget::cmd_budget(&args, &cli.global),
            Command::Demo(args) => demo::cmd_demo(&args),
            Command::Run(args) => run::cmd_run(&args, &cli.global),
            Command::Import(args) => import::cmd_import(&args, &cli.global),
            Command::Sessions(args) => sessions::cmd_sessions(&args, &cli.global),
            Command::Show(args) => show::cmd_show(&args, &cli.global),
            Command::Stats(args) => stats::cmd_stats(&args, &cli.global),
            Command::Compact(args) => compact::cmd_compact(&args, &cli.global),
            Command::Capsule(args) => capsule::cmd_capsule(&args, &cli.global),
            Command::Config(args) => config::cmd_config(&args, &cli.global),
            Command::Completions(args) => completions::cmd_completions(&args),
            Command::Replay(args) => replay::cmd_replay(&args, &cli.global),
        },
        None => crate::tui::cmd_interactive(&cli.agent, &cli.global),
    }
}
