//! The agent's tools as a front door sets them up (`soba run`, the TUI):
//! the approval policy from `--auto-approve`, `--allow` and `tools.allow`,
//! the tool configuration and the workspace they are confined to; what a
//! run without a user to ask says of a call's result.

use soba_core::ApprovalGrants;
use soba_engine::session::SessionCore;
use soba_engine::tool::{
    ApprovalPolicy, NON_INTERACTIVE_DENIAL, ToolConfig, ToolError, ToolRegistry, Workspace,
};

use crate::config::{Source, check_tool_allow};
use crate::context::Context;
use crate::error::{Result, WorkspaceError};

/// The approval policy, tool configuration and confinement of one agent.
#[derive(Debug, Clone)]
pub struct AgentTools {
    /// Which calls run without asking.
    pub policy: ApprovalPolicy,
    /// Tool limits (the bash timeout).
    pub config: ToolConfig,
    /// The workspace the tools are confined to.
    pub workspace: Workspace,
}

/// Maps a tool-subsystem configuration error: a bad `--allow` is a usage
/// error, anything from config a configuration error.
pub fn tool_error(err: ToolError) -> WorkspaceError {
    match &err {
        ToolError::UnknownAllowName { origin, .. } if *origin == "--allow" => {
            WorkspaceError::usage(err.to_string())
        }
        _ => WorkspaceError::user(err.to_string()),
    }
}

/// Checks `--allow` (a usage error when wrong) and builds the policy, the
/// tool configuration and the confinement from it, `auto_approve` and the
/// configuration.
pub fn agent_tools(ctx: &Context, auto_approve: bool, allow: &[String]) -> Result<AgentTools> {
    check_tool_allow(allow, &Source::Flag("--allow".into()))
        .map_err(|err| WorkspaceError::usage(err.to_string()))?;
    let policy =
        ApprovalPolicy::new(auto_approve, allow, &ctx.config().tools_allow).map_err(tool_error)?;
    let config = ToolConfig::default()
        .with_bash_timeout_ms(ctx.config().bash_timeout_ms)
        .map_err(tool_error)?;
    let workspace = Workspace::new(&ctx.workspace.root).map_err(tool_error)?;
    Ok(AgentTools {
        policy,
        config,
        workspace,
    })
}

/// What became of a session's recorded "always" answers on resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedGrants {
    /// None were recorded.
    None,
    /// They hold again, as SPEC §11.1 has it: they last as long as the
    /// session.
    Restored(ApprovalGrants),
    /// The log lives outside the sessions folder (`-r ./some.jsonl`), where
    /// anyone who shared or planted the file wrote its grants: soba asks
    /// again. The string is the note to show.
    Ignored(String),
}

/// Returns the grants a resumed session may restore: those its log
/// recorded, when the log is one of the sessions folder's own.
pub fn recorded_grants(ctx: &Context, core: &SessionCore) -> RecordedGrants {
    let Some(recorded) = core.derived().approvals else {
        return RecordedGrants::None;
    };
    if recorded.is_empty() {
        return RecordedGrants::None;
    }
    let folder = std::fs::canonicalize(&ctx.locations.sessions_dir).ok();
    let log_folder = core
        .log_path()
        .parent()
        .and_then(|parent| std::fs::canonicalize(parent).ok());
    if folder.is_some() && folder == log_folder && owned_by_the_folder(core.log_path()) {
        return RecordedGrants::Restored(recorded);
    }
    RecordedGrants::Ignored(format!(
        "{} is outside the sessions folder (or a link to a file elsewhere), so the \"always\" answers it records were not restored: soba asks again",
        core.log_path().display()
    ))
}

/// Returns whether the log is a file of its own folder: not a symbolic
/// link, and not a hard link to a file that lives elsewhere too.
fn owned_by_the_folder(log: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(log).is_ok_and(|meta| meta.file_type().is_file() && meta.nlink() == 1)
}

/// Returns what a run without a user to ask (`soba run`) says of a tool
/// call's result: `ok (N bytes)`; the non-interactive denial when the
/// tool needs an approval `policy` does not give; else `error (N bytes)`.
pub fn result_verdict(
    tools: &ToolRegistry,
    policy: &ApprovalPolicy,
    name: &str,
    is_error: bool,
    bytes: usize,
) -> String {
    let needs_approval = tools.get(name).is_some_and(|tool| tool.needs_approval());
    if !is_error {
        format!("ok ({bytes} bytes)")
    } else if needs_approval && !policy.covers(name) {
        NON_INTERACTIVE_DENIAL.to_owned()
    } else {
        format!("error ({bytes} bytes)")
    }
}
