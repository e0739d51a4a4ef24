//! `soba sessions`: the workspace's sessions, most recent first, with short
//! id, creation time, message count, size and title (the first message that
//! asks for work). The listing is `soba_workspace::session_list`'s.

use std::io::Write;

use serde_json::Value;

use crate::cli::{GlobalArgs, SessionsArgs};
use crate::error::CliResult;
use soba_workspace::context::Context;
use soba_workspace::session_list::{self, hidden_note};

/// Runs `soba sessions`.
pub fn cmd_sessions(args: &SessionsArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let dir = &ctx.locations.sessions_dir;
    let list = session_list::list(dir, args.all)?;
    if !list.skipped.is_empty() {
        // On stderr, so `--json` stays one document.
        crate::output::errln!("{}", session_list::skipped_note(&list.skipped));
    }
    let mut stdout = crate::output::stdout();
    if args.json {
        let rows: Vec<Value> = list
            .sessions
            .iter()
            .map(|summary| session_list::json_row(summary, list.short_len))
            .collect();
        let text = serde_json::to_string_pretty(&Value::Array(rows)).unwrap_or_default();
        writeln!(stdout, "{}", soba_core::terminal::sanitize_json(&text))?;
        return Ok(stdout.flush()?);
    }
    if list.sessions.is_empty() {
        writeln!(stdout, "no sessions in {}", crate::output::path(dir))?;
        if list.n_hidden > 0 {
            writeln!(stdout, "{}", hidden_note(list.n_hidden))?;
        }
        writeln!(
            stdout,
            "start one with `soba run \"<prompt>\"` or import one with `soba import <file>`"
        )?;
        return Ok(stdout.flush()?);
    }
    stdout.write_all(session_list::table(&list.sessions, list.short_len).as_bytes())?;
    if list.n_hidden > 0 {
        writeln!(stdout, "{}", hidden_note(list.n_hidden))?;
    }
    Ok(stdout.flush()?)
}
