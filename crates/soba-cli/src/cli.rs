//! The command-line grammar (clap derive). Each subcommand has a `FooArgs`
//! struct here and a `cmd_foo` in `cmd/`.

use clap::{Parser, Subcommand};

/// SOBA: a local-first coding agent whose context management never silently
/// loses work.
#[derive(Debug, Parser)]
#[command(name = "soba", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand; none starts the interactive agent.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {}
