//! The session operations a front door runs on an open session (the
//! TUI's `/rewind`, `/model`, `/auto-compact`; resuming a session on a
//! model; saving a reply a signal cut off), as values: the entry to
//! append, the model that will work, the leaf moved to. The caller holds
//! the session and tells the user.

use std::path::Path;

use soba_core::id::IdError;
use soba_core::{Block, EntryBody, EntryId, Message, Role};
use soba_engine::EngineError;
use soba_engine::session::SessionCore;
use soba_engine::tool::ToolRegistry;

use crate::context::Context;
use crate::error::Result;
use crate::setup::{self, ModelSetup, WindowSource};

/// Opens the session at `path` to work on `setup`'s model, appending a
/// `model_change` entry when the model it last used is another (`soba run
/// -c`, `-r`, the TUI's resume). Returns the session and the diagnostics
/// of its log.
pub fn resume_on(
    ctx: &Context,
    path: &Path,
    setup: &ModelSetup,
    tools: &ToolRegistry,
) -> Result<(SessionCore, Vec<String>)> {
    let (mut core, diagnostics) = setup::open_session(ctx, path, setup, tools)?;
    if setup::session_model(core.path()).as_deref() != Some(setup.info.id.as_str()) {
        core.append(EntryBody::ModelChange {
            model: setup.info.id.clone(),
        })?;
    }
    Ok((core, diagnostics))
}

/// Returns the line saying the model's window came from its server, or
/// none when the registry or the config gave it.
pub fn server_window_line(setup: &ModelSetup) -> Option<String> {
    match &setup.window_source {
        WindowSource::Server(source) => Some(format!(
            "context window {} tokens, from the server ({source})",
            soba_core::tokens::group_thousands(setup.info.context_window)
        )),
        _ => None,
    }
}

/// Appends `partial`, the reply a signal (`SIGINT`, …) cut off, as an
/// assistant message on the session's model ending in a mark saying so,
/// which the model's next input then shows. Returns the characters saved.
pub fn append_interrupted_reply(
    core: &mut SessionCore,
    partial: String,
    signal: &str,
) -> Result<usize> {
    let chars = partial.chars().count();
    let mark = format!("[interrupted by {signal}: the reply was cut off here]");
    let mut message = Message::new(
        Role::Assistant,
        vec![Block::Text(partial), Block::Text(mark)],
    );
    message.model = Some(core.model_id().to_owned());
    core.append_message(message)?;
    Ok(chars)
}

/// Returns the entry that turns auto-compaction on or off.
pub fn auto_compact(on: bool) -> EntryBody {
    EntryBody::ConfigChange {
        auto_compact: Some(on),
        approvals: None,
    }
}

/// Returns the line confirming an appended [`auto_compact`] entry.
pub fn auto_compact_line(on: bool) -> String {
    format!(
        "auto-compact {}{}",
        if on { "on" } else { "off" },
        if on {
            ""
        } else {
            ": only hard_limit and context overflow compact now"
        }
    )
}

/// Resolves model `id` with everything it needs checked (limits, its key,
/// its client), before the log says anything: a switch that cannot work
/// leaves the session as it is.
pub fn usable_model(ctx: &Context, id: &str) -> Result<ModelSetup> {
    let setup = ModelSetup::resolve(ctx, id)?;
    setup.budget(ctx)?;
    setup.client(ctx)?;
    Ok(setup)
}

/// Why a rewind moved nothing.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The target is not an entry id.
    #[error(transparent)]
    Id(#[from] IdError),
    /// The session refused (no such entry) or could not append the leaf.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Moves the leaf of `core` to entry `leaf` (a `leaf` record appended;
/// files on disk are unchanged) and returns the target.
pub fn rewind(core: &mut SessionCore, leaf: &str) -> std::result::Result<EntryId, RewindError> {
    let target = EntryId::parse(leaf)?;
    core.rewind(target.clone())?;
    Ok(target)
}
