//! `soba replay <file|dir>` (SPEC §15): replays transcripts under SOBA and
//! the peers' policies and prints the table, `--json` or `--html`.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use soba_core::config::CompactionConfig;
use soba_core::tokens::group_thousands;
use soba_provider::registry::ModelRegistry;

use crate::cli::ReplayArgs;
use crate::error::{CliError, CliResult};
use crate::replay::{
    self, CacheMode, Loaded, PolicySpec, ReplayError, ReplayOptions, ReplayReport, TraceReport,
};

/// Runs `soba replay`. `sets` are the global `--set PATH=VALUE` overrides.
pub fn cmd_replay(args: &ReplayArgs, sets: &[String]) -> CliResult {
    let options = options(args, sets)?;
    let loaded = replay::load(&args.path).map_err(replay_error)?;
    let is_dir = args.path.is_dir();
    let mut report = ReplayReport {
        cache: options.cache,
        cache_ttl: options.cache_ttl,
        summarizer_price: options.summarizer_price,
        peer_trigger: options.peer_trigger,
        ..ReplayReport::default()
    };
    let progress = if is_dir && std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(loaded.len() as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    for item in loaded {
        match item {
            Loaded::Skipped { name, reason } => {
                progress.suspend(|| eprintln!("skipped {name}: {reason}"));
                report.traces.push(TraceReport::skipped(name, None, reason));
            }
            Loaded::Session { name, session } => {
                progress.set_message(name.clone());
                let format = session.format.as_str().to_owned();
                match replay::replay_session(name.clone(), *session, &options) {
                    Ok(outcome) => {
                        report.traces.push(outcome.report);
                        report.real_summaries.extend(outcome.real_summaries);
                    }
                    Err(err) if !is_dir => return Err(CliError::user(format!("{name}: {err}"))),
                    Err(err) => {
                        progress.suspend(|| eprintln!("skipped {name}: {err}"));
                        report.traces.push(TraceReport::skipped(
                            name,
                            Some(format),
                            err.to_string(),
                        ));
                    }
                }
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    if report.replayed() == 0 {
        return Err(replay_error(ReplayError::NothingReplayed {
            path: args.path.clone(),
        }));
    }
    report.total();

    if let Some(html_path) = &args.html {
        let page = replay::chart::html(&report)
            .map_err(|err| CliError::internal(format!("the chart could not be drawn: {err}")))?;
        // A relative path stays inside the current folder even through
        // links; the file itself is never a link (`write_output`).
        let here = std::env::current_dir().map_err(|err| {
            CliError::user("cannot find the current folder for --html").caused_by(err)
        })?;
        soba_store::output::write_output(&here, html_path, page.as_bytes(), true)?;
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let text = serde_json::to_string_pretty(&report.to_json())
            .map_err(|err| CliError::internal("the report could not be encoded").caused_by(err))?;
        writeln!(stdout, "{text}")?;
    } else {
        stdout.write_all(report.table().as_bytes())?;
        stdout.write_all(calibration_table(&report).as_bytes())?;
        let summaries = report.real_summary_table();
        if !summaries.is_empty() {
            writeln!(stdout)?;
            stdout.write_all(summaries.as_bytes())?;
        }
    }
    stdout.flush()?;
    Ok(())
}

/// Returns the per-trace lines: window, maximum output, cache and the
/// calibration of the primary model.
fn calibration_table(report: &ReplayReport) -> String {
    let mut out = String::from("\ntraces\n");
    for trace in &report.traces {
        match (&trace.skipped, trace.primary_calibration()) {
            (Some(reason), _) => out.push_str(&format!("  {}  skipped: {reason}\n", trace.trace)),
            (None, Some(calibration)) => out.push_str(&format!(
                "  {}  {} · {} · window {} · max output {} · cache {} · factor {:.4} · overhead {} ({}, {} samples)\n",
                trace.trace,
                trace.format,
                trace.model,
                group_thousands(trace.window),
                group_thousands(trace.max_output),
                trace.cache.map_or("none", CacheMode::as_str),
                calibration.factor,
                group_thousands(calibration.overhead),
                calibration.source.as_str(),
                calibration.samples,
            )),
            (None, None) => out.push_str(&format!("  {}\n", trace.trace)),
        }
    }
    out
}

/// Builds the replay options from the command line.
fn options(args: &ReplayArgs, sets: &[String]) -> CliResult<ReplayOptions> {
    let mut policies = Vec::new();
    for name in &args.policy {
        if name.trim().is_empty() {
            continue;
        }
        policies.push(PolicySpec::parse(name).map_err(CliError::usage)?);
    }
    let cache = match &args.cache {
        Some(mode) => Some(CacheMode::parse(mode).ok_or_else(|| {
            CliError::usage(format!("--cache {mode}: use anthropic, openai or none"))
        })?),
        None => None,
    };
    if !(args.summarizer_price.is_finite() && args.summarizer_price >= 0.0) {
        return Err(CliError::usage(format!(
            "--summarizer-price {}: expected a number ≥ 0",
            args.summarizer_price
        )));
    }
    if args.window == Some(0) || args.max_output == Some(0) {
        return Err(CliError::usage(
            "--window and --max-output must be positive numbers of tokens",
        ));
    }
    let mut compaction = CompactionConfig::default();
    let mut registry = ModelRegistry::new();
    for assignment in sets {
        apply_set(&mut compaction, &mut registry, assignment)?;
    }
    Ok(ReplayOptions {
        policies,
        window: args.window,
        max_output: args.max_output,
        compaction,
        cache,
        summarizer_price: args.summarizer_price,
        cache_ttl: args.cache_ttl,
        peer_trigger: args.peer_trigger,
        counting: replay::Counting::Bpe,
        registry,
    })
}

/// Applies one `--set PATH=VALUE`: `compaction.<key>` (the value read as
/// JSON when it parses, else as a string) or a model's limits,
/// `models.<id>.contextWindow|maxOutputTokens=N` (the id may be quoted).
fn apply_set(
    config: &mut CompactionConfig,
    registry: &mut ModelRegistry,
    assignment: &str,
) -> CliResult {
    let Some((path, value_text)) = assignment.split_once('=') else {
        return Err(
            CliError::usage(format!("--set {assignment}: expected PATH=VALUE"))
                .hint("for example --set compaction.keepRecentTokens=30000"),
        );
    };
    let path = path.trim();
    let value = serde_json::from_str::<Value>(value_text)
        .unwrap_or_else(|_| Value::String(value_text.to_owned()));
    if let Some(key) = path.strip_prefix("compaction.") {
        return config
            .set_key(key, &value)
            .map_err(|err| CliError::user(format!("--set {assignment}: {err}")));
    }
    if let Some(rest) = path.strip_prefix("models.") {
        let (id, key) = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split_once("\".").unwrap_or(("", "")),
            None => rest.rsplit_once('.').unwrap_or(("", "")),
        };
        let n = value.as_u64().filter(|&n| n > 0);
        let mut entry = registry.overrides().get(id).cloned().unwrap_or_default();
        match (id.is_empty(), key, n) {
            (false, "contextWindow", Some(n)) => entry.context_window = Some(n),
            (false, "maxOutputTokens", Some(n)) => entry.max_output_tokens = Some(n),
            _ => {
                return Err(CliError::user(format!(
                    "--set {assignment}: soba replay takes models.<id>.contextWindow or models.<id>.maxOutputTokens with a positive number"
                )));
            }
        }
        registry.set_override(id, entry);
        return Ok(());
    }
    Err(CliError::user(format!(
        "--set {path}: soba replay reads only compaction.* and models.<id>.* keys"
    ))
    .hint("or set the context window with --window N and the output with --max-output N"))
}

fn replay_error(err: ReplayError) -> CliError {
    let hint = match &err {
        ReplayError::NothingReplayed { .. } => {
            Some("pass --window N for transcripts whose model soba does not know")
        }
        _ => None,
    };
    let error = CliError::user(err.to_string());
    match hint {
        Some(hint) => error.hint(hint),
        None => error,
    }
}
