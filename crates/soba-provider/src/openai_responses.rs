//! The OpenAI Responses dialect (`openai-responses`): the request body
//! (`store: false`, function calls, `function_call_output` items), the
//! stream decoder, and `POST /responses/compact` (SPEC §10.3).
//!
//! Mapping choices: reasoning items are requested with
//! `include: ["reasoning.encrypted_content"]` only when reasoning is
//! configured (non-reasoning models reject it), kept as thinking blocks whose
//! signature is the encrypted content, and re-sent only to the model that
//! made them; `system`-role messages become `developer` messages.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use soba_core::{Block, Message, Role, Usage};

use crate::error::ProviderError;
use crate::request::{ChatRequest, ChatResponse, NativeCompaction, StopReason, StreamEvent};
use crate::sse::SseEvent;
use crate::wire::{self, Assembly, StreamDecoder};

fn input_content(message: &Message) -> Vec<Value> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(json!({"type": "input_text", "text": text})),
            Block::Image(image) => {
                Some(json!({"type": "input_image", "image_url": wire::image_url(image)}))
            }
            _ => None,
        })
        .collect()
}

/// Appends the input items of one message.
fn push_items(items: &mut Vec<Value>, message: &Message, request_model: &str) {
    match message.role {
        Role::System | Role::User | Role::Tool => {
            for result in message.tool_results() {
                items.push(json!({
                    "type": "function_call_output",
                    "call_id": result.tool_use_id,
                    "output": wire::result_text(result),
                }));
            }
            let content = input_content(message);
            if !content.is_empty() {
                let role = if message.role == Role::System {
                    "developer"
                } else {
                    "user"
                };
                items.push(json!({"type": "message", "role": role, "content": content}));
            }
        }
        Role::Assistant => {
            let resend_reasoning = wire::same_model(message.model.as_deref(), request_model);
            for block in &message.content {
                match block {
                    Block::Text(text) if !text.is_empty() => items.push(json!({
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    })),
                    Block::Thinking {
                        text,
                        signature: Some(encrypted),
                    } if resend_reasoning => {
                        let summary: Vec<Value> = if text.is_empty() {
                            Vec::new()
                        } else {
                            vec![json!({"type": "summary_text", "text": text})]
                        };
                        items.push(json!({"type": "reasoning", "summary": summary, "encrypted_content": encrypted}));
                    }
                    Block::ToolUse(call) => items.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.input.to_json_text(),
                    })),
                    _ => {}
                }
            }
        }
    }
}

/// Returns the `input` items for a conversation (the native item first).
pub fn input_items(
    messages: &[Message],
    native: Option<&NativeCompaction>,
    request_model: &str,
) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(native) = native {
        items.push(native.to_input_item());
    }
    for message in messages {
        push_items(&mut items, message, request_model);
    }
    items
}

/// Builds the `POST /responses` body (streaming, `store: false`).
pub fn request_body(request: &ChatRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !request.system.is_empty() {
        body.insert("instructions".into(), json!(request.system));
    }
    body.insert(
        "input".into(),
        Value::Array(input_items(
            &request.messages,
            request.native.as_ref(),
            &request.model,
        )),
    );
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_output_tokens".into(), json!(request.max_tokens));
    if let Some(reasoning) = &request.reasoning {
        let mut config = Map::new();
        if let Some(effort) = &reasoning.effort {
            config.insert("effort".into(), json!(effort));
        }
        config.insert("summary".into(), json!("auto"));
        body.insert("reasoning".into(), Value::Object(config));
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    body.insert("store".into(), json!(false));
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// Normalises Responses usage (SPEC §4.2): `input_tokens` includes
/// `input_tokens_details.cached_tokens`, which is subtracted; `output_tokens`
/// includes `output_tokens_details.reasoning_tokens`.
pub fn normalise_usage(value: &Value) -> Usage {
    let input = wire::u64_at(value, "/input_tokens").unwrap_or(0);
    let cached = wire::u64_at(value, "/input_tokens_details/cached_tokens")
        .unwrap_or(0)
        .min(input);
    Usage {
        input: input - cached,
        cache_read: cached,
        cache_write: 0,
        output: wire::u64_at(value, "/output_tokens").unwrap_or(0),
        reasoning: wire::u64_at(value, "/output_tokens_details/reasoning_tokens").unwrap_or(0),
    }
}

/// Decodes a Responses stream.
#[derive(Debug)]
pub struct ResponsesDecoder {
    model: String,
    assembly: Assembly,
    items: HashMap<u64, usize>,
    usage: Option<Usage>,
    stop: Option<StopReason>,
    done: bool,
    /// Whether the terminal event was `response.incomplete` (a stated
    /// reason for stopping).
    incomplete: bool,
    /// Whether the terminal event's response listed any output item.
    listed_output: bool,
}

impl ResponsesDecoder {
    /// Returns a decoder; `model` is used until the stream names its own.
    pub fn new(model: impl Into<String>) -> Self {
        ResponsesDecoder {
            model: model.into(),
            assembly: Assembly::default(),
            items: HashMap::new(),
            usage: None,
            stop: None,
            done: false,
            incomplete: false,
            listed_output: false,
        }
    }

    fn note_model(&mut self, data: &Value) {
        if let Some(model) = wire::str_at(data, "/response/model").filter(|m| !m.is_empty()) {
            self.model = model.to_owned();
        }
    }

    fn output_index(data: &Value) -> u64 {
        data.get("output_index")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    fn item_done(&mut self, data: &Value, out: &mut Vec<StreamEvent>) {
        let index = Self::output_index(data);
        let item = data.get("item").cloned().unwrap_or(Value::Null);
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let pos = match self.items.get(&index) {
                    Some(&pos) => pos,
                    None => self.start_item(index, &item, out),
                };
                if let Some(arguments) = item.get("arguments").and_then(Value::as_str) {
                    self.assembly.fill_arguments(pos, arguments);
                }
                self.assembly.end_tool(pos, out);
            }
            Some("reasoning") => {
                let existing = self.items.get(&index).copied();
                let has_text = existing
                    .and_then(|pos| self.assembly.text_of(pos))
                    .is_some_and(|t| !t.is_empty());
                let mut pos = existing;
                if !has_text {
                    let summary: Vec<&str> = item
                        .get("summary")
                        .and_then(Value::as_array)
                        .map(|parts| {
                            parts
                                .iter()
                                .filter_map(|p| p.get("text").and_then(Value::as_str))
                                .collect()
                        })
                        .unwrap_or_default();
                    pos = Some(self.assembly.push_thinking(pos, &summary.join("\n\n"), out));
                }
                let pos = pos.unwrap_or_else(|| self.assembly.start_thinking());
                if let Some(encrypted) = item.get("encrypted_content").and_then(Value::as_str) {
                    self.assembly.set_signature(pos, encrypted, false);
                }
                self.items.insert(index, pos);
            }
            Some("message") => {
                let existing = self.items.get(&index).copied();
                let has_text = existing
                    .and_then(|pos| self.assembly.text_of(pos))
                    .is_some_and(|t| !t.is_empty());
                if !has_text {
                    let text: String = item
                        .get("content")
                        .and_then(Value::as_array)
                        .map(|parts| {
                            parts
                                .iter()
                                .filter_map(|p| p.get("text").and_then(Value::as_str))
                                .collect()
                        })
                        .unwrap_or_default();
                    let pos = self.assembly.push_text(existing, &text, out);
                    self.items.insert(index, pos);
                }
            }
            _ => {}
        }
    }

    fn start_item(&mut self, index: u64, item: &Value, out: &mut Vec<StreamEvent>) -> usize {
        let pos = match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let id = item
                    .get("call_id")
                    .or_else(|| item.get("id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                self.assembly.start_tool(id, name, out)
            }
            Some("reasoning") => self.assembly.start_thinking(),
            _ => self.assembly.start_text(),
        };
        self.items.insert(index, pos);
        pos
    }

    fn fail(data: &Value, raw: &str) -> ProviderError {
        let error = data
            .pointer("/response/error")
            .or_else(|| data.get("error"))
            .unwrap_or(data);
        let kind = error
            .get("code")
            .and_then(Value::as_str)
            .or_else(|| error.get("type").and_then(Value::as_str))
            .unwrap_or("error");
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        wire::stream_error(kind, message, raw)
    }
}

impl StreamDecoder for ResponsesDecoder {
    fn feed(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if event.data.trim().is_empty() || event.data.trim() == "[DONE]" {
            return Ok(());
        }
        let data = wire::parse_json(event)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str())
            .to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" => self.note_model(&data),
            "response.output_item.added" => {
                let item = data.get("item").cloned().unwrap_or(Value::Null);
                let index = Self::output_index(&data);
                if !self.items.contains_key(&index) {
                    self.start_item(index, &item, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let index = Self::output_index(&data);
                let pos = self.items.get(&index).copied();
                let pos = self
                    .assembly
                    .push_text(pos, data["delta"].as_str().unwrap_or(""), out);
                self.items.insert(index, pos);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let index = Self::output_index(&data);
                let pos = self.items.get(&index).copied();
                let pos =
                    self.assembly
                        .push_thinking(pos, data["delta"].as_str().unwrap_or(""), out);
                self.items.insert(index, pos);
            }
            "response.function_call_arguments.delta" => {
                let index = Self::output_index(&data);
                let Some(&pos) = self.items.get(&index) else {
                    return Err(ProviderError::malformed(
                        "arguments for a function call that was never added",
                        &event.data,
                    ));
                };
                self.assembly
                    .push_arguments(pos, data["delta"].as_str().unwrap_or(""), out);
            }
            "response.output_item.done" => self.item_done(&data, out),
            "response.completed" | "response.incomplete" => {
                self.note_model(&data);
                if let Some(usage) = data.pointer("/response/usage").filter(|u| u.is_object()) {
                    let usage = normalise_usage(usage);
                    self.usage = Some(usage);
                    out.push(StreamEvent::Usage(usage));
                }
                self.assembly.end_all_tools(out);
                self.incomplete = kind == "response.incomplete";
                self.listed_output = data
                    .pointer("/response/output")
                    .and_then(Value::as_array)
                    .is_some_and(|items| !items.is_empty());
                self.stop = Some(if self.incomplete {
                    match wire::str_at(&data, "/response/incomplete_details/reason") {
                        Some("max_output_tokens") => StopReason::MaxTokens,
                        Some("content_filter") => StopReason::Refusal,
                        Some(other) => StopReason::Other(other.to_owned()),
                        None => StopReason::Other("incomplete".to_owned()),
                    }
                } else if self.assembly.has_tools() {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                });
                self.done = true;
            }
            "response.failed" | "error" => return Err(Self::fail(&data, &event.data)),
            _ => {}
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    /// Returns the response. Empty ([`ProviderError::EmptyResponse`]): a
    /// `response.completed` with no output item at all (no message, no
    /// reasoning, no function call, neither streamed nor listed). Responses
    /// states no stop reason besides its status, and `completed` with
    /// nothing in it says nothing; `response.incomplete` names its reason
    /// and is returned. A message item with empty text is the model's own
    /// empty answer and is returned.
    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        let Some(stop) = self.stop.clone().filter(|_| self.done) else {
            return Err(ProviderError::malformed(
                "the stream ended before response.completed",
                "",
            ));
        };
        if !self.incomplete
            && !self.listed_output
            && self.items.is_empty()
            && self.assembly.carries_nothing()
        {
            return Err(ProviderError::EmptyResponse { attempts: 1 });
        }
        let assembly = std::mem::take(&mut self.assembly);
        Ok(wire::response(
            assembly,
            self.model.clone(),
            self.usage,
            stop,
        ))
    }
}

/// Builds the `POST /responses/compact` body for a span (SPEC §10.3): the
/// previous native item or rendered capsule plus the span, never the tail.
pub fn compact_body(
    model: &str,
    instructions: &str,
    span: &[Message],
    previous: Option<&NativeCompaction>,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions));
    }
    body.insert(
        "input".into(),
        Value::Array(input_items(span, previous, model)),
    );
    Value::Object(body)
}

/// What `POST /responses/compact` returned that SOBA keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactOutcome {
    /// The opaque compaction item; the returned user messages are discarded.
    pub item: NativeCompaction,
    /// The normalised usage of the compaction call, when reported.
    pub usage: Option<Usage>,
}

/// Parses a compact response body, keeping only the `compaction` item.
pub fn parse_compact_response(body: &str) -> Result<CompactOutcome, ProviderError> {
    let value: Value = serde_json::from_str(body).map_err(|err| {
        ProviderError::malformed(format!("compact response is not JSON: {err}"), body)
    })?;
    let item = value
        .get("output")
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .rev()
                .find(|item| item.get("type").and_then(Value::as_str) == Some("compaction"))
        })
        .ok_or_else(|| ProviderError::malformed("compact response has no compaction item", body))?;
    let encrypted = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .filter(|content| !content.is_empty())
        .ok_or_else(|| {
            ProviderError::malformed("compaction item has no encrypted_content", body)
        })?;
    Ok(CompactOutcome {
        item: NativeCompaction {
            encrypted_content: encrypted.to_owned(),
        },
        usage: value
            .get("usage")
            .filter(|u| u.is_object())
            .map(normalise_usage),
    })
}

#[cfg(test)]
mod tests {
    use soba_core::{ToolInput, ToolUse};

    use super::*;
    use crate::request::ReasoningConfig;
    use crate::sse::parse_all;

    #[test]
    fn body_has_store_false_and_function_items() {
        let mut assistant = Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "sum".into(),
                    signature: Some("ENC".into()),
                },
                Block::Text("checking".into()),
                Block::ToolUse(ToolUse {
                    id: "call_1".into(),
                    name: "read".into(),
                    input: ToolInput::from_json_text(r#"{"path":"x"}"#),
                }),
            ],
        );
        assistant.model = Some("gpt-5".into());
        let mut request = ChatRequest::new(
            "gpt-5",
            "sys",
            vec![
                Message::user("hi"),
                assistant,
                Message::tool_result("call_1", "data", false),
            ],
            32_000,
        );
        request.reasoning = Some(ReasoningConfig {
            effort: Some("medium".into()),
            budget_tokens: None,
        });
        request.native = Some(NativeCompaction {
            encrypted_content: "CMP".into(),
        });
        let body = request_body(&request);
        assert_eq!(body["store"], false);
        assert_eq!(body["instructions"], "sys");
        let input = body["input"].as_array().unwrap();
        let kinds: Vec<&str> = input
            .iter()
            .map(|item| item["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "compaction",
                "message",
                "reasoning",
                "message",
                "function_call",
                "function_call_output"
            ]
        );
        assert_eq!(input[5]["output"], "data");
        assert_eq!(body["include"][0], "reasoning.encrypted_content");
    }

    #[test]
    fn usage_subtracts_cached_and_keeps_reasoning() {
        let usage = normalise_usage(&json!({
            "input_tokens": 5000, "input_tokens_details": {"cached_tokens": 4096},
            "output_tokens": 700, "output_tokens_details": {"reasoning_tokens": 512}
        }));
        assert_eq!(
            usage,
            Usage {
                input: 904,
                cache_read: 4096,
                cache_write: 0,
                output: 700,
                reasoning: 512
            }
        );
    }

    #[test]
    fn decodes_text_and_function_calls() {
        let stream = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5-2025-08-07\"}}\n\n",
            "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"Hel\"}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"lo\"}\n\n",
            "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_9\",\"name\":\"grep\",\"arguments\":\"\"}}\n\n",
            "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":1,\"delta\":\"{\\\"q\\\":\\\"x\\\"}\"}\n\n",
            "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"call_id\":\"call_9\",\"name\":\"grep\",\"arguments\":\"{\\\"q\\\":\\\"x\\\"}\"}}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":10,\"input_tokens_details\":{\"cached_tokens\":4},\"output_tokens\":3,\"output_tokens_details\":{\"reasoning_tokens\":0}}}}\n\n",
        );
        let mut decoder = ResponsesDecoder::new("gpt-5");
        let mut out = Vec::new();
        for event in parse_all(stream.as_bytes()).unwrap() {
            decoder.feed(&event, &mut out).unwrap();
        }
        let response = decoder.finish().unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.message.text(), "Hello");
        let call = response.message.tool_uses().next().unwrap();
        assert_eq!(
            (call.id.as_str(), call.input.str_arg("q")),
            ("call_9", Some("x"))
        );
        assert_eq!(response.message.usage.unwrap().input, 6);
        assert_eq!(response.message.model.as_deref(), Some("gpt-5-2025-08-07"));
    }

    #[test]
    fn failed_response_is_an_overflow() {
        let event = SseEvent {
            event: "response.failed".into(),
            data: r#"{"type":"response.failed","response":{"error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again."}}}"#.into(),
            id: None,
        };
        assert!(
            ResponsesDecoder::new("m")
                .feed(&event, &mut Vec::new())
                .unwrap_err()
                .is_overflow()
        );
    }

    #[test]
    fn compact_keeps_only_the_compaction_item() {
        let body = r#"{"id":"resp_001","object":"response.compaction","output":[
            {"id":"msg_000","type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},
            {"id":"cmp_001","type":"compaction","encrypted_content":"gAAAAB"}],
            "usage":{"input_tokens":139,"input_tokens_details":{"cached_tokens":0},"output_tokens":438,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":577}}"#;
        let outcome = parse_compact_response(body).unwrap();
        assert_eq!(outcome.item.encrypted_content, "gAAAAB");
        assert_eq!(outcome.usage.unwrap().reasoning, 64);
        assert!(parse_compact_response(r#"{"output":[]}"#).is_err());
        assert!(parse_compact_response("<html>").is_err());
    }
}
