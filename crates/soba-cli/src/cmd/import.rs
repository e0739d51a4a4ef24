//! `soba import <file|dir> [--out DIR] [--dry-run] [--json]` (SPEC §3.4):
//! converts other agents' transcripts into SOBA sessions, one per source
//! session, keeping the original ids in the header's `importedFrom`.

use std::collections::HashMap;
use std::io::Write;

use serde_json::{Value, json};
use soba_core::terminal::Line;
use soba_core::tokens::group_thousands;
use soba_store::import::{FileOutcome, ImportedSession, dir_files, import_path, previous_imports};
use soba_store::log::remove_stale_partials;

use crate::cli::{GlobalArgs, ImportArgs};
use crate::error::{CliError, CliResult};
use soba_workspace::context::Context;
use soba_workspace::import::{self, FirstResume, Written};

/// The line `soba import` prints when the history is over the window.
fn first_resume_line(resume: &FirstResume) -> Option<String> {
    resume.over_window().then(|| {
        format!(
            "  first resume: {} tokens of history, over {}'s {}-token window: `soba run -c` compacts it first. \
             The summarizer reads its newest part (at most compaction.summarizer.maxChunks {} calls, the \
             estimate is shown before it starts); the older part is kept as local facts (the original task, \
             files, commands, errors). Nothing is dropped from the session file.\n",
            group_thousands(resume.live_tokens),
            Line(&resume.model),
            group_thousands(resume.context_window),
            resume.max_chunks
        )
    })
}

/// Diagnostics printed per session in plain output; `--json` lists all.
const MAX_DIAGNOSTICS_SHOWN: usize = 10;

/// Runs `soba import`.
pub fn cmd_import(args: &ImportArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| ctx.locations.sessions_dir.clone());
    let source = &args.path;
    let metadata = std::fs::metadata(source).map_err(|err| {
        CliError::user(format!("cannot read {}", source.display())).caused_by(err)
    })?;
    if let Ok(out_metadata) = std::fs::metadata(&out_dir)
        && !out_metadata.is_dir()
    {
        return Err(CliError::user(format!(
            "{} is not a folder, and --out takes a folder",
            crate::output::path(&out_dir)
        ))
        .hint("pass the folder to write the sessions into (it is created when missing)"));
    }
    // Held until the import ends: the check for earlier imports and the
    // writes are one step, so two imports of one file at once write it once.
    let _out_lock = if args.dry_run {
        None
    } else {
        import::lock_out_dir(&out_dir, || {
            crate::output::errln!(
                "waiting for another import into {} to finish",
                crate::output::path(&out_dir)
            );
        })?
    };
    let previous = if args.dry_run {
        HashMap::new()
    } else {
        let stale = remove_stale_partials(&out_dir);
        if !stale.is_empty() {
            crate::output::errln!(
                "removed {} unfinished session file(s) an interrupted import left in {}",
                stale.len(),
                crate::output::path(&out_dir)
            );
        }
        previous_imports(&out_dir)
    };
    // The vocabulary sessions are most likely counted in (the configured
    // model's) loads while the first file is read.
    import::preload_vocabulary(import::configured_encoding(&ctx));
    // Each file's sessions are counted and written before the next file is
    // read, and their entries dropped once written: a folder costs the
    // memory of its largest file, not of all of them.
    let mut reports: Vec<(ImportedSession, Written, Option<FirstResume>)> = Vec::new();
    let mut handle = |found: Vec<ImportedSession>| -> CliResult {
        for mut session in found {
            let (written, resume) =
                import::import_session(&ctx, &mut session, &out_dir, &previous, args.dry_run)?;
            session.entries = Vec::new();
            reports.push((session, written, resume));
        }
        Ok(())
    };
    let mut n_failed = 0usize;
    let mut n_skipped = 0usize;
    // A session that cannot be written (a full disk) stops a folder's
    // import; what was written before it is still reported.
    let mut stopped: Option<CliError> = None;
    if metadata.is_dir() {
        for file in dir_files(source)? {
            let file = file.import();
            match file.outcome {
                FileOutcome::Imported(found) => {
                    if let Err(err) = handle(found) {
                        stopped = Some(err);
                        break;
                    }
                }
                FileOutcome::Skipped(diagnostic) => {
                    n_skipped += 1;
                    crate::output::errln!(
                        "{}: {}",
                        crate::output::path(&file.path),
                        Line(&diagnostic.to_string())
                    );
                }
                FileOutcome::Failed(err) => {
                    n_failed += 1;
                    crate::output::errln!(
                        "{}: {}",
                        crate::output::path(&file.path),
                        Line(&CliError::from(err).message)
                    );
                }
            }
        }
        if reports.is_empty() {
            if let Some(err) = stopped {
                return Err(err);
            }
            return Err(CliError::user(format!(
                "no importable transcript in {}{}",
                source.display(),
                skipped_note(n_skipped)
            ))
            .hint(format!(
                "supported formats: {}",
                soba_store::import::Format::list()
            )));
        }
    } else {
        handle(import_path(source)?)?;
    }

    let mut stdout = crate::output::stdout();
    if args.json {
        let array: Vec<Value> = reports
            .iter()
            .map(|(session, written, resume)| session_json(session, written, resume.as_ref()))
            .collect();
        let text = serde_json::to_string_pretty(&Value::Array(array))
            .map_err(|err| CliError::internal("cannot encode the report").caused_by(err))?;
        writeln!(stdout, "{}", soba_core::terminal::sanitize_json(&text))?;
    } else {
        for (session, written, resume) in &reports {
            stdout.write_all(session_text(session, written).as_bytes())?;
            if let Some(line) = resume.as_ref().and_then(first_resume_line) {
                stdout.write_all(line.as_bytes())?;
            }
        }
        let n_new = reports
            .iter()
            .filter(|(_, written, _)| {
                matches!(written, Written::New { .. } | Written::Grown { .. })
            })
            .count();
        if !args.dry_run {
            writeln!(
                stdout,
                "{n_new} of {} sessions written to {}",
                reports.len(),
                crate::output::path(&out_dir)
            )?;
        }
    }
    stdout.flush()?;
    if n_skipped > 0 {
        crate::output::errln!("{n_skipped} files skipped (see above)");
    }
    if let Some(err) = stopped {
        return Err(err.hint(format!(
            "the {} session(s) listed above were imported before it stopped, and the files after it were not tried: import the folder again once this is fixed (nothing is written twice)",
            reports.len()
        )));
    }
    if n_failed > 0 {
        // The sessions above were written; the run still failed.
        return Err(CliError::user(format!(
            "{n_failed} of the files could not be imported (see above)"
        ))
        .hint("fix what each line above says and import the folder again: what was imported already is recognised and not written twice"));
    }
    Ok(())
}

/// `" (N files skipped, see above)"`, or nothing when none was.
fn skipped_note(n_skipped: usize) -> String {
    if n_skipped == 0 {
        String::new()
    } else {
        format!(" ({n_skipped} files skipped, see above)")
    }
}

/// The `--json` object of one session (SPEC §3.4).
fn session_json(
    session: &ImportedSession,
    written: &Written,
    resume: Option<&FirstResume>,
) -> Value {
    let stats = &session.stats;
    let (session_id, path, already) = match written {
        Written::DryRun => (Value::Null, Value::Null, false),
        Written::New { id, path } => (json!(id), json!(path.display().to_string()), false),
        Written::Already { id, path } => (json!(id), json!(path.display().to_string()), true),
        Written::Grown { id, path, .. } => (json!(id), json!(path.display().to_string()), false),
    };
    let grown_from = match written {
        Written::Grown { previous, .. } => json!(previous),
        _ => Value::Null,
    };
    json!({
        "source": session.source.display().to_string(),
        "format": session.format.as_str(),
        "originalId": session.original_id,
        "messages": stats.messages,
        "entries": stats.entries,
        "toolCalls": stats.tool_calls,
        "toolResults": stats.tool_results,
        "unpairedToolCalls": stats.unpaired_tool_calls,
        "orphanToolResults": stats.orphan_tool_results,
        "resultsBeforeCalls": stats.results_before_calls,
        "reorderedToolResults": stats.reordered_tool_results,
        "usage": {
            "input": stats.usage.input,
            "output": stats.usage.output,
            "cacheRead": stats.usage.cache_read,
            "cacheWrite": stats.usage.cache_write,
            "reasoning": stats.usage.reasoning,
        },
        "storedUsage": {
            "input": stats.stored_usage.input,
            "output": stats.stored_usage.output,
            "cacheRead": stats.stored_usage.cache_read,
            "cacheWrite": stats.stored_usage.cache_write,
            "reasoning": stats.stored_usage.reasoning,
        },
        "usageRaw": stats.usage_raw,
        "peakPromptTokens": stats.peak_prompt_tokens,
        "compactions": stats.compactions,
        "inferences": session.inference_count(),
        "diagnostics": stats.diagnostics,
        "diagnosticsUnlisted": stats.diagnostics_unlisted,
        "invalidUtf8": stats.invalid_utf8.map(|invalid| json!({
            "firstOffset": invalid.first_offset,
            "replaced": invalid.replaced,
        })),
        "sessionId": session_id,
        "path": path,
        "alreadyImported": already,
        "grownFrom": grown_from,
        "firstResume": resume.map(|resume| json!({
            "model": resume.model,
            "contextWindow": resume.context_window,
            "liveTokens": resume.live_tokens,
            "compactsFirst": resume.over_window(),
        })),
    })
}

/// The plain report of one session.
fn session_text(session: &ImportedSession, written: &Written) -> String {
    let stats = &session.stats;
    let usage = &stats.usage;
    let n = group_thousands;
    let destination = match written {
        Written::DryRun => "dry run, not written".to_owned(),
        Written::New { id, .. } => format!("imported as {id}"),
        Written::Already { id, .. } => format!("already imported as {id}; skipped"),
        Written::Grown {
            id,
            previous,
            before,
            now,
            ..
        } => format!(
            "imported again as {id}: it has grown since it was imported as {previous} ({before} → {now} entries; {previous} is kept as it was)"
        ),
    };
    let mut out = format!(
        "{} ({}, {}): {destination}\n",
        crate::output::path(&session.source),
        session.format,
        Line(&session.original_id)
    );
    out.push_str(&format!(
        "  messages {} · entries {} · tool calls {} · results {} · unpaired calls {}\n",
        n(stats.messages),
        n(stats.entries),
        n(stats.tool_calls),
        n(stats.tool_results),
        n(stats.unpaired_tool_calls)
    ));
    if stats.orphan_tool_results + stats.results_before_calls + stats.reordered_tool_results > 0 {
        out.push_str(&format!(
            "  results without a call {} · results before their call {} · moved after their call {}\n",
            n(stats.orphan_tool_results),
            n(stats.results_before_calls),
            n(stats.reordered_tool_results)
        ));
    }
    let figures = |usage: &soba_core::message::Usage| {
        format!(
            "input {} · output {} · cache read {} · cache write {} · reasoning {}",
            n(usage.input),
            n(usage.output),
            n(usage.cache_read),
            n(usage.cache_write),
            n(usage.reasoning)
        )
    };
    // The first figure is what `soba show` sums from the stored messages;
    // the source's own total follows when it counted more.
    out.push_str(&format!("  usage: {}\n", figures(&stats.stored_usage)));
    if stats.usage != stats.stored_usage {
        out.push_str(&format!(
            "  the source's own total: {} (it counts requests that left no message with usage)\n",
            figures(usage)
        ));
    }
    let peak = stats.peak_prompt_tokens.map_or_else(
        || "unknown".to_owned(),
        |peak| format!("{} tokens", n(peak)),
    );
    out.push_str(&format!(
        "  peak prompt {peak} · compactions {} · inferences {}\n",
        n(stats.compactions),
        n(session.inference_count() as u64)
    ));
    if stats.diagnostics.is_empty() {
        out.push_str("  diagnostics: none\n");
    } else {
        let total = stats.diagnostics_total();
        out.push_str(&format!("  diagnostics: {}\n", n(total)));
        for line in stats.diagnostics.iter().take(MAX_DIAGNOSTICS_SHOWN) {
            out.push_str(&format!("    {}\n", Line(line)));
        }
        let more = total.saturating_sub(MAX_DIAGNOSTICS_SHOWN as u64);
        if more > 0 {
            let listed = if stats.diagnostics_unlisted == 0 {
                "--json lists them all".to_owned()
            } else {
                format!(
                    "--json lists the first {}",
                    n(stats.diagnostics.len() as u64)
                )
            };
            out.push_str(&format!("    … and {} more ({listed})\n", n(more)));
        }
    }
    out
}
