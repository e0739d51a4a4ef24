//! `soba replay <file|dir>` (SPEC §15): replays transcripts under SOBA and
//! the peers' policies and prints the table, `--json` or `--html`.

use std::io::Write;

use indicatif::{ProgressBar, ProgressStyle};
use soba_core::tokens::group_thousands;

use crate::cli::{GlobalArgs, ReplayArgs};
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::replay::{
    self, CacheMode, Loaded, PolicySpec, ReplayError, ReplayOptions, ReplayReport, TraceReport,
};

/// Runs `soba replay`. SOBA's policy runs under the configuration of the
/// one loader every command uses (files, `SOBA_*` variables, `--set`).
pub fn cmd_replay(args: &ReplayArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(global)?;
    ctx.print_warnings();
    let options = options(args, &ctx)?;
    let loaded = replay::load(&args.path).map_err(replay_error)?;
    let is_dir = args.path.is_dir();
    let mut report = ReplayReport {
        cache: options.cache,
        cache_ttl: options.cache_ttl,
        summarizer_price: options.summarizer_price,
        peer_trigger: options.peer_trigger,
        ..ReplayReport::default()
    };
    let progress = if is_dir && crate::output::stderr_is_terminal() {
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
                progress.suspend(|| crate::output::errln!("skipped {name}: {reason}"));
                report.traces.push(TraceReport::skipped(name, None, reason));
            }
            Loaded::Session { name, session } => {
                progress.set_message(soba_core::terminal::sanitize_line(&name).into_owned());
                let format = session.format.as_str().to_owned();
                match replay::replay_session(name.clone(), *session, &options) {
                    Ok(outcome) => {
                        report.traces.push(outcome.report);
                        report.real_summaries.extend(outcome.real_summaries);
                    }
                    Err(err) if !is_dir => return Err(CliError::user(format!("{name}: {err}"))),
                    Err(err) => {
                        progress.suspend(|| crate::output::errln!("skipped {name}: {err}"));
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
    let mut stdout = crate::output::stdout();
    if args.json {
        let text = serde_json::to_string_pretty(&report.to_json())
            .map_err(|err| CliError::internal("the report could not be encoded").caused_by(err))?;
        writeln!(stdout, "{}", soba_core::terminal::sanitize_json(&text))?;
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
        for warning in &trace.warnings {
            out.push_str(&format!("    warning: {warning}\n"));
        }
    }
    out
}

/// Builds the replay options from the command line.
fn options(args: &ReplayArgs, ctx: &Context) -> CliResult<ReplayOptions> {
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
    Ok(ReplayOptions {
        policies,
        window: args.window,
        max_output: args.max_output,
        compaction: ctx.config().compaction.clone(),
        cache,
        summarizer_price: args.summarizer_price,
        cache_ttl: args.cache_ttl,
        peer_trigger: args.peer_trigger,
        counting: replay::Counting::Bpe,
        registry: ctx.config().registry(),
    })
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
