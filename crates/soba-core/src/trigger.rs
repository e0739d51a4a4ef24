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
use crate::plan::PostRoi;
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
    /// `compaction.cacheTtlSeconds` in milliseconds (0: `cache_expired`
    /// never fires).
    pub cache_ttl_ms: u64,
    /// `compaction.compactOnReadCost`: `read_cost` may be chosen.
    pub compact_on_read_cost: bool,
}

impl TriggerConfig {
    /// Returns the switches of `config`, with `auto` overridden by the latest
    /// `/auto-compact` on the path.
    pub fn resolve(config: &CompactionConfig, derived: &DerivedState) -> TriggerConfig {
        TriggerConfig {
            auto: derived.auto_compact_or(config.auto),
            compact_on_turn_complete: config.compact_on_turn_complete,
            compact_on_milestone: config.compact_on_milestone,
            cache_ttl_ms: config.cache_ttl_seconds.saturating_mul(1_000),
            compact_on_read_cost: config.compact_on_read_cost,
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
    /// After a soft capsule the post-generation check rejected: the
    /// effective tokens the next soft attempt needs (the rejected attempt's
    /// tokensBefore plus its shortfall), so that a paid-for summary is not
    /// generated again at nearly the same size. Outlives the turn; cleared
    /// when a capsule is appended.
    raised_bar: Option<TokenCount>,
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

    /// Records a soft capsule the post-generation ROI check rejected
    /// (`post.ok` false): the soft cap of this turn, and a bar for every
    /// later soft attempt — effective must grow by at least the shortfall
    /// (what the capsule missed roiFloor or minSavingsRatio by) first.
    pub fn mark_soft_rejection(
        &mut self,
        turn_start: Option<&EntryId>,
        post: &PostRoi,
        budget: &Budget,
    ) {
        self.mark_soft_attempt_without_capsule(turn_start);
        let before = post.tokens_before.get();
        let by_ratio = budget.min_savings_ratio().mul_ceil(before);
        let needed = budget.roi_floor().get().max(by_ratio);
        let reclaimed = u64::try_from(post.reclaimed.max(0)).unwrap_or(0);
        let shortfall = needed.saturating_sub(reclaimed).max(1);
        self.raised_bar = Some(TokenCount::new(before.saturating_add(shortfall)));
    }

    /// Forgets the bar a rejected soft capsule raised: call when a capsule
    /// is appended.
    pub fn clear_raised_bar(&mut self) {
        self.raised_bar = None;
    }

    /// Returns the effective tokens the next soft attempt needs after a
    /// rejected soft capsule, if one raised the bar.
    pub fn raised_bar(&self) -> Option<TokenCount> {
        self.raised_bar
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
        if self.marked_turn.is_some() && !self.is_soft_cap_reached(turn_start) {
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
    /// Milliseconds since the previous request was sent, when known (none
    /// yet in this session: `None`).
    pub idle_ms: Option<u64>,
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
    /// A soft capsule was rejected after generation, and effective has not
    /// grown by its shortfall since.
    BelowRaisedBar {
        /// Effective tokens.
        effective: TokenCount,
        /// The rejected attempt's tokensBefore plus its shortfall.
        bar: TokenCount,
    },
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
            SkipReason::BelowRaisedBar { .. } => "below_raised_bar",
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
            SkipReason::BelowRaisedBar { effective, bar } => write!(
                f,
                "effective {effective} < {bar} needed after a rejected soft capsule"
            ),
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
    let ttl = input.config.cache_ttl_ms;
    if ttl > 0 && input.idle_ms.is_some_and(|idle| idle > ttl) {
        fired.push(Trigger::CacheExpired);
    }
    if input.effective >= input.budget.auto_limit() {
        fired.push(Trigger::AutoThreshold);
    }

    let blocked_soft = soft_block(input, false);
    let blocked_expired = soft_block(input, true);
    let mut decision = TriggerDecision::default();
    for trigger in fired {
        let blocked = match trigger {
            Trigger::CacheExpired => blocked_expired.clone(),
            trigger if trigger.is_soft() => blocked_soft.clone(),
            _ => None,
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
    // `read_cost` is a standing candidate above softGate, not an event: it
    // is chosen only when nothing else is, and never recorded as skipped
    // (that would be every request). The planner's pays_off decides it.
    if decision.chosen.is_none() && input.config.compact_on_read_cost && blocked_expired.is_none() {
        decision.chosen = Some(Trigger::ReadCost);
    }
    decision
}

/// Returns why no soft trigger may be chosen at this preflight, if so; the
/// same reason holds for every soft trigger, except that `cache_expired`
/// and `read_cost` are exempt from the re-arm rule: the rule keeps a turn
/// from paying for a second rewrite of its prompt soon after a soft
/// capsule; after an expiry that rewrite happens whatever the policy does,
/// and `read_cost` fires only when the rewrite is paid back.
fn soft_block(input: &PreflightInput<'_>, cache_expired: bool) -> Option<SkipReason> {
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
    if let Some(bar) = input.turn.raised_bar()
        && input.effective < bar
    {
        return Some(SkipReason::BelowRaisedBar {
            effective: input.effective,
            bar,
        });
    }
    if let Some(capsule) = input.derived.latest_soft_capsule()
        && !cache_expired
    {
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
        cache_ttl_ms: 300_000,
        compact_on_read_cost: false,
    };

    fn check(
        effective: u64,
        config: TriggerConfig,
        derived: &DerivedState,
        turn: &TurnState,
        expected: (Option<Trigger>, &[(Trigger, &str)]),
    ) {
        check_idle(effective, None, config, derived, turn, expected);
    }

    fn check_idle(
        effective: u64,
        idle_ms: Option<u64>,
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
            idle_ms,
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
            idle_ms: None,
        });
        assert_eq!(
            decision.not_chosen[0].reason.to_string(),
            format!(
                "effective 86,999 < 87,000 needed to re-arm after soft capsule {}",
                id(2)
            )
        );
    }

    fn soft_capsule_at(tokens_after: u64) -> DerivedState {
        DerivedState {
            turn_start: Some(id(1)),
            turn_soft_capsules: vec![SoftCapsule {
                entry_id: id(2),
                trigger: Trigger::AutoThreshold,
                tokens_after: TokenCount::new(tokens_after),
            }],
            ..DerivedState::default()
        }
    }

    #[test]
    fn an_idle_gap_beyond_the_cache_lifetime_fires_cache_expired() {
        let none = DerivedState::default();
        let turn = TurnState::new();
        check_idle(
            40_000,
            Some(300_001),
            ON,
            &none,
            &turn,
            (Some(Trigger::CacheExpired), &[]),
        );
        check_idle(40_000, Some(300_000), ON, &none, &turn, (None, &[]));
        check_idle(40_000, None, ON, &none, &turn, (None, &[]));
        let off = TriggerConfig {
            cache_ttl_ms: 0,
            ..ON
        };
        check_idle(40_000, Some(10_000_000), off, &none, &turn, (None, &[]));
        check_idle(
            31_999,
            Some(300_001),
            ON,
            &none,
            &turn,
            (None, &[(Trigger::CacheExpired, "below_soft_gate")]),
        );
        // Exempt from the re-arm rule (87,000 needed), not from the soft cap.
        let rearm = soft_capsule_at(75_000);
        check_idle(
            40_000,
            Some(300_001),
            ON,
            &rearm,
            &turn,
            (Some(Trigger::CacheExpired), &[]),
        );
        let mut capped = TurnState::new();
        capped.mark_soft_attempt_without_capsule(Some(&id(1)));
        check_idle(
            40_000,
            Some(300_001),
            ON,
            &rearm,
            &capped,
            (None, &[(Trigger::CacheExpired, "soft_cap")]),
        );
    }

    #[test]
    fn read_cost_is_a_silent_standing_candidate_above_the_soft_gate() {
        let with = TriggerConfig {
            compact_on_read_cost: true,
            ..ON
        };
        let none = DerivedState::default();
        let turn = TurnState::new();
        check(40_000, with, &none, &turn, (Some(Trigger::ReadCost), &[]));
        check(31_999, with, &none, &turn, (None, &[]));
        // Exempt from the re-arm rule; any event trigger goes first.
        check(
            40_000,
            with,
            &soft_capsule_at(30_000),
            &turn,
            (Some(Trigger::ReadCost), &[]),
        );
        check(
            80_000,
            with,
            &none,
            &turn,
            (Some(Trigger::AutoThreshold), &[]),
        );
        let off = TriggerConfig {
            auto: false,
            ..with
        };
        check(40_000, off, &none, &turn, (None, &[]));
    }

    #[test]
    fn a_rejected_soft_capsule_raises_the_bar_by_its_shortfall() {
        let budget = budget();
        let mut turn = TurnState::new();
        // 50,000 before, 40,000 after: reclaimed 10,000 < roiFloor 12,000
        // and < 25 % (12,500): the shortfall is 2,500.
        let post = crate::plan::post_roi(
            Trigger::AutoThreshold,
            TokenCount::new(50_000),
            TokenCount::new(40_000),
            &budget,
        );
        assert!(!post.ok);
        turn.mark_soft_rejection(Some(&id(1)), &post, &budget);
        assert_eq!(turn.raised_bar(), Some(TokenCount::new(52_500)));
        // The next turn: the soft cap is gone, the bar is not.
        let next = DerivedState {
            turn_start: Some(id(9)),
            ..DerivedState::default()
        };
        turn.sync(Some(&id(9)));
        let with = TriggerConfig {
            compact_on_read_cost: true,
            ..ON
        };
        check(52_499, with, &next, &turn, (None, &[]));
        check(52_500, with, &next, &turn, (Some(Trigger::ReadCost), &[]));
        check_idle(
            52_499,
            Some(300_001),
            with,
            &next,
            &turn,
            (None, &[(Trigger::CacheExpired, "below_raised_bar")]),
        );
        turn.clear_raised_bar();
        check(40_000, with, &next, &turn, (Some(Trigger::ReadCost), &[]));
    }
}
