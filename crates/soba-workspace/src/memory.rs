//! Project Memory (SPEC §12): the capsule of a compaction a user asked to
//! save (`soba compact --save`, `/compact --save`) mirrored to
//! `.soba/memory/<ck>.capsule.md`, redacted, when it is `full`; otherwise
//! why not. The one save both front doors call; each words the outcome.

use soba_core::render::{CapsuleView, RenderedCapsuleFile};
use soba_core::{EntryBody, EntryId, Quality};
use soba_engine::event::{CompactionEnd, Outcome};
use soba_engine::session::SessionCore;

use crate::capsule::{render_file, title_of, write_file};
use crate::error::WorkspaceError;
use crate::paths::Workspace;

/// Why a compaction's capsule is not saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotSaved {
    /// No capsule was made; `reason` is the compaction's, and `skipped`
    /// says it was skipped (a handoff saves the state as it is).
    NoCapsule {
        /// The compaction's reason, if it recorded one.
        reason: Option<String>,
        /// The compaction was skipped.
        skipped: bool,
    },
    /// The capsule is degraded (a fallback was used): only full capsules
    /// are saved.
    Degraded {
        /// The compaction's reason, if it recorded one.
        reason: Option<String>,
    },
}

/// A failure to save a capsule that was made.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The capsule the compaction appended is not in the session (a bug).
    #[error("capsule {0} was appended but is not in the session")]
    Missing(EntryId),
    /// The entry the compaction named is not a capsule (a bug).
    #[error("{0} is not a capsule entry")]
    NotACapsule(EntryId),
    /// Writing the file failed (a retry after fixing the cause can help).
    #[error(transparent)]
    Write(WorkspaceError),
}

impl From<MemoryError> for WorkspaceError {
    fn from(err: MemoryError) -> Self {
        match err {
            MemoryError::Write(err) => err,
            other => WorkspaceError::internal(other.to_string()),
        }
    }
}

/// A capsule saved to Project Memory.
#[derive(Debug)]
pub struct Saved {
    /// The capsule's id (the file is `.soba/memory/<id>.capsule.md`).
    pub id: EntryId,
    /// The rendered, redacted file.
    pub rendered: RenderedCapsuleFile,
}

/// Returns the capsule `end` made when it can be saved, else why not.
pub fn savable(end: &CompactionEnd) -> Result<&EntryId, NotSaved> {
    let (Outcome::Completed, Some(id)) = (end.outcome, &end.checkpoint_id) else {
        return Err(NotSaved::NoCapsule {
            reason: end.reason.clone(),
            skipped: end.outcome == Outcome::Skipped,
        });
    };
    if end.quality != Some(Quality::Full) {
        return Err(NotSaved::Degraded {
            reason: end.reason.clone(),
        });
    }
    Ok(id)
}

/// Writes capsule `id` of `core` to `.soba/memory/<id>.capsule.md` of
/// `workspace` (never over an existing file), its front matter naming
/// `session_id` and the current leaf.
pub fn save(
    workspace: &Workspace,
    core: &SessionCore,
    id: &EntryId,
    session_id: &str,
) -> Result<Saved, MemoryError> {
    let Some(entry) = core.entry(id) else {
        return Err(MemoryError::Missing(id.clone()));
    };
    let EntryBody::Capsule(capsule) = &entry.body else {
        return Err(MemoryError::NotACapsule(id.clone()));
    };
    let leaf = core
        .leaf()
        .map(|leaf| leaf.as_str().to_owned())
        .unwrap_or_default();
    let rendered = render_file(
        &CapsuleView::from(capsule.as_ref()),
        id.as_str(),
        &title_of(capsule, id, core.short_id_len_now()),
        session_id,
        &leaf,
        core.counter().as_ref(),
    );
    let file = workspace
        .project_dir()
        .join("memory")
        .join(format!("{id}.capsule.md"));
    write_file(&workspace.root, &file, &rendered.text, false).map_err(MemoryError::Write)?;
    Ok(Saved {
        id: id.clone(),
        rendered,
    })
}
