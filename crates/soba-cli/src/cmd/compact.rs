//! `soba compact [--session ID] [--save] [instructions]`: runs the engine's
//! barrier with the `user` trigger on a session, as `/compact` does when
//! idle, and prints the result line. `--save` mirrors a `full` capsule to
//! Project Memory (`.soba/memory/<ck>.capsule.md`) and otherwise says why not.

use std::io::Write;
use std::sync::Arc;

use soba_core::tokens::group_thousands;
use soba_engine::barrier::{EventSink, Forced, Preflight};
use soba_engine::event::{CompactionEnd, EngineEvent, Outcome};
use soba_engine::tool::ToolRegistry;
use soba_store::reader::read_log;
use tokio_util::sync::CancellationToken;

use crate::cli::{CompactArgs, GlobalArgs};
use crate::error::{CliError, CliResult, ErrorKind};
use soba_workspace::capsule;
use soba_workspace::context::Context;
use soba_workspace::memory::{self, NotSaved};
use soba_workspace::setup::{self, ModelSetup};

/// Runs `soba compact`.
pub fn cmd_compact(args: &CompactArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    let _logs = crate::logging::init(&ctx.env);
    crate::output::print_warnings(&ctx);
    let summary = ctx.select_session(args.session.as_deref())?;
    let log = read_log(&summary.path)?;
    let path: Vec<_> = log
        .path()
        .iter()
        .map(|logged| logged.entry.clone())
        .collect();
    let model = setup::model_for_session_with(&ctx, args.model.as_deref(), &path, log.header())?;
    drop(log);
    let setup = ModelSetup::resolve(&ctx, &model)?;
    setup.budget(&ctx)?;
    let mut notes = Vec::new();
    let summarizer = setup::summarizer(&ctx, &setup, &mut notes)?;
    for note in notes {
        crate::output::errln!("{note}");
    }
    let tools = ToolRegistry::builtin();
    let (mut core, diagnostics) = setup::open_session(&ctx, &summary.path, &setup, &tools)?;
    for diagnostic in diagnostics {
        crate::output::errln!("warning: session {}: {diagnostic}", summary.id);
    }
    // A native failure never changes the outcome (SPEC §10.3): without the
    // compactor the portable capsule is made alone.
    if let Err(err) = setup::install_native(&ctx, &setup, &mut core) {
        crate::output::errln!(
            "note: native continuation unavailable ({}); the portable capsule is made alone",
            err.message
        );
    }
    let core = Arc::new(tokio::sync::Mutex::new(core));
    let sink: EventSink = Arc::new(|event| match event {
        EngineEvent::Hygiene {
            reclaimed, stubbed, ..
        } => crate::output::errln!(
            "hygiene: {stubbed} tool outputs pruned, {reclaimed} tokens reclaimed"
        ),
        EngineEvent::CompactionStart {
            trigger,
            tokens_before,
            estimate,
            ..
        } => {
            crate::output::errln!(
                "Compacting context ({}, {tokens_before} tokens)",
                trigger.as_str()
            );
            if let Some(estimate) = estimate {
                crate::output::errln!(
                    "{} · Ctrl-C cancels",
                    soba_core::terminal::Line(&estimate.line())
                );
            }
        }
        EngineEvent::Warning { message } => crate::output::errln!("warning: {message}"),
        _ => {}
    });
    let barrier = setup::barrier(core.clone(), sink, summarizer);
    let instructions = Some(args.instructions.join(" "))
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty());
    let runtime = setup::runtime()?;
    let (decided, interrupted) = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let run = barrier.preflight(Some(Forced::User { instructions }), &cancel);
        tokio::pin!(run);
        let mut interrupted = false;
        loop {
            tokio::select! {
                decided = &mut run => break (decided, interrupted),
                _ = tokio::signal::ctrl_c(), if !interrupted => {
                    interrupted = true;
                    cancel.cancel();
                }
            }
        }
    });
    let end: CompactionEnd = match decided? {
        Preflight::Compacted(end) | Preflight::EndTurn(end) => end,
        Preflight::Proceed => {
            crate::output::outln!("nothing to compact in session {}", summary.id)?;
            return Ok(());
        }
    };
    let short = setup::short_id_len(&summary.path);
    let line = end.result_line(|id| id.short_with(short));
    let mut stdout = crate::output::stdout();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    match end.outcome {
        Outcome::Cancelled if interrupted => {
            return Err(CliError {
                kind: ErrorKind::Interrupted,
                message: "interrupted (SIGINT): nothing was appended".to_owned(),
                source: None,
                hints: Vec::new(),
            });
        }
        Outcome::Failed | Outcome::Cancelled | Outcome::Stale => {
            return Err(CliError::user(format!(
                "compaction {}: {}",
                end.outcome.as_str(),
                end.reason.as_deref().unwrap_or("no reason recorded")
            )));
        }
        Outcome::Completed | Outcome::Skipped => {}
    }
    if end.outcome == Outcome::Skipped && !args.save {
        // Someone reading what SOBA would keep of a session whose live
        // context is all within the keep window (an imported session that
        // ends just after its own compaction) gets the one command that
        // shows it.
        writeln!(
            stdout,
            "to read what SOBA would keep of this session as it is, write a handoff capsule: soba capsule create \"title\""
        )?;
        stdout.flush()?;
    }
    if args.save {
        save_to_memory(&ctx, &core, &summary.id, &end, &mut stdout)?;
    }
    Ok(())
}

/// Mirrors the capsule to `.soba/memory/<ck>.capsule.md` when it is full
/// quality, and otherwise says why not (SPEC §12).
fn save_to_memory(
    ctx: &Context,
    core: &Arc<tokio::sync::Mutex<soba_engine::session::SessionCore>>,
    session_id: &str,
    end: &CompactionEnd,
    stdout: &mut impl Write,
) -> CliResult {
    let id = match memory::savable(end) {
        Ok(id) => id,
        Err(NotSaved::NoCapsule { reason, skipped }) => {
            writeln!(
                stdout,
                "not saved to Project Memory: no capsule was made ({}){}",
                reason.as_deref().unwrap_or("nothing to compact"),
                if skipped {
                    "; to save the state as it is, write a handoff: soba capsule create \"title\""
                } else {
                    ""
                }
            )?;
            return Ok(stdout.flush()?);
        }
        Err(NotSaved::Degraded { reason }) => {
            writeln!(
                stdout,
                "not saved to Project Memory: the capsule is degraded (fallback used: {}); only full capsules are saved",
                reason.as_deref().unwrap_or("the summarizer failed")
            )?;
            return Ok(stdout.flush()?);
        }
    };
    let saved = memory::save(&ctx.workspace, &core.blocking_lock(), id, session_id)?;
    writeln!(
        stdout,
        "saved to Project Memory: .soba/memory/{}.capsule.md ({} tokens; {})",
        saved.id,
        group_thousands(saved.rendered.tokens.get()),
        capsule::redaction_note(&saved.rendered)
    )?;
    Ok(stdout.flush()?)
}
