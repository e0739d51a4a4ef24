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
pub enum Command {
    /// Print every token limit for bare numbers, a model or a session.
    Budget(BudgetArgs),
    /// Run the whole compaction engine offline on a session SOBA generates.
    Demo(DemoArgs),
}

/// `soba demo`: a scripted coding session in a temporary directory.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the session, flight records and workspace in DIR (created if
    /// missing, must be empty) instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<std::path::PathBuf>,
    /// The generator's seed (the same seed gives the same session).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Print every engine event as one JSON object per line instead.
    #[arg(long)]
    pub json: bool,
}

/// `soba budget`: the limits for `--context-window N --max-output N`, a
/// registry model (`--model ID`) or a session (`--session ID`).
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("budget_source").required(true).multiple(true)
    .args(["context_window", "model", "session"])))]
pub struct BudgetArgs {
    /// The model's context window in tokens (with --max-output).
    #[arg(long, value_name = "N", requires = "max_output", conflicts_with = "model")]
    pub context_window: Option<u64>,
    /// The max_tokens sent with every request, thinking included.
    #[arg(long, value_name = "N", requires = "context_window")]
    pub max_output: Option<u64>,
    /// A model id from the registry (provider/model).
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// A session id: its model's limits and its measured effective tokens.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Override a setting (repeatable): compaction.<key>=VALUE, or a model limit
    /// models.<id>.contextWindow|maxOutputTokens|tokenizer=VALUE.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
}
