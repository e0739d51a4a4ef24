//! `soba replay <file|dir>` (SPEC §15): replays transcripts under SOBA and
//! the peers' policies and prints the table, `--json` or `--html`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{GlobalArgs, ReplayArgs};
use crate::error::{CliError, CliResult};
use soba_replay::discover::{self, Environment};
use soba_replay::{
    self as replay, Filter, Input, LeftOutCounts, Loaded, ReplayError, ReplayOptions, ReplayReport,
};
use soba_workspace::context::Context;
use soba_workspace::replay_config::{self, ReplayFlags, replay_error};

/// Prints a line on stderr; the library's notes and warnings go here.
fn warn(line: String) {
    crate::output::errln!("{line}");
}

/// Runs `soba replay`. SOBA's policy runs under the configuration of the
/// one loader every command uses (files, `SOBA_*` variables, `--set`).
pub fn cmd_replay(args: &ReplayArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let flags = ReplayFlags {
        path: args.path.as_deref(),
        policy: &args.policy,
        window: args.window,
        max_output: args.max_output,
        cache: args.cache.as_deref(),
        summarizer_price: args.summarizer_price,
        cache_ttl: args.cache_ttl,
        peer_trigger: args.peer_trigger,
        dump_inputs: args.dump_inputs.as_deref(),
    };
    let options = replay_config::options(&ctx, &flags, &mut warn)?;
    let filter = replay_config::filter(
        args.since.as_deref(),
        args.until.as_deref(),
        args.project.as_deref(),
        &mut warn,
    )?;
    let agents = replay_config::agents(&args.agent, args.path.is_some())?;
    let mut report = match &args.path {
        Some(path) if !path.is_dir() => replay_one_file(path, &options, &filter)?,
        Some(dir) => {
            let inputs = Input::walk(dir).map_err(replay_error)?;
            replay_many(inputs, &options, &filter, args.threads, Some(dir))?
        }
        None => {
            let discovery = discover::discover(&Environment::from_process(), &agents);
            for line in discovery.lines() {
                crate::output::errln!("{line}");
            }
            if discovery.files.is_empty() {
                return Err(CliError::user(
                    "no sessions of Claude Code, Codex, pi, Gemini CLI or opencode were found in their standard places",
                )
                .hint("pass a transcript or a folder: soba replay PATH"));
            }
            let inputs = Input::discovered(discovery);
            replay_many(inputs, &options, &filter, args.threads, None)?
        }
    };

    if let Some(dump) = &options.dump_inputs {
        dump.finish()
            .map_err(|err| replay_config::dump_error(&err))?;
        if let Some(path) = &args.dump_inputs {
            crate::output::errln!("wrote {}", crate::output::path(path));
        }
    }
    report.show_dollars = args.cost != "tokens";
    report.zone = Some(
        filter
            .zone
            .clone()
            .unwrap_or_else(|| replay_config::local_zone_warned(&mut warn)),
    );
    if let Some(html_path) = &args.html {
        let page = replay::chart::html(&report)
            .map_err(|err| CliError::internal(format!("the chart could not be drawn: {err}")))?;
        // A relative path stays inside the current folder even through
        // links; the file itself is never a link (`write_output`).
        let here = std::env::current_dir().map_err(|err| {
            CliError::user("cannot find the current folder for --html").caused_by(err)
        })?;
        soba_store::output::write_output(&here, html_path, page.as_bytes(), true)?;
        crate::output::errln!("wrote {}", crate::output::path(html_path));
    }
    let mut stdout = crate::output::stdout();
    if args.json {
        let text = serde_json::to_string_pretty(&report.to_json())
            .map_err(|err| CliError::internal("the report could not be encoded").caused_by(err))?;
        writeln!(stdout, "{}", soba_core::terminal::sanitize_json(&text))?;
    } else {
        stdout.write_all(report.table().as_bytes())?;
        if report.traces.len() > 1 {
            // Many sessions: one row each (or per day, per project) in
            // place of each trace's calibration line.
            let by = replay::GroupBy::parse(&args.by).unwrap_or(replay::GroupBy::Session);
            let (groups, total) = report.groups(by);
            writeln!(stdout)?;
            stdout.write_all(
                replay::group::group_table(&groups, &total, by, report.show_dollars).as_bytes(),
            )?;
            writeln!(stdout, "\nbilled per {}:", by.as_str())?;
            stdout.write_all(
                replay::group::group_bill_table(&groups, &total, by, report.show_dollars)
                    .as_bytes(),
            )?;
            stdout.write_all(report.notices().as_bytes())?;
        } else {
            stdout.write_all(report.calibration_table().as_bytes())?;
        }
        let summaries = report.real_summary_table();
        if !summaries.is_empty() {
            writeln!(stdout)?;
            stdout.write_all(summaries.as_bytes())?;
        }
    }
    stdout.flush()?;
    Ok(())
}

/// Replays a single file: its errors are errors.
fn replay_one_file(
    path: &std::path::Path,
    options: &ReplayOptions,
    filter: &Filter,
) -> CliResult<ReplayReport> {
    let mut report = options.empty_report();
    for item in replay::load(path).map_err(replay_error)? {
        let Loaded::Session { name, session } = item else {
            continue;
        };
        if let Some(why) = filter.left_out(&session) {
            report.left_out.add(why);
            continue;
        }
        let outcome = replay::replay_session(name.clone(), *session, options)
            .map_err(|err| CliError::user(format!("{name}: {err}")))?;
        report.traces.push(outcome.report);
        report.real_summaries.extend(outcome.real_summaries);
    }
    if report.replayed() == 0 {
        if report.left_out.total() > 0 {
            print_left_out(&report.left_out);
            return Err(CliError::user(format!(
                "the filters left out every session of {}",
                path.display()
            ))
            .hint("--since, --until or --project left every session out"));
        }
        return Err(replay_error(ReplayError::NothingReplayed {
            path: path.to_owned(),
        }));
    }
    report.total();
    Ok(report)
}

/// Replays many files in parallel with a progress bar on stderr (files,
/// bytes, time left) and a last line with the wall time.
fn replay_many(
    inputs: Vec<Input>,
    options: &ReplayOptions,
    filter: &Filter,
    threads: usize,
    dir: Option<&std::path::Path>,
) -> CliResult<ReplayReport> {
    // Unreadable subfolders are rows too, but not files.
    let files = inputs
        .iter()
        .filter(|input| input.file.walk_error().is_none())
        .count();
    let bytes: u64 = inputs
        .iter()
        .filter(|input| input.file.walk_error().is_none())
        .map(|input| std::fs::metadata(&input.file.path).map_or(0, |meta| meta.len()))
        .sum();
    let progress = if crate::output::stderr_is_terminal() {
        let bar = ProgressBar::new(bytes);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} · {msg} · {eta} left")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let done = AtomicUsize::new(0);
    progress.set_message(format!("0/{files} files"));
    let started = Instant::now();
    let (threads, note) = replay::thread_count(threads, files);
    if let Some(note) = note {
        crate::output::errln!("{note}");
    }
    let report = replay::replay_inputs(inputs, options, filter, threads, &|file| {
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress.inc(file.bytes);
        progress.set_message(format!("{n}/{files} files"));
    });
    progress.finish_and_clear();
    for trace in &report.traces {
        if let Some(reason) = &trace.skipped {
            crate::output::errln!(
                "skipped {}: {}",
                soba_core::terminal::sanitize_line(&trace.trace),
                soba_core::terminal::sanitize_line(reason)
            );
        }
    }
    crate::output::errln!(
        "replayed {} session{} from {files} file{} ({}) in {:.1} s on {threads} thread{}",
        report.replayed(),
        if report.replayed() == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" },
        human_bytes(bytes),
        started.elapsed().as_secs_f64(),
        if threads == 1 { "" } else { "s" }
    );
    print_left_out(&report.left_out);
    if report.replayed() == 0 {
        return Err(replay_config::nothing_replayed(
            dir,
            filter,
            report.traces.len(),
        ));
    }
    Ok(report)
}

/// Says how many sessions the filters left out, and why, on stderr.
fn print_left_out(left_out: &LeftOutCounts) {
    if let Some(line) = left_out.line() {
        crate::output::errln!("{line}");
    }
}

/// `12.3 MB`.
fn human_bytes(bytes: u64) -> String {
    match bytes {
        0..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.2} GB", bytes as f64 / 1e9),
    }
}
