//! `soba show [session] [--entries] [--check]`: a session's summary, its
//! entries one line each with short ids, or a full validation with
//! line-numbered diagnostics (exit 1 when the log is damaged). The texts
//! are `soba_workspace::outline`'s.

use std::io::Write;

use soba_core::id::shortest_unique_len;
use soba_store::reader::read_log_outline;

use crate::cli::{GlobalArgs, ShowArgs};
use crate::error::{CliError, CliResult};
use soba_workspace::context::Context;
use soba_workspace::outline::{entries_text, summary_text};

/// Runs `soba show`.
pub fn cmd_show(args: &ShowArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let summary = ctx.select_session(args.session.as_deref())?;
    // The outline: a 1 GB log is shown in memory that grows with its
    // entries, not its bytes.
    let log = read_log_outline(&summary.path)?;
    let short_len = shortest_unique_len(log.entries().iter().map(|logged| &logged.entry.id));
    let mut stdout = crate::output::stdout();
    if args.entries {
        stdout.write_all(entries_text(&log, short_len).as_bytes())?;
    }
    if args.check {
        // Every reader diagnostic, plus references the path depends on,
        // each with its line.
        let problems = soba_store::check::problems(&log);
        for problem in &problems {
            writeln!(stdout, "{problem}")?;
        }
        stdout.flush()?;
        if !problems.is_empty() {
            let mut error = CliError::user(format!(
                "session {} is damaged: {} problem{} in {}",
                summary.id,
                problems.len(),
                if problems.len() == 1 { "" } else { "s" },
                summary.path.display()
            ));
            for hint in soba_workspace::resume::resume_effects(&log) {
                error = error.hint(hint);
            }
            return Err(error);
        }
        writeln!(
            stdout,
            "session {} is valid: {} entries checked",
            summary.id,
            log.entries().len()
        )?;
        return Ok(stdout.flush()?);
    }
    if !args.entries {
        stdout.write_all(summary_text(&log, &summary.path, short_len).as_bytes())?;
    }
    Ok(stdout.flush()?)
}
