//! The agent's tools (SPEC §11.1): file tools confined to the workspace
//! root, `bash`, `checkpoint`, the registry that describes them to the model
//! and runs them, and the approval gate in front of `bash`, `write_file` and
//! `edit_file`.
//!
//! A tool never fails the turn: every problem, from a bad argument to a
//! workspace escape, becomes a [`ToolOutcome`] with `is_error` set and a
//! message that tells the model what to do instead.

mod approval;
mod args;
mod bash;
mod checkpoint;
mod edit;
mod list;
mod plain_line;
mod plan;
mod read;
mod search;
mod walk;
mod workspace;
mod write;

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;
use soba_core::{CheckpointKind, ResultPart, ToolInput, ToolResult, ToolUse};
use tokio_util::sync::CancellationToken;

pub use approval::{
    ALLOW_NAMES, ApprovalDecision, ApprovalFuture, ApprovalPolicy, ApprovalRequest,
    ApprovalVerdict, Approvals, ApprovedBy, Approver, NON_INTERACTIVE_DENIAL, USER_DENIAL,
};
pub use bash::Bash;
pub use checkpoint::Checkpoint;
pub use edit::EditFile;
pub use list::ListFiles;
pub use plan::UpdatePlan;
pub use read::ReadFile;
pub use search::Search;
pub use workspace::Workspace;
pub use write::WriteFile;

/// Default `bash` timeout, `tools.bash.timeoutMs` (SPEC §19).
pub const BASH_DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Largest `bash` timeout a call or the configuration may ask for.
pub const BASH_MAX_TIMEOUT_MS: u64 = 600_000;
/// Bytes of combined `bash` output kept at each end (first and last 512 KiB).
pub const BASH_CAPTURE_BYTES: usize = 512 * 1024;
/// Lines `read_file` returns when no `limit` is given.
pub const READ_DEFAULT_LINES: usize = 2_000;
/// Files larger than this are read only with a line range; it also caps the
/// text one `read_file` call returns.
pub const READ_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Entries `list_files` and matches `search` return before a `… N more` line.
pub const MAX_LISTED: usize = 1_000;

/// What went wrong in the tool subsystem: path confinement, arguments and
/// configuration. Inside a tool call these become error results for the
/// model; only [`Workspace::new`], [`ToolConfig`] and [`ApprovalPolicy`]
/// return them to the caller.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The workspace root cannot be canonicalised (missing, unreadable);
    /// fix `--cwd`, retrying does not help.
    #[error("cannot open the workspace root {path}")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// The workspace root is a file, not a directory.
    #[error("the workspace root {path} is not a directory")]
    RootNotDirectory {
        /// The canonical root.
        path: PathBuf,
    },
    /// A tool was given an empty path.
    #[error("the path is empty; pass a path relative to the workspace root")]
    EmptyPath,
    /// The path lies outside the root (`..`, or an absolute path elsewhere).
    #[error(
        "`{path}` is outside the workspace root {root}; soba reads and writes workspace files only inside it"
    )]
    OutsideWorkspace {
        /// The path as given.
        path: String,
        /// The canonical root.
        root: PathBuf,
    },
    /// The path is inside the root by name but a symlink on it points
    /// outside.
    #[error(
        "`{path}` resolves through a symlink to {target}, outside the workspace root {root}; soba reads and writes workspace files only inside it"
    )]
    SymlinkEscape {
        /// The path as given.
        path: String,
        /// Where the symlink leads (the nearest existing ancestor, canonical).
        target: PathBuf,
        /// The canonical root.
        root: PathBuf,
    },
    /// The path passed the name check, but a folder on it was replaced by a
    /// symlink leading out of the root before the file was opened (another
    /// program moving files during the call). Nothing was read or written
    /// through it; a retry helps once the path stays put.
    #[error(
        "`{path}` changed during the call: a folder on it was replaced by a symbolic link leading out of the workspace root {root} between soba's check and its open, so soba refused it and read or wrote nothing through it; retry the call, and if this repeats, another program is moving files there"
    )]
    ChangedDuringCall {
        /// The path as given.
        path: String,
        /// The canonical root.
        root: PathBuf,
    },
    /// `write_file` was given a path ending in `/`, which names a folder.
    #[error(
        "`{path}` ends in `/`, so it names a folder, not a file; write_file writes files: give the file's path without the trailing `/` (folders are created as needed)"
    )]
    NamesFolder {
        /// The path as given.
        path: String,
    },
    /// The path is, or goes through, a symlink whose target does not exist;
    /// writing through it would create a file wherever it points.
    #[error(
        "`{path}` is or goes through a dangling symlink under the workspace root {root}; refusing to follow it"
    )]
    DanglingSymlink {
        /// The path as given.
        path: String,
        /// The canonical root.
        root: PathBuf,
    },
    /// A file to be written has several hard links: another link may live
    /// outside the root and would change too.
    #[error(
        "`{path}` has {links} hard links, so writing it could change a file outside the workspace root {root}; refusing to write through a hard link (copy the file to break the link first)"
    )]
    HardLink {
        /// The path as given.
        path: String,
        /// The link count.
        links: u64,
        /// The canonical root.
        root: PathBuf,
    },
    /// Nothing exists at the path.
    #[error("no such file or directory: `{path}`")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// A file tool was pointed at a directory.
    #[error("`{path}` is a directory; use list_files to see what it holds")]
    IsDirectory {
        /// The path as given.
        path: String,
    },
    /// The path names a FIFO, socket or device where a regular file is
    /// expected; it is refused without being opened for long (a FIFO would
    /// wait for a writer). Not retryable with the same path.
    #[error(
        "`{path}` is {kind}, not a regular file; file tools read and write regular files only (use bash for special files)"
    )]
    NotRegular {
        /// The path as given.
        path: String,
        /// What it is.
        kind: soba_store::untrusted::FileKind,
    },
    /// Any other I/O failure on a path (permissions, a symlink loop); a
    /// retry helps only if the cause goes away.
    #[error("cannot access `{path}`")]
    Io {
        /// The path as given.
        path: String,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// A tool's arguments do not match its schema.
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments {
        /// The tool's name.
        tool: &'static str,
        /// What is wrong and what to send instead.
        message: String,
    },
    /// An `--allow` or `tools.allow` entry names no tool that needs approval.
    #[error(
        "unknown tool `{name}` in {origin}: use bash, write (write_file and edit_file) or edit (edit_file)"
    )]
    UnknownAllowName {
        /// The entry as given.
        name: String,
        /// Where it came from (`--allow` or `tools.allow`).
        origin: &'static str,
    },
    /// `tools.bash.timeoutMs` is 0 or above the 600,000 ms maximum.
    #[error("tools.bash.timeoutMs must be between 1 and {BASH_MAX_TIMEOUT_MS}, got {value}")]
    InvalidTimeout {
        /// The configured value.
        value: u64,
    },
}

impl ToolError {
    /// Returns the message with its chain of causes, as a tool result shows
    /// it.
    pub fn to_content(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }
}

/// Settings of the tools that come from configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolConfig {
    bash_timeout: Duration,
}

impl Default for ToolConfig {
    fn default() -> Self {
        ToolConfig {
            bash_timeout: Duration::from_millis(BASH_DEFAULT_TIMEOUT_MS),
        }
    }
}

impl ToolConfig {
    /// Sets the default `bash` timeout (`tools.bash.timeoutMs`); it must be
    /// between 1 and 600,000 ms.
    pub fn with_bash_timeout_ms(mut self, timeout_ms: u64) -> Result<Self, ToolError> {
        if timeout_ms == 0 || timeout_ms > BASH_MAX_TIMEOUT_MS {
            return Err(ToolError::InvalidTimeout { value: timeout_ms });
        }
        self.bash_timeout = Duration::from_millis(timeout_ms);
        Ok(self)
    }

    /// Returns the default `bash` timeout.
    pub fn bash_timeout(&self) -> Duration {
        self.bash_timeout
    }
}

/// What a tool call runs with: the workspace, the configuration and the
/// turn's cancellation token.
#[derive(Debug, Clone)]
pub struct ToolContext {
    workspace: Workspace,
    config: ToolConfig,
    cancel: CancellationToken,
}

impl ToolContext {
    /// Builds a context; cancelling `cancel` stops running tools (`bash`
    /// kills its process group).
    pub fn new(workspace: Workspace, config: ToolConfig, cancel: CancellationToken) -> Self {
        ToolContext {
            workspace,
            config,
            cancel,
        }
    }

    /// Returns the workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Returns the configuration.
    pub fn config(&self) -> &ToolConfig {
        &self.config
    }

    /// Returns the cancellation token.
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }
}

/// Something a tool asks the engine to do besides returning its text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolEffect {
    /// Append a `checkpoint` entry (the `checkpoint` tool).
    Checkpoint {
        /// Milestone or plan pivot.
        kind: CheckpointKind,
        /// The model's note.
        note: String,
    },
}

/// The result of one tool call, as it goes into the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text shown to the model (after the tool's own capture caps).
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// What the engine must do besides logging the result.
    pub effect: Option<ToolEffect>,
}

impl ToolOutcome {
    /// Returns a successful outcome.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: false,
            effect: None,
        }
    }

    /// Returns a failed outcome.
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: true,
            effect: None,
        }
    }

    /// Returns the outcome as the tool result answering `tool_use_id`.
    pub fn to_result(&self, tool_use_id: impl Into<String>) -> ToolResult {
        ToolResult {
            tool_use_id: tool_use_id.into(),
            content: vec![ResultPart::Text(self.content.clone())],
            is_error: self.is_error,
        }
    }
}

impl From<ToolError> for ToolOutcome {
    fn from(error: ToolError) -> Self {
        ToolOutcome::error(error.to_content())
    }
}

/// A boxed tool future, so tools can live in a registry as trait objects.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'a>>;

/// One tool the model can call.
pub trait Tool: Send + Sync {
    /// Returns the name the model calls it by.
    fn name(&self) -> &'static str;

    /// Returns the description sent to the model.
    fn description(&self) -> &'static str;

    /// Returns the JSON Schema of the arguments.
    fn input_schema(&self) -> Value;

    /// Returns whether a call needs approval (SPEC §11.1).
    fn needs_approval(&self) -> bool {
        false
    }

    /// Runs one call. Failures are outcomes with `is_error` set.
    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a>;
}

/// A tool's description as a request carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// The tool's name.
    pub name: &'static str,
    /// What it does and when to use it.
    pub description: &'static str,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
}

/// The tools available to the agent.
pub struct ToolRegistry {
    tools: Vec<Box<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tools.iter().map(|tool| tool.name()))
            .finish()
    }
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::builtin()
    }
}

impl ToolRegistry {
    /// Returns an empty registry.
    pub fn empty() -> Self {
        ToolRegistry { tools: Vec::new() }
    }

    /// Returns the built-in tools of SPEC §11.1, in a fixed order.
    pub fn builtin() -> Self {
        let mut registry = Self::empty();
        registry.register(Box::new(ReadFile));
        registry.register(Box::new(WriteFile));
        registry.register(Box::new(EditFile));
        registry.register(Box::new(ListFiles));
        registry.register(Box::new(Search));
        registry.register(Box::new(Bash));
        registry.register(Box::new(Checkpoint));
        registry.register(Box::new(UpdatePlan));
        registry
    }

    /// Adds a tool, replacing one of the same name.
    pub fn register(&mut self, tool: Box<dyn Tool>) {
        match self
            .tools
            .iter_mut()
            .find(|known| known.name() == tool.name())
        {
            Some(slot) => *slot = tool,
            None => self.tools.push(tool),
        }
    }

    /// Returns a tool by name.
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|tool| tool.name() == name)
            .map(|tool| tool.as_ref())
    }

    /// Returns the names of the tools, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }

    /// Returns the schemas to send with a request.
    pub fn tool_schemas(&self) -> Vec<ToolSchema> {
        self.tools
            .iter()
            .map(|tool| ToolSchema {
                name: tool.name(),
                description: tool.description(),
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    /// Runs one call: finds the tool, checks approval (waiting for the user
    /// when the gate asks), then calls it. Unknown tools, unparseable
    /// arguments, denials and cancellation give error outcomes.
    pub async fn execute(
        &self,
        call: &ToolUse,
        ctx: &ToolContext,
        approvals: &Approvals,
    ) -> ToolOutcome {
        let Some(tool) = self.get(&call.name) else {
            return ToolOutcome::error(format!(
                "unknown tool `{}`; the available tools are {}",
                call.name,
                self.names().join(", ")
            ));
        };
        if call.input.raw().is_some() && call.input.object().is_empty() {
            return ToolOutcome::error(format!(
                "the arguments of {} are not a JSON object; send an object matching its schema",
                tool.name()
            ));
        }
        if ctx.cancel().is_cancelled() {
            return ToolOutcome::error("cancelled before the tool ran");
        }
        let verdict = tokio::select! {
            verdict = approvals.check(tool, &call.input) => verdict,
            () = ctx.cancel().cancelled() => return ToolOutcome::error("cancelled while waiting for approval"),
        };
        if let ApprovalVerdict::Denied(message) = verdict {
            return ToolOutcome::error(message);
        }
        if ctx.cancel().is_cancelled() {
            return ToolOutcome::error("cancelled before the tool ran");
        }
        tool.call(&call.input, ctx).await
    }
}

/// Runs blocking file work on tokio's blocking pool.
async fn run_blocking<F>(work: F) -> ToolOutcome
where
    F: FnOnce() -> ToolOutcome + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(outcome) => outcome,
        Err(error) => ToolOutcome::error(format!("the tool stopped unexpectedly: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_checks_the_bash_timeout() {
        assert_eq!(
            ToolConfig::default().bash_timeout(),
            Duration::from_secs(120)
        );
        let config = ToolConfig::default().with_bash_timeout_ms(600_000).unwrap();
        assert_eq!(config.bash_timeout(), Duration::from_secs(600));
        let error = ToolConfig::default()
            .with_bash_timeout_ms(600_001)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "tools.bash.timeoutMs must be between 1 and 600000, got 600001"
        );
        assert!(ToolConfig::default().with_bash_timeout_ms(0).is_err());
    }

    #[test]
    fn error_content_includes_the_cause() {
        let error = ToolError::Io {
            path: "a".into(),
            source: io::Error::other("boom"),
        };
        assert_eq!(error.to_content(), "cannot access `a`: boom");
    }

    #[test]
    fn registry_lists_builtin_tools_in_order() {
        let registry = ToolRegistry::builtin();
        assert_eq!(
            registry.names(),
            [
                "read_file",
                "write_file",
                "edit_file",
                "list_files",
                "search",
                "bash",
                "checkpoint",
                "update_plan"
            ]
        );
        for schema in registry.tool_schemas() {
            assert_eq!(schema.input_schema["type"], "object", "{}", schema.name);
            assert!(!schema.description.is_empty());
        }
        let needing: Vec<_> = registry
            .names()
            .into_iter()
            .filter(|name| registry.get(name).is_some_and(|t| t.needs_approval()))
            .collect();
        assert_eq!(needing, ["write_file", "edit_file", "bash"]);
    }
}
