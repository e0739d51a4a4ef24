//! The replay's results (SPEC §15.5): per-policy figures per trace and in
//! total, the real-summary comparison, the aligned table printed on stdout
//! and the `--json` document.

use serde_json::{Map, Value, json};
use soba_core::tokens::group_thousands;
use soba_provider::registry::canonical_name;

use super::cost::CacheMode;
use super::fidelity::{self, FidelityCounts};
use super::price::{Bill, BillLine};
use super::probe::{PROBE_NAMES, ProbeScores};
use super::trace::ModelCalibration;

/// One policy's figures over one trace, or summed over several.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyStats {
    /// The policy's name (`soba`, `codex`, `goose@80000`, …).
    pub name: String,
    /// Requests sent, resends included.
    pub requests: u64,
    /// Requests over the window (SOBA: requests it could not send).
    pub over_window: u64,
    /// Compactions made.
    pub compactions: u64,
    /// The largest request.
    pub peak_input_tokens: u64,
    /// The sum of every request's size (for the mean).
    pub input_tokens_sum: u64,
    /// Summarizer input tokens over every attempt.
    pub summarizer_input_tokens: u64,
    /// Summarizer output tokens over every attempt.
    pub summarizer_output_tokens: u64,
    /// Billed-equivalent tokens: requests plus summarizer attempts.
    pub billed_equivalent_tokens: f64,
    /// What the policy's requests would have cost in US dollars (see
    /// [`crate::price`]); over several traces, the sum over those priced.
    pub dollars: Option<f64>,
    /// Extra requests after an over-window one.
    pub resends: u64,
    /// Summarizer attempts that reached generation.
    pub summarizer_calls: u64,
    /// Soft capsules the post-generation ROI check skipped.
    pub rejected_capsules: u64,
    /// Free pruning passes applied (SOBA hygiene, OpenCode prune).
    pub hygiene_passes: u64,
    /// Prompt tokens read from the cache (the common prefix with the
    /// previous request), over every request.
    pub cache_read_tokens: u64,
    /// Prompt tokens not read from the cache (written to it, or uncached),
    /// by why the prefix broke: see [`WriteCause`].
    pub cache_write_tokens: [u64; 4],
    /// Billed-equivalent tokens of the summarizer attempts alone.
    pub summarizer_billed: f64,
    /// Requests graded by the probes.
    pub graded: u64,
    /// The sum of graded requests' scores.
    pub recall_sum: f64,
    /// The lowest graded request's score.
    pub recall_min: Option<f64>,
    /// Per probe: the sum of applicable scores and their number.
    pub probe_sums: [f64; 5],
    /// Per probe: how many graded requests it applied to.
    pub probe_counts: [u64; 5],
    /// What the input kept of the history at the five probe points.
    pub fidelity: FidelityCounts,
    /// Recorded requests replayed (steps).
    pub steps: u64,
    /// Steps at which the policy sent a request within the window; the
    /// others failed (over the window, or not sent at all).
    pub answered: u64,
    /// Traces at which it sent no request within the window at all.
    pub failed_traces: u64,
}

impl PolicyStats {
    /// Returns empty figures for a policy.
    pub fn new(name: impl Into<String>) -> Self {
        PolicyStats {
            name: name.into(),
            ..PolicyStats::default()
        }
    }

    /// Adds one request of `tokens`.
    pub fn add_request(&mut self, tokens: u64) {
        self.requests += 1;
        self.input_tokens_sum += tokens;
        self.peak_input_tokens = self.peak_input_tokens.max(tokens);
    }

    /// Adds one graded request.
    pub fn add_grade(&mut self, scores: &ProbeScores) {
        let mean = scores.mean();
        self.graded += 1;
        self.recall_sum += mean;
        self.recall_min = Some(self.recall_min.map_or(mean, |min| min.min(mean)));
        for (idx, value) in scores.values().into_iter().enumerate() {
            if let Some(value) = value {
                self.probe_sums[idx] += value;
                self.probe_counts[idx] += 1;
            }
        }
    }

    /// Adds another trace's figures of the same policy.
    pub fn merge(&mut self, other: &PolicyStats) {
        self.requests += other.requests;
        self.over_window += other.over_window;
        self.compactions += other.compactions;
        self.peak_input_tokens = self.peak_input_tokens.max(other.peak_input_tokens);
        self.input_tokens_sum += other.input_tokens_sum;
        self.summarizer_input_tokens += other.summarizer_input_tokens;
        self.summarizer_output_tokens += other.summarizer_output_tokens;
        self.billed_equivalent_tokens += other.billed_equivalent_tokens;
        self.dollars = sum_priced(self.dollars, other.dollars);
        self.resends += other.resends;
        self.summarizer_calls += other.summarizer_calls;
        self.rejected_capsules += other.rejected_capsules;
        self.hygiene_passes += other.hygiene_passes;
        self.cache_read_tokens += other.cache_read_tokens;
        for (total, more) in self
            .cache_write_tokens
            .iter_mut()
            .zip(other.cache_write_tokens)
        {
            *total += more;
        }
        self.summarizer_billed += other.summarizer_billed;
        self.graded += other.graded;
        self.recall_sum += other.recall_sum;
        self.recall_min = match (self.recall_min, other.recall_min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for idx in 0..5 {
            self.probe_sums[idx] += other.probe_sums[idx];
            self.probe_counts[idx] += other.probe_counts[idx];
        }
        self.fidelity.merge(&other.fidelity);
        self.steps += other.steps;
        self.answered += other.answered;
        self.failed_traces += other.failed_traces;
    }

    /// Returns the mean request size.
    pub fn mean_input_tokens(&self) -> u64 {
        if self.requests == 0 {
            0
        } else {
            (self.input_tokens_sum as f64 / self.requests as f64).round() as u64
        }
    }

    /// Returns the mean probe recall over graded requests.
    pub fn recall_mean(&self) -> Option<f64> {
        (self.graded > 0).then(|| self.recall_sum / self.graded as f64)
    }

    /// Returns the steps at which the policy sent no request within the
    /// window.
    pub fn failed_steps(&self) -> u64 {
        self.steps.saturating_sub(self.answered)
    }

    /// Returns whether the policy failed outright: it sent no request
    /// within the window at any step. Its figures are not a cost: it is
    /// never ranked, compared or used as a denominator.
    pub fn is_failed(&self) -> bool {
        self.steps > 0 && self.answered == 0
    }

    /// Returns `ok`, `partial` (some steps failed) or `failed`.
    pub fn status(&self) -> &'static str {
        if self.is_failed() {
            "failed"
        } else if self.failed_steps() > 0 {
            "partial"
        } else {
            "ok"
        }
    }

    /// Returns the `failed` cell: `0`, or failed steps over steps.
    pub fn failed_cell(&self) -> String {
        match self.failed_steps() {
            0 => "0".to_owned(),
            n => format!("{}/{}", group_thousands(n), group_thousands(self.steps)),
        }
    }

    /// Returns one probe's mean over the graded requests it applied to.
    pub fn probe_mean(&self, idx: usize) -> Option<f64> {
        (self.probe_counts[idx] > 0).then(|| self.probe_sums[idx] / self.probe_counts[idx] as f64)
    }

    /// Returns the figures as the `--json` policy object.
    pub fn to_json(&self) -> Value {
        let mut probes = Map::new();
        for (idx, name) in PROBE_NAMES.iter().enumerate() {
            probes.insert((*name).to_owned(), json_ratio(self.probe_mean(idx)));
        }
        let failed = self.is_failed();
        json!({
            "name": self.name,
            "status": self.status(),
            "steps": self.steps,
            "failedSteps": self.failed_steps(),
            "failedTraces": self.failed_traces,
            "requests": self.requests,
            "overWindow": self.over_window,
            "compactions": self.compactions,
            "peakInputTokens": self.peak_input_tokens,
            "meanInputTokens": self.mean_input_tokens(),
            "summarizerInputTokens": self.summarizer_input_tokens,
            "summarizerOutputTokens": self.summarizer_output_tokens,
            "billedEquivalentTokens": (!failed).then(|| self.billed_equivalent_tokens.round() as u64),
            "dollars": self.dollars.filter(|_| !failed).map(micro_dollars),
            "probeRecallMean": json_ratio(self.recall_mean().filter(|_| !failed)),
            "probeRecallMin": json_ratio(self.recall_min),
            "gradedRequests": self.graded,
            "resends": self.resends,
            "summarizerCalls": self.summarizer_calls,
            "rejectedCapsules": self.rejected_capsules,
            "hygienePasses": self.hygiene_passes,
            "cache": {
                "readTokens": self.cache_read_tokens,
                "writeTokens": self.cache_write_tokens.iter().sum::<u64>(),
                "writeTokensBy": WriteCause::ALL.iter().map(|cause| {
                    (cause.as_str().to_owned(), json!(self.cache_write_tokens[*cause as usize]))
                }).collect::<Map<String, Value>>(),
            },
            "summarizerBilledTokens": self.summarizer_billed.round() as u64,
            "probes": probes,
            "fidelity": self.fidelity.to_json(),
        })
    }
}

/// Why a request's prompt was not read from the cache past some point:
/// the split of [`PolicyStats::cache_write_tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCause {
    /// The policy compacted before this request.
    AfterCompaction = 0,
    /// The policy pruned (SOBA hygiene, OpenCode prune) before it.
    AfterHygiene = 1,
    /// The cache lifetime ran out since the previous request: the whole
    /// prompt is written whatever the policy does.
    AtExpiry = 2,
    /// New messages appended to an unchanged prefix, the first request,
    /// and anything else.
    Other = 3,
}

impl WriteCause {
    /// Every cause, in the order of the `--json` object.
    pub const ALL: [WriteCause; 4] = [
        WriteCause::AfterCompaction,
        WriteCause::AfterHygiene,
        WriteCause::AtExpiry,
        WriteCause::Other,
    ];

    /// Returns the `--json` key.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteCause::AfterCompaction => "afterCompaction",
            WriteCause::AfterHygiene => "afterHygiene",
            WriteCause::AtExpiry => "atExpiry",
            WriteCause::Other => "other",
        }
    }
}

/// Rounds a ratio to four decimals for JSON (`null` when undefined).
fn json_ratio(value: Option<f64>) -> Value {
    match value {
        Some(value) => json!((value * 10_000.0).round() / 10_000.0),
        None => Value::Null,
    }
}

/// One policy's curve for the chart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// The policy's name.
    pub name: String,
    /// Input tokens at each recorded request (the last one sent at that
    /// step; for SOBA an unsent request's effective tokens).
    pub tokens: Vec<Option<u64>>,
    /// Steps at which the policy compacted.
    pub compactions: Vec<usize>,
}

/// One trace's results.
#[derive(Debug, Clone, Default)]
pub struct TraceReport {
    /// The file (and instance).
    pub trace: String,
    /// The format's name.
    pub format: String,
    /// The agent that wrote it (`claude-code`, `codex`, `pi`, …).
    pub agent: String,
    /// When the session started, as it records.
    pub started: Option<jiff::Timestamp>,
    /// The working folder it ran in, as it records.
    pub project: Option<String>,
    /// The primary model, as the transcript spells it.
    pub model: String,
    /// The context window.
    pub window: u64,
    /// The maximum output.
    pub max_output: u64,
    /// The cache pricing used.
    pub cache: Option<CacheMode>,
    /// Recorded inferences replayed.
    pub recorded_requests: usize,
    /// What the recorded requests cost in US dollars, from the
    /// transcript's own usage; `None` when its model has no price or it
    /// records no usage.
    pub recorded_dollars: Option<f64>,
    /// What the file says was billed: every response (abandoned branches
    /// and interrupted requests included), its token columns, per model.
    pub bill: crate::price::Bill,
    /// Calibration per model.
    pub calibration: Vec<ModelCalibration>,
    /// Whether the trace records its system prompt and tools.
    pub records_fixed: bool,
    /// SOBA's hardLimit and autoLimit for the chart, when SOBA ran.
    pub soba_limits: Option<(u64, u64)>,
    /// Per policy.
    pub policies: Vec<PolicyStats>,
    /// Per policy, for the chart.
    pub series: Vec<Series>,
    /// Why the trace was skipped, if it was.
    pub skipped: Option<String>,
    /// What the user should know about how it was replayed (e.g. a
    /// recorded compaction that implies another window).
    pub warnings: Vec<String>,
}

impl TraceReport {
    /// Returns a row for a trace that could not be replayed.
    pub fn skipped(trace: String, format: Option<String>, reason: String) -> Self {
        TraceReport {
            trace,
            format: format.unwrap_or_default(),
            skipped: Some(reason),
            ..TraceReport::default()
        }
    }

    /// Returns the primary model's calibration.
    pub fn primary_calibration(&self) -> Option<&ModelCalibration> {
        self.calibration
            .iter()
            .find(|calibration| calibration.model == canonical_name(&self.model))
            .or(self.calibration.first())
    }

    /// Returns the `traces[]` row.
    pub fn to_json(&self) -> Value {
        if let Some(reason) = &self.skipped {
            return json!({"trace": self.trace, "format": self.format, "skipped": reason});
        }
        let primary = self.primary_calibration();
        json!({
            "trace": self.trace,
            "format": self.format,
            "model": self.model,
            "window": self.window,
            "maxOutput": self.max_output,
            "cache": self.cache.map(CacheMode::as_str),
            "requests": self.recorded_requests,
            "recordedDollars": self.recorded_dollars.map(micro_dollars),
            "billed": bill_json(&self.bill),
            "fixedOverhead": primary.map_or(0, |c| c.overhead),
            "factor": primary.map(|c| (c.factor * 10_000.0).round() / 10_000.0),
            "recordsSystemPromptAndTools": self.records_fixed,
            "calibration": self.calibration.iter().map(|c| json!({
                "model": c.model,
                "factor": (c.factor * 10_000.0).round() / 10_000.0,
                "overhead": c.overhead,
                "samples": c.samples,
                "source": c.source.as_str(),
            })).collect::<Vec<_>>(),
            "warnings": self.warnings,
            "policies": self.policies.iter().map(PolicyStats::to_json).collect::<Vec<_>>(),
        })
    }
}

/// A recorded compaction compared with SOBA's capsule at the same point.
#[derive(Debug, Clone, PartialEq)]
pub struct RealSummary {
    /// The trace.
    pub trace: String,
    /// The imported capsule's index among the trace's entries.
    pub entry_index: usize,
    /// The agent whose summary it is.
    pub agent: String,
    /// Local tokens of the agent's summary.
    pub agent_tokens: u64,
    /// Local tokens of SOBA's capsule as rendered into the model input.
    pub soba_tokens: u64,
    /// Probes on the agent's summary text alone.
    pub agent_probes: ProbeScores,
    /// Probes on SOBA's capsule text alone.
    pub soba_probes: ProbeScores,
}

fn probes_json(scores: &ProbeScores) -> Value {
    let mut out = Map::new();
    for (name, value) in PROBE_NAMES.iter().zip(scores.values()) {
        out.insert((*name).to_owned(), json_ratio(value));
    }
    out.insert("mean".to_owned(), json_ratio(Some(scores.mean())));
    Value::Object(out)
}

impl RealSummary {
    /// Returns the `realSummaries[]` row.
    pub fn to_json(&self) -> Value {
        json!({
            "trace": self.trace,
            "entryIndex": self.entry_index,
            "agent": self.agent,
            "agentTokens": self.agent_tokens,
            "sobaTokens": self.soba_tokens,
            "agentProbes": probes_json(&self.agent_probes),
            "sobaProbes": probes_json(&self.soba_probes),
        })
    }
}

/// Everything one `soba replay` run produced.
#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    /// Per trace, skipped ones included.
    pub traces: Vec<TraceReport>,
    /// Per policy, over every replayed trace, in policy order.
    pub totals: Vec<PolicyStats>,
    /// Recorded compactions compared with SOBA's capsules.
    pub real_summaries: Vec<RealSummary>,
    /// `--cache` as given (`None`: by model family, per trace).
    pub cache: Option<CacheMode>,
    /// `--cache-ttl` in seconds.
    pub cache_ttl: u64,
    /// `--summarizer-price`.
    pub summarizer_price: f64,
    /// `--peer-trigger`.
    pub peer_trigger: Option<u64>,
    /// The recorded cost of the priced traces, in US dollars.
    pub recorded_dollars: Option<f64>,
    /// Every replayed trace's bill, summed.
    pub bill: crate::price::Bill,
    /// Whether the table shows dollars (`--cost dollars`, the default).
    pub show_dollars: bool,
    /// The sessions `--since`, `--until` and `--project` left out.
    pub left_out: crate::LeftOutCounts,
    /// The time zone days are counted in for the groups (UTC when `None`).
    pub zone: Option<jiff::tz::TimeZone>,
    /// The prices dollars were figured at (for the date and what the
    /// config set).
    pub prices: crate::price::PriceTable,
}

impl ReplayReport {
    /// Returns the number of traces replayed (not skipped).
    pub fn replayed(&self) -> usize {
        self.traces.iter().filter(|t| t.skipped.is_none()).count()
    }

    /// Sums the per-trace figures into [`ReplayReport::totals`].
    pub fn total(&mut self) {
        let mut totals: Vec<PolicyStats> = Vec::new();
        for trace in self.traces.iter().filter(|t| t.skipped.is_none()) {
            for stats in &trace.policies {
                match totals.iter_mut().find(|total| total.name == stats.name) {
                    Some(total) => total.merge(stats),
                    None => totals.push(stats.clone()),
                }
            }
        }
        self.totals = totals;
        self.recorded_dollars = self
            .traces
            .iter()
            .filter(|t| t.skipped.is_none())
            .fold(None, |sum, t| sum_priced(sum, t.recorded_dollars));
        let mut bill = crate::price::Bill::default();
        for trace in self.traces.iter().filter(|t| t.skipped.is_none()) {
            bill.merge(&trace.bill);
        }
        self.bill = bill;
    }

    /// Returns the replayed sessions grouped `by` session, day or
    /// project, and their total (see [`crate::group`]).
    pub fn groups(
        &self,
        by: crate::group::GroupBy,
    ) -> (Vec<crate::group::Group>, crate::group::Group) {
        let utc = jiff::tz::TimeZone::UTC;
        crate::group::groups(self, by, self.zone.as_ref().unwrap_or(&utc))
    }

    /// Returns the `--json` document.
    pub fn to_json(&self) -> Value {
        json!({
            "cache": self.cache.map_or("auto", CacheMode::as_str),
            "cacheTtl": self.cache_ttl,
            "summarizerPrice": self.summarizer_price,
            "peerTrigger": self.peer_trigger,
            "pricesAsOf": crate::price::PRICES_AS_OF,
            "pricesFromConfig": self.prices.overridden(),
            "recordedDollars": self.recorded_dollars.map(micro_dollars),
            "billed": bill_json(&self.bill),
            "leftOut": {
                "day": self.left_out.day,
                "noDay": self.left_out.no_day,
                "project": self.left_out.project,
                "noFolder": self.left_out.no_folder,
            },
            "traces": self.traces.iter().map(TraceReport::to_json).collect::<Vec<_>>(),
            "groups": crate::group::GroupBy::ALL.iter().map(|by| {
                let (groups, total) = self.groups(*by);
                (by.as_str().to_owned(), json!({
                    "rows": groups.iter().map(crate::group::Group::to_json).collect::<Vec<_>>(),
                    "total": total.to_json(),
                }))
            }).collect::<Map<String, Value>>(),
            "policies": self.totals.iter().map(PolicyStats::to_json).collect::<Vec<_>>(),
            "realSummaries": self.real_summaries.iter().map(RealSummary::to_json).collect::<Vec<_>>(),
        })
    }

    /// Returns the aligned table of the totals, with a header naming the
    /// traces, the cache model and its lifetime.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let caches: Vec<String> = self
            .traces
            .iter()
            .filter(|t| t.skipped.is_none())
            .filter_map(|t| t.cache.map(|c| c.as_str().to_owned()))
            .collect();
        let cache = match self.cache {
            Some(cache) => cache.as_str().to_owned(),
            None => {
                let mut distinct = caches.clone();
                distinct.sort();
                distinct.dedup();
                format!("by model ({})", distinct.join(", "))
            }
        };
        let ttl = if self.cache_ttl == 0 {
            "no expiry".to_owned()
        } else {
            format!("TTL {} s", self.cache_ttl)
        };
        out.push_str(&format!(
            "replayed {} trace(s), {} skipped · cache {cache}, {ttl} · summarizer price {}\n\n",
            self.replayed(),
            self.traces.len() - self.replayed(),
            self.summarizer_price
        ));
        if self.bill.total.responses > 0 {
            let rows: Vec<(String, BillLine)> = self
                .bill
                .models
                .iter()
                .map(|(model, line)| (model.clone(), *line))
                .collect();
            out.push_str(&format!(
                "billed: every response the transcripts record (abandoned branches and interrupted requests included), each at its own model's price\n{}\n",
                bill_table("model", &rows, &self.bill.total, self.show_dollars)
            ));
        }
        if self.show_dollars {
            out.push_str(&self.dollar_lines());
            out.push_str(&policy_table_with_dollars(&self.totals));
        } else {
            out.push_str(&policy_table(&self.totals));
        }
        out.push_str(&policy_legend(self.show_dollars));
        out.push_str(&failure_lines(&self.totals));
        out.push_str(&fidelity_lines(&self.totals));
        out
    }

    /// The lines above the table when it shows dollars: what the
    /// transcripts' own usage cost, and how close `none`'s model of it
    /// comes.
    /// Where the prices of the priced traces' models came from.
    pub fn prices_source(&self) -> String {
        self.prices.source_for(
            self.traces
                .iter()
                .filter(|t| t.skipped.is_none() && t.recorded_dollars.is_some())
                .flat_map(|t| t.bill.models.keys().map(String::as_str)),
        )
    }

    fn dollar_lines(&self) -> String {
        let Some(recorded) = self.recorded_dollars else {
            return "recorded: no trace records usage at a known price (the `$` column prices each policy at the trace model's list price, `-` where it has none)\n\n".to_owned();
        };
        let priced = self
            .traces
            .iter()
            .filter(|t| t.skipped.is_none() && t.recorded_dollars.is_some())
            .count();
        let mut out = format!(
            "recorded ${}: what {priced} trace(s) cost by their own usage ({})\n",
            dollar_text(recorded),
            self.prices_source()
        );
        if let Some((recorded, modelled, _)) = self.none_vs_recorded() {
            out.push_str(&format!(
                "none   ${}: the replay's model of the same {priced} trace(s) ({:+.1} % vs recorded; the table's $ column prices every trace whose model has a price)\n",
                dollar_text(modelled),
                (modelled / recorded - 1.0) * 100.0
            ));
        }
        out.push('\n');
        out
    }

    /// Returns the recorded cost of the priced traces, `none`'s modelled
    /// cost of the same traces (every request as recorded, without the
    /// agent's own compactions, priced by the replay's cache model) and
    /// how many they are; `None` when nothing is priced.
    pub fn none_vs_recorded(&self) -> Option<(f64, f64, usize)> {
        let priced: Vec<&TraceReport> = self
            .traces
            .iter()
            .filter(|t| t.skipped.is_none() && t.recorded_dollars.is_some())
            .collect();
        let recorded = priced
            .iter()
            .fold(None, |sum, t| sum_priced(sum, t.recorded_dollars))?;
        let modelled = priced
            .iter()
            .filter_map(|t| t.policies.iter().find(|stats| stats.name == "none"))
            .fold(None, |sum, stats| sum_priced(sum, stats.dollars))?;
        (recorded > 0.0).then_some((recorded, modelled, priced.len()))
    }

    /// Returns the real-summary comparison as an aligned table.
    pub fn real_summary_table(&self) -> String {
        if self.real_summaries.is_empty() {
            return String::new();
        }
        let mut rows: Vec<Vec<String>> = vec![
            [
                "trace", "entry", "agent", "tokens", "files", "task", "instr", "error", "recent",
                "mean",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        ];
        for summary in &self.real_summaries {
            for (who, tokens, probes) in [
                (
                    summary.agent.as_str(),
                    summary.agent_tokens,
                    &summary.agent_probes,
                ),
                ("soba", summary.soba_tokens, &summary.soba_probes),
            ] {
                let mut row = vec![
                    short_name(&summary.trace),
                    summary.entry_index.to_string(),
                    who.to_owned(),
                    group_thousands(tokens),
                ];
                row.extend(probes.values().iter().map(|v| ratio_cell(*v)));
                row.push(ratio_cell(Some(probes.mean())));
                rows.push(row);
            }
        }
        format!(
            "recorded compactions vs SOBA capsules (summary text alone)\n\n{}",
            align(&rows)
        )
    }

    /// Returns the per-trace lines: window, maximum output, cache and the
    /// calibration of the primary model.
    pub fn calibration_table(&self) -> String {
        // Names, models and reasons come from the transcripts: one line each,
        // whatever they hold (a newline in a file name cannot fake a row).
        use soba_core::terminal::sanitize_line as line;
        let mut out = String::from("\ntraces\n");
        for trace in &self.traces {
            let name = line(&trace.trace);
            match (&trace.skipped, trace.primary_calibration()) {
                (Some(reason), _) => out.push_str(&format!("  {name}  skipped: {}\n", line(reason))),
                (None, Some(calibration)) => out.push_str(&format!(
                    "  {name}  {} · {} · window {} · max output {} · cache {} · factor {:.4} · overhead {} ({}, {} samples)\n",
                    line(&trace.format),
                    line(&trace.model),
                    group_thousands(trace.window),
                    group_thousands(trace.max_output),
                    trace.cache.map_or("none", CacheMode::as_str),
                    calibration.factor,
                    group_thousands(calibration.overhead),
                    calibration.source.as_str(),
                    calibration.samples,
                )),
                (None, None) => out.push_str(&format!("  {name}\n")),
            }
            for warning in &trace.warnings {
                out.push_str(&format!("    warning: {}\n", line(warning)));
            }
        }
        out
    }

    /// Returns the skipped sessions and the warnings of a run of several, one
    /// line each (the skipped ones are on stderr too, as they happen).
    pub fn notices(&self) -> String {
        use soba_core::terminal::sanitize_line as line;
        let mut out = String::new();
        for trace in &self.traces {
            if let Some(reason) = &trace.skipped {
                out.push_str(&format!(
                    "  {}  skipped: {}\n",
                    line(&trace.trace),
                    line(reason)
                ));
            }
            for warning in &trace.warnings {
                out.push_str(&format!(
                    "  {}  warning: {}\n",
                    line(&trace.trace),
                    line(warning)
                ));
            }
        }
        if out.is_empty() {
            out
        } else {
            format!("\nnotices\n{out}")
        }
    }
}

/// Returns the JSON of one line of a bill (`model` first when given).
pub(crate) fn bill_line_json(line: &BillLine, model: Option<&str>) -> Value {
    let mut out = Map::new();
    if let Some(model) = model {
        out.insert("model".into(), Value::from(model));
    }
    out.insert("responses".into(), Value::from(line.responses));
    out.insert("inputTokens".into(), Value::from(line.input));
    out.insert("outputTokens".into(), Value::from(line.output));
    out.insert("cacheReadTokens".into(), Value::from(line.cache_read));
    out.insert("cacheWriteTokens".into(), Value::from(line.cache_write));
    out.insert(
        "cacheWrite1hTokens".into(),
        Value::from(line.cache_write_1h),
    );
    out.insert(
        "dollars".into(),
        line.dollars
            .map(micro_dollars)
            .map_or(Value::Null, Value::from),
    );
    out.insert("unpricedResponses".into(), Value::from(line.unpriced));
    Value::Object(out)
}

/// Returns a bill's JSON: its total's fields plus `models[]`.
pub(crate) fn bill_json(bill: &Bill) -> Value {
    let mut out = bill_line_json(&bill.total, None);
    if let Value::Object(fields) = &mut out {
        fields.insert(
            "models".into(),
            bill.models
                .iter()
                .map(|(model, line)| bill_line_json(line, Some(model)))
                .collect(),
        );
    }
    out
}

/// Returns the billed table: one row per key (a model, a session, a day)
/// and the total, with the recorded token columns and, when `dollars`,
/// what they cost (`-` where a model has no price).
pub fn bill_table(
    key: &str,
    rows: &[(String, BillLine)],
    total: &BillLine,
    dollars: bool,
) -> String {
    let mut header = vec![
        key,
        "responses",
        "input",
        "output",
        "cacheRead",
        "cacheWrite",
        "of it 1h",
    ];
    if dollars {
        header.push("$");
    }
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for (name, line) in rows
        .iter()
        .map(|(name, line)| (name.as_str(), line))
        .chain([("total", total)])
    {
        let mut row = vec![
            soba_core::terminal::sanitize_line(name).into_owned(),
            group_thousands(line.responses),
            group_thousands(line.input),
            group_thousands(line.output),
            group_thousands(line.cache_read),
            group_thousands(line.cache_write),
            group_thousands(line.cache_write_1h),
        ];
        if dollars {
            row.push(line.dollars.map_or_else(|| "-".to_owned(), dollar_text));
        }
        table.push(row);
    }
    align(&table)
}

/// Returns the last two path components of a trace name, on one line
/// whatever the name holds.
fn short_name(trace: &str) -> String {
    let parts: Vec<&str> = trace.rsplit('/').take(2).collect();
    let name = parts.into_iter().rev().collect::<Vec<_>>().join("/");
    soba_core::terminal::sanitize_line(&name).into_owned()
}

pub(crate) fn ratio_cell(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// Adds two figures over priced traces: the sum of those known.
pub(crate) fn sum_priced(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

/// Dollars for the table: cents, or four decimals under a dollar.
pub(crate) fn dollar_text(dollars: f64) -> String {
    if dollars >= 1.0 {
        format!("{dollars:.2}")
    } else {
        format!("{dollars:.4}")
    }
}

/// Rounds dollars for JSON: to a millionth (a small trace costs less
/// than a cent).
pub(crate) fn micro_dollars(dollars: f64) -> f64 {
    (dollars * 1e6).round() / 1e6
}

/// Returns the policy table with a `$` column after `billed`.
pub fn policy_table_with_dollars(policies: &[PolicyStats]) -> String {
    let mut rows = policy_rows(policies);
    for (idx, row) in rows.iter_mut().enumerate() {
        let dollars = match idx.checked_sub(1) {
            None => "$".to_owned(),
            Some(n) if policies[n].is_failed() => "failed".to_owned(),
            Some(n) => policies[n]
                .dollars
                .map_or_else(|| "-".to_owned(), dollar_text),
        };
        row.insert(10, dollars);
    }
    align(&rows)
}

/// The legend under the policy table, so the table reads without the
/// guide; `{dollars}` names the `$` column when the table has one.
const POLICY_LEGEND: &str = "\
columns: requests: model calls replayed · overWin: over the window · failed: requests it could not send
  compact: compactions · peak, mean: input tokens · summIn, summOut: summarizer tokens
  billed: input-equivalent tokens (cache reads at their discount, writes at their premium, summarizer included)
  {dollars}recall, min: the mean and worst retention-probe share · resends: after an overflow
  calls: summarizer calls · rejected: soft capsules the post-check skipped · hygiene: passes
";

/// Returns the legend under the policy table, with or without its `$`
/// column.
pub fn policy_legend(dollars: bool) -> String {
    POLICY_LEGEND.replace(
        "{dollars}",
        if dollars { "$: at list price · " } else { "" },
    )
}

/// Returns the policy table (the `--json` policy fields, one row each).
pub fn policy_table(policies: &[PolicyStats]) -> String {
    align(&policy_rows(policies))
}

/// Returns the lines under the policy table naming each policy that
/// failed outright (never compared) or at some steps; empty when none.
pub fn failure_lines(policies: &[PolicyStats]) -> String {
    let mut out = String::new();
    for stats in policies {
        let name = soba_core::terminal::sanitize_line(&stats.name);
        if stats.is_failed() {
            out.push_str(&format!(
                "{name} failed: it sent no request within the window at any of the {} recorded request(s); it has no cost or recall to compare and is not ranked\n",
                group_thousands(stats.steps)
            ));
        } else if stats.failed_steps() > 0 {
            let traces = match stats.failed_traces {
                0 => String::new(),
                n => format!(
                    ", and every one of {n} trace(s), whose figures are still in its totals"
                ),
            };
            out.push_str(&format!(
                "{name} failed at {} of {} recorded request(s) (over the window, or not sent){traces}\n",
                group_thousands(stats.failed_steps()),
                group_thousands(stats.steps)
            ));
        }
    }
    out
}

/// Returns the fidelity table under the cost table: per policy, the share
/// of each category of the history its input kept at the last request of
/// each fifth of every trace, with items kept over items (empty when no
/// policy had any item).
pub fn fidelity_lines(policies: &[PolicyStats]) -> String {
    if policies
        .iter()
        .all(|stats| stats.fidelity.items.iter().all(|&n| n == 0))
    {
        return String::new();
    }
    let mut rows: Vec<Vec<String>> = vec![
        std::iter::once("policy")
            .chain(fidelity::TITLES)
            .map(str::to_owned)
            .collect(),
    ];
    for stats in policies {
        let mut row = vec![stats.name.clone()];
        for idx in 0..5 {
            row.push(match stats.fidelity.share(idx) {
                Some(share) => format!(
                    "{share:.3} ({}/{})",
                    group_thousands(stats.fidelity.kept[idx]),
                    group_thousands(stats.fidelity.items[idx])
                ),
                None => "n/a".to_owned(),
            });
        }
        rows.push(row);
    }
    format!(
        "\nkept in the model input at 20/40/60/80/100 % of each trace (share, items kept/items):\n{}",
        align(&rows)
    )
}

/// The header and one row per policy.
fn policy_rows(policies: &[PolicyStats]) -> Vec<Vec<String>> {
    let header = [
        "policy", "requests", "overWin", "failed", "compact", "peak", "mean", "summIn", "summOut",
        "billed", "recall", "min", "resends", "calls", "rejected", "hygiene",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for stats in policies {
        // A policy that sent nothing within the window has no cost and no
        // recall to compare: its cells say so instead of a figure.
        let failed = stats.is_failed();
        rows.push(vec![
            stats.name.clone(),
            group_thousands(stats.requests),
            group_thousands(stats.over_window),
            stats.failed_cell(),
            group_thousands(stats.compactions),
            group_thousands(stats.peak_input_tokens),
            group_thousands(stats.mean_input_tokens()),
            group_thousands(stats.summarizer_input_tokens),
            group_thousands(stats.summarizer_output_tokens),
            if failed {
                "failed".to_owned()
            } else {
                group_thousands(stats.billed_equivalent_tokens.round() as u64)
            },
            ratio_cell(stats.recall_mean().filter(|_| !failed)),
            ratio_cell(stats.recall_min.filter(|_| !failed)),
            group_thousands(stats.resends),
            group_thousands(stats.summarizer_calls),
            group_thousands(stats.rejected_capsules),
            group_thousands(stats.hygiene_passes),
        ]);
    }
    rows
}

/// Aligns rows: the first column left, the others right.
pub(crate) fn align(rows: &[Vec<String>]) -> String {
    let n_cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n_cols)
        .map(|col| {
            rows.iter()
                .filter_map(|row| row.get(col))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (col, cell) in row.iter().enumerate() {
            let pad = widths[col].saturating_sub(cell.chars().count());
            if col == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_merge_and_mean() {
        let mut a = PolicyStats::new("soba");
        a.add_request(100);
        a.add_request(300);
        let mut b = PolicyStats::new("soba");
        b.add_request(50);
        b.add_grade(&ProbeScores {
            files: Some(0.5),
            task: Some(1.0),
            instruction: None,
            error: None,
            recent: Some(0.0),
        });
        a.merge(&b);
        assert_eq!(a.requests, 3);
        assert_eq!(a.peak_input_tokens, 300);
        assert_eq!(a.mean_input_tokens(), 150);
        assert_eq!(a.recall_mean(), Some(0.5));
        assert_eq!(a.recall_min, Some(0.5));
        assert_eq!(a.probe_mean(0), Some(0.5));
        assert_eq!(a.probe_mean(2), None);
    }

    #[test]
    fn the_fidelity_table_shows_shares_with_counts_and_n_a() {
        let mut soba = PolicyStats::new("soba");
        soba.fidelity = FidelityCounts {
            kept: [787, 1, 3, 0, 1_524],
            items: [1_000, 2, 3, 0, 2_000],
        };
        let mut other = PolicyStats::new("none");
        other.fidelity.merge(&soba.fidelity);
        other.fidelity.merge(&soba.fidelity);
        assert_eq!(
            fidelity_lines(&[soba, other]),
            "\nkept in the model input at 20/40/60/80/100 % of each trace (share, items kept/items):\n\
             policy                files       errors  constraints  plan         results 6-20\n\
             soba      0.787 (787/1,000)  0.500 (1/2)  1.000 (3/3)   n/a  0.762 (1,524/2,000)\n\
             none    0.787 (1,574/2,000)  0.500 (2/4)  1.000 (6/6)   n/a  0.762 (3,048/4,000)\n"
        );
        // No item anywhere (a report of skipped traces): no table.
        assert_eq!(fidelity_lines(&[PolicyStats::new("none")]), "");
    }

    #[test]
    fn table_aligns_columns() {
        let mut stats = PolicyStats::new("none");
        stats.add_request(1_234_567);
        let table = policy_table(&[stats]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("none "));
        assert!(lines[1].contains("1,234,567"));
        assert_eq!(
            lines[0].find("requests").map(|i| i + "requests".len()),
            lines[1].find("        1").map(|i| i + "        1".len())
        );
    }
}
