//! What `soba config show` says (SPEC §14): the merged configuration with
//! the source of every non-default value, the files read, the key
//! variables, the model in use and the values scaled for its window, as
//! text and as JSON.

use serde_json::{Map, Value, json};
use soba_core::TokenCount;
use soba_core::terminal::{Line, sanitize_json, sanitize_line};
use soba_core::tokens::group_thousands;

use super::Source;
use crate::context::Context;

/// Returns `path` as one safe line of text.
fn shown_path(path: &std::path::Path) -> String {
    sanitize_line(&path.display().to_string()).into_owned()
}

/// Says whether a config file is there.
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

/// The model in use's window and the `compaction.*` values scaled for it
/// ([`soba_core::config::CompactionConfig::scaled_keys`], what `soba
/// budget` and every session use), keyed as `config show` lists them; none
/// when no model resolves or its window is unknown.
fn scaled_values(ctx: &Context) -> Option<(TokenCount, Vec<(String, TokenCount)>)> {
    let model = ctx.config().resolve_model(None, &ctx.env).ok()?;
    let info = ctx.config().registry().resolve(&model.id).ok()?;
    let window = TokenCount::new(info.context_window);
    let scaled = ctx
        .config()
        .compaction
        .scaled_keys(window, TokenCount::new(info.max_output_tokens))
        .into_iter()
        .map(|scaled| (format!("compaction.{}", scaled.key), scaled.in_force))
        .collect();
    Some((window, scaled))
}

/// Returns `soba config show`'s text: `key = value  # source` lines,
/// aligned; a value scaled for the model's small window says what is in
/// force; then the key variables and the model in use.
pub fn show_text(ctx: &Context) -> String {
    let rows = ctx.loaded.rows();
    let scaled = scaled_values(ctx);
    let scaled_rows = scaled.as_ref().map_or(&[][..], |(_, rows)| rows.as_slice());
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
        shown_path(&ctx.locations.user_config),
        file_state(&ctx.locations.user_config),
        shown_path(&project),
        file_state(&project)
    ));
    for (row, (key, value)) in rows.iter().zip(&cells) {
        let mut line = format!("{key} = {value}");
        if let Some((_, in_force)) = scaled_rows.iter().find(|(scaled, _)| *scaled == row.key) {
            line.push_str(&format!(
                " (scaled to {} for this window)",
                group_thousands(in_force.get())
            ));
        }
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
    if let Some((window, rows)) = &scaled
        && !rows.is_empty()
    {
        out.push_str(&format!(
            "# its {}-token window is small: the values marked scaled are in force (`soba budget` shows the limits they give)\n",
            group_thousands(window.get())
        ));
    }
    out
}

/// Returns `soba config show --json`'s document, `{"config", "sources",
/// "files", "model", "scaled"}`, safe to print, with its newline.
pub fn show_json(ctx: &Context) -> String {
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
        "scaled": scaled_values(ctx)
            .map(|(_, rows)| {
                rows.into_iter()
                    .map(|(key, in_force)| (key, json!(in_force.get())))
                    .collect::<Map<String, Value>>()
            })
            .unwrap_or_default(),
    });
    let text = serde_json::to_string_pretty(&document).unwrap_or_else(|_| "{}".to_owned());
    let mut text = sanitize_json(&text).into_owned();
    text.push('\n');
    text
}
