//! Skills (`.soba/skills/<name>.md`, `/skill NAME [off]`): the entry that
//! activates or deactivates one, read beneath the workspace root, or why
//! none is appended.

use sha2::{Digest, Sha256};
use soba_core::entry::{SkillAction, SkillEntry};

use crate::paths::Workspace;
use crate::setup::{SKILL_MAX_BYTES, WorkspaceReadError, read_workspace_file};

/// Why a skill change appends nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillRefusal {
    /// Deactivating a skill that is not active.
    #[error("skill {name} is not active")]
    NotActive {
        /// The skill's name.
        name: String,
    },
    /// Activating the text that is already active.
    #[error("skill {name} is already active")]
    AlreadyActive {
        /// The skill's name.
        name: String,
    },
    /// The file is not UTF-8 text.
    #[error(
        "skill {name} was not activated: it is not UTF-8 text; skills are markdown files in .soba/skills/"
    )]
    NotUtf8 {
        /// The skill's name.
        name: String,
    },
    /// The file is over [`SKILL_MAX_BYTES`].
    #[error(
        "skill {name} was not activated: it is {size} bytes, over {SKILL_MAX_BYTES}; keep skills short"
    )]
    TooLarge {
        /// The skill's name.
        name: String,
        /// Its size in bytes, as far as read.
        size: u64,
    },
    /// There is no such file.
    #[error(
        "skill {name} was not activated: there is no .soba/skills/{name}.md (skills are markdown files in .soba/skills/)"
    )]
    Missing {
        /// The skill's name.
        name: String,
    },
    /// The file was refused (a link leading out, a FIFO) or unreadable.
    #[error("skill {name} was not activated: {why} (skills are markdown files in .soba/skills/)")]
    Unreadable {
        /// The skill's name.
        name: String,
        /// What the read said.
        why: String,
    },
}

/// Returns the entry that turns skill `name` on (its file's text) or, with
/// `off`, off, given the session's `active` skills; or why nothing is to
/// be appended.
pub fn change(
    workspace: &Workspace,
    active: &[SkillEntry],
    name: &str,
    off: bool,
) -> Result<SkillEntry, SkillRefusal> {
    let current = active.iter().find(|skill| skill.name == name);
    let owned = || name.to_owned();
    if off {
        let Some(current) = current else {
            return Err(SkillRefusal::NotActive { name: owned() });
        };
        return Ok(SkillEntry {
            name: owned(),
            action: SkillAction::Deactivate,
            sha256: current.sha256.clone(),
            text: String::new(),
        });
    }
    let file = workspace
        .project_dir()
        .join("skills")
        .join(format!("{name}.md"));
    let root = &workspace.root;
    // Read beneath the workspace root, as the file tools read: no link
    // swapped in can lead outside, a FIFO never blocks.
    let read = file
        .strip_prefix(root)
        .map_err(|err| WorkspaceReadError::Refused(err.to_string()))
        .and_then(|rel| read_workspace_file(root, rel, SKILL_MAX_BYTES));
    let text = match read.map(String::from_utf8) {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => return Err(SkillRefusal::NotUtf8 { name: owned() }),
        Err(WorkspaceReadError::TooLarge { size }) => {
            return Err(SkillRefusal::TooLarge {
                name: owned(),
                size,
            });
        }
        Err(WorkspaceReadError::Missing) => return Err(SkillRefusal::Missing { name: owned() }),
        Err(why) => {
            return Err(SkillRefusal::Unreadable {
                name: owned(),
                why: why.to_string(),
            });
        }
    };
    let sha256: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if current.is_some_and(|skill| skill.sha256 == sha256) {
        return Err(SkillRefusal::AlreadyActive { name: owned() });
    }
    Ok(SkillEntry {
        name: owned(),
        action: SkillAction::Activate,
        sha256,
        text,
    })
}

/// Returns the line confirming an appended skill change.
pub fn confirmation(name: &str, off: bool) -> String {
    format!(
        "skill {name} {}",
        if off {
            "deactivated"
        } else {
            "activated: its text is part of the system prompt"
        }
    )
}
