//! Gemini CLI chat-recording JSON (FORMATS §4). Each `gemini` record is one
//! inference: an assistant entry (thought summaries, text, one `tool_use`
//! per embedded call), then one `tool` entry per call's embedded result.

use serde_json::{Map, Value, json};
use soba_core::{
    Block, Image, ImageSource, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage,
};

use super::builder::{
    Context, SessionBuilder, array_field, content_text, is_interrupt_marker, message_with,
    obj_field, odd_content, parse_document, str_field, text_of, timestamp_field, tool_message,
    usage_figures,
};
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

/// Imports one chat recording.
pub(crate) fn import(text: &str, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let doc = parse_document(text)?;
    let mut b = SessionBuilder::new(Format::GeminiCli, ctx, 0);
    if let Some(id) = str_field(&doc, "sessionId") {
        id.clone_into(&mut b.original_id);
    }
    b.created_at = timestamp_field(&doc, "startTime");
    let mut raw = RawUsage::default();
    for (idx, record) in array_field(&doc, "messages").iter().enumerate() {
        b.messages += 1;
        let Some(record) = record.as_object() else {
            b.diag(format!("messages[{idx}]: skipped: not an object"));
            continue;
        };
        let kind = str_field(record, "type").unwrap_or("");
        b.count_record(kind);
        let timestamp = timestamp_field(record, "timestamp");
        match kind {
            "user" => {
                let blocks = user_blocks(
                    record.get("content").unwrap_or(&Value::Null),
                    &format!("messages[{idx}]"),
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
            "gemini" | "model" => convert_gemini(idx, record, timestamp, &mut b, &mut raw),
            // `info`, `error` and `warning` records are UI notices, not model context.
            _ => {}
        }
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
    Ok(vec![b.finish()])
}

fn convert_gemini(
    idx: usize,
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
        .map(|content| {
            content_text(
                content,
                &format!("messages[{idx}]"),
                "content",
                &mut b.diagnostics,
            )
        })
        .unwrap_or_default();
    if !text.is_empty() {
        blocks.push(Block::Text(text));
    }
    let mut results = Vec::new();
    for (call_idx, call) in array_field(record, "toolCalls").iter().enumerate() {
        let Some(call) = call.as_object() else {
            b.diag(format!(
                "messages[{idx}].toolCalls[{call_idx}]: skipped: not an object"
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
    let at = format!("messages[{idx}]");
    let usage = obj_field(record, "tokens").and_then(|tokens| {
        let [input, cached, output, thoughts, tool, total] = usage_figures(
            tokens,
            ["input", "cached", "output", "thoughts", "tool", "total"],
            &at,
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
fn user_blocks(content: &Value, at: &str, diagnostics: &mut Vec<String>) -> Vec<Block> {
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
