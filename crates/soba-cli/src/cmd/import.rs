//! `soba import <file|dir> [--out DIR] [--dry-run] [--json]` (SPEC §3.4):
//! converts other agents' transcripts into SOBA sessions, one per source
//! session, keeping the original ids in the header's `importedFrom`. The
//! import and its report are `soba_workspace::import`'s; this file prints
//! them and says how the run ended.

use std::io::Write;

use serde_json::Value;

use crate::cli::{GlobalArgs, ImportArgs};
use crate::error::{CliError, CliResult};
use soba_workspace::context::Context;
use soba_workspace::import::{self, Written, report};

/// Runs `soba import`.
pub fn cmd_import(args: &ImportArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| ctx.locations.sessions_dir.clone());
    let run = import::import_source(&ctx, &args.path, &out_dir, args.dry_run, &mut |line| {
        crate::output::errln!("{line}")
    })?;
    let mut stdout = crate::output::stdout();
    if args.json {
        let array: Vec<Value> = run
            .sessions
            .iter()
            .map(|one| report::session_json(&one.session, &one.written, one.resume.as_ref()))
            .collect();
        let text = serde_json::to_string_pretty(&Value::Array(array))
            .map_err(|err| CliError::internal("cannot encode the report").caused_by(err))?;
        writeln!(stdout, "{}", soba_core::terminal::sanitize_json(&text))?;
    } else {
        for one in &run.sessions {
            stdout.write_all(report::session_text(&one.session, &one.written).as_bytes())?;
            if let Some(line) = one.resume.as_ref().and_then(report::first_resume_line) {
                stdout.write_all(line.as_bytes())?;
            }
        }
        let n_new = run
            .sessions
            .iter()
            .filter(|one| matches!(one.written, Written::New { .. } | Written::Grown { .. }))
            .count();
        if !args.dry_run {
            writeln!(
                stdout,
                "{n_new} of {} sessions written to {}",
                run.sessions.len(),
                crate::output::path(&out_dir)
            )?;
        }
    }
    stdout.flush()?;
    if run.n_skipped > 0 {
        crate::output::errln!("{} files skipped (see above)", run.n_skipped);
    }
    if let Some(err) = run.stopped {
        return Err(err.hint(format!(
            "the {} session(s) listed above were imported before it stopped, and the files after it were not tried: import the folder again once this is fixed (nothing is written twice)",
            run.sessions.len()
        )));
    }
    if run.n_failed > 0 {
        // The sessions above were written; the run still failed.
        return Err(CliError::user(format!(
            "{} of the files could not be imported (see above)",
            run.n_failed
        ))
        .hint("fix what each line above says and import the folder again: what was imported already is recognised and not written twice"));
    }
    Ok(())
}
