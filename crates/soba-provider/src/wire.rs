//! What the three dialects share on the wire: the [`StreamDecoder`] trait
//! that turns server-sent events into [`StreamEvent`]s, the assembly of the
//! final assistant message, and JSON helpers.
//!
//! Decoders are pure (no I/O), so an embedder with its own HTTP stack can
//! reuse them, and tests can feed them recorded streams.

use serde_json::Value;
use soba_core::{Block, Message, Role, ToolInput, ToolUse, Usage};

use crate::error::ProviderError;
use crate::request::{ChatResponse, StopReason, StreamEvent};
use crate::sse::SseEvent;

/// The prefix that marks an Anthropic `redacted_thinking` block kept in a
/// [`Block::Thinking`] signature, so it can be re-sent verbatim.
pub const REDACTED_THINKING_PREFIX: &str = "anthropic-redacted-thinking:";

/// Turns one dialect's server-sent events into stream events and, at the
/// end, the complete response.
pub trait StreamDecoder: Send {
    /// Handles one event, appending what it produced to `out`.
    fn feed(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError>;

    /// Returns whether the stream's terminal event has arrived.
    fn is_done(&self) -> bool;

    /// Returns the complete response; fails when the stream ended before
    /// the response was complete, and with [`ProviderError::EmptyResponse`]
    /// when it is empty: no text, no tool call, no reasoning and no stated
    /// reason for stopping (each decoder's `finish` says what that is in
    /// its dialect). The HTTP transport retries an empty response once.
    fn finish(&mut self) -> Result<ChatResponse, ProviderError>;
}

/// One block being assembled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Partial {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Tool {
        index: usize,
        id: String,
        name: String,
        arguments: String,
        ended: bool,
    },
}

/// The assistant message under construction, in block order.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    pub blocks: Vec<Partial>,
    pub n_tools: usize,
}

impl Assembly {
    pub fn start_text(&mut self) -> usize {
        self.blocks.push(Partial::Text(String::new()));
        self.blocks.len() - 1
    }

    pub fn start_thinking(&mut self) -> usize {
        self.blocks.push(Partial::Thinking {
            text: String::new(),
            signature: None,
        });
        self.blocks.len() - 1
    }

    /// Starts a tool call and emits its start event; returns the block.
    pub fn start_tool(&mut self, id: String, name: String, out: &mut Vec<StreamEvent>) -> usize {
        let index = self.n_tools;
        self.n_tools += 1;
        out.push(StreamEvent::ToolCallStart {
            index,
            id: id.clone(),
            name: name.clone(),
        });
        self.blocks.push(Partial::Tool {
            index,
            id,
            name,
            arguments: String::new(),
            ended: false,
        });
        self.blocks.len() - 1
    }

    /// Appends text (to the block, or to a new text block when `pos` is not
    /// a text block) and emits the delta.
    pub fn push_text(
        &mut self,
        pos: Option<usize>,
        delta: &str,
        out: &mut Vec<StreamEvent>,
    ) -> usize {
        if delta.is_empty() {
            return pos.unwrap_or_else(|| self.start_text());
        }
        let pos = match pos {
            Some(pos) if matches!(self.blocks.get(pos), Some(Partial::Text(_))) => pos,
            _ => self.start_text(),
        };
        if let Some(Partial::Text(text)) = self.blocks.get_mut(pos) {
            text.push_str(delta);
        }
        out.push(StreamEvent::TextDelta(delta.to_owned()));
        pos
    }

    /// Appends reasoning text and emits the delta.
    pub fn push_thinking(
        &mut self,
        pos: Option<usize>,
        delta: &str,
        out: &mut Vec<StreamEvent>,
    ) -> usize {
        if delta.is_empty() {
            return pos.unwrap_or_else(|| self.start_thinking());
        }
        let pos = match pos {
            Some(pos) if matches!(self.blocks.get(pos), Some(Partial::Thinking { .. })) => pos,
            _ => self.start_thinking(),
        };
        if let Some(Partial::Thinking { text, .. }) = self.blocks.get_mut(pos) {
            text.push_str(delta);
        }
        out.push(StreamEvent::ThinkingDelta(delta.to_owned()));
        pos
    }

    pub fn set_signature(&mut self, pos: usize, value: &str, append: bool) {
        if let Some(Partial::Thinking { signature, .. }) = self.blocks.get_mut(pos) {
            match signature {
                Some(existing) if append => existing.push_str(value),
                _ => *signature = Some(value.to_owned()),
            }
        }
    }

    /// Appends a fragment of a tool call's arguments and emits it.
    pub fn push_arguments(&mut self, pos: usize, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some(Partial::Tool {
            index, arguments, ..
        }) = self.blocks.get_mut(pos)
        {
            arguments.push_str(delta);
            out.push(StreamEvent::ToolCallDelta {
                index: *index,
                arguments: delta.to_owned(),
            });
        }
    }

    /// Replaces a tool call's arguments when none were streamed (servers
    /// that only send them in the final item).
    pub fn fill_arguments(&mut self, pos: usize, full: &str) {
        if let Some(Partial::Tool { arguments, .. }) = self.blocks.get_mut(pos)
            && arguments.is_empty()
        {
            *arguments = full.to_owned();
        }
    }

    /// Ends a tool call (once) and emits the assembled call.
    pub fn end_tool(&mut self, pos: usize, out: &mut Vec<StreamEvent>) {
        if let Some(Partial::Tool {
            index,
            id,
            name,
            arguments,
            ended,
        }) = self.blocks.get_mut(pos)
            && !*ended
        {
            *ended = true;
            if name.trim().is_empty() {
                // Not a call (see `into_message`): nothing to announce.
                return;
            }
            let call = ToolUse {
                id: id.clone(),
                name: name.clone(),
                input: ToolInput::from_json_text(arguments),
            };
            out.push(StreamEvent::ToolCallEnd {
                index: *index,
                call,
            });
        }
    }

    /// Ends every tool call still open.
    pub fn end_all_tools(&mut self, out: &mut Vec<StreamEvent>) {
        for pos in 0..self.blocks.len() {
            self.end_tool(pos, out);
        }
    }

    /// Returns whether the message has a tool call: one with a name (a
    /// fragment that never got a name is no call; see
    /// [`Assembly::into_message`]).
    pub fn has_tools(&self) -> bool {
        self.blocks.iter().any(is_named_tool)
    }

    /// Returns whether the message would carry nothing: no tool call, no
    /// text, no reasoning text and no reasoning signature (the blocks
    /// [`Assembly::into_message`] keeps).
    pub fn carries_nothing(&self) -> bool {
        self.blocks.iter().all(|partial| match partial {
            Partial::Text(text) => text.is_empty(),
            Partial::Thinking { text, signature } => text.is_empty() && signature.is_none(),
            Partial::Tool { .. } => !is_named_tool(partial),
        })
    }

    /// Returns the text accumulated in a block, when it is a text block.
    pub fn text_of(&self, pos: usize) -> Option<&str> {
        match self.blocks.get(pos) {
            Some(Partial::Text(text)) => Some(text),
            Some(Partial::Thinking { text, .. }) => Some(text),
            _ => None,
        }
    }

    /// Builds the assistant message; empty text and reasoning blocks
    /// without text or signature are dropped, and so is a tool-call
    /// fragment that never got a name: no tool can run it, and answering
    /// it with an error would let a server that streams only such
    /// fragments loop the agent without end (an attack finding); a reply
    /// of nothing else is empty, and handled as such.
    pub fn into_message(self, model: String, usage: Option<Usage>) -> Message {
        let nameless = self
            .blocks
            .iter()
            .filter(|partial| matches!(partial, Partial::Tool { .. }) && !is_named_tool(partial))
            .count();
        if nameless > 0 {
            tracing::warn!("dropped {nameless} tool-call fragment(s) without a tool name");
        }
        let content = self
            .blocks
            .into_iter()
            .filter(|partial| !matches!(partial, Partial::Tool { .. }) || is_named_tool(partial))
            .filter_map(|partial| match partial {
                Partial::Text(text) if text.is_empty() => None,
                Partial::Text(text) => Some(Block::Text(text)),
                Partial::Thinking { text, signature } if text.is_empty() && signature.is_none() => {
                    None
                }
                Partial::Thinking { text, signature } => Some(Block::Thinking { text, signature }),
                Partial::Tool {
                    id,
                    name,
                    arguments,
                    ..
                } => Some(Block::ToolUse(ToolUse {
                    id,
                    name,
                    input: ToolInput::from_json_text(&arguments),
                })),
            })
            .collect();
        let mut message = Message::new(Role::Assistant, content);
        message.model = Some(model);
        message.usage = usage;
        message
    }
}

/// Returns whether a block is a tool call with a name.
fn is_named_tool(partial: &Partial) -> bool {
    matches!(partial, Partial::Tool { name, .. } if !name.trim().is_empty())
}

/// The most characters of invalid arguments quoted back to the model.
const MAX_ARGUMENTS_EXCERPT: usize = 300;

/// Returns why a tool call's arguments cannot be used, or `None` when they
/// can: the one check, for every dialect, that a call whose arguments are
/// not a JSON object (invalid JSON, text cut off mid-arguments, a bare
/// string or number) is never run with a substitute such as `{}`.
///
/// The decoders keep such text as the input's raw text
/// ([`ToolInput::raw`]); the message says what was wrong, where (serde's
/// line and column) and quotes a bounded excerpt, so the model can send
/// the call again. Empty arguments are an empty object (servers send `""`
/// for tools without parameters) and are fine.
pub fn invalid_arguments(name: &str, input: &ToolInput) -> Option<String> {
    let raw = input.raw()?;
    let problem = match serde_json::from_str::<Value>(raw) {
        Err(err) if err.is_eof() => format!("are cut off: {err}"),
        Err(err) => format!("are not valid JSON: {err}"),
        Ok(Value::Object(_)) => return None,
        // Doubly encoded arguments decode to their inner object.
        Ok(Value::String(inner)) if !input.object().is_empty() || inner.trim() == "{}" => {
            return None;
        }
        Ok(other) => format!(
            "are not a JSON object but {}",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            }
        ),
    };
    Some(format!(
        "the arguments of this {name} call {problem}; the tool was not run. The arguments received ({} characters): {}. Send the call again with the arguments as one complete JSON object",
        raw.chars().count(),
        arguments_excerpt(raw),
    ))
}

/// Returns the text quoted (`{:?}`), its middle cut when it is longer than
/// [`MAX_ARGUMENTS_EXCERPT`] characters: the start says which call it was,
/// the end where it broke.
fn arguments_excerpt(raw: &str) -> String {
    let n_chars = raw.chars().count();
    if n_chars <= MAX_ARGUMENTS_EXCERPT {
        return format!("{raw:?}");
    }
    let half = MAX_ARGUMENTS_EXCERPT / 2;
    let head: String = raw.chars().take(half).collect();
    let tail: String = raw.chars().skip(n_chars - half).collect();
    format!("{head:?} … {tail:?}")
}

/// Builds the final response from an assembly.
pub(crate) fn response(
    assembly: Assembly,
    model: String,
    usage: Option<Usage>,
    stop: StopReason,
) -> ChatResponse {
    ChatResponse {
        message: assembly.into_message(model, usage),
        stop_reason: stop,
    }
}

/// Parses an event's data as JSON.
pub(crate) fn parse_json(event: &SseEvent) -> Result<Value, ProviderError> {
    serde_json::from_str(&event.data).map_err(|err| {
        ProviderError::malformed(
            format!("event {:?} is not JSON: {err}", event.event),
            &event.data,
        )
    })
}

/// Reads an unsigned integer field.
pub(crate) fn u64_at(value: &Value, pointer: &str) -> Option<u64> {
    value.pointer(pointer).and_then(Value::as_u64)
}

/// Reads a string field.
pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// Returns whether a thinking block from `message_model` may be re-sent to
/// `request_model`: signatures are only valid for the model that made them.
pub(crate) fn same_model(message_model: Option<&str>, request_model: &str) -> bool {
    match message_model {
        None => true,
        Some(model) => {
            crate::registry::canonical_name(model) == crate::registry::canonical_name(request_model)
        }
    }
}

/// Returns the `data:` URL of an image.
pub(crate) fn image_url(image: &soba_core::Image) -> String {
    match &image.source {
        soba_core::ImageSource::Data(data) => format!("data:{};base64,{data}", image.media_type),
        soba_core::ImageSource::Url(url) => url.clone(),
    }
}

/// Returns a tool result's content as text, images as placeholders (for
/// dialects whose tool results carry text only).
pub(crate) fn result_text(result: &soba_core::ToolResult) -> String {
    let mut out = String::new();
    for part in &result.content {
        if !out.is_empty() {
            out.push('\n');
        }
        match part {
            soba_core::ResultPart::Text(text) => out.push_str(text),
            soba_core::ResultPart::Image(image) => {
                out.push_str(&format!("[image: {}]", image.media_type))
            }
        }
    }
    out
}

/// Turns an error object reported inside a stream into a provider error:
/// an overflow when its text says so, otherwise [`ProviderError::StreamFailed`].
pub(crate) fn stream_error(kind: &str, message: &str, raw: &str) -> ProviderError {
    let overflow =
        crate::overflow::classify_overflow(400, raw).filter(|o| o.provider != "empty-400");
    match overflow {
        Some(found) => ProviderError::ContextOverflow {
            status: 400,
            stated_prompt: found.stated_prompt,
            stated_limit: found.stated_limit,
            body: crate::error::excerpt(raw),
        },
        None => ProviderError::StreamFailed {
            kind: kind.to_owned(),
            message: message.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembly_keeps_order_and_drops_empty_blocks() {
        let mut out = Vec::new();
        let mut assembly = Assembly::default();
        let thinking = assembly.push_thinking(None, "hmm", &mut out);
        assembly.set_signature(thinking, "sig", false);
        assembly.start_text();
        let text = assembly.push_text(None, "hello", &mut out);
        let tool = assembly.start_tool("call_1".into(), "read".into(), &mut out);
        assembly.push_arguments(tool, r#"{"path":"#, &mut out);
        assembly.push_arguments(tool, r#""a.rs"}"#, &mut out);
        assembly.end_tool(tool, &mut out);
        assembly.end_all_tools(&mut out);
        assert_eq!(assembly.text_of(text), Some("hello"));
        let message = assembly.into_message("m".into(), None);
        assert_eq!(message.content.len(), 3);
        assert_eq!(
            message.tool_uses().next().unwrap().input.str_arg("path"),
            Some("a.rs")
        );
        let ends = out
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallEnd { .. }))
            .count();
        assert_eq!(ends, 1);
    }

    #[test]
    fn arguments_that_are_no_json_object_are_named_never_replaced() {
        let check = |text: &str, expected: Option<&str>| {
            let input = ToolInput::from_json_text(text);
            assert_eq!(
                invalid_arguments("read_file", &input).as_deref(),
                expected,
                "{text}"
            );
        };
        check(r#"{"path":"a.rs"}"#, None);
        check("", None);
        check(r#""{\"path\":\"a.rs\"}""#, None);
        check(
            r#"{"path":"src/ma"#,
            Some(
                r#"the arguments of this read_file call are cut off: EOF while parsing a string at line 1 column 15; the tool was not run. The arguments received (15 characters): "{\"path\":\"src/ma". Send the call again with the arguments as one complete JSON object"#,
            ),
        );
        check(
            "{path: 'a.rs'}",
            Some(
                r#"the arguments of this read_file call are not valid JSON: key must be a string at line 1 column 2; the tool was not run. The arguments received (14 characters): "{path: 'a.rs'}". Send the call again with the arguments as one complete JSON object"#,
            ),
        );
        check(
            "[1,2]",
            Some(
                r#"the arguments of this read_file call are not a JSON object but an array; the tool was not run. The arguments received (5 characters): "[1,2]". Send the call again with the arguments as one complete JSON object"#,
            ),
        );
        // A long text is quoted by its start and its end.
        let long = format!(r#"{{"content":"{}"#, "x".repeat(1_000));
        let message = invalid_arguments("write_file", &ToolInput::from_json_text(&long)).unwrap();
        assert!(message.contains("(1012 characters)"), "{message}");
        assert!(message.contains(r#"x" … "x"#), "{message}");
        assert!(message.len() < 700, "{message}");
    }

    #[test]
    fn same_model_ignores_dates() {
        assert!(same_model(
            Some("claude-sonnet-4-5-20250929"),
            "claude-sonnet-4-5"
        ));
        assert!(!same_model(Some("claude-opus-4-5"), "claude-sonnet-4-5"));
        assert!(same_model(None, "x"));
    }
}
