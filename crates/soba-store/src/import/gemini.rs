//! Gemini CLI chat recordings (FORMATS §4): the whole-document JSON form
//! (`session-*.json`) and the append-only JSONL form that replaced it
//! (`session-*.jsonl`), folded into the same document and converted alike.
//! Each `gemini` record is one inference: an assistant entry (thought
//! summaries, text, one `tool_use` per embedded call), then one `tool` entry
//! per call's embedded result.
//!
//! The JSONL form, as Gemini CLI's `ChatRecordingService` writes it: a
//! header line (`sessionId`, `projectHash`, `startTime`, …), then message
//! records (the JSON form's `messages[]` items; a record whose `id` was
//! seen replaces the earlier one in place, as a message is written again
//! when its tokens or tool calls arrive), `{"$set": {…}}` metadata updates
//! (a `messages` list among them is a checkpoint replacing every message)
//! and `{"$rewindTo": "<id>"}`, which drops that message and every later
//! one.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value, json};
use soba_core::{
    Block, Image, ImageSource, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage,
};

use super::builder::Diagnostics;
use super::builder::{
    Context, SessionBuilder, array_field, content_text, is_interrupt_marker, jsonl_line,
    message_with, obj_field, odd_content, parse_document, str_field, text_of, timestamp_field,
    tool_message, usage_figures,
};
use super::lines::Lines;
use super::{Format, ImportedSession};

/// Raw sums of `tokens`, in Gemini CLI's names.
#[derive(Debug, Default)]
struct RawUsage {
    input: u64,
    output: u64,
    cached: u64,
    thoughts: u64,
    tool: u64,
    total: u64,
}

/// Imports one chat recording in the JSON form.
pub(crate) fn import(text: &str, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let doc = parse_document(text)?;
    let mut b = SessionBuilder::new(Format::GeminiCli, ctx, 0);
    convert(
        &doc,
        array_field(&doc, "messages"),
        |idx| format!("messages[{idx}]"),
        &mut b,
    );
    Ok(vec![b.finish()])
}

/// Imports one chat recording in the JSONL form: its lines folded into the
/// document the JSON form would hold, converted as that form is. A line
/// that is not a JSON object, or not one of the record kinds, is skipped
/// with a diagnostic naming it.
pub(crate) fn import_jsonl(
    lines: &Lines<'_>,
    ctx: &Context,
) -> Result<Vec<ImportedSession>, String> {
    let mut b = SessionBuilder::new(Format::GeminiCliJsonl, ctx, 0);
    let mut folded = Folded::default();
    let mut n_lines = 0usize;
    lines.each_line(|line_idx, line| {
        if let Some(parsed) = jsonl_line(line_idx, line, &mut b.diagnostics) {
            n_lines += 1;
            if let Ok(record) = parsed {
                folded.apply(line_idx, record, &mut b.diagnostics);
            }
        }
        true
    });
    if n_lines == 0 {
        return Err(
            "the file is empty: a Gemini CLI JSONL chat recording starts with a session header line"
                .into(),
        );
    }
    if str_field(&folded.header, "sessionId").is_none()
        || str_field(&folded.header, "projectHash").is_none()
    {
        return Err(
            "no session header: expected a line {\"sessionId\": …, \"projectHash\": …, \"startTime\": …}, the first one Gemini CLI writes"
                .into(),
        );
    }
    let (messages, places): (Vec<Value>, Vec<Place>) = folded.messages.into_iter().unzip();
    convert(
        &folded.header,
        &messages,
        |idx| {
            places
                .get(idx)
                .map_or_else(|| format!("messages[{idx}]"), Place::to_string)
        },
        &mut b,
    );
    Ok(vec![b.finish()])
}

/// Where a folded message was last written: its line, and its index in the
/// `messages` list of a checkpoint on that line.
#[derive(Debug)]
struct Place {
    line_idx: usize,
    checkpoint_idx: Option<usize>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line_idx + 1)?;
        match self.checkpoint_idx {
            Some(item_idx) => write!(f, " $set.messages[{item_idx}]"),
            None => Ok(()),
        }
    }
}

/// The document the lines of a JSONL recording describe so far.
#[derive(Debug, Default)]
struct Folded {
    /// The header with every later `$set` merged in (but `messages`).
    header: Map<String, Value>,
    /// The conversation, in order, each message with where it was written.
    messages: Vec<(Value, Place)>,
    /// The index in `messages` of each message id.
    positions: HashMap<String, usize>,
}

impl Folded {
    /// Applies the record of line `line_idx`, tested in the order Gemini
    /// CLI's reader tests it: a rewind, a message (a string `id`), a
    /// metadata update, the header.
    fn apply(
        &mut self,
        line_idx: usize,
        mut record: Map<String, Value>,
        diagnostics: &mut Diagnostics,
    ) {
        let line_no = line_idx + 1;
        if let Some(target) = str_field(&record, "$rewindTo") {
            match self.positions.get(target) {
                Some(&position) => self.rewind(position),
                // Gemini CLI writes a rewind only to a message it holds, so
                // that message's line was lost. Its reader would then drop
                // every message; keeping them loses less, and says so.
                None => diagnostics.push(format!(
                    "line {line_no}: skipped: $rewindTo names message {target:?}, which is not in the conversation; the messages are kept"
                )),
            }
        } else if str_field(&record, "id").is_some() {
            self.upsert(
                Value::Object(record),
                Place {
                    line_idx,
                    checkpoint_idx: None,
                },
            );
        } else if let Some(Value::Object(update)) = record.remove("$set") {
            self.merge(update, line_idx, diagnostics);
        } else if str_field(&record, "sessionId").is_some()
            && str_field(&record, "projectHash").is_some()
        {
            self.merge(record, line_idx, diagnostics);
        } else {
            diagnostics.push(format!(
                "line {line_no}: skipped: not a message (a string id), a $set object, a $rewindTo id or the session header"
            ));
        }
    }

    /// Merges metadata fields into the header; a `messages` list is a
    /// checkpoint that replaces every message.
    fn merge(
        &mut self,
        fields: Map<String, Value>,
        line_idx: usize,
        diagnostics: &mut Diagnostics,
    ) {
        for (key, value) in fields {
            if key != "messages" {
                // The session's identity stays a string: an update that
                // breaks it would leave the whole recording unreadable.
                if matches!(key.as_str(), "sessionId" | "projectHash") && !value.is_string() {
                    diagnostics.push(format!(
                        "line {}: skipped `{key}`: not a string; the earlier one is kept",
                        line_idx + 1
                    ));
                    continue;
                }
                self.header.insert(key, value);
                continue;
            }
            let Value::Array(list) = value else {
                diagnostics.push(format!(
                    "line {}: skipped `messages`: not a list",
                    line_idx + 1
                ));
                continue;
            };
            self.messages.clear();
            self.positions.clear();
            // Items that are no message (not an object with a string
            // `type`) are counted in one diagnostic, not kept: a list of
            // millions of them must not cost a diagnostic and a value each.
            let mut junk = 0usize;
            for (item_idx, message) in list.into_iter().enumerate() {
                if message.get("type").and_then(Value::as_str).is_none() {
                    junk += 1;
                    continue;
                }
                let place = Place {
                    line_idx,
                    checkpoint_idx: Some(item_idx),
                };
                self.upsert(message, place);
            }
            if junk > 0 {
                diagnostics.push(format!(
                    "line {}: skipped {junk} item(s) of `messages`: not a message (an object with a string `type`)",
                    line_idx + 1
                ));
            }
        }
    }

    /// Adds a message, or replaces in place the one with its id.
    fn upsert(&mut self, message: Value, place: Place) {
        let id = message.get("id").and_then(Value::as_str);
        match id.and_then(|id| self.positions.get(id).copied()) {
            Some(position) => {
                if let Some(slot) = self.messages.get_mut(position) {
                    *slot = (message, place);
                }
            }
            None => {
                if let Some(id) = id {
                    self.positions.insert(id.to_owned(), self.messages.len());
                }
                self.messages.push((message, place));
            }
        }
    }

    /// Drops the message at `position` and every later one.
    fn rewind(&mut self, position: usize) {
        let position = position.min(self.messages.len());
        for (message, _) in self.messages.drain(position..) {
            if let Some(id) = message.get("id").and_then(Value::as_str) {
                self.positions.remove(id);
            }
        }
    }
}

/// Converts a recording's document: its header fields and its messages,
/// each named in diagnostics by `label` of its index.
fn convert(
    header: &Map<String, Value>,
    messages: &[Value],
    label: impl Fn(usize) -> String,
    b: &mut SessionBuilder,
) {
    if let Some(id) = str_field(header, "sessionId") {
        id.clone_into(&mut b.original_id);
    }
    b.created_at = timestamp_field(header, "startTime");
    let mut raw = RawUsage::default();
    // Records that are not objects: the first named, the rest counted.
    let mut not_objects: Option<(String, usize)> = None;
    for (idx, record) in messages.iter().enumerate() {
        b.messages += 1;
        let Some(record) = record.as_object() else {
            match &mut not_objects {
                Some((_, n)) => *n += 1,
                None => not_objects = Some((label(idx), 1)),
            }
            continue;
        };
        let at = label(idx);
        let kind = str_field(record, "type").unwrap_or("");
        b.count_record(kind);
        let timestamp = timestamp_field(record, "timestamp");
        match kind {
            "user" => {
                let blocks = user_blocks(
                    record.get("content").unwrap_or(&Value::Null),
                    &at,
                    &mut b.diagnostics,
                );
                let marker = blocks
                    .iter()
                    .all(|block| matches!(block, Block::Text(t) if is_interrupt_marker(t)));
                let origin = if marker && !blocks.is_empty() {
                    MessageOrigin::Marker
                } else {
                    MessageOrigin::Typed
                };
                b.push_message(message_with(Role::User, blocks, origin), timestamp);
            }
            "gemini" | "model" => convert_gemini(&at, record, timestamp, b, &mut raw),
            // `info`, `error` and `warning` records are UI notices, not model context.
            _ => {}
        }
    }
    match not_objects {
        Some((first, 1)) => b.diag(format!("{first}: skipped: not an object")),
        Some((first, n)) => b.diag(format!("{first} and {} more: skipped: not objects", n - 1)),
        None => {}
    }
    b.usage_raw = json!({
        "counting": "per-request",
        "input": raw.input,
        "output": raw.output,
        "cached": raw.cached,
        "thoughts": raw.thoughts,
        "tool": raw.tool,
        "total": raw.total,
    });
}

/// Converts one `gemini` record, named `at` in diagnostics.
fn convert_gemini(
    at: &str,
    record: &Map<String, Value>,
    timestamp: Option<String>,
    b: &mut SessionBuilder,
    raw: &mut RawUsage,
) {
    let mut blocks = Vec::new();
    for thought in array_field(record, "thoughts")
        .iter()
        .filter_map(Value::as_object)
    {
        let subject = str_field(thought, "subject").unwrap_or_default().trim();
        let description = str_field(thought, "description").unwrap_or_default();
        let text = if subject.is_empty() {
            description.to_owned()
        } else {
            format!("{subject}\n\n{description}")
        };
        blocks.push(Block::Thinking {
            text,
            signature: None,
        });
    }
    let text = record
        .get("content")
        .map(|content| content_text(content, at, "content", &mut b.diagnostics))
        .unwrap_or_default();
    if !text.is_empty() {
        blocks.push(Block::Text(text));
    }
    let mut results = Vec::new();
    for (call_idx, call) in array_field(record, "toolCalls").iter().enumerate() {
        let Some(call) = call.as_object() else {
            b.diag(format!(
                "{at}.toolCalls[{call_idx}]: skipped: not an object"
            ));
            continue;
        };
        let id = str_field(call, "id").unwrap_or_default().to_owned();
        let input = match call.get("args") {
            Some(Value::String(text)) => ToolInput::from_json_text(text),
            Some(Value::Null) | None => ToolInput::empty(),
            Some(other) => ToolInput::from_value(other.clone()),
        };
        blocks.push(Block::ToolUse(ToolUse {
            id: id.clone(),
            name: str_field(call, "name").unwrap_or_default().to_owned(),
            input,
        }));
        if let Some(result) = call_result(call, &id) {
            results.push(result);
        }
    }
    let usage = obj_field(record, "tokens").and_then(|tokens| {
        let [input, cached, output, thoughts, tool, total] = usage_figures(
            tokens,
            ["input", "cached", "output", "thoughts", "tool", "total"],
            at,
            &mut b.diagnostics,
        )?;
        raw.input = raw.input.saturating_add(input);
        raw.output = raw.output.saturating_add(output);
        raw.cached = raw.cached.saturating_add(cached);
        raw.thoughts = raw.thoughts.saturating_add(thoughts);
        raw.tool = raw.tool.saturating_add(tool);
        raw.total = raw.total.saturating_add(total);
        // Gemini's `input` includes `cached`; tool-use prompt tokens are
        // prompt too. `output` excludes thoughts, SOBA's includes them.
        Some(Usage {
            input: input.saturating_sub(cached).saturating_add(tool),
            cache_read: cached.min(input),
            cache_write: 0,
            output: output.saturating_add(thoughts),
            reasoning: thoughts,
        })
    });
    let model = str_field(record, "model").map(str::to_owned);
    let response_id = str_field(record, "id").map(str::to_owned);
    let entry_idx = b.push_message(Message::new(Role::Assistant, blocks), timestamp.clone());
    b.push_inference(entry_idx, usage, timestamp.clone(), model, response_id);
    for (result, result_time) in results {
        b.push_message(result, result_time.or_else(|| timestamp.clone()));
    }
}

/// Builds the `tool` message of an embedded call's `result`, with its
/// timestamp; `None` when the call recorded no result (kept unpaired).
fn call_result(call: &Map<String, Value>, call_id: &str) -> Option<(Message, Option<String>)> {
    let parts = call
        .get("result")
        .and_then(Value::as_array)
        .filter(|parts| !parts.is_empty())?;
    let mut content = Vec::new();
    let mut result_id = None;
    let mut has_error = false;
    for part in parts.iter().filter_map(Value::as_object) {
        if let Some(response) = obj_field(part, "functionResponse") {
            result_id = result_id.or_else(|| str_field(response, "id").map(str::to_owned));
            match response.get("response") {
                Some(Value::Object(body)) => {
                    if let Some(output) = body.get("output") {
                        content.push(ResultPart::Text(text_of(output)));
                    } else if let Some(error) = body.get("error") {
                        has_error = true;
                        content.push(ResultPart::Text(text_of(error)));
                    } else {
                        content.push(ResultPart::Text(Value::Object(body.clone()).to_string()));
                    }
                }
                Some(other) => content.push(ResultPart::Text(text_of(other))),
                None => {}
            }
        } else if let Some(image) = inline_image(part) {
            content.push(ResultPart::Image(image));
        } else if let Some(text) = str_field(part, "text") {
            content.push(ResultPart::Text(text.to_owned()));
        }
    }
    let is_error = has_error || str_field(call, "status") == Some("error");
    let id = result_id.unwrap_or_else(|| call_id.to_owned());
    Some((
        tool_message(id, content, is_error),
        timestamp_field(call, "timestamp"),
    ))
}

fn inline_image(part: &Map<String, Value>) -> Option<Image> {
    let data = obj_field(part, "inlineData")?;
    Some(Image {
        media_type: str_field(data, "mimeType")
            .unwrap_or("image/png")
            .to_owned(),
        source: ImageSource::Data(str_field(data, "data").unwrap_or_default().to_owned()),
    })
}

/// Converts user content: a string or a list of Parts.
fn user_blocks(content: &Value, at: &str, diagnostics: &mut Diagnostics) -> Vec<Block> {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(Block::Text(text.clone())),
                Value::Object(obj) => inline_image(obj)
                    .map(Block::Image)
                    .or_else(|| str_field(obj, "text").map(|text| Block::Text(text.to_owned()))),
                _ => None,
            })
            .collect(),
        other => odd_content(other, at, "content", diagnostics)
            .map(Block::Text)
            .into_iter()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use soba_core::EntryBody;

    use super::*;

    fn ctx() -> Context {
        Context {
            source: PathBuf::from("session-x.jsonl"),
            fallback_ms: 0,
        }
    }

    /// Writes `records` as JSONL lines.
    fn lines_of(records: &[Value]) -> String {
        records.iter().map(|record| format!("{record}\n")).collect()
    }

    /// Imports `text` as a JSONL recording.
    fn import_text(text: &str) -> Result<ImportedSession, String> {
        import_jsonl(&Lines::Text(text), &ctx()).map(|mut sessions| sessions.remove(0))
    }

    /// Returns the role and text of every message entry, in order.
    fn texts(s: &ImportedSession) -> Vec<(Role, String)> {
        s.entries
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Message(m) => Some((m.message.role, m.message.text())),
                _ => None,
            })
            .collect()
    }

    /// Imports `records` as JSONL and checks the messages it gives, with
    /// no diagnostic.
    fn check(records: &[Value], expected: &[(Role, &str)]) {
        let s = import_text(&lines_of(records)).expect("imports");
        let expected: Vec<(Role, String)> = expected
            .iter()
            .map(|(role, text)| (*role, (*text).to_owned()))
            .collect();
        assert_eq!(texts(&s), expected, "{records:?}");
        assert_eq!(s.stats.diagnostics, Vec::<String>::new());
    }

    fn header() -> Value {
        json!({"sessionId": "g1", "projectHash": "h", "startTime": "2026-01-30T06:08:50.429Z",
               "lastUpdated": "2026-01-30T06:08:50.429Z", "kind": "main"})
    }

    fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "timestamp": "2026-01-30T06:09:00.000Z", "type": "user",
               "content": [{"text": text}]})
    }

    fn gemini(id: &str, text: &str) -> Value {
        json!({"id": id, "timestamp": "2026-01-30T06:09:01.000Z", "type": "gemini",
               "content": text, "model": "gemini-3"})
    }

    #[test]
    fn the_jsonl_form_imports_as_the_equivalent_json_document() {
        let thoughts = json!([{"subject": "Plan", "description": "think", "timestamp": "2026-01-30T06:08:55.000Z"}]);
        let running = json!({"id": "c1", "name": "read_file", "args": {"file_path": "a"},
                             "status": "executing", "timestamp": "2026-01-30T06:08:56.000Z"});
        let mut done = running.clone();
        done["status"] = json!("success");
        done["result"] = json!([{"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "text"}}}]);
        let streaming = json!({"id": "m1", "timestamp": "2026-01-30T06:08:57.215Z", "type": "gemini",
                               "content": "", "model": "gemini-3", "thoughts": thoughts, "toolCalls": [running]});
        let mut first = streaming.clone();
        first["toolCalls"] = json!([done]);
        first["tokens"] = json!({"input": 1000, "output": 20, "cached": 600, "thoughts": 30, "tool": 0, "total": 1050});
        let second = json!({"id": "m2", "timestamp": "2026-01-30T06:09:10.000Z", "type": "gemini",
                            "content": "done", "model": "gemini-3",
                            "tokens": {"input": 1200, "output": 5, "cached": 1000, "thoughts": 0, "tool": 0, "total": 1205}});
        let notice = json!({"id": "i1", "timestamp": "2026-01-30T06:09:11.000Z", "type": "info", "content": "notice"});
        let question = user("u1", "build it");
        let jsonl = import_text(&lines_of(&[
            header(),
            question.clone(),
            json!({"$set": {"lastUpdated": "2026-01-30T06:09:00.000Z"}}),
            streaming,
            first.clone(),
            second.clone(),
            notice.clone(),
            json!({"$set": {"lastUpdated": "2026-01-30T06:09:11.000Z", "summary": "built it"}}),
        ]))
        .expect("imports");
        let doc = json!({"sessionId": "g1", "projectHash": "h", "startTime": "2026-01-30T06:08:50.429Z",
                         "lastUpdated": "2026-01-30T06:09:11.000Z", "kind": "main", "summary": "built it",
                         "messages": [question, first, second, notice]});
        let json_form = import(&doc.to_string(), &ctx()).expect("imports").remove(0);

        assert_eq!(jsonl.format, Format::GeminiCliJsonl);
        assert_eq!(jsonl.original_id, "g1");
        assert_eq!(
            jsonl.created_at.as_deref(),
            Some("2026-01-30T06:08:50.429Z")
        );
        assert_eq!(
            texts(&jsonl),
            [
                (Role::User, "build it".to_owned()),
                (Role::Assistant, String::new()),
                (Role::Tool, String::new()),
                (Role::Assistant, "done".to_owned()),
            ]
        );
        assert_eq!(jsonl.stats.messages, 4);
        assert_eq!(jsonl.stats.tool_calls, 1);
        assert_eq!(jsonl.stats.tool_results, 1);
        assert_eq!(jsonl.stats.unpaired_tool_calls, 0);
        assert_eq!(jsonl.inference_count(), 2);
        assert_eq!(jsonl.stats.peak_prompt_tokens, Some(1200));
        let usage = jsonl.stats.usage;
        assert_eq!(
            (usage.input, usage.cache_read, usage.output, usage.reasoning),
            (600, 1600, 55, 30)
        );
        assert_eq!(jsonl.stats.usage_raw["input"], 2200);
        assert_eq!(jsonl.stats.diagnostics, Vec::<String>::new());
        // Everything else is the JSON form's, entry ids included.
        let jsonl = ImportedSession {
            format: Format::GeminiCli,
            ..jsonl
        };
        assert_eq!(jsonl, json_form);
    }

    #[test]
    fn a_message_written_again_replaces_the_earlier_one_in_place() {
        check(
            &[
                header(),
                user("u1", "first"),
                gemini("g1", "draft"),
                user("u2", "more"),
                gemini("g1", "final"),
            ],
            &[
                (Role::User, "first"),
                (Role::Assistant, "final"),
                (Role::User, "more"),
            ],
        );
    }

    /// Attack findings: an update cannot break the session's identity, and
    /// a checkpoint of junk costs one diagnostic, not one per item.
    #[test]
    fn updates_cannot_unmake_the_header_and_junk_items_are_counted_once() {
        let mut records = vec![header(), user("u1", "a")];
        records.push(json!({"$set": {"sessionId": 5, "projectHash": null, "lastUpdated": "x"}}));
        let s = import_text(&lines_of(&records)).expect("still a recording");
        assert_eq!(s.original_id, "g1");
        assert_eq!(texts(&s), [(Role::User, "a".to_owned())]);
        assert_eq!(
            s.stats.diagnostics,
            [
                "line 3: skipped `sessionId`: not a string; the earlier one is kept",
                "line 3: skipped `projectHash`: not a string; the earlier one is kept",
            ]
        );
        let junk: Vec<Value> = (0..10_000)
            .map(|n| if n % 2 == 0 { json!(1) } else { json!({}) })
            .chain([user("u2", "kept")])
            .collect();
        let records = vec![header(), json!({"$set": {"messages": junk}})];
        let s = import_text(&lines_of(&records)).expect("imports");
        assert_eq!(texts(&s), [(Role::User, "kept".to_owned())]);
        assert_eq!(
            s.stats.diagnostics,
            [
                "line 2: skipped 10000 item(s) of `messages`: not a message (an object with a string `type`)"
            ]
        );
    }

    #[test]
    fn a_rewind_drops_its_message_and_every_later_one() {
        check(
            &[
                header(),
                user("u1", "a"),
                gemini("g1", "b"),
                user("u2", "oops"),
                gemini("g2", "c"),
                json!({"$rewindTo": "u2"}),
                // A rewound id written again comes at the end.
                user("u2", "again"),
                gemini("g3", "d"),
            ],
            &[
                (Role::User, "a"),
                (Role::Assistant, "b"),
                (Role::User, "again"),
                (Role::Assistant, "d"),
            ],
        );
        check(
            &[
                header(),
                user("u1", "a"),
                gemini("g1", "b"),
                json!({"$rewindTo": "u1"}),
            ],
            &[],
        );
    }

    #[test]
    fn set_updates_the_header_and_a_messages_checkpoint_replaces_them_all() {
        let s = import_text(&lines_of(&[
            header(),
            user("u1", "a"),
            json!({"$set": {"sessionId": "renamed", "startTime": "2026-02-01T00:00:00.000Z"}}),
        ]))
        .expect("imports");
        assert_eq!(s.original_id, "renamed");
        assert_eq!(s.created_at.as_deref(), Some("2026-02-01T00:00:00.000Z"));
        assert_eq!(texts(&s), [(Role::User, "a".to_owned())]);
        // Later lines apply on top of the checkpoint, as Gemini CLI's
        // writer holds them.
        check(
            &[
                header(),
                user("u1", "a"),
                gemini("g1", "b"),
                json!({"$set": {"messages": [user("u9", "checkpoint q"), gemini("g9", "checkpoint a")],
                                "lastUpdated": "2026-01-30T06:10:00.000Z"}}),
                user("u10", "after"),
                gemini("g9", "rewritten"),
            ],
            &[
                (Role::User, "checkpoint q"),
                (Role::Assistant, "rewritten"),
                (Role::User, "after"),
            ],
        );
    }

    #[test]
    fn damaged_lines_are_diagnostics_naming_them_and_the_rest_is_kept() {
        let text = [
            header().to_string(),
            "not json".to_owned(),
            "[1, 2]".to_owned(),
            String::new(),
            r#"{"foo":1}"#.to_owned(),
            r#"{"$rewindTo":"nowhere"}"#.to_owned(),
            r#"{"$set":{"messages":"x"}}"#.to_owned(),
            user("u1", "kept").to_string(),
            r#"{"id":"u2","type":"user","content":5}"#.to_owned(),
            r#"{"id":"g1","type":"gem"#.to_owned(),
        ]
        .join("\n");
        let s = import_text(&text).expect("imports");
        assert_eq!(
            texts(&s),
            [
                (Role::User, "kept".to_owned()),
                (Role::User, "5".to_owned())
            ]
        );
        let found = &s.stats.diagnostics;
        assert_eq!(found.len(), 7, "{found:#?}");
        assert!(
            found[0].starts_with("line 2: skipped malformed JSON: "),
            "{found:#?}"
        );
        assert_eq!(found[1], "line 3: skipped: not a JSON object");
        assert_eq!(
            found[2],
            "line 5: skipped: not a message (a string id), a $set object, a $rewindTo id or the session header"
        );
        assert_eq!(
            found[3],
            "line 6: skipped: $rewindTo names message \"nowhere\", which is not in the conversation; the messages are kept"
        );
        assert_eq!(found[4], "line 7: skipped `messages`: not a list");
        assert!(
            found[5].starts_with("line 10: skipped malformed JSON: "),
            "{found:#?}"
        );
        assert_eq!(
            found[6],
            "line 9: `content` is a number, not text or a list of content blocks; kept its JSON as text"
        );
    }

    #[test]
    fn an_empty_file_or_one_without_a_header_is_an_error_saying_what_was_expected() {
        let empty = "the file is empty: a Gemini CLI JSONL chat recording starts with a session header line";
        assert_eq!(import_text(""), Err(empty.to_owned()));
        assert_eq!(import_text("\n \r\n"), Err(empty.to_owned()));
        let no_header = "no session header: expected a line {\"sessionId\": …, \"projectHash\": …, \"startTime\": …}, the first one Gemini CLI writes";
        for text in [
            lines_of(&[user("u1", "a"), json!({"$set": {"lastUpdated": "x"}})]),
            "garbage\n".to_owned(),
            lines_of(&[json!({"sessionId": "s", "startTime": "2026-01-30T06:08:50.429Z"})]),
        ] {
            assert_eq!(import_text(&text), Err(no_header.to_owned()), "{text}");
        }
        // A header alone is a session with nothing in it yet.
        let s = import_text(&lines_of(&[header()])).expect("imports");
        assert_eq!((s.original_id.as_str(), s.entries.len()), ("g1", 0));
    }

    #[test]
    fn embedded_calls_become_tool_messages() {
        let text = r#"{"sessionId":"g1","startTime":"2026-01-30T06:08:50.429Z","messages":[
            {"id":"u","timestamp":"2026-01-30T06:08:50.429Z","type":"user","content":"build it"},
            {"id":"m","timestamp":"2026-01-30T06:08:57.215Z","type":"gemini","content":"","model":"gemini-3","thoughts":[{"subject":"Plan","description":"think"}],
             "toolCalls":[
               {"id":"c1","name":"read_file","args":{"file_path":"a"},"status":"success","result":[{"functionResponse":{"id":"c1","name":"read_file","response":{"output":"text"}}}]},
               {"id":"c2","name":"activate_skill","args":{},"status":"error","result":[{"functionResponse":{"id":"c2","name":"activate_skill","response":{"error":"nope"}}}]},
               {"id":"c3","name":"run","args":{},"status":"cancelled"}
             ],
             "tokens":{"input":1000,"output":20,"cached":600,"thoughts":30,"tool":0,"total":1050}},
            {"id":"i","type":"info","content":"notice"},
            7
        ]}"#;
        let ctx = Context {
            source: PathBuf::from("s.json"),
            fallback_ms: 0,
        };
        let s = import(text, &ctx).expect("imports").remove(0);
        assert_eq!(s.original_id, "g1");
        assert_eq!(s.stats.messages, 4);
        assert_eq!(s.stats.tool_calls, 3);
        assert_eq!(s.stats.tool_results, 2);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.stats.peak_prompt_tokens, Some(1000));
        let usage = s.stats.usage;
        assert_eq!(
            (usage.input, usage.cache_read, usage.output, usage.reasoning),
            (400, 600, 50, 30)
        );
        assert_eq!(s.stats.usage_raw["input"], 1000);
        let EntryBody::Message(error) = &s.entries[3].body else {
            panic!("message expected")
        };
        assert!(
            error
                .message
                .tool_results()
                .all(|r| r.is_error && r.text() == "nope")
        );
        let EntryBody::Message(assistant) = &s.entries[1].body else {
            panic!("message expected")
        };
        assert!(
            matches!(&assistant.message.content[0], Block::Thinking { text, .. } if text == "Plan\n\nthink")
        );
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.starts_with("messages[3]"))
        );
    }
}
