//! The OpenAI Chat Completions dialect (`openai-chat`), for OpenAI and every
//! compatible server (OpenRouter, vLLM, llama.cpp, Ollama, LM Studio,
//! DeepSeek, Groq…): the request body and the stream decoder.
//!
//! Mapping choices: `max_tokens` (not `max_completion_tokens`) because
//! compatible servers understand it; thinking blocks are never re-sent
//! (compatible servers reject or ignore them); tool-result images become
//! `[image: type]` placeholders because `tool` messages carry text only.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use soba_core::{Block, Message, Role, Usage};

use crate::error::ProviderError;
use crate::request::{ChatRequest, ChatResponse, StopReason, StreamEvent};
use crate::sse::SseEvent;
use crate::wire::{self, Assembly, StreamDecoder};

fn user_content(message: &Message) -> Option<Value> {
    let parts: Vec<Value> = message
        .content
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(json!({"type": "text", "text": text})),
            Block::Image(image) => {
                Some(json!({"type": "image_url", "image_url": {"url": wire::image_url(image)}}))
            }
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        [] => None,
        [only] if only["type"] == "text" => Some(only["text"].clone()),
        _ => Some(Value::Array(parts)),
    }
}

fn push_message(messages: &mut Vec<Value>, message: &Message) {
    match message.role {
        Role::System => {
            let text = message.text();
            if !text.is_empty() {
                messages.push(json!({"role": "system", "content": text}));
            }
        }
        Role::User | Role::Tool => {
            for result in message.tool_results() {
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": result.tool_use_id,
                    "content": wire::result_text(result),
                }));
            }
            if let Some(content) = user_content(message) {
                messages.push(json!({"role": "user", "content": content}));
            }
        }
        Role::Assistant => {
            let text = message.text();
            let calls: Vec<Value> = message
                .tool_uses()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.input.to_json_text()},
                    })
                })
                .collect();
            if text.is_empty() && calls.is_empty() {
                return;
            }
            let mut value = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
            if !calls.is_empty() {
                value["tool_calls"] = Value::Array(calls);
            }
            messages.push(value);
        }
    }
}

/// Builds the `POST /chat/completions` body (streaming, with usage).
pub fn request_body(request: &ChatRequest) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        push_message(&mut messages, message);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_tokens".into(), json!(request.max_tokens));
    if let Some(effort) = request.reasoning.as_ref().and_then(|r| r.effort.as_deref()) {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

/// Normalises Chat Completions usage (SPEC §4.2): `prompt_tokens` includes
/// cached tokens, which are subtracted (`prompt_tokens_details.cached_tokens`,
/// or DeepSeek's `prompt_cache_hit_tokens`); `completion_tokens` includes
/// reasoning.
pub fn normalise_usage(value: &Value) -> Usage {
    let prompt = wire::u64_at(value, "/prompt_tokens").unwrap_or(0);
    let cached = wire::u64_at(value, "/prompt_tokens_details/cached_tokens")
        .or_else(|| wire::u64_at(value, "/prompt_cache_hit_tokens"))
        .unwrap_or(0)
        .min(prompt);
    Usage {
        input: prompt - cached,
        cache_read: cached,
        cache_write: 0,
        output: wire::u64_at(value, "/completion_tokens").unwrap_or(0),
        reasoning: wire::u64_at(value, "/completion_tokens_details/reasoning_tokens").unwrap_or(0),
    }
}

fn stop_reason(name: &str) -> StopReason {
    match name {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Decodes a Chat Completions stream; tool-call deltas are assembled by
/// their `index`.
#[derive(Debug)]
pub struct ChatDecoder {
    model: String,
    assembly: Assembly,
    text_pos: Option<usize>,
    thinking_pos: Option<usize>,
    tools: HashMap<u64, usize>,
    usage: Option<Usage>,
    stop: Option<StopReason>,
    done: bool,
    /// Whether a choice other than index 0 was seen (and ignored).
    other_choice_seen: bool,
}

impl ChatDecoder {
    /// Returns a decoder; `model` is used until the stream names its own.
    pub fn new(model: impl Into<String>) -> Self {
        ChatDecoder {
            model: model.into(),
            assembly: Assembly::default(),
            text_pos: None,
            thinking_pos: None,
            tools: HashMap::new(),
            usage: None,
            stop: None,
            done: false,
            other_choice_seen: false,
        }
    }

    /// Returns the chunk's choice with index 0 (a choice without `index`
    /// counts as 0). Other choices (`n` > 1, or a hostile server) are
    /// ignored, said once in the debug log: their text and tool calls
    /// would otherwise be mixed into one reply.
    fn first_choice<'c>(&mut self, chunk: &'c Value) -> Option<&'c Value> {
        let choices = chunk.get("choices").and_then(Value::as_array)?;
        let index_of = |choice: &Value| choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        if !self.other_choice_seen && choices.iter().any(|choice| index_of(choice) != 0) {
            self.other_choice_seen = true;
            tracing::debug!(
                n_choices = choices.len(),
                "the stream carries choices other than index 0; only choice 0 is used"
            );
        }
        choices.iter().find(|choice| index_of(choice) == 0)
    }

    fn tool_delta(&mut self, call: &Value, out: &mut Vec<StreamEvent>) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(self.tools.len() as u64);
        let pos = match self.tools.get(&index) {
            Some(&pos) => pos,
            None => {
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| format!("call_{index}"), str::to_owned);
                let name = wire::str_at(call, "/function/name")
                    .unwrap_or_default()
                    .to_owned();
                let pos = self.assembly.start_tool(id, name, out);
                self.tools.insert(index, pos);
                pos
            }
        };
        if let Some(arguments) = wire::str_at(call, "/function/arguments") {
            self.assembly.push_arguments(pos, arguments, out);
        }
    }
}

impl StreamDecoder for ChatDecoder {
    fn feed(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.assembly.end_all_tools(out);
            self.done = true;
            return Ok(());
        }
        let chunk = wire::parse_json(event)?;
        if let Some(error) = chunk.get("error") {
            let kind = error
                .get("code")
                .map(|code| {
                    code.as_str()
                        .map_or_else(|| code.to_string(), str::to_owned)
                })
                .or_else(|| error.get("type").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "error".to_owned());
            let message = error.get("message").and_then(Value::as_str).unwrap_or("");
            return Err(wire::stream_error(&kind, message, data));
        }
        if let Some(model) = chunk
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            self.model = model.to_owned();
        }
        if let Some(choice) = self.first_choice(&chunk) {
            if let Some(delta) = choice.get("delta") {
                let reasoning = delta
                    .get("reasoning_content")
                    .or_else(|| delta.get("reasoning"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !reasoning.is_empty() {
                    self.thinking_pos = Some(self.assembly.push_thinking(
                        self.thinking_pos,
                        reasoning,
                        out,
                    ));
                }
                if let Some(text) = delta
                    .get("content")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    self.text_pos = Some(self.assembly.push_text(self.text_pos, text, out));
                }
                if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                    for call in calls {
                        self.tool_delta(call, out);
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.stop = Some(stop_reason(reason));
                self.assembly.end_all_tools(out);
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let usage = normalise_usage(usage);
            self.usage = Some(usage);
            out.push(StreamEvent::Usage(usage));
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    /// Returns the response. Empty ([`ProviderError::EmptyResponse`]): no
    /// `content`, no `reasoning_content`/`reasoning`, no `tool_calls` and
    /// no `finish_reason` in any chunk, e.g. a stream that is only
    /// `data: [DONE]`. A `finish_reason` with no content is the model's own
    /// empty answer and is returned.
    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        // Some servers close without `[DONE]`; a finish_reason is enough.
        if !self.done && self.stop.is_none() {
            return Err(ProviderError::malformed(
                "the stream ended before a finish_reason or [DONE]",
                "",
            ));
        }
        if self.stop.is_none() && self.assembly.carries_nothing() {
            return Err(ProviderError::EmptyResponse { attempts: 1 });
        }
        let assembly = std::mem::take(&mut self.assembly);
        let stop = match self.stop.clone() {
            Some(StopReason::EndTurn) | None if assembly.has_tools() => StopReason::ToolUse,
            Some(stop) => stop,
            None => StopReason::EndTurn,
        };
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
    use crate::sse::parse_all;

    #[test]
    fn body_maps_roles() {
        let assistant = Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "private".into(),
                    signature: None,
                },
                Block::ToolUse(ToolUse {
                    id: "c1".into(),
                    name: "bash".into(),
                    input: ToolInput::from_json_text(r#"{"cmd":"ls"}"#),
                }),
            ],
        );
        let request = ChatRequest::new(
            "gpt-4.1",
            "be brief",
            vec![
                Message::user("hi"),
                assistant,
                Message::tool_result("c1", "a.rs", false),
            ],
            500,
        );
        let body = request_body(&request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 4);
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(messages[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(messages[2]["content"], Value::Null);
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"cmd":"ls"}"#
        );
        assert_eq!(
            messages[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "a.rs"})
        );
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    #[test]
    fn usage_subtracts_cached_tokens() {
        let usage = normalise_usage(&json!({
            "prompt_tokens": 1200, "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1000},
            "completion_tokens_details": {"reasoning_tokens": 200}
        }));
        assert_eq!(
            usage,
            Usage {
                input: 200,
                cache_read: 1000,
                cache_write: 0,
                output: 300,
                reasoning: 200
            }
        );
        let deepseek = normalise_usage(
            &json!({"prompt_tokens": 50, "completion_tokens": 5, "prompt_cache_hit_tokens": 40}),
        );
        assert_eq!((deepseek.input, deepseek.cache_read), (10, 40));
    }

    #[test]
    fn assembles_parallel_tool_calls_by_index() {
        let stream = concat!(
            "data: {\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Let me look.\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"cmd\\\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\":\\\"ls\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n",
            "data: [DONE]\n\n",
        );
        let mut decoder = ChatDecoder::new("gpt-4.1");
        let mut out = Vec::new();
        for event in parse_all(stream.as_bytes()).unwrap() {
            decoder.feed(&event, &mut out).unwrap();
        }
        let response = decoder.finish().unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        let calls: Vec<_> = response.message.tool_uses().collect();
        assert_eq!(calls[0].input.str_arg("path"), Some("a"));
        assert_eq!(calls[1].input.str_arg("cmd"), Some("ls"));
        assert_eq!(response.message.usage.unwrap().prompt(), 100);
        assert_eq!(
            response.message.model.as_deref(),
            Some("gpt-4.1-2025-04-14")
        );
    }

    #[test]
    fn mid_stream_error_is_classified() {
        let event = SseEvent {
            event: String::new(),
            data: r#"{"error":{"message":"This endpoint's maximum context length is 16384 tokens. However, you requested about 94307 tokens (94307 of text input). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400}}"#.into(),
            id: None,
        };
        let err = ChatDecoder::new("m")
            .feed(&event, &mut Vec::new())
            .unwrap_err();
        assert_eq!(err.stated_prompt(), Some(94_307));
    }
}
