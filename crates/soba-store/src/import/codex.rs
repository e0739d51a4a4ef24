//! Codex CLI sessions: the native rollout JSONL (FORMATS §7b) and the
//! `{messages, meta}` conversion of a rollout (FORMATS §6).
//!
//! One inference is a run of consecutive assistant items (messages,
//! reasoning, tool calls) up to the next tool output or user message; the
//! run becomes one assistant entry. Its usage is `last_token_usage` of the
//! next `token_count` (in file order for rollouts, the first at or after the
//! run's last timestamp for the conversion). A `token_count` that repeats
//! the cumulative total already attached records no new request (an
//! interrupted turn), so the run keeps no usage.
//!
//! A `thread_rolled_back` event drops the last turns from the history as
//! Codex does when it rebuilds the thread ([`ThreadHistory`]): their
//! lines are left out, with a diagnostic.
//!
//! A rollout's `compacted` line with a `replacement_history` becomes a
//! degraded capsule followed by that history's messages: Codex's summary
//! is encrypted, and what it sent next is the history it kept.

use std::collections::HashSet;

use serde_json::{Map, Value, json};
use soba_core::{Block, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage};

use super::builder::Diagnostics;
use super::builder::{
    Context, KeptTarget, SessionBuilder, array_field, content_field, content_text,
    for_each_jsonl_object, image_from_url, message_with, obj_field, parse_document, str_field,
    text_of, timestamp_field, timestamp_ms, tool_message, usage_figures,
};
use super::lines::Lines;
use super::swe_agent::openai_tool_call;
use super::{BilledResponse, Format, ImportedSession};

/// Normalises a Codex usage object (SPEC §4.2): `input_tokens` includes
/// the cached (and, when reported, cache-write) tokens. `None` (with a
/// diagnostic naming `at`) when a figure is not a count.
fn codex_usage(
    usage: &Map<String, Value>,
    at: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Usage> {
    let [input, cached, cache_write, output, reasoning] = usage_figures(
        usage,
        [
            "input_tokens",
            "cached_input_tokens",
            "cache_write_input_tokens",
            "output_tokens",
            "reasoning_output_tokens",
        ],
        at,
        diagnostics,
    )?;
    let cached = cached.min(input);
    let cache_write = cache_write.min(input.saturating_sub(cached));
    Some(Usage {
        input: input - cached - cache_write,
        cache_read: cached,
        cache_write,
        output,
        reasoning,
    })
}

/// Reads `last_token_usage` of a `token_count` info for an inference; its
/// diagnostics are given once, by [`apply_cumulative`].
fn last_usage(info: &Map<String, Value>) -> Option<Usage> {
    obj_field(info, "last_token_usage")
        .and_then(|last| codex_usage(last, "", &mut Diagnostics::default()))
}

/// Returns the origin of user text: environment and instruction wrappers
/// are injected context, `<turn_aborted>` is an agent-written marker.
fn user_origin(text: &str) -> MessageOrigin {
    let text = text.trim_start();
    if text.starts_with("<turn_aborted>") {
        MessageOrigin::Marker
    } else if text.starts_with("<environment_context>")
        || text.starts_with("<user_instructions>")
        || text.starts_with("# AGENTS.md instructions")
        || text.starts_with("<permissions instructions>")
    {
        MessageOrigin::Injected
    } else {
        MessageOrigin::Typed
    }
}

/// Builds a non-assistant message: `user` text with its origin; an
/// `<environment_context>` block under any role is injected user context
/// (Codex sends it as a user message); other `developer`/`system` text is a
/// system message.
fn context_message(role: &str, blocks: Vec<Block>, text: &str) -> Message {
    if role == "user" {
        message_with(Role::User, blocks, user_origin(text))
    } else if text.trim_start().starts_with("<environment_context>") {
        message_with(Role::User, blocks, MessageOrigin::Injected)
    } else {
        Message::new(Role::System, blocks)
    }
}

/// Returns whether a tool output reports failure: a non-zero exit code in
/// metadata or in the output header, or a failed `exec_command`.
fn output_is_error(text: &str, exit_code: Option<i64>) -> bool {
    if let Some(code) = exit_code {
        return code != 0;
    }
    let head = text.get(..text.len().min(2048)).unwrap_or(text);
    if text.trim_start().starts_with("exec_command failed") {
        return true;
    }
    head.lines()
        .find_map(|line| line.strip_prefix("Process exited with code "))
        .and_then(|code| code.trim().parse::<i64>().ok())
        .is_some_and(|code| code != 0)
}

/// Accumulates the assistant run being read.
#[derive(Debug, Default)]
struct Run {
    /// The run's entry and inference, once it has produced a block.
    open: Option<(usize, usize)>,
    /// Timestamp of the run's last item.
    last_timestamp: Option<String>,
}

impl Run {
    /// Adds blocks to the run, opening its entry and inference if needed.
    /// Returns the inference index when this call opened it.
    fn add(
        &mut self,
        blocks: Vec<Block>,
        timestamp: Option<String>,
        model: Option<String>,
        b: &mut SessionBuilder,
    ) -> Option<usize> {
        if timestamp.is_some() {
            self.last_timestamp.clone_from(&timestamp);
        }
        if let Some((entry_idx, _)) = self.open {
            if let Some(message) = b.message_mut(entry_idx) {
                message.content.extend(blocks);
            }
            return None;
        }
        if blocks.is_empty() {
            return None;
        }
        let entry_idx = b.push_message(Message::new(Role::Assistant, blocks), timestamp.clone());
        let inference_idx = b.push_inference(entry_idx, None, timestamp, model, None);
        self.open = Some((entry_idx, inference_idx));
        Some(inference_idx)
    }

    /// Ends the run, returning its inference and last timestamp.
    fn close(&mut self) -> Option<(usize, Option<String>)> {
        let closed = self
            .open
            .take()
            .map(|(_, inference)| (inference, self.last_timestamp.take()));
        self.last_timestamp = None;
        closed
    }
}

// ---------------------------------------------------------------------------
// {messages, meta}

/// Imports a rollout converted to `{messages, meta}`.
pub(crate) fn import_messages_meta(
    text: &str,
    ctx: &Context,
) -> Result<Vec<ImportedSession>, String> {
    let doc = parse_document(text)?;
    let messages = doc
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("no `messages` array")?;
    let empty = Map::new();
    let meta = obj_field(&doc, "meta").unwrap_or(&empty);
    let mut b = SessionBuilder::new(Format::CodexMessagesMeta, ctx, 0);
    if let Some(session) = obj_field(meta, "session_meta") {
        apply_session_meta(session, &mut b);
    }
    // Turn contexts by time, for the model in force.
    let mut turns: Vec<(i64, String)> = array_field(meta, "turn_contexts")
        .iter()
        .filter_map(Value::as_object)
        .filter_map(|turn| {
            let model = str_field(turn, "model")?.to_owned();
            let ms = timestamp_field(turn, "_timestamp")
                .as_deref()
                .and_then(timestamp_ms)
                .unwrap_or(i64::MIN);
            Some((ms, model))
        })
        .collect();
    turns.sort_by_key(|(ms, _)| *ms);
    if b.model.is_none() {
        b.model = turns.first().map(|(_, model)| model.clone());
    }
    let model_at = |ms: Option<i64>| -> Option<String> {
        let ms = ms.unwrap_or(i64::MAX);
        turns
            .iter()
            .rev()
            .find(|(at, _)| *at <= ms)
            .or(turns.first())
            .map(|(_, model)| model.clone())
    };

    let mut run = Run::default();
    let mut closed_runs: Vec<(usize, Option<String>)> = Vec::new();
    let mut current_model = b.model.clone();
    for (idx, message) in messages.iter().enumerate() {
        b.messages += 1;
        let Some(message) = message.as_object() else {
            b.diag(format!("messages[{idx}]: skipped: not an object"));
            closed_runs.extend(run.close());
            continue;
        };
        let role = str_field(message, "role").unwrap_or("");
        b.count_record(role);
        let timestamp =
            obj_field(message, "_metadata").and_then(|meta| timestamp_field(meta, "timestamp"));
        if role != "assistant" {
            closed_runs.extend(run.close());
        }
        let content = array_field(message, "content");
        match role {
            "assistant" => {
                let mut blocks = Vec::new();
                for block in content.iter().filter_map(Value::as_object) {
                    match str_field(block, "type") {
                        Some("text" | "output_text") => {
                            blocks.push(Block::Text(
                                str_field(block, "text").unwrap_or_default().to_owned(),
                            ));
                        }
                        Some("tool_call") => blocks.push(Block::ToolUse(ToolUse {
                            id: str_field(block, "tool_call_id")
                                .unwrap_or_default()
                                .to_owned(),
                            name: str_field(block, "name").unwrap_or_default().to_owned(),
                            input: arguments_input(block.get("arguments")),
                        })),
                        _ => {}
                    }
                }
                if !blocks
                    .iter()
                    .any(|block| matches!(block, Block::ToolUse(_)))
                {
                    for call in array_field(message, "tool_calls")
                        .iter()
                        .filter_map(Value::as_object)
                    {
                        blocks.push(Block::ToolUse(openai_tool_call(call)));
                    }
                }
                let model = model_at(timestamp.as_deref().and_then(timestamp_ms));
                if run.open.is_none() && model.is_some() && model != current_model {
                    if let Some(model) = model.clone() {
                        b.push_model_change(model, timestamp.clone());
                    }
                    current_model.clone_from(&model);
                }
                run.add(blocks, timestamp, model, &mut b);
            }
            "tool" => {
                let id = str_field(message, "tool_call_id")
                    .unwrap_or_default()
                    .to_owned();
                let at = format!("messages[{idx}]");
                let raw = content_field(message, "content", &at, "content", &mut b.diagnostics);
                let text = content_text(raw, &at, "content", &mut b.diagnostics);
                let exit_code = obj_field(message, "metadata")
                    .and_then(|m| m.get("exit_code"))
                    .and_then(Value::as_i64);
                let is_error = output_is_error(&text, exit_code);
                b.push_message(
                    tool_message(id, vec![ResultPart::Text(text)], is_error),
                    timestamp,
                );
            }
            "user" | "system" | "developer" => {
                let at = format!("messages[{idx}]");
                let raw = content_field(message, "content", &at, "content", &mut b.diagnostics);
                let text = content_text(raw, &at, "content", &mut b.diagnostics);
                b.push_message(
                    context_message(role, content_blocks(content), &text),
                    timestamp,
                );
            }
            other => b.diag(format!("messages[{idx}]: role {other:?} skipped")),
        }
    }
    closed_runs.extend(run.close());

    // Attach usage: the first token_count at or after the run's last item
    // that records a new request.
    let counts: Vec<(i64, &Map<String, Value>)> = array_field(meta, "token_counts")
        .iter()
        .filter_map(Value::as_object)
        .filter_map(|count| {
            let info = obj_field(count, "info")?;
            let ms = timestamp_field(count, "_timestamp")
                .as_deref()
                .and_then(timestamp_ms)?;
            Some((ms, info))
        })
        .collect();
    let mut cursor = 0usize;
    let mut attached_total: Option<&Value> = None;
    let mut stale = 0usize;
    for (inference_idx, last_timestamp) in closed_runs {
        let Some(run_ms) = last_timestamp.as_deref().and_then(timestamp_ms) else {
            continue;
        };
        while cursor < counts.len() && counts[cursor].0 < run_ms {
            cursor += 1;
        }
        let Some((_, info)) = counts.get(cursor) else {
            break;
        };
        let total = info.get("total_token_usage");
        if total.is_some() && total == attached_total {
            stale += 1;
            continue;
        }
        if let Some(usage) = last_usage(info) {
            b.set_inference_usage(inference_idx, usage);
        }
        attached_total = total;
        cursor += 1;
    }
    if stale > 0 {
        b.diag(format!(
            "{stale} inferences got no fresh token_count (interrupted turns); they carry no usage"
        ));
    }
    apply_cumulative(
        counts.iter().map(|(_, info)| *info),
        array_field(meta, "token_counts").len(),
        &mut b,
    );
    Ok(vec![b.finish()])
}

/// Sets id, cwd, creation time and base instructions from `session_meta`.
fn apply_session_meta(session: &Map<String, Value>, b: &mut SessionBuilder) {
    let session = obj_field(session, "meta").unwrap_or(session);
    if let Some(id) = str_field(session, "id") {
        id.clone_into(&mut b.original_id);
    }
    b.cwd = str_field(session, "cwd").map(str::to_owned);
    b.created_at = timestamp_field(session, "timestamp");
    b.system_prompt = obj_field(session, "base_instructions")
        .and_then(|base| str_field(base, "text"))
        .or_else(|| str_field(session, "instructions"))
        .map(str::to_owned);
    b.system_prompt_in_entries = false;
    if let Some(model) = str_field(session, "model") {
        b.model = Some(model.to_owned());
    }
}

/// Sets the cumulative totals, the peak request and the context window from
/// every `token_count` info seen.
fn apply_cumulative<'a>(
    infos: impl Iterator<Item = &'a Map<String, Value>>,
    n_events: usize,
    b: &mut SessionBuilder,
) {
    let mut last_total: Option<&Map<String, Value>> = None;
    let mut peak: Option<u64> = None;
    for (event_idx, info) in infos.enumerate() {
        if let Some(total) = obj_field(info, "total_token_usage") {
            last_total = Some(total);
        }
        let at = format!("token_count event {}", event_idx + 1);
        if let Some(last) = obj_field(info, "last_token_usage")
            && let Some(usage) =
                codex_usage(last, &format!("{at}: last_token_usage"), &mut b.diagnostics)
        {
            let prompt = usage.prompt();
            peak = Some(peak.map_or(prompt, |p| p.max(prompt)));
        }
        if let Some(window) = info.get("model_context_window").and_then(Value::as_u64) {
            b.context_window = Some(window);
        }
    }
    let total = last_total.and_then(|total| {
        codex_usage(
            total,
            "the last token_count: total_token_usage",
            &mut b.diagnostics,
        )
    });
    b.usage_override = Some(total.unwrap_or_default());
    b.peak_override = peak;
    b.usage_raw = json!({
        "counting": "cumulative",
        "total_token_usage": last_total.cloned().map_or(Value::Null, Value::Object),
        "model_context_window": b.context_window,
        "token_count_events": n_events,
    });
}

/// Converts tool-call arguments (a JSON string, or already an object).
fn arguments_input(arguments: Option<&Value>) -> ToolInput {
    match arguments {
        Some(Value::String(text)) => ToolInput::from_json_text(text),
        Some(Value::Null) | None => ToolInput::empty(),
        Some(other) => ToolInput::from_value(other.clone()),
    }
}

/// Converts message content items (text and images).
fn content_blocks(content: &[Value]) -> Vec<Block> {
    content
        .iter()
        .filter_map(|item| match item {
            Value::String(text) => Some(Block::Text(text.clone())),
            Value::Object(obj) => match str_field(obj, "type") {
                Some("input_image" | "image_url") => {
                    let url = obj
                        .get("image_url")
                        .and_then(|u| u.as_str().or_else(|| u.get("url")?.as_str()))?;
                    Some(Block::Image(image_from_url(url)))
                }
                _ => str_field(obj, "text").map(|text| Block::Text(text.to_owned())),
            },
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Native rollout

/// Imports a native Codex rollout.
///
/// The lines are read twice: once to find the JSON objects (and report
/// the rest), once to convert them one at a time.
pub(crate) fn import_rollout(
    lines: &Lines<'_>,
    ctx: &Context,
) -> Result<Vec<ImportedSession>, String> {
    let mut b = SessionBuilder::new(Format::CodexRollout, ctx, 0);
    let mut objects: Vec<usize> = Vec::new();
    let mut thread = ThreadHistory::default();
    for_each_jsonl_object(lines, &mut b.diagnostics, |idx, obj| {
        thread.see(idx, &obj);
        objects.push(idx);
    });
    if objects.is_empty() {
        return Err("no JSON line".into());
    }
    let rolled_back = thread.finish(&mut b);
    let mut run = Run::default();
    let mut current_model: Option<String> = None;
    let mut seen_meta = false;
    // The inference waiting for its token_count, and the last total seen.
    let mut awaiting: Option<usize> = None;
    // The line that opened it.
    let mut awaiting_line = 0usize;
    let mut last_total: Option<Value> = None;
    let mut infos: Vec<Map<String, Value>> = Vec::new();
    let mut n_token_events = 0usize;
    let mut billed: Vec<BilledResponse> = Vec::new();
    lines.each_object_at(&objects, |line_idx, obj| {
        let obj = &obj;
        let line_no = line_idx + 1;
        let kind = str_field(obj, "type").unwrap_or("");
        let timestamp = timestamp_field(obj, "timestamp");
        let empty = Map::new();
        let payload = obj_field(obj, "payload").unwrap_or(&empty);
        match kind {
            "session_meta" => {
                b.count_record(kind);
                if !seen_meta {
                    apply_session_meta(payload, &mut b);
                    seen_meta = true;
                }
            }
            "turn_context" => {
                b.count_record(kind);
                if let Some(model) = str_field(payload, "model") {
                    if current_model.is_some() && current_model.as_deref() != Some(model) {
                        run.close();
                        b.push_model_change(model.to_owned(), timestamp.clone());
                    }
                    current_model = Some(model.to_owned());
                    if b.model.is_none() {
                        b.model = current_model.clone();
                    }
                }
            }
            "response_item" => {
                let item_type = str_field(payload, "type").unwrap_or("");
                b.count_record(item_type);
                if item_type != "reasoning" {
                    b.messages += 1;
                }
                if rolled_back.contains(&line_idx) {
                    // Out of the history Codex sent next (named in the
                    // rollback's diagnostic); it ended the run before it.
                    run.close();
                    return;
                }
                let model = current_model.clone().or_else(|| b.model.clone());
                match item_type {
                    "message" => {
                        let role = str_field(payload, "role").unwrap_or("");
                        let content = array_field(payload, "content");
                        if role == "assistant" {
                            if let Some(opened) =
                                run.add(content_blocks(content), timestamp, model, &mut b)
                            {
                                awaiting = Some(opened);
                                awaiting_line = line_no;
                            }
                            return;
                        }
                        run.close();
                        let at = format!("line {line_no}");
                        let raw = content_field(
                            payload,
                            "content",
                            &at,
                            "payload.content",
                            &mut b.diagnostics,
                        );
                        let text = content_text(raw, &at, "payload.content", &mut b.diagnostics);
                        b.push_message(
                            context_message(role, content_blocks(content), &text),
                            timestamp,
                        );
                    }
                    "reasoning" => {
                        let blocks: Vec<Block> = array_field(payload, "summary")
                            .iter()
                            .map(text_of)
                            .filter(|text| !text.trim().is_empty())
                            .map(|text| Block::Thinking {
                                text,
                                signature: None,
                            })
                            .collect();
                        if let Some(opened) = run.add(blocks, timestamp, model, &mut b) {
                            awaiting = Some(opened);
                            awaiting_line = line_no;
                        }
                    }
                    "function_call" | "custom_tool_call" | "local_shell_call" => {
                        let id = str_field(payload, "call_id")
                            .or_else(|| str_field(payload, "id"))
                            .unwrap_or_default();
                        let (name, input) = match item_type {
                            "function_call" => (
                                str_field(payload, "name").unwrap_or_default(),
                                arguments_input(payload.get("arguments")),
                            ),
                            "custom_tool_call" => {
                                let mut map = Map::new();
                                map.insert(
                                    "input".into(),
                                    payload.get("input").cloned().unwrap_or(Value::Null),
                                );
                                (
                                    str_field(payload, "name").unwrap_or_default(),
                                    ToolInput::from_value(Value::Object(map)),
                                )
                            }
                            _ => (
                                "local_shell",
                                ToolInput::from_value(
                                    payload.get("action").cloned().unwrap_or(Value::Null),
                                ),
                            ),
                        };
                        let call = ToolUse {
                            id: id.to_owned(),
                            name: name.to_owned(),
                            input,
                        };
                        if let Some(opened) =
                            run.add(vec![Block::ToolUse(call)], timestamp, model, &mut b)
                        {
                            awaiting = Some(opened);
                            awaiting_line = line_no;
                        }
                    }
                    "function_call_output"
                    | "custom_tool_call_output"
                    | "local_shell_call_output" => {
                        run.close();
                        let id = str_field(payload, "call_id").unwrap_or_default().to_owned();
                        let (parts, exit_code) = output_parts(payload.get("output"));
                        let text: String = parts
                            .iter()
                            .filter_map(|part| match part {
                                ResultPart::Text(text) => Some(text.as_str()),
                                ResultPart::Image(_) => None,
                            })
                            .collect::<Vec<_>>()
                            .join("\n");
                        let is_error = output_is_error(&text, exit_code);
                        b.push_message(tool_message(id, parts, is_error), timestamp);
                    }
                    other => {
                        b.diag(format!("line {line_no}: response item {other:?} skipped"));
                    }
                }
            }
            "event_msg" => {
                if str_field(payload, "type") != Some("token_count") {
                    return;
                }
                b.count_record("token_count");
                n_token_events += 1;
                let Some(info) = obj_field(payload, "info") else {
                    return;
                };
                infos.push(info.clone());
                let total = info.get("total_token_usage").cloned();
                if total.is_some() && total == last_total {
                    return;
                }
                last_total = total;
                // Every new total is a request billed, whether or not the
                // history kept its response (a rolled-back turn, a response
                // cut short).
                if let Some(usage) = last_usage(info) {
                    billed.push(BilledResponse {
                        model: current_model.clone().or_else(|| b.model.clone()),
                        usage,
                        cache_write_1h: 0,
                        timestamp: timestamp.clone(),
                    });
                }
                if let (Some(inference_idx), Some(usage)) = (awaiting.take(), last_usage(info)) {
                    b.set_inference_usage(inference_idx, usage);
                }
            }
            "compacted" => {
                b.count_record(kind);
                run.close();
                let summary = payload.get("message").map(text_of).unwrap_or_default();
                let history = payload.get("replacement_history");
                if let Some(other) = history.filter(|history| !history.is_array()) {
                    b.diag(format!(
                        "line {line_no}: replacement_history is {}, not a list; the compaction keeps nothing from it",
                        json_kind(other)
                    ));
                }
                let Some(history) = history.and_then(Value::as_array) else {
                    b.push_capsule(
                        summary,
                        format!("line:{line_idx}"),
                        0,
                        timestamp,
                        KeptTarget::Nothing,
                    );
                    return;
                };
                replacement_history(history, summary, line_idx, timestamp, &mut b);
            }
            other => {
                b.count_record(other);
                b.diag(format!("line {line_no}: line type {other:?} skipped"));
            }
        }
    });

    // (A rollout with no token_count at all records no usage anywhere.)
    if awaiting.is_some() && n_token_events > 0 {
        b.diag(format!(
            "line {awaiting_line}: the last response got no new token_count (none before the file ends, or a repeat of the previous total: a turn cut short or interrupted); it carries no usage"
        ));
    }
    apply_cumulative(infos.iter(), n_token_events, &mut b);
    b.billed = Some(billed);
    Ok(vec![b.finish()])
}

/// What a rollout line is in Codex's thread history, for rollbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HistoryItem {
    /// A user message the user typed: where a turn starts.
    Turn,
    /// A developer message or a user message Codex wrote (environment
    /// context, instructions): the context updates a turn starts with.
    Context,
    /// Anything else (assistant items, tool calls and outputs, markers).
    Other,
}

/// Codex's thread history as rollout lines, read in the first pass so
/// that `thread_rolled_back` events can be applied as Codex applies them
/// when it rebuilds a thread: a rollback of `n` turns drops the history
/// from the `n`-th last user message the user typed (the first one when
/// there are fewer), together with the context updates just before it
/// (never before the first turn); a compaction's replacement history
/// becomes the new base.
#[derive(Debug, Default)]
struct ThreadHistory {
    /// The response items in the history now, as (line index, kind).
    live: Vec<(usize, HistoryItem)>,
    /// Whether a compaction replaced the history (its items are not lines).
    compacted: bool,
    /// Lines rolled back.
    dropped: HashSet<usize>,
    /// One diagnostic per rollback.
    notes: Vec<String>,
}

impl ThreadHistory {
    fn see(&mut self, line_idx: usize, obj: &Map<String, Value>) {
        let empty = Map::new();
        let payload = obj_field(obj, "payload").unwrap_or(&empty);
        match str_field(obj, "type") {
            Some("response_item") => self.live.push((line_idx, history_item(payload))),
            Some("compacted") if payload.get("replacement_history").is_some() => {
                self.live.clear();
                self.compacted = true;
            }
            Some("event_msg") if str_field(payload, "type") == Some("thread_rolled_back") => {
                let turns = payload.get("num_turns").and_then(Value::as_u64);
                self.roll_back(line_idx, turns);
            }
            _ => {}
        }
    }

    fn roll_back(&mut self, line_idx: usize, turns: Option<u64>) {
        let line_no = line_idx + 1;
        let Some(turns) = turns else {
            self.notes.push(format!(
                "line {line_no}: thread_rolled_back without a readable num_turns; nothing is dropped"
            ));
            return;
        };
        if turns == 0 {
            return;
        }
        let starts: Vec<usize> = self
            .live
            .iter()
            .enumerate()
            .filter(|(_, (_, kind))| *kind == HistoryItem::Turn)
            .map(|(pos, _)| pos)
            .collect();
        let Some(&first) = starts.first() else {
            self.notes.push(format!(
                "line {line_no}: thread_rolled_back of {turns} turn(s) with no typed user message in the history{}; nothing is dropped",
                if self.compacted { " since the last compaction" } else { "" }
            ));
            return;
        };
        let n = usize::try_from(turns).unwrap_or(usize::MAX);
        let mut cut = if n >= starts.len() {
            first
        } else {
            starts[starts.len() - n]
        };
        while cut > first && self.live[cut - 1].1 == HistoryItem::Context {
            cut -= 1;
        }
        let removed: Vec<usize> = self.live.drain(cut..).map(|(idx, _)| idx).collect();
        let (Some(from), Some(to)) = (removed.first(), removed.last()) else {
            return;
        };
        let reach = if n > starts.len() && self.compacted {
            format!(
                " ({turns} asked; Codex would also drop typed messages of the last compaction's replacement history, which are kept here)"
            )
        } else {
            String::new()
        };
        self.notes.push(format!(
            "line {line_no}: thread_rolled_back drops the last {} turn(s){reach}: the {} items of lines {}–{} are not in the history Codex sent next, so they are left out",
            n.min(starts.len()),
            removed.len(),
            from + 1,
            to + 1,
        ));
        self.dropped.extend(removed);
    }

    /// Reports the rollbacks and returns the lines they dropped.
    fn finish(self, b: &mut SessionBuilder) -> HashSet<usize> {
        for note in self.notes {
            b.diag(note);
        }
        self.dropped
    }
}

/// Classifies a response item for [`ThreadHistory`].
fn history_item(payload: &Map<String, Value>) -> HistoryItem {
    if str_field(payload, "type") != Some("message") {
        return HistoryItem::Other;
    }
    let text: String = array_field(payload, "content")
        .iter()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect();
    match str_field(payload, "role") {
        Some("user") => match user_origin(&text) {
            MessageOrigin::Typed => HistoryItem::Turn,
            MessageOrigin::Injected => HistoryItem::Context,
            _ => HistoryItem::Other,
        },
        Some("developer") => HistoryItem::Context,
        _ => HistoryItem::Other,
    }
}

/// Imports a compaction that carries Codex's replacement history: what
/// Codex sends from then on instead of the conversation before it (the
/// user messages it kept, the developer instructions, and an encrypted
/// `compaction` item holding its summary). It becomes a capsule keeping
/// nothing, marked degraded and saying the summary is encrypted, followed
/// by the history's messages in their order, each with origin `Summary`
/// (carried by the compaction, not said again), so the rebuilt model
/// input is what Codex sent next, the readable text in place of the
/// encrypted item. Items of other kinds are named in a diagnostic.
fn replacement_history(
    history: &[Value],
    summary: String,
    line_idx: usize,
    timestamp: Option<String>,
    b: &mut SessionBuilder,
) {
    let line_no = line_idx + 1;
    let mut messages: Vec<Message> = Vec::new();
    let mut encrypted = 0usize;
    let mut skipped = Skipped::default();
    for item in history {
        let Some(item) = item.as_object() else {
            skipped.add("non-object");
            continue;
        };
        match (str_field(item, "type"), str_field(item, "role")) {
            (Some("message"), Some(role)) => {
                let blocks = content_blocks(array_field(item, "content"));
                let text = blocks
                    .iter()
                    .filter_map(|block| match block {
                        Block::Text(text) => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let mut message = if role == "assistant" {
                    Message::new(Role::Assistant, blocks)
                } else {
                    context_message(role, blocks, &text)
                };
                message.origin = MessageOrigin::Summary;
                messages.push(message);
            }
            (Some("compaction" | "compaction_summary"), _) => encrypted += 1,
            (kind, _) => {
                let kind: String = kind
                    .unwrap_or("?")
                    .chars()
                    .take(Skipped::KIND_CHARS)
                    .collect();
                skipped.add(&format!("{kind:?}"));
            }
        }
    }
    let n_user = messages.iter().filter(|m| m.role == Role::User).count();
    let mut text = if encrypted > 0 {
        format!(
            "Codex compacted the conversation here. Its summary is encrypted (an opaque `compaction` item), so it cannot be shown; what Codex carried forward in the clear is the {} message{} that follow: {n_user} user message{} and the instructions it kept verbatim.",
            messages.len(),
            if messages.len() == 1 { "" } else { "s" },
            if n_user == 1 { "" } else { "s" },
        )
    } else {
        format!(
            "Codex compacted the conversation here and carried forward the {} message{} that follow verbatim.",
            messages.len(),
            if messages.len() == 1 { "" } else { "s" },
        )
    };
    if !summary.trim().is_empty() {
        text.push_str("\n\n");
        text.push_str(&summary);
    }
    let tokens_before = b.last_prompt().unwrap_or(0);
    let capsule = b.push_capsule(
        text,
        format!("line:{line_idx}"),
        tokens_before,
        timestamp.clone(),
        KeptTarget::Nothing,
    );
    if encrypted > 0 || summary.trim().is_empty() {
        b.set_degraded(capsule);
    }
    for message in messages {
        b.push_message(message, timestamp.clone());
    }
    if skipped.n_items > 0 {
        b.diag(format!(
            "line {line_no}: replacement history items skipped: {}",
            skipped.summary()
        ));
    }
}

/// The kinds of JSON value, for a field of the wrong type.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The replacement history items left out, counted by kind: the first
/// [`Skipped::KINDS_NAMED`] kinds are named (each cut to
/// [`Skipped::KIND_CHARS`] characters by the caller), the rest counted, so
/// a history of a million odd items gives one short diagnostic.
#[derive(Debug, Default)]
struct Skipped {
    kinds: Vec<(String, usize)>,
    n_items: usize,
    n_other: usize,
}

impl Skipped {
    const KINDS_NAMED: usize = 5;
    const KIND_CHARS: usize = 40;

    fn add(&mut self, kind: &str) {
        self.n_items += 1;
        if let Some(slot) = self.kinds.iter_mut().find(|(named, _)| *named == kind) {
            slot.1 += 1;
        } else if self.kinds.len() < Self::KINDS_NAMED {
            self.kinds.push((kind.to_owned(), 1));
        } else {
            self.n_other += 1;
        }
    }

    fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .kinds
            .iter()
            .map(|(kind, n)| match (kind.as_str(), *n) {
                ("non-object", 1) => "a non-object item".to_owned(),
                ("non-object", n) => format!("{n} non-object items"),
                (kind, 1) => kind.to_owned(),
                (kind, n) => format!("{kind} ×{n}"),
            })
            .collect();
        if self.n_other > 0 {
            parts.push(format!("{} items of other kinds", self.n_other));
        }
        parts.join(", ")
    }
}

/// Converts a rollout tool output: a string (possibly the older JSON
/// `{"output", "metadata": {"exit_code"}}` text), an object, or a list of
/// content items. Returns the parts and the exit code when recorded.
fn output_parts(output: Option<&Value>) -> (Vec<ResultPart>, Option<i64>) {
    match output {
        Some(Value::String(text)) => {
            if text.trim_start().starts_with('{')
                && let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text)
                && let Some(inner) = obj.get("output")
            {
                let exit_code = obj_field(&obj, "metadata")
                    .and_then(|m| m.get("exit_code"))
                    .and_then(Value::as_i64);
                return (vec![ResultPart::Text(text_of(inner))], exit_code);
            }
            (vec![ResultPart::Text(text.clone())], None)
        }
        Some(Value::Array(items)) => {
            let parts = content_blocks(items)
                .into_iter()
                .filter_map(|block| match block {
                    Block::Text(text) => Some(ResultPart::Text(text)),
                    Block::Image(image) => Some(ResultPart::Image(image)),
                    _ => None,
                })
                .collect();
            (parts, None)
        }
        Some(Value::Object(obj)) => {
            let text = obj
                .get("content")
                .or_else(|| obj.get("output"))
                .map(text_of)
                .unwrap_or_default();
            let exit_code = obj_field(obj, "metadata")
                .and_then(|m| m.get("exit_code"))
                .and_then(Value::as_i64);
            let failed = obj.get("success").and_then(Value::as_bool) == Some(false);
            (
                vec![ResultPart::Text(text)],
                exit_code.or(failed.then_some(1)),
            )
        }
        _ => (Vec::new(), None),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use soba_core::EntryBody;

    use super::*;

    fn ctx() -> Context {
        Context {
            source: PathBuf::from("rollout.jsonl"),
            fallback_ms: 0,
        }
    }

    fn messages(s: &ImportedSession) -> Vec<&Message> {
        s.entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::Message(m) => Some(&m.message),
                _ => None,
            })
            .collect()
    }

    fn token_count(input: u64, cached: u64, total_input: u64) -> String {
        format!(
            r#"{{"timestamp":"2025-09-01T10:00:09Z","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{total_input},"cached_input_tokens":0,"output_tokens":1,"reasoning_output_tokens":0,"total_tokens":0}},"last_token_usage":{{"input_tokens":{input},"cached_input_tokens":{cached},"output_tokens":7,"reasoning_output_tokens":3,"total_tokens":0}},"model_context_window":272000}}}}}}"#
        )
    }

    #[test]
    fn rollout_groups_items_and_attaches_the_next_token_count() {
        let lines = [
            r#"{"timestamp":"2025-09-01T10:00:00Z","type":"session_meta","payload":{"id":"R1","timestamp":"2025-09-01T10:00:00Z","cwd":"/w","base_instructions":{"text":"You are Codex."}}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:00Z","type":"turn_context","payload":{"model":"gpt-5-codex","cwd":"/w"}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:01Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n<cwd>/w</cwd>\n</environment_context>"}]}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:02Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:03Z","type":"response_item","payload":{"type":"reasoning","id":"rs","summary":[],"encrypted_content":"xx"}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:04Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking."}]}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:04Z","type":"response_item","payload":{"type":"function_call","id":"fc_1","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"call_1"}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:04Z","type":"response_item","payload":{"type":"custom_tool_call","call_id":"call_2","name":"apply_patch","input":"*** Begin Patch"}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:05Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"{\"output\":\"boom\",\"metadata\":{\"exit_code\":1}}"}}"#.to_owned(),
            token_count(1000, 800, 1000),
            token_count(1000, 800, 1000),
            r#"{"timestamp":"2025-09-01T10:00:10Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<turn_aborted>\ninterrupted\n</turn_aborted>"}]}}"#.to_owned(),
            "{not json".to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:11Z","type":"compacted","payload":{"message":"summary of work"}}"#.to_owned(),
            r#"{"timestamp":"2025-09-01T10:00:12Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Resumed."}]}}"#.to_owned(),
            token_count(1000, 800, 1000),
            r#"{"timestamp":"2025-09-01T10:00:13Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"More."}]}}"#.to_owned(),
        ];
        let s = import_rollout(&Lines::Text(&lines.join("\n")), &ctx())
            .expect("imports")
            .remove(0);
        assert_eq!(s.original_id, "R1");
        assert_eq!(s.system_prompt.as_deref(), Some("You are Codex."));
        assert!(!s.system_prompt_in_entries);
        assert_eq!(s.model.as_deref(), Some("gpt-5-codex"));
        assert_eq!(s.context_window, Some(272_000));
        // Inference 1 = reasoning + text + two calls; inference 2 = "Resumed. More." (one run).
        assert_eq!(s.inferences.len(), 2);
        let usage = s.inferences[0].usage.expect("first inference has usage");
        assert_eq!(
            (usage.input, usage.cache_read, usage.output, usage.reasoning),
            (200, 800, 7, 3)
        );
        // The repeated total after the compaction is not a new request.
        assert_eq!(s.inferences[1].usage, None);
        assert_eq!(s.stats.tool_calls, 2);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.stats.compactions, 1);
        assert_eq!(s.stats.peak_prompt_tokens, Some(1000));
        assert_eq!(s.stats.usage_raw["total_token_usage"]["input_tokens"], 1000);
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.starts_with("line 13:"))
        );
        let all = messages(&s);
        assert_eq!(all[0].origin, MessageOrigin::Injected);
        assert!(all[1].is_real_user());
        let call = all[2].tool_uses().nth(1).expect("custom call");
        assert_eq!(call.input.str_arg("input"), Some("*** Begin Patch"));
        assert!(
            all[3]
                .tool_results()
                .all(|r| r.is_error && r.text() == "boom")
        );
        assert_eq!(all[4].origin, MessageOrigin::Marker);
        assert_eq!(all[5].text(), "Resumed.\nMore.");
    }

    #[test]
    fn messages_meta_matches_token_counts_by_time() {
        let text = r#"{"messages":[
            {"role":"developer","content":[{"type":"text","text":"<permissions instructions>x"}],"_metadata":{"timestamp":"2026-03-24T16:26:22.708Z"}},
            {"role":"system","content":[{"type":"text","text":"<environment_context>\n</environment_context>"}],"_metadata":{"timestamp":"2026-03-24T16:26:22.709Z"}},
            {"role":"user","content":[{"type":"text","text":"build"}],"_metadata":{"timestamp":"2026-03-24T16:26:22.710Z"}},
            {"role":"assistant","content":[{"type":"text","text":"ok"}],"_metadata":{"timestamp":"2026-03-24T16:26:46.889Z"}},
            {"role":"assistant","content":[{"type":"tool_call","tool_call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"}],"tool_calls":[{"id":"call_1","type":"function","function":{"name":"exec_command","arguments":"{}"}}],"_metadata":{"timestamp":"2026-03-24T16:26:46.889Z"}},
            {"role":"tool","tool_call_id":"call_1","content":[{"type":"tool_output","text":"Command: ls\nProcess exited with code 2\nOutput:\n"}],"_metadata":{"timestamp":"2026-03-24T16:26:56.523Z"}},
            {"role":"assistant","content":[{"type":"text","text":"done"}],"_metadata":{"timestamp":"2026-03-24T16:27:10.000Z"}}
        ],"meta":{"session_meta":{"id":"C1","cwd":"/w","timestamp":"2026-03-24T16:25:50.140Z","base_instructions":{"text":"base"}},
          "turn_contexts":[{"model":"gpt-5.3-codex","_timestamp":"2026-03-24T16:26:22.709Z"}],
          "token_counts":[
            {"type":"token_count","info":null,"_timestamp":"2026-03-24T16:26:34.943Z"},
            {"type":"token_count","info":{"total_token_usage":{"input_tokens":11129,"cached_input_tokens":8960,"output_tokens":454,"reasoning_output_tokens":311},"last_token_usage":{"input_tokens":11129,"cached_input_tokens":8960,"output_tokens":454,"reasoning_output_tokens":311},"model_context_window":258400},"_timestamp":"2026-03-24T16:26:56.522Z"},
            {"type":"token_count","info":{"total_token_usage":{"input_tokens":11129,"cached_input_tokens":8960,"output_tokens":454,"reasoning_output_tokens":311},"last_token_usage":{"input_tokens":11129,"cached_input_tokens":8960,"output_tokens":454,"reasoning_output_tokens":311},"model_context_window":258400},"_timestamp":"2026-03-24T16:27:04.814Z"},
            {"type":"token_count","info":{"total_token_usage":{"input_tokens":23000,"cached_input_tokens":19000,"output_tokens":500,"reasoning_output_tokens":320},"last_token_usage":{"input_tokens":11871,"cached_input_tokens":10040,"output_tokens":46,"reasoning_output_tokens":9},"model_context_window":258400},"_timestamp":"2026-03-24T16:27:11.000Z"}
          ]}}"#;
        let s = import_messages_meta(text, &ctx())
            .expect("imports")
            .remove(0);
        assert_eq!(s.original_id, "C1");
        assert_eq!(s.stats.messages, 7);
        assert_eq!(s.inferences.len(), 2);
        assert_eq!(
            s.inferences[0].usage.map(|u| (u.input, u.cache_read)),
            Some((2169, 8960))
        );
        assert_eq!(s.inferences[1].usage.map(|u| u.prompt()), Some(11871));
        assert_eq!(s.stats.usage.input, 4000);
        assert_eq!(s.stats.usage.cache_read, 19000);
        assert_eq!(s.stats.peak_prompt_tokens, Some(11871));
        assert_eq!(s.context_window, Some(258_400));
        let all = messages(&s);
        assert_eq!(all[0].role, Role::System);
        assert_eq!(
            (all[1].role, all[1].origin),
            (Role::User, MessageOrigin::Injected)
        );
        assert!(all[2].is_real_user());
        assert_eq!(
            all[3]
                .tool_uses()
                .next()
                .and_then(|c| c.input.str_arg("cmd")),
            Some("ls")
        );
        assert!(all[4].tool_results().all(|r| r.is_error));
    }

    #[test]
    fn error_detection_reads_headers() {
        assert!(output_is_error(
            "Command: x\nProcess exited with code 1\n",
            None
        ));
        assert!(!output_is_error(
            "Command: x\nProcess exited with code 0\n",
            None
        ));
        assert!(output_is_error("exec_command failed for `x`", None));
        assert!(!output_is_error("Success.", Some(0)));
    }
}
