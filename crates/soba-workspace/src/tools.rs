//! The agent's tools as a front door sets them up (`soba run`, the TUI):
//! the approval policy from `--auto-approve`, `--allow` and `tools.allow`,
//! the tool configuration and the workspace they are confined to.

use soba_engine::tool::{ApprovalPolicy, ToolConfig, ToolError, Workspace};

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
