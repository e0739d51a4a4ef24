//! The session operations a front door runs on an open session (the
//! TUI's `/rewind`, `/model`, `/auto-compact`), as values: the entry to
//! append, the model that will work, the leaf moved to. The caller holds
//! the session and tells the user.

use soba_core::id::IdError;
use soba_core::{EntryBody, EntryId};
use soba_engine::EngineError;
use soba_engine::session::SessionCore;

use crate::context::Context;
use crate::error::Result;
use crate::setup::ModelSetup;

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
