//! The message model shared by the agent, the providers and the importers.

use serde_json::{Map, Value};

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Pinned instructions; never part of a compaction span.
    System,
    /// The person, or text injected on their behalf (see [`MessageOrigin`]).
    User,
    /// The model.
    Assistant,
    /// One tool result.
    Tool,
}

impl Role {
    /// Returns the wire name (`system`, `user`, `assistant`, `tool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a wire name; Codex's `developer` maps to [`Role::System`].
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "system" | "developer" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// Where a `user`-role message came from, which decides whether it is a
/// *real user message* (SPEC §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MessageOrigin {
    /// Typed, queued or given as a prompt: a real user message.
    #[default]
    Typed,
    /// Context injected by the agent (environment or AGENTS wrappers, pi
    /// `custom_message`, Claude Code `isMeta`).
    Injected,
    /// An in-context demonstration (SWE-agent `is_demo`).
    Demonstration,
    /// A tool observation sent as a user message (SWE-agent 0.x).
    Observation,
    /// A foreign agent's compaction summary, or a loaded capsule.
    Summary,
    /// An agent-written marker such as `[Request interrupted by user]`.
    Marker,
}

impl MessageOrigin {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageOrigin::Typed => "typed",
            MessageOrigin::Injected => "injected",
            MessageOrigin::Demonstration => "demonstration",
            MessageOrigin::Observation => "observation",
            MessageOrigin::Summary => "summary",
            MessageOrigin::Marker => "marker",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "typed" => MessageOrigin::Typed,
            "injected" => MessageOrigin::Injected,
            "demonstration" => MessageOrigin::Demonstration,
            "observation" => MessageOrigin::Observation,
            "summary" => MessageOrigin::Summary,
            "marker" => MessageOrigin::Marker,
            _ => return None,
        })
    }
}

/// Normalised provider usage of one request (SPEC §4.2): cached tokens are
/// not part of `input`; `output` includes `reasoning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Usage {
    /// Uncached prompt tokens.
    pub input: u64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: u64,
    /// Generated tokens, reasoning included.
    pub output: u64,
    /// The reasoning part of `output`.
    pub reasoning: u64,
}

impl Usage {
    /// Returns the request's prompt size, `input + cacheRead + cacheWrite`,
    /// saturating: usage is read from outside (logs, transcripts,
    /// providers), and no figure may overflow a sum.
    pub fn prompt(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// Adds another request's usage to this total, saturating.
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.output = self.output.saturating_add(other.output);
        self.reasoning = self.reasoning.saturating_add(other.reasoning);
    }

    /// Returns the largest of its figures.
    pub fn largest(&self) -> u64 {
        self.input
            .max(self.cache_read)
            .max(self.cache_write)
            .max(self.output)
            .max(self.reasoning)
    }
}

/// Tool-call arguments, always a JSON object; the raw text is kept when it
/// did not parse as one (truncated `partialJson`, aborted calls).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInput {
    value: Map<String, Value>,
    raw: Option<String>,
}

impl ToolInput {
    /// Wraps an object; any other JSON value becomes `{"value": v}` with its
    /// text kept as raw.
    pub fn from_value(value: Value) -> Self {
        match value {
            Value::Object(map) => ToolInput {
                value: map,
                raw: None,
            },
            other => {
                let raw = other.to_string();
                let mut map = Map::new();
                map.insert("value".to_owned(), other);
                ToolInput {
                    value: map,
                    raw: Some(raw),
                }
            }
        }
    }

    /// Parses arguments given as a JSON string; text that is not a JSON
    /// object gives an empty object and keeps the raw text.
    pub fn from_json_text(text: &str) -> Self {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => ToolInput {
                value: map,
                raw: None,
            },
            Ok(Value::String(inner)) if inner.trim_start().starts_with('{') => {
                // Doubly encoded arguments appear in some exports.
                let mut parsed = Self::from_json_text(&inner);
                parsed.raw = Some(text.to_owned());
                parsed
            }
            _ if text.trim().is_empty() => ToolInput::empty(),
            _ => ToolInput {
                value: Map::new(),
                raw: Some(text.to_owned()),
            },
        }
    }

    /// Builds the input from an object and the raw text it came from.
    pub fn with_raw(value: Map<String, Value>, raw: Option<String>) -> Self {
        ToolInput { value, raw }
    }

    /// Returns an empty object.
    pub fn empty() -> Self {
        ToolInput {
            value: Map::new(),
            raw: None,
        }
    }

    /// Returns the arguments as an object.
    pub fn object(&self) -> &Map<String, Value> {
        &self.value
    }

    /// Returns the raw text when the arguments did not parse as an object.
    pub fn raw(&self) -> Option<&str> {
        self.raw.as_deref()
    }

    /// Returns a string argument by key.
    pub fn str_arg(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }

    /// Returns the JSON text of the arguments as a provider would receive
    /// them: the object, or the raw text when it did not parse.
    pub fn to_json_text(&self) -> String {
        match &self.raw {
            Some(raw) if self.value.is_empty() => raw.clone(),
            _ => Value::Object(self.value.clone()).to_string(),
        }
    }
}

/// A tool call made by the assistant.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// The call id the result answers (provider or synthesized).
    pub id: String,
    /// The tool's name as the agent knows it.
    pub name: String,
    /// The arguments.
    pub input: ToolInput,
}

/// Where an image's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// Base64 data.
    Data(String),
    /// A URL (including `data:` URIs kept as given).
    Url(String),
}

/// An image block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// MIME type, e.g. `image/png`.
    pub media_type: String,
    /// The bytes or their location.
    pub source: ImageSource,
}

/// One part of a tool result's content.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultPart {
    /// Text output.
    Text(String),
    /// An image (a screenshot, a rendered page).
    Image(Image),
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_use_id: String,
    /// The output as returned (after capture caps).
    pub content: Vec<ResultPart>,
    /// Whether the tool reported failure.
    pub is_error: bool,
}

impl ToolResult {
    /// Returns the text parts joined by newlines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if let ResultPart::Text(text) = part {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

/// A content block.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// Plain text.
    Text(String),
    /// Model reasoning; `signature` is the provider's opaque token.
    Thinking {
        /// The reasoning text (or its summary).
        text: String,
        /// The provider's signature, when it gave one.
        signature: Option<String>,
    },
    /// A tool call.
    ToolUse(ToolUse),
    /// A tool result.
    ToolResult(ToolResult),
    /// An image.
    Image(Image),
}

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The author.
    pub role: Role,
    /// Content blocks, in order.
    pub content: Vec<Block>,
    /// For `user` messages, whether it is a real user message.
    pub origin: MessageOrigin,
    /// The model that produced an assistant message.
    pub model: Option<String>,
    /// Normalised usage of the request that produced an assistant message.
    pub usage: Option<Usage>,
    /// The uncalibrated local count of the request that produced this
    /// assistant message (SPEC §3.1).
    pub request_tokens_local: Option<u64>,
}

impl Message {
    /// Builds a message with the given role and blocks and no metadata.
    pub fn new(role: Role, content: Vec<Block>) -> Self {
        Message {
            role,
            content,
            origin: MessageOrigin::Typed,
            model: None,
            usage: None,
            request_tokens_local: None,
        }
    }

    /// Builds a real user message from text.
    pub fn user(text: impl Into<String>) -> Self {
        Message::new(Role::User, vec![Block::Text(text.into())])
    }

    /// Builds an assistant message from text.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::new(Role::Assistant, vec![Block::Text(text.into())])
    }

    /// Builds a `tool` message carrying one result.
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Message::new(
            Role::Tool,
            vec![Block::ToolResult(ToolResult {
                tool_use_id: tool_use_id.into(),
                content: vec![ResultPart::Text(text.into())],
                is_error,
            })],
        )
    }

    /// Returns the tool calls this message makes.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUse> {
        self.content.iter().filter_map(|block| match block {
            Block::ToolUse(call) => Some(call),
            _ => None,
        })
    }

    /// Returns the tool results this message carries.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResult> {
        self.content.iter().filter_map(|block| match block {
            Block::ToolResult(result) => Some(result),
            _ => None,
        })
    }

    /// Returns whether this message makes at least one tool call.
    pub fn has_tool_uses(&self) -> bool {
        self.tool_uses().next().is_some()
    }

    /// Returns whether this is a real user message (SPEC §1): a typed
    /// `user` message that carries no tool result.
    pub fn is_real_user(&self) -> bool {
        self.role == Role::User
            && self.origin == MessageOrigin::Typed
            && !self
                .content
                .iter()
                .any(|b| matches!(b, Block::ToolResult(_)))
    }

    /// Returns whether every block is text (the only kind of message a
    /// retention boundary may truncate, SPEC §8.2).
    pub fn is_text_only(&self) -> bool {
        !self.content.is_empty() && self.content.iter().all(|b| matches!(b, Block::Text(_)))
    }

    /// Returns the text blocks joined by newlines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Block::Text(text) = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Usage comes from outside (logs, transcripts, providers): sums
    /// saturate instead of overflowing (a replayed log with two answers of
    /// 2^63 output tokens panicked in `add`).
    #[test]
    fn usage_sums_saturate() {
        let huge = Usage {
            input: u64::MAX,
            cache_read: 1,
            output: 1 << 63,
            ..Usage::default()
        };
        assert_eq!(huge.prompt(), u64::MAX);
        let mut total = huge;
        total.add(&huge);
        assert_eq!((total.input, total.output), (u64::MAX, u64::MAX));
        assert_eq!(huge.largest(), u64::MAX);
    }

    #[test]
    fn tool_input_normalises_strings_and_keeps_raw() {
        let parsed = ToolInput::from_json_text(r#"{"path":"a.rs"}"#);
        assert_eq!(parsed.str_arg("path"), Some("a.rs"));
        assert_eq!(parsed.raw(), None);

        let truncated = ToolInput::from_json_text(r#"{"path":"a."#);
        assert!(truncated.object().is_empty());
        assert_eq!(truncated.raw(), Some(r#"{"path":"a."#));
        assert_eq!(truncated.to_json_text(), r#"{"path":"a."#);

        let doubly = ToolInput::from_json_text(r#""{\"cmd\":\"ls\"}""#);
        assert_eq!(doubly.str_arg("cmd"), Some("ls"));

        let scalar = ToolInput::from_value(Value::from(3));
        assert_eq!(scalar.object().get("value"), Some(&Value::from(3)));
    }

    #[test]
    fn real_user_messages() {
        assert!(Message::user("fix it").is_real_user());
        let mut injected = Message::user("<environment_context>");
        injected.origin = MessageOrigin::Injected;
        assert!(!injected.is_real_user());
        let mut result = Message::tool_result("t1", "ok", false);
        result.role = Role::User;
        assert!(!result.is_real_user());
    }

    #[test]
    fn usage_prompt_adds_cache() {
        let usage = Usage {
            input: 3,
            cache_read: 100,
            cache_write: 20,
            output: 7,
            reasoning: 2,
        };
        assert_eq!(usage.prompt(), 123);
    }
}
