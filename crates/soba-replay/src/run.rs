//! The replay loop (SPEC §15.1): every recorded inference in order; before
//! each, every policy appends the new entries and runs its own preflight on
//! its own model input; then the recorded response is appended to every
//! policy. Requests are priced and graded here, the same way for all.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use soba_core::builder::{self, BuildOptions};
use soba_core::capsule::{Capsule, Quality, Trigger};
use soba_core::config::CompactionConfig;
use soba_core::facts::{self, FactsConfig, FactsInput, is_failure};
use soba_core::plan::narrative_tokens;
use soba_core::render;
use soba_core::summarize::{self, SummaryRequest};
use soba_core::tokens::MESSAGE_OVERHEAD;
use soba_core::{Block, Entry, EntryBody, EntryId, Role, TokenCount, TokenCounter};

use super::cost::{CostModel, PrefixMessage, common_prefix_local};
use super::probe::{Item, ProbeIndex, TextItem};
use super::report::{PolicyStats, Series, WriteCause};
use super::trace::Trace;

/// Keys of synthetic items (summaries, attachments, truncated messages).
pub(crate) const TEXT_KEY: u64 = 1 << 62;

/// A file read whose result a Claude Code compaction may re-attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileRead {
    /// The entry holding the result.
    pub entry: usize,
    /// The file, workspace-relative.
    pub path: String,
    /// The result as returned.
    pub text: String,
}

/// Message 0 of every request: system prompt, tool schemas and the pinned
/// `system` entries so far, the same for every policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message0 {
    /// Changes whenever a pinned part is added.
    pub key: u64,
    /// Local tokens, without the fitted overhead.
    pub local: u64,
}

/// What every policy shares during one trace's replay.
pub(crate) struct Ctx<'a> {
    pub trace: &'a Trace,
    pub index: &'a ProbeIndex,
    pub cost: CostModel,
    pub config: &'a CompactionConfig,
    /// autoLimit of SOBA's budget: the capsule size bound of every policy.
    pub capsule_auto_limit: TokenCount,
    /// Per entry: whether it answers tool calls (it joins the unit before).
    pub is_result: Vec<bool>,
    /// Per entry: whether it is a real user message.
    pub is_real_user: Vec<bool>,
    /// Successful results of read tools, in order.
    pub reads: Vec<FileRead>,
    /// Per step: whether the cache expired since the previous request.
    pub expired: Vec<bool>,
    /// Per step: milliseconds since the previous recorded request.
    pub idle_ms: Vec<Option<u64>>,
    /// The requests whose inputs every policy keeps a copy of, for the
    /// fidelity measure and `--dump-inputs` (the last of each fifth).
    pub probe_points: Vec<usize>,
    summarizer_counts: RefCell<HashMap<u64, u64>>,
    next_key: Cell<u64>,
}

fn hash_of(value: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl<'a> Ctx<'a> {
    /// Prepares the shared state of one trace's replay.
    pub fn new(
        trace: &'a Trace,
        index: &'a ProbeIndex,
        cost: CostModel,
        config: &'a CompactionConfig,
        capsule_auto_limit: TokenCount,
    ) -> Self {
        let mut is_result = Vec::with_capacity(trace.entries.len());
        let mut is_real_user = Vec::with_capacity(trace.entries.len());
        let mut reads = Vec::new();
        let mut read_calls: HashMap<String, String> = HashMap::new();
        let cwd = trace.cwd.as_deref();
        for (idx, entry) in trace.entries.iter().enumerate() {
            let EntryBody::Message(message) = &entry.body else {
                is_result.push(false);
                is_real_user.push(false);
                continue;
            };
            let message = &message.message;
            is_real_user.push(message.is_real_user());
            is_result.push(
                message.role != Role::Assistant
                    && message
                        .content
                        .iter()
                        .any(|block| matches!(block, Block::ToolResult(_))),
            );
            for block in &message.content {
                match block {
                    Block::ToolUse(call) => {
                        let call_facts = facts::call_facts(call, cwd);
                        if call_facts.command.is_none()
                            && let Some(path) = call_facts.read.first()
                        {
                            read_calls.insert(call.id.clone(), path.clone());
                        }
                    }
                    Block::ToolResult(result) if !is_failure(result) => {
                        if let Some(path) = read_calls.get(&result.tool_use_id) {
                            reads.push(FileRead {
                                entry: idx,
                                path: path.clone(),
                                text: result.text(),
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut expired = Vec::with_capacity(trace.steps.len());
        let mut idle_ms = Vec::with_capacity(trace.steps.len());
        let mut previous: Option<i64> = None;
        for step in &trace.steps {
            expired.push(cost.expired(previous, step.time_ms));
            idle_ms.push(match (previous, step.time_ms) {
                (Some(previous), Some(now)) => u64::try_from(now - previous).ok(),
                _ => None,
            });
            if step.time_ms.is_some() {
                previous = step.time_ms;
            }
        }
        Ctx {
            trace,
            index,
            cost,
            config,
            capsule_auto_limit,
            is_result,
            is_real_user,
            reads,
            expired,
            idle_ms,
            probe_points: super::fidelity::probe_points(trace.steps.len()),
            summarizer_counts: RefCell::new(HashMap::new()),
            next_key: Cell::new(0),
        }
    }

    /// Returns the token counter every policy uses.
    pub fn counter(&self) -> &dyn TokenCounter {
        self.trace.counter.as_ref()
    }

    /// Returns a fresh key for a synthetic item.
    pub fn fresh_key(&self) -> u64 {
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        TEXT_KEY | key
    }

    /// Returns the calibrated size of a local count at `step`.
    pub fn calibrated(&self, step: usize, local: u64) -> u64 {
        self.trace.step_calibration(step).apply(local)
    }

    /// Returns `local` tokens scaled by `step`'s factor alone (no overhead),
    /// for sizes of parts of an input.
    pub fn scaled(&self, step: usize, local: u64) -> u64 {
        (local as f64 * self.trace.step_calibration(step).factor).ceil() as u64
    }

    /// Returns a text item (normalised, with the files it names) and its
    /// local count as one input message.
    pub fn text_item(&self, raw: &str) -> (Arc<TextItem>, u64) {
        let tokens = self.counter().count_text(raw).n.get() + MESSAGE_OVERHEAD.get();
        (Arc::new(self.index.text_item(raw)), tokens)
    }

    /// Returns the summarizer's input for a span (SPEC §15.4): the prompt
    /// with the previous state and the span serialised as the LLM
    /// summarizer receives it (tool results capped at 2,000 characters).
    pub fn summarizer_input(&self, span: &[Entry], previous: Option<&Capsule>) -> u64 {
        let request = SummaryRequest {
            previous_state: previous.map(summarize::previous_state),
            span_text: String::new(),
            chunk_index: 0,
            chunk_count: 1,
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: self.config.summarizer.max_output_tokens.get() as u32,
        };
        let counter = self.counter();
        let mut total = counter.count_text(&request.prompt()).n.get();
        let items = summarize::span_items(span);
        let separator = counter.count_text("\n\n").n.get();
        let mut cache = self.summarizer_counts.borrow_mut();
        for (idx, item) in items.iter().enumerate() {
            let key = hash_of(item.as_str());
            let n = *cache
                .entry(key)
                .or_insert_with(|| counter.count_text(item).n.get());
            total += n + if idx > 0 { separator } else { 0 };
        }
        total
    }

    /// Builds the deterministic capsule every policy uses as its summary
    /// (SPEC §9.4, §15.2) and returns it with its rendered model-input text.
    pub fn deterministic_capsule(
        &self,
        span: &[Entry],
        previous: Option<&Capsule>,
        retained: &HashSet<EntryId>,
        trigger: Trigger,
    ) -> (Capsule, String) {
        let counter = self.counter();
        let facts = facts::extract(
            &FactsInput {
                tail: &[],
                span,
                previous,
                retained,
                cwd: self.trace.cwd.as_deref(),
            },
            &FactsConfig {
                user_message_budget: self.config.user_message_budget_tokens,
            },
            counter,
        );
        let content = builder::build_deterministic(
            &facts,
            previous,
            &BuildOptions {
                auto_limit: self.capsule_auto_limit,
                trigger,
                quality: Quality::Full,
                instructions: None,
            },
            counter,
        );
        let rendered = render::capsule_input(&content.view());
        let capsule = content.into_capsule(builder::CapsuleFrame::default());
        (capsule, rendered)
    }

    /// Returns a capsule's narrative tokens (the summarizer output figure).
    pub fn narrative_tokens(&self, capsule: &Capsule) -> u64 {
        narrative_tokens(self.counter(), capsule).get()
    }
}

/// Records one policy's requests: sizes, cost, the cache prefix and the
/// chart series.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorder {
    pub stats: PolicyStats,
    pub series: Series,
    previous: Option<(u64, Vec<PrefixMessage>, String)>,
    /// What the policy did since its last request, for the write split.
    cause: Option<WriteCause>,
    /// The last step at which a request within the window was sent.
    answered_step: Option<usize>,
}

impl Recorder {
    /// Returns a recorder for `name` over `steps` requests.
    pub fn new(name: &str, steps: usize) -> Self {
        let mut stats = PolicyStats::new(name);
        stats.steps = steps as u64;
        Recorder {
            stats,
            series: Series {
                name: name.to_owned(),
                tokens: vec![None; steps],
                compactions: Vec::new(),
            },
            previous: None,
            cause: None,
            answered_step: None,
        }
    }

    /// Returns the calibrated size of an input.
    pub fn size(ctx: &Ctx<'_>, step: usize, message0: Message0, items: &[Item]) -> u64 {
        let local = message0.local + items.iter().map(|item| item.tokens).sum::<u64>();
        ctx.calibrated(step, local)
    }

    /// Sends one request; returns its size. `first_of_step` is false for a
    /// resend, which never finds the cache expired.
    pub fn send(
        &mut self,
        ctx: &Ctx<'_>,
        step: usize,
        message0: Message0,
        items: &[Item],
        first_of_step: bool,
    ) -> u64 {
        let prompt = Self::size(ctx, step, message0, items);
        let messages: Vec<PrefixMessage> = items
            .iter()
            .map(|item| PrefixMessage {
                key: item.key,
                tokens: item.tokens,
            })
            .collect();
        let model = &ctx.trace.steps[step].model;
        let expired = first_of_step && ctx.expired.get(step).copied().unwrap_or(false);
        let prefix_local = match &self.previous {
            Some((key, previous, previous_model)) if !expired && previous_model == model => {
                common_prefix_local(
                    (*key, 0, previous),
                    (message0.key, message0.local, &messages),
                )
            }
            _ => 0,
        };
        let prefix = if prefix_local == 0 {
            0
        } else {
            ctx.calibrated(step, prefix_local).min(prompt)
        };
        self.stats.billed_equivalent_tokens += ctx.cost.request(prompt, prefix);
        let cause = if expired {
            WriteCause::AtExpiry
        } else {
            self.cause.unwrap_or(WriteCause::Other)
        };
        self.cause = None;
        self.stats.cache_read_tokens += prefix;
        self.stats.cache_write_tokens[cause as usize] += prompt - prefix;
        self.stats.add_request(prompt);
        if prompt > ctx.trace.window {
            self.stats.over_window += 1;
        } else if self.answered_step != Some(step) {
            self.answered_step = Some(step);
            self.stats.answered += 1;
        }
        self.series.tokens[step] = Some(prompt);
        self.previous = Some((message0.key, messages, model.clone()));
        prompt
    }

    /// Records a request the policy refuses to send (SOBA over hardLimit).
    pub fn unsent(&mut self, step: usize, tokens: u64) {
        self.stats.over_window += 1;
        self.series.tokens[step] = Some(tokens);
    }

    /// Records one summarizer attempt.
    pub fn summarizer(&mut self, ctx: &Ctx<'_>, input: u64, output: u64) {
        self.stats.summarizer_calls += 1;
        self.stats.summarizer_input_tokens += input;
        self.stats.summarizer_output_tokens += output;
        let billed = ctx.cost.summarizer(input, output);
        self.stats.billed_equivalent_tokens += billed;
        self.stats.summarizer_billed += billed;
    }

    /// Records a pruning pass (SOBA hygiene, OpenCode prune).
    pub fn hygiene(&mut self) {
        self.stats.hygiene_passes += 1;
        if self.cause.is_none() {
            self.cause = Some(WriteCause::AfterHygiene);
        }
    }

    /// Records a compaction at `step`.
    pub fn compaction(&mut self, step: usize) {
        self.stats.compactions += 1;
        self.cause = Some(WriteCause::AfterCompaction);
        if self.series.compactions.last() != Some(&step) {
            self.series.compactions.push(step);
        }
    }
}

/// One policy being replayed.
pub(crate) trait Runner {
    /// Called before the entries of `step` are appended, when they start a
    /// new turn (the previous one ended).
    fn turn_end(&mut self, _ctx: &Ctx<'_>, _step: usize, _message0: Message0) {}

    /// Appends one replayed entry (never a `system` message: those are
    /// part of message 0 for every policy).
    fn append(&mut self, ctx: &Ctx<'_>, idx: usize);

    /// Runs the policy's preflight before `step`'s request and sends it
    /// (with any resend).
    fn preflight(&mut self, ctx: &Ctx<'_>, step: usize, message0: Message0);

    /// Returns the input after message 0 as last sent (or refused).
    fn items(&self) -> &[Item];

    /// Returns the recorder.
    fn recorder(&mut self) -> &mut Recorder;

    /// Returns SOBA's hardLimit and autoLimit, for the chart.
    fn limits(&self) -> Option<(u64, u64)> {
        None
    }
}

/// What one trace's replay produced.
pub(crate) struct RunOutput {
    pub recorders: Vec<Recorder>,
    pub soba_limits: Option<(u64, u64)>,
    /// At each of [`Ctx::probe_points`]: the step and every runner's input
    /// after message 0 as sent.
    pub inputs: Vec<(usize, Vec<Vec<Item>>)>,
}

/// Replays every step of a trace through every runner.
pub(crate) fn run(ctx: &Ctx<'_>, runners: &mut [Box<dyn Runner + '_>]) -> RunOutput {
    let trace = ctx.trace;
    let mut message0 = Message0 {
        key: 0,
        local: trace.fixed_local,
    };
    // The full history's item keys, for "differs from none".
    let mut reference: Vec<u64> = Vec::new();
    let mut grading = false;
    let mut appended = 0usize;
    let mut inputs_at = Vec::with_capacity(ctx.probe_points.len());
    let append = |idx: usize,
                  runners: &mut [Box<dyn Runner + '_>],
                  message0: &mut Message0,
                  reference: &mut Vec<u64>| {
        if trace.ignored[idx] {
            return;
        }
        let EntryBody::Message(message) = &trace.entries[idx].body else {
            return;
        };
        if message.message.role == Role::System {
            message0.key += 1;
            message0.local += trace.entry_tokens[idx];
            return;
        }
        reference.push(idx as u64);
        for runner in runners.iter_mut() {
            runner.append(ctx, idx);
        }
    };
    for (step_idx, step) in trace.steps.iter().enumerate() {
        if step_idx > 0 && step.starts_turn {
            for runner in runners.iter_mut() {
                runner.turn_end(ctx, step_idx, message0);
            }
        }
        for idx in appended..step.response.start.max(appended) {
            append(idx, runners, &mut message0, &mut reference);
        }
        appended = appended.max(step.response.start);
        for runner in runners.iter_mut() {
            runner.preflight(ctx, step_idx, message0);
        }
        let same: Vec<bool> = runners
            .iter()
            .map(|runner| {
                let items = runner.items();
                items.len() == reference.len()
                    && items
                        .iter()
                        .zip(&reference)
                        .all(|(item, key)| item.key == *key)
            })
            .collect();
        // A point may repeat on a trace of fewer than five requests.
        for _ in ctx.probe_points.iter().filter(|&&at| at == step_idx) {
            let inputs = runners
                .iter()
                .map(|runner| runner.items().to_vec())
                .collect();
            inputs_at.push((step_idx, inputs));
        }
        grading = grading || same.iter().any(|same| !same);
        if grading {
            for (runner, same) in runners.iter_mut().zip(same) {
                let scores = ctx.index.grade(step_idx, runner.items(), same);
                runner.recorder().stats.add_grade(&scores);
            }
        }
        for idx in appended..step.response.end.max(appended) {
            append(idx, runners, &mut message0, &mut reference);
        }
        appended = appended.max(step.response.end);
    }
    let soba_limits = runners.iter().find_map(|runner| runner.limits());
    RunOutput {
        recorders: runners
            .iter_mut()
            .map(|runner| std::mem::take(runner.recorder()))
            .collect(),
        soba_limits,
        inputs: inputs_at,
    }
}

#[cfg(test)]
mod tests {
    use soba_core::config::CompactionConfig;

    use super::super::policy::{PolicyKind, PolicySpec};
    use super::super::testing::{Script, none_sizes, with_run};

    fn turns(script: &mut Script) {
        for turn in 0..3 {
            script.user(&format!("u{turn}"), 500);
            script.read("src/a.rs", 1_000);
            script.read("src/b.rs", 1_000);
            script.answer("ok");
        }
    }

    fn billed(script: &Script, policy: PolicyKind) -> (f64, Vec<u64>) {
        let trace = script.trace(100_000, 10_000);
        let sizes = none_sizes(&trace);
        with_run(
            &trace,
            &[PolicySpec::new(policy)],
            &CompactionConfig::default(),
            |_, _, out| {
                (
                    out.recorders[0].stats.billed_equivalent_tokens,
                    sizes.clone(),
                )
            },
        )
    }

    #[test]
    fn an_append_only_history_reuses_the_whole_previous_request() {
        let mut script = Script::new();
        script.step_ms = 1_000;
        turns(&mut script);
        let (billed, sizes) = billed(&script, PolicyKind::None);
        // Anthropic: the previous request is read from the cache (× 0.1),
        // the rest written (× 1.25); the first request has no prefix.
        let mut expected = sizes[0] as f64 * 1.25;
        for pair in sizes.windows(2) {
            expected += pair[0] as f64 * 0.1 + (pair[1] - pair[0]) as f64 * 1.25;
        }
        assert!((billed - expected).abs() < 1e-6, "{billed} != {expected}");
    }

    #[test]
    fn a_gap_beyond_the_ttl_expires_the_cache_for_every_request() {
        let mut script = Script::new();
        script.step_ms = 301_000;
        turns(&mut script);
        let (billed, sizes) = billed(&script, PolicyKind::None);
        let expected: f64 = sizes.iter().map(|&size| size as f64 * 1.25).sum();
        assert!((billed - expected).abs() < 1e-6, "{billed} != {expected}");
    }

    #[test]
    fn the_cache_lifetime_runs_from_request_to_request() {
        // Responses 200 s apart never expire the cache by their own times,
        // but the request of step 2 (its tool result, at 390 s) comes 380 s
        // after step 1's (at 10 s): a long generation in between.
        let mut script = Script::new();
        script.step_ms = 200_000;
        script.user("task", 500);
        let first = script.read("src/a.rs", 1_000);
        let second = script.read("src/b.rs", 1_000);
        script.answer("ok");
        script.stamp(first, 10_000);
        script.stamp(second, 390_000);
        let (billed, sizes) = billed(&script, PolicyKind::None);
        let expected = sizes[0] as f64 * 1.25
            + sizes[0] as f64 * 0.1
            + (sizes[1] - sizes[0]) as f64 * 1.25
            + sizes[2] as f64 * 1.25;
        assert!((billed - expected).abs() < 1e-6, "{billed} != {expected}");
    }

    #[test]
    fn without_timestamps_the_cache_never_expires() {
        let mut script = Script::new();
        turns(&mut script);
        let (untimed, _) = billed(&script, PolicyKind::None);
        let mut timed = Script::new();
        timed.step_ms = 1_000;
        turns(&mut timed);
        let (within_ttl, _) = billed(&timed, PolicyKind::None);
        assert!((untimed - within_ttl).abs() < 1e-6);
    }

    #[test]
    fn a_compaction_breaks_the_prefix_after_message_zero() {
        let mut script = Script::new();
        script.step_ms = 1_000;
        script.user("task", 1_000);
        for i in 0..30 {
            script.read(&format!("src/f{i}.rs"), 2_000);
        }
        script.answer("done");
        let trace = script.trace(100_000, 10_000);
        let sizes = none_sizes(&trace);
        with_run(
            &trace,
            &[PolicySpec::parse("codex@40000").unwrap()],
            &CompactionConfig::default(),
            |_, _, out| {
                let recorder = &out.recorders[0];
                let at = recorder.series.compactions[0];
                let tokens: Vec<u64> = recorder.series.tokens.iter().map(|t| t.unwrap()).collect();
                // Codex keeps the task message first: the prefix at the
                // compaction is message 0 (4 tokens) plus the task (1,004).
                let mut expected = tokens[0] as f64 * 1.25;
                for step in 1..tokens.len() {
                    let prefix = if step == at {
                        4 + 1_004
                    } else {
                        tokens[step - 1]
                    };
                    expected += prefix as f64 * 0.1 + (tokens[step] - prefix) as f64 * 1.25;
                }
                let summarizer = 0.33
                    * (recorder.stats.summarizer_input_tokens as f64
                        + 5.0 * recorder.stats.summarizer_output_tokens as f64);
                let billed = recorder.stats.billed_equivalent_tokens;
                assert!((billed - expected - summarizer).abs() < 1e-6, "{billed}");
                assert_eq!(&tokens[..at], &sizes[..at]);
            },
        );
    }
}
