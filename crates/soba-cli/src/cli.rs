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
    /// Replay transcripts under SOBA and other agents' compaction policies
    /// and report tokens, cost and what each policy kept (offline).
    Replay(ReplayArgs),
}

/// `soba replay <file|dir>` (SPEC §15).
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A transcript in any supported format, or a folder walked recursively.
    #[arg(value_name = "PATH")]
    pub path: std::path::PathBuf,
    /// Policies to replay, repeated or comma-separated: none, soba,
    /// claude-code, codex, pi, opencode, goose or <peer>@N (default: all
    /// seven).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub policy: Vec<String>,
    /// The context window in tokens (default: recorded, else the registry).
    #[arg(long, value_name = "N")]
    pub window: Option<u64>,
    /// The maximum output of every request (default: the registry, else
    /// min(32000, window / 4)).
    #[arg(long, value_name = "N")]
    pub max_output: Option<u64>,
    /// Cache pricing (default: anthropic for Claude models, openai for
    /// OpenAI models, else none).
    #[arg(long, value_name = "MODE", value_parser = ["anthropic", "openai", "none"])]
    pub cache: Option<String>,
    /// Price of a summarizer input token relative to a main-model one.
    #[arg(long, value_name = "PRICE", default_value_t = 0.33)]
    pub summarizer_price: f64,
    /// Cache lifetime in seconds between recorded requests (0: no expiry).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub cache_ttl: u64,
    /// Also run every peer with its trigger replaced by N input tokens
    /// (reported as <peer>@N).
    #[arg(long, value_name = "N")]
    pub peer_trigger: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report with a chart.
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
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
