//! Session-log entries as the domain sees them (the wire format lives in
//! `soba-store`).

use std::collections::BTreeSet;

use crate::capsule::Capsule;
use crate::id::EntryId;
use crate::message::Message;
use crate::tokens::{Encoding, TokenCount};

/// One entry of a session log.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// This entry's id.
    pub id: EntryId,
    /// The leaf it was appended under; `None` at the root.
    pub parent_id: Option<EntryId>,
    /// RFC 3339 UTC time of the append (given by the caller: core has no clock).
    pub timestamp: String,
    /// What the entry says.
    pub body: EntryBody,
}

/// The type-specific part of an entry.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryBody {
    /// A message, with its token count stored at append.
    Message(MessageEntry),
    /// A loaded `.capsule.md` or an `AGENTS.md` snapshot.
    Context(ContextEntry),
    /// A capsule: the structured state that replaces old model input.
    Capsule(Box<Capsule>),
    /// A hygiene pass: tool results up to `pruned_through` are stubbed.
    Hygiene {
        /// Every tool result at or before this entry on the path is stubbed.
        pruned_through: EntryId,
        /// Tokens the pass reclaimed.
        reclaimed_tokens: TokenCount,
        /// The calls whose results the pass stubbed, as it decided them;
        /// `None` in logs written before passes recorded them (the stubs
        /// are then decided again on rebuild). A rebuild after a capsule
        /// sees less of the path than the pass did (a background command's
        /// start may lie before the retained tail), so only the recorded
        /// decision gives the planned tail back.
        stubbed_calls: Option<Vec<String>>,
    },
    /// A milestone or plan pivot.
    Checkpoint {
        /// Which one.
        kind: CheckpointKind,
        /// The note.
        note: String,
    },
    /// Moves the current position to `target` (rewind, branch). Never on a path.
    Leaf {
        /// The new current leaf.
        target: EntryId,
    },
    /// The model changed.
    ModelChange {
        /// The new model id (`provider/model`).
        model: String,
    },
    /// A runtime setting changed (`/auto-compact on|off`, an "always"
    /// approval).
    ConfigChange {
        /// The new value of `compaction.auto`, when this change sets it.
        auto_compact: Option<bool>,
        /// Every "always" approval of the session from here on, when this
        /// change sets them (a superset of the previous ones).
        approvals: Option<ApprovalGrants>,
    },
    /// A skill was activated or deactivated; its text is snapshotted.
    Skill(SkillEntry),
    /// An entry of a type this version does not know; kept and ignored.
    Unknown {
        /// The entry's `type` tag.
        type_name: String,
    },
    /// An entry whose body does not fit its type (a hand edit, a bad
    /// writer): a placeholder that keeps the entry's place in the tree, so
    /// the path through it stays connected, and is ignored like
    /// [`EntryBody::Unknown`] (no model input, never a capsule boundary).
    Damaged {
        /// The entry's `type` tag as read (empty when it had none).
        type_name: String,
        /// What does not fit: the field and what is wrong with it.
        reason: String,
    },
}

impl EntryBody {
    /// Returns the wire `type` tag.
    pub fn type_name(&self) -> &str {
        match self {
            EntryBody::Message(_) => "message",
            EntryBody::Context(_) => "context",
            EntryBody::Capsule(_) => "capsule",
            EntryBody::Hygiene { .. } => "hygiene",
            EntryBody::Checkpoint { .. } => "checkpoint",
            EntryBody::Leaf { .. } => "leaf",
            EntryBody::ModelChange { .. } => "model_change",
            EntryBody::ConfigChange { .. } => "config_change",
            EntryBody::Skill(_) => "skill",
            EntryBody::Unknown { type_name } | EntryBody::Damaged { type_name, .. } => type_name,
        }
    }
}

/// The "always" answers a session gave to approval prompts: tools that
/// run without asking, and first words of `bash` commands that do. They
/// are the user's settings, like `/auto-compact`: recorded in
/// `config_change` entries and capsule states, kept across a rewind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalGrants {
    /// Tools approved for every call (`write_file`, `edit_file`).
    pub tools: BTreeSet<String>,
    /// First words of `bash` commands approved (`cargo`, `make`).
    pub bash_words: BTreeSet<String>,
}

impl ApprovalGrants {
    /// Returns whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.bash_words.is_empty()
    }

    /// Returns whether every grant of `other` is also one of these.
    pub fn covers_all(&self, other: &ApprovalGrants) -> bool {
        other.tools.is_subset(&self.tools) && other.bash_words.is_subset(&self.bash_words)
    }

    /// Adds every grant of `other`.
    pub fn extend(&mut self, other: &ApprovalGrants) {
        self.tools.extend(other.tools.iter().cloned());
        self.bash_words.extend(other.bash_words.iter().cloned());
    }
}

/// A message with the token count stored when it was appended.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageEntry {
    /// The message.
    pub message: Message,
    /// Its count in the encoding of the model active at the append.
    pub tokens: Option<StoredTokens>,
}

/// A token count as stored on a message entry (SPEC §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredTokens {
    /// The vocabulary the count is in.
    pub encoding: Encoding,
    /// The count, message overhead included.
    pub n: TokenCount,
    /// Whether some block was counted by size.
    pub estimated: bool,
}

/// Where a context entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextSource {
    /// A loaded portable capsule: untrusted data, one retention unit.
    CapsuleFile,
    /// A snapshot of the workspace's `AGENTS.md` (or `CLAUDE.md`), pinned.
    AgentsMd,
}

impl ContextSource {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextSource::CapsuleFile => "capsule_file",
            ContextSource::AgentsMd => "agents_md",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "capsule_file" => Some(ContextSource::CapsuleFile),
            "agents_md" => Some(ContextSource::AgentsMd),
            _ => None,
        }
    }
}

/// A context entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextEntry {
    /// Its origin.
    pub source: ContextSource,
    /// The file it was read from.
    pub path: String,
    /// Lowercase hex sha256 of `text`.
    pub sha256: String,
    /// The text as read.
    pub text: String,
}

/// A checkpoint's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckpointKind {
    /// A milestone reached.
    Milestone,
    /// A change of plan.
    PlanPivot,
}

impl CheckpointKind {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Milestone => "milestone",
            CheckpointKind::PlanPivot => "plan_pivot",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "milestone" => Some(CheckpointKind::Milestone),
            "plan_pivot" => Some(CheckpointKind::PlanPivot),
            _ => None,
        }
    }
}

/// Whether a skill entry turns a skill on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkillAction {
    /// The skill became active.
    Activate,
    /// The skill was turned off.
    Deactivate,
}

/// A skill activation or deactivation with the file snapshotted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillEntry {
    /// The skill's name (its file stem in `.soba/skills/`).
    pub name: String,
    /// On or off.
    pub action: SkillAction,
    /// Lowercase hex sha256 of `text`.
    pub sha256: String,
    /// The skill file's text at activation.
    pub text: String,
}
