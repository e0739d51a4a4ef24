//! `soba demo`: runs the engine offline on the generated session and prints
//! the timeline of triggers and the result lines
//! (`soba_workspace::demo::timeline` words them).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use soba_core::budget::Budget;
use soba_core::config::CompactionConfig;
use soba_engine::event::EngineEvent;

use crate::cli::{DemoArgs, GlobalArgs};
use crate::error::{CliError, CliResult, ErrorKind};
use soba_workspace::demo;
use soba_workspace::demo::timeline::{self, Timeline};

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
    let sessions_dir = demo::sessions_dir(&dir, temp.is_some(), global.session_dir.as_deref())?;
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
        for line in timeline::header_lines(&dir, temp.is_some(), &model, &budget) {
            crate::output::outln!("{line}")?;
        }
    }
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let sink_timeline = timeline.clone();
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
        let Ok(mut timeline) = sink_timeline.lock() else {
            return;
        };
        for line in timeline.lines(&event, sink_log.get().map(PathBuf::as_path)) {
            let _ = writeln!(stdout, "{line}");
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
        let timeline = timeline
            .lock()
            .map_err(|_| CliError::internal("demo tally poisoned"))?;
        for line in timeline.closing_lines(&summary, &dir, temp.is_some()) {
            crate::output::outln!("{line}")?;
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
