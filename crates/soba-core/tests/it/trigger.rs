//! Trigger choice from state derived from real-shaped paths (SPEC §6, §6.1,
//! §6.2): intents and their consumption, the preflight order, the soft cap
//! and the re-arm rule. The model is 200,000 / 32,000 with the defaults:
//! hardLimit 159,808, autoLimit 80,000, softGate 32,000, roiFloor 12,000.

use soba_core::budget::Budget;
use soba_core::capsule::{Capsule, CapsuleState, LocalSections, Narrative, Quality, Trigger};
use soba_core::config::CompactionConfig;
use soba_core::derived::DerivedState;
use soba_core::entry::{CheckpointKind, Entry, EntryBody, MessageEntry};
use soba_core::id::{EntryId, IdKind};
use soba_core::message::{Block, Message, MessageOrigin, Role, ToolInput, ToolUse};
use soba_core::tokens::TokenCount;
use soba_core::trigger::{PreflightInput, TriggerConfig, TurnState, choose_trigger};

/// Builds a path entry by entry, numbering ids in order.
#[derive(Default)]
struct PathBuilder {
    entries: Vec<Entry>,
}

impl PathBuilder {
    fn push(mut self, body: EntryBody) -> Self {
        let n = self.entries.len() as u128 + 1;
        let kind = if matches!(body, EntryBody::Capsule(_)) {
            IdKind::Capsule
        } else {
            IdKind::Entry
        };
        let parent_id = self.entries.last().map(|e| e.id.clone());
        self.entries.push(Entry {
            id: EntryId::from_uuid(kind, n),
            parent_id,
            timestamp: "2025-01-01T00:00:00Z".into(),
            body,
        });
        self
    }

    fn message(self, message: Message) -> Self {
        self.push(EntryBody::Message(MessageEntry {
            message,
            tokens: None,
        }))
    }

    fn user(self) -> Self {
        self.message(Message::user("continue"))
    }

    fn injected(self) -> Self {
        let mut message = Message::user("<environment_context>");
        message.origin = MessageOrigin::Injected;
        self.message(message)
    }

    /// An assistant message that completes its turn.
    fn done(self) -> Self {
        self.message(Message::assistant("finished"))
    }

    /// An assistant message calling a tool, and the tool's result.
    fn tool_step(self) -> Self {
        let n = self.entries.len();
        let call = ToolUse {
            id: format!("call_{n}"),
            name: "bash".into(),
            input: ToolInput::empty(),
        };
        self.message(Message::new(Role::Assistant, vec![Block::ToolUse(call)]))
            .message(Message::tool_result(format!("call_{n}"), "ok", false))
    }

    fn checkpoint(self, kind: CheckpointKind) -> Self {
        self.push(EntryBody::Checkpoint {
            kind,
            note: "tests pass".into(),
        })
    }

    fn capsule(self, trigger: Trigger, tokens_after: u64) -> Self {
        let capsule = Capsule {
            trigger,
            quality: Quality::Full,
            first_kept_entry_id: None,
            boundary_truncation: None,
            tokens_before: TokenCount::new(90_000),
            tokens_after: TokenCount::new(tokens_after),
            summarizer: "anthropic/claude-haiku-4-5".into(),
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
            local: LocalSections::default(),
            markdown: String::new(),
        };
        self.push(EntryBody::Capsule(Box::new(capsule)))
    }

    fn auto_compact(self, on: bool) -> Self {
        self.push(EntryBody::ConfigChange {
            auto_compact: Some(on),
            approvals: None,
        })
    }
}

fn budget() -> Budget {
    Budget::compute(
        TokenCount::new(200_000),
        TokenCount::new(32_000),
        &CompactionConfig::default(),
    )
    .expect("the 200,000 / 32,000 budget is valid")
}

/// Derives the state of `path`, chooses at `effective` and compares the
/// chosen trigger and the `(trigger, reason code)` of those not chosen.
fn check_with(
    path: &PathBuilder,
    effective: u64,
    config: &CompactionConfig,
    turn: &TurnState,
    expected: (Option<Trigger>, &[(Trigger, &str)]),
) {
    let budget = budget();
    let derived = DerivedState::from_path(&path.entries);
    let decision = choose_trigger(&PreflightInput {
        effective: TokenCount::new(effective),
        budget: &budget,
        // The event triggers in SPEC order; read_cost, a standing
        // candidate above softGate, is checked on its own.
        config: TriggerConfig {
            compact_on_read_cost: false,
            ..TriggerConfig::resolve(config, &derived)
        },
        derived: &derived,
        turn,
        idle_ms: None,
    });
    let not_chosen: Vec<(Trigger, &str)> = decision
        .not_chosen
        .iter()
        .map(|n| (n.trigger, n.reason.code()))
        .collect();
    assert_eq!(
        (decision.chosen, not_chosen.as_slice()),
        expected,
        "effective {effective}"
    );
}

fn check(path: &PathBuilder, effective: u64, expected: (Option<Trigger>, &[(Trigger, &str)])) {
    check_with(
        path,
        effective,
        &CompactionConfig::default(),
        &TurnState::new(),
        expected,
    );
}

#[test]
fn turn_complete_fires_at_the_next_turns_first_preflight() {
    let path = PathBuilder::default().user().tool_step().done().user();
    check(&path, 40_000, (Some(Trigger::TurnComplete), &[]));
    check(
        &path,
        31_999,
        (None, &[(Trigger::TurnComplete, "below_soft_gate")]),
    );
    // Disabled by its switch: it does not fire at all.
    let config = CompactionConfig {
        compact_on_turn_complete: false,
        ..CompactionConfig::default()
    };
    check_with(&path, 40_000, &config, &TurnState::new(), (None, &[]));
}

#[test]
fn intents_are_consumed_by_the_next_capsule_or_assistant_message() {
    // A pre-ROI skip proceeds to inference; the reply consumes the intent.
    let answered = PathBuilder::default().user().done().user().tool_step();
    check(&answered, 40_000, (None, &[]));
    // A capsule consumes it, whatever its trigger.
    let compacted = PathBuilder::default()
        .user()
        .done()
        .user()
        .capsule(Trigger::HardLimit, 30_000);
    check(&compacted, 40_000, (None, &[]));
    // A turn cancelled before any step appended leaves it for the next turn.
    let cancelled = PathBuilder::default()
        .user()
        .done()
        .user()
        .injected()
        .user();
    check(&cancelled, 40_000, (Some(Trigger::TurnComplete), &[]));
}

#[test]
fn checkpoints_fire_before_turn_complete_and_auto_threshold() {
    let path = PathBuilder::default()
        .user()
        .done()
        .checkpoint(CheckpointKind::Milestone)
        .user();
    check(
        &path,
        80_000,
        (
            Some(Trigger::Milestone),
            &[
                (Trigger::TurnComplete, "superseded"),
                (Trigger::AutoThreshold, "superseded"),
            ],
        ),
    );
    let pivot = PathBuilder::default()
        .user()
        .tool_step()
        .checkpoint(CheckpointKind::PlanPivot);
    check(&pivot, 32_000, (Some(Trigger::PlanPivot), &[]));
    // The checkpoint is consumed by the reply after it.
    let replied = PathBuilder::default()
        .user()
        .checkpoint(CheckpointKind::Milestone)
        .tool_step();
    check(&replied, 79_999, (None, &[]));
    let config = CompactionConfig {
        compact_on_milestone: false,
        ..CompactionConfig::default()
    };
    check_with(&pivot, 32_000, &config, &TurnState::new(), (None, &[]));
}

#[test]
fn hard_limit_is_first_and_ignores_auto_and_the_cap() {
    let path = PathBuilder::default()
        .user()
        .done()
        .checkpoint(CheckpointKind::Milestone)
        .user();
    check(
        &path,
        159_809,
        (
            Some(Trigger::HardLimit),
            &[
                (Trigger::Milestone, "superseded"),
                (Trigger::TurnComplete, "superseded"),
                (Trigger::AutoThreshold, "superseded"),
            ],
        ),
    );
    // /auto-compact off on the path disables soft triggers only.
    let off = PathBuilder::default()
        .user()
        .auto_compact(false)
        .tool_step();
    check(
        &off,
        159_809,
        (
            Some(Trigger::HardLimit),
            &[(Trigger::AutoThreshold, "auto_off")],
        ),
    );
    check(
        &off,
        100_000,
        (None, &[(Trigger::AutoThreshold, "auto_off")]),
    );
    let back_on = PathBuilder::default()
        .user()
        .auto_compact(false)
        .auto_compact(true)
        .tool_step();
    check(&back_on, 100_000, (Some(Trigger::AutoThreshold), &[]));
    // Configured off, no /auto-compact on the path.
    let config = CompactionConfig {
        auto: false,
        ..CompactionConfig::default()
    };
    check_with(
        &back_on,
        159_808,
        &config,
        &TurnState::new(),
        (Some(Trigger::AutoThreshold), &[]),
    );
    let plain = PathBuilder::default().user().tool_step();
    check_with(
        &plain,
        159_808,
        &config,
        &TurnState::new(),
        (None, &[(Trigger::AutoThreshold, "auto_off")]),
    );
}

#[test]
fn auto_threshold_at_exactly_auto_limit() {
    let path = PathBuilder::default().user().tool_step();
    check(&path, 79_999, (None, &[]));
    check(&path, 80_000, (Some(Trigger::AutoThreshold), &[]));
}

#[test]
fn soft_cap_holds_for_the_rest_of_the_turn_only() {
    let path = PathBuilder::default().user().tool_step();
    let derived = DerivedState::from_path(&path.entries);
    let mut turn = TurnState::new();
    turn.mark_soft_attempt_without_capsule(derived.turn_start.as_ref());
    let config = CompactionConfig::default();
    check_with(
        &path,
        120_000,
        &config,
        &turn,
        (None, &[(Trigger::AutoThreshold, "soft_cap")]),
    );
    // Later steps of the same turn stay capped; hard_limit still fires.
    let later = PathBuilder {
        entries: path.entries.clone(),
    }
    .tool_step()
    .tool_step();
    check_with(
        &later,
        150_000,
        &config,
        &turn,
        (None, &[(Trigger::AutoThreshold, "soft_cap")]),
    );
    check_with(
        &later,
        159_809,
        &config,
        &turn,
        (
            Some(Trigger::HardLimit),
            &[(Trigger::AutoThreshold, "soft_cap")],
        ),
    );
    // Injected context is no new turn; a real user message is.
    let injected = PathBuilder {
        entries: later.entries.clone(),
    }
    .injected();
    check_with(
        &injected,
        120_000,
        &config,
        &turn,
        (None, &[(Trigger::AutoThreshold, "soft_cap")]),
    );
    let next_turn = PathBuilder {
        entries: later.entries.clone(),
    }
    .user();
    check_with(
        &next_turn,
        120_000,
        &config,
        &turn,
        (Some(Trigger::AutoThreshold), &[]),
    );
}

#[test]
fn rearm_after_a_soft_capsule_in_the_same_turn() {
    // Soft capsule at tokensAfter 75,000: needed max(80,000, 87,000).
    let path = PathBuilder::default()
        .user()
        .tool_step()
        .capsule(Trigger::AutoThreshold, 75_000)
        .tool_step();
    check(
        &path,
        86_999,
        (None, &[(Trigger::AutoThreshold, "not_rearmed")]),
    );
    check(&path, 87_000, (Some(Trigger::AutoThreshold), &[]));
    // tokensAfter 40,000: needed max(80,000, 52,000) = autoLimit.
    let small = PathBuilder::default()
        .user()
        .tool_step()
        .capsule(Trigger::AutoThreshold, 40_000)
        .tool_step();
    check(&small, 79_999, (None, &[]));
    check(&small, 80_000, (Some(Trigger::AutoThreshold), &[]));
    // The rule reads the latest soft capsule and applies to intents too.
    let milestone = PathBuilder::default()
        .user()
        .capsule(Trigger::AutoThreshold, 40_000)
        .tool_step()
        .capsule(Trigger::AutoThreshold, 70_000)
        .tool_step()
        .checkpoint(CheckpointKind::Milestone);
    check(
        &milestone,
        81_999,
        (
            None,
            &[
                (Trigger::Milestone, "not_rearmed"),
                (Trigger::AutoThreshold, "not_rearmed"),
            ],
        ),
    );
    check(
        &milestone,
        82_000,
        (
            Some(Trigger::Milestone),
            &[(Trigger::AutoThreshold, "superseded")],
        ),
    );
    // A forced capsule does not arm the rule; one from an earlier turn neither.
    let forced = PathBuilder::default()
        .user()
        .tool_step()
        .capsule(Trigger::HardLimit, 75_000)
        .tool_step();
    check(&forced, 80_000, (Some(Trigger::AutoThreshold), &[]));
    let earlier = PathBuilder::default()
        .user()
        .capsule(Trigger::AutoThreshold, 75_000)
        .tool_step()
        .user();
    check(&earlier, 80_000, (Some(Trigger::AutoThreshold), &[]));
    // Far above the re-arm figure, hard_limit still comes first.
    check(
        &path,
        159_809,
        (
            Some(Trigger::HardLimit),
            &[(Trigger::AutoThreshold, "superseded")],
        ),
    );
}
