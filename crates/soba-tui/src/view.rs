//! What the TUI shows of a session, computed from its path: the
//! conversation with tool calls folded to one line each, the sidebar
//! figures, the `/budget` text, the `/rewind` picker and the rewind
//! confirmation (files modified after the target, estimated context after).

use std::collections::{HashMap, HashSet};

use soba_core::facts::{self, FactsConfig, FactsInput};
use soba_core::id::shortest_unique_len;
use soba_core::tokens::group_thousands;
use soba_core::{Block, ContextSource, Entry, EntryBody, EntryId, Quality, Role};
use soba_engine::agent::describe_call;
use soba_engine::session::SessionCore;
use soba_engine::tool::{NON_INTERACTIVE_DENIAL, USER_DENIAL};

use soba_store::reader::{SessionGlance, SessionSummary};
use soba_workspace::session_list::{self, human_size};

use super::mention;
use super::preview::{self, DiffKind, DiffLine};
use super::state::{HistoryItem, PickerItem, RewindPlan, Sidebar, ToolOutput};

/// The most lines of one tool result the expanded view shows.
pub const MAX_OUTPUT_LINES: usize = 200;
/// The most characters of one line of tool output kept for the view.
const MAX_OUTPUT_LINE_CHARS: usize = 1_000;

/// Returns the first [`MAX_OUTPUT_LINES`] lines of a tool result.
pub fn tool_output(text: &str) -> ToolOutput {
    let mut lines = Vec::new();
    let mut more_lines = 0;
    for line in text.lines() {
        if lines.len() < MAX_OUTPUT_LINES {
            lines.push(line.chars().take(MAX_OUTPUT_LINE_CHARS).collect());
        } else {
            more_lines += 1;
        }
    }
    ToolOutput { lines, more_lines }
}

/// Returns what the user typed in a real user message: its text blocks
/// without the files `@path` mentions attached.
pub fn typed_text(message: &soba_core::Message) -> String {
    let mut out = String::new();
    for block in &message.content {
        if let Block::Text(text) = block
            && mention::parse_attachment(text).is_none()
        {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}

/// Returns the number of random hex digits that keeps every id of the
/// session distinct (at least 4, SPEC §3.1).
pub fn short_len(entries: &[Entry]) -> usize {
    shortest_unique_len(entries.iter().map(|entry| &entry.id))
}

/// Returns the exit code a `bash` result reports on its last line
/// (`exit code N`).
fn exit_code(text: &str) -> Option<&str> {
    text.lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .and_then(|line| line.trim().strip_prefix("exit code "))
}

/// Folds one tool call and its result into a line, e.g.
/// `bash: cargo test (exit 1, output 2.3 KiB)`; a call the user denied
/// says so. The size is the output's (what Ctrl-O shows, the result the
/// model got), labelled so: `read_file: a.py (12 B)` read as the file's
/// size, and its numbered lines are not.
pub fn tool_line(call: &str, tool: &str, result: Option<(&str, bool)>, running: bool) -> String {
    match result {
        Some((text, true)) if text == USER_DENIAL => format!("{call} (denied)"),
        Some((text, true)) if text == soba_core::facts::NOT_RUN_AFTER_DENIAL => {
            format!("{call} (not run: you denied an earlier call)")
        }
        Some((text, true)) if text == NON_INTERACTIVE_DENIAL => {
            format!("{call} (not run: soba run could not ask for approval)")
        }
        Some((text, is_error)) => {
            let size = format!("output {}", human_size(text.len() as u64));
            match exit_code(text) {
                Some(code) if tool == "bash" => format!("{call} (exit {code}, {size})"),
                _ if is_error => format!("{call} (error, {size})"),
                _ => format!("{call} ({size})"),
            }
        }
        None if running => format!("{call} (running…)"),
        None => format!("{call} (no result recorded)"),
    }
}

/// Returns what a file change call does, from its arguments alone (so a
/// resumed session shows it too): `edit_file`'s old → new text as a diff,
/// `write_file`'s lines; nothing for other tools.
pub fn change_lines(call: &soba_core::ToolUse) -> Vec<DiffLine> {
    let input = &call.input;
    let limit = preview::MAX_PREVIEW_LINES;
    match call.name.as_str() {
        "edit_file" => {
            let (Some(old), Some(new)) = (input.str_arg("oldString"), input.str_arg("newString"))
            else {
                return Vec::new();
            };
            let mut lines = Vec::new();
            if input
                .object()
                .get("replaceAll")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false)
            {
                lines.push(DiffLine {
                    kind: DiffKind::Note,
                    text: "every occurrence:".to_owned(),
                });
            }
            lines.extend(preview::diff(old, new, limit));
            preview::bound(lines, limit)
        }
        "write_file" => {
            let Some(content) = input.str_arg("content") else {
                return Vec::new();
            };
            let n_lines = content.lines().count();
            let mut lines = vec![DiffLine {
                kind: DiffKind::Note,
                text: format!("{n_lines} line{}", if n_lines == 1 { "" } else { "s" }),
            }];
            lines.extend(content.lines().map(|line| DiffLine {
                kind: DiffKind::Added,
                text: line.to_owned(),
            }));
            preview::bound(lines, limit)
        }
        _ => Vec::new(),
    }
}

/// What an `edit_file` call did as its file shows it (whole lines, their
/// indentation and context), given the call and whether it ran (else it
/// was denied); `None` when the file no longer tells, and the diff of the
/// call's arguments is shown ([`preview::edit_in_file`] for the worker).
pub type FileChange<'a> = dyn FnMut(&soba_core::ToolUse, bool) -> Option<Vec<DiffLine>> + 'a;

/// Builds the conversation from `path`; `running` marks unanswered tool
/// calls of the turn in progress as running rather than interrupted; an
/// edit that ran or was denied is shown as `file_change` sees it in its
/// file, else from its arguments.
pub fn history_items(
    path: &[Entry],
    short: usize,
    running: bool,
    file_change: &mut FileChange<'_>,
) -> Vec<HistoryItem> {
    let mut items = Vec::new();
    // Tool call id → (index in items, description, tool name).
    let mut calls: HashMap<String, (usize, String, String)> = HashMap::new();
    // Tool call id → what its file change does, from its arguments, and
    // the call.
    let mut changes: HashMap<String, (Vec<DiffLine>, &soba_core::ToolUse)> = HashMap::new();
    for entry in path {
        match &entry.body {
            EntryBody::Message(stored) => {
                let message = &stored.message;
                match message.role {
                    Role::User if message.is_real_user() => {
                        items.push(HistoryItem::User(typed_text(message)));
                        for block in &message.content {
                            if let Block::Text(text) = block
                                && let Some((path, n_lines)) = mention::parse_attachment(text)
                            {
                                items.push(HistoryItem::Event(format!(
                                    "@{path} ({n_lines} line{} attached)",
                                    if n_lines == 1 { "" } else { "s" }
                                )));
                            }
                        }
                    }
                    Role::Assistant => {
                        let text = message.text();
                        if !text.trim().is_empty() {
                            items.push(HistoryItem::Assistant(text.trim().to_owned()));
                        }
                        for call in message.tool_uses() {
                            let description = describe_call(call);
                            let change = change_lines(call);
                            if !change.is_empty() {
                                changes.insert(call.id.clone(), (change, call));
                            }
                            calls.insert(
                                call.id.clone(),
                                (items.len(), description.clone(), call.name.clone()),
                            );
                            items.push(HistoryItem::Tool {
                                line: tool_line(&description, &call.name, None, running),
                                is_error: false,
                                output: None,
                                diff: Vec::new(),
                            });
                        }
                    }
                    Role::Tool | Role::User => {
                        for block in &message.content {
                            let Block::ToolResult(result) = block else {
                                continue;
                            };
                            if let Some((idx, description, tool)) = calls.get(&result.tool_use_id) {
                                let text = result.text();
                                // A change that ran, or that the user
                                // denied, stays visible; one that failed
                                // shows its error instead.
                                let diff = match changes.remove(&result.tool_use_id) {
                                    Some((args, call))
                                        if !result.is_error || text == USER_DENIAL =>
                                    {
                                        let in_file = (call.name == "edit_file")
                                            .then(|| file_change(call, !result.is_error))
                                            .flatten();
                                        in_file.unwrap_or(args)
                                    }
                                    _ => Vec::new(),
                                };
                                items[*idx] = HistoryItem::Tool {
                                    line: tool_line(
                                        description,
                                        tool,
                                        Some((&text, result.is_error)),
                                        running,
                                    ),
                                    is_error: result.is_error,
                                    output: Some(tool_output(&text)),
                                    diff,
                                };
                            }
                        }
                    }
                    Role::System => {}
                }
            }
            EntryBody::Capsule(capsule) => {
                let mut text = format!(
                    "capsule {} ({}): {} → {} tokens",
                    entry.id.short_with(short),
                    capsule.trigger.as_str(),
                    group_thousands(capsule.tokens_before.get()),
                    group_thousands(capsule.tokens_after.get()),
                );
                if capsule.quality == Quality::Degraded {
                    text.push_str(" · fallback used");
                }
                items.push(HistoryItem::Event(text));
            }
            EntryBody::Checkpoint { kind, note } => {
                let kind = match kind {
                    soba_core::CheckpointKind::Milestone => "milestone",
                    soba_core::CheckpointKind::PlanPivot => "plan pivot",
                };
                items.push(HistoryItem::Event(format!(
                    "{kind} {}: {note}",
                    entry.id.short_with(short)
                )));
            }
            EntryBody::ModelChange { model } => {
                items.push(HistoryItem::Event(format!("model {model}")));
            }
            EntryBody::ConfigChange {
                auto_compact: Some(on),
                ..
            } => {
                let state = if *on { "on" } else { "off" };
                items.push(HistoryItem::Event(format!("auto-compact {state}")));
            }
            EntryBody::Skill(skill) => {
                let action = match skill.action {
                    soba_core::entry::SkillAction::Activate => "on",
                    soba_core::entry::SkillAction::Deactivate => "off",
                };
                items.push(HistoryItem::Event(format!("skill {} {action}", skill.name)));
            }
            EntryBody::Context(context) if context.source == ContextSource::CapsuleFile => {
                items.push(HistoryItem::Event(format!(
                    "loaded capsule file {} (untrusted context)",
                    soba_core::terminal::Line(&context.path)
                )));
            }
            EntryBody::Hygiene {
                reclaimed_tokens, ..
            } => items.push(HistoryItem::Event(format!(
                "hygiene: old tool output stubbed, {} tokens reclaimed",
                group_thousands(reclaimed_tokens.get())
            ))),
            _ => {}
        }
    }
    items
}

/// Returns the latest capsule on the path as one sidebar line.
pub fn last_compaction(path: &[Entry], short: usize) -> Option<String> {
    path.iter().rev().find_map(|entry| match &entry.body {
        EntryBody::Capsule(capsule) => {
            let before = capsule.tokens_before.get();
            let after = capsule.tokens_after.get();
            let mut line = format!(
                "{} {}: {} → {} ({})",
                entry.id.short_with(short),
                capsule.trigger.as_str(),
                group_thousands(before),
                group_thousands(after),
                soba_engine::event::size_change(before, after),
            );
            if capsule.quality == Quality::Degraded {
                line.push_str(" · fallback used");
            }
            Some(line)
        }
        _ => None,
    })
}

/// Returns why the measurement is `estimated` although a response on the
/// path reported usage (the rules of `soba_core::calibration::measure`):
/// `None` when it is not estimated or no response reported usage.
pub fn estimated_because(
    path: &[Entry],
    model: &str,
    factor: soba_core::calibration::Factor,
) -> Option<&'static str> {
    let (idx, last) = path
        .iter()
        .enumerate()
        .rev()
        .find_map(|(idx, entry)| match &entry.body {
            EntryBody::Message(stored) if stored.message.role == Role::Assistant => {
                Some((idx, &stored.message))
            }
            _ => None,
        })?;
    let usage = last.usage.filter(|usage| usage.prompt() > 0)?;
    if !path[idx + 1..]
        .iter()
        .all(|entry| matches!(entry.body, EntryBody::Message(_)))
    {
        return Some("the context changed since the last response");
    }
    if last.model.as_deref() != Some(model) {
        return Some("the last response came from another model");
    }
    if last
        .request_tokens_local
        .is_some_and(|local| factor.reveals_truncation(usage.prompt(), local))
    {
        return Some("the reported prompt is under 80% of the local count");
    }
    None
}

/// Returns the sidebar figures of a session now.
pub fn sidebar(core: &SessionCore) -> Sidebar {
    let measurement = core.measure();
    let budget = core.budget();
    let estimated = measurement.source == soba_core::calibration::MeasurementSource::Estimated;
    Sidebar {
        effective: measurement.tokens.get(),
        source: measurement.source.as_str().to_owned(),
        source_note: estimated
            .then(|| estimated_because(core.path(), core.model_id(), core.factor()))
            .flatten()
            .map(str::to_owned),
        hard_limit: budget.hard_limit().get(),
        soft_limit: budget.soft_limit().get(),
        auto_limit: budget.auto_limit().get(),
        hygiene_limit: budget.hygiene_limit().get(),
        auto_compact: core
            .derived()
            .auto_compact_or(core.config().compaction.auto),
        last_compaction: last_compaction(core.path(), core.short_id_len_now()),
        latest_capsule: core.path().iter().rev().find_map(|entry| {
            matches!(entry.body, EntryBody::Capsule(_)).then(|| entry.id.as_str().to_owned())
        }),
        plan: soba_core::facts::newest_plan(core.path())
            .map(|plan| plan.items)
            .unwrap_or_default(),
    }
}

/// Whether a model can be used now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelAccess {
    /// Its provider needs no key, or the key is set.
    Ready,
    /// Its provider's key variable is not set.
    NeedsKey(String),
    /// Its provider is not configured.
    NoProvider,
}

/// Returns whether model `id` can be used with this configuration and
/// environment: its provider is configured and its key variable, if it
/// needs one, is set.
pub fn model_access(ctx: &soba_workspace::context::Context, id: &str) -> ModelAccess {
    let provider = match ctx.config().registry().resolve(id) {
        Ok(info) => ctx.config().provider_for(&info.id, &info.provider).ok(),
        // A local model whose window its server reports: usable when its
        // provider is configured.
        Err(soba_provider::RegistryError::MissingContextWindow { .. }) => id
            .split_once('/')
            .and_then(|(provider, _)| ctx.config().providers.get(provider)),
        Err(_) => None,
    };
    let Some(provider) = provider else {
        return ModelAccess::NoProvider;
    };
    match &provider.api_key_env {
        Some(var) if ctx.env.get(var).is_none() => ModelAccess::NeedsKey(var.clone()),
        _ => ModelAccess::Ready,
    }
}

/// Returns the models the `/model` picker considers, in order: the current
/// and the configured model first (a local model whose window its server
/// reports has no `models` entry and no registry row, yet is usable), the
/// `models` entries, then the registry's models under the providers that
/// serve them. `soba demo`'s scripted model answers nowhere else: left out.
pub fn model_ids(config: &soba_workspace::config::Config, current: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut add = |id: String| {
        if !id.is_empty() && !ids.contains(&id) {
            ids.push(id);
        }
    };
    add(current.to_owned());
    if let Some((configured, _)) = &config.model {
        add(configured.clone());
    }
    for id in config.models.keys() {
        add(id.clone());
    }
    for model in soba_provider::registry::BUILTIN_MODELS
        .iter()
        .filter(|model| model.provider != soba_workspace::setup::DEMO_PROVIDER)
    {
        add(match model.provider {
            "openai" | "anthropic" => format!("{}/{}", model.provider, model.name),
            _ => format!("openrouter/{}/{}", model.provider, model.name),
        });
    }
    ids
}

/// Returns the `/model` picker's choices: the usable models (the current
/// one marked), and a note saying how many were left out and why.
pub fn model_choices(
    ids: &[String],
    current: &str,
    access: impl Fn(&str) -> ModelAccess,
) -> (Vec<PickerItem>, Option<String>) {
    let mut items = Vec::new();
    let mut missing_keys: Vec<String> = Vec::new();
    let mut n_hidden = 0;
    for id in ids {
        let usable = match access(id) {
            ModelAccess::Ready => true,
            ModelAccess::NeedsKey(var) => {
                if !missing_keys.contains(&var) {
                    missing_keys.push(var);
                }
                false
            }
            ModelAccess::NoProvider => false,
        };
        if !usable && id != current {
            n_hidden += 1;
            continue;
        }
        items.push(PickerItem {
            label: if id == current {
                format!("{id}  (current)")
            } else {
                id.clone()
            },
            key: id.clone(),
        });
    }
    let note = (n_hidden > 0).then(|| {
        let mut note = format!(
            "{n_hidden} more model{} hidden: ",
            if n_hidden == 1 { "" } else { "s" }
        );
        if missing_keys.is_empty() {
            note.push_str("their providers are not configured");
        } else {
            note.push_str(&format!("set {} to use them", missing_keys.join(" or ")));
        }
        note
    });
    (items, note)
}

/// Returns the `/budget` text: every limit of SPEC §4.3, effective tokens
/// and their source, the auto-compact setting and the last compaction.
pub fn budget_text(core: &SessionCore) -> String {
    let budget = core.budget();
    let measurement = core.measure();
    let side = sidebar(core);
    let rows: [(&str, u64); 10] = [
        ("contextWindow", budget.context_window().get()),
        ("maxOutputTokens", budget.max_output_tokens().get()),
        ("hardLimit", budget.hard_limit().get()),
        ("softLimit", budget.soft_limit().get()),
        ("autoLimit", budget.auto_limit().get()),
        ("hygieneLimit", budget.hygiene_limit().get()),
        ("keepRecent", budget.keep_recent().get()),
        ("softGate", budget.soft_gate().get()),
        ("roiFloor", budget.roi_floor().get()),
        ("maxToolResult", budget.max_tool_result_tokens().get()),
    ];
    let mut text = format!("/budget · {}\n", core.model_id());
    text.push_str(&format!(
        "{:<16}{:>10} tokens ({})\n",
        "effective",
        group_thousands(measurement.tokens.get()),
        measurement.source.as_str()
    ));
    for (name, value) in rows {
        text.push_str(&format!("{name:<16}{:>10}\n", group_thousands(value)));
    }
    text.push_str(&format!(
        "{:<16}{:>10}\n",
        "auto-compact",
        if side.auto_compact { "on" } else { "off" }
    ));
    text.push_str(&format!(
        "{:<16}{}",
        "last compaction",
        side.last_compaction.unwrap_or_else(|| "(none)".to_owned())
    ));
    text
}

/// Returns the `/usage` text: the tokens every request recorded in the
/// log reported (`entries`: the whole log, rewound branches included, as
/// they were billed), and their list price where `prices` (the built-in
/// table with the config's overrides) has one.
pub fn usage_text(
    session_model: &str,
    entries: &[Entry],
    prices: &soba_replay::price::PriceTable,
) -> String {
    let mut total = soba_core::Usage::default();
    let (mut requests, mut priced, mut unpriced) = (0_usize, 0.0_f64, Vec::<String>::new());
    let mut priced_requests = 0_usize;
    let mut priced_models: Vec<String> = Vec::new();
    for entry in entries {
        let EntryBody::Message(message) = &entry.body else {
            continue;
        };
        let Some(usage) = &message.message.usage else {
            continue;
        };
        requests += 1;
        total.add(usage);
        let model = message.message.model.as_deref().unwrap_or(session_model);
        match prices.get(model) {
            Some(price) => {
                priced += price.recorded(usage);
                priced_requests += 1;
                if !priced_models.iter().any(|known| known == model) {
                    priced_models.push(model.to_owned());
                }
            }
            None if !unpriced.iter().any(|known| known == model) => unpriced.push(model.to_owned()),
            None => {}
        }
    }
    let mut text = format!(
        "/usage · {} request{} recorded usage\n",
        requests,
        if requests == 1 { "" } else { "s" }
    );
    for (name, value) in [
        ("input", total.input),
        ("cacheRead", total.cache_read),
        ("cacheWrite", total.cache_write),
        ("output", total.output),
    ] {
        text.push_str(&format!("{name:<16}{:>12}\n", group_thousands(value)));
    }
    let cost = if unpriced.is_empty() {
        format!(
            "${priced:.4} ({})",
            prices.source_for(priced_models.iter().map(String::as_str))
        )
    } else if priced_requests == 0 {
        format!(
            "not priced: soba has no price for {}; set models.\"{}\".inputPrice and outputPrice (US dollars per million tokens) in your config",
            unpriced.join(", "),
            unpriced[0]
        )
    } else {
        format!(
            "${priced:.4} for the priced requests; no price for {} ({})",
            unpriced.join(", "),
            prices.source_for(priced_models.iter().map(String::as_str))
        )
    };
    text.push_str(&format!("{:<16}{cost}", "cost"));
    text
}

/// The width of the `/status` labels: with the longest value of a known
/// length, a session id (36 characters), a line is 46 columns, the
/// conversation's text column on an 80-column terminal beside the sidebar.
const STATUS_LABEL: usize = 10;

/// Returns the `/status` text: model, window, how full the context is
/// against autoLimit and hardLimit, auto-compact, the latest capsule, the
/// session id and its log, one fact a line, each within 46 columns (only
/// a model id or a path of more can be wider).
pub fn status_text(core: &SessionCore, log_path: &std::path::Path) -> String {
    let budget = core.budget();
    let measurement = core.measure();
    let tokens = measurement.tokens.get();
    let percent = |limit: u64| (tokens * 100).checked_div(limit).unwrap_or(0);
    let row = |label: &str, value: String| format!("{label:<STATUS_LABEL$}{value}");
    let side = sidebar(core);
    let mut lines = vec![
        format!("/status · {}", core.model_id()),
        row(
            "window",
            format!(
                "{} tokens, maxOutput {}",
                group_thousands(budget.context_window().get()),
                group_thousands(budget.max_output_tokens().get())
            ),
        ),
        row(
            "context",
            format!(
                "{} tokens ({})",
                group_thousands(tokens),
                measurement.source.as_str()
            ),
        ),
        row(
            "",
            format!(
                "{}% of autoLimit {}",
                percent(budget.auto_limit().get()),
                group_thousands(budget.auto_limit().get())
            ),
        ),
        row(
            "",
            format!(
                "{}% of hardLimit {}",
                percent(budget.hard_limit().get()),
                group_thousands(budget.hard_limit().get())
            ),
        ),
        format!(
            "auto-compact {}",
            if side.auto_compact { "on" } else { "off" }
        ),
    ];
    let latest = core
        .path()
        .iter()
        .rev()
        .find_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => Some((entry, capsule)),
            _ => None,
        });
    match latest {
        Some((entry, capsule)) => {
            let (before, after) = (capsule.tokens_before.get(), capsule.tokens_after.get());
            lines.push(row(
                "capsule",
                format!(
                    "{} ({})",
                    entry.id.short_with(core.short_id_len_now()),
                    capsule.trigger.as_str()
                ),
            ));
            lines.push(row(
                "",
                format!(
                    "{} → {} tokens ({})",
                    group_thousands(before),
                    group_thousands(after),
                    soba_engine::event::size_change(before, after)
                ),
            ));
            if capsule.quality == Quality::Degraded {
                lines.push(row("", "fallback used".to_owned()));
            }
        }
        None => lines.push(row("capsule", "none yet".to_owned())),
    }
    lines.push(row("session", core.header().id.as_str().to_owned()));
    lines.push(row("log", log_path.display().to_string()));
    lines.join("\n")
}

fn one_line(text: &str, max_chars: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max_chars {
        return flat;
    }
    let mut cut: String = flat.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Returns the `/resume` and `soba -r` picker's column labels and one
/// choice per session (`sessions` as listed, most recently modified
/// first, each with its glance): the id spelled at `id_len`, when its log
/// last changed (the order, as `soba sessions` shows it), its message
/// count, size and whole title, which the picker cuts to its width (and
/// escapes); `(a new session)` first when `new_session`.
pub fn session_choices(
    sessions: &[(SessionSummary, SessionGlance)],
    id_len: usize,
    new_session: bool,
) -> (String, Vec<PickerItem>) {
    let row = |id: &str, modified: &str, messages: &str, size: &str, title: &str| {
        format!("{id:<id_len$}  {modified:<16}  {messages:>8}  {size:>9}  {title}")
    };
    let header = row(
        "id",
        session_list::MODIFIED_LABEL,
        "messages",
        "size",
        "title",
    );
    let mut items = Vec::new();
    if new_session {
        items.push(PickerItem {
            key: String::new(),
            label: "(a new session)".to_owned(),
        });
    }
    items.extend(sessions.iter().map(|(summary, glance)| PickerItem {
        key: summary.path.display().to_string(),
        label: row(
            &session_list::short(&summary.id, id_len),
            &session_list::modified(summary),
            &group_thousands(glance.n_messages),
            &human_size(summary.size),
            glance.title.as_deref().unwrap_or("(no message typed)"),
        ),
    }));
    (header, items)
}

/// Returns the `/rewind` picker's choices: real user messages and capsules
/// on the path, newest first, with short ids.
pub fn rewind_choices(path: &[Entry], short: usize) -> Vec<PickerItem> {
    let mut n_user = 0;
    let mut items = Vec::new();
    for entry in path.iter().rev() {
        match &entry.body {
            EntryBody::Message(stored) if stored.message.is_real_user() => {
                n_user += 1;
                items.push(PickerItem {
                    key: entry.id.as_str().to_owned(),
                    label: format!(
                        "{:<8} {n_user:>2}. {}",
                        entry.id.short_with(short),
                        one_line(&stored.message.text(), 60)
                    ),
                });
            }
            EntryBody::Capsule(capsule) => items.push(PickerItem {
                key: entry.id.as_str().to_owned(),
                label: format!(
                    "{:<8}     capsule ({}): {} → {} tokens",
                    entry.id.short_with(short),
                    capsule.trigger.as_str(),
                    group_thousands(capsule.tokens_before.get()),
                    group_thousands(capsule.tokens_after.get())
                ),
            }),
            _ => {}
        }
    }
    items
}

/// Finds the entry `wanted` designates: a full id, or a prefix plus at
/// least four random hex digits. Ambiguity and absence are errors.
pub fn find_entry<'a>(entries: &'a [Entry], wanted: &str) -> Result<&'a Entry, String> {
    let matching: Vec<&Entry> = entries
        .iter()
        .filter(|entry| {
            entry.id.matches_short(wanted) && !matches!(entry.body, EntryBody::Leaf { .. })
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no entry {wanted} in this session; /rewind without an argument lists them"
        )),
        many => Err(format!(
            "{wanted} matches {} entries; give more digits",
            many.len()
        )),
    }
}

/// Returns the N-th most recent real user message on the path (1 = latest).
pub fn nth_user_message(path: &[Entry], n: usize) -> Result<&Entry, String> {
    let users: Vec<&Entry> = path
        .iter()
        .rev()
        .filter(|entry| matches!(&entry.body, EntryBody::Message(stored) if stored.message.is_real_user()))
        .collect();
    users.get(n.saturating_sub(1)).copied().ok_or_else(|| {
        format!(
            "there {} only {} message{} to rewind to",
            if users.len() == 1 { "is" } else { "are" },
            users.len(),
            if users.len() == 1 { "" } else { "s" }
        )
    })
}

/// Brings `shown` (a whole path, root → leaf) up to date with the core's
/// live `stretch`: the part of `shown` before the stretch's first entry
/// stays, the rest is replaced. Returns false when the stretch does not
/// start on `shown` (a rewind elsewhere, a first load): read the whole
/// path then.
pub fn follow_stretch(shown: &mut Vec<Entry>, stretch: &[Entry]) -> bool {
    let Some(first) = stretch.first() else {
        shown.clear();
        return true;
    };
    let Some(at) = shown.iter().rposition(|entry| entry.id == first.id) else {
        return false;
    };
    shown.truncate(at);
    shown.extend_from_slice(stretch);
    true
}

/// Returns the path from the root to `leaf`, following parent ids.
pub fn path_to(entries: &[Entry], leaf: &EntryId) -> Vec<Entry> {
    let index: HashMap<&EntryId, &Entry> = entries.iter().map(|entry| (&entry.id, entry)).collect();
    let mut path = Vec::new();
    let mut cursor = Some(leaf);
    while let Some(id) = cursor {
        let Some(entry) = index.get(id) else {
            break;
        };
        if path.len() > entries.len() {
            break; // a parent cycle in a hand-edited log
        }
        path.push((*entry).clone());
        cursor = entry.parent_id.as_ref();
    }
    path.reverse();
    path
}

/// Plans a rewind to `target`: the new leaf (a user message's parent, or
/// the entry itself), the text to put back in the input box, and the
/// confirmation lines (SPEC §11.3).
///
/// `entries` are every entry of the log and `current` the whole current
/// path, both read from the file: the target may lie before the live
/// stretch the core keeps.
pub fn plan_rewind(
    core: &SessionCore,
    target: &Entry,
    entries: &[Entry],
    current: &[Entry],
) -> Result<RewindPlan, String> {
    let short = core.short_id_len_now();
    let (leaf, restore_input, label) = match &target.body {
        EntryBody::Message(stored) if stored.message.is_real_user() => {
            let Some(parent) = target.parent_id.clone() else {
                return Err(
                    "that is the session's first entry: there is nothing before it to rewind to; start a new session instead"
                        .to_owned(),
                );
            };
            let text = typed_text(&stored.message);
            (
                parent,
                Some(text.clone()),
                format!("before your message \"{}\"", one_line(&text, 50)),
            )
        }
        EntryBody::Capsule(capsule) => (
            target.id.clone(),
            None,
            format!(
                "capsule {} ({})",
                target.id.short_with(short),
                capsule.trigger.as_str()
            ),
        ),
        other => (
            target.id.clone(),
            None,
            format!(
                "{} entry {}",
                other.type_name(),
                target.id.short_with(short)
            ),
        ),
    };
    let new_path = path_to(entries, &leaf);
    let kept: HashSet<&EntryId> = new_path.iter().map(|entry| &entry.id).collect();
    let undone: Vec<Entry> = current
        .iter()
        .filter(|entry| !kept.contains(&entry.id))
        .cloned()
        .collect();
    let modified = facts::extract(
        &FactsInput {
            tail: &[],
            span: &undone,
            previous: None,
            retained: &HashSet::new(),
            cwd: Some(&core.header().cwd),
        },
        &FactsConfig::default(),
        core.counter().as_ref(),
    )
    .files_changed;
    let after = core
        .factor()
        .apply(core.input_for(&new_path).total_tokens());
    let now = core.measure().tokens;
    let mut lines = vec![format!("Rewind to {label}.")];
    if modified.is_empty() {
        lines.push("No files were modified after it.".to_owned());
    } else {
        lines.push(format!(
            "Files modified after it (they stay as they are on disk): {}",
            modified.join(", ")
        ));
    }
    let mut context = format!(
        "Estimated context after: {} tokens (now {}).",
        group_thousands(after.get()),
        group_thousands(now.get())
    );
    if after > core.budget().hard_limit() {
        context.push_str(" That is over hardLimit: the next request compacts first (hard_limit).");
    }
    lines.push(context);
    Ok(RewindPlan {
        leaf: leaf.as_str().to_owned(),
        restore_input,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36 item 5: a configured local model that needs no key, and
    /// whose window its server reports (no `models` entry), is offered by
    /// `/model` instead of "nothing to choose".
    #[test]
    fn refused_calls_say_so_not_error_sizes() {
        let line = |text: &str| tool_line("bash: ls", "bash", Some((text, true)), false);
        assert_eq!(line(USER_DENIAL), "bash: ls (denied)");
        assert_eq!(
            line(soba_core::facts::NOT_RUN_AFTER_DENIAL),
            "bash: ls (not run: you denied an earlier call)"
        );
        assert_eq!(
            line(NON_INTERACTIVE_DENIAL),
            "bash: ls (not run: soba run could not ask for approval)"
        );
    }

    #[test]
    fn the_model_picker_offers_a_keyless_local_model() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (home, ws) = (dir.path().join("home"), dir.path().join("ws"));
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(&ws).expect("workspace");
        std::fs::write(
            home.join("config.json"),
            r#"{"model": "local/qwen3", "providers": {"local": {"api": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1"}}}"#,
        )
        .expect("config");
        let env = soba_workspace::paths::Env::from_pairs([
            ("SOBA_HOME", home.display().to_string()),
            ("HOME", dir.path().display().to_string()),
        ]);
        let ctx = soba_workspace::context::Context::load_with(
            env,
            &ws,
            &soba_workspace::Options::default(),
        )
        .expect("config loads");
        let ids = model_ids(ctx.config(), "local/qwen3");
        assert_eq!(ids[0], "local/qwen3");
        assert_eq!(ids.iter().filter(|id| *id == "local/qwen3").count(), 1);
        assert_eq!(model_access(&ctx, "local/qwen3"), ModelAccess::Ready);
        let (items, note) = model_choices(&ids, "local/qwen3", |id| model_access(&ctx, id));
        assert_eq!(items[0].label, "local/qwen3  (current)");
        assert!(note.is_some_and(|note| note.contains("ANTHROPIC_API_KEY")));
    }

    use soba_core::{IdKind, Message, MessageEntry, ToolInput, ToolUse};

    fn entry(n: u128, parent: Option<u128>, body: EntryBody) -> Entry {
        Entry {
            id: EntryId::from_uuid(
                IdKind::Entry,
                0x0190_0000_0000_7000_8000_0000_0000_0000 | n << 16,
            ),
            parent_id: parent.map(|p| {
                EntryId::from_uuid(
                    IdKind::Entry,
                    0x0190_0000_0000_7000_8000_0000_0000_0000 | p << 16,
                )
            }),
            timestamp: String::new(),
            body,
        }
    }

    #[test]
    fn the_shown_path_follows_the_stretch_and_keeps_what_compaction_dropped() {
        let chain: Vec<Entry> = (1..=6)
            .map(|n| {
                entry(
                    n,
                    (n > 1).then(|| n - 1),
                    message(Message::user(format!("m{n}"))),
                )
            })
            .collect();
        let ids = |path: &[Entry]| path.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        // Shown: 1–4; the core's stretch after a compaction: 3–6.
        let mut shown = chain[..4].to_vec();
        assert!(follow_stretch(&mut shown, &chain[2..]));
        assert_eq!(ids(&shown), ids(&chain));
        // A rewind to 2 inside what is shown.
        assert!(follow_stretch(&mut shown, &chain[..2]));
        assert_eq!(ids(&shown), ids(&chain[..2]));
        // A stretch that does not attach: the caller reads the log.
        let elsewhere = [entry(9, Some(8), message(Message::user("other")))];
        assert!(!follow_stretch(&mut shown, &elsewhere));
        assert_eq!(ids(&shown), ids(&chain[..2]), "left as it was");
        assert!(follow_stretch(&mut shown, &[]));
        assert!(shown.is_empty());
    }

    #[test]
    fn a_loaded_capsule_file_name_stays_on_one_line() {
        let path = [entry(
            1,
            None,
            EntryBody::Context(soba_core::ContextEntry {
                source: ContextSource::CapsuleFile,
                path: "new\nline \u{1b}[2J.capsule.md".into(),
                sha256: String::new(),
                text: "x".into(),
            }),
        )];
        let items = history_items(&path, 4, false, &mut |_, _| None);
        let [HistoryItem::Event(line)] = items.as_slice() else {
            panic!("{items:?}");
        };
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line:?}");
        assert!(
            line.starts_with("loaded capsule file new\\nline "),
            "{line:?}"
        );
    }

    fn message(message: Message) -> EntryBody {
        EntryBody::Message(MessageEntry {
            message,
            tokens: None,
        })
    }

    fn call(id: &str, name: &str, input: serde_json::Value) -> Message {
        Message::new(
            Role::Assistant,
            vec![
                Block::Text("Running it.".into()),
                Block::ToolUse(ToolUse {
                    id: id.into(),
                    name: name.into(),
                    input: ToolInput::from_value(input),
                }),
            ],
        )
    }

    #[test]
    fn tool_calls_fold_to_one_line() {
        let output = format!("{}\nexit code 1", "x".repeat(2_400));
        let path = vec![
            entry(1, None, message(Message::user("run the tests"))),
            entry(
                2,
                Some(1),
                message(call(
                    "c1",
                    "bash",
                    serde_json::json!({"command": "cargo test"}),
                )),
            ),
            entry(
                3,
                Some(2),
                message(Message::tool_result("c1", output, true)),
            ),
            entry(
                4,
                Some(3),
                message(call(
                    "c2",
                    "read_file",
                    serde_json::json!({"path": "src/lib.rs"}),
                )),
            ),
            entry(
                5,
                Some(4),
                message(Message::tool_result("c2", "fn main() {}", false)),
            ),
            entry(
                6,
                Some(5),
                message(call(
                    "c3",
                    "write_file",
                    serde_json::json!({"path": "a.txt"}),
                )),
            ),
        ];
        let items = history_items(&path, 4, false, &mut |_, _| None);
        assert_eq!(
            items,
            vec![
                HistoryItem::User("run the tests".into()),
                HistoryItem::Assistant("Running it.".into()),
                HistoryItem::Tool {
                    line: "bash: cargo test (exit 1, output 2.4 KiB)".into(),
                    is_error: true,
                    output: Some(ToolOutput {
                        lines: vec!["x".repeat(1_000), "exit code 1".into()],
                        more_lines: 0
                    }),
                    diff: Vec::new(),
                },
                HistoryItem::Assistant("Running it.".into()),
                HistoryItem::Tool {
                    line: "read_file: src/lib.rs (output 12 B)".into(),
                    is_error: false,
                    output: Some(ToolOutput {
                        lines: vec!["fn main() {}".into()],
                        more_lines: 0
                    }),
                    diff: Vec::new(),
                },
                HistoryItem::Assistant("Running it.".into()),
                HistoryItem::Tool {
                    line: "write_file: a.txt (no result recorded)".into(),
                    is_error: false,
                    output: None,
                    diff: Vec::new(),
                },
            ]
        );
        let running = history_items(&path, 4, true, &mut |_, _| None);
        assert_eq!(
            running.last(),
            Some(&HistoryItem::Tool {
                line: "write_file: a.txt (running…)".into(),
                is_error: false,
                output: None,
                diff: Vec::new(),
            })
        );
    }

    /// Issue 36 item 10: an approved edit keeps its diff under its line
    /// (from the call's arguments, so a resumed session shows it too), a
    /// written file its lines; a denied edit says "denied" and keeps what
    /// was denied; a failed edit shows no diff.
    #[test]
    fn file_changes_keep_their_diff_and_a_denied_call_says_so() {
        let edit = serde_json::json!({"path": "src/lexer.rs", "oldString": "a\nb\nc\n", "newString": "a\nB\nc\n"});
        let path = vec![
            entry(1, None, message(Message::user("fix it"))),
            entry(2, Some(1), message(call("c1", "edit_file", edit.clone()))),
            entry(
                3,
                Some(2),
                message(Message::tool_result("c1", "edited src/lexer.rs", false)),
            ),
            entry(4, Some(3), message(call("c2", "edit_file", edit.clone()))),
            entry(
                5,
                Some(4),
                message(Message::tool_result("c2", USER_DENIAL, true)),
            ),
            entry(6, Some(5), message(call("c3", "edit_file", edit))),
            entry(
                7,
                Some(6),
                message(Message::tool_result("c3", "oldString not found", true)),
            ),
            entry(
                8,
                Some(7),
                message(call(
                    "c4",
                    "write_file",
                    serde_json::json!({"path": "n.md", "content": "# T\ntext\n"}),
                )),
            ),
            entry(
                9,
                Some(8),
                message(Message::tool_result("c4", "wrote n.md", false)),
            ),
        ];
        let items = history_items(&path, 4, false, &mut |_, _| None);
        let tools: Vec<(&str, Vec<(DiffKind, &str)>)> = items
            .iter()
            .filter_map(|item| match item {
                HistoryItem::Tool { line, diff, .. } => Some((
                    line.as_str(),
                    diff.iter().map(|d| (d.kind, d.text.as_str())).collect(),
                )),
                _ => None,
            })
            .collect();
        let change = vec![
            (DiffKind::Context, "a"),
            (DiffKind::Removed, "b"),
            (DiffKind::Added, "B"),
            (DiffKind::Context, "c"),
        ];
        assert_eq!(
            tools,
            vec![
                ("edit_file: src/lexer.rs (output 19 B)", change.clone()),
                ("edit_file: src/lexer.rs (denied)", change),
                ("edit_file: src/lexer.rs (error, output 19 B)", Vec::new()),
                (
                    "write_file: n.md (output 10 B)",
                    vec![
                        (DiffKind::Note, "2 lines"),
                        (DiffKind::Added, "# T"),
                        (DiffKind::Added, "text"),
                    ]
                ),
            ]
        );
    }

    /// Issue 36 (first hour) item 7: `read_file: hello.py (92 B)` read as
    /// the file's size, which is 65 B: the figure is the output's (its
    /// numbered lines), and the line says so.
    #[test]
    fn a_tool_line_says_its_size_is_the_outputs() {
        let file = "def greet(name):\n\tif name:\n\t\treturn 'hi ' + name\n    return 'hi'\n";
        let output = file
            .lines()
            .enumerate()
            .map(|(idx, line)| format!("{:>6}\t{line}", idx + 1))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!((file.len(), output.len()), (65, 92));
        assert_eq!(
            tool_line(
                "read_file: hello.py",
                "read_file",
                Some((&output, false)),
                false
            ),
            "read_file: hello.py (output 92 B)"
        );
        assert_eq!(
            tool_line("bash: ls", "bash", Some(("a\nexit code 0", false)), false),
            "bash: ls (exit 0, output 13 B)"
        );
    }

    #[test]
    fn nth_user_message_counts_from_the_latest() {
        let path = vec![
            entry(1, None, message(Message::user("one"))),
            entry(2, Some(1), message(Message::assistant("a"))),
            entry(3, Some(2), message(Message::user("two"))),
        ];
        assert_eq!(
            nth_user_message(&path, 1).map(|e| e.id.clone()),
            Ok(path[2].id.clone())
        );
        assert_eq!(
            nth_user_message(&path, 2).map(|e| e.id.clone()),
            Ok(path[0].id.clone())
        );
        assert_eq!(
            nth_user_message(&path, 3).map(|e| e.id.clone()),
            Err("there are only 2 messages to rewind to".to_owned())
        );
        let choices = rewind_choices(&path, 4);
        assert_eq!(choices.len(), 2);
        assert!(
            choices[0].label.ends_with(" 1. two"),
            "{}",
            choices[0].label
        );
        assert!(
            choices[1].label.ends_with(" 2. one"),
            "{}",
            choices[1].label
        );
    }

    #[test]
    fn entries_are_found_by_short_id() {
        let path = vec![
            entry(0x1234, None, message(Message::user("one"))),
            entry(0x1235, Some(0x1234), message(Message::user("two"))),
        ];
        let short = path[0].id.short_with(4);
        assert!(find_entry(&path, &short).is_err(), "ambiguous at 4 digits");
        let long = path[0].id.short_with(short_len(&path));
        assert_eq!(
            find_entry(&path, &long).map(|e| e.id.clone()),
            Ok(path[0].id.clone())
        );
        assert!(find_entry(&path, "e_ffff").is_err());
        assert_eq!(path_to(&path, &path[1].id).len(), 2);
    }

    #[test]
    fn tool_output_is_bounded() {
        let text: String = (0..250).map(|n| format!("{n}\n")).collect();
        let output = tool_output(&text);
        assert_eq!(output.lines.len(), MAX_OUTPUT_LINES);
        assert_eq!(output.more_lines, 50);
    }

    #[test]
    fn attachments_show_as_one_line_and_are_not_restored_by_a_rewind() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("notes.md"), "a\nb\nc\n").expect("file");
        let workspace = soba_engine::tool::Workspace::new(dir.path()).expect("workspace");
        let attached = mention::attach(&workspace, "read @notes.md please");
        let path = vec![entry(1, None, message(attached.message.clone()))];
        assert_eq!(
            history_items(&path, 4, false, &mut |_, _| None),
            [
                HistoryItem::User("read @notes.md please".into()),
                HistoryItem::Event("@notes.md (3 lines attached)".into()),
            ]
        );
        assert_eq!(typed_text(&attached.message), "read @notes.md please");
        assert!(attached.message.text().contains("a\nb\nc"));
    }

    #[test]
    fn the_model_picker_offers_usable_models_and_says_what_it_hid() {
        let ids: Vec<String> = [
            "anthropic/claude-sonnet-4-5",
            "openai/gpt-5",
            "openai/gpt-5-mini",
            "ollama/llama3",
            "nowhere/x",
        ]
        .iter()
        .map(|id| (*id).to_owned())
        .collect();
        let access = |id: &str| match id.split('/').next() {
            Some("anthropic" | "ollama") => ModelAccess::Ready,
            Some("openai") => ModelAccess::NeedsKey("OPENAI_API_KEY".into()),
            _ => ModelAccess::NoProvider,
        };
        let (items, note) = model_choices(&ids, "openai/gpt-5", access);
        let labels: Vec<&str> = items.iter().map(|item| item.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "anthropic/claude-sonnet-4-5",
                "openai/gpt-5  (current)",
                "ollama/llama3"
            ]
        );
        assert_eq!(
            note.as_deref(),
            Some("2 more models hidden: set OPENAI_API_KEY to use them")
        );
        let (_, note) = model_choices(&ids[..1], "", access);
        assert_eq!(note, None);
    }
}
