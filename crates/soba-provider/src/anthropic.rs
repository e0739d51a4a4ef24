//! The Anthropic Messages dialect (`anthropic-messages`): the request body
//! with prompt-cache breakpoints (SPEC §10.4) and the stream decoder.
//!
//! Mapping choices: `tool` messages become `user` messages of
//! `tool_result` blocks, and consecutive messages of the same wire role are
//! merged (the API requires alternation); `system`-role messages inside the
//! conversation are sent as user text; thinking blocks are re-sent only with
//! their signature and only to the model that produced them; empty text
//! blocks are skipped (the API rejects them).

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use soba_core::{Block, ImageSource, Message, ResultPart, Role, Usage};

use crate::error::ProviderError;
use crate::request::{ChatRequest, ChatResponse, StopReason, StreamEvent};
use crate::sse::SseEvent;
use crate::wire::{self, Assembly, REDACTED_THINKING_PREFIX, StreamDecoder};

/// The `anthropic-version` header value.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The most cache breakpoints the API accepts.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

fn cache_control() -> Value {
    json!({"type": "ephemeral"})
}

fn image_block(image: &soba_core::Image) -> Value {
    match &image.source {
        ImageSource::Data(data) => {
            json!({"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": data}})
        }
        ImageSource::Url(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

fn content_blocks(message: &Message, request_model: &str) -> Vec<Value> {
    let resend_thinking = message.role == Role::Assistant
        && wire::same_model(message.model.as_deref(), request_model);
    let mut blocks = Vec::new();
    for block in &message.content {
        match block {
            Block::Text(text) if text.is_empty() => {}
            Block::Text(text) => blocks.push(json!({"type": "text", "text": text})),
            Block::Thinking {
                text,
                signature: Some(signature),
            } if resend_thinking => match signature.strip_prefix(REDACTED_THINKING_PREFIX) {
                Some(data) => blocks.push(json!({"type": "redacted_thinking", "data": data})),
                None => blocks
                    .push(json!({"type": "thinking", "thinking": text, "signature": signature})),
            },
            Block::Thinking { .. } => {}
            Block::ToolUse(call) => blocks.push(json!({
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": Value::Object(call.input.object().clone()),
            })),
            Block::ToolResult(result) => {
                let has_image = result
                    .content
                    .iter()
                    .any(|part| matches!(part, ResultPart::Image(_)));
                let content = if has_image {
                    Value::Array(
                        result
                            .content
                            .iter()
                            .map(|part| match part {
                                ResultPart::Text(text) => json!({"type": "text", "text": text}),
                                ResultPart::Image(image) => image_block(image),
                            })
                            .collect(),
                    )
                } else {
                    Value::String(result.text())
                };
                let mut value = json!({"type": "tool_result", "tool_use_id": result.tool_use_id, "content": content});
                if result.is_error {
                    value["is_error"] = Value::Bool(true);
                }
                blocks.push(value);
            }
            Block::Image(image) => blocks.push(image_block(image)),
        }
    }
    blocks
}

/// Builds the `POST /v1/messages` body (streaming).
pub fn request_body(request: &ChatRequest) -> Value {
    // Wire messages, and for each request message the wire position of its
    // last block (None when it produced nothing).
    let mut wire_messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut last_block_of: Vec<Option<(usize, usize)>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let role = if message.role == Role::Assistant {
            "assistant"
        } else {
            "user"
        };
        let blocks = content_blocks(message, &request.model);
        if blocks.is_empty() {
            last_block_of.push(None);
            continue;
        }
        match wire_messages.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => wire_messages.push((role, blocks)),
        }
        let wire_idx = wire_messages.len() - 1;
        last_block_of.push(Some((wire_idx, wire_messages[wire_idx].1.len() - 1)));
    }

    // Breakpoints: last tool, system, last message, then capsules (§10.4).
    let mut budget = MAX_CACHE_BREAKPOINTS;
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}))
        .collect();
    let mut tools = tools;
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = cache_control();
        budget -= 1;
    }
    let system = (!request.system.is_empty()).then(|| {
        budget -= 1;
        json!([{"type": "text", "text": request.system, "cache_control": cache_control()}])
    });
    let mut targets: Vec<(usize, usize)> = Vec::new();
    if let Some(last_idx) = wire_messages.len().checked_sub(1) {
        let blocks = &wire_messages[last_idx].1;
        // Thinking blocks cannot carry cache_control.
        let block_idx = blocks
            .iter()
            .rposition(|b| !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")))
            .unwrap_or(blocks.len() - 1);
        targets.push((last_idx, block_idx));
        budget -= 1;
    }
    for &capsule_idx in &request.cache_breakpoints {
        if budget == 0 {
            break;
        }
        if let Some(Some(target)) = last_block_of.get(capsule_idx)
            && !targets.contains(target)
        {
            targets.push(*target);
            budget -= 1;
        }
    }
    for (wire_idx, block_idx) in targets {
        wire_messages[wire_idx].1[block_idx]["cache_control"] = cache_control();
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_tokens));
    if let Some(system) = system {
        body.insert("system".into(), system);
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert(
        "messages".into(),
        Value::Array(
            wire_messages
                .into_iter()
                .map(|(role, blocks)| json!({"role": role, "content": blocks}))
                .collect(),
        ),
    );
    if let Some(budget_tokens) = request.reasoning.as_ref().and_then(|r| r.budget_tokens) {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget_tokens}),
        );
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// Normalises Anthropic usage (SPEC §4.2): `input_tokens` already excludes
/// cached tokens; thinking is part of `output_tokens` and not reported
/// separately. Fields absent from `value` keep their previous figure.
pub fn normalise_usage(value: &Value, previous: Usage) -> Usage {
    let field = |name: &str, old: u64| value.get(name).and_then(Value::as_u64).unwrap_or(old);
    Usage {
        input: field("input_tokens", previous.input),
        cache_read: field("cache_read_input_tokens", previous.cache_read),
        cache_write: field("cache_creation_input_tokens", previous.cache_write),
        output: field("output_tokens", previous.output),
        reasoning: previous.reasoning,
    }
}

fn stop_reason(name: &str) -> StopReason {
    match name {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Decodes a Messages stream.
#[derive(Debug)]
pub struct AnthropicDecoder {
    model: String,
    assembly: Assembly,
    blocks: HashMap<u64, usize>,
    tool_blocks: HashMap<u64, usize>,
    usage: Option<Usage>,
    stop: Option<StopReason>,
    done: bool,
}

impl AnthropicDecoder {
    /// Returns a decoder; `model` is used until the stream names its own.
    pub fn new(model: impl Into<String>) -> Self {
        AnthropicDecoder {
            model: model.into(),
            assembly: Assembly::default(),
            blocks: HashMap::new(),
            tool_blocks: HashMap::new(),
            usage: None,
            stop: None,
            done: false,
        }
    }

    fn report_usage(&mut self, value: &Value, out: &mut Vec<StreamEvent>) {
        let usage = normalise_usage(value, self.usage.unwrap_or_default());
        self.usage = Some(usage);
        out.push(StreamEvent::Usage(usage));
    }
}

impl StreamDecoder for AnthropicDecoder {
    fn feed(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let data = wire::parse_json(event)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        match kind {
            "message_start" => {
                if let Some(model) = wire::str_at(&data, "/message/model") {
                    self.model = model.to_owned();
                }
                if let Some(usage) = data.pointer("/message/usage") {
                    self.report_usage(usage, out);
                }
            }
            "content_block_start" => {
                let index = wire::u64_at(&data, "/index").unwrap_or(self.blocks.len() as u64);
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let pos = self.assembly.start_text();
                        self.assembly.push_text(
                            Some(pos),
                            block["text"].as_str().unwrap_or(""),
                            out,
                        );
                        self.blocks.insert(index, pos);
                    }
                    Some("thinking") => {
                        let pos = self.assembly.start_thinking();
                        self.assembly.push_thinking(
                            Some(pos),
                            block["thinking"].as_str().unwrap_or(""),
                            out,
                        );
                        if let Some(signature) =
                            block["signature"].as_str().filter(|s| !s.is_empty())
                        {
                            self.assembly.set_signature(pos, signature, false);
                        }
                        self.blocks.insert(index, pos);
                    }
                    Some("redacted_thinking") => {
                        let pos = self.assembly.start_thinking();
                        let data = block["data"].as_str().unwrap_or("");
                        self.assembly.set_signature(
                            pos,
                            &format!("{REDACTED_THINKING_PREFIX}{data}"),
                            false,
                        );
                        self.blocks.insert(index, pos);
                    }
                    Some("tool_use") => {
                        let id = block["id"].as_str().unwrap_or_default().to_owned();
                        let name = block["name"].as_str().unwrap_or_default().to_owned();
                        let pos = self.assembly.start_tool(id, name, out);
                        // Non-streamed input arrives whole in the start block.
                        if let Some(input) = block
                            .get("input")
                            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                        {
                            self.assembly.fill_arguments(pos, &input.to_string());
                        }
                        self.blocks.insert(index, pos);
                        self.tool_blocks.insert(index, pos);
                    }
                    // Server tools and unknown blocks are not part of the model
                    // input SOBA keeps.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = wire::u64_at(&data, "/index").unwrap_or(0);
                let pos = self.blocks.get(&index).copied();
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let pos =
                            self.assembly
                                .push_text(pos, delta["text"].as_str().unwrap_or(""), out);
                        self.blocks.insert(index, pos);
                    }
                    Some("thinking_delta") => {
                        let pos = self.assembly.push_thinking(
                            pos,
                            delta["thinking"].as_str().unwrap_or(""),
                            out,
                        );
                        self.blocks.insert(index, pos);
                    }
                    Some("signature_delta") => {
                        if let Some(pos) = pos {
                            self.assembly.set_signature(
                                pos,
                                delta["signature"].as_str().unwrap_or(""),
                                true,
                            );
                        }
                    }
                    Some("input_json_delta") => match self.tool_blocks.get(&index) {
                        Some(&pos) => self.assembly.push_arguments(
                            pos,
                            delta["partial_json"].as_str().unwrap_or(""),
                            out,
                        ),
                        None => {
                            return Err(ProviderError::malformed(
                                "input_json_delta for a block that is not a tool_use",
                                &event.data,
                            ));
                        }
                    },
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = wire::u64_at(&data, "/index").unwrap_or(0);
                if let Some(&pos) = self.tool_blocks.get(&index) {
                    self.assembly.end_tool(pos, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = wire::str_at(&data, "/delta/stop_reason") {
                    self.stop = Some(stop_reason(reason));
                }
                if let Some(usage) = data.get("usage") {
                    self.report_usage(usage, out);
                }
            }
            "message_stop" => {
                self.assembly.end_all_tools(out);
                self.done = true;
            }
            "error" => {
                let kind = wire::str_at(&data, "/error/type").unwrap_or("error");
                let message = wire::str_at(&data, "/error/message").unwrap_or("");
                return Err(wire::stream_error(kind, message, &event.data));
            }
            _ => {}
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    /// Returns the response. Empty ([`ProviderError::EmptyResponse`]): no
    /// text, thinking (text or signature), redacted thinking or `tool_use`
    /// block, and no `stop_reason` in a `message_delta`, e.g.
    /// `message_start` straight to `message_stop`. A `stop_reason` with no
    /// content is the model's own empty answer and is returned.
    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        if !self.done {
            return Err(ProviderError::malformed(
                "the stream ended before message_stop",
                "",
            ));
        }
        if self.stop.is_none() && self.assembly.carries_nothing() {
            return Err(ProviderError::EmptyResponse { attempts: 1 });
        }
        let assembly = std::mem::take(&mut self.assembly);
        let stop = self.stop.clone().unwrap_or(if assembly.has_tools() {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        Ok(wire::response(
            assembly,
            self.model.clone(),
            self.usage,
            stop,
        ))
    }
}

#[cfg(test)]
mod tests {
    use soba_core::{ToolInput, ToolUse};

    use super::*;
    use crate::request::ToolSchema;
    use crate::sse::parse_all;

    fn tool(name: &str) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            description: format!("{name} tool"),
            input_schema: json!({"type": "object"}),
        }
    }

    fn count_breakpoints(value: &Value) -> usize {
        match value {
            Value::Object(map) => {
                usize::from(map.contains_key("cache_control"))
                    + map.values().map(count_breakpoints).sum::<usize>()
            }
            Value::Array(items) => items.iter().map(count_breakpoints).sum(),
            _ => 0,
        }
    }

    #[test]
    fn at_most_four_breakpoints() {
        let mut request = ChatRequest::new("claude-sonnet-4-5", "sys", Vec::new(), 100);
        request.tools = vec![tool("read"), tool("bash")];
        request.messages = (0..7)
            .map(|i| {
                if i % 2 == 1 {
                    Message::assistant(format!("a{i}"))
                } else {
                    Message::user(format!("u{i}"))
                }
            })
            .collect();
        request.cache_breakpoints = vec![0, 2, 4];
        let body = request_body(&request);
        assert_eq!(count_breakpoints(&body), 4);
        assert!(body["tools"][1].get("cache_control").is_some());
        assert!(body["tools"][0].get("cache_control").is_none());
        assert!(
            body["messages"][0]["content"][0]
                .get("cache_control")
                .is_some()
        );
        assert!(
            body["messages"][6]["content"][0]
                .get("cache_control")
                .is_some()
        );
        assert!(
            body["messages"][2]["content"][0]
                .get("cache_control")
                .is_none()
        );
    }

    #[test]
    fn tool_results_merge_into_one_user_message() {
        let mut assistant = Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "plan".into(),
                    signature: Some("sig".into()),
                },
                Block::ToolUse(ToolUse {
                    id: "t1".into(),
                    name: "read".into(),
                    input: ToolInput::empty(),
                }),
                Block::ToolUse(ToolUse {
                    id: "t2".into(),
                    name: "read".into(),
                    input: ToolInput::empty(),
                }),
            ],
        );
        assistant.model = Some("claude-sonnet-4-5-20250929".into());
        let request = ChatRequest::new(
            "claude-sonnet-4-5",
            "",
            vec![
                Message::user("go"),
                assistant,
                Message::tool_result("t1", "one", false),
                Message::tool_result("t2", "two", true),
            ],
            100,
        );
        let body = request_body(&request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][0]["signature"], "sig");
        assert_eq!(messages[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(messages[2]["content"][1]["is_error"], true);
        assert!(body.get("system").is_none());
    }

    #[test]
    fn thinking_from_another_model_is_dropped() {
        let mut assistant = Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "plan".into(),
                    signature: Some("sig".into()),
                },
                Block::Text("done".into()),
            ],
        );
        assistant.model = Some("claude-opus-4-5".into());
        let request = ChatRequest::new(
            "claude-sonnet-4-5",
            "",
            vec![Message::user("go"), assistant, Message::user("next")],
            100,
        );
        let body = request_body(&request);
        assert_eq!(body["messages"][1]["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn decodes_a_stream_with_thinking_and_tools() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5-20250929\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":20,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"SIG\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\":\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"a.rs\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":42}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut decoder = AnthropicDecoder::new("claude-sonnet-4-5");
        let mut out = Vec::new();
        for event in parse_all(stream.as_bytes()).unwrap() {
            decoder.feed(&event, &mut out).unwrap();
        }
        assert!(decoder.is_done());
        let response = decoder.finish().unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        let usage = response.message.usage.unwrap();
        assert_eq!(
            usage,
            Usage {
                input: 10,
                cache_read: 100,
                cache_write: 20,
                output: 42,
                reasoning: 0
            }
        );
        assert_eq!(usage.prompt(), 130);
        assert_eq!(
            response.message.content[0],
            Block::Thinking {
                text: "hmm".into(),
                signature: Some("SIG".into())
            }
        );
        assert_eq!(
            response
                .message
                .tool_uses()
                .next()
                .unwrap()
                .input
                .str_arg("path"),
            Some("a.rs")
        );
        assert_eq!(
            response.message.model.as_deref(),
            Some("claude-sonnet-4-5-20250929")
        );
    }

    #[test]
    fn overflow_inside_the_stream() {
        let event = SseEvent {
            event: "error".into(),
            data: r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}"#.into(),
            id: None,
        };
        let err = AnthropicDecoder::new("m")
            .feed(&event, &mut Vec::new())
            .unwrap_err();
        assert_eq!(err.stated_prompt(), Some(213_462));
        let overloaded = SseEvent {
            event: "error".into(),
            data: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                .into(),
            id: None,
        };
        let err = AnthropicDecoder::new("m")
            .feed(&overloaded, &mut Vec::new())
            .unwrap_err();
        assert!(err.is_retryable());
    }

    #[test]
    fn stream_without_stop_is_malformed() {
        assert!(matches!(
            AnthropicDecoder::new("m").finish(),
            Err(ProviderError::Malformed { .. })
        ));
    }
}
