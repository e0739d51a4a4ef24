//! The provider-neutral request, stream events and response that every
//! client speaks, whatever its wire dialect.

use serde_json::Value;
use soba_core::{Message, ToolUse};

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
}

/// Reasoning settings; each dialect uses the part it understands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReasoningConfig {
    /// OpenAI reasoning effort (`minimal`, `low`, `medium`, `high`):
    /// `reasoning.effort` in Responses, `reasoning_effort` in Chat.
    pub effort: Option<String>,
    /// Anthropic extended-thinking budget (`thinking.budget_tokens`); it is
    /// part of `max_tokens` (SPEC §4.3).
    pub budget_tokens: Option<u64>,
}

/// The opaque item returned by OpenAI `POST /responses/compact` (SPEC §10.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeCompaction {
    /// The encrypted state; never inspected.
    pub encrypted_content: String,
}

impl NativeCompaction {
    /// Returns the item as it is sent back in a Responses `input` list.
    pub fn to_input_item(&self) -> Value {
        serde_json::json!({"type": "compaction", "encrypted_content": self.encrypted_content})
    }
}

/// One inference request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The model name as the provider knows it (no `provider/` prefix).
    pub model: String,
    /// The system prompt (skills included); empty for none.
    pub system: String,
    /// The tools offered, in order.
    pub tools: Vec<ToolSchema>,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// `max_tokens` (SPEC §4.3: the model's maxOutputTokens).
    pub max_tokens: u64,
    /// Indexes into `messages` of capsule messages that end a cacheable
    /// prefix (Anthropic only). The last tool schema, the end of the system
    /// prompt and the last message are always breakpoints; at most four are
    /// sent in total, so extra indexes beyond the first are dropped.
    pub cache_breakpoints: Vec<usize>,
    /// Reasoning settings; `None` sends none.
    pub reasoning: Option<ReasoningConfig>,
    /// A native continuation item placed before `messages` (OpenAI
    /// Responses only; other dialects ignore it).
    pub native: Option<NativeCompaction>,
}

impl ChatRequest {
    /// Builds a request with no tools, no breakpoints and no reasoning.
    pub fn new(
        model: impl Into<String>,
        system: impl Into<String>,
        messages: Vec<Message>,
        max_tokens: u64,
    ) -> Self {
        ChatRequest {
            model: model.into(),
            system: system.into(),
            tools: Vec::new(),
            messages,
            max_tokens,
            cache_breakpoints: Vec::new(),
            reasoning: None,
            native: None,
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// A natural end of the turn.
    EndTurn,
    /// The model called tools and waits for their results.
    ToolUse,
    /// `max_tokens` was reached.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider refused or filtered the content.
    Refusal,
    /// Any other reason, as the provider named it.
    Other(String),
}

impl StopReason {
    /// Returns the reason's wire-neutral name.
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::Refusal => "refusal",
            StopReason::Other(name) => name,
        }
    }
}

/// One incremental event of a streamed response, in arrival order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// Visible text.
    TextDelta(String),
    /// Reasoning text (or its summary).
    ThinkingDelta(String),
    /// A tool call began; `index` counts this response's tool calls from 0.
    ToolCallStart {
        /// The call's position among this response's tool calls.
        index: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
    /// A piece of a tool call's JSON arguments.
    ToolCallDelta {
        /// The call's position among this response's tool calls.
        index: usize,
        /// The next fragment of the arguments' JSON text.
        arguments: String,
    },
    /// A tool call is complete.
    ToolCallEnd {
        /// The call's position among this response's tool calls.
        index: usize,
        /// The assembled call.
        call: ToolUse,
    },
    /// The usage reported so far (a running total: replace, do not add).
    Usage(soba_core::Usage),
    /// An attempt failed before any content and the request is sent again
    /// after `delay` (SPEC §10.1); nothing of the failed attempt was
    /// emitted.
    Retrying {
        /// The attempt that comes next (2 is the first retry).
        attempt: u32,
        /// The most attempts the policy makes.
        max_attempts: u32,
        /// The wait before it.
        delay: std::time::Duration,
        /// Why the last attempt failed, one line (e.g. `connection refused`).
        reason: String,
    },
    /// The response is complete.
    Done {
        /// Why the model stopped.
        stop_reason: StopReason,
    },
}

impl StreamEvent {
    /// Returns whether this event carries content (text, reasoning or a
    /// tool call); a stream is retried only before its first one.
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            StreamEvent::TextDelta(_)
                | StreamEvent::ThinkingDelta(_)
                | StreamEvent::ToolCallStart { .. }
                | StreamEvent::ToolCallDelta { .. }
                | StreamEvent::ToolCallEnd { .. }
        )
    }
}

/// A complete response.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The assistant message, with `model` set and `usage` set when the
    /// provider reported it (normalised per SPEC §4.2).
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
}
