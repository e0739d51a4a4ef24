//! `soba stats` (SPEC §13): the flight records of the workspace's
//! sessions (or of one), summed up by `soba_workspace::stats` and printed.

use std::io::Write;

use soba_workspace::context::Context;
use soba_workspace::stats;

use crate::cli::{GlobalArgs, StatsArgs};
use crate::error::CliResult;

/// Runs `soba stats`.
pub fn cmd_stats(args: &StatsArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let dir = &ctx.locations.sessions_dir;
    let stats = stats::gather(&ctx, args.session.as_deref(), &mut |line| {
        crate::output::errln!("{line}")
    })?;
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
