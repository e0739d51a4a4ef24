//! The preflight barrier (SPEC §7): runs before every step, measures,
//! applies hygiene when due, chooses at most one trigger, plans, generates a
//! capsule under a deadline and appends it under the session mutex only if
//! the turn was not cancelled and the leaf did not move.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use soba_core::builder::{self, CapsuleContent};
use soba_core::calibration::Factor;
use soba_core::capsule::NativeContinuation;
use soba_core::consistency::{self, Correction};
use soba_core::guard;
use soba_core::hygiene::HygieneDecision;
use soba_core::plan::SkipReason as PlanSkip;
use soba_core::preflight::{self, CompactJob, Decision, Verdict};
use soba_core::rehydrate::{FileContent, FileProbe, FileSource};
use soba_core::summarize::{self, SummarizeError, Summarizer, SummaryRequest};
use soba_core::{
    Capsule, Entry, EntryBody, EntryId, IdKind, Quality, SummaryScope, TokenCount, TokenCounter,
    Trigger, Usage,
};
use soba_store::beneath::{Beneath, Links};
use soba_store::flight::{FlightLevel, FlightOutcome, FlightRecord, FlightSummarizer};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::error::EngineError;
use crate::event::{CompactionEnd, EngineEvent, Outcome, SummaryEstimate};
use crate::native::NativeJob;
use crate::session::SessionCore;

/// Receives engine events.
pub type EventSink = Arc<dyn Fn(EngineEvent) + Send + Sync>;

/// A trigger the caller forces at this preflight.
#[derive(Debug, Clone, PartialEq)]
pub enum Forced {
    /// `/compact [instructions]`.
    User {
        /// The instructions, if any.
        instructions: Option<String>,
    },
    /// The provider reported a context overflow (SPEC §6.3).
    ContextOverflow {
        /// The prompt size the error stated.
        stated_prompt: Option<u64>,
        /// The local count of the overflowing request.
        request_tokens_local: u64,
        /// The context window the error stated: when it is smaller than
        /// the one SOBA was told, the recovery plans for it.
        stated_limit: Option<u64>,
    },
}

/// What a preflight decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Preflight {
    /// Nothing to compact (or a soft trigger skipped): go on to inference.
    Proceed,
    /// A compaction ran; its end event (completed, skipped or failed soft).
    Compacted(CompactionEnd),
    /// The turn must end: cancelled, stale, or a forced compaction failed.
    EndTurn(CompactionEnd),
}

/// The barrier's settings.
#[derive(Clone)]
pub struct BarrierContext {
    /// The session.
    pub core: Arc<Mutex<SessionCore>>,
    /// Where events go.
    pub events: EventSink,
    /// The LLM summarizer; `None` is the deterministic builder.
    pub summarizer: Option<Arc<dyn Summarizer>>,
    /// Mints operation ids.
    pub operation_ids: Arc<dyn Fn() -> String + Send + Sync>,
    /// Current time, RFC 3339, for flight records.
    pub clock: Arc<dyn Fn() -> String + Send + Sync>,
}

/// Everything generation needs, taken under the lock.
struct Snapshot {
    /// What the preflight decided to compact.
    job: CompactJob,
    counter: Arc<dyn TokenCounter>,
    max_output_tokens: TokenCount,
    /// `compaction.summarizer.maxChunks`: the most summarizer calls.
    max_chunks: usize,
    timeout: Duration,
    /// The native compaction to run alongside the summarizer (SPEC §10.3).
    native: Option<NativeJob>,
}

impl BarrierContext {
    fn emit(&self, event: EngineEvent) {
        (self.events)(event);
    }

    /// Says once, with the fix, that an overflow recovery plans for the
    /// window the provider `stated`, smaller than the one SOBA was told (a
    /// configured `contextWindow` above what the server was started with).
    fn stated_window_warning(&self, core: &SessionCore, stated: u64) {
        let told = core.budget().context_window();
        self.emit(EngineEvent::Warning {
            message: format!(
                "the server's context window is {} tokens, not the {} soba was told: this recovery compacts for {}; \
                 set models.\"{}\".contextWindow to {} (or leave it unset for a local server, which reports its own)",
                soba_core::tokens::group_thousands(stated),
                soba_core::tokens::group_thousands(told.get()),
                soba_core::tokens::group_thousands(stated),
                core.model_id(),
                stated
            ),
        });
    }

    fn flight_record(
        &self,
        core: &SessionCore,
        trigger: Option<Trigger>,
        level: FlightLevel,
        before: TokenCount,
    ) -> FlightRecord {
        FlightRecord {
            operation_id: (self.operation_ids)(),
            timestamp: (self.clock)(),
            level,
            trigger,
            limits: core.flight_limits(),
            tokens_before: before,
            tokens_after: before,
            reclaimed: TokenCount::ZERO,
            outcome: FlightOutcome::Skipped,
            reason: None,
            duration_ms: 0,
            checkpoint_id: None,
            quality: None,
            summarizer: None,
            expected_cache_write: None,
        }
    }

    /// Runs one preflight. `forced` is `/compact` or an overflow recovery.
    pub async fn preflight(
        &self,
        forced: Option<Forced>,
        cancel: &CancellationToken,
    ) -> Result<Preflight, EngineError> {
        let started = Instant::now();
        let snapshot = {
            let mut core = self.core.lock().await;
            if cancel.is_cancelled() {
                // A cancel seen before planning ends the barrier before it
                // appends anything, hygiene included (SPEC §7.1).
                return Ok(match forced {
                    Some(forced) => {
                        let effective = core.measure().tokens;
                        let trigger = match forced {
                            Forced::User { .. } => Trigger::User,
                            Forced::ContextOverflow { .. } => Trigger::ContextOverflow,
                        };
                        let end = unchanged_end(
                            (self.operation_ids)(),
                            Outcome::Cancelled,
                            trigger,
                            effective,
                            0,
                            Some("cancelled by the user".into()),
                        );
                        self.emit(EngineEvent::CompactionEnd(end.clone()));
                        Preflight::EndTurn(end)
                    }
                    // Nothing was planned: the caller sees the cancel itself.
                    None => Preflight::Proceed,
                });
            }
            match self.plan_under_lock(&mut core, forced)? {
                Ok(snapshot) => snapshot,
                Err(decided) => return Ok(decided),
            }
        };
        let operation_id = (self.operation_ids)();
        let trigger = snapshot.job.trigger();
        let before = snapshot.job.plan.effective;
        let layout = self
            .summarizer
            .as_ref()
            .map(|summarizer| chunk_layout(summarizer.as_ref(), &snapshot));
        let estimate = self
            .summarizer
            .as_ref()
            .zip(layout.as_ref())
            .and_then(|(summarizer, layout)| layout.estimate(summarizer.as_ref(), &snapshot));
        self.emit(EngineEvent::CompactionStart {
            operation_id: operation_id.clone(),
            trigger,
            plan: snapshot.job.plan.explain(),
            tokens_before: before,
            estimate,
        });
        let (generated, native) = self
            .generate(&snapshot, &operation_id, cancel, layout)
            .await;
        let mut core = self.core.lock().await; // the append mutex (SPEC §7.1)
        let end = |outcome: Outcome, reason: Option<String>| {
            let duration_ms = started.elapsed().as_millis() as u64;
            unchanged_end(
                operation_id.clone(),
                outcome,
                trigger,
                before,
                duration_ms,
                reason,
            )
        };
        let abandon = |core: &mut SessionCore, end: CompactionEnd| {
            preflight::abandoned(&snapshot.job, &mut core.turn);
            self.finish(core, end, None)
        };
        let (content, usage, fallback, corrected) = match generated {
            Generated::Cancelled => {
                return Ok(abandon(
                    &mut core,
                    end(Outcome::Cancelled, Some("cancelled by the user".into())),
                ));
            }
            Generated::Failed(reason) => {
                return Ok(abandon(&mut core, end(Outcome::Failed, Some(reason))));
            }
            Generated::Content {
                content,
                usage,
                fallback,
                corrected,
            } => (*content, usage, fallback, corrected),
        };
        if cancel.is_cancelled() {
            return Ok(abandon(
                &mut core,
                end(Outcome::Cancelled, Some("cancelled by the user".into())),
            ));
        }
        if core.leaf() != snapshot.job.plan.expected_leaf.as_ref() {
            return Ok(abandon(
                &mut core,
                end(
                    Outcome::Stale,
                    Some("the session leaf moved during the barrier".into()),
                ),
            ));
        }
        let quality = content.quality;
        let summarizer_model = content.summarizer.clone();
        let mut capsule = content.into_capsule(snapshot.job.frame());
        let after = measure_with_capsule(&core, &capsule, snapshot.job.plan.factor);
        capsule.tokens_after = after;
        let summary = Some(FlightSummarizer {
            model: summarizer_model,
            usage,
        });
        let budget = *core.budget();
        match preflight::accept(&snapshot.job, after, &budget, &mut core.turn) {
            Verdict::Append => {}
            Verdict::Rejected(post) => {
                let share = match before.get() {
                    0 => 0.0,
                    total => post.reclaimed.max(0) as f64 * 100.0 / total as f64,
                };
                let reason = format!(
                    "post-ROI: reclaimed {} of {} tokens ({share:.1} %), below roiFloor {} or minSavingsRatio {}",
                    soba_core::tokens::group_thousands(post.reclaimed.max(0) as u64),
                    before,
                    budget.roi_floor(),
                    budget.min_savings_ratio()
                );
                return Ok(self.finish(&mut core, end(Outcome::Skipped, Some(reason)), summary));
            }
            // Against the plan's limits: the session's, or a stated
            // window's (an overflow recovery on a server smaller than
            // configured).
            Verdict::TooLarge { after, hard_limit } => {
                let reason = format!("capsule input {after} tokens > hardLimit {hard_limit}");
                return Ok(self.finish(&mut core, end(Outcome::Failed, Some(reason)), summary));
            }
        }
        // The outcome and tokensAfter are the portable capsule's; the native
        // item only rides along, unless sending it would not fit.
        if let Some(native) = native {
            capsule.native = Some(native);
            let with_native = measure_with_capsule(&core, &capsule, snapshot.job.plan.factor);
            if with_native > core.budget().hard_limit() {
                tracing::warn!(
                    "native continuation dropped: the input would be {with_native} tokens > hardLimit {}",
                    core.budget().hard_limit()
                );
                capsule.native = None;
            }
        }
        let entry = core.append(EntryBody::Capsule(Box::new(capsule)))?;
        preflight::appended(&mut core.turn);
        let completed = CompactionEnd {
            tokens_after: after,
            reclaimed: before.saturating_sub(after),
            checkpoint_id: Some(entry.id.clone()),
            quality: Some(quality),
            reason: match (quality, &fallback) {
                (Quality::Degraded, Some(why)) => {
                    Some(format!("fallback used: deterministic capsule ({why})"))
                }
                (Quality::Degraded, None) => {
                    Some("fallback used: deterministic capsule".to_owned())
                }
                _ => corrected,
            },
            ..end(Outcome::Completed, None)
        };
        Ok(self.finish(&mut core, completed, summary))
    }

    /// Records the end of a barrier: flight record, event. The turn's
    /// marks are left by [`preflight`]'s functions before.
    fn finish(
        &self,
        core: &mut SessionCore,
        end: CompactionEnd,
        summarizer: Option<FlightSummarizer>,
    ) -> Preflight {
        let trigger = end.trigger;
        let mut record = self.flight_record(
            core,
            Some(trigger),
            FlightLevel::Compaction,
            end.tokens_before,
        );
        record.operation_id = end.operation_id.clone();
        record.tokens_after = end.tokens_after;
        record.reclaimed = end.reclaimed;
        record.outcome = match end.outcome {
            Outcome::Completed => FlightOutcome::Completed,
            Outcome::Skipped => FlightOutcome::Skipped,
            Outcome::Cancelled => FlightOutcome::Cancelled,
            Outcome::Stale => FlightOutcome::Stale,
            Outcome::Failed => FlightOutcome::Failed,
        };
        record.reason = end.reason.clone();
        record.duration_ms = end.duration_ms;
        record.checkpoint_id = end.checkpoint_id.clone();
        record.quality = end.quality;
        record.summarizer = summarizer;
        if end.outcome == Outcome::Completed {
            record.expected_cache_write = Some(end.tokens_after);
        }
        core.flight(&record);
        self.emit(EngineEvent::CompactionEnd(end.clone()));
        match end.outcome {
            Outcome::Completed | Outcome::Skipped => Preflight::Compacted(end),
            Outcome::Cancelled | Outcome::Stale => Preflight::EndTurn(end),
            Outcome::Failed if trigger.is_soft() => Preflight::Compacted(end),
            Outcome::Failed => Preflight::EndTurn(end),
        }
    }

    /// Steps 1–4 of SPEC §7 under the session lock: measure, hygiene,
    /// trigger, plan, decided by [`preflight::decide`]; this records and
    /// emits what it decided. `Err(decided)` ends the preflight without
    /// generation.
    fn plan_under_lock(
        &self,
        core: &mut SessionCore,
        forced: Option<Forced>,
    ) -> Result<Result<Snapshot, Preflight>, EngineError> {
        let derived = core.derived();
        let (forced, stated_window) = match forced {
            None => (None, None),
            Some(Forced::User { instructions }) => (
                Some(preflight::Forced {
                    trigger: Trigger::User,
                    instructions,
                    overflow: None,
                    budget: None,
                }),
                None,
            ),
            Some(Forced::ContextOverflow {
                stated_prompt,
                request_tokens_local,
                stated_limit,
            }) => {
                let budget = stated_limit.and_then(|stated| {
                    preflight::stated_budget(core.budget(), &core.config().compaction, stated)
                });
                let stated_window = stated_limit.filter(|_| budget.is_some());
                (
                    Some(preflight::Forced {
                        trigger: Trigger::ContextOverflow,
                        instructions: None,
                        overflow: Some(soba_core::capsule::OverflowRecord {
                            stated_prompt,
                            request_tokens_local,
                        }),
                        budget,
                    }),
                    stated_window,
                )
            }
        };
        let files = WorkspaceFiles::new(&core.header().cwd);
        loop {
            let measurement = core.measure();
            let effective = measurement.tokens;
            // The idle gap is read only for a trigger choice.
            let idle_ms = match forced {
                None => core.idle_ms(&(self.clock)()),
                Some(_) => None,
            };
            let mut turn = std::mem::take(&mut core.turn);
            let mut hygiene_considered = core.hygiene_considered.take();
            let decided = preflight::decide(
                &preflight::Input {
                    live: core.live(),
                    path: core.path(),
                    derived: &derived,
                    budget: core.budget(),
                    config: &core.config().compaction,
                    effective,
                    factor: core.factor(),
                    counter: core.counter().as_ref(),
                    cwd: Some(&core.header().cwd),
                    model: core.model_id(),
                    idle_ms,
                    cache_ttl_ms: None,
                    forced: forced.as_ref(),
                    files: Some(&files),
                },
                &mut turn,
                &mut hygiene_considered,
            );
            core.turn = turn;
            core.hygiene_considered = hygiene_considered;
            if let Some(stated) = stated_window
                && !matches!(decided.decision, Decision::Hygiene(_))
            {
                self.stated_window_warning(core, stated);
            }
            for skipped in &decided.not_chosen {
                let mut record = self.flight_record(
                    core,
                    Some(skipped.trigger),
                    FlightLevel::Compaction,
                    effective,
                );
                record.reason = Some(skipped.reason.to_string());
                core.flight(&record);
            }
            let job = match decided.decision {
                Decision::Hygiene(decision) => {
                    self.hygiene(core, decision, effective)?;
                    continue; // measure again, then the trigger
                }
                Decision::Proceed => return Ok(Err(Preflight::Proceed)),
                Decision::Skipped {
                    trigger,
                    reason,
                    reclaimable,
                } => {
                    let mut record =
                        self.flight_record(core, Some(trigger), FlightLevel::Compaction, effective);
                    record.reason = Some(reason.as_str().to_owned());
                    core.flight(&record);
                    let past_auto = effective >= core.budget().auto_limit();
                    if trigger.is_soft()
                        && past_auto
                        && core.skip_told.as_ref() != Some(&derived.turn_start)
                    {
                        // Past autoLimit the user expects a compaction: say
                        // once a turn why none runs, with the figures.
                        core.skip_told = Some(derived.turn_start.clone());
                        self.emit(EngineEvent::CompactionEnd(unchanged_end(
                            record.operation_id.clone(),
                            Outcome::Skipped,
                            trigger,
                            effective,
                            0,
                            Some(past_auto_skip_reason(
                                reason,
                                reclaimable,
                                effective,
                                core.budget(),
                            )),
                        )));
                    }
                    if reason == PlanSkip::NothingToCompact && !trigger.is_soft() {
                        let end = unchanged_end(
                            record.operation_id,
                            Outcome::Skipped,
                            trigger,
                            effective,
                            0,
                            Some("nothing to compact before the keep window".into()),
                        );
                        self.emit(EngineEvent::CompactionEnd(end.clone()));
                        return Ok(Err(Preflight::Compacted(end)));
                    }
                    return Ok(Err(Preflight::Proceed));
                }
                Decision::Failed { trigger, error } => {
                    let end = unchanged_end(
                        (self.operation_ids)(),
                        Outcome::Failed,
                        trigger,
                        effective,
                        0,
                        Some(error.to_string()),
                    );
                    let mut record =
                        self.flight_record(core, Some(trigger), FlightLevel::Compaction, effective);
                    record.outcome = FlightOutcome::Failed;
                    record.reason = end.reason.clone();
                    core.flight(&record);
                    // A soft trigger's soft cap is marked by the decision.
                    if trigger.is_soft() {
                        return Ok(Err(Preflight::Proceed));
                    }
                    self.emit(EngineEvent::CompactionEnd(end.clone()));
                    return Ok(Err(Preflight::EndTurn(end)));
                }
                Decision::Compact(job) => *job,
            };
            let native = core.native_compactor().map(|compactor| {
                NativeJob::prepare(
                    compactor.clone(),
                    &core.live().view(),
                    core.path(),
                    &job.plan.span_entry_ids,
                    job.plan.boundary_truncation.as_ref(),
                )
            });
            let compaction = &core.config().compaction;
            return Ok(Ok(Snapshot {
                job,
                counter: core.counter().clone(),
                max_output_tokens: compaction.summarizer.max_output_tokens,
                max_chunks: compaction.summarizer.max_chunks,
                timeout: Duration::from_millis(compaction.timeout_ms),
                native,
            }));
        }
    }

    /// Appends a hygiene pass that applies, with its flight record and
    /// event, or records why hygiene did not apply.
    fn hygiene(
        &self,
        core: &mut SessionCore,
        decision: HygieneDecision,
        before: TokenCount,
    ) -> Result<(), EngineError> {
        let mut record = self.flight_record(core, None, FlightLevel::Hygiene, before);
        match decision {
            HygieneDecision::Apply(pass) => {
                let entry = core.append(pass.entry_body())?;
                let after = core.measure().tokens;
                record.outcome = FlightOutcome::Completed;
                record.tokens_after = after;
                record.reclaimed = before.saturating_sub(after);
                record.expected_cache_write = Some(after);
                core.flight(&record);
                self.emit(EngineEvent::Hygiene {
                    entry_id: entry.id,
                    reclaimed: pass.reclaimed_tokens,
                    stubbed: pass.stubbed.len(),
                    tokens_before: before,
                });
            }
            other => {
                record.reason = Some(other.to_string());
                core.flight(&record);
            }
        }
        Ok(())
    }

    /// Step 6: the capsule content, and with a native compactor the native
    /// continuation made in parallel under the same deadline (`timeoutMs`
    /// per summarizer chunk, SPEC §10.3). The native item is kept only
    /// with content; its failure is logged and changes nothing.
    async fn generate(
        &self,
        snapshot: &Snapshot,
        operation_id: &str,
        cancel: &CancellationToken,
        layout: Option<ChunkLayout>,
    ) -> (Generated, Option<NativeContinuation>) {
        let n_chunks = layout
            .as_ref()
            .map_or(1, |layout| layout.chunks.len().max(1));
        let deadline = snapshot
            .timeout
            .saturating_mul(u32::try_from(n_chunks).unwrap_or(u32::MAX));
        let Some(job) = &snapshot.native else {
            let generated = self.summarize(snapshot, operation_id, cancel, layout).await;
            return (generated, None);
        };
        let summary = self.summarize(snapshot, operation_id, cancel, layout);
        let native = job.run(deadline, cancel);
        tokio::pin!(summary, native);
        let mut native_done = None;
        let generated = loop {
            tokio::select! {
                generated = &mut summary => break generated,
                result = &mut native, if native_done.is_none() => native_done = Some(result),
            }
        };
        if !matches!(generated, Generated::Content { .. }) {
            return (generated, None);
        }
        let result = match native_done {
            Some(result) => result,
            None => native.await,
        };
        match result {
            Ok(native) => (generated, Some(native)),
            Err(err) => {
                tracing::warn!("{err}; the portable capsule is used alone");
                (generated, None)
            }
        }
    }

    /// The capsule content, from the LLM chunk by chunk under its deadline
    /// or from the deterministic builder.
    async fn summarize(
        &self,
        snapshot: &Snapshot,
        operation_id: &str,
        cancel: &CancellationToken,
        layout: Option<ChunkLayout>,
    ) -> Generated {
        let counter = snapshot.counter.as_ref();
        let job = &snapshot.job;
        let previous = job.previous_capsule();
        let facts = job.facts(counter);
        let trigger = job.trigger();
        let deterministic = |quality: Quality| {
            builder::build_deterministic(&facts, previous, &job.build_options(quality), counter)
        };
        let (Some(summarizer), Some(layout)) = (&self.summarizer, layout) else {
            if cancel.is_cancelled() {
                return Generated::Cancelled;
            }
            return Generated::Content {
                content: Box::new(deterministic(Quality::Full)),
                usage: None,
                fallback: None,
                corrected: None,
            };
        };
        let ChunkLayout {
            previous_state,
            mut chunk_budget,
            mut chunks,
            scope,
            ..
        } = layout;
        let mut state = previous_state;
        let mut usage_total: Option<Usage> = None;
        let mut chunk_idx = 0;
        let mut calls = 0usize;
        let mut halved = false;
        // Progress (SPEC §9.2), reported from the summarizer's stream and
        // after each chunk without the session lock: an event only when the
        // integer percent rises.
        let high_water = AtomicU8::new(0);
        let divisor = snapshot
            .max_output_tokens
            .get()
            .min(u64::from(summarize::REQUESTED_TOKENS));
        let progress = |finished: usize, count: usize, streamed: u64| {
            let percent = progress_percent(finished, count, streamed, divisor);
            if high_water.fetch_max(percent, Ordering::Relaxed) < percent {
                self.emit(EngineEvent::CompactionProgress {
                    operation_id: operation_id.to_owned(),
                    percent,
                });
            }
        };
        let fallback = |reason: String, usage: Option<Usage>| {
            if trigger.is_soft() {
                Generated::Failed(reason)
            } else {
                Generated::Content {
                    content: Box::new(deterministic(Quality::Degraded)),
                    usage,
                    fallback: Some(reason),
                    corrected: None,
                }
            }
        };
        if chunk_budget < MIN_CHUNK_TOKENS {
            // A window with no useful room for the span would cut it into
            // one-token chunks, a request per few bytes of history.
            return fallback(
                format!(
                    "the summarizer's window leaves {chunk_budget} tokens per chunk for the span (at least \
                     {MIN_CHUNK_TOKENS} needed); configure compaction.summarizer.model with a larger window, \
                     or \"deterministic\""
                ),
                None,
            );
        }
        if chunks.is_empty() {
            // Nothing new since the previous capsule (a forced compaction
            // that only re-fits the tail): no model call, and the previous
            // narrative is carried by the deterministic capsule — it must
            // not come back labelled as a new LLM summary.
            return Generated::Content {
                content: Box::new(deterministic(Quality::Full)),
                usage: None,
                fallback: None,
                corrected: None,
            };
        }
        while chunk_idx < chunks.len() {
            let request = SummaryRequest {
                previous_state: state.clone(),
                span_text: chunks[chunk_idx].clone(),
                chunk_index: chunk_idx,
                chunk_count: chunks.len(),
                earlier_omitted: scope.is_some(),
                instructions: snapshot.job.instructions.clone(),
                max_output_tokens: snapshot.max_output_tokens.get() as u32,
            };
            let (finished, count) = (chunk_idx, chunks.len());
            let streamed = move |tokens: u64| progress(finished, count, tokens);
            let call = summarizer.summarize_streaming(&request, &streamed);
            calls += 1;
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return Generated::Cancelled,
                result = tokio::time::timeout(snapshot.timeout, call) => result,
            };
            if cancel.is_cancelled() {
                return Generated::Cancelled;
            }
            match outcome {
                // A timeout is not a rejection: the deterministic capsule,
                // degraded, still faces the post-ROI check (SPEC §9.3).
                Err(_elapsed) => {
                    return Generated::Content {
                        content: Box::new(deterministic(Quality::Degraded)),
                        usage: usage_total,
                        fallback: Some(format!(
                            "the summarizer took longer than compaction.timeoutMs {}",
                            snapshot.timeout.as_millis()
                        )),
                        corrected: None,
                    };
                }
                Ok(Err(SummarizeError::Cancelled)) => return Generated::Cancelled,
                Ok(Err(SummarizeError::Overflow { detail })) if !halved => {
                    // Halve the chunk size and retry once (SPEC §9.2).
                    halved = true;
                    chunk_budget = TokenCount::new(chunk_budget.get() / 2);
                    if chunk_budget < MIN_CHUNK_TOKENS {
                        return fallback(
                            format!("summarizer overflow with chunks already small: {detail}"),
                            usage_total,
                        );
                    }
                    let rest: Vec<String> = chunks[chunk_idx..].to_vec();
                    let mut rechunked = chunks[..chunk_idx].to_vec();
                    rechunked.extend(summarize::chunk_span(&rest, chunk_budget, counter));
                    let needed = calls + rechunked.len() - chunk_idx;
                    if needed > snapshot.max_chunks {
                        // The cap bounds every call, the failed one
                        // included: halved chunks that need more fall back.
                        return fallback(
                            format!(
                                "summarizer overflow: halved chunks need {needed} calls, more than \
                                 compaction.summarizer.maxChunks {}: {detail}",
                                snapshot.max_chunks
                            ),
                            usage_total,
                        );
                    }
                    chunks = rechunked;
                    tracing::debug!("summarizer overflow, chunk halved: {detail}");
                }
                Ok(Err(err)) => return fallback(format!("summarizer failed: {err}"), usage_total),
                Ok(Ok(response)) => {
                    if let Some(usage) = response.usage {
                        usage_total.get_or_insert_with(Usage::default).add(&usage);
                    }
                    state = Some(response.text);
                    chunk_idx += 1;
                    progress(chunk_idx, chunks.len(), 0);
                }
            }
        }
        let text = state.unwrap_or_default();
        let checked = guard::check_summary(&text, snapshot.job.plan.span_tokens, counter)
            .and_then(|narrative| consistency::check(narrative, &facts));
        match checked {
            Ok((narrative, corrections)) => {
                for correction in &corrections {
                    tracing::info!(%correction, "summary item contradicted by the log, removed");
                }
                let options = job.build_options(Quality::Full);
                let mut content = builder::build_with_narrative(
                    narrative,
                    summarizer.model(),
                    &facts,
                    &options,
                    counter,
                );
                if let Some(mut scope) = scope {
                    scope.chunks = chunk_idx as u64;
                    content = content.with_scope(scope, counter);
                }
                Generated::Content {
                    content: Box::new(content),
                    usage: usage_total,
                    fallback: None,
                    corrected: corrections_note(&corrections),
                }
            }
            Err(rejection) => {
                // The rejected text goes to the log only (escaped, cut), so
                // a user can see what the model wrote and why it failed.
                let excerpt: String = text.chars().take(REJECTED_EXCERPT_CHARS).collect();
                tracing::info!(guard = %rejection.name(), chars = text.chars().count(), summary = ?excerpt, "summary rejected");
                fallback(
                    format!("summary rejected by guard {}", rejection.name()),
                    usage_total,
                )
            }
        }
    }
}

/// The summarizer's chunks of a span, oldest first, with the state they
/// update and, when the span needs more than `maxChunks` chunks, what the
/// summarizer does not read.
struct ChunkLayout {
    previous_state: Option<String>,
    chunk_budget: TokenCount,
    chunks: Vec<String>,
    /// Tokens of span text the chunks carry.
    tokens: TokenCount,
    scope: Option<SummaryScope>,
}

/// Returns why a soft compaction past autoLimit did not run, with the
/// figures: the request goes on with the whole history.
/// Returns the end of a barrier that changed nothing (skipped, cancelled,
/// failed, stale): the effective tokens as they were, no capsule, and why.
fn unchanged_end(
    operation_id: String,
    outcome: Outcome,
    trigger: Trigger,
    effective: TokenCount,
    duration_ms: u64,
    reason: Option<String>,
) -> CompactionEnd {
    CompactionEnd {
        operation_id,
        outcome,
        trigger,
        tokens_before: effective,
        tokens_after: effective,
        reclaimed: TokenCount::ZERO,
        checkpoint_id: None,
        quality: None,
        duration_ms,
        reason,
    }
}

fn past_auto_skip_reason(
    reason: PlanSkip,
    reclaimable: i64,
    effective: TokenCount,
    budget: &soba_core::budget::Budget,
) -> String {
    let why = match reason {
        PlanSkip::PreRoi => {
            let freed = match u64::try_from(reclaimable) {
                Ok(freed) if freed > 0 => {
                    format!("only {} tokens", soba_core::tokens::group_thousands(freed))
                }
                _ => "nothing".to_owned(),
            };
            let needed = budget
                .roi_floor()
                .get()
                .max(budget.min_savings_ratio().mul_ceil(effective.get()));
            format!(
                "it would free {freed}, under the {} a compaction must free to pay \
                 for itself (compaction.roiFloor, compaction.minSavingsRatio)",
                soba_core::tokens::group_thousands(needed)
            )
        }
        _ => "nothing is old enough to compact (all of it is in the keep window, \
              compaction.keepRecentTokens)"
            .to_owned(),
    };
    format!(
        "{effective} tokens is past autoLimit {}, but {why}; the request is sent whole, /compact forces one",
        budget.auto_limit()
    )
}

fn chunk_layout(summarizer: &dyn Summarizer, snapshot: &Snapshot) -> ChunkLayout {
    let counter = snapshot.counter.as_ref();
    let previous_state = snapshot
        .job
        .previous_capsule()
        .map(summarize::previous_state);
    let items = summarize::span_items_indexed(&snapshot.job.span);
    let chunk_budget = summarize::chunk_tokens(
        summarizer.window_tokens(),
        snapshot.max_output_tokens.get() as u32,
        previous_state.as_deref(),
        snapshot.job.instructions.as_deref(),
        counter,
    );
    if chunk_budget < MIN_CHUNK_TOKENS {
        // The summarizer is never called (see `summarize`): do not cut
        // the span into one-token chunks for nothing.
        return ChunkLayout {
            previous_state,
            chunk_budget,
            chunks: Vec::new(),
            tokens: TokenCount::ZERO,
            scope: None,
        };
    }
    let packed = summarize::chunk_newest(&items, chunk_budget, snapshot.max_chunks, counter);
    let scope = packed.cut.map(|cut| SummaryScope {
        from_entry_id: Some(snapshot.job.span[cut.first_entry].id.clone()),
        partial: cut.partial,
        chunks: packed.chunks.len() as u64,
        summarized_tokens: packed.tokens,
        // In the plan's terms, as the compaction's own line counts the
        // span: what the model input carries of it (after hygiene), less
        // what the chunks carry.
        facts_only_tokens: snapshot.job.plan.span_tokens.saturating_sub(packed.tokens),
    });
    ChunkLayout {
        previous_state,
        chunk_budget,
        chunks: packed.chunks,
        tokens: packed.tokens,
        scope,
    }
}

impl ChunkLayout {
    /// What the summarizer will be asked, when it is more than one call
    /// (a single call needs no announcement).
    fn estimate(
        &self,
        summarizer: &dyn Summarizer,
        snapshot: &Snapshot,
    ) -> Option<SummaryEstimate> {
        let calls = self.chunks.len();
        if calls < 2 && self.scope.is_none() {
            return None;
        }
        // Each call carries its chunk plus what `chunk_tokens` set aside:
        // the prompt and the state, the window less the chunk and output.
        let overhead = summarizer
            .window_tokens()
            .saturating_sub(self.chunk_budget)
            .saturating_sub(snapshot.max_output_tokens);
        Some(SummaryEstimate {
            model: summarizer.model().to_owned(),
            calls,
            max_calls: snapshot.max_chunks,
            summarized_tokens: self.tokens,
            facts_only_tokens: self
                .scope
                .as_ref()
                .map_or(TokenCount::ZERO, |scope| scope.facts_only_tokens),
            input_tokens: self.tokens
                + TokenCount::new(overhead.get().saturating_mul(calls as u64)),
            max_output_tokens: TokenCount::new(
                snapshot
                    .max_output_tokens
                    .get()
                    .saturating_mul(calls as u64),
            ),
        })
    }
}

/// Returns SPEC §9.2's progress in whole percent: (finished chunks +
/// `streamed` output tokens of the current chunk ÷ `divisor`, at most 1) ÷
/// chunks, rounded down and held at 99 until the append. `divisor` is
/// min(`summarizer.maxOutputTokens`, 1,200).
fn progress_percent(finished: usize, chunks: usize, streamed: u64, divisor: u64) -> u8 {
    let divisor = u128::from(divisor.max(1));
    let done = (finished as u128).saturating_mul(divisor) + u128::from(streamed).min(divisor);
    let whole = (chunks.max(1) as u128).saturating_mul(divisor);
    (done.saturating_mul(100) / whole).min(99) as u8
}

/// How much of a rejected summary the log keeps.
const REJECTED_EXCERPT_CHARS: usize = 2_000;

/// The smallest chunk of span worth a summarizer request.
const MIN_CHUNK_TOKENS: TokenCount = TokenCount::new(128);

enum Generated {
    Content {
        content: Box<CapsuleContent>,
        usage: Option<Usage>,
        /// Why the summary was not used, when the deterministic capsule
        /// stands in for it (the flight record and the result line say).
        fallback: Option<String>,
        /// The summary items the consistency guard removed, for the flight
        /// record's reason.
        corrected: Option<String>,
    },
    Cancelled,
    Failed(String),
}

/// The flight record's reason for a summary the consistency guard
/// corrected: how many items it removed and why, each named.
fn corrections_note(corrections: &[Correction]) -> Option<String> {
    (!corrections.is_empty()).then(|| {
        format!(
            "consistency guard removed {} summary item{} the log contradicts: {}",
            corrections.len(),
            if corrections.len() == 1 { "" } else { "s" },
            corrections
                .iter()
                .map(Correction::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })
}

/// Measures the model input the session would send with `capsule` appended
/// at the current leaf (tokensAfter, SPEC §8.3), calibrated.
fn measure_with_capsule(core: &SessionCore, capsule: &Capsule, factor: Factor) -> TokenCount {
    let mut path = core.path().to_vec();
    path.push(Entry {
        id: EntryId::from_uuid(IdKind::Capsule, 0),
        parent_id: core.leaf().cloned(),
        timestamp: String::new(),
        body: EntryBody::Capsule(Box::new(capsule.clone())),
    });
    let live = core.input_for(&path);
    factor.apply(live.total_tokens())
}

/// Files larger than this are listed by path only after a capsule, never
/// read whole.
const REHYDRATE_MAX_BYTES: u64 = 1024 * 1024;

/// The workspace files a capsule brings back after it, read beneath the
/// session's working directory (the root the capsule's facts make paths
/// relative to) through [`Beneath`]: regular files only, no link leading
/// out, at most [`REHYDRATE_MAX_BYTES`]. The root is opened on the first
/// read, so a preflight with nothing to compact opens nothing.
struct WorkspaceFiles {
    root: PathBuf,
    beneath: OnceLock<Option<Beneath>>,
}

impl WorkspaceFiles {
    fn new(cwd: &str) -> Self {
        WorkspaceFiles {
            root: PathBuf::from(cwd),
            beneath: OnceLock::new(),
        }
    }

    /// Returns the root's handle; `None` when the working directory is
    /// not an absolute path below `/`, or cannot be opened.
    fn beneath(&self) -> Option<&Beneath> {
        self.beneath
            .get_or_init(|| {
                let usable = self.root.is_absolute() && self.root.parent().is_some();
                usable.then(|| Beneath::open(&self.root).ok()).flatten()
            })
            .as_ref()
    }

    /// Returns `path` as a relative path with plain components only.
    fn inside(path: &str) -> Option<&Path> {
        let path = Path::new(path);
        let plain = path
            .components()
            .all(|part| matches!(part, Component::Normal(_) | Component::CurDir));
        (plain && path.components().next().is_some()).then_some(path)
    }
}

impl FileSource for WorkspaceFiles {
    fn read(&self, path: &str) -> FileContent {
        let (Some(beneath), Some(inside)) = (self.beneath(), Self::inside(path)) else {
            return FileContent::Unreadable;
        };
        let (file, meta) = match beneath.open_regular(inside, Links::FollowBeneath) {
            Ok(opened) => opened,
            Err(error) if error.is_not_found() => return FileContent::Gone,
            Err(_) => return FileContent::Unreadable,
        };
        if meta.len() > REHYDRATE_MAX_BYTES {
            return FileContent::Unreadable;
        }
        let mut bytes = Vec::new();
        if file
            .take(REHYDRATE_MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .is_err()
            || bytes.len() as u64 > REHYDRATE_MAX_BYTES
            || bytes.iter().take(8 * 1024).any(|&byte| byte == 0)
        {
            return FileContent::Unreadable;
        }
        match String::from_utf8(bytes) {
            Ok(text) => FileContent::Text(text),
            Err(_) => FileContent::Unreadable,
        }
    }

    fn probe(&self, path: &str) -> FileProbe {
        let (Some(beneath), Some(inside)) = (self.beneath(), Self::inside(path)) else {
            return FileProbe::Unreadable;
        };
        match beneath.metadata(inside, Links::FollowBeneath) {
            Ok(None) => FileProbe::Gone,
            Ok(Some(meta)) if meta.is_file() && meta.len() <= REHYDRATE_MAX_BYTES => {
                FileProbe::Bytes(meta.len())
            }
            Ok(Some(_)) => FileProbe::Unreadable,
            Err(error) if error.is_not_found() => FileProbe::Gone,
            Err(_) => FileProbe::Unreadable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::progress_percent;

    #[test]
    fn progress_follows_the_spec_formula() {
        // One chunk, maxOutputTokens 2,000: the divisor is 1,200.
        assert_eq!(progress_percent(0, 1, 0, 1_200), 0);
        assert_eq!(progress_percent(0, 1, 600, 1_200), 50);
        assert_eq!(progress_percent(0, 1, 1_199, 1_200), 99);
        // Past the divisor the chunk counts as whole; 100 % waits for the append.
        assert_eq!(progress_percent(0, 1, 1_200, 1_200), 99);
        assert_eq!(progress_percent(0, 1, 5_000, 1_200), 99);
        assert_eq!(progress_percent(1, 1, 0, 1_200), 99);
        // Two chunks: half of the first is 25 %, half of the second 75 %.
        assert_eq!(progress_percent(0, 2, 600, 1_200), 25);
        assert_eq!(progress_percent(1, 2, 0, 1_200), 50);
        assert_eq!(progress_percent(1, 2, 600, 1_200), 75);
        // Three chunks, maxOutputTokens 100: rounded down.
        assert_eq!(progress_percent(1, 3, 50, 100), 50);
        assert_eq!(progress_percent(0, 3, 1, 100), 0);
        assert_eq!(progress_percent(2, 3, 0, 100), 66);
        // A zero divisor or chunk count never divides by zero.
        assert_eq!(progress_percent(0, 0, 10, 0), 99);
    }
}
