//! Trigger choice at a preflight (SPEC §6, §6.1, §7 step 3): which trigger,
//! if any, starts a compaction now, and which fired but were not chosen
//! (for flight records), with the soft cap and its re-arm rule.
//!
//! The choice is a pure function of the measured effective tokens, the
//! budget, the configuration, the state derived from the path
//! ([`DerivedState`]) and the one fact the path cannot hold: whether a soft
//! attempt of this turn already ended without a capsule ([`TurnState`]).

use std::fmt;

use crate::budget::Budget;
use crate::capsule::Trigger;
use crate::config::CompactionConfig;
use crate::derived::DerivedState;
use crate::id::EntryId;
use crate::tokens::TokenCount;

/// The switches that decide whether soft triggers may fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerConfig {
    /// `compaction.auto` in force (after `/auto-compact` on the path).
    pub auto: bool,
    /// `compaction.compactOnTurnComplete`.
    pub compact_on_turn_complete: bool,
    /// `compaction.compactOnMilestone` (milestones and plan pivots).
    pub compact_on_milestone: bool,
}

impl TriggerConfig {
    /// Returns the switches of `config`, with `auto` overridden by the latest
    /// `/auto-compact` on the path.
    pub fn resolve(config: &CompactionConfig, derived: &DerivedState) -> TriggerConfig {
        TriggerConfig {
            auto: derived.auto_compact_or(config.auto),
            compact_on_turn_complete: config.compact_on_turn_complete,
            compact_on_milestone: config.compact_on_milestone,
        }
    }
}

/// The in-memory part of the soft cap (SPEC §6.1, §6.2): whether a soft
/// attempt of the current turn ended without a capsule (`failed`, post-ROI
/// `skipped`, `cancelled`, `stale`). The engine keeps one per session; it
/// applies only to the turn it was marked in, so a new real user message
/// clears it, and a resumed session starts clear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnState {
    /// The turn (its starting real user message) the mark belongs to.
    marked_turn: Option<Option<EntryId>>,
}

impl TurnState {
    /// Returns a clear state.
    pub fn new() -> Self {
        TurnState::default()
    }

    /// Records that a soft attempt of the turn starting at `turn_start`
    /// ([`DerivedState::turn_start`]) ended without a capsule. Call it only
    /// for attempts that passed the pre-generation ROI check: a pre-ROI skip
    /// is not an attempt.
    pub fn mark_soft_attempt_without_capsule(&mut self, turn_start: Option<&EntryId>) {
        self.marked_turn = Some(turn_start.cloned());
    }

    /// Returns whether the soft cap is reached in the turn starting at
    /// `turn_start`.
    pub fn is_soft_cap_reached(&self, turn_start: Option<&EntryId>) -> bool {
        self.marked_turn
            .as_ref()
            .is_some_and(|marked| marked.as_ref() == turn_start)
    }

    /// Forgets a mark left by an earlier turn (call when a turn starts; the
    /// check in [`TurnState::is_soft_cap_reached`] ignores such marks anyway).
    pub fn sync(&mut self, turn_start: Option<&EntryId>) {
        if !self.is_soft_cap_reached(turn_start) {
            self.marked_turn = None;
        }
    }
}

/// Everything a preflight's trigger choice reads.
#[derive(Debug, Clone, Copy)]
pub struct PreflightInput<'a> {
    /// Effective tokens, measured now.
    pub effective: TokenCount,
    /// The limits.
    pub budget: &'a Budget,
    /// The switches, resolved with [`TriggerConfig::resolve`].
    pub config: TriggerConfig,
    /// Intents, turn and soft capsules derived from the path.
    pub derived: &'a DerivedState,
    /// The in-memory soft-cap mark.
    pub turn: &'a TurnState,
}

/// Why a trigger that fired was not chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// `auto` is off: soft triggers are disabled.
    AutoOff,
    /// Effective tokens are below softGate.
    BelowSoftGate {
        /// Effective tokens.
        effective: TokenCount,
        /// The gate.
        soft_gate: TokenCount,
    },
    /// A soft attempt of this turn already ended without a capsule.
    SoftCap,
    /// A soft capsule was appended this turn and the re-arm rule does not
    /// hold yet: effective must reach max(autoLimit, its tokensAfter +
    /// roiFloor).
    NotRearmed {
        /// Effective tokens.
        effective: TokenCount,
        /// The figure effective must reach.
        needed: TokenCount,
        /// The turn's latest soft capsule.
        capsule: EntryId,
    },
    /// A trigger earlier in the preflight order was chosen; pending intents
    /// are consumed with it.
    Superseded {
        /// The chosen trigger.
        by: Trigger,
    },
}

impl SkipReason {
    /// Returns a stable code for flight records (`auto_off`,
    /// `below_soft_gate`, `soft_cap`, `not_rearmed`, `superseded`).
    pub fn code(&self) -> &'static str {
        match self {
            SkipReason::AutoOff => "auto_off",
            SkipReason::BelowSoftGate { .. } => "below_soft_gate",
            SkipReason::SoftCap => "soft_cap",
            SkipReason::NotRearmed { .. } => "not_rearmed",
            SkipReason::Superseded { .. } => "superseded",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::AutoOff => f.write_str("auto-compact is off"),
            SkipReason::BelowSoftGate {
                effective,
                soft_gate,
            } => {
                write!(f, "effective {effective} < softGate {soft_gate}")
            }
            SkipReason::SoftCap => {
                f.write_str("a soft attempt already ended without a capsule this turn")
            }
            SkipReason::NotRearmed {
                effective,
                needed,
                capsule,
            } => {
                write!(
                    f,
                    "effective {effective} < {needed} needed to re-arm after soft capsule {capsule}"
                )
            }
            SkipReason::Superseded { by } => write!(f, "{} chosen first", by.as_str()),
        }
    }
}

/// A trigger that fired but was not chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotChosen {
    /// The trigger.
    pub trigger: Trigger,
    /// Why it was not chosen.
    pub reason: SkipReason,
}

/// The outcome of a preflight's trigger choice.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TriggerDecision {
    /// The trigger to compact for; `None` proceeds to inference.
    pub chosen: Option<Trigger>,
    /// Triggers that fired but were not chosen, in preflight order; each
    /// leaves a flight record `outcome: skipped` with its reason.
    pub not_chosen: Vec<NotChosen>,
}

/// Chooses at most one trigger in the preflight order of SPEC §6:
/// `hard_limit` → pending `milestone`/`plan_pivot` → pending
/// `turn_complete` → `auto_threshold`. (`user` comes from `/compact` and
/// `context_overflow` from the provider's answer; neither is a preflight
/// choice.)
///
/// - `hard_limit` fires when effective > hardLimit, whatever `auto` and the
///   soft cap say.
/// - A pending checkpoint fires `milestone` or `plan_pivot` (the newest
///   pending checkpoint's kind first) with `compactOnMilestone`; a pending
///   `turn_complete` with `compactOnTurnComplete`; `auto_threshold` when
///   effective ≥ autoLimit. Intents disabled by their switch do not fire.
/// - A soft trigger that fires is not chosen when `auto` is off, effective
///   < softGate, the soft cap is reached, or this turn has a soft capsule
///   and effective < max(autoLimit, its tokensAfter + roiFloor) (re-arm).
pub fn choose_trigger(input: &PreflightInput<'_>) -> TriggerDecision {
    let mut fired: Vec<Trigger> = Vec::new();
    if input.effective > input.budget.hard_limit() {
        fired.push(Trigger::HardLimit);
    }
    if input.config.compact_on_milestone {
        for pending in input.derived.pending_checkpoints.iter().rev() {
            let trigger = pending.trigger();
            if !fired.contains(&trigger) {
                fired.push(trigger);
            }
        }
    }
    if input.config.compact_on_turn_complete && input.derived.turn_complete.is_some() {
        fired.push(Trigger::TurnComplete);
    }
    if input.effective >= input.budget.auto_limit() {
        fired.push(Trigger::AutoThreshold);
    }

    let soft_block = soft_block(input);
    let mut decision = TriggerDecision::default();
    for trigger in fired {
        let blocked = if trigger.is_soft() {
            soft_block.clone()
        } else {
            None
        };
        match (blocked, decision.chosen) {
            (Some(reason), _) => decision.not_chosen.push(NotChosen { trigger, reason }),
            (None, Some(by)) => decision.not_chosen.push(NotChosen {
                trigger,
                reason: SkipReason::Superseded { by },
            }),
            (None, None) => decision.chosen = Some(trigger),
        }
    }
    decision
}

/// Returns why no soft trigger may be chosen at this preflight, if so; the
/// same reason holds for every soft trigger.
fn soft_block(input: &PreflightInput<'_>) -> Option<SkipReason> {
    let budget = input.budget;
    if !input.config.auto {
        return Some(SkipReason::AutoOff);
    }
    if input.effective < budget.soft_gate() {
        return Some(SkipReason::BelowSoftGate {
            effective: input.effective,
            soft_gate: budget.soft_gate(),
        });
    }
    if input
        .turn
        .is_soft_cap_reached(input.derived.turn_start.as_ref())
    {
        return Some(SkipReason::SoftCap);
    }
    if let Some(capsule) = input.derived.latest_soft_capsule() {
        let needed = budget
            .auto_limit()
            .max(capsule.tokens_after + budget.roi_floor());
        if input.effective < needed {
            return Some(SkipReason::NotRearmed {
                effective: input.effective,
                needed,
                capsule: capsule.entry_id.clone(),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derived::{PendingCheckpoint, SoftCapsule};
    use crate::entry::CheckpointKind;
    use crate::id::IdKind;

    fn id(n: u128) -> EntryId {
        EntryId::from_uuid(IdKind::Entry, n)
    }

    fn budget() -> Budget {
        // hardLimit 159,808, autoLimit 80,000, softGate 32,000, roiFloor 12,000.
        Budget::compute(
            TokenCount::new(200_000),
            TokenCount::new(32_000),
            &CompactionConfig::default(),
        )
        .unwrap()
    }

    const ON: TriggerConfig = TriggerConfig {
        auto: true,
        compact_on_turn_complete: true,
        compact_on_milestone: true,
    };

    fn check(
        effective: u64,
        config: TriggerConfig,
        derived: &DerivedState,
        turn: &TurnState,
        expected: (Option<Trigger>, &[(Trigger, &str)]),
    ) {
        let budget = budget();
        let decision = choose_trigger(&PreflightInput {
            effective: TokenCount::new(effective),
            budget: &budget,
            config,
            derived,
            turn,
        });
        let not_chosen: Vec<(Trigger, String)> = decision
            .not_chosen
            .iter()
            .map(|n| (n.trigger, n.reason.code().to_owned()))
            .collect();
        let expected_not: Vec<(Trigger, String)> = expected
            .1
            .iter()
            .map(|(t, r)| (*t, (*r).to_owned()))
            .collect();
        assert_eq!(
            (decision.chosen, not_chosen),
            (expected.0, expected_not),
            "effective {effective}"
        );
    }

    fn intents() -> DerivedState {
        DerivedState {
            pending_checkpoints: vec![PendingCheckpoint {
                entry_id: id(2),
                kind: CheckpointKind::Milestone,
            }],
            turn_complete: Some(id(1)),
            turn_start: Some(id(3)),
            ..DerivedState::default()
        }
    }

    #[test]
    fn nothing_fires_below_every_threshold() {
        check(
            79_999,
            ON,
            &DerivedState::default(),
            &TurnState::new(),
            (None, &[]),
        );
    }

    #[test]
    fn preflight_order() {
        let all = intents();
        check(
            159_809,
            ON,
            &all,
            &TurnState::new(),
            (
                Some(Trigger::HardLimit),
                &[
                    (Trigger::Milestone, "superseded"),
                    (Trigger::TurnComplete, "superseded"),
                    (Trigger::AutoThreshold, "superseded"),
                ],
            ),
        );
        check(
            159_808,
            ON,
            &all,
            &TurnState::new(),
            (
                Some(Trigger::Milestone),
                &[
                    (Trigger::TurnComplete, "superseded"),
                    (Trigger::AutoThreshold, "superseded"),
                ],
            ),
        );
        let turn_only = DerivedState {
            pending_checkpoints: Vec::new(),
            ..intents()
        };
        check(
            80_000,
            ON,
            &turn_only,
            &TurnState::new(),
            (
                Some(Trigger::TurnComplete),
                &[(Trigger::AutoThreshold, "superseded")],
            ),
        );
        check(
            80_000,
            ON,
            &DerivedState::default(),
            &TurnState::new(),
            (Some(Trigger::AutoThreshold), &[]),
        );
    }

    #[test]
    fn newest_checkpoint_kind_goes_first() {
        let derived = DerivedState {
            pending_checkpoints: vec![
                PendingCheckpoint {
                    entry_id: id(2),
                    kind: CheckpointKind::Milestone,
                },
                PendingCheckpoint {
                    entry_id: id(3),
                    kind: CheckpointKind::PlanPivot,
                },
                PendingCheckpoint {
                    entry_id: id(4),
                    kind: CheckpointKind::PlanPivot,
                },
            ],
            ..DerivedState::default()
        };
        check(
            40_000,
            ON,
            &derived,
            &TurnState::new(),
            (
                Some(Trigger::PlanPivot),
                &[(Trigger::Milestone, "superseded")],
            ),
        );
    }

    #[test]
    fn switches_and_gate() {
        let all = intents();
        let off = TriggerConfig { auto: false, ..ON };
        check(
            100_000,
            off,
            &all,
            &TurnState::new(),
            (
                None,
                &[
                    (Trigger::Milestone, "auto_off"),
                    (Trigger::TurnComplete, "auto_off"),
                    (Trigger::AutoThreshold, "auto_off"),
                ],
            ),
        );
        check(
            160_000,
            off,
            &DerivedState::default(),
            &TurnState::new(),
            (
                Some(Trigger::HardLimit),
                &[(Trigger::AutoThreshold, "auto_off")],
            ),
        );
        let no_intents = TriggerConfig {
            compact_on_milestone: false,
            compact_on_turn_complete: false,
            ..ON
        };
        check(40_000, no_intents, &all, &TurnState::new(), (None, &[]));
        check(
            31_999,
            ON,
            &all,
            &TurnState::new(),
            (
                None,
                &[
                    (Trigger::Milestone, "below_soft_gate"),
                    (Trigger::TurnComplete, "below_soft_gate"),
                ],
            ),
        );
        check(
            32_000,
            ON,
            &all,
            &TurnState::new(),
            (
                Some(Trigger::Milestone),
                &[(Trigger::TurnComplete, "superseded")],
            ),
        );
    }

    #[test]
    fn soft_cap_blocks_soft_triggers_of_the_marked_turn_only() {
        let derived = DerivedState {
            turn_start: Some(id(3)),
            ..DerivedState::default()
        };
        let mut turn = TurnState::new();
        turn.mark_soft_attempt_without_capsule(Some(&id(3)));
        check(
            100_000,
            ON,
            &derived,
            &turn,
            (None, &[(Trigger::AutoThreshold, "soft_cap")]),
        );
        check(
            160_000,
            ON,
            &derived,
            &turn,
            (
                Some(Trigger::HardLimit),
                &[(Trigger::AutoThreshold, "soft_cap")],
            ),
        );
        let next_turn = DerivedState {
            turn_start: Some(id(9)),
            ..DerivedState::default()
        };
        check(
            100_000,
            ON,
            &next_turn,
            &turn,
            (Some(Trigger::AutoThreshold), &[]),
        );
        turn.sync(Some(&id(9)));
        assert_eq!(turn, TurnState::new());
    }

    #[test]
    fn rearm_after_a_soft_capsule() {
        let derived = DerivedState {
            turn_start: Some(id(1)),
            turn_soft_capsules: vec![SoftCapsule {
                entry_id: id(2),
                trigger: Trigger::AutoThreshold,
                tokens_after: TokenCount::new(75_000),
            }],
            ..DerivedState::default()
        };
        // needed = max(80,000, 75,000 + 12,000) = 87,000.
        check(
            86_999,
            ON,
            &derived,
            &TurnState::new(),
            (None, &[(Trigger::AutoThreshold, "not_rearmed")]),
        );
        check(
            87_000,
            ON,
            &derived,
            &TurnState::new(),
            (Some(Trigger::AutoThreshold), &[]),
        );
        let budget = budget();
        let decision = choose_trigger(&PreflightInput {
            effective: TokenCount::new(86_999),
            budget: &budget,
            config: ON,
            derived: &derived,
            turn: &TurnState::new(),
        });
        assert_eq!(
            decision.not_chosen[0].reason.to_string(),
            format!(
                "effective 86,999 < 87,000 needed to re-arm after soft capsule {}",
                id(2)
            )
        );
    }
}
