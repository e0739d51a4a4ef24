//! `soba demo`: runs the engine offline on the generated session and prints
//! the timeline of triggers and the result lines.

use std::io::Write;

use std::sync::{Arc, Mutex};

use soba_core::budget::Budget;
use soba_core::config::CompactionConfig;
use soba_engine::event::{EngineEvent, Outcome};

use crate::cli::{DemoArgs, GlobalArgs};
use crate::error::{CliError, CliResult, ErrorKind};
use soba_workspace::demo;
use soba_workspace::paths::{Env, Locations, Workspace};

/// Counters the timeline keeps for the closing lines.
#[derive(Debug, Default)]
struct Tally {
    turn: usize,
    hygiene: usize,
    completed: Vec<String>,
    /// The newest capsule's id as printed, and what it kept.
    newest: Option<(String, String)>,
}

/// What the demo shows, printed before it runs.
const INTRO: &str = "\
It runs a scripted coding agent (a scripted model, SOBA's real tools) through a session
that outgrows its context, and prints each time SOBA prunes old tool output (hygiene) or
compacts the conversation into a capsule, and what the capsule kept.";

/// The legend, printed once after the header.
fn legend(soft_gate: &str) -> String {
    format!(
        "\
legend:
  effective       tokens the next request sends (system prompt, tools, live conversation)
  hygiene         old tool outputs replaced by stubs above hygieneLimit; nothing summarized
  capsule (ck_…)  the summary that replaces the older conversation; the recent tail stays verbatim
  softGate {soft_gate:<6} soft compactions may fire from here on, well below autoLimit, when they pay:
    turn_complete   a turn ended: a natural pause to compact
    read_cost       re-reading what a compaction would reclaim now costs more than compacting
    milestone       the agent recorded a checkpoint
    auto_threshold  effective reached autoLimit"
    )
}

/// The signals that stop `soba demo`: SIGINT, SIGTERM and SIGHUP.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

/// Waits for SIGINT, SIGTERM or SIGHUP and returns the error to exit with.
async fn stop_signal(mut signals: StopSignals) -> CliError {
    let (kind, name) = tokio::select! {
        _ = signals.interrupt.recv() => (ErrorKind::Interrupted, "interrupted"),
        _ = signals.terminate.recv() => (ErrorKind::Terminated, "terminated"),
        _ = signals.hangup.recv() => (ErrorKind::HungUp, "hung up (its terminal was closed)"),
    };
    CliError {
        kind,
        message: format!("soba demo {name}"),
        source: None,
        hints: Vec::new(),
    }
}

/// Runs `soba demo`. SIGINT, SIGTERM and SIGHUP stop it (exit 130, 143
/// and 129) after the temporary directory is removed, as the first line
/// promises; a `--keep` directory stays.
pub fn cmd_demo(args: &DemoArgs, global: &GlobalArgs) -> CliResult {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| CliError::internal("cannot start the async runtime").caused_by(err))?;
    // Installed before the directory exists, so no signal can leave it.
    let signals = {
        let _entered = runtime.enter();
        let install = |kind| {
            tokio::signal::unix::signal(kind).map_err(|err| {
                CliError::internal("cannot install the signal handlers").caused_by(err)
            })
        };
        StopSignals {
            interrupt: install(tokio::signal::unix::SignalKind::interrupt())?,
            terminate: install(tokio::signal::unix::SignalKind::terminate())?,
            hangup: install(tokio::signal::unix::SignalKind::hangup())?,
        }
    };
    let (dir, temp) = demo::prepare_dir(args.keep.as_deref())?;
    // A kept demo's session goes where the commands run in its workspace
    // look (`cd DIR/workspace && soba show`); a temporary one stays inside
    // the directory removed at exit.
    let sessions_dir = if temp.is_some() {
        dir.join("sessions")
    } else {
        let workspace_dir = dir.join("workspace");
        std::fs::create_dir_all(&workspace_dir).map_err(|err| {
            CliError::user(format!("cannot create {}", workspace_dir.display())).caused_by(err)
        })?;
        let workspace = Workspace::at(&workspace_dir)?;
        Locations::resolve(
            &Env::from_process(),
            &workspace,
            global.session_dir.as_deref(),
        )?
        .sessions_dir
    };
    let places = soba_engine::demo::DemoPlaces {
        dir: dir.clone(),
        sessions_dir,
        session_log: Arc::new(std::sync::OnceLock::new()),
    };
    let model = soba_engine::demo::demo_model();
    let budget = Budget::compute(
        model.context_window,
        model.max_output_tokens,
        &CompactionConfig::default(),
    )
    .map_err(|err| CliError::internal("the demo model's budget is impossible").caused_by(err))?;
    let json = args.json;
    if !json {
        crate::output::outln!(
            "soba demo: the compaction engine, offline, on a generated coding session"
        )?;
        crate::output::outln!("{INTRO}")?;
        crate::output::outln!(
            "directory: {}{}",
            dir.display(),
            if temp.is_some() {
                " (removed at exit; --keep DIR keeps it)"
            } else {
                ""
            }
        )?;
        crate::output::outln!(
            "model {}: window {} · maxOutput {} · hardLimit {} · autoLimit {} · hygieneLimit {} · keepRecent {} · softGate {}",
            model.id,
            model.context_window,
            model.max_output_tokens,
            budget.hard_limit(),
            budget.auto_limit(),
            budget.hygiene_limit(),
            budget.keep_recent(),
            budget.soft_gate()
        )?;
        crate::output::outln!("{}", legend(&budget.soft_gate().to_string()))?;
        crate::output::outln!()?;
    }
    let tally = Arc::new(Mutex::new(Tally::default()));
    let sink_tally = tally.clone();
    let sink_log = places.session_log.clone();
    let sink: soba_engine::barrier::EventSink = Arc::new(move |event: EngineEvent| {
        let mut stdout = crate::output::stdout();
        if json {
            let _ = writeln!(
                stdout,
                "{}",
                soba_core::terminal::sanitize_json(&event.to_json().to_string())
            );
            return;
        }
        let Ok(mut tally) = sink_tally.lock() else {
            return;
        };
        match &event {
            EngineEvent::TurnStarted { .. } => tally.turn += 1,
            EngineEvent::Hygiene {
                reclaimed,
                stubbed,
                tokens_before,
                ..
            } => {
                tally.hygiene += 1;
                let _ = writeln!(
                    stdout,
                    "turn {:>2}  hygiene: {stubbed} tool outputs pruned, {reclaimed} tokens reclaimed (effective was {tokens_before})",
                    tally.turn
                );
            }
            EngineEvent::CompactionStart {
                trigger,
                tokens_before,
                ..
            } => {
                let _ = writeln!(
                    stdout,
                    "turn {:>2}  Compacting context before response ({}, {} tokens)",
                    tally.turn,
                    trigger.as_str(),
                    tokens_before
                );
            }
            EngineEvent::CompactionEnd(end) => {
                // The capsule is in the log before its end is reported:
                // its id at the session's unique length, and what it kept.
                let newest = if end.outcome == Outcome::Completed {
                    sink_log.get().and_then(|log| demo::newest_capsule(log))
                } else {
                    None
                };
                let line = end.result_line(|id| match &newest {
                    Some((shown, _)) if id.matches_short(shown) => shown.clone(),
                    _ => id.as_str().to_owned(),
                });
                if end.outcome == Outcome::Completed {
                    tally.completed.push(end.trigger.as_str().to_owned());
                    let _ = writeln!(stdout, "turn {:>2}  {line}", tally.turn);
                    if let Some((_, kept)) = &newest {
                        let _ = writeln!(stdout, "          {kept}");
                    }
                    tally.newest = newest;
                    return;
                }
                let _ = writeln!(stdout, "turn {:>2}  {line}", tally.turn);
            }
            EngineEvent::Warning { message } => {
                let _ = writeln!(stdout, "turn {:>2}  warning: {message}", tally.turn);
            }
            _ => {}
        }
    });
    let outcome = runtime.block_on(async {
        tokio::select! {
            summary = soba_engine::demo::run(&places, args.seed, sink) => Ok(summary),
            stopped = stop_signal(signals) => Err(stopped),
        }
    });
    let summary = match outcome {
        Ok(summary) => {
            summary.map_err(|err| CliError::internal("the demo failed").caused_by(err))?
        }
        Err(stopped) => {
            // The demo's future is dropped: its tools' processes are killed
            // with it. Stop the runtime before removing their workspace.
            drop(runtime);
            let removed = temp.map(|temp| (temp.path().to_path_buf(), temp.close()));
            return Err(match removed {
                Some((path, Err(err))) => {
                    stopped.hint(format!("could not remove {}: {err}", path.display()))
                }
                Some((_, Ok(()))) => stopped.hint("the temporary directory was removed"),
                None => stopped,
            });
        }
    };
    if !json {
        let tally = tally
            .lock()
            .map_err(|_| CliError::internal("demo tally poisoned"))?;
        let mut by_trigger: Vec<(String, usize)> = Vec::new();
        for trigger in &tally.completed {
            match by_trigger.iter_mut().find(|(name, _)| name == trigger) {
                Some((_, n)) => *n += 1,
                None => by_trigger.push((trigger.clone(), 1)),
            }
        }
        let triggers = by_trigger
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let outcomes = demo::flight_outcomes(&summary.session_log);
        crate::output::outln!()?;
        crate::output::outln!(
            "result: {} turns, {} failed · {} hygiene passes · {} capsules ({}) · {} compactions skipped ({} because they would not pay off, {} not due yet) · {} other barrier outcomes",
            summary.turns,
            summary.failed_turns.len(),
            tally.hygiene,
            tally.completed.len(),
            if triggers.is_empty() {
                "none".to_owned()
            } else {
                triggers
            },
            outcomes.skipped_roi + outcomes.skipped_not_due,
            outcomes.skipped_roi,
            outcomes.skipped_not_due,
            outcomes.other
        )?;
        if let Some((id, kept)) = &tally.newest {
            crate::output::outln!("newest capsule {id} {kept}")?;
        }
        if temp.is_some() {
            crate::output::outln!(
                "session log: {} (removed with the directory; soba demo --keep DIR keeps it)",
                summary.session_log.display()
            )?;
        } else {
            let session = summary
                .session_log
                .file_stem()
                .map(|stem| stem.to_string_lossy().chars().take(8).collect::<String>())
                .unwrap_or_default();
            crate::output::outln!("session log: {}", summary.session_log.display())?;
            crate::output::outln!(
                "look at it from its workspace, where soba finds the session by itself:"
            )?;
            crate::output::outln!("  cd {}", dir.join("workspace").display())?;
            crate::output::outln!(
                "  soba sessions · soba show · soba show {session} --entries · soba capsule list · soba budget · soba stats"
            )?;
            if let Some((id, _)) = &tally.newest {
                crate::output::outln!(
                    "  soba capsule export {id} newest.capsule.md   (the newest capsule as markdown)"
                )?;
            }
        }
    }
    for failure in &summary.failed_turns {
        crate::output::errln!("demo turn did not complete: {failure}");
    }
    if !summary.failed_turns.is_empty() {
        return Err(CliError::internal(format!(
            "{} demo turns did not complete",
            summary.failed_turns.len()
        )));
    }
    drop(temp);
    Ok(())
}
