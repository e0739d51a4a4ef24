//! State derived from the path (SPEC §6.2): pending intents, the current
//! turn and its soft capsules, and the `/auto-compact` setting. Never
//! stored; recomputed on every preflight and on resume, so flight records
//! are never read to decide anything.
//!
//! A path is a slice of entries in root → leaf order.

use crate::capsule::Trigger;
use crate::entry::{ApprovalGrants, CheckpointKind, Entry, EntryBody};
use crate::id::EntryId;
use crate::message::Role;
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
    /// The "always" approvals set by the latest `config_change` (or
    /// capsule state) on the path that records them, if any.
    pub approvals: Option<ApprovalGrants>,
    /// The latest capsule's tokensAfter, when the path holds one.
    pub capsule_tokens_after: Option<TokenCount>,
    /// Assistant messages (requests answered) since the latest capsule, or
    /// since the start of the path.
    pub requests_since_capsule: u64,
}

impl DerivedState {
    /// Derives the state from a path (root → leaf): [`DerivedState::apply`]
    /// over every entry.
    pub fn from_path(path: &[Entry]) -> DerivedState {
        let mut derived = DerivedState::default();
        for entry in path {
            derived.apply(entry);
        }
        derived
    }

    /// Brings the state up to date with one more entry at the end of the
    /// path, in O(1) amortised: what a preflight reads is maintained as the
    /// path grows instead of recomputed over it.
    ///
    /// A capsule consumes every pending intent (checkpoints and
    /// `turn_complete`) and, when its `state` records an `/auto-compact`
    /// override, restores it, so a path that starts at the capsule's
    /// retained tail (resume, SPEC §3.3) derives the same setting as the
    /// whole path.
    pub fn apply(&mut self, entry: &Entry) {
        match &entry.body {
            EntryBody::Message(message_entry) => {
                let message = &message_entry.message;
                if message.role == Role::Assistant {
                    self.requests_since_capsule += 1;
                    self.pending_checkpoints.clear();
                    self.turn_complete = (!message.has_tool_uses()).then(|| entry.id.clone());
                } else if message.is_real_user() {
                    self.turn_start = Some(entry.id.clone());
                    self.turn_soft_capsules.clear();
                }
            }
            EntryBody::Capsule(capsule) => {
                self.pending_checkpoints.clear();
                self.turn_complete = None;
                self.capsule_tokens_after = Some(capsule.tokens_after);
                self.requests_since_capsule = 0;
                if capsule.trigger.is_soft() {
                    self.turn_soft_capsules.push(SoftCapsule {
                        entry_id: entry.id.clone(),
                        trigger: capsule.trigger,
                        tokens_after: capsule.tokens_after,
                    });
                }
                if let Some(auto) = capsule.state.auto_compact_override {
                    self.auto_compact = Some(auto);
                }
                if let Some(approvals) = &capsule.state.approvals {
                    self.approvals = Some(approvals.clone());
                }
            }
            EntryBody::Checkpoint { kind, .. } => {
                self.pending_checkpoints.push(PendingCheckpoint {
                    entry_id: entry.id.clone(),
                    kind: *kind,
                })
            }
            EntryBody::ConfigChange {
                auto_compact,
                approvals,
            } => {
                if let Some(auto) = auto_compact {
                    self.auto_compact = Some(*auto);
                }
                if let Some(approvals) = approvals {
                    self.approvals = Some(approvals.clone());
                }
            }
            _ => {}
        }
    }

    /// Returns how much the input grew per request since the latest capsule
    /// (or since the start, from zero), given effective tokens now; `None`
    /// before the first answered request.
    pub fn growth_per_request(&self, effective: TokenCount) -> Option<TokenCount> {
        let since = self.capsule_tokens_after.unwrap_or(TokenCount::ZERO);
        (self.requests_since_capsule > 0).then(|| {
            TokenCount::new(effective.saturating_sub(since).get() / self.requests_since_capsule)
        })
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
    /// A path that starts at a capsule's retained tail (resume) gets an
    /// override set before it from the capsule's `state` (see
    /// [`DerivedState::apply`]).
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
    use crate::message::{Block, Message, ToolInput, ToolUse};

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
            scope: None,
            narrative: Narrative::default(),
            earlier_narrative: None,
            rehydrated: Default::default(),
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

    /// The whole-path derivation SPEC §6.2 states, written as a scan (the
    /// implementation folds entry by entry): the oracle of the fold.
    fn scanned(path: &[Entry]) -> DerivedState {
        let mut derived = DerivedState::default();
        let mut last_assistant = None;
        let mut last_capsule = None;
        let mut turn_start = None;
        for (idx, entry) in path.iter().enumerate() {
            match &entry.body {
                EntryBody::Message(stored) if stored.message.role == Role::Assistant => {
                    last_assistant = Some(idx)
                }
                EntryBody::Message(stored) if stored.message.is_real_user() => {
                    turn_start = Some(idx)
                }
                EntryBody::Capsule(capsule) => {
                    last_capsule = Some(idx);
                    if let Some(auto) = capsule.state.auto_compact_override {
                        derived.auto_compact = Some(auto);
                    }
                    if let Some(approvals) = &capsule.state.approvals {
                        derived.approvals = Some(approvals.clone());
                    }
                }
                EntryBody::ConfigChange {
                    auto_compact,
                    approvals,
                } => {
                    if let Some(auto) = auto_compact {
                        derived.auto_compact = Some(*auto);
                    }
                    if let Some(approvals) = approvals {
                        derived.approvals = Some(approvals.clone());
                    }
                }
                _ => {}
            }
        }
        let consumed = last_assistant.max(last_capsule).map_or(0, |idx| idx + 1);
        derived.pending_checkpoints = path[consumed..]
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Checkpoint { kind, .. } => Some(PendingCheckpoint {
                    entry_id: entry.id.clone(),
                    kind: *kind,
                }),
                _ => None,
            })
            .collect();
        derived.turn_complete = last_assistant
            .filter(|&idx| last_capsule.is_none_or(|capsule| capsule < idx))
            .filter(|&idx| match &path[idx].body {
                EntryBody::Message(stored) => !stored.message.has_tool_uses(),
                _ => false,
            })
            .map(|idx| path[idx].id.clone());
        derived.turn_start = turn_start.map(|idx| path[idx].id.clone());
        derived.capsule_tokens_after = last_capsule.and_then(|idx| match &path[idx].body {
            EntryBody::Capsule(capsule) => Some(capsule.tokens_after),
            _ => None,
        });
        derived.requests_since_capsule = path[last_capsule.map_or(0, |idx| idx + 1)..]
            .iter()
            .filter(|entry| {
                matches!(&entry.body, EntryBody::Message(stored) if stored.message.role == Role::Assistant)
            })
            .count() as u64;
        derived.turn_soft_capsules = path[turn_start.map_or(0, |idx| idx + 1)..]
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

    fn arbitrary_entry(n: u128, kind: u8) -> Entry {
        match kind % 9 {
            0 => user(n),
            1 => done(n),
            2 => calling(n),
            3 => checkpoint(n, CheckpointKind::Milestone),
            4 => checkpoint(n, CheckpointKind::PlanPivot),
            5 => capsule(n, Trigger::AutoThreshold, n as u64),
            6 => capsule(n, Trigger::HardLimit, n as u64),
            7 => {
                let mut overriding = capsule(n, Trigger::User, n as u64);
                if let EntryBody::Capsule(capsule) = &mut overriding.body {
                    capsule.state.auto_compact_override = Some(n.is_multiple_of(2));
                    capsule.state.approvals = n.is_multiple_of(3).then(ApprovalGrants::default);
                }
                overriding
            }
            _ => entry(
                n,
                EntryBody::ConfigChange {
                    auto_compact: (!n.is_multiple_of(3)).then_some(n.is_multiple_of(2)),
                    approvals: n.is_multiple_of(5).then(|| ApprovalGrants {
                        tools: Default::default(),
                        bash_words: [format!("cmd{n}")].into_iter().collect(),
                    }),
                },
            ),
        }
    }

    proptest::proptest! {
        #[test]
        fn the_fold_equals_the_whole_path_scan(kinds in proptest::collection::vec(0u8..9, 0..40)) {
            let path: Vec<Entry> = kinds
                .iter()
                .enumerate()
                .map(|(n, kind)| arbitrary_entry(n as u128 + 1, *kind))
                .collect();
            proptest::prop_assert_eq!(DerivedState::from_path(&path), scanned(&path));
        }
    }

    #[test]
    fn a_capsule_restores_the_override_it_recorded() {
        let mut restoring = capsule(2, Trigger::HardLimit, 9);
        if let EntryBody::Capsule(capsule) = &mut restoring.body {
            capsule.state.auto_compact_override = Some(false);
        }
        // Resumed from the retained tail: the `config_change` before it is
        // not read, the capsule supplies it.
        assert!(!DerivedState::from_path(&[user(1), restoring]).auto_compact_or(true));
        let silent = capsule(2, Trigger::HardLimit, 9);
        assert!(DerivedState::from_path(&[user(1), silent]).auto_compact_or(true));
    }

    #[test]
    fn auto_compact_follows_the_latest_config_change() {
        let off = entry(
            2,
            EntryBody::ConfigChange {
                auto_compact: Some(false),
                approvals: None,
            },
        );
        let unrelated = entry(
            3,
            EntryBody::ConfigChange {
                auto_compact: None,
                approvals: None,
            },
        );
        let derived = DerivedState::from_path(&[user(1), off, unrelated]);
        assert!(!derived.auto_compact_or(true));
        assert!(DerivedState::from_path(&[user(1)]).auto_compact_or(true));
    }
}
