//! `soba stats` (SPEC §13): the flight records of the workspace's
//! sessions (or of one), summed up by `soba_workspace::stats` and printed.

use std::io::Write;
use std::path::PathBuf;

use soba_store::flight::{flight_path, read_flight_records};
use soba_store::log::SessionId;
use soba_workspace::context::Context;
use soba_workspace::stats::{Stats, flight_files};

use crate::cli::{GlobalArgs, StatsArgs};
use crate::error::CliResult;

/// Runs `soba stats`.
pub fn cmd_stats(args: &StatsArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let dir = &ctx.locations.sessions_dir;
    let files: Vec<PathBuf> = match &args.session {
        Some(wanted) => {
            let summary = ctx.select_session(Some(wanted))?;
            let id = SessionId::parse(&summary.id)?;
            let dir = summary
                .path
                .parent()
                .map_or_else(|| dir.clone(), PathBuf::from);
            vec![flight_path(dir, &id)]
        }
        None => flight_files(dir)?,
    };
    let mut stats = Stats::default();
    for file in &files {
        let (records, diagnostics) = read_flight_records(file)?;
        if records.is_empty() && diagnostics.is_empty() {
            continue;
        }
        stats.files += 1;
        stats.damaged_lines += diagnostics.len();
        for diagnostic in &diagnostics {
            crate::output::errln!("{}: {diagnostic}", file.display());
        }
        for record in &records {
            stats.add(record);
        }
    }
    let mut stdout = crate::output::stdout();
    if args.json {
        let text = serde_json::to_string_pretty(&stats.to_json()).unwrap_or_default();
        writeln!(stdout, "{}", soba_core::terminal::sanitize_json(&text))?;
    } else if stats.records == 0 {
        writeln!(
            stdout,
            "no flight records in {}: nothing was compacted yet",
            dir.display()
        )?;
    } else {
        stdout.write_all(stats.to_text().as_bytes())?;
    }
    Ok(stdout.flush()?)
}
