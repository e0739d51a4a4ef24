//! `soba config show|schema` (SPEC §14): the merged configuration with the
//! source of every non-default value, and the JSON Schema of `config.json`.

use std::io::Write;

use serde_json::{Map, Value, json};

use crate::cli::{ConfigAction, ConfigArgs, GlobalArgs};
use crate::config::{Source, schema};
use crate::context::Context;
use crate::error::CliResult;

/// Runs `soba config`.
pub fn cmd_config(args: &ConfigArgs, global: &GlobalArgs) -> CliResult {
    match args.action {
        ConfigAction::Schema => {
            let text =
                serde_json::to_string_pretty(&schema::schema()).unwrap_or_else(|_| "{}".to_owned());
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{text}")?;
            stdout.flush()?;
            Ok(())
        }
        ConfigAction::Show { json } => {
            let ctx = Context::load(global)?;
            ctx.print_warnings();
            let text = if json {
                show_json(&ctx)
            } else {
                show_text(&ctx)
            };
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
            Ok(())
        }
    }
}

fn file_state(path: &std::path::Path) -> &'static str {
    if path.is_file() { "found" } else { "not found" }
}

/// The model in use and why, or why there is none.
fn model_line(ctx: &Context) -> (Value, String) {
    match ctx.config().resolve_model(None, &ctx.env) {
        Ok(model) => (
            json!({"id": model.id, "reason": model.reason}),
            format!("{} ({})", model.id, model.reason),
        ),
        Err(err) => (Value::Null, format!("none: {err}")),
    }
}

/// Renders `key = value  # source` lines, aligned.
fn show_text(ctx: &Context) -> String {
    let rows = ctx.loaded.rows();
    let cells: Vec<(String, String)> = rows
        .iter()
        .map(|row| (row.key.clone(), row.value.to_string()))
        .collect();
    let width = cells
        .iter()
        .map(|(key, value)| key.len() + 3 + value.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let project = ctx.workspace.project_config();
    out.push_str(&format!(
        "# user config: {} ({})\n# project config: {} ({})\n",
        ctx.locations.user_config.display(),
        file_state(&ctx.locations.user_config),
        project.display(),
        file_state(&project)
    ));
    for (row, (key, value)) in rows.iter().zip(&cells) {
        let line = format!("{key} = {value}");
        if row.source == Source::Default {
            out.push_str(&line);
        } else {
            out.push_str(&format!("{line:<width$}  # {}", row.source));
        }
        out.push('\n');
    }
    let keys: Vec<String> = ctx
        .config()
        .providers
        .values()
        .filter_map(|provider| provider.api_key_env.as_deref())
        .map(|var| {
            let state = if ctx.env.get(var).is_some() {
                "set"
            } else {
                "not set"
            };
            format!("{var} {state}")
        })
        .collect();
    out.push_str(&format!("# key variables: {}\n", keys.join(", ")));
    out.push_str(&format!("# model in use: {}\n", model_line(ctx).1));
    out
}

/// Renders `{"config", "sources", "files", "model"}`.
fn show_json(ctx: &Context) -> String {
    let mut sources = Map::new();
    for row in ctx.loaded.rows() {
        if row.source != Source::Default {
            sources.insert(row.key, Value::String(row.source.to_string()));
        }
    }
    let document = json!({
        "config": ctx.loaded.to_json(),
        "sources": sources,
        "files": {
            "user": ctx.locations.user_config.display().to_string(),
            "project": ctx.workspace.project_config().display().to_string(),
        },
        "model": model_line(ctx).0,
    });
    let mut text = serde_json::to_string_pretty(&document).unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}
