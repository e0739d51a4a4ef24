//! The `soba` policy: SOBA's own preflight barrier (SPEC §7) driven
//! synchronously on soba-core's one decision (`soba_core::preflight`, the
//! engine's barrier calls the same) — measure, hygiene once per turn,
//! trigger choice with the soft cap and re-arm rule, the planner with its
//! ROI and fail-closed fit, the deterministic capsule, the post-generation
//! ROI check — on a session path of its own. A request above hardLimit is never
//! sent: it counts in `overWindow`.

use std::collections::HashMap;
use std::sync::Arc;

use soba_core::budget::Budget;
use soba_core::builder;
use soba_core::calibration::Factor;
use soba_core::capsule::Quality;
use soba_core::config::CompactionConfig;
use soba_core::derived::DerivedState;
use soba_core::hygiene::HygieneDecision;
use soba_core::input::{InputConfig, InputOrigin, InputSetup, LiveInput};
use soba_core::preflight::{self, CompactJob, Decision, Verdict};
use soba_core::rehydrate::TranscriptFiles;
use soba_core::render::{self, CapsuleView};
use soba_core::trigger::TurnState;
use soba_core::{Capsule, Entry, EntryBody, EntryId, IdKind, TokenCount};

use super::probe::{Item, ItemKind, TextItem, message_text};
use super::run::{Ctx, Message0, Recorder, Runner, TEXT_KEY};

/// Keys of rewritten messages (stubbed, capped, cut or synthetic).
const REWRITE_KEY: u64 = 1 << 63;
/// Ids minted for SOBA's own entries count down from here, far from the
/// importers' time-ordered uuid v7 ids.
const FIRST_MINTED: u128 = u128::MAX;

/// The `soba` policy's state on one trace.
pub(crate) struct SobaRunner {
    config: CompactionConfig,
    budget: Budget,
    factor: Factor,
    setup: InputSetup,
    path: Vec<Entry>,
    /// For each path entry, the trace entry it is (`None` for SOBA's own).
    trace_idx: Vec<Option<usize>>,
    live: LiveInput,
    turn: TurnState,
    hygiene_considered: Option<Option<EntryId>>,
    minted: u128,
    capsule_keys: HashMap<EntryId, u64>,
    texts: HashMap<u64, Arc<TextItem>>,
    items: Vec<Item>,
    recorder: Recorder,
    /// Local tokens of the `system`-role entries recorded so far: they are
    /// part of message 0 of every request (not of SOBA's path), so the
    /// preflight adds them to what it measures.
    system_local: u64,
    /// The newest content the transcript shows for each file, for the
    /// files a capsule brings back; indexed up to `files_indexed`.
    files: TranscriptFiles,
    files_indexed: usize,
    /// What each preflight decided beyond proceeding, for the parity test
    /// with the engine.
    #[cfg(test)]
    decided: Vec<(usize, String)>,
}

impl SobaRunner {
    /// Returns the runner for a trace; the budget comes from the trace's
    /// window and maximum output with `config` (defaults plus `--set`).
    pub fn new(ctx: &Ctx<'_>, config: CompactionConfig, budget: Budget) -> Self {
        let setup = ctx
            .trace
            .input_setup(InputConfig::new(&budget, &config))
            .with_cwd(ctx.trace.cwd.clone())
            .with_renderer(Arc::new(|capsule: &Capsule| {
                render::capsule_input(&CapsuleView::from(capsule))
            }));
        let factor = Factor::new(ctx.trace.primary_calibration().factor);
        SobaRunner {
            live: LiveInput::new(setup.clone()),
            setup,
            config,
            budget,
            factor,
            path: Vec::new(),
            trace_idx: Vec::new(),
            turn: TurnState::new(),
            hygiene_considered: None,
            minted: FIRST_MINTED,
            capsule_keys: HashMap::new(),
            texts: HashMap::new(),
            items: Vec::new(),
            recorder: Recorder::new("soba", ctx.trace.steps.len()),
            system_local: 0,
            files: TranscriptFiles::default(),
            files_indexed: 0,
            #[cfg(test)]
            decided: Vec::new(),
        }
    }

    fn mint(&mut self, kind: IdKind) -> EntryId {
        let id = EntryId::from_uuid(kind, self.minted);
        self.minted -= 1;
        id
    }

    fn push(&mut self, body: EntryBody, kind: IdKind) -> EntryId {
        let id = self.mint(kind);
        self.path.push(Entry {
            id: id.clone(),
            parent_id: self.path.last().map(|entry| entry.id.clone()),
            timestamp: String::new(),
            body,
        });
        self.trace_idx.push(None);
        self.live.extend(&self.path);
        id
    }

    /// Returns effective tokens: the calibrated local count of the whole
    /// input, the fitted overhead folded into the system prompt's count.
    fn effective(&self) -> TokenCount {
        self.factor
            .apply(self.live.total_tokens() + TokenCount::new(self.system_local))
    }

    /// Appends a hygiene pass that applies (SPEC §8.1).
    fn hygiene(&mut self, step: usize, decision: HygieneDecision) {
        if let HygieneDecision::Apply(pass) = decision {
            self.push(pass.entry_body(), IdKind::Entry);
            self.recorder.hygiene();
            self.note(step, || "hygiene".to_owned());
        }
    }

    /// Notes a decision for the parity test.
    #[cfg_attr(not(test), allow(unused_variables))]
    fn note(&mut self, step: usize, what: impl FnOnce() -> String) {
        #[cfg(test)]
        self.decided.push((step, what()));
    }

    /// Builds the deterministic capsule of `job` and appends it when it
    /// passes the post-generation check.
    fn compact(&mut self, ctx: &Ctx<'_>, step: usize, job: &CompactJob) {
        let counter = ctx.counter();
        let previous_capsule = job.previous_capsule();
        let facts = job.facts(counter);
        let content = builder::build_deterministic(
            &facts,
            previous_capsule,
            &job.build_options(Quality::Full),
            counter,
        );
        let capsule = content.into_capsule(job.frame());
        // The attempt reached generation: it is costed whatever follows.
        let input = ctx.summarizer_input(&job.span, previous_capsule);
        let output = ctx.narrative_tokens(&capsule);
        self.recorder.summarizer(ctx, input, output);

        let capsule_id = self.mint(IdKind::Capsule);
        self.path.push(Entry {
            id: capsule_id.clone(),
            parent_id: self.path.last().map(|entry| entry.id.clone()),
            timestamp: String::new(),
            body: EntryBody::Capsule(Box::new(capsule)),
        });
        // tokensAfter, measured exactly on the input the capsule gives.
        let after = self.factor.apply(
            LiveInput::build(self.setup.clone(), &self.path).total_tokens()
                + TokenCount::new(self.system_local),
        );
        let verdict = preflight::accept(job, after, &self.budget, &mut self.turn);
        self.note(step, || {
            let outcome = match verdict {
                Verdict::Append => "completed",
                Verdict::Rejected(_) => "skipped",
                Verdict::TooLarge { .. } => "failed",
            };
            format!("compact {} {outcome}", job.trigger().as_str())
        });
        match verdict {
            Verdict::Append => {}
            verdict => {
                self.path.pop();
                if matches!(verdict, Verdict::Rejected(_)) {
                    self.recorder.stats.rejected_capsules += 1;
                }
                return;
            }
        }
        if let Some(Entry {
            body: EntryBody::Capsule(capsule),
            ..
        }) = self.path.last_mut()
        {
            capsule.tokens_after = after;
        }
        self.trace_idx.push(None);
        self.live.extend(&self.path);
        preflight::appended(&mut self.turn);
        self.capsule_keys.insert(capsule_id, ctx.fresh_key());
        self.recorder.compaction(step);
    }

    /// Rebuilds the item list of the current input for pricing and probes.
    fn refresh_items(&mut self, ctx: &Ctx<'_>) {
        let view = self.live.view();
        let mut items = Vec::with_capacity(view.messages.len() + 1);
        if let Some(capsule) = &view.capsule {
            let key = self
                .capsule_keys
                .get(capsule.id)
                .copied()
                .unwrap_or(TEXT_KEY | u64::MAX >> 3);
            let text = self
                .texts
                .entry(key)
                .or_insert_with(|| {
                    let rendered = capsule
                        .rendered
                        .map_or_else(String::new, |message| message.text());
                    Arc::new(ctx.index.text_item(&rendered))
                })
                .clone();
            items.push(Item::text(key, capsule.tokens.get(), text, None));
        }
        for message in &view.messages {
            let source = self.trace_idx.get(message.path_index).copied().flatten();
            let tokens = message.tokens.get();
            match source {
                Some(idx)
                    if message.origin == InputOrigin::Entry && message.rewrites.is_verbatim() =>
                {
                    items.push(Item::entry(idx, tokens));
                }
                _ => {
                    let rewrites = message.rewrites;
                    let key = REWRITE_KEY
                        | (hash_parts(&(
                            source,
                            message.source.as_str(),
                            message.origin as u8,
                            rewrites.stubbed,
                            rewrites.capped,
                            rewrites.swept,
                            rewrites.truncated,
                            tokens,
                            message
                                .results
                                .iter()
                                .map(|r| r.call_id.as_str())
                                .collect::<Vec<_>>(),
                        )) >> 1);
                    let text = self
                        .texts
                        .entry(key)
                        .or_insert_with(|| {
                            Arc::new(ctx.index.text_item(&message_text(message.message)))
                        })
                        .clone();
                    let kind = match message.origin {
                        InputOrigin::CapsuleFile => ItemKind::File,
                        _ if !rewrites.stubbed && (rewrites.capped || rewrites.truncated) => {
                            ItemKind::Truncated
                        }
                        _ => ItemKind::Stub,
                    };
                    items.push(Item::text(key, tokens, text, source).with_kind(kind));
                }
            }
        }
        self.items = items;
    }
}

fn hash_parts(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl Runner for SobaRunner {
    fn append(&mut self, ctx: &Ctx<'_>, idx: usize) {
        let mut entry = ctx.trace.entries[idx].clone();
        entry.parent_id = self.path.last().map(|last| last.id.clone());
        self.path.push(entry);
        self.trace_idx.push(Some(idx));
    }

    fn preflight(&mut self, ctx: &Ctx<'_>, step: usize, message0: Message0) {
        self.system_local = message0.local.saturating_sub(ctx.trace.fixed_local);
        self.live.extend(&self.path);
        let derived = DerivedState::from_path(&self.path);
        // The provider's cache lifetime is the one the replay prices by
        // (`--cache-ttl`).
        let cache_ttl_ms = Some(u64::try_from(ctx.cost.ttl_ms).unwrap_or(0));
        // The files a capsule brings back: the newest content the
        // transcript shows for each (the replay has no workspace).
        let indexed = self.files_indexed.min(self.path.len());
        self.files
            .extend(&self.path[indexed..], ctx.trace.cwd.as_deref());
        self.files_indexed = self.path.len();
        loop {
            let effective = self.effective();
            let decided = preflight::decide(
                &preflight::Input {
                    live: &self.live,
                    path: &self.path,
                    derived: &derived,
                    budget: &self.budget,
                    config: &self.config,
                    effective,
                    factor: self.factor,
                    counter: ctx.counter(),
                    cwd: ctx.trace.cwd.as_deref(),
                    model: &ctx.trace.model,
                    idle_ms: ctx.idle_ms.get(step).copied().flatten(),
                    cache_ttl_ms,
                    forced: None,
                    files: Some(&self.files),
                },
                &mut self.turn,
                &mut self.hygiene_considered,
            );
            match decided.decision {
                Decision::Hygiene(decision) => self.hygiene(step, decision),
                Decision::Compact(job) => {
                    self.compact(ctx, step, &job);
                    break;
                }
                // Fail-closed: a soft trigger proceeds without compacting; a
                // forced one leaves the input over hardLimit, and the
                // request is not sent.
                Decision::Failed { trigger, .. } => {
                    self.note(step, || format!("failed {}", trigger.as_str()));
                    break;
                }
                Decision::Proceed | Decision::Skipped { .. } => break,
            }
        }
        self.refresh_items(ctx);
        let effective = self.effective();
        if effective > self.budget.hard_limit() {
            // A request known to be over hardLimit is never sent (§7.2).
            let tokens = Recorder::size(ctx, step, message0, &self.items);
            self.recorder.unsent(step, tokens);
            return;
        }
        self.recorder.send(ctx, step, message0, &self.items, true);
    }

    fn items(&self) -> &[Item] {
        &self.items
    }

    fn recorder(&mut self) -> &mut Recorder {
        &mut self.recorder
    }

    fn limits(&self) -> Option<(u64, u64)> {
        Some((
            self.budget.hard_limit().get(),
            self.budget.auto_limit().get(),
        ))
    }
}

#[cfg(test)]
mod parity;

#[cfg(test)]
mod tests {
    use serde_json::json;
    use soba_core::config::CompactionConfig;

    use super::super::policy::{PolicyKind, PolicySpec};
    use super::super::testing::{Script, first_step_at, none_sizes, with_run};

    fn soba() -> [PolicySpec; 1] {
        [PolicySpec::new(PolicyKind::Soba)]
    }

    fn config(sets: &[(&str, serde_json::Value)]) -> CompactionConfig {
        let mut config = CompactionConfig::default();
        for (key, value) in sets {
            config.set_key(key, value).unwrap();
        }
        config
    }

    // Window 100,000 and max output 10,000: hardLimit 81,808, autoLimit
    // 65,446, hygieneLimit 40,904, keepRecent 20,000, softGate 32,000.

    #[test]
    fn auto_threshold_compacts_at_the_first_request_at_auto_limit() {
        let mut script = Script::new();
        script.user("task", 1_000);
        for i in 0..60 {
            script.read(&format!("src/f{}.rs", i % 8), 2_000);
        }
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        let at = first_step_at(&trace, 65_446).unwrap();
        let no_hygiene = config(&[
            ("minHygieneTokens", json!(1_000_000)),
            ("compactOnReadCost", json!(false)),
            ("keepRecentResults", json!(0)),
        ]);
        with_run(&trace, &soba(), &no_hygiene, |_, _, out| {
            let recorder = &out.recorders[0];
            assert_eq!(recorder.series.compactions[0], at);
            assert_eq!(recorder.stats.hygiene_passes, 0);
            assert_eq!(recorder.stats.rejected_capsules, 0);
            assert_eq!(recorder.stats.over_window, 0);
            // After the capsule: a tail of at most 20,000 tokens (whole
            // 2,014-token units) plus the capsule, well under autoLimit;
            // never above autoLimit plus one step's growth.
            let after = recorder.series.tokens[at].unwrap();
            assert!((20_000 - 2_014..20_000 + 6_544).contains(&after), "{after}");
            assert!(recorder.stats.peak_input_tokens < 65_446 + 2_014);
            assert!(recorder.stats.compactions >= 2);
            assert_eq!(recorder.stats.summarizer_calls, recorder.stats.compactions);
        });
    }

    /// One long turn of 2,000-token reads: what the soba policy pays and
    /// where it compacts first.
    fn long_turn(sets: &[(&str, serde_json::Value)]) -> (f64, usize, u64, f64) {
        let mut script = Script::new();
        script.user("task", 1_000);
        for i in 0..60 {
            script.read(&format!("src/f{}.rs", i % 8), 2_000);
        }
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        // A tail of five results: the rule's pay-off shows on a short tail.
        let mut all = vec![
            ("minHygieneTokens", json!(1_000_000)),
            ("keepRecentResults", json!(5)),
        ];
        all.extend(sets.iter().cloned());
        with_run(&trace, &soba(), &config(&all), |_, _, out| {
            let recorder = &out.recorders[0];
            assert_eq!(recorder.stats.rejected_capsules, 0);
            (
                recorder.stats.billed_equivalent_tokens,
                recorder.series.compactions[0],
                recorder.stats.peak_input_tokens,
                recorder.stats.recall_mean().unwrap_or(0.0),
            )
        })
    }

    #[test]
    fn read_cost_compacts_before_auto_limit_once_it_pays_and_costs_less() {
        let (off, at_auto, _, _) = long_turn(&[("compactOnReadCost", json!(false))]);
        let (on, at_cost, peak, recall) = long_turn(&[]);
        // √(2 × 2,014 × cost / 0.1) with a ~5,000-token capsule and tail
        // is reached near 40,000 tokens, well before autoLimit 65,446.
        assert!(at_cost < at_auto, "{at_cost} !< {at_auto}");
        assert!(on < off * 0.9, "{on} !< 0.9 × {off}");
        assert!(peak < 65_446);
        assert!(recall > 0.99, "{recall}");
    }

    #[test]
    fn the_tail_stops_at_the_newest_results_it_must_keep() {
        let tail_after = |results: u64| {
            let mut script = Script::new();
            script.user("task", 1_000);
            for i in 0..70 {
                script.read(&format!("src/f{}.rs", i % 8), 1_000);
            }
            script.answer("done");
            let trace = script.trace(100_000, 10_000);
            let sets = config(&[
                ("minHygieneTokens", json!(1_000_000)),
                ("compactOnReadCost", json!(false)),
                ("keepRecentResults", json!(results)),
            ]);
            with_run(&trace, &soba(), &sets, |_, _, out| {
                let recorder = &out.recorders[0];
                let at = recorder.series.compactions[0];
                (
                    recorder.series.tokens[at].unwrap(),
                    recorder.stats.probe_mean(4).unwrap(),
                )
            })
        };
        let (by_tokens, recent_by_tokens) = tail_after(0);
        let (by_results, recent_by_results) = tail_after(5);
        // Five 1,014-token units instead of ~19 under keepRecent 20,000.
        assert!(
            by_results + 10_000 < by_tokens,
            "{by_results} vs {by_tokens}"
        );
        assert_eq!(recent_by_tokens, 1.0);
        assert_eq!(recent_by_results, 1.0);
    }

    #[test]
    fn an_expired_cache_compacts_at_the_soft_gate() {
        let run = |gap_ms: i64| {
            let mut script = Script::new();
            script.step_ms = 10_000;
            script.user("task", 1_000);
            let mut last = 0;
            for i in 0..20 {
                last = script.read(&format!("src/f{}.rs", i % 8), 2_000);
            }
            // The request after the 20th read comes after an idle gap.
            script.stamp(last, 20 * 10_000 + gap_ms);
            script.read("src/g.rs", 100);
            script.answer("done");
            let trace = script.trace(100_000, 10_000);
            let sets = config(&[
                ("minHygieneTokens", json!(1_000_000)),
                ("compactOnReadCost", json!(false)),
            ]);
            with_run(&trace, &soba(), &sets, |_, _, out| {
                let recorder = &out.recorders[0];
                (
                    recorder.series.compactions.clone(),
                    recorder.stats.billed_equivalent_tokens,
                )
            })
        };
        let (quiet, _) = run(1_000);
        let (idle, _) = run(400_000);
        assert!(quiet.is_empty(), "{quiet:?}");
        assert_eq!(idle, vec![20]);
    }

    #[test]
    fn system_messages_count_in_the_preflight() {
        let mut script = Script::new();
        script.user("task", 1_000);
        script.system("rules", 8_000);
        for i in 0..60 {
            script.read(&format!("src/f{}.rs", i % 8), 2_000);
        }
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        let sets = config(&[
            ("minHygieneTokens", json!(1_000_000)),
            ("compactOnReadCost", json!(false)),
        ]);
        with_run(&trace, &soba(), &sets, |_, _, out| {
            let stats = &out.recorders[0].stats;
            // Measured on the request sent, system message included: never
            // above autoLimit plus one 2,014-token step.
            assert!(
                stats.peak_input_tokens <= 65_446 + 2_014,
                "{}",
                stats.peak_input_tokens
            );
        });
    }

    #[test]
    fn turn_complete_compacts_at_the_next_turn_above_the_soft_gate() {
        let mut script = Script::new();
        script.user("task", 1_000);
        for i in 0..19 {
            script.read(&format!("src/f{}.rs", i % 8), 2_000);
        }
        script.answer("done");
        script.user("next", 100);
        script.read("src/z.rs", 100);
        script.answer("ok");
        let trace = script.trace(100_000, 10_000);
        let sizes = none_sizes(&trace);
        assert!(sizes[20] >= 32_000 && sizes[20] < 65_446);
        with_run(
            &trace,
            &soba(),
            &CompactionConfig::default(),
            |_, _, out| {
                // Below autoLimit: only the pending turn_complete intent fires.
                assert_eq!(out.recorders[0].series.compactions, vec![20]);
                assert!(out.recorders[0].series.tokens[20].unwrap() < sizes[20]);
            },
        );
    }

    #[test]
    fn hygiene_runs_once_per_turn_at_the_hygiene_limit() {
        let mut script = Script::new();
        script.user("task", 1_000);
        for i in 0..28 {
            script.read(&format!("src/f{}.rs", i % 8), 2_000);
        }
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        let at = first_step_at(&trace, 40_904).unwrap();
        let sizes = none_sizes(&trace);
        with_run(
            &trace,
            &soba(),
            &CompactionConfig::default(),
            |_, _, out| {
                let recorder = &out.recorders[0];
                assert_eq!(recorder.stats.hygiene_passes, 1);
                assert_eq!(recorder.stats.compactions, 0);
                let before = recorder.series.tokens[at - 1].unwrap();
                assert_eq!(before, sizes[at - 1], "identical input before hygiene");
                // Results outside the newest 10 messages became stubs.
                assert!(recorder.series.tokens[at].unwrap() + 20_000 <= sizes[at]);
            },
        );
    }

    #[test]
    fn a_request_over_hard_limit_is_never_sent() {
        let mut script = Script::new();
        script.user("task", 100);
        script.read("src/huge.rs", 90_000);
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        let uncapped = config(&[("maxToolResultTokens", json!(1_000_000))]);
        with_run(&trace, &soba(), &uncapped, |_, _, out| {
            let stats = &out.recorders[0].stats;
            // The newest unit alone is over hardLimit: the plan fails closed.
            assert_eq!(stats.over_window, 1);
            assert_eq!(stats.requests, 1);
            assert_eq!(stats.compactions, 0);
            assert!(stats.peak_input_tokens <= 81_808);
        });
    }

    #[test]
    fn the_tool_output_cap_keeps_a_huge_result_sendable() {
        let mut script = Script::new();
        script.user("task", 100);
        script.read("src/huge.rs", 90_000);
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        with_run(
            &trace,
            &soba(),
            &CompactionConfig::default(),
            |_, _, out| {
                let stats = &out.recorders[0].stats;
                assert_eq!(stats.over_window, 0);
                assert_eq!(stats.requests, 2);
                // maxToolResultTokens = min(16,000, hardLimit / 4).
                assert!(stats.peak_input_tokens <= 16_000 + 200);
            },
        );
    }

    /// The files a capsule brings back (issue 32 item 3) are in the input
    /// the policy sends, so its figures include them: the newest content
    /// the transcript shows for each modified file.
    #[test]
    fn the_files_a_capsule_brings_back_are_billed() {
        use soba_core::capsule::RehydratedFile;
        use soba_core::rehydrate::render_file;
        use soba_core::tokens::{ByteCounter, TokenCounter};

        use super::super::testing::text;

        let mut script = Script::new();
        script.user("task", 1_000);
        let first = text("app-v1", 1_200);
        let id = script.call("write", json!({"path": "src/app.rs", "content": first}));
        script.result(&id, "ok", false);
        let newest = text("app-v2", 1_500);
        let id = script.call("write", json!({"path": "src/app.rs", "content": newest}));
        script.result(&id, "ok", false);
        for i in 0..60 {
            script.read(&format!("src/f{}.rs", i % 8), 2_000);
        }
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        let run = |max_files: u64| {
            let sets = config(&[
                ("minHygieneTokens", json!(1_000_000)),
                ("compactOnReadCost", json!(false)),
                ("keepRecentResults", json!(0)),
                ("rehydrate.maxFiles", json!(max_files)),
            ]);
            with_run(&trace, &soba(), &sets, |_, _, out| {
                let recorder = &out.recorders[0];
                (
                    recorder.series.compactions.clone(),
                    recorder.series.tokens.clone(),
                    recorder.stats.billed_equivalent_tokens,
                )
            })
        };
        let (compactions, tokens, billed) = run(5);
        let (compactions_off, tokens_off, billed_off) = run(0);
        let at = compactions[0];
        assert_eq!(compactions_off[0], at);
        let block = render_file(&RehydratedFile {
            path: "src/app.rs".into(),
            text: newest.clone(),
            total_lines: 1,
            shown_lines: 1,
        });
        let n_block = ByteCounter.count_text(&block).n.get();
        assert_eq!(
            tokens[at].unwrap() - tokens_off[at].unwrap(),
            n_block,
            "the request after the capsule carries the newest content"
        );
        assert!(billed > billed_off, "{billed} ≤ {billed_off}");
    }
}
