//! The command-line grammar (clap derive). Each subcommand has a `FooArgs`
//! struct here and a `cmd_foo` in `cmd/`.

use clap::{Parser, Subcommand};

/// SOBA: a local-first coding agent whose context management never silently
/// loses work.
#[derive(Debug, Parser)]
#[command(name = "soba", version, long_about = None)]
pub struct Cli {
    /// The subcommand; none starts the interactive agent.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options every command accepts.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Options of the interactive agent (no subcommand).
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Options of the interactive agent, `soba` without a subcommand (SPEC §11.3).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentArgs {
    /// Resume the workspace's most recent session.
    #[arg(short = 'c', long = "continue", conflicts_with = "resume")]
    pub continue_session: bool,
    /// Resume a session by id or id prefix; without an id, pick one from a list.
    #[arg(short = 'r', long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// The model as provider/model (overrides SOBA_MODEL and config).
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// Run every tool without asking.
    #[arg(long)]
    pub auto_approve: bool,
    /// Tools that run without asking: bash, write (write_file and
    /// edit_file), edit; comma-separated or repeated.
    #[arg(long, value_name = "TOOLS")]
    pub allow: Vec<String>,
}

/// Options every command accepts (SPEC §11.5, §14).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GlobalArgs {
    /// Override a setting, after every other source (repeatable), e.g.
    /// --set compaction.keepRecentTokens=30000 or
    /// --set 'models."ollama/qwen3".contextWindow=32768'.
    #[arg(long = "set", value_name = "PATH=VALUE", global = true)]
    pub set: Vec<String>,
    /// The workspace root (default: the current directory).
    #[arg(long, value_name = "DIR", global = true)]
    pub cwd: Option<std::path::PathBuf>,
    /// The sessions directory (default: sessions/<project-slug>/ under
    /// $SOBA_HOME or $XDG_DATA_HOME/soba).
    #[arg(long, value_name = "DIR", global = true)]
    pub session_dir: Option<std::path::PathBuf>,
}

impl GlobalArgs {
    /// Returns what the flags tell the workspace library.
    pub fn options(&self) -> soba_workspace::Options {
        soba_workspace::Options {
            cwd: self.cwd.clone(),
            session_dir: self.session_dir.clone(),
            set: self.set.clone(),
        }
    }
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every token limit for bare numbers, a model or a session.
    Budget(BudgetArgs),
    /// Run the whole compaction engine offline on a session SOBA generates.
    Demo(DemoArgs),
    /// Run one turn non-interactively: assistant text on stdout, tool calls
    /// and compactions on stderr.
    Run(RunArgs),
    /// Import transcripts of other agents (pi, Claude Code, Codex, …) as
    /// SOBA sessions.
    Import(ImportArgs),
    /// List the workspace's sessions.
    Sessions(SessionsArgs),
    /// Summarize one session, list its entries or validate it.
    Show(ShowArgs),
    /// Aggregate the flight records of the workspace's compactions.
    Stats(StatsArgs),
    /// Compact a session now, as /compact does.
    Compact(CompactArgs),
    /// List, export, load or create portable capsules (.capsule.md).
    Capsule(CapsuleArgs),
    /// Print the merged configuration or its JSON Schema.
    Config(ConfigArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
    /// Replay transcripts under SOBA and other agents' compaction policies
    /// and report tokens, cost and what each policy kept (offline).
    Replay(Box<ReplayArgs>),
}

/// `soba replay [file|dir]` (SPEC §15).
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A transcript in any supported format, or a folder walked
    /// recursively. Without it (or with --discover), the sessions of Claude
    /// Code, Codex, pi and Gemini CLI are found in their standard places.
    #[arg(value_name = "PATH", conflicts_with = "discover")]
    pub path: Option<std::path::PathBuf>,
    /// Find the sessions of every supported agent in their standard places
    /// (what no PATH does).
    #[arg(long)]
    pub discover: bool,
    /// Only these agents' sessions, repeated or comma-separated:
    /// claude-code, codex, pi, gemini, opencode.
    #[arg(long, value_name = "AGENT", value_delimiter = ',')]
    pub agent: Vec<String>,
    /// Only sessions started on or after this day (YYYY-MM-DD, local time).
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Only sessions started on or before this day (YYYY-MM-DD, local time).
    #[arg(long, value_name = "DATE")]
    pub until: Option<String>,
    /// Only sessions run in this folder or under it (an absolute path), or
    /// whose folder contains this text.
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
    /// Threads replaying files at once (default and most: one per core).
    #[arg(long, short = 'j', value_name = "N", default_value_t = 0)]
    pub threads: usize,
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
    /// How the table shows cost: dollars (at built-in list prices, next to
    /// billed-equivalent tokens; the default) or tokens alone.
    #[arg(long, value_name = "UNIT", value_parser = ["dollars", "tokens"], default_value = "dollars")]
    pub cost: String,
    /// Group a run of several sessions: one row per session, per day,
    /// ISO week or month (local time) or per project (working folder).
    #[arg(long, value_name = "GROUP", value_parser = ["session", "day", "week", "month", "project"], default_value = "session")]
    pub by: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report: a summary, the groups by
    /// project and day, and one chart per session.
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
    /// Also write every policy's model input at the last request of each
    /// fifth of every trace, as JSON lines (see the user guide).
    #[arg(long, value_name = "FILE")]
    pub dump_inputs: Option<std::path::PathBuf>,
}

/// `soba run "<prompt>"` (SPEC §11.4).
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The prompt: one real user message.
    #[arg(value_name = "PROMPT")]
    pub prompt: String,
    /// The model as provider/model (overrides SOBA_MODEL and config).
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// Run every tool without approval.
    #[arg(long)]
    pub auto_approve: bool,
    /// Tools that run without approval: bash, write (write_file and
    /// edit_file), edit; comma-separated or repeated.
    #[arg(long, value_name = "TOOLS")]
    pub allow: Vec<String>,
    /// Write the engine's events to stdout as JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run the turn in the workspace's most recent session.
    #[arg(short = 'c', long = "continue", conflicts_with = "resume")]
    pub continue_session: bool,
    /// Run the turn in the session with this id (or id prefix), as
    /// `soba -r ID` resumes it.
    #[arg(short = 'r', long, value_name = "ID")]
    pub resume: Option<String>,
}

/// `soba import <file|dir>` (SPEC §3.4).
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A transcript file, or a folder walked recursively.
    #[arg(value_name = "PATH")]
    pub path: std::path::PathBuf,
    /// Write the sessions here instead of the workspace's sessions folder.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// Report only; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON array with one object per imported session.
    #[arg(long)]
    pub json: bool,
}

/// `soba sessions`.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    /// Print one JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// List unused sessions too (opened and left without a message).
    #[arg(long)]
    pub all: bool,
}

/// `soba show [session]`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A session id, id prefix, or the path of a session file; default the
    /// workspace's most recent session.
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,
    /// List every entry, one line each, with short ids.
    #[arg(long)]
    pub entries: bool,
    /// Validate every line; exit 1 when the log is damaged.
    #[arg(long)]
    pub check: bool,
}

/// `soba stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Only this session (id or prefix); default every session of the workspace.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `soba compact [--session ID] [--save] [instructions]`.
#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// The session (id or prefix); default the workspace's most recent.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Also mirror the capsule to .soba/memory/ when its quality is full.
    #[arg(long)]
    pub save: bool,
    /// The model whose limits apply (default: the session's model).
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// Instructions for the summary, e.g. "keep the API decisions".
    /// Options may come after it (`soba compact "keep the API" --save`).
    #[arg(value_name = "INSTRUCTIONS")]
    pub instructions: Vec<String>,
}

/// `soba capsule …` (SPEC §12).
#[derive(Debug, clap::Args)]
pub struct CapsuleArgs {
    /// What to do; `soba capsule` alone is `soba capsule list`.
    #[command(subcommand)]
    pub action: Option<CapsuleAction>,
    /// The session (id or prefix); default the workspace's most recent.
    #[arg(long, value_name = "ID", global = true)]
    pub session: Option<String>,
    /// The model whose limits apply (default: the session's model).
    #[arg(long, value_name = "ID", global = true)]
    pub model: Option<String>,
}

/// The capsule subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum CapsuleAction {
    /// List the session's capsules and the project's capsule files.
    List,
    /// Render an existing capsule to a .capsule.md file (redacted).
    Export {
        /// The capsule's checkpoint id (short form accepted, e.g. ck_7f3a).
        #[arg(value_name = "CK")]
        checkpoint: String,
        /// The file to write (relative paths are inside the workspace); `-`
        /// writes to standard output.
        #[arg(value_name = "PATH")]
        path: std::path::PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Load a .capsule.md into the session as untrusted context.
    Load {
        /// The file to load.
        #[arg(value_name = "PATH")]
        path: std::path::PathBuf,
    },
    /// Write a handoff capsule of the whole live context to
    /// .soba/capsules/<date>-<title>.capsule.md.
    Create {
        /// The capsule's title.
        #[arg(value_name = "TITLE")]
        title: String,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
}

/// `soba config show|schema`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// What to print.
    #[command(subcommand)]
    pub action: ConfigAction,
}

/// The config subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// Print every setting with its value and, when not the default, its source.
    Show {
        /// Print {"config": …, "sources": …} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of config.json.
    Schema,
}

/// `soba completions <shell>`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `soba demo`: a scripted coding session in a temporary directory.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the workspace in DIR/workspace (DIR created if missing, must be
    /// empty) and the session in that workspace's sessions folder, where
    /// `soba show` run there finds it, instead of a temporary directory.
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
/// registry model (`--model ID`) or a session (`--session ID`); with none
/// of them, the workspace's most recent session, else the configured model.
#[derive(Debug, clap::Args)]
pub struct BudgetArgs {
    /// The model's context window in tokens (with --max-output).
    #[arg(
        long,
        value_name = "N",
        requires = "max_output",
        conflicts_with = "model"
    )]
    pub context_window: Option<u64>,
    /// The max_tokens sent with every request, thinking included.
    #[arg(long, value_name = "N", requires = "context_window")]
    pub max_output: Option<u64>,
    /// A model id from the registry (provider/model); with --session, the
    /// model whose limits apply instead of the session's own.
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// A session id: its model's limits and its measured effective tokens.
    #[arg(long, value_name = "ID", conflicts_with_all = ["context_window", "max_output"])]
    pub session: Option<String>,
    /// Override a setting (repeatable): compaction.<key>=VALUE, or a model limit
    /// models.<id>.contextWindow|maxOutputTokens|tokenizer=VALUE.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn compact_options_may_follow_the_instructions() {
        let cli = Cli::try_parse_from([
            "soba",
            "compact",
            "focus on tests",
            "--save",
            "--session-dir",
            "/tmp/s",
        ])
        .unwrap();
        let Some(Command::Compact(args)) = cli.command else {
            panic!("not compact");
        };
        assert!(args.save);
        assert_eq!(args.instructions, ["focus on tests"]);
        assert_eq!(
            cli.global.session_dir.as_deref(),
            Some(std::path::Path::new("/tmp/s"))
        );
    }
}
