//! What `soba show` says about a session log, as text any front door can
//! show: the summary (header, counts, path, capsules, usage, damage) and
//! one line per entry with short ids.

use std::collections::{BTreeMap, HashSet};

use soba_core::terminal::{Line, sanitize_line};
use soba_core::tokens::group_thousands;
use soba_core::{EntryBody, EntryId, Usage};
use soba_store::reader::{LoggedEntry, SessionLog};

/// Characters of message text shown per entry line.
const PREVIEW_CHARS: usize = 72;

/// Returns `path` as one safe line of text.
fn shown_path(path: &std::path::Path) -> String {
    sanitize_line(&path.display().to_string()).into_owned()
}

fn short(id: &EntryId, len: usize) -> String {
    id.short_with(len)
}

/// One line of text: line breaks and tabs shown as spaces, other unsafe
/// characters escaped ([`sanitize_line`]), cut with `…`.
fn preview(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect();
    let flat = sanitize_line(flat.trim());
    if flat.chars().count() <= PREVIEW_CHARS {
        flat.into_owned()
    } else {
        let cut: String = flat.chars().take(PREVIEW_CHARS - 1).collect();
        format!("{cut}…")
    }
}

/// Describes an entry's body in a few words.
fn detail(logged: &LoggedEntry, short_len: usize) -> String {
    match &logged.entry.body {
        EntryBody::Message(message_entry) => {
            let message = &message_entry.message;
            let mut parts = vec![message.role.as_str().to_owned()];
            if message.origin != soba_core::MessageOrigin::Typed {
                parts.push(format!("({})", message.origin.as_str()));
            }
            let calls: Vec<&str> = message.tool_uses().map(|call| call.name.as_str()).collect();
            if !calls.is_empty() {
                parts.push(format!("calls {}", Line(&calls.join(", "))));
            }
            for result in message.tool_results() {
                parts.push(format!(
                    "result{} {}",
                    if result.is_error { " (error)" } else { "" },
                    preview(&result.text())
                ));
            }
            let text = message.text();
            if !text.trim().is_empty() {
                parts.push(preview(&text));
            }
            if let Some(tokens) = &message_entry.tokens {
                parts.push(format!("[{} tokens]", group_thousands(tokens.n.get())));
            }
            parts.join(" ")
        }
        EntryBody::Context(context) => {
            format!("{} {}", context.source.as_str(), Line(&context.path))
        }
        EntryBody::Capsule(capsule) => {
            let mut line = format!(
                "{} {} {} → {} tokens, kept from {}",
                capsule.trigger.as_str(),
                capsule.quality.as_str(),
                group_thousands(capsule.tokens_before.get()),
                group_thousands(capsule.tokens_after.get()),
                capsule
                    .first_kept_entry_id
                    .as_ref()
                    .map_or_else(|| "nothing".to_owned(), |id| short(id, short_len))
            );
            if let Some(scope) = &capsule.scope {
                line.push_str(&format!(
                    ", summarized from {}{} ({} tokens in {} calls; the older {} as local facts only)",
                    scope
                        .from_entry_id
                        .as_ref()
                        .map_or_else(|| "an unknown entry".to_owned(), |id| short(id, short_len)),
                    if scope.partial { " (its end)" } else { "" },
                    group_thousands(scope.summarized_tokens.get()),
                    group_thousands(scope.chunks),
                    group_thousands(scope.facts_only_tokens.get())
                ));
            }
            line
        }
        EntryBody::Hygiene {
            pruned_through,
            reclaimed_tokens,
            ..
        } => format!(
            "pruned through {} ({} tokens)",
            short(pruned_through, short_len),
            group_thousands(reclaimed_tokens.get())
        ),
        EntryBody::Checkpoint { kind, note } => format!("{} {}", kind.as_str(), preview(note)),
        EntryBody::Leaf { target } => format!("→ {}", short(target, short_len)),
        EntryBody::ModelChange { model } => sanitize_line(model).into_owned(),
        EntryBody::ConfigChange {
            auto_compact,
            approvals,
        } => {
            let mut parts = Vec::new();
            if let Some(on) = auto_compact {
                parts.push(format!("autoCompact {}", if *on { "on" } else { "off" }));
            }
            if let Some(grants) = approvals {
                let mut names: Vec<String> = grants.tools.iter().cloned().collect();
                names.extend(grants.bash_words.iter().map(|word| format!("bash {word}")));
                parts.push(format!("approvals {}", Line(&names.join(", "))));
            }
            parts.join(" · ")
        }
        EntryBody::Skill(skill) => {
            format!("{:?} {}", skill.action, Line(&skill.name)).to_lowercase()
        }
        EntryBody::Unknown { .. } => "(unknown type, kept)".to_owned(),
        EntryBody::Damaged { reason, .. } => {
            format!("(damaged, kept as a placeholder: {})", preview(reason))
        }
    }
}

/// Returns one line per entry in file order; `*` marks the current path.
pub fn entries_text(log: &SessionLog, short_len: usize) -> String {
    let on_path: HashSet<&EntryId> = log.path().iter().map(|logged| &logged.entry.id).collect();
    let id_width = short_len + 3;
    let mut out = String::new();
    for logged in log.entries() {
        let entry = &logged.entry;
        let line = logged
            .location
            .line
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        let parent = entry
            .parent_id
            .as_ref()
            .map_or_else(|| "-".to_owned(), |id| short(id, short_len));
        out.push_str(&format!(
            "{line:>6} {} {:<id_width$} {:<id_width$} {:<13} {}\n",
            if on_path.contains(&entry.id) {
                '*'
            } else {
                ' '
            },
            short(&entry.id, short_len),
            parent,
            entry.body.type_name(),
            detail(logged, short_len)
        ));
    }
    out
}

/// Returns the summary: header, counts, path, capsules, usage, diagnostics.
pub fn summary_text(log: &SessionLog, file: &std::path::Path, short_len: usize) -> String {
    let mut out = String::new();
    match log.header() {
        Some(header) => {
            out.push_str(&format!("session   {}\n", Line(header.id.as_str())));
            out.push_str(&format!("file      {}\n", shown_path(file)));
            out.push_str(&format!("created   {}\n", Line(&header.created_at)));
            out.push_str(&format!(
                "cwd       {} ({})\n",
                Line(&header.cwd),
                Line(&header.os)
            ));
            if let Some(from) = &header.imported_from {
                out.push_str(&format!(
                    "imported  {} {}{}\n",
                    Line(&from.format),
                    Line(&from.path),
                    from.original_id
                        .as_deref()
                        .map(|id| format!(" (original id {})", Line(id)))
                        .unwrap_or_default()
                ));
            }
            if !header.memory.is_empty() {
                out.push_str(&format!("memory    {} capsules\n", header.memory.len()));
            }
        }
        None => {
            out.push_str(&format!("file      {}\n", shown_path(file)));
            out.push_str("header    missing or damaged (run with --check)\n");
        }
    }
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_role: BTreeMap<&str, u64> = BTreeMap::new();
    let mut usage = Usage::default();
    let mut n_calls = 0u64;
    for logged in log.entries() {
        *by_type.entry(logged.entry.body.type_name()).or_default() += 1;
        if let EntryBody::Message(message_entry) = &logged.entry.body {
            let message = &message_entry.message;
            *by_role.entry(message.role.as_str()).or_default() += 1;
            n_calls += message.tool_uses().count() as u64;
            if let Some(reported) = &message.usage {
                usage.add(reported);
            }
        }
    }
    let types: Vec<String> = by_type
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    let roles: Vec<String> = by_role
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    out.push_str(&format!(
        "entries   {} ({})\n",
        log.entries().len(),
        types.join(", ")
    ));
    if !roles.is_empty() {
        out.push_str(&format!(
            "messages  {} · tool calls {n_calls}\n",
            roles.join(", ")
        ));
    }
    let path = log.path();
    let model = crate::setup::model_on_path(path.iter().map(|logged| &logged.entry));
    out.push_str(&format!(
        "leaf      {} · path {} entries · live stretch {}\n",
        log.leaf()
            .map_or_else(|| "-".to_owned(), |id| short(id, short_len)),
        path.len(),
        log.live_stretch().len()
    ));
    if let Some(model) = model {
        out.push_str(&format!("model     {}\n", Line(&model)));
    }
    let capsules: Vec<&LoggedEntry> = log
        .entries()
        .iter()
        .filter(|logged| matches!(logged.entry.body, EntryBody::Capsule(_)))
        .collect();
    if let Some(latest) = log.latest_capsule() {
        out.push_str(&format!(
            "capsules  {} · latest on path {} {}\n",
            capsules.len(),
            short(&latest.entry.id, short_len),
            detail(latest, short_len)
        ));
    } else if !capsules.is_empty() {
        out.push_str(&format!(
            "capsules  {} (none on the path)\n",
            capsules.len()
        ));
    }
    if usage != Usage::default() {
        out.push_str(&format!(
            "usage     input {} · output {} · cache read {} · cache write {} · reasoning {}\n",
            group_thousands(usage.input),
            group_thousands(usage.output),
            group_thousands(usage.cache_read),
            group_thousands(usage.cache_write),
            group_thousands(usage.reasoning)
        ));
    }
    let n_diagnostics = log.diagnostics().len();
    if n_diagnostics == 0 {
        out.push_str("damage    none found while reading (--check validates fully)\n");
    } else {
        out.push_str(&format!(
            "damage    {n_diagnostics} problems while reading (run with --check to list them)\n"
        ));
    }
    out
}
