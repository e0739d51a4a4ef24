//! The preflight decision (SPEC §7 steps 2–5 and 7), one for every driver:
//! hygiene when due, the trigger, the plan with `read_cost`'s pay-off and
//! the skip rules, the span, retained set and capsule state a generation
//! needs ([`decide`]), then the post-generation check and the marks its
//! outcome leaves on the [`TurnState`] ([`accept`], [`appended`],
//! [`abandoned`]).
//!
//! The engine's barrier and the replay's `soba` policy both call these and
//! keep only their own driving: measuring, generating (the summarizer with
//! its deadline and cancel, or the deterministic builder), appending, and
//! what they record. Nothing here measures a clock or touches a log.

use std::collections::HashSet;

use crate::budget::Budget;
use crate::builder::{self, BuildOptions, CapsuleFrame};
use crate::calibration::Factor;
use crate::capsule::{Capsule, CapsuleState, OverflowRecord, Quality, Rehydration, Trigger};
use crate::config::CompactionConfig;
use crate::derived::DerivedState;
use crate::entry::{Entry, EntryBody};
use crate::facts::{self, Facts, FactsConfig, FactsInput};
use crate::hygiene::{self, HygieneConfig, HygieneDecision};
use crate::id::EntryId;
use crate::input::LiveInput;
use crate::plan::{self, Plan, PlanError, PlanRequest, PostRoi, SkipReason};
use crate::rehydrate::{self, FileSource};
use crate::render;
use crate::tokens::{TokenCount, TokenCounter};
use crate::trigger::{self, NotChosen, PreflightInput, TriggerConfig, TurnState};

/// A compaction the caller forces instead of a trigger choice: `/compact`
/// or the recovery from a context overflow (SPEC §6.3).
#[derive(Debug, Clone, PartialEq)]
pub struct Forced {
    /// `user` or `context_overflow`.
    pub trigger: Trigger,
    /// The `/compact` instructions, if any.
    pub instructions: Option<String>,
    /// What the overflow stated, on `context_overflow`.
    pub overflow: Option<OverflowRecord>,
    /// The limits to plan for instead of the session's: a provider that
    /// stated a smaller window than SOBA was told ([`stated_budget`]).
    pub budget: Option<Budget>,
}

/// Everything a preflight decides from, measured by the driver.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    /// The model input of `path`.
    pub live: &'a LiveInput,
    /// The path `live` was built from (the live region starts at
    /// [`LiveInput::region_start`]).
    pub path: &'a [Entry],
    /// The state derived from `path`, taken before hygiene.
    pub derived: &'a DerivedState,
    /// The session's limits.
    pub budget: &'a Budget,
    /// The compaction settings.
    pub config: &'a CompactionConfig,
    /// Effective tokens, measured now (after hygiene, once it ran).
    pub effective: TokenCount,
    /// The active model's calibration factor.
    pub factor: Factor,
    /// The local token counter.
    pub counter: &'a dyn TokenCounter,
    /// The session's working directory, for facts.
    pub cwd: Option<&'a str>,
    /// The active model, recorded in the capsule's state.
    pub model: &'a str,
    /// Milliseconds since the previous request, when known.
    pub idle_ms: Option<u64>,
    /// The provider's cache lifetime in milliseconds when the driver knows
    /// it better than `cacheTtlSeconds` (the replay's `--cache-ttl`);
    /// `cacheTtlSeconds` 0 still turns `cache_expired` off.
    pub cache_ttl_ms: Option<u64>,
    /// A forced compaction, instead of the trigger choice.
    pub forced: Option<&'a Forced>,
    /// Where the current content of the files brought back after a capsule
    /// comes from (the engine: the workspace; the replay: the transcript);
    /// `None` brings none back.
    pub files: Option<&'a dyn FileSource>,
}

/// What a preflight decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// Soft triggers that fired but were not chosen (for flight records).
    pub not_chosen: Vec<NotChosen>,
    /// The decision.
    pub decision: Decision,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing to compact (no trigger, or `read_cost` that does not work or
    /// pay): go on to inference.
    Proceed,
    /// Hygiene was due (once per turn): append an `Apply` pass (or record
    /// why not), measure again and call [`decide`] again.
    Hygiene(HygieneDecision),
    /// The plan has nothing to compact, or failed its pre-generation ROI
    /// check: not an attempt, nothing to generate.
    Skipped {
        /// The trigger planned for.
        trigger: Trigger,
        /// Why.
        reason: SkipReason,
        /// What the plan would have freed (spanTokens − capsuleEstimate;
        /// may be negative), for a message that gives the figures.
        reclaimable: i64,
    },
    /// No plan fits (fail-closed, SPEC §7.2): a soft trigger goes on with
    /// the full history (the turn's soft cap is marked); a forced one
    /// cannot send its request.
    Failed {
        /// The trigger planned for.
        trigger: Trigger,
        /// Why no plan fits.
        error: PlanError,
    },
    /// Generate a capsule for this job, then call [`accept`].
    Compact(Box<CompactJob>),
}

/// What generating a capsule needs: the plan, its span, what stays, the
/// previous capsule and the state the capsule records.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactJob {
    /// The plan (its trigger, tokensBefore and budget included).
    pub plan: Plan,
    /// The span entries the capsule replaces, as the summarizer reads them.
    pub span: Vec<Entry>,
    /// The latest capsule on the path, which this one rolls up.
    pub previous: Option<(EntryId, Capsule)>,
    /// The entries that stay after the capsule (the cut straddler not).
    pub retained: HashSet<EntryId>,
    /// The path from the first kept entry on (the retained tail), read
    /// for what is newer than the span: a plan, a passing check.
    pub tail: Vec<Entry>,
    /// The state in force, recorded in the capsule.
    pub state: CapsuleState,
    /// The turn the preflight ran in.
    pub turn_start: Option<EntryId>,
    /// The `/compact` instructions.
    pub instructions: Option<String>,
    /// Set on `context_overflow`.
    pub overflow: Option<OverflowRecord>,
    /// The working directory, for facts.
    pub cwd: Option<String>,
    /// `compaction.userMessageBudgetTokens`: the planner's facts and the
    /// capsule's are bounded alike, or the capsule outgrows its plan.
    pub user_message_budget: TokenCount,
    /// The files brought back after the capsule, read when the job was
    /// decided.
    pub rehydration: Rehydration,
}

impl CompactJob {
    /// Returns the trigger.
    pub fn trigger(&self) -> Trigger {
        self.plan.trigger
    }

    /// Returns the previous capsule, if any.
    pub fn previous_capsule(&self) -> Option<&Capsule> {
        self.previous.as_ref().map(|(_, capsule)| capsule)
    }

    /// Returns the facts of the span the capsule carries.
    pub fn facts(&self, counter: &dyn TokenCounter) -> Facts {
        facts::extract(
            &FactsInput {
                span: &self.span,
                tail: &self.tail,
                previous: self.previous_capsule(),
                retained: &self.retained,
                cwd: self.cwd.as_deref(),
            },
            &FactsConfig {
                user_message_budget: self.user_message_budget,
            },
            counter,
        )
    }

    /// Returns the builder's options for a capsule of `quality`.
    pub fn build_options(&self, quality: Quality) -> BuildOptions<'_> {
        BuildOptions {
            auto_limit: self.plan.budget.auto_limit(),
            trigger: self.plan.trigger,
            quality,
            instructions: self.instructions.as_deref(),
        }
    }

    /// Returns the frame that makes built content a capsule entry;
    /// `tokens_after` is zero until measured, `native` unset.
    pub fn frame(&self) -> CapsuleFrame {
        CapsuleFrame {
            first_kept_entry_id: self.plan.first_kept_entry_id.clone(),
            boundary_truncation: self.plan.boundary_truncation.clone(),
            tokens_before: self.plan.effective,
            tokens_after: TokenCount::ZERO,
            previous_capsule_id: self.previous.as_ref().map(|(id, _)| id.clone()),
            state: self.state.clone(),
            instructions: self.instructions.clone(),
            native: None,
            overflow: self.overflow,
            imported: None,
            rehydrated: self.rehydration.clone(),
        }
    }
}

/// Returns the limits an overflow recovery plans for when the provider
/// stated a window smaller than the one SOBA was told (a configured
/// `contextWindow` above what the server was started with): the session's
/// limits would only rebuild a request the server refuses again. `None`
/// when the stated window is not smaller, or leaves no room for the
/// request's `max_tokens`.
pub fn stated_budget(budget: &Budget, config: &CompactionConfig, stated: u64) -> Option<Budget> {
    if stated >= budget.context_window().get() {
        return None;
    }
    let window = TokenCount::new(stated);
    let max_output = budget.max_output_tokens();
    let config = config.for_window(window, max_output);
    Budget::compute(window, max_output, &config).ok()
}

/// Decides one preflight step (SPEC §7 steps 2–5): hygiene when due, else
/// the trigger (or `input.forced`) and its plan.
///
/// `hygiene_considered` is the turn hygiene was last considered in:
/// hygiene is considered once per turn, at the first preflight at or above
/// hygieneLimit; when it is due this returns [`Decision::Hygiene`] and the
/// driver calls again after applying it. A soft trigger whose plan fails
/// marks the turn's soft cap on `turn`.
pub fn decide(
    input: &Input<'_>,
    turn: &mut TurnState,
    hygiene_considered: &mut Option<Option<EntryId>>,
) -> Decided {
    let derived = input.derived;
    let turn_start = derived.turn_start.clone();
    turn.sync(turn_start.as_ref());

    let considered = hygiene_considered.as_ref() == Some(&turn_start);
    if hygiene::is_due(input.effective, input.budget.hygiene_limit(), considered) {
        *hygiene_considered = Some(turn_start);
        let config = HygieneConfig::new(input.budget, input.config);
        return Decided {
            not_chosen: Vec::new(),
            decision: Decision::Hygiene(hygiene::plan_hygiene(
                input.live,
                input.effective,
                &config,
            )),
        };
    }

    let effective = input.effective;
    let mut not_chosen = Vec::new();
    let (chosen, forced) = match input.forced {
        Some(forced) => (forced.trigger, Some(forced)),
        None => {
            let mut config = TriggerConfig::resolve(input.config, derived);
            if config.cache_ttl_ms > 0
                && let Some(ttl_ms) = input.cache_ttl_ms
            {
                config.cache_ttl_ms = ttl_ms;
            }
            let decision = trigger::choose_trigger(&PreflightInput {
                effective,
                budget: input.budget,
                config,
                derived,
                turn: &*turn,
                idle_ms: input.idle_ms,
            });
            not_chosen = decision.not_chosen;
            match decision.chosen {
                Some(chosen) => (chosen, None),
                None => {
                    return Decided {
                        not_chosen,
                        decision: Decision::Proceed,
                    };
                }
            }
        }
    };
    let decision = plan_compaction(input, chosen, forced, turn);
    Decided {
        not_chosen,
        decision,
    }
}

/// Plans a compaction for `chosen` (SPEC §7 step 4) and, when it is to be
/// generated, gathers its job.
fn plan_compaction(
    input: &Input<'_>,
    chosen: Trigger,
    forced: Option<&Forced>,
    turn: &mut TurnState,
) -> Decision {
    let counter = input.counter;
    let path = input.path;
    let turn_start = input.derived.turn_start.clone();
    let previous = path.iter().rev().find_map(|entry| match &entry.body {
        EntryBody::Capsule(capsule) => Some((entry.id.clone(), (**capsule).clone())),
        _ => None,
    });
    let facts_config = FactsConfig {
        user_message_budget: input.config.user_message_budget_tokens,
    };
    // Facts of everything live: an upper bound for any boundary (§7.2).
    let region = &path[input.live.region_start()..];
    let all_facts = facts::extract(
        &FactsInput {
            span: region,
            tail: &[],
            previous: previous.as_ref().map(|(_, capsule)| capsule),
            retained: &HashSet::new(),
            cwd: input.cwd,
        },
        &facts_config,
        counter,
    );
    let facts_tokens = counter
        .count_text(&render::local_markdown(
            &builder::bounded_local(&all_facts, counter),
            None,
        ))
        .n;
    let plan_budget = forced
        .and_then(|forced| forced.budget.as_ref())
        .unwrap_or(input.budget);
    // The files modified anywhere live, estimated from their sizes: an
    // upper bound like the facts'.
    let previous_capsule = previous.as_ref().map(|(_, capsule)| capsule);
    let rehydrate_config = input.config.rehydrate.within(plan_budget.auto_limit());
    let files = input.files.filter(|_| rehydrate_config.is_enabled());
    let rehydrate_tokens = files.map_or(TokenCount::ZERO, |files| {
        let candidates = rehydrate::candidates(region, previous_capsule, input.cwd);
        rehydrate::estimate(&candidates, files, &rehydrate_config, counter)
    });
    let request = PlanRequest {
        trigger: chosen,
        effective: input.effective,
        budget: plan_budget,
        summarizer_max_output_tokens: input.config.summarizer.max_output_tokens,
        facts_tokens,
        rehydrate_tokens,
        factor: input.factor,
    };
    // The files only add to a plan: one that fits without them (and not
    // with them) compacts without them.
    let (planned, files) = match plan::plan(input.live, &request) {
        Err(_) if rehydrate_tokens > TokenCount::ZERO => {
            let without = PlanRequest {
                rehydrate_tokens: TokenCount::ZERO,
                ..request
            };
            (plan::plan(input.live, &without), None)
        }
        planned => (planned, files),
    };
    let planned = match planned {
        Ok(planned) => planned,
        // `read_cost` is a standing candidate: a plan that does not work,
        // is skipped or does not pay is no attempt and no record.
        Err(_) if chosen == Trigger::ReadCost => return Decision::Proceed,
        Err(error) => {
            if chosen.is_soft() {
                turn.mark_soft_attempt_without_capsule(turn_start.as_ref());
            }
            return Decision::Failed {
                trigger: chosen,
                error,
            };
        }
    };
    if chosen == Trigger::ReadCost {
        let growth = input.derived.growth_per_request(input.effective);
        let pays = growth.is_some_and(|growth| plan::pays_off(&planned, growth));
        if planned.skip.is_some() || !pays {
            return Decision::Proceed;
        }
    }
    if let Some(reason) = planned.skip {
        return Decision::Skipped {
            trigger: chosen,
            reason,
            reclaimable: planned.reclaimable,
        };
    }

    let span = plan::span_entries(region, &planned);
    let truncated = planned
        .boundary_truncation
        .as_ref()
        .map(|cut| cut.entry_id.clone());
    let retained: HashSet<EntryId> = match &planned.first_kept_entry_id {
        Some(first) => path
            .iter()
            .skip_while(|entry| &entry.id != first)
            .map(|entry| entry.id.clone())
            .filter(|id| Some(id) != truncated.as_ref())
            .collect(),
        None => HashSet::new(),
    };
    let tail: Vec<Entry> = match &planned.first_kept_entry_id {
        Some(first) => path
            .iter()
            .skip_while(|entry| &entry.id != first)
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let rehydration = files.map_or_else(Rehydration::default, |files| {
        let candidates = rehydrate::candidates(&span, previous_capsule, input.cwd);
        rehydrate::select(&candidates, files, &tail, &rehydrate_config, counter)
    });
    let pinned = input.live.pinned_state();
    let derived = input.derived;
    let state = CapsuleState {
        model: input.model.to_owned(),
        calibration: vec![(input.model.to_owned(), input.factor.get())],
        auto_compact: derived.auto_compact_or(input.config.auto),
        auto_compact_override: derived.auto_compact,
        approvals: derived.approvals.clone(),
        skills: pinned.skills,
        pinned_agents_md: pinned.agents_md,
        pinned_system: pinned.system_messages,
    };
    Decision::Compact(Box::new(CompactJob {
        plan: planned,
        span,
        previous,
        retained,
        tail,
        state,
        turn_start,
        instructions: forced.and_then(|forced| forced.instructions.clone()),
        overflow: forced.and_then(|forced| forced.overflow),
        cwd: input.cwd.map(str::to_owned),
        user_message_budget: input.config.user_message_budget_tokens,
        rehydration,
    }))
}

/// The post-generation check's verdict on a capsule (SPEC §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Append the capsule, then call [`appended`].
    Append,
    /// A soft capsule that reclaims too little: not appended (`skipped`).
    Rejected(PostRoi),
    /// The input with the capsule is still over hardLimit: not appended
    /// (`failed`).
    TooLarge {
        /// tokensAfter.
        after: TokenCount,
        /// The plan's hardLimit.
        hard_limit: TokenCount,
    },
}

/// Checks a generated capsule: `after` is the effective tokens of the
/// input with it appended, measured exactly; `budget` is the session's
/// (its ROI gate), the fit is against the plan's hardLimit (an overflow
/// recovery's may be a stated smaller window's). A capsule that is not
/// appended leaves its marks on `turn` here: a rejected soft capsule the
/// soft cap and a raised bar, any other soft one the soft cap.
pub fn accept(
    job: &CompactJob,
    after: TokenCount,
    budget: &Budget,
    turn: &mut TurnState,
) -> Verdict {
    let trigger = job.trigger();
    let post = plan::post_roi(trigger, job.plan.effective, after, budget);
    if !post.ok {
        if trigger.is_soft() {
            turn.mark_soft_rejection(job.turn_start.as_ref(), &post, budget);
        }
        return Verdict::Rejected(post);
    }
    let hard_limit = job.plan.budget.hard_limit();
    if after > hard_limit {
        abandoned(job, turn);
        return Verdict::TooLarge { after, hard_limit };
    }
    Verdict::Append
}

/// Leaves the marks of an appended capsule: the bar a rejected soft
/// capsule raised is forgotten.
pub fn appended(turn: &mut TurnState) {
    turn.clear_raised_bar();
}

/// Leaves the marks of a job that ended without a capsule before its check
/// (cancelled, stale, or generation failed): a soft one reaches the turn's
/// soft cap.
pub fn abandoned(job: &CompactJob, turn: &mut TurnState) {
    if job.trigger().is_soft() {
        turn.mark_soft_attempt_without_capsule(job.turn_start.as_ref());
    }
}
