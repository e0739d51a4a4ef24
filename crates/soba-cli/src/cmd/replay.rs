//! `soba replay <file|dir>` (SPEC §15): replays transcripts under SOBA and
//! the peers' policies and prints the table, `--json` or `--html`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use soba_core::tokens::group_thousands;

use crate::cli::{GlobalArgs, ReplayArgs};
use crate::error::{CliError, CliResult};
use soba_replay::discover::{self, Agent, Discovery, Environment};
use soba_replay::{
    self as replay, CacheMode, Filter, Input, LeftOutCounts, Loaded, PolicySpec, ReplayError,
    ReplayOptions, ReplayReport,
};
use soba_workspace::context::Context;
use soba_workspace::replay_config;

/// Runs `soba replay`. SOBA's policy runs under the configuration of the
/// one loader every command uses (files, `SOBA_*` variables, `--set`).
pub fn cmd_replay(args: &ReplayArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let options = options(args, &ctx)?;
    let filter = filter(args)?;
    let agents = agents(args)?;
    let mut report = match &args.path {
        Some(path) if !path.is_dir() => replay_one_file(path, &options, &filter)?,
        Some(dir) => {
            let inputs = Input::walk(dir).map_err(replay_error)?;
            replay_many(inputs, &options, &filter, args.threads, Some(dir))?
        }
        None => {
            let discovery = discover::discover(&Environment::from_process(), &agents);
            print_discovery(&discovery);
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
            .map_err(|err| CliError::user(replay::error_text(&err)).hint("check that its folder exists and is writable and that the disk has room, or pass another --dump-inputs FILE"))?;
        if let Some(path) = &args.dump_inputs {
            crate::output::errln!("wrote {}", crate::output::path(path));
        }
    }
    report.show_dollars = args.cost != "tokens";
    report.zone = Some(filter.zone.clone().unwrap_or_else(local_zone));
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
            stdout.write_all(notices(&report).as_bytes())?;
        } else {
            stdout.write_all(calibration_table(&report).as_bytes())?;
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
    // Replay is CPU-bound and each thread holds a whole trace: more
    // threads than cores (or files) cost memory and gain nothing.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let most = cores.min(files).max(1);
    let threads = match threads {
        0 => most,
        asked if asked > most => {
            crate::output::errln!(
                "-j {asked}: using {most} thread{} ({cores} core{}, {files} file{})",
                if most == 1 { "" } else { "s" },
                if cores == 1 { "" } else { "s" },
                if files == 1 { "" } else { "s" }
            );
            most
        }
        asked => asked,
    };
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
        return Err(match dir {
            // Only when nothing but the filters stood in the way.
            _ if !filter.is_empty() && report.traces.is_empty() => {
                CliError::user("no session passed the filters")
                    .hint("--since, --until or --project left every session out")
            }
            Some(dir) => replay_error(ReplayError::NothingReplayed {
                path: dir.to_owned(),
            }),
            None => CliError::user("no discovered session could be replayed")
                .hint("pass --window N for transcripts whose model soba does not know"),
        });
    }
    Ok(report)
}

/// Says how many sessions the filters left out, and why, on stderr.
fn print_left_out(left_out: &LeftOutCounts) {
    if left_out.total() == 0 {
        return;
    }
    let mut parts = Vec::new();
    for (n, why) in [
        (left_out.day, "started outside the days asked for"),
        (left_out.no_day, "record no start time"),
        (left_out.project, "ran in other folders"),
        (left_out.no_folder, "record no working folder"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {why}"));
        }
    }
    crate::output::errln!("left out by the filters: {}", parts.join(", "));
}

/// `12.3 MB`.
fn human_bytes(bytes: u64) -> String {
    match bytes {
        0..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.2} GB", bytes as f64 / 1e9),
    }
}

/// Prints what discovery found, per agent and folder, on stderr.
fn print_discovery(discovery: &Discovery) {
    for root in &discovery.roots {
        let folder =
            soba_core::terminal::sanitize_line(&root.root.path.display().to_string()).into_owned();
        let agent = root.root.agent;
        match (&root.error, root.exists, &root.same_as) {
            (Some(error), _, _) => crate::output::errln!(
                "{agent}: {folder} {}",
                soba_core::terminal::sanitize_line(error)
            ),
            (None, false, _) => crate::output::errln!("{agent}: no {folder}"),
            (None, true, Some(first)) if *first == root.root.path => {
                crate::output::errln!("{agent}: {folder} named twice (searched once)")
            }
            (None, true, Some(first)) => crate::output::errln!(
                "{agent}: {folder} is {} (searched once)",
                soba_core::terminal::sanitize_line(&first.display().to_string())
            ),
            (None, true, None) => crate::output::errln!(
                "{agent}: {} session file{} in {folder}",
                root.files,
                if root.files == 1 { "" } else { "s" }
            ),
        }
        if let Some(note) = &root.note {
            crate::output::errln!("{agent}: {}", soba_core::terminal::sanitize_line(note));
        }
    }
}

/// `--since`, `--until` and `--project`.
fn filter(args: &ReplayArgs) -> CliResult<Filter> {
    let day = |flag: &str, value: &Option<String>| -> CliResult<Option<jiff::civil::Date>> {
        value
            .as_deref()
            .map(|text| {
                text.trim().parse::<jiff::civil::Date>().map_err(|_| {
                    CliError::usage(format!(
                        "{flag} {}: expected a day as YYYY-MM-DD",
                        soba_core::terminal::sanitize_line(text)
                    ))
                })
            })
            .transpose()
    };
    let since = day("--since", &args.since)?;
    let until = day("--until", &args.until)?;
    let filter = Filter {
        since,
        until,
        project: args
            .project
            .as_deref()
            .map(str::trim)
            .filter(|project| !project.is_empty())
            .map(replay_config::project_folder),
        zone: (since.is_some() || until.is_some()).then(local_zone),
    };
    if let (Some(since), Some(until)) = (filter.since, filter.until)
        && since > until
    {
        return Err(CliError::usage(format!(
            "--since {since} is after --until {until}"
        )));
    }
    Ok(filter)
}

/// The local time zone days are counted in
/// ([`replay_config::local_zone`]), its warning printed.
fn local_zone() -> jiff::tz::TimeZone {
    let (zone, warning) = replay_config::local_zone();
    if let Some(warning) = warning {
        crate::output::errln!("{warning}");
    }
    zone
}

/// `--agent`.
fn agents(args: &ReplayArgs) -> CliResult<Vec<Agent>> {
    let mut agents = Vec::new();
    for name in args.agent.iter().filter(|name| !name.trim().is_empty()) {
        let agent = Agent::parse(name).ok_or_else(|| {
            CliError::usage(format!(
                "--agent {}: use claude-code, codex, pi, gemini or opencode",
                soba_core::terminal::sanitize_line(name)
            ))
        })?;
        agents.push(agent);
    }
    if !agents.is_empty() && (args.path.is_some()) {
        return Err(CliError::usage(
            "--agent picks among discovered sessions: leave out PATH",
        ));
    }
    Ok(agents)
}

/// Returns the per-trace lines: window, maximum output, cache and the
/// calibration of the primary model.
fn calibration_table(report: &ReplayReport) -> String {
    // Names, models and reasons come from the transcripts: one line each,
    // whatever they hold (a newline in a file name cannot fake a row).
    use soba_core::terminal::sanitize_line as line;
    let mut out = String::from("\ntraces\n");
    for trace in &report.traces {
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
fn notices(report: &ReplayReport) -> String {
    use soba_core::terminal::sanitize_line as line;
    let mut out = String::new();
    for trace in &report.traces {
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
    // A summarizer token above 100 main-model tokens is no price anyone
    // pays, and larger values overflow the billed figures.
    if !(args.summarizer_price.is_finite() && (0.0..=100.0).contains(&args.summarizer_price)) {
        return Err(CliError::usage(format!(
            "--summarizer-price {:e}: expected a number from 0 to 100",
            args.summarizer_price
        )));
    }
    if args.window == Some(0) || args.max_output == Some(0) {
        return Err(CliError::usage(
            "--window and --max-output must be positive numbers of tokens",
        ));
    }
    let dump_inputs = match &args.dump_inputs {
        Some(path) => {
            // Never written through a link, as --html; never over a
            // transcript being replayed (create says why).
            if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink()) {
                return Err(CliError::user(format!(
                    "--dump-inputs {}: the path is a symbolic link",
                    crate::output::path(path)
                ))
                .hint("pass the path of a regular file"));
            }
            let replayed: Vec<&std::path::Path> = args.path.iter().map(|p| p.as_path()).collect();
            let dump = replay::fidelity::InputDump::create(path, &replayed)
                .map_err(|err| CliError::user(replay::error_text(&err)).hint("check that its folder exists and is writable and that the disk has room, or pass another --dump-inputs FILE"))?;
            Some(std::sync::Arc::new(dump))
        }
        None => None,
    };
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
        prices: price_table(ctx.config())?,
        dump_inputs,
    })
}

/// The built-in prices with the config's overrides; an entry left out is
/// a warning, two entries naming one model an error.
fn price_table(config: &soba_workspace::config::Config) -> CliResult<replay::price::PriceTable> {
    let priced = config.price_table().map_err(|message| {
        CliError::usage(message)
            .hint("keep the prices under one of the two names in your user config")
    })?;
    for warning in &priced.warnings {
        crate::output::errln!("warning: {warning}");
    }
    Ok(priced.table)
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
