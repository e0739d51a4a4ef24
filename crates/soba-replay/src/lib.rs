//! The replay analyzer behind `soba replay`: imports real sessions of pi,
//! Claude Code, Codex, OpenHands, SWE-agent and Gemini CLI, replays each
//! recorded inference under SOBA and under the compaction policies of other
//! agents, and reports tokens, billed-equivalent cost and what each policy
//! kept.
//!
//! The API has three steps: [`load`] a file or folder, replay each session
//! with [`replay_session`] under [`ReplayOptions`], and collect the rows
//! into a [`ReplayReport`] (its [`ReplayReport::table`] is the text report,
//! [`chart::html`] the page). [`replay_path`] does all three.
//!
//! ```no_run
//! use std::path::Path;
//! use soba_replay::{ReplayOptions, replay_path};
//!
//! let report = replay_path(Path::new("session.jsonl"), &ReplayOptions::default())?;
//! for trace in &report.traces {
//!     println!("{}: {} recorded requests", trace.trace, trace.recorded_requests);
//! }
//! # Ok::<(), soba_replay::ReplayError>(())
//! ```
//!
//! Modules:
//! - [`trace`]: the imported session prepared for replay (window, maximum
//!   output, steps, the per-model calibration fit).
//! - [`policy`]: `none` and the five peers; SOBA's barrier runs
//!   synchronously on soba-core with deterministic capsules.
//! - [`cost`]: the cache-prefix model; [`probe`]: the retention probes;
//!   [`fidelity`]: what each input keeps at five points, and the
//!   `--dump-inputs` file.
//! - [`report`]: figures, the table and JSON; [`group`]: the same per
//!   session, day and project; [`chart`]: the HTML page.
//!
//! Decisions the design leaves open are listed in each module's docs and
//! in the repository's `ARCHITECTURE.md`.

pub mod chart;
pub mod cost;
pub mod discover;
pub mod fidelity;
pub mod group;
pub mod policy;
pub mod price;
pub mod probe;
pub mod report;
mod run;
mod soba;
#[cfg(test)]
mod testing;
pub mod trace;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use soba_core::budget::Budget;
use soba_core::capsule::Trigger;
use soba_core::config::CompactionConfig;
use soba_core::tokens::group_thousands;
use soba_core::{EntryBody, MessageOrigin, TokenCount, TokenCounter};
use soba_provider::registry::ModelRegistry;
use soba_store::import::{self, DirFile, FileOutcome, ImportError, ImportedSession};

pub use cost::CacheMode;
pub use group::GroupBy;
pub use policy::{PolicyKind, PolicySpec};
pub use report::{PolicyStats, RealSummary, ReplayReport, TraceReport};
pub use trace::{Counting, Trace, TraceError, TraceOptions};

use cost::{CostModel, openai_read_price};
use policy::{NoneRunner, PeerRunner};
use probe::ProbeIndex;
use run::{Ctx, Runner};

/// `--summarizer-price` by default.
pub const DEFAULT_SUMMARIZER_PRICE: f64 = 0.33;
/// `--cache-ttl` by default, in seconds.
pub const DEFAULT_CACHE_TTL: u64 = 300;

/// Everything `soba replay` takes besides the path.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The policies, in report order; empty means all seven.
    pub policies: Vec<PolicySpec>,
    /// `--window`.
    pub window: Option<u64>,
    /// `--max-output`.
    pub max_output: Option<u64>,
    /// SOBA's `compaction.*` (defaults plus `--set`).
    pub compaction: CompactionConfig,
    /// `--cache`; `None` picks by the trace's model family.
    pub cache: Option<CacheMode>,
    /// `--summarizer-price`.
    pub summarizer_price: f64,
    /// `--cache-ttl` in seconds (0 ignores the cache lifetime).
    pub cache_ttl: u64,
    /// `--peer-trigger`: also run every selected peer as `<peer>@N`.
    pub peer_trigger: Option<u64>,
    /// How tokens are counted (BPE, except in synthetic tests).
    pub counting: Counting,
    /// The model registry, with any `--set models.<id>.*` overrides.
    pub registry: ModelRegistry,
    /// The prices dollars are figured at.
    pub prices: price::PriceTable,
    /// `--dump-inputs FILE`: every policy's input at the five probe
    /// points of each trace.
    pub dump_inputs: Option<std::sync::Arc<fidelity::InputDump>>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            policies: Vec::new(),
            window: None,
            max_output: None,
            compaction: CompactionConfig::default(),
            cache: None,
            summarizer_price: DEFAULT_SUMMARIZER_PRICE,
            cache_ttl: DEFAULT_CACHE_TTL,
            peer_trigger: None,
            counting: Counting::Bpe,
            registry: ModelRegistry::new(),
            prices: price::PriceTable::new(),
            dump_inputs: None,
        }
    }
}

impl ReplayOptions {
    /// Returns a report with no rows yet, carrying these options' cache,
    /// summarizer and trigger settings, dollars shown.
    pub fn empty_report(&self) -> ReplayReport {
        ReplayReport {
            cache: self.cache,
            cache_ttl: self.cache_ttl,
            summarizer_price: self.summarizer_price,
            peer_trigger: self.peer_trigger,
            show_dollars: true,
            prices: self.prices.clone(),
            ..ReplayReport::default()
        }
    }

    /// Returns the policies to run: the selection (all seven when empty),
    /// then `<peer>@N` for each selected peer under `--peer-trigger N`.
    pub fn resolved_policies(&self) -> Vec<PolicySpec> {
        let mut out: Vec<PolicySpec> = if self.policies.is_empty() {
            PolicyKind::ALL.into_iter().map(PolicySpec::new).collect()
        } else {
            self.policies.clone()
        };
        if let Some(n) = self.peer_trigger {
            let peers: Vec<PolicySpec> = out
                .iter()
                .filter(|spec| spec.kind.is_peer() && spec.trigger.is_none())
                .map(|spec| PolicySpec {
                    kind: spec.kind,
                    trigger: Some(n),
                })
                .collect();
            out.extend(peers);
        }
        let mut seen = HashSet::new();
        out.retain(|spec| seen.insert(*spec));
        out
    }
}

/// Why a replay could not run at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The file or folder could not be read or imported. Retrying helps
    /// only once the cause is fixed.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// A single trace cannot be replayed (unknown window, impossible
    /// budget).
    #[error("{trace}: {source}")]
    Trace {
        /// The trace.
        trace: String,
        /// Why.
        #[source]
        source: TraceError,
    },
    /// No trace under a folder could be replayed.
    #[error("no trace under {path} could be replayed")]
    NothingReplayed {
        /// The folder.
        path: PathBuf,
    },
}

/// One session found under the path given.
#[derive(Debug)]
pub enum Loaded {
    /// A session to replay.
    Session {
        /// Its display name (the file, plus `#id` when a file holds several).
        name: String,
        /// The imported session.
        session: Box<ImportedSession>,
    },
    /// A file that was skipped, with the reason.
    Skipped {
        /// The file.
        name: String,
        /// Why.
        reason: String,
    },
}

fn session_names(path: &Path, sessions: Vec<ImportedSession>) -> Vec<Loaded> {
    let several = sessions.len() > 1;
    sessions
        .into_iter()
        .map(|session| {
            let name = if several {
                format!("{}#{}", path.display(), session.original_id)
            } else {
                path.display().to_string()
            };
            Loaded::Session {
                name,
                session: Box::new(session),
            }
        })
        .collect()
}

/// Imports a file (whose errors are errors) or every file under a folder
/// (whose unknown or broken files are listed as skipped).
pub fn load(path: &Path) -> Result<Vec<Loaded>, ReplayError> {
    if !path.is_dir() {
        let sessions = import::replay_path(path)?;
        return Ok(session_names(path, sessions));
    }
    let mut out = Vec::new();
    for file in import::dir_files(path)?.into_iter().map(DirFile::replay) {
        match file.outcome {
            FileOutcome::Imported(sessions) => out.extend(session_names(&file.path, sessions)),
            FileOutcome::Skipped(reason) => out.push(Loaded::Skipped {
                name: file.path.display().to_string(),
                reason: reason
                    .strip_prefix("skipped: ")
                    .map(str::to_owned)
                    .unwrap_or(reason),
            }),
            FileOutcome::Failed(err) => out.push(Loaded::Skipped {
                name: file.path.display().to_string(),
                reason: error_text(&err),
            }),
        }
    }
    Ok(out)
}

/// What replaying one session gave.
#[derive(Debug)]
pub struct TraceOutcome {
    /// Its row.
    pub report: TraceReport,
    /// Its recorded compactions compared with SOBA's capsules.
    pub real_summaries: Vec<RealSummary>,
}

/// Replays one imported session under every policy.
pub fn replay_session(
    name: String,
    session: ImportedSession,
    options: &ReplayOptions,
) -> Result<TraceOutcome, TraceError> {
    let log_note = soba_log_note(&session);
    let started = session
        .created_at
        .as_deref()
        .and_then(|at| at.parse::<jiff::Timestamp>().ok());
    let project = session.cwd.clone();
    let agent = session.format.agent().to_owned();
    // The recorded cost: every response the file says was billed, each at
    // its own model's price; it needs no window, so a session replayed at
    // an inferred one (or not at all) is priced the same.
    let fallback_model = session
        .model
        .clone()
        .unwrap_or_else(|| "unknown".to_owned());
    let bill = price::Bill::of(&session.stats.billed, &fallback_model, &options.prices);
    let trace = Trace::prepare(
        name,
        session,
        &TraceOptions {
            window: options.window,
            max_output: options.max_output,
            cache: options.cache,
            image_tokens: options.compaction.image_tokens,
            counting: options.counting,
            registry: options.registry.clone(),
        },
    )?;
    // Small windows get the product's scaled defaults (`for_window`, as
    // `ModelSetup::budget` applies them), so the replay measures what the
    // product would run.
    let compaction = options.compaction.for_window(
        TokenCount::new(trace.window),
        TokenCount::new(trace.max_output),
    );
    let budget = Budget::compute(
        TokenCount::new(trace.window),
        TokenCount::new(trace.max_output),
        &compaction,
    )
    .map_err(|err| TraceError::Budget {
        detail: err.to_string(),
    })?;
    let index = ProbeIndex::build(&trace);
    let cost = CostModel {
        mode: trace.cache,
        openai_read: openai_read_price(&trace.model),
        ttl_ms: i64::try_from(options.cache_ttl.saturating_mul(1_000)).unwrap_or(i64::MAX),
        summarizer_price: options.summarizer_price,
    };
    let ctx = Ctx::new(&trace, &index, cost, &compaction, budget.auto_limit());
    let steps = trace.steps.len();
    let mut runners: Vec<Box<dyn Runner + '_>> = options
        .resolved_policies()
        .into_iter()
        .map(|spec| -> Box<dyn Runner + '_> {
            match spec.kind {
                PolicyKind::None => Box::new(NoneRunner::new(steps)),
                PolicyKind::Soba => {
                    Box::new(soba::SobaRunner::new(&ctx, compaction.clone(), budget))
                }
                _ => Box::new(PeerRunner::new(spec, trace.window, trace.max_output, steps)),
            }
        })
        .collect();
    let output = run::run(&ctx, &mut runners);
    drop(runners);
    let real_summaries = real_summaries(&ctx);
    // Every policy replays the recorded answers: their output is priced
    // the same for all.
    let recorded_output: u64 = trace
        .steps
        .iter()
        .filter_map(|step| step.usage.map(|usage| usage.output))
        .sum();
    let price = options.prices.get(&trace.model);
    let recorded_dollars = bill.total.dollars.filter(|_| bill.total.responses > 0);
    let mut policies: Vec<PolicyStats> = output.recorders.iter().map(|r| r.stats.clone()).collect();
    for stats in &mut policies {
        stats.failed_traces = u64::from(stats.is_failed());
    }
    let kept = fidelity::measure(&trace, &index, &output.inputs, policies.len());
    for (stats, kept) in policies.iter_mut().zip(kept) {
        stats.fidelity = kept;
    }
    if let Some(dump) = &options.dump_inputs {
        let names: Vec<String> = policies.iter().map(|stats| stats.name.clone()).collect();
        dump.write_trace(&trace, &index, &names, &output.inputs);
    }
    for stats in &mut policies {
        stats.dollars =
            price.map(|price| price.replayed(stats.billed_equivalent_tokens, recorded_output));
    }
    let report = TraceReport {
        trace: trace.name.clone(),
        format: trace.format.as_str().to_owned(),
        agent,
        started,
        project,
        model: trace.model_shown.clone(),
        window: trace.window,
        max_output: trace.max_output,
        cache: Some(trace.cache),
        recorded_requests: steps,
        recorded_dollars,
        bill,
        calibration: trace.calibration.values().cloned().collect(),
        records_fixed: trace.records_fixed,
        soba_limits: output.soba_limits,
        policies,
        series: output.recorders.into_iter().map(|r| r.series).collect(),
        skipped: None,
        warnings: log_note
            .into_iter()
            .chain(trace.window_note.clone())
            .chain(
                options
                    .window
                    .is_none()
                    .then(|| window_warning(&trace))
                    .flatten(),
            )
            .chain(trace.calibration.values().filter_map(calibration_note))
            .collect(),
    };
    Ok(TraceOutcome {
        report,
        real_summaries,
    })
}

/// Returns what reading a SOBA log left out or found damaged, for the
/// trace's warnings: a damaged line can end the path early, so a replay of
/// a shorter history must say why (`soba show --check` lists them all).
fn soba_log_note(session: &ImportedSession) -> Option<String> {
    if session.format != import::Format::Soba {
        return None;
    }
    let total = session.stats.diagnostics_total();
    let first = session.stats.diagnostics.first()?;
    let more = match total {
        1 => String::new(),
        n => format!(
            " (and {} more: `soba show --check` lists the log's damage)",
            n - 1
        ),
    };
    Some(format!("reading the SOBA log: {first}{more}"))
}

/// The factors a tokenizer alone explains: real models' tokenizers count
/// 0.8× to 1.4× of o200k's; a fit outside this range has another cause
/// the report names.
const TOKENIZER_FACTORS: (f64, f64) = (0.67, 1.5);

/// Returns what a model's calibration says about the transcript when a
/// tokenizer cannot explain it: a fit outside [`trace::FACTOR_RANGE`]
/// (held at its end), or one outside [`TOKENIZER_FACTORS`] (Claude Code's
/// `claude-opus-4-7` sessions fit at 2.0–2.3: their thinking blocks are
/// recorded empty, so the provider counted text the transcript does not
/// hold).
fn calibration_note(c: &trace::ModelCalibration) -> Option<String> {
    if let Some(fitted) = c.unbounded_factor {
        return Some(format!(
            "the recorded usage of {} is {fitted:.1}× what its messages count locally; the replay holds the factor at {} (the usage may not be of these messages)",
            c.model, c.factor
        ));
    }
    let (low, high) = TOKENIZER_FACTORS;
    if c.factor > high {
        Some(format!(
            "the recorded prompts of {} are {:.2}× what its messages count locally, more than a tokenizer explains: the transcript leaves part of each request out (thinking recorded empty or encrypted, images, context the agent injected); every policy's input is scaled by it, so the ratios between policies hold",
            c.model, c.factor
        ))
    } else if c.factor < low {
        Some(format!(
            "the recorded prompts of {} are {:.2}× what its messages count locally, less than a tokenizer explains: the transcript holds text the model was not sent (outputs the agent cut before sending, or duplicated records); every policy's input is scaled by it, so the ratios between policies hold",
            c.model, c.factor
        ))
    } else {
        None
    }
}

/// Standard context windows, smallest first, for the window a recorded
/// compaction implies.
const STANDARD_WINDOWS: [u64; 7] = [
    32_768, 128_000, 200_000, 256_000, 272_000, 400_000, 1_000_000,
];

/// Returns a warning when the trace records a compaction far below the
/// window in use (under half of it): the agent ran with a smaller window,
/// so the replay's peers would compact too late. The implied window is
/// the smallest standard one the largest recorded request before a
/// compaction fits in at 95 % (agents compact between about 80 % and 92 %
/// of their window: Claude Code near 167k of 200k, pi at 184k of 200k).
fn window_warning(trace: &Trace) -> Option<String> {
    let before: u64 = trace
        .compaction_entries
        .iter()
        .filter_map(|&at| {
            trace
                .steps
                .iter()
                .rev()
                .find(|step| step.response.end <= at)
                .and_then(|step| step.usage)
                .map(|usage| usage.prompt())
        })
        .max()?;
    if before == 0 || before.saturating_mul(2) >= trace.window {
        return None;
    }
    let implied = STANDARD_WINDOWS
        .into_iter()
        .find(|&window| before.saturating_mul(100) <= window.saturating_mul(95))?;
    (implied < trace.window).then(|| {
        format!(
            "the trace records a compaction at {} tokens, far below the window {} in use; it implies --window {}",
            group_thousands(before),
            group_thousands(trace.window),
            group_thousands(implied)
        )
    })
}

/// Compares every recorded compaction's summary with the SOBA capsule
/// built at the same point over the whole history before it (SPEC §15.5),
/// each judged on its text alone.
fn real_summaries(ctx: &Ctx<'_>) -> Vec<RealSummary> {
    let trace = ctx.trace;
    let counter: &dyn TokenCounter = ctx.counter();
    let mut out = Vec::new();
    for (n, &at) in trace.compaction_entries.iter().enumerate() {
        let EntryBody::Capsule(agent) = &trace.entries[at].body else {
            continue;
        };
        let Some(truth) = ctx.index.compaction_truth.get(n) else {
            continue;
        };
        let span: Vec<_> = trace.entries[..at]
            .iter()
            .enumerate()
            .filter(|(idx, _)| !trace.ignored[*idx])
            .map(|(_, entry)| entry.clone())
            .collect();
        let (_, rendered) =
            ctx.deterministic_capsule(&span, None, &HashSet::new(), Trigger::AutoThreshold);
        // What the agent carried forward: its summary and the messages the
        // compaction kept in the clear after it (Codex's replacement
        // history, whose own summary is encrypted).
        let mut agent_text = agent.markdown.clone();
        for entry in &trace.entries[at + 1..] {
            let EntryBody::Message(message) = &entry.body else {
                break;
            };
            if message.message.origin != MessageOrigin::Summary {
                break;
            }
            agent_text.push_str("\n\n");
            agent_text.push_str(&message.message.text());
        }
        let agent_text = agent_text.as_str();
        let agent_item = ctx.index.text_item(agent_text);
        let soba_item = ctx.index.text_item(&rendered);
        out.push(RealSummary {
            trace: trace.name.clone(),
            entry_index: at,
            agent: trace.format.agent().to_owned(),
            agent_tokens: counter.count_text(agent_text).n.get(),
            soba_tokens: counter.count_text(&rendered).n.get(),
            agent_probes: ctx.index.grade_text(truth, &agent_item),
            soba_probes: ctx.index.grade_text(truth, &soba_item),
        });
    }
    out
}

/// Which sessions a replay of many files keeps: `--since`, `--until` and
/// `--project`. A session whose date or folder is not recorded is kept
/// only when no filter asks for it.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The first day kept, in `zone`.
    pub since: Option<jiff::civil::Date>,
    /// The last day kept, in `zone`.
    pub until: Option<jiff::civil::Date>,
    /// Keeps sessions whose recorded working folder is this folder or
    /// under it (an absolute path); any other value keeps those whose
    /// folder contains it.
    pub project: Option<String>,
    /// The time zone days are counted in (UTC when `None`; the CLI passes
    /// the local one).
    pub zone: Option<jiff::tz::TimeZone>,
}

/// Why a filter left a session out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    /// It started before `since` or after `until`.
    Day,
    /// It records no start time, and a day filter is set.
    NoDay,
    /// It ran in another folder.
    Project,
    /// It records no working folder (Gemini CLI does not), and `project`
    /// is set.
    NoFolder,
}

impl Filter {
    /// Returns whether no filter is set.
    pub fn is_empty(&self) -> bool {
        self.since.is_none() && self.until.is_none() && self.project.is_none()
    }

    /// Returns the day a session started on, in the filter's zone.
    pub fn day(&self, session: &ImportedSession) -> Option<jiff::civil::Date> {
        let started: jiff::Timestamp = session.created_at.as_deref()?.parse().ok()?;
        let zone = self.zone.clone().unwrap_or(jiff::tz::TimeZone::UTC);
        Some(started.to_zoned_datetime(zone).date())
    }

    /// Returns why the filter leaves `session` out, `None` when it keeps it.
    pub fn left_out(&self, session: &ImportedSession) -> Option<LeftOut> {
        if self.since.is_some() || self.until.is_some() {
            let Some(day) = self.day(session) else {
                return Some(LeftOut::NoDay);
            };
            if self.since.is_some_and(|since| day < since)
                || self.until.is_some_and(|until| day > until)
            {
                return Some(LeftOut::Day);
            }
        }
        let project = self.project.as_deref()?;
        let Some(cwd) = session.cwd.as_deref() else {
            return Some(LeftOut::NoFolder);
        };
        let kept = if Path::new(project).is_absolute() {
            Path::new(cwd).starts_with(project)
        } else {
            cwd.contains(project)
        };
        (!kept).then_some(LeftOut::Project)
    }

    /// Returns whether `session` passes the filter.
    pub fn keeps(&self, session: &ImportedSession) -> bool {
        self.left_out(session).is_none()
    }
}

/// How many sessions the filters left out, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftOutCounts {
    /// Started outside the days asked for.
    pub day: usize,
    /// Recorded no start time.
    pub no_day: usize,
    /// Ran in another folder.
    pub project: usize,
    /// Recorded no working folder.
    pub no_folder: usize,
}

impl LeftOutCounts {
    /// Counts one session left out.
    pub fn add(&mut self, why: LeftOut) {
        match why {
            LeftOut::Day => self.day += 1,
            LeftOut::NoDay => self.no_day += 1,
            LeftOut::Project => self.project += 1,
            LeftOut::NoFolder => self.no_folder += 1,
        }
    }

    /// Adds another file's counts.
    pub fn merge(&mut self, other: LeftOutCounts) {
        self.day += other.day;
        self.no_day += other.no_day;
        self.project += other.project;
        self.no_folder += other.no_folder;
    }

    /// Returns the sessions left out in all.
    pub fn total(&self) -> usize {
        self.day + self.no_day + self.project + self.no_folder
    }

    /// Returns the line saying how many sessions the filters left out, and
    /// why, or none when they left none out.
    pub fn line(&self) -> Option<String> {
        if self.total() == 0 {
            return None;
        }
        let mut parts = Vec::new();
        for (n, why) in [
            (self.day, "started outside the days asked for"),
            (self.no_day, "record no start time"),
            (self.project, "ran in other folders"),
            (self.no_folder, "record no working folder"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {why}"));
            }
        }
        Some(format!("left out by the filters: {}", parts.join(", ")))
    }
}

/// Returns the threads a replay of `files` files runs on when `-j asked`
/// (0: as many as useful), and the note saying so when fewer than asked.
/// Replay is CPU-bound and each thread holds a whole trace: more threads
/// than cores (or files) cost memory and gain nothing.
pub fn thread_count(asked: usize, files: usize) -> (usize, Option<String>) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let most = cores.min(files).max(1);
    match asked {
        0 => (most, None),
        asked if asked > most => (
            most,
            Some(format!(
                "-j {asked}: using {most} thread{} ({cores} core{}, {files} file{})",
                if most == 1 { "" } else { "s" },
                if cores == 1 { "" } else { "s" },
                if files == 1 { "" } else { "s" }
            )),
        ),
        asked => (asked, None),
    }
}

/// Returns an error's text with its causes, `cannot read x: permission
/// denied`.
pub fn error_text(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// One file of a replay of many.
#[derive(Debug)]
pub struct Input {
    /// The file, as walked.
    pub file: import::DirFile,
    /// The agent whose standard folder it was found in, when discovered.
    pub agent: Option<discover::Agent>,
}

impl Input {
    /// Lists every file under a folder, as `soba import` walks it.
    pub fn walk(dir: &Path) -> Result<Vec<Input>, ReplayError> {
        Ok(import::dir_files(dir)?
            .into_iter()
            .map(|file| Input { file, agent: None })
            .collect())
    }

    /// Takes the files discovery found.
    pub fn discovered(discovery: discover::Discovery) -> Vec<Input> {
        discovery
            .files
            .into_iter()
            .map(|found| Input {
                file: found.file,
                agent: Some(found.agent),
            })
            .collect()
    }
}

/// What replaying one file of many gave, for a progress display.
#[derive(Debug, Clone)]
pub struct FileDone {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// The sessions it held that were replayed.
    pub replayed: usize,
}

/// Replays many files on `threads` threads (all cores when 0), one file
/// per thread at a time, the largest first: each file is imported, its sessions replayed and
/// dropped before the thread takes the next, so memory grows with the
/// largest files, not with the folder. `on_file` is called as each file
/// is done, from the thread that did it. Rows come out in input order;
/// unreadable, unknown and unreplayable files are skipped rows, sessions
/// the filter leaves out are no rows.
pub fn replay_inputs(
    inputs: Vec<Input>,
    options: &ReplayOptions,
    filter: &Filter,
    threads: usize,
    on_file: &(dyn Fn(&FileDone) + Sync),
) -> ReplayReport {
    let work = |input: Input| -> FileRows {
        let path = input.file.path.clone();
        let bytes = std::fs::metadata(&path).map_or(0, |meta| meta.len());
        let rows = replay_file(input, bytes, options, filter);
        on_file(&FileDone {
            path,
            bytes,
            replayed: rows
                .outcomes
                .iter()
                .filter(|(_, row)| row.report.skipped.is_none())
                .count(),
        });
        rows
    };
    let files: Vec<FileRows> = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(|| largest_first(inputs, &work)),
        // No threads to be had: the same work, on this one.
        Err(_) => inputs.into_iter().map(work).collect(),
    };
    let mut report = options.empty_report();
    // The same session found twice (a copy, a second root, an archived
    // rollout) is replayed once: the first in walk order counts. Same means
    // the same id and the same recorded requests and cost (and, outside
    // the agents' folders, file size), so a longer or different file that
    // shares an id is never dropped.
    type Key = (String, SessionId, usize, u64);
    let mut first_of: HashMap<Key, String> = HashMap::new();
    for file in files {
        report.left_out.merge(file.left_out);
        for (session, outcome) in file.outcomes {
            let key = session.map(|id| {
                let cost = outcome.report.recorded_dollars.map_or(0, f64::to_bits);
                (
                    outcome.report.format.clone(),
                    id,
                    outcome.report.recorded_requests,
                    cost,
                )
            });
            if let Some(key) = key
                && outcome.report.skipped.is_none()
            {
                if let Some(first) = first_of.get(&key) {
                    let reason = format!("the same session as {first}, counted once");
                    report.traces.push(TraceReport::skipped(
                        outcome.report.trace,
                        Some(outcome.report.format),
                        reason,
                    ));
                    continue;
                }
                first_of.insert(key, outcome.report.trace.clone());
            }
            report.traces.push(outcome.report);
            report.real_summaries.extend(outcome.real_summaries);
        }
    }
    report.total();
    report
}

/// Runs `work` on every input on the current rayon pool, each thread
/// taking the largest file not yet started, and returns the results in
/// input order. A folder's files are of any size, and a replay's time
/// grows with a file's size: started in walk order, one large file taken
/// last keeps one thread busy after the others are done; largest first,
/// the small ones fill in around it.
fn largest_first<R: Send>(inputs: Vec<Input>, work: &(dyn Fn(Input) -> R + Sync)) -> Vec<R> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let n_inputs = inputs.len();
    let mut queue: Vec<(usize, u64, Input)> = inputs
        .into_iter()
        .enumerate()
        .map(|(input_idx, input)| {
            let bytes = std::fs::metadata(&input.file.path).map_or(0, |meta| meta.len());
            (input_idx, bytes, input)
        })
        .collect();
    // Largest first; equal sizes in walk order.
    queue.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let slots: Vec<Mutex<Option<(usize, Input)>>> = queue
        .into_iter()
        .map(|(input_idx, _, input)| Mutex::new(Some((input_idx, input))))
        .collect();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..n_inputs).map(|_| None).collect());
    let take = |slot: &Mutex<Option<(usize, Input)>>| match slot.lock() {
        Ok(mut guard) => guard.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    rayon::scope(|scope| {
        for _ in 0..rayon::current_num_threads().min(n_inputs) {
            scope.spawn(|_| {
                while let Some(slot) = slots.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let Some((input_idx, input)) = take(slot) else {
                        continue;
                    };
                    let result = work(input);
                    let mut results = match results.lock() {
                        Ok(guard) => guard,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    results[input_idx] = Some(result);
                }
            });
        }
    });
    let results = match results.into_inner() {
        Ok(results) => results,
        Err(poisoned) => poisoned.into_inner(),
    };
    results.into_iter().flatten().collect()
}

/// A session's own id, with its file's size where copies must match it
/// too (outside the agents' folders, where two runs of one task share an
/// id).
type SessionId = (String, Option<u64>);

/// What one file of many gave: its rows, each with the session's own id,
/// and the sessions the filter left out.
#[derive(Debug, Default)]
struct FileRows {
    outcomes: Vec<(Option<SessionId>, TraceOutcome)>,
    left_out: LeftOutCounts,
}

/// Imports one file of many (`bytes` long) and replays the sessions the
/// filter keeps.
fn replay_file(input: Input, bytes: u64, options: &ReplayOptions, filter: &Filter) -> FileRows {
    let skipped = |name: String, format: Option<String>, reason: String| TraceOutcome {
        report: TraceReport::skipped(name, format, reason),
        real_summaries: Vec::new(),
    };
    let mut rows = FileRows::default();
    // The agents' own folders hold copies of one session under other
    // names (a resumed or archived copy); elsewhere (evaluation outputs)
    // two runs of one task share an id, so there a copy must also be of
    // the same size to count once.
    let size = input.agent.is_none().then_some(bytes);
    let import = input.file.replay();
    let sessions = match import.outcome {
        FileOutcome::Imported(sessions) => sessions,
        FileOutcome::Skipped(reason) => {
            let reason = reason
                .strip_prefix("skipped: ")
                .map(str::to_owned)
                .unwrap_or(reason);
            let row = skipped(import.path.display().to_string(), None, reason);
            rows.outcomes.push((None, row));
            return rows;
        }
        FileOutcome::Failed(err) => {
            let row = skipped(import.path.display().to_string(), None, error_text(&err));
            rows.outcomes.push((None, row));
            return rows;
        }
    };
    let mut kept = Vec::new();
    for session in sessions {
        match filter.left_out(&session) {
            Some(why) => rows.left_out.add(why),
            None => kept.push(session),
        }
    }
    for loaded in session_names(&import.path, kept) {
        let Loaded::Session { name, session } = loaded else {
            continue;
        };
        let format = session.format.as_str().to_owned();
        let id =
            Some((session.original_id.clone(), size)).filter(|_| !session.original_id.is_empty());
        let row = match replay_session(name.clone(), *session, options) {
            Ok(outcome) => outcome,
            Err(err) => skipped(name, Some(format), err.to_string()),
        };
        rows.outcomes.push((id, row));
    }
    rows
}

/// Replays a file or every session under a folder, without progress
/// reporting (the command adds a progress bar). A single file that cannot
/// be replayed is an error; inside a folder it is a skipped row.
pub fn replay_path(path: &Path, options: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let loaded = load(path)?;
    let is_dir = path.is_dir();
    let mut report = options.empty_report();
    for item in loaded {
        match item {
            Loaded::Skipped { name, reason } => {
                report.traces.push(TraceReport::skipped(name, None, reason))
            }
            Loaded::Session { name, session } => {
                let format = session.format.as_str().to_owned();
                match replay_session(name.clone(), *session, options) {
                    Ok(outcome) => {
                        report.traces.push(outcome.report);
                        report.real_summaries.extend(outcome.real_summaries);
                    }
                    Err(source) if !is_dir => {
                        return Err(ReplayError::Trace {
                            trace: name,
                            source,
                        });
                    }
                    Err(source) => report.traces.push(TraceReport::skipped(
                        name,
                        Some(format),
                        source.to_string(),
                    )),
                }
            }
        }
    }
    if report.replayed() == 0 {
        return Err(ReplayError::NothingReplayed {
            path: path.to_owned(),
        });
    }
    report.total();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::Value;

    use super::*;
    use crate::report::policy_table_with_dollars;
    use crate::testing::Script;

    /// Issue 34 item 6: a factor a tokenizer cannot explain is named with
    /// its likely cause; a tokenizer's own spread says nothing.
    #[test]
    fn a_calibration_no_tokenizer_explains_is_named_in_the_warnings() {
        let calibration = |factor: f64, unbounded_factor: Option<f64>| trace::ModelCalibration {
            model: "claude-opus-4-7".to_owned(),
            factor,
            overhead: 1_000,
            samples: 40,
            source: trace::FitSource::Fit,
            unbounded_factor,
        };
        assert_eq!(calibration_note(&calibration(1.21, None)), None);
        assert_eq!(calibration_note(&calibration(0.8, None)), None);
        let thinking = calibration_note(&calibration(2.26, None)).expect("named");
        assert!(
            thinking.starts_with("the recorded prompts of claude-opus-4-7 are 2.26× what its messages count locally, more than a tokenizer explains: the transcript leaves part of each request out (thinking recorded empty or encrypted"),
            "{thinking}"
        );
        let less = calibration_note(&calibration(0.4, None)).expect("named");
        assert!(
            less.contains("0.40×") && less.contains("less than a tokenizer explains"),
            "{less}"
        );
        let held = calibration_note(&calibration(4.0, Some(9.5))).expect("named");
        assert!(
            held.contains(
                "is 9.5× what its messages count locally; the replay holds the factor at 4"
            ),
            "{held}"
        );
    }

    /// One thread takes the files largest first, so a large file never
    /// starts last; the results still come out in walk order.
    #[test]
    fn files_start_largest_first_and_come_out_in_walk_order() {
        let dir = tempfile::tempdir().expect("a folder");
        for (name, size) in [
            ("a.jsonl", 10),
            ("b.jsonl", 30),
            ("c.jsonl", 20),
            ("d.jsonl", 20),
        ] {
            std::fs::write(dir.path().join(name), vec![b'x'; size]).expect("written");
        }
        let inputs = Input::walk(dir.path()).expect("walked");
        let started = Mutex::new(Vec::new());
        let work = |input: Input| -> String {
            let name = input
                .file
                .path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            started.lock().expect("not poisoned").push(name.clone());
            name
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool");
        let out = pool.install(|| largest_first(inputs, &work));
        assert_eq!(
            started.into_inner().expect("not poisoned"),
            ["b.jsonl", "c.jsonl", "d.jsonl", "a.jsonl"]
        );
        assert_eq!(out, ["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl"]);
    }

    /// Replays a session whose every request is over `--window 32000`:
    /// four turns, each a 40,000-token message (no policy can drop the
    /// message it answers) and its answer.
    fn all_over_the_window() -> ReplayReport {
        let mut script = Script::new();
        for n in 0..4 {
            script.user(&format!("task{n}"), 40_000);
            script.answer("done");
        }
        let options = ReplayOptions {
            window: Some(32_000),
            max_output: Some(4_000),
            counting: Counting::Bytes,
            policies: vec![
                PolicySpec::new(PolicyKind::None),
                PolicySpec::new(PolicyKind::Soba),
            ],
            ..ReplayOptions::default()
        };
        let outcome = replay_session("all-over.jsonl".to_owned(), script.session(), &options)
            .expect("the trace replays");
        let mut report = options.empty_report();
        report.traces.push(outcome.report);
        report.total();
        report
    }

    /// Issue 34 finding 4: a policy that sent nothing was reported as the
    /// cheapest. Now it is marked failed in the table, the JSON and the
    /// groups, and neither priced nor compared.
    #[test]
    fn a_policy_that_sends_nothing_is_failed_never_ranked() {
        let report = all_over_the_window();
        let table = policy_table_with_dollars(&report.totals);
        let soba_row = table
            .lines()
            .find(|line| line.starts_with("soba"))
            .expect("a soba row");
        let cells: Vec<&str> = soba_row.split_whitespace().collect();
        // policy requests overWin failed compact peak mean summIn summOut
        // billed $ recall min …
        assert_eq!(cells[0..4], ["soba", "0", "4", "4/4"]);
        assert_eq!(cells[9..13], ["failed", "failed", "-", "-"]);
        assert_eq!(
            report::failure_lines(&report.totals),
            "none failed: it sent no request within the window at any of the 4 recorded request(s); it has no cost or recall to compare and is not ranked\n\
             soba failed: it sent no request within the window at any of the 4 recorded request(s); it has no cost or recall to compare and is not ranked\n"
        );
        let json = report.to_json();
        let soba = &json["traces"][0]["policies"][1];
        assert_eq!(soba["name"], "soba");
        assert_eq!(soba["status"], "failed");
        assert_eq!(soba["steps"], 4);
        assert_eq!(soba["failedSteps"], 4);
        assert_eq!(soba["failedTraces"], 1);
        assert_eq!(soba["dollars"], Value::Null);
        assert_eq!(soba["billedEquivalentTokens"], Value::Null);
        assert_eq!(soba["probeRecallMean"], Value::Null);
        // The session's group compares nothing: no saving, no denominator.
        let (groups, total) = report.groups(GroupBy::Session);
        assert_eq!(groups[0].failed_sessions, 1);
        assert_eq!(total.saving_dollars(), None);
        assert_eq!(total.saving_tokens(), None);
        let group = &json["groups"]["session"]["total"];
        assert_eq!(group["failedSessions"], 1);
        assert_eq!(group["savingDollars"], Value::Null);
        assert_eq!(
            group::group_table(&groups, &total, GroupBy::Session, true)
                .lines()
                .nth(1)
                .map(|line| line.split_whitespace().collect::<Vec<_>>()),
            Some(vec![
                "all-over.jsonl",
                "pi",
                "4",
                "-",
                "failed",
                "failed",
                "failed",
                "-",
                "-"
            ])
        );
        // The page marks it too, and prices nothing for it.
        let page = chart::html(&report).expect("the page draws");
        assert_eq!(
            page.matches("soba</span> <span class=\"skipped\">failed</span></td>")
                .count(),
            4,
            "the cost and the retention tables, over all sessions and in the session's own section"
        );
        assert!(!page.contains("saving $"), "no saving is shown");
    }
}
