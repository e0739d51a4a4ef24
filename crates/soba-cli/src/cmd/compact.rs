//! `soba compact [--session ID] [--save] [instructions]`: runs the engine's
//! barrier with the `user` trigger on a session, as `/compact` does when
//! idle, and prints the result line. `--save` mirrors a `full` capsule to
//! Project Memory (`.soba/memory/<ck>.capsule.md`) and otherwise says why not.

use std::io::Write;
use std::sync::Arc;

use soba_core::render::CapsuleView;
use soba_core::tokens::group_thousands;
use soba_core::{EntryBody, Quality};
use soba_engine::barrier::{EventSink, Forced, Preflight};
use soba_engine::event::{CompactionEnd, EngineEvent, Outcome};
use soba_engine::tool::ToolRegistry;
use soba_store::reader::read_log;
use tokio_util::sync::CancellationToken;

use crate::cli::{CompactArgs, GlobalArgs};
use crate::cmd::capsule::{redaction_note, render_file, title_of, write_file};
use crate::context::Context;
use crate::engine::{self, ModelSetup};
use crate::error::{CliError, CliResult, ErrorKind};

/// Runs `soba compact`.
pub fn cmd_compact(args: &CompactArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(global)?;
    let _logs = crate::logging::init(&ctx.env);
    ctx.print_warnings();
    let summary = ctx.select_session(args.session.as_deref())?;
    let log = read_log(&summary.path)?;
    let path: Vec<_> = log
        .path()
        .iter()
        .map(|logged| logged.entry.clone())
        .collect();
    let model = engine::model_for_session_with(&ctx, args.model.as_deref(), &path, log.header())?;
    drop(log);
    let setup = ModelSetup::resolve(&ctx, &model)?;
    setup.budget(&ctx)?;
    let mut notes = Vec::new();
    let summarizer = engine::summarizer(&ctx, &setup, &mut notes)?;
    for note in notes {
        crate::output::errln!("{note}");
    }
    let tools = ToolRegistry::builtin();
    let (mut core, diagnostics) = engine::open_session(&ctx, &summary.path, &setup, &tools)?;
    for diagnostic in diagnostics {
        crate::output::errln!("warning: session {}: {diagnostic}", summary.id);
    }
    // A native failure never changes the outcome (SPEC §10.3): without the
    // compactor the portable capsule is made alone.
    if let Err(err) = engine::install_native(&ctx, &setup, &mut core) {
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
    let barrier = engine::barrier(core.clone(), sink, summarizer);
    let instructions = Some(args.instructions.join(" "))
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty());
    let runtime = engine::runtime()?;
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
    let short = engine::short_id_len(&summary.path);
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
    let (Outcome::Completed, Some(id)) = (end.outcome, &end.checkpoint_id) else {
        writeln!(
            stdout,
            "not saved to Project Memory: no capsule was made ({}){}",
            end.reason.as_deref().unwrap_or("nothing to compact"),
            if end.outcome == Outcome::Skipped {
                "; to save the state as it is, write a handoff: soba capsule create \"title\""
            } else {
                ""
            }
        )?;
        return Ok(stdout.flush()?);
    };
    if end.quality != Some(Quality::Full) {
        writeln!(
            stdout,
            "not saved to Project Memory: the capsule is degraded (fallback used: {}); only full capsules are saved",
            end.reason.as_deref().unwrap_or("the summarizer failed")
        )?;
        return Ok(stdout.flush()?);
    }
    let core = core.blocking_lock();
    let Some(entry) = core.entry(id) else {
        return Err(CliError::internal(format!(
            "capsule {id} was appended but is not in the session"
        )));
    };
    let EntryBody::Capsule(capsule) = &entry.body else {
        return Err(CliError::internal(format!("{id} is not a capsule entry")));
    };
    let leaf = core
        .leaf()
        .map(|leaf| leaf.as_str().to_owned())
        .unwrap_or_default();
    let rendered = render_file(
        &CapsuleView::from(capsule.as_ref()),
        id.as_str(),
        &title_of(capsule, id, core.short_id_len_now()),
        session_id,
        &leaf,
        core.counter().as_ref(),
    );
    let file = ctx
        .workspace
        .project_dir()
        .join("memory")
        .join(format!("{id}.capsule.md"));
    write_file(&ctx.workspace.root, &file, &rendered.text, false)?;
    writeln!(
        stdout,
        "saved to Project Memory: .soba/memory/{id}.capsule.md ({} tokens; {})",
        group_thousands(rendered.tokens.get()),
        redaction_note(&rendered)
    )?;
    Ok(stdout.flush()?)
}
