//! `soba config show|schema` (SPEC §14): the merged configuration with the
//! source of every non-default value (`soba_workspace::config::show`'s
//! text), and the JSON Schema of `config.json`.

use std::io::Write;

use soba_core::terminal::sanitize_json;

use crate::cli::{ConfigAction, ConfigArgs, GlobalArgs};
use crate::error::CliResult;
use soba_workspace::config::schema;
use soba_workspace::config::show::{show_json, show_text};
use soba_workspace::context::Context;

/// Runs `soba config`.
pub fn cmd_config(args: &ConfigArgs, global: &GlobalArgs) -> CliResult {
    match args.action {
        ConfigAction::Schema => {
            let text =
                serde_json::to_string_pretty(&schema::schema()).unwrap_or_else(|_| "{}".to_owned());
            let mut stdout = crate::output::stdout();
            writeln!(stdout, "{}", sanitize_json(&text))?;
            stdout.flush()?;
            Ok(())
        }
        ConfigAction::Show { json } => {
            let ctx = Context::load(&global.options())?;
            crate::output::print_warnings(&ctx);
            let text = if json {
                show_json(&ctx)
            } else {
                show_text(&ctx)
            };
            let mut stdout = crate::output::stdout();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
            Ok(())
        }
    }
}
