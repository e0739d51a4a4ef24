//! `soba config show|schema` (SPEC §14): the merged configuration with the
//! source of every non-default value, and the JSON Schema of `config.json`.

use std::io::Write;

use serde_json::{Map, Value, json};
use soba_core::terminal::{Line, sanitize_json, sanitize_line};

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
            let mut stdout = crate::output::stdout();
            writeln!(stdout, "{}", sanitize_json(&text))?;
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
            let mut stdout = crate::output::stdout();
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
            format!("{} ({})", Line(&model.id), Line(&model.reason)),
        ),
        Err(err) => (Value::Null, format!("none: {}", Line(&err.to_string()))),
    }
}

/// Renders `key = value  # source` lines, aligned.
fn show_text(ctx: &Context) -> String {
    let rows = ctx.loaded.rows();
    let cells: Vec<(String, String)> = rows
        .iter()
        .map(|row| {
            (
                sanitize_line(&row.key).into_owned(),
                sanitize_line(&row.value.to_string()).into_owned(),
            )
        })
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
        crate::output::path(&ctx.locations.user_config),
        file_state(&ctx.locations.user_config),
        crate::output::path(&project),
        file_state(&project)
    ));
    for (row, (key, value)) in rows.iter().zip(&cells) {
        let line = format!("{key} = {value}");
        if row.source == Source::Default {
            out.push_str(&line);
        } else {
            out.push_str(&format!(
                "{line:<width$}  # {}",
                Line(&row.source.to_string())
            ));
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
            format!("{} {state}", Line(var))
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
    let text = serde_json::to_string_pretty(&document).unwrap_or_else(|_| "{}".to_owned());
    let mut text = sanitize_json(&text).into_owned();
    text.push('\n');
    text
}
