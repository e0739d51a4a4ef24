//! One imported transcript prepared for replay (SPEC §15.1): the entries
//! every policy replays with their local token counts, the recorded
//! inferences as steps, the resolved window and maximum output, and the
//! per-trace, per-model calibration `reported = factor × local + overhead`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;
use soba_core::entry::StoredTokens;
use soba_core::input::{InputConfig, InputSetup, LiveInput};
use soba_core::tokens::{self, BpeCounter, ByteCounter, Counted, TokenCounter};
use soba_core::{Encoding, Entry, EntryBody, MessageOrigin, TokenCount, Usage};
use soba_provider::registry::{ModelRegistry, canonical_name};
use soba_store::import::{Format, ImportedSession};

use super::cost::CacheMode;

/// The text that stands for a system prompt a transcript does not record,
/// so the fitted overhead has a place in every policy's message 0.
pub const UNRECORDED_SYSTEM_PROMPT: &str =
    "[system prompt and tool schemas: not recorded in the transcript]";

/// A token counter that gives one exact text (the system prompt) a fixed
/// count, so the fitted overhead is part of the fixed input SOBA's planner
/// sees, and counts everything else with the model's BPE.
#[derive(Debug, Clone)]
pub struct ReplayCounter {
    inner: BpeCounter,
    counting: Counting,
    fixed: Option<(String, TokenCount)>,
}

/// How a replay counts tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Counting {
    /// The model's BPE vocabulary (every real replay).
    #[default]
    Bpe,
    /// `ceil(bytes / 4)`: exact, predictable figures for synthetic tests.
    Bytes,
}

impl ReplayCounter {
    /// Returns a plain BPE counter for `encoding`.
    pub fn new(encoding: Encoding) -> Self {
        Self::with_counting(encoding, Counting::Bpe)
    }

    /// Returns a counter for `encoding` counting as `counting` says.
    pub fn with_counting(encoding: Encoding, counting: Counting) -> Self {
        ReplayCounter {
            inner: BpeCounter::new(encoding),
            counting,
            fixed: None,
        }
    }

    /// Returns this counter with `text` counted as `n_tokens`.
    pub fn with_fixed(mut self, text: &str, n_tokens: TokenCount) -> Self {
        self.fixed = Some((text.to_owned(), n_tokens));
        self
    }
}

impl TokenCounter for ReplayCounter {
    fn encoding(&self) -> Encoding {
        self.inner.encoding()
    }

    fn count_text(&self, text: &str) -> Counted {
        match &self.fixed {
            Some((fixed, n)) if fixed.len() == text.len() && fixed == text => Counted {
                n: *n,
                estimated: false,
            },
            _ if self.counting == Counting::Bytes => ByteCounter.count_text(text),
            _ => self.inner.count_text(text),
        }
    }
}

/// Where one model's calibration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitSource {
    /// Least squares of factor and overhead (overhead ≥ 0).
    Fit,
    /// Least squares of the factor alone: the trace records its system
    /// prompt and tools, the unconstrained overhead came out negative, or
    /// there was one sample.
    FactorOnly,
    /// No usage: the registry's seed factor and no overhead.
    Seed,
}

impl FitSource {
    /// Returns the name written in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FitSource::Fit => "fit",
            FitSource::FactorOnly => "factor-only",
            FitSource::Seed => "seed",
        }
    }
}

/// The calibration of one model in one trace, held fixed for the replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCalibration {
    /// The canonical model name.
    pub model: String,
    /// Local counts are multiplied by this.
    pub factor: f64,
    /// Tokens the transcript does not record (system prompt, tool schemas).
    pub overhead: u64,
    /// Requests the fit used.
    pub samples: usize,
    /// How the figures were obtained.
    pub source: FitSource,
    /// The factor the fit gave, when it lay outside [`FACTOR_RANGE`] and
    /// `factor` was held at the range's nearest end.
    pub unbounded_factor: Option<f64>,
}

/// The calibration factors a tokenizer can plausibly be off by: real
/// models' tokenizers count 0.8× to 1.4× of o200k's. A fit outside it
/// means the recorded usage is not of the recorded messages (usage summed
/// over sub-agents, a synthetic file), and replaying at it would make every
/// policy's input absurd.
pub const FACTOR_RANGE: (f64, f64) = (0.25, 4.0);

impl ModelCalibration {
    /// Returns the calibrated size of a request whose local count (without
    /// the overhead) is `local`.
    pub fn apply(&self, local: u64) -> u64 {
        (local as f64 * self.factor).ceil() as u64 + self.overhead
    }
}

/// One recorded inference as replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Entries appended before the request (user messages, tool results).
    pub pending: Range<usize>,
    /// The entries the response produced.
    pub response: Range<usize>,
    /// The recorded usage of the request, if any.
    pub usage: Option<Usage>,
    /// The request time in Unix milliseconds, when recorded: the newest
    /// entry before the response (the tool result or user message that
    /// prompted it), else the response's own time. The cache lifetime runs
    /// from request to request (a long generation does not age it).
    pub time_ms: Option<i64>,
    /// The canonical model name of the request.
    pub model: String,
    /// Whether a real user message is among the pending entries.
    pub starts_turn: bool,
}

/// Why a trace cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The model is unknown to the registry, the trace records no window and
    /// no `--window` was given. Passing `--window N` fixes it.
    #[error("unknown context window for model {model}: pass --window N")]
    UnknownWindow {
        /// The model as recorded (or `unknown`).
        model: String,
    },
    /// The transcript holds no recorded inference. Nothing can fix it.
    #[error("no recorded inference to replay")]
    NoInference,
    /// SOBA's limits are impossible for this window (SPEC §4.3): lower
    /// `--max-output` or fix the `--set` values named.
    #[error("{detail}")]
    Budget {
        /// The budget error.
        detail: String,
    },
}

/// Settings of the preparation that come from the command line.
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// `--window`.
    pub window: Option<u64>,
    /// `--max-output`.
    pub max_output: Option<u64>,
    /// `--cache`; `None` picks by model family.
    pub cache: Option<CacheMode>,
    /// `compaction.imageTokens`.
    pub image_tokens: TokenCount,
    /// How tokens are counted.
    pub counting: Counting,
    /// The model registry, with any `--set models.<id>.*` overrides.
    pub registry: ModelRegistry,
}

/// A transcript ready to replay.
#[derive(Debug)]
pub struct Trace {
    /// The source file (and instance, for multi-session files).
    pub name: String,
    /// The source format.
    pub format: Format,
    /// The workspace root the session ran in, when recorded.
    pub cwd: Option<String>,
    /// The primary model (most requests), canonical, or `unknown`.
    pub model: String,
    /// The primary model as the transcript spells it (`gpt-5.3-codex`), for
    /// reports.
    pub model_shown: String,
    /// The context window.
    pub window: u64,
    /// Set when no window was known (command line, trace, registry) and
    /// the window is the lower bound the transcript implies: the one-line
    /// note the report shows.
    pub window_note: Option<String>,
    /// The maximum output of every request.
    pub max_output: u64,
    /// The cache pricing used.
    pub cache: CacheMode,
    /// Entries, with their local counts stored on message entries.
    pub entries: Vec<Entry>,
    /// The local count of each entry (0 for non-message entries).
    pub entry_tokens: Vec<u64>,
    /// Entries no policy replays: imported capsules and the foreign summary
    /// messages that follow them.
    pub ignored: Vec<bool>,
    /// The recorded inferences.
    pub steps: Vec<Step>,
    /// Entry indexes of recorded compactions (imported capsules).
    pub compaction_entries: Vec<usize>,
    /// The first step at or after a recorded compaction (an imported
    /// capsule, or a reported prompt below half the previous one).
    pub first_compaction_step: Option<usize>,
    /// Calibration per canonical model.
    pub calibration: BTreeMap<String, ModelCalibration>,
    /// Whether the trace records its system prompt and tool schemas.
    pub records_fixed: bool,
    /// The counter every policy uses.
    pub counter: Arc<ReplayCounter>,
    /// The system prompt text of message 0 (recorded, or the placeholder).
    pub system_prompt: String,
    /// Tool schemas as recorded.
    pub tool_schemas: Vec<Value>,
    /// Local count of message 0 without the overhead: system prompt and
    /// tool schemas (system-role entries are added as they appear).
    pub fixed_local: u64,
    /// The primary model's overhead in local tokens, folded into the system
    /// prompt's count for SOBA's planner.
    pub overhead_local: u64,
}

/// Returns the largest recorded request plus its output, 0 when no
/// request records usage: the smallest window the recorded usage proves.
fn recorded_peak(steps: &[Step]) -> u64 {
    steps
        .iter()
        .filter_map(|step| step.usage)
        .map(|usage| usage.prompt().saturating_add(usage.output))
        .max()
        .unwrap_or(0)
}

/// Returns whether a message entry is a foreign summary (it stands for a
/// recorded compaction, which replay ignores): a summary message, or a
/// message a compaction carried forward (Codex's replacement history, of
/// any role, repeats what the history before it already holds).
fn is_summary(entry: &Entry) -> bool {
    match &entry.body {
        EntryBody::Message(message) => message.message.origin == MessageOrigin::Summary,
        EntryBody::Capsule(_) => true,
        _ => false,
    }
}

/// Returns whether a model name is a Claude model.
pub fn is_claude(model: &str) -> bool {
    canonical_name(model).contains("claude")
}

/// Returns whether a model name is an OpenAI model.
pub fn is_openai(model: &str) -> bool {
    let name = canonical_name(model);
    name.starts_with("gpt-")
        || name.starts_with("o1")
        || name.starts_with("o3")
        || name.starts_with("o4")
        || name.starts_with("codex")
        || model.to_ascii_lowercase().starts_with("openai/")
}

/// Returns the time of an RFC 3339 timestamp in Unix milliseconds.
fn time_ms(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .map(|ts| ts.as_millisecond())
}

impl Trace {
    /// Prepares an imported session: resolves the window and maximum
    /// output, counts every message once, builds the steps and fits the
    /// calibration.
    pub fn prepare(
        name: String,
        session: ImportedSession,
        options: &TraceOptions,
    ) -> Result<Trace, TraceError> {
        if session.inferences.is_empty() {
            return Err(TraceError::NoInference);
        }
        let registry = &options.registry;
        let recorded_model = session
            .model
            .clone()
            .unwrap_or_else(|| "unknown".to_owned());
        // The primary model: the one answering most requests, counted by
        // canonical name and shown as the transcript first spelled it
        // (`gpt-5.3-codex`, not `gpt-5-3-codex`).
        let mut per_model: BTreeMap<String, (usize, &str)> = BTreeMap::new();
        for inference in &session.inferences {
            let model = inference.model.as_deref().unwrap_or(&recorded_model);
            per_model
                .entry(canonical_name(model))
                .or_insert((0, model))
                .0 += 1;
        }
        let (model, model_shown) = per_model
            .iter()
            .max_by_key(|(name, (n, _))| (*n, std::cmp::Reverse((*name).clone())))
            .map(|(name, (_, spelled))| (name.clone(), (*spelled).to_owned()))
            .unwrap_or_else(|| (canonical_name(&recorded_model), recorded_model.clone()));
        let resolved = registry
            .resolve(&recorded_model)
            .ok()
            .or_else(|| registry.resolve(&model).ok());
        // Unknown when neither the command line, the trace nor the registry
        // knows it: inferred from the transcript below.
        let known_window = match (options.window, session.context_window, &resolved) {
            (Some(window), _, _) => Some(window),
            (None, Some(window), _) => Some(window),
            (None, None, Some(info)) => Some(info.context_window),
            (None, None, None) => None,
        };
        let encoding = resolved
            .as_ref()
            .map_or(Encoding::O200kBase, |info| info.tokenizer);
        let cache = options.cache.unwrap_or(if is_claude(&recorded_model) {
            CacheMode::Anthropic
        } else if is_openai(&recorded_model) {
            CacheMode::OpenAi
        } else {
            CacheMode::None
        });

        let plain = ReplayCounter::with_counting(encoding, options.counting);
        let records_fixed = session.system_prompt.is_some() && !session.tool_schemas.is_empty();
        let recorded_prompt = session
            .system_prompt
            .clone()
            .filter(|_| !session.system_prompt_in_entries);
        let system_prompt = recorded_prompt
            .clone()
            .unwrap_or_else(|| UNRECORDED_SYSTEM_PROMPT.to_owned());
        let tool_schemas = session.tool_schemas.clone();
        // The placeholder of an unrecorded prompt counts as an empty message
        // here; the fitted overhead is added to its count below.
        let prompt_text_local = recorded_prompt
            .as_deref()
            .map_or(0, |prompt| plain.count_text(prompt).n.get());
        let fixed_local = prompt_text_local
            + tokens::MESSAGE_OVERHEAD.get()
            + tokens::count_tool_schemas(&plain, &tool_schemas).n.get();

        // Count every message once; the counts are stored on the entries so
        // SOBA's model-input rebuild never re-tokenizes them.
        let mut entries = session.entries;
        let mut entry_tokens = Vec::with_capacity(entries.len());
        for entry in &mut entries {
            let n = match &mut entry.body {
                EntryBody::Message(message) => {
                    let counted =
                        tokens::count_message(&plain, &message.message, options.image_tokens);
                    message.tokens = Some(StoredTokens {
                        encoding,
                        n: counted.n,
                        estimated: counted.estimated,
                    });
                    counted.n.get()
                }
                _ => 0,
            };
            entry_tokens.push(n);
        }
        let ignored: Vec<bool> = entries.iter().map(is_summary).collect();
        let compaction_entries: Vec<usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| matches!(entry.body, EntryBody::Capsule(_)))
            .map(|(idx, _)| idx)
            .collect();

        let mut steps = Vec::with_capacity(session.inferences.len());
        let mut cursor = 0usize;
        for inference in &session.inferences {
            let first = inference.first_entry.min(entries.len());
            let last = (inference.last_entry + 1).min(entries.len()).max(first);
            let pending = cursor.min(first)..first;
            let starts_turn = entries[pending.clone()]
                .iter()
                .any(|entry| match &entry.body {
                    EntryBody::Message(message) => message.message.is_real_user(),
                    _ => false,
                });
            let model = canonical_name(inference.model.as_deref().unwrap_or(&recorded_model));
            steps.push(Step {
                pending,
                response: first..last,
                usage: inference.usage,
                time_ms: entries[..first]
                    .last()
                    .and_then(|entry| time_ms(&entry.timestamp))
                    .or_else(|| inference.timestamp.as_deref().and_then(time_ms)),
                model,
                starts_turn,
            });
            cursor = cursor.max(last);
        }

        // With no window known, the largest recorded request plus its
        // output; with no usage recorded either, the same from the local
        // counts, once the calibration is fitted (below).
        let window = known_window.unwrap_or_else(|| recorded_peak(&steps));
        let max_output_for = |window: u64| match (options.max_output, &resolved) {
            (Some(max_output), _) => max_output,
            (None, Some(info)) => info.max_output_tokens,
            (None, None) => 32_000.min(window / 4),
        };
        let max_output = max_output_for(window);

        // The first recorded compaction: an imported capsule before the
        // request, or a reported prompt below half the previous one.
        let mut first_compaction_step = None;
        let mut previous_prompt: Option<u64> = None;
        for (idx, step) in steps.iter().enumerate() {
            let capsule_before = compaction_entries
                .first()
                .is_some_and(|&capsule| capsule < step.response.start);
            let prompt = step.usage.map(|usage| usage.prompt()).filter(|&p| p > 0);
            let dropped =
                matches!((previous_prompt, prompt), (Some(before), Some(now)) if now * 2 < before);
            if capsule_before || dropped {
                first_compaction_step = Some(idx);
                break;
            }
            if prompt.is_some() {
                previous_prompt = prompt;
            }
        }

        let mut trace = Trace {
            name,
            format: session.format,
            cwd: session.cwd,
            model,
            model_shown,
            window,
            window_note: None,
            max_output,
            cache,
            entries,
            entry_tokens,
            ignored,
            steps,
            compaction_entries,
            first_compaction_step,
            calibration: BTreeMap::new(),
            records_fixed,
            counter: Arc::new(plain.clone()),
            system_prompt,
            tool_schemas,
            fixed_local,
            overhead_local: 0,
        };
        trace.calibration = trace.fit(registry);
        if known_window.is_none() {
            if trace.window == 0 {
                trace.window = trace.local_peak();
                trace.max_output = max_output_for(trace.window);
            }
            if trace.window == 0 {
                return Err(TraceError::UnknownWindow {
                    model: recorded_model,
                });
            }
            // A named model the table lacks is likely newer than the table:
            // say so, and how to refresh it (issue 34).
            let newer = (!recorded_model.is_empty() && recorded_model != "unknown")
                .then(soba_provider::catalog::catalog)
                .filter(|table| table.lookup(&recorded_model).is_none())
                .map(|table| format!("; {}", table.missing_note(&recorded_model)))
                .unwrap_or_default();
            trace.window_note = Some(format!(
                "the context window of {recorded_model} is unknown: replayed at {}, the largest recorded request plus its output (a lower bound; pass --window N or set models.\"{recorded_model}\".contextWindow){newer}",
                soba_core::tokens::group_thousands(trace.window)
            ));
        }
        let primary = trace.primary_calibration();
        trace.overhead_local = (primary.overhead as f64 / primary.factor).round() as u64;
        let prompt_with_overhead = prompt_text_local + trace.overhead_local;
        trace.counter =
            Arc::new(plain.with_fixed(&trace.system_prompt, TokenCount::new(prompt_with_overhead)));
        Ok(trace)
    }

    /// Returns the largest request plus its response in effective tokens
    /// (the local counts through the primary model's fitted factor and
    /// overhead): the smallest window a transcript without usage proves.
    fn local_peak(&self) -> u64 {
        let calibration = self.primary_calibration();
        let requests = self.full_history_local();
        self.steps
            .iter()
            .zip(requests)
            .map(|(step, request)| {
                let response: u64 = (step.response.start..step.response.end)
                    .filter(|&idx| !self.ignored[idx])
                    .map(|idx| self.entry_tokens[idx])
                    .sum();
                let local = request.saturating_add(response) as f64;
                (local * calibration.factor).ceil() as u64 + calibration.overhead
            })
            .max()
            .unwrap_or(0)
    }

    /// Returns the local count of the `none` policy's request at each step
    /// (message 0 without overhead plus every replayed entry before it).
    pub fn full_history_local(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.steps.len());
        let mut total = self.fixed_local;
        let mut appended = 0usize;
        for step in &self.steps {
            for idx in appended..step.response.start {
                if !self.ignored[idx] {
                    total += self.entry_tokens[idx];
                }
            }
            appended = appended.max(step.response.start);
            out.push(total);
            for idx in appended..step.response.end {
                if !self.ignored[idx] {
                    total += self.entry_tokens[idx];
                }
            }
            appended = appended.max(step.response.end);
        }
        out
    }

    /// Fits `reported = factor × local + overhead` per model over the
    /// requests before the first recorded compaction (SPEC §15.1).
    fn fit(&self, registry: &ModelRegistry) -> BTreeMap<String, ModelCalibration> {
        let locals = self.full_history_local();
        let end = self.first_compaction_step.unwrap_or(self.steps.len());
        let mut samples: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut models: Vec<String> = self.steps.iter().map(|step| step.model.clone()).collect();
        models.push(self.model.clone());
        for (step, &local) in self.steps[..end].iter().zip(&locals) {
            if let Some(prompt) = step.usage.map(|usage| usage.prompt()).filter(|&p| p > 0)
                && local > 0
            {
                samples
                    .entry(step.model.clone())
                    .or_default()
                    .push((local as f64, prompt as f64));
            }
        }
        let mut out = BTreeMap::new();
        for model in models {
            if out.contains_key(&model) {
                continue;
            }
            let points = samples.get(&model).map(Vec::as_slice).unwrap_or_default();
            let calibration = fit_points(&model, points, self.records_fixed, registry);
            out.insert(model, calibration);
        }
        out
    }

    /// Returns the primary model's calibration.
    pub fn primary_calibration(&self) -> &ModelCalibration {
        self.calibration
            .get(&self.model)
            .or_else(|| self.calibration.values().next())
            .expect("fit inserts the primary model")
    }

    /// Returns the calibration of a step's model.
    pub fn step_calibration(&self, step: usize) -> &ModelCalibration {
        self.steps
            .get(step)
            .and_then(|step| self.calibration.get(&step.model))
            .unwrap_or_else(|| self.primary_calibration())
    }

    /// Returns the input setup every policy shares: the system prompt (with
    /// the overhead folded into its count) and the tool schemas.
    pub fn input_setup(&self, config: InputConfig) -> InputSetup {
        InputSetup::new(self.counter.clone(), config)
            .with_system_prompt(self.system_prompt.clone())
            .with_tool_schemas(self.tool_schemas.clone())
    }

    /// Returns the local count of message 0 as SOBA's rebuild counts it,
    /// overhead included (a check that the counter folds it in).
    pub fn fixed_local_with_overhead(&self) -> u64 {
        let setup = self.input_setup(InputConfig {
            max_tool_result_tokens: TokenCount::new(u64::MAX),
            image_tokens: TokenCount::ZERO,
            protected_tools: Vec::new(),
        });
        LiveInput::new(setup).fixed_tokens().get()
    }
}

/// Least squares over `(local, reported)` points, the factor held within
/// [`FACTOR_RANGE`].
fn fit_points(
    model: &str,
    points: &[(f64, f64)],
    factor_only: bool,
    registry: &ModelRegistry,
) -> ModelCalibration {
    let mut fitted = fit_unbounded(model, points, factor_only, registry);
    let (low, high) = FACTOR_RANGE;
    if !(low..=high).contains(&fitted.factor) {
        fitted.unbounded_factor = Some(fitted.factor);
        fitted.factor = fitted.factor.clamp(low, high);
    }
    fitted
}

fn fit_unbounded(
    model: &str,
    points: &[(f64, f64)],
    factor_only: bool,
    registry: &ModelRegistry,
) -> ModelCalibration {
    let seed = registry
        .resolve(model)
        .map(|info| info.calibration_seed)
        .unwrap_or(if is_claude(model) {
            1.25
        } else if is_openai(model) {
            1.0
        } else {
            1.1
        });
    let through_origin = |points: &[(f64, f64)]| {
        let sxy: f64 = points.iter().map(|(x, y)| x * y).sum();
        let sxx: f64 = points.iter().map(|(x, _)| x * x).sum();
        if sxx > 0.0 { sxy / sxx } else { seed }
    };
    let n = points.len();
    if n == 0 {
        return ModelCalibration {
            model: model.to_owned(),
            factor: seed,
            overhead: 0,
            samples: 0,
            source: FitSource::Seed,
            unbounded_factor: None,
        };
    }
    let factor_only_fit = || ModelCalibration {
        model: model.to_owned(),
        factor: through_origin(points),
        overhead: 0,
        samples: n,
        source: FitSource::FactorOnly,
        unbounded_factor: None,
    };
    if factor_only || n < 2 {
        return factor_only_fit();
    }
    let mean_x = points.iter().map(|(x, _)| x).sum::<f64>() / n as f64;
    let mean_y = points.iter().map(|(_, y)| y).sum::<f64>() / n as f64;
    let sxx: f64 = points.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    let sxy: f64 = points
        .iter()
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    if sxx <= 0.0 {
        return factor_only_fit();
    }
    let factor = sxy / sxx;
    let overhead = mean_y - factor * mean_x;
    if overhead < 0.0 || factor <= 0.0 {
        return factor_only_fit();
    }
    ModelCalibration {
        model: model.to_owned(),
        factor,
        overhead: overhead.round() as u64,
        samples: n,
        source: FitSource::Fit,
        unbounded_factor: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_fit(points: &[(f64, f64)], factor_only: bool, expected: (f64, u64, FitSource)) {
        let fitted = fit_points("gpt-5", points, factor_only, &ModelRegistry::new());
        assert!(
            (fitted.factor - expected.0).abs() < 1e-9,
            "factor {} != {}",
            fitted.factor,
            expected.0
        );
        assert_eq!(fitted.overhead, expected.1);
        assert_eq!(fitted.source, expected.2);
    }

    /// Attack finding: usage that is not of the messages (475× their local
    /// count) cannot make the replay's inputs absurd; the fit is kept to
    /// say so.
    #[test]
    fn an_implausible_factor_is_held_within_the_range() {
        let fitted = fit_points("gpt-5", &[(10.0, 4_750.0)], false, &ModelRegistry::new());
        assert_eq!(fitted.factor, FACTOR_RANGE.1);
        assert_eq!(fitted.unbounded_factor, Some(475.0));
        let fitted = fit_points("gpt-5", &[(1_000.0, 1.0)], false, &ModelRegistry::new());
        assert_eq!(fitted.factor, FACTOR_RANGE.0);
        let fitted = fit_points("gpt-5", &[(1_000.0, 1_200.0)], false, &ModelRegistry::new());
        assert_eq!(fitted.unbounded_factor, None);
    }

    #[test]
    fn fits_factor_and_overhead() {
        // reported = 1.2 × local + 5,000 exactly.
        let points = [
            (10_000.0, 17_000.0),
            (20_000.0, 29_000.0),
            (50_000.0, 65_000.0),
        ];
        check_fit(&points, false, (1.2, 5_000, FitSource::Fit));
    }

    #[test]
    fn negative_overhead_falls_back_to_the_factor_alone() {
        // reported = 2 × local − 1,000: the overhead must not be negative.
        let points = [(1_000.0, 1_000.0), (2_000.0, 3_000.0)];
        let sxy = 1_000.0 * 1_000.0 + 2_000.0 * 3_000.0;
        let sxx = 1_000.0f64.powi(2) + 2_000.0f64.powi(2);
        check_fit(&points, false, (sxy / sxx, 0, FitSource::FactorOnly));
    }

    #[test]
    fn recorded_fixed_part_fits_the_factor_alone() {
        let points = [(10_000.0, 11_000.0), (20_000.0, 22_000.0)];
        check_fit(&points, true, (1.1, 0, FitSource::FactorOnly));
    }

    #[test]
    fn no_usage_takes_the_registry_seed() {
        check_fit(&[], false, (1.0, 0, FitSource::Seed));
        let claude = fit_points("claude-sonnet-4-5", &[], false, &ModelRegistry::new());
        assert_eq!(claude.factor, 1.25);
    }

    #[test]
    fn the_counter_gives_the_system_prompt_its_fixed_count() {
        let counter = ReplayCounter::new(Encoding::O200kBase)
            .with_fixed(UNRECORDED_SYSTEM_PROMPT, TokenCount::new(12_345));
        assert_eq!(counter.count_text(UNRECORDED_SYSTEM_PROMPT).n.get(), 12_345);
        assert_eq!(counter.count_text("hello world").n.get(), 2);
    }
}
