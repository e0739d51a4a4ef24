//! The compaction planner (SPEC §7 step 4, §7.2, §8.2, §8.3): a pure
//! function from the current model input to an immutable [`Plan`] that can
//! be printed and explained before anything runs.
//!
//! The plan places the retention boundary (keepRecent walk, straddler cut,
//! fail-closed fit), names the span the capsule replaces, and carries the
//! pre-generation ROI figures. [`post_roi`] is the check after generation.

use std::fmt;

use crate::budget::Budget;
use crate::calibration::Factor;
use crate::capsule::{BoundaryTruncation, Capsule, Trigger};
use crate::entry::{Entry, EntryBody};
use crate::id::EntryId;
use crate::input::{InputOrigin, LiveInput};
use crate::retention::{self, NoFit, Retention};
use crate::tokens::{TokenCount, TokenCounter, group_thousands};
use crate::unit::{self, Unit};

/// The narrative estimate of a first capsule (SPEC §8.3).
pub const FIRST_NARRATIVE_ESTIMATE: TokenCount = TokenCount::new(1_500);

/// What the planner needs besides the model input.
#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    /// What fired.
    pub trigger: Trigger,
    /// Effective tokens as measured at this preflight (either source).
    pub effective: TokenCount,
    /// The limits in force.
    pub budget: &'a Budget,
    /// `summarizer.maxOutputTokens`.
    pub summarizer_max_output_tokens: TokenCount,
    /// Tokens of the deterministic facts the capsule will carry (its local
    /// sections, extracted from the log up to the leaf): an upper bound
    /// for any boundary, so the fit does not depend on where it lands.
    pub facts_tokens: TokenCount,
    /// Tokens of the files brought back after the capsule
    /// ([`crate::rehydrate`]): they count in the capsule budget and its
    /// estimate like the facts.
    pub rehydrate_tokens: TokenCount,
    /// The model's calibration factor; local counts are multiplied by it
    /// before they are compared with limits.
    pub factor: Factor,
}

/// Why a plan does not go on to generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// Nothing lies before the keep window (and nothing is cut): the
    /// outcome is `skipped`, for `/compact` too.
    NothingToCompact,
    /// A soft trigger whose estimate misses an ROI gate: not an attempt.
    PreRoi,
}

impl SkipReason {
    /// Returns the reason as a flight record writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::NothingToCompact => "nothing_to_compact",
            SkipReason::PreRoi => "pre_roi",
        }
    }
}

/// The limit a plan must fit under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitLimit {
    /// `hardLimit`, or `autoLimit` for a `context_overflow` compaction.
    pub name: &'static str,
    /// Its value.
    pub tokens: TokenCount,
}

/// An immutable compaction plan (STYLE "Plan, then act"). Every token
/// figure is calibrated (local count × factor).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// What fired.
    pub trigger: Trigger,
    /// Effective tokens at the preflight.
    pub effective: TokenCount,
    /// The limits in force.
    pub budget: Budget,
    /// The calibration factor applied.
    pub factor: Factor,
    /// The limit the result must fit under.
    pub fit_limit: FitLimit,
    /// The latest capsule on the path, rolled into the new one.
    pub previous_capsule_id: Option<EntryId>,
    /// The previous capsule's first kept entry.
    pub previous_first_kept_entry_id: Option<EntryId>,
    /// The new retained tail's first entry; `None` only when there is no
    /// message to keep.
    pub first_kept_entry_id: Option<EntryId>,
    /// The cut of the first kept entry, when it is a truncated straddler.
    pub boundary_truncation: Option<BoundaryTruncation>,
    /// Entries summarized: the live units before the boundary, then the
    /// cut straddler (its elided middle), oldest first.
    pub span_entry_ids: Vec<EntryId>,
    /// Entries kept verbatim in the new tail, oldest first: what the fact
    /// extractor takes as `retained`. A cut straddler is not among them
    /// (SPEC §8.2: a truncated user message is not in the retained tail).
    pub retained_entry_ids: Vec<EntryId>,
    /// Tokens the span removes from the model input: the previous capsule,
    /// the units before the boundary and the straddler's elided middle.
    pub span_tokens: TokenCount,
    /// The system prompt, tool schemas, skills and pinned context.
    pub fixed_tokens: TokenCount,
    /// Deterministic facts + files brought back +
    /// `summarizer.maxOutputTokens` (SPEC §7.2).
    pub capsule_budget: TokenCount,
    /// The retained tail, the cut straddler at its kept size.
    pub tail_tokens: TokenCount,
    /// Units in the retained tail.
    pub tail_units: usize,
    /// Whether the boundary was moved later than keepRecent put it, so that
    /// the result fits.
    pub moved_for_fit: bool,
    /// The deterministic facts' tokens.
    pub facts_tokens: TokenCount,
    /// The tokens of the files brought back after the capsule.
    pub rehydrate_tokens: TokenCount,
    /// The narrative's estimate: min(maxOutputTokens, previous narrative or
    /// 1,500).
    pub narrative_estimate: TokenCount,
    /// (facts + narrative estimate) × factor, calibrated like the span.
    pub capsule_estimate: TokenCount,
    /// spanTokens − capsuleEstimate (may be negative).
    pub reclaimable: i64,
    /// reclaimable / effective, in parts per million (may be negative).
    pub savings_ppm: i64,
    /// The session leaf the append must still find.
    pub expected_leaf: Option<EntryId>,
    /// Whether the pre-generation ROI check passed (always true for
    /// triggers that skip it).
    pub pre_roi_ok: bool,
    /// Why the plan stops here, if it does.
    pub skip: Option<SkipReason>,
}

impl Plan {
    /// Returns whether the capsule should be generated.
    pub fn should_generate(&self) -> bool {
        self.skip.is_none()
    }

    /// Returns the plan as the multi-line text `--dry-run` prints.
    pub fn explain(&self) -> String {
        self.to_string()
    }
}

/// Why no plan can make the model input fit (SPEC §7.2): the turn fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The newest unit alone is over the limit; nothing compaction can do
    /// helps, and no retry without a smaller message can.
    #[error(
        "newest unit {unit_tokens} tokens > {limit_name} {limit}; split the work into smaller steps or use a model with a larger context window"
    )]
    NewestUnitTooLarge {
        /// The newest unit's calibrated tokens.
        unit_tokens: TokenCount,
        /// `hardLimit` or `autoLimit`.
        limit_name: &'static str,
        /// Its value.
        limit: TokenCount,
    },
    /// The newest unit fits the limit, but not beside the fixed part and
    /// the capsule budget. Retrying with a lower `maxToolResultTokens` may
    /// help when the unit holds large tool results.
    #[error(
        "newest unit {unit_tokens} tokens + system prompt, tools and skills {fixed_tokens} + capsule budget {capsule_budget} > {limit_name} {limit}; shorten the message or lower compaction.maxToolResultTokens (for a tool result), or use a model with a larger context window"
    )]
    NoRoomForNewestUnit {
        /// The newest unit's calibrated tokens.
        unit_tokens: TokenCount,
        /// The fixed part's calibrated tokens.
        fixed_tokens: TokenCount,
        /// The capsule budget.
        capsule_budget: TokenCount,
        /// `hardLimit` or `autoLimit`.
        limit_name: &'static str,
        /// Its value.
        limit: TokenCount,
    },
}

/// Returns the largest local count whose calibrated value is ≤ `limit`.
fn local_room(factor: Factor, limit: TokenCount) -> TokenCount {
    let mut local = TokenCount::new((limit.get() as f64 / factor.get()).floor() as u64);
    while local > TokenCount::ZERO && factor.apply(local) > limit {
        local = local.saturating_sub(TokenCount::new(1));
    }
    while factor.apply(local + TokenCount::new(1)) <= limit {
        local += TokenCount::new(1);
    }
    local
}

/// Returns the tokens of a capsule's narrative: its eight sections, or its
/// markdown when it has none (an imported summary).
pub fn narrative_tokens(counter: &dyn TokenCounter, capsule: &Capsule) -> TokenCount {
    let sections = capsule.narrative.sections();
    if sections.iter().all(|(_, text)| text.trim().is_empty()) {
        return counter.count_text(&capsule.markdown).n;
    }
    sections
        .iter()
        .map(|(heading, text)| counter.count_text(heading).n + counter.count_text(text).n)
        .sum()
}

/// Plans a compaction of the current model input (SPEC §8.2, §7.2, §8.3).
///
/// The walk covers the live units (the latest capsule's retained tail and
/// every later message). The boundary is then moved later until
/// `fixed + capsuleBudget + tail ≤ hardLimit` (`autoLimit` for
/// `context_overflow`). Soft triggers face the pre-generation ROI check;
/// any trigger with nothing before the keep window is skipped, except a
/// forced one that can still shrink an earlier capsule.
///
/// After generation, a capsule larger than its budget is fitted (SPEC §7.2
/// step 2) by planning again with `facts_tokens` set to its measured size
/// and `summarizer_max_output_tokens` to zero: the walk is the same, so the
/// boundary only moves later, and the entries it displaces are the ones to
/// fold into the capsule deterministically.
pub fn plan(live: &LiveInput, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
    let view = live.view();
    let counter = live.counter();
    let factor = request.factor;
    let budget = request.budget;
    let units = unit::units(&view.messages);
    let previous = view.capsule.as_ref();
    let previous_cut = previous.and_then(|capsule| capsule.capsule.boundary_truncation.as_ref());

    let fit_limit = if request.trigger == Trigger::ContextOverflow {
        FitLimit {
            name: "autoLimit",
            tokens: budget.auto_limit(),
        }
    } else {
        FitLimit {
            name: "hardLimit",
            tokens: budget.hard_limit(),
        }
    };
    let fixed_local = view.fixed_tokens();
    let capsule_budget =
        request.facts_tokens + request.rehydrate_tokens + request.summarizer_max_output_tokens;
    let room = local_room(factor, fit_limit.tokens).saturating_sub(fixed_local + capsule_budget);

    // keepRecent is a calibrated budget like every other figure: the walk
    // compares local counts, so it walks under the local room keepRecent
    // leaves (not keepRecent itself, which would keep × factor).
    let walked = retention::walk(
        counter,
        &units,
        &view.messages,
        local_room(factor, budget.keep_recent()),
        // An automatic compaction may stop at the newest results; `/compact`
        // and the forced triggers keep the whole keepRecent tail (under
        // budget, `/compact` stays a no-op).
        if request.trigger.is_soft() {
            budget.keep_recent_results()
        } else {
            0
        },
        previous_cut,
    );
    let retention = match walked {
        Some(walked) => retention::fit(counter, &units, &view.messages, walked, room, previous_cut)
            .map_err(|NoFit { newest_unit, .. }| {
                let unit_tokens = factor.apply(newest_unit);
                if unit_tokens > fit_limit.tokens {
                    PlanError::NewestUnitTooLarge {
                        unit_tokens,
                        limit_name: fit_limit.name,
                        limit: fit_limit.tokens,
                    }
                } else {
                    PlanError::NoRoomForNewestUnit {
                        unit_tokens,
                        fixed_tokens: factor.apply(fixed_local),
                        capsule_budget,
                        limit_name: fit_limit.name,
                        limit: fit_limit.tokens,
                    }
                }
            })?,
        None => Retention {
            first_kept: 0,
            new_cut: None,
            tail_tokens: TokenCount::ZERO,
            moved_for_fit: false,
        },
    };

    let first_kept_unit = units.get(retention.first_kept);
    let first_kept_entry_id = first_kept_unit.map(|unit| unit.first_entry_id.clone());
    let boundary_truncation = retention.new_cut.clone().or_else(|| {
        let unit = first_kept_unit?;
        let message = view.messages.get(unit.messages.start)?;
        previous_cut
            .filter(|cut| message.rewrites.truncated && &cut.entry_id == message.source)
            .cloned()
    });
    let span_units: &[Unit] = &units[..retention.first_kept.min(units.len())];
    let mut span_entry_ids: Vec<EntryId> = Vec::new();
    for unit in span_units {
        for id in unit.entry_ids(&view.messages) {
            if span_entry_ids.last() != Some(id) {
                span_entry_ids.push(id.clone());
            }
        }
    }
    if let Some(cut) = &retention.new_cut {
        span_entry_ids.push(cut.entry_id.clone());
    }
    let cut_entry = boundary_truncation.as_ref().map(|cut| &cut.entry_id);
    let mut retained_entry_ids: Vec<EntryId> = Vec::new();
    for unit in &units[retention.first_kept.min(units.len())..] {
        for message in &view.messages[unit.messages.clone()] {
            let is_new = retained_entry_ids.last() != Some(message.source);
            if is_new
                && message.origin != InputOrigin::SyntheticResult
                && cut_entry != Some(message.source)
            {
                retained_entry_ids.push(message.source.clone());
            }
        }
    }
    let previous_tokens = previous.map_or(TokenCount::ZERO, |capsule| capsule.tokens);
    let span_local = previous_tokens
        + span_units
            .iter()
            .map(|unit| unit.tokens)
            .sum::<TokenCount>()
        + retention.elided_tokens(&units);
    let span_tokens = factor.apply(span_local);

    let narrative_estimate = request.summarizer_max_output_tokens.min(
        previous.map_or(FIRST_NARRATIVE_ESTIMATE, |capsule| {
            narrative_tokens(counter, capsule.capsule)
        }),
    );
    // The span is calibrated; so must the estimate subtracted from it be.
    let capsule_estimate =
        factor.apply(request.facts_tokens + request.rehydrate_tokens + narrative_estimate);
    let reclaimable = i64::try_from(span_tokens.get()).unwrap_or(i64::MAX)
        - i64::try_from(capsule_estimate.get()).unwrap_or(i64::MAX);
    let savings_ppm = match request.effective.get() {
        0 => 0,
        effective => (i128::from(reclaimable) * 1_000_000 / i128::from(effective)) as i64,
    };
    let pre_roi_ok = !request.trigger.is_soft() || budget.meets_roi(reclaimable, request.effective);

    let nothing_before_window = span_units.is_empty() && retention.new_cut.is_none();
    let skip = if nothing_before_window && !(request.trigger.is_forced() && previous.is_some()) {
        Some(SkipReason::NothingToCompact)
    } else if !pre_roi_ok {
        Some(SkipReason::PreRoi)
    } else {
        None
    };

    Ok(Plan {
        trigger: request.trigger,
        effective: request.effective,
        budget: *budget,
        factor,
        fit_limit,
        previous_capsule_id: previous.map(|capsule| capsule.id.clone()),
        previous_first_kept_entry_id: previous
            .and_then(|capsule| capsule.capsule.first_kept_entry_id.clone()),
        first_kept_entry_id,
        boundary_truncation,
        span_entry_ids,
        retained_entry_ids,
        span_tokens,
        fixed_tokens: factor.apply(fixed_local),
        capsule_budget,
        tail_tokens: factor.apply(retention.tail_tokens),
        tail_units: units.len().saturating_sub(retention.first_kept),
        moved_for_fit: retention.moved_for_fit,
        facts_tokens: request.facts_tokens,
        rehydrate_tokens: request.rehydrate_tokens,
        narrative_estimate,
        capsule_estimate,
        reclaimable,
        savings_ppm,
        expected_leaf: view.leaf.cloned(),
        pre_roi_ok,
        skip,
    })
}

/// Returns the entries a plan summarizes, in path order: its span's
/// messages, and every entry that is not a message or a capsule
/// (checkpoints, skill changes, hygiene, …) lying before the first kept
/// entry. Those are never units, so the span's ids do not name them, but
/// the capsule's facts must see them: a checkpoint recorded in the span
/// belongs in the capsule's checkpoints.
pub fn span_entries(region: &[Entry], plan: &Plan) -> Vec<Entry> {
    let ids: std::collections::HashSet<&EntryId> = plan.span_entry_ids.iter().collect();
    let mut out = Vec::new();
    for entry in region {
        if plan.first_kept_entry_id.as_ref() == Some(&entry.id) {
            break;
        }
        let keep = match &entry.body {
            EntryBody::Message(_) => ids.contains(&entry.id),
            EntryBody::Capsule(_) => false,
            _ => true,
        };
        if keep {
            out.push(entry.clone());
        }
    }
    // A cut straddler is the first kept entry and in the span.
    if let Some(first) = &plan.first_kept_entry_id
        && ids.contains(first)
        && let Some(entry) = region.iter().find(|entry| &entry.id == first)
    {
        out.push(entry.clone());
    }
    out
}

/// The price of a cache read, relative to an uncached input token, that
/// [`pays_off`] times `read_cost` compactions by (Anthropic's 0.1; OpenAI's
/// is 0.1–0.25, which only makes a compaction pay off sooner).
pub const READ_PRICE: f64 = 0.1;
/// The price of a cache write (Anthropic's 1.25; OpenAI writes at 1).
pub const WRITE_PRICE: f64 = 1.25;
/// The price of a summarizer input token (a smaller model), relative to a
/// main-model input token.
pub const SUMMARIZER_PRICE: f64 = 0.33;
/// The weight of a summarizer output token against an input token.
pub const SUMMARIZER_OUTPUT_WEIGHT: f64 = 5.0;

/// Returns whether a `read_cost` compaction planned as `plan` pays for
/// itself when the input grows by `growth` tokens per request.
///
/// Compacting costs the rewrite of the capsule and the tail (cache writes)
/// and the summarizer; not compacting costs a cache read of the
/// reclaimable tokens on every later request. For an input that grows
/// linearly and is compacted whenever it pays, the cheapest cycle compacts
/// once reclaimable ≥ √(2 × growth × cost / readPrice) (the square-root
/// rule of periodic replacement), which is what this checks.
pub fn pays_off(plan: &Plan, growth: TokenCount) -> bool {
    let Ok(reclaimable) = u64::try_from(plan.reclaimable) else {
        return false;
    };
    let rewrite = (plan.capsule_estimate + plan.tail_tokens).get() as f64;
    let summarizer = SUMMARIZER_PRICE
        * (plan.span_tokens.get() as f64
            + SUMMARIZER_OUTPUT_WEIGHT * plan.narrative_estimate.get() as f64);
    let cost = WRITE_PRICE * rewrite + summarizer;
    let needed = (2.0 * growth.get().max(1) as f64 * cost / READ_PRICE).sqrt();
    // Never urgent, so it waits until its estimate clears roiFloor by a
    // quarter: a summary the post-generation check rejects is paid for.
    let floor = plan.budget.roi_floor().get();
    reclaimable as f64 >= needed && reclaimable >= floor + floor / 4
}

/// The post-generation ROI check (SPEC §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostRoi {
    /// Effective tokens before.
    pub tokens_before: TokenCount,
    /// Effective tokens after, measured exactly.
    pub tokens_after: TokenCount,
    /// tokensBefore − tokensAfter (may be negative).
    pub reclaimed: i64,
    /// reclaimed / tokensBefore in parts per million.
    pub ratio_ppm: i64,
    /// Whether the capsule may be appended: always for non-soft triggers;
    /// for soft ones, reclaimed ≥ roiFloor and ratio ≥ `minSavingsRatio`.
    pub ok: bool,
}

/// Checks a generated capsule's measured savings (SPEC §8.3): a soft
/// capsule that reclaims less than roiFloor, or less than `minSavingsRatio`
/// of tokensBefore, is `skipped`. `hard_limit`, `context_overflow` and
/// `user` skip the gate.
pub fn post_roi(
    trigger: Trigger,
    tokens_before: TokenCount,
    tokens_after: TokenCount,
    budget: &Budget,
) -> PostRoi {
    let reclaimed = i128::from(tokens_before.get()) - i128::from(tokens_after.get());
    let reclaimed =
        i64::try_from(reclaimed).unwrap_or(if reclaimed < 0 { i64::MIN } else { i64::MAX });
    let ratio_ppm = match tokens_before.get() {
        0 => 0,
        before => (i128::from(reclaimed) * 1_000_000 / i128::from(before)) as i64,
    };
    let ok = !trigger.is_soft() || budget.meets_roi(reclaimed, tokens_before);
    PostRoi {
        tokens_before,
        tokens_after,
        reclaimed,
        ratio_ppm,
        ok,
    }
}

/// Formats a signed token figure with separators and a true minus sign.
fn signed(n: i64) -> String {
    let magnitude = group_thousands(n.unsigned_abs());
    if n < 0 {
        format!("\u{2212}{magnitude}")
    } else {
        magnitude
    }
}

/// Formats parts per million as a percentage with one decimal.
fn percent(ppm: i64) -> String {
    let tenths = ppm / 1_000;
    let sign = if tenths < 0 { "\u{2212}" } else { "" };
    format!(
        "{sign}{}.{} %",
        tenths.unsigned_abs() / 10,
        tenths.unsigned_abs() % 10
    )
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.trigger.is_forced() {
            "forced"
        } else if self.trigger.is_soft() {
            "soft"
        } else {
            "explicit"
        };
        let budget = &self.budget;
        writeln!(f, "compaction plan: {} ({kind})", self.trigger.as_str())?;
        writeln!(
            f,
            "  effective        {} tokens (calibration × {:.2})",
            self.effective,
            self.factor.get()
        )?;
        writeln!(
            f,
            "  limits           hardLimit {} · autoLimit {} · keepRecent {} · roiFloor {} · minSavingsRatio {}",
            budget.hard_limit(),
            budget.auto_limit(),
            budget.keep_recent(),
            budget.roi_floor(),
            budget.min_savings_ratio()
        )?;
        match (
            &self.first_kept_entry_id,
            &self.previous_first_kept_entry_id,
        ) {
            (Some(first), Some(previous)) if first == previous => {
                writeln!(f, "  boundary         {first} (unchanged)")?;
            }
            (Some(first), Some(previous)) => {
                writeln!(f, "  boundary         {first} (was {previous})")?
            }
            (Some(first), None) => writeln!(f, "  boundary         {first}")?,
            (None, _) => writeln!(f, "  boundary         none (nothing to keep)")?,
        }
        if let Some(cut) = &self.boundary_truncation {
            writeln!(
                f,
                "  truncation       head {} + tail {} characters kept, {} omitted, {} tokens",
                group_thousands(cut.head_chars),
                group_thousands(cut.tail_chars),
                group_thousands(cut.omitted_chars),
                cut.kept_tokens
            )?;
        }
        let previous = match &self.previous_capsule_id {
            Some(id) => format!("previous capsule {id} + "),
            None => String::new(),
        };
        writeln!(
            f,
            "  span             {previous}{} entries = {} tokens",
            self.span_entry_ids.len(),
            self.span_tokens
        )?;
        let total = self.fixed_tokens + self.capsule_budget + self.tail_tokens;
        writeln!(
            f,
            "  fit              fixed {} + capsule budget {} + tail {} ({} units) = {} ≤ {} {}{}",
            self.fixed_tokens,
            self.capsule_budget,
            self.tail_tokens,
            self.tail_units,
            total,
            self.fit_limit.name,
            self.fit_limit.tokens,
            if self.moved_for_fit {
                " (boundary moved later to fit)"
            } else {
                ""
            }
        )?;
        let files = if self.rehydrate_tokens > TokenCount::ZERO {
            format!(" + files {}", self.rehydrate_tokens)
        } else {
            String::new()
        };
        writeln!(
            f,
            "  capsule estimate {} = (facts {}{files} + narrative {}) × {:.2}",
            self.capsule_estimate,
            self.facts_tokens,
            self.narrative_estimate,
            self.factor.get()
        )?;
        writeln!(
            f,
            "  reclaimable      {} tokens ({} of effective)",
            signed(self.reclaimable),
            percent(self.savings_ppm)
        )?;
        let pre_roi = if !self.trigger.is_soft() {
            "not checked (only soft triggers are)".to_owned()
        } else if self.pre_roi_ok {
            "passed".to_owned()
        } else {
            format!(
                "failed: needs reclaimable ≥ {} and ≥ {} of effective",
                budget.roi_floor(),
                budget.min_savings_ratio()
            )
        };
        writeln!(f, "  pre-ROI          {pre_roi}")?;
        let outcome = match self.skip {
            None => "generate the capsule",
            Some(SkipReason::NothingToCompact) => "skip: nothing before the keep window",
            Some(SkipReason::PreRoi) => "skip: the pre-generation ROI check failed",
        };
        writeln!(f, "  outcome          {outcome}")?;
        match &self.expected_leaf {
            Some(leaf) => write!(f, "  expected leaf    {leaf}"),
            None => write!(f, "  expected leaf    none"),
        }
    }
}
