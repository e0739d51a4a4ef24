//! State derived from the path (SPEC §6.2): pending intents, the current
//! turn and its soft capsules, and the `/auto-compact` setting. Never
//! stored; recomputed on every preflight and on resume, so flight records
//! are never read to decide anything.
//!
//! A path is a slice of entries in root → leaf order.

use crate::capsule::Trigger;
use crate::entry::{CheckpointKind, Entry, EntryBody};
use crate::id::EntryId;
use crate::message::{Message, Role};
use crate::tokens::TokenCount;

/// A checkpoint entry that is still a pending intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCheckpoint {
    /// The checkpoint entry.
    pub entry_id: EntryId,
    /// Milestone or plan pivot.
    pub kind: CheckpointKind,
}

impl PendingCheckpoint {
    /// Returns the trigger this intent fires.
    pub fn trigger(&self) -> Trigger {
        match self.kind {
            CheckpointKind::Milestone => Trigger::Milestone,
            CheckpointKind::PlanPivot => Trigger::PlanPivot,
        }
    }
}

/// A soft capsule appended in the current turn, as the re-arm rule reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftCapsule {
    /// The capsule's entry (its checkpoint id).
    pub entry_id: EntryId,
    /// The soft trigger that made it.
    pub trigger: Trigger,
    /// Its measured `tokensAfter`.
    pub tokens_after: TokenCount,
}

/// Everything SPEC §6.2 derives from the path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DerivedState {
    /// Checkpoint entries with neither an assistant message nor a capsule
    /// after them, oldest first.
    pub pending_checkpoints: Vec<PendingCheckpoint>,
    /// The assistant message that completed its turn (no tool calls), when
    /// it is the last assistant message on the path and no capsule follows
    /// it: a pending `turn_complete` intent.
    pub turn_complete: Option<EntryId>,
    /// The real user message that started the current turn; `None` when the
    /// path holds none (the turn then spans the whole path).
    pub turn_start: Option<EntryId>,
    /// Soft capsules after the turn start, oldest first.
    pub turn_soft_capsules: Vec<SoftCapsule>,
    /// The value of `compaction.auto` set by the latest `config_change` on
    /// the path (`/auto-compact`), if any.
    pub auto_compact: Option<bool>,
}

impl DerivedState {
    /// Derives the state from a path (root → leaf).
    pub fn from_path(path: &[Entry]) -> DerivedState {
        let mut derived = DerivedState::default();
        // Index of the last assistant message; of the last capsule.
        let mut last_assistant: Option<(usize, &Entry, &Message)> = None;
        let mut last_capsule: Option<usize> = None;
        let mut turn_start_idx: Option<usize> = None;
        for (idx, entry) in path.iter().enumerate() {
            match &entry.body {
                EntryBody::Message(message_entry) => {
                    let message = &message_entry.message;
                    if message.role == Role::Assistant {
                        last_assistant = Some((idx, entry, message));
                    } else if message.is_real_user() {
                        turn_start_idx = Some(idx);
                    }
                }
                EntryBody::Capsule(_) => last_capsule = Some(idx),
                EntryBody::ConfigChange {
                    auto_compact: Some(auto),
                } => derived.auto_compact = Some(*auto),
                _ => {}
            }
        }

        // A checkpoint is consumed by the first assistant message or capsule
        // after it, whatever the outcome that led there.
        let consumed_through = last_assistant.map(|(idx, _, _)| idx).max(last_capsule);
        let pending_from = consumed_through.map_or(0, |idx| idx + 1);
        derived.pending_checkpoints = path[pending_from..]
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Checkpoint { kind, .. } => Some(PendingCheckpoint {
                    entry_id: entry.id.clone(),
                    kind: *kind,
                }),
                _ => None,
            })
            .collect();

        if let Some((idx, entry, message)) = last_assistant {
            let capsule_follows = last_capsule.is_some_and(|capsule_idx| capsule_idx > idx);
            if !message.has_tool_uses() && !capsule_follows {
                derived.turn_complete = Some(entry.id.clone());
            }
        }

        derived.turn_start = turn_start_idx.map(|idx| path[idx].id.clone());
        let turn_from = turn_start_idx.map_or(0, |idx| idx + 1);
        derived.turn_soft_capsules = path[turn_from..]
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Capsule(capsule) if capsule.trigger.is_soft() => Some(SoftCapsule {
                    entry_id: entry.id.clone(),
                    trigger: capsule.trigger,
                    tokens_after: capsule.tokens_after,
                }),
                _ => None,
            })
            .collect();
        derived
    }

    /// Returns whether any intent (checkpoint or `turn_complete`) is pending.
    pub fn has_pending_intents(&self) -> bool {
        !self.pending_checkpoints.is_empty() || self.turn_complete.is_some()
    }

    /// Returns the latest soft capsule of the current turn, which the re-arm
    /// rule reads.
    pub fn latest_soft_capsule(&self) -> Option<&SoftCapsule> {
        self.turn_soft_capsules.last()
    }

    /// Returns `compaction.auto` in force: the latest `/auto-compact` on the
    /// path, else the configured value.
    ///
    /// A path that starts after the root (resume) may miss a `config_change`
    /// before its first entry; the caller then passes the capsule state's
    /// `autoCompact` as `configured`.
    pub fn auto_compact_or(&self, configured: bool) -> bool {
        self.auto_compact.unwrap_or(configured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capsule::{Capsule, CapsuleState, Narrative, Quality};
    use crate::entry::MessageEntry;
    use crate::id::IdKind;
    use crate::message::{Block, ToolInput, ToolUse};

    fn id(n: u128) -> EntryId {
        EntryId::from_uuid(IdKind::Entry, n)
    }

    fn entry(n: u128, body: EntryBody) -> Entry {
        Entry {
            id: id(n),
            parent_id: n.checked_sub(1).map(id),
            timestamp: String::new(),
            body,
        }
    }

    fn msg(n: u128, message: Message) -> Entry {
        entry(
            n,
            EntryBody::Message(MessageEntry {
                message,
                tokens: None,
            }),
        )
    }

    fn user(n: u128) -> Entry {
        msg(n, Message::user("do it"))
    }

    fn done(n: u128) -> Entry {
        msg(n, Message::assistant("done"))
    }

    fn calling(n: u128) -> Entry {
        let call = ToolUse {
            id: format!("call{n}"),
            name: "bash".into(),
            input: ToolInput::empty(),
        };
        msg(n, Message::new(Role::Assistant, vec![Block::ToolUse(call)]))
    }

    fn checkpoint(n: u128, kind: CheckpointKind) -> Entry {
        entry(
            n,
            EntryBody::Checkpoint {
                kind,
                note: "note".into(),
            },
        )
    }

    fn capsule(n: u128, trigger: Trigger, tokens_after: u64) -> Entry {
        let capsule = Capsule {
            trigger,
            quality: Quality::Full,
            first_kept_entry_id: None,
            boundary_truncation: None,
            tokens_before: TokenCount::new(0),
            tokens_after: TokenCount::new(tokens_after),
            summarizer: "deterministic".into(),
            previous_capsule_id: None,
            state: CapsuleState::default(),
            instructions: None,
            native: None,
            overflow: None,
            imported: None,
            narrative: Narrative::default(),
            earlier_narrative: None,
            local: Default::default(),
            markdown: String::new(),
        };
        entry(n, EntryBody::Capsule(Box::new(capsule)))
    }

    #[test]
    fn checkpoints_stay_pending_until_an_assistant_message_or_capsule() {
        let path = [user(1), checkpoint(2, CheckpointKind::Milestone), user(3)];
        let derived = DerivedState::from_path(&path);
        assert_eq!(
            derived.pending_checkpoints,
            [PendingCheckpoint {
                entry_id: id(2),
                kind: CheckpointKind::Milestone
            }]
        );
        let answered = [
            user(1),
            checkpoint(2, CheckpointKind::Milestone),
            calling(3),
        ];
        assert!(
            DerivedState::from_path(&answered)
                .pending_checkpoints
                .is_empty()
        );
        let compacted = [
            user(1),
            checkpoint(2, CheckpointKind::PlanPivot),
            capsule(3, Trigger::PlanPivot, 9),
        ];
        assert!(
            DerivedState::from_path(&compacted)
                .pending_checkpoints
                .is_empty()
        );
    }

    #[test]
    fn turn_complete_is_the_last_reply_without_tool_calls_and_no_capsule_after() {
        let derived = DerivedState::from_path(&[user(1), done(2), user(3)]);
        assert_eq!(derived.turn_complete, Some(id(2)));
        assert_eq!(derived.turn_start, Some(id(3)));
        assert_eq!(
            DerivedState::from_path(&[user(1), calling(2)]).turn_complete,
            None
        );
        let compacted = [
            user(1),
            done(2),
            user(3),
            capsule(4, Trigger::TurnComplete, 9),
        ];
        assert_eq!(DerivedState::from_path(&compacted).turn_complete, None);
    }

    #[test]
    fn only_this_turns_soft_capsules_count() {
        let path = [
            user(1),
            capsule(2, Trigger::AutoThreshold, 50_000),
            user(3),
            capsule(4, Trigger::HardLimit, 40_000),
            calling(5),
            capsule(6, Trigger::AutoThreshold, 60_000),
        ];
        let derived = DerivedState::from_path(&path);
        assert_eq!(
            derived.turn_soft_capsules,
            [SoftCapsule {
                entry_id: id(6),
                trigger: Trigger::AutoThreshold,
                tokens_after: TokenCount::new(60_000)
            }]
        );
        assert_eq!(
            derived.latest_soft_capsule().map(|c| c.tokens_after.get()),
            Some(60_000)
        );
    }

    #[test]
    fn auto_compact_follows_the_latest_config_change() {
        let off = entry(
            2,
            EntryBody::ConfigChange {
                auto_compact: Some(false),
            },
        );
        let unrelated = entry(3, EntryBody::ConfigChange { auto_compact: None });
        let derived = DerivedState::from_path(&[user(1), off, unrelated]);
        assert!(!derived.auto_compact_or(true));
        assert!(DerivedState::from_path(&[user(1)]).auto_compact_or(true));
    }
}
