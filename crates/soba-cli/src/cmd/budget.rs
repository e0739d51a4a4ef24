//! `soba budget` (SPEC §4.3, §11.5): prints every limit of §4.3 for bare
//! numbers, a registry model or a session, or the §4.3 error with exit 1.
//! The report is `soba_workspace::budget`'s; this file prints it on stdout
//! and the budget's warnings on stderr.

use std::io::Write;

use crate::cli::{BudgetArgs, GlobalArgs};
use crate::error::CliResult;
use soba_workspace::budget::{self, BudgetQuery};
use soba_workspace::context::Context;

/// Runs `soba budget`. The configuration comes from the one loader every
/// command uses (the user file, the project file, `SOBA_*` variables and
/// `--set`), so the limits printed are the ones a session would get.
pub fn cmd_budget(args: &BudgetArgs, global: &GlobalArgs) -> CliResult {
    // `soba budget` declares its own --set; it means what the global one
    // means everywhere else.
    let mut global = global.clone();
    global.set.extend(args.set.iter().cloned());
    let ctx = Context::load(&global.options())?;
    crate::output::print_warnings(&ctx);
    let query = BudgetQuery {
        session: args.session.as_deref(),
        model: args.model.as_deref(),
        context_window: args.context_window,
        max_output: args.max_output,
    };
    let report = budget::report(&ctx, &query, &mut |line| crate::output::errln!("{line}"))?;
    let mut stdout = crate::output::stdout();
    stdout.write_all(report.text.as_bytes())?;
    stdout.flush()?;
    let mut stderr = crate::output::stderr();
    for warning in report.budget.warnings() {
        writeln!(stderr, "warning: {warning}")?;
    }
    Ok(())
}
