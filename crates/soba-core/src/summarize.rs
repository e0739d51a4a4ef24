//! The summarizer interface (SPEC §9.2): the request and response model, the
//! prompt built from `templates/summarize.md`, the span serialised for it
//! (tool results capped at 2,000 characters, original bodies) and split into
//! chunks that fit the summarizer's window, oldest first.
//!
//! The trait returns a boxed future and names no runtime, so this crate stays
//! free of one: the HTTP summarizer in `soba-provider` is async, the
//! `FakeSummarizer` (feature `testing`) answers at once from a script.

use std::future::Future;
use std::pin::Pin;

use crate::capsule::Capsule;
use crate::entry::{ContextSource, Entry, EntryBody, SkillAction};
use crate::facts::truncate_middle_chars;
use crate::guard::{END_MARKER, GuardRejection};
use crate::message::{Block, MessageOrigin, ResultPart, Role, Usage};
use crate::render::{self, fill};
use crate::tokens::{TokenCount, TokenCounter, group_thousands};

/// `summarizer.maxOutputTokens` (default 2,000).
pub const MAX_OUTPUT_TOKENS: u32 = 2_000;
/// The summary length the prompt asks for.
pub const REQUESTED_TOKENS: u32 = 1_200;
/// Tool results (and tool-call arguments) are capped at this many
/// characters in the summarizer's input.
pub const TOOL_RESULT_CAP_CHARS: usize = 2_000;

const SUMMARIZE_TEMPLATE: &str = include_str!("../templates/summarize.md");

/// One call to the summarizer: a chunk of the span plus the state so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryRequest {
    /// The previous capsule (or imported summary, or the output of the
    /// previous chunk), given as state to update.
    pub previous_state: Option<String>,
    /// This chunk of the serialised span.
    pub span_text: String,
    /// 0-based index of this chunk.
    pub chunk_index: usize,
    /// Number of chunks, at least 1.
    pub chunk_count: usize,
    /// The span is longer than `summarizer.maxChunks` chunks: its older
    /// part is not sent (the capsule's local sections carry it), and the
    /// first chunk does not begin the conversation.
    pub earlier_omitted: bool,
    /// The `/compact` instructions.
    pub instructions: Option<String>,
    /// `summarizer.maxOutputTokens`.
    pub max_output_tokens: u32,
}

impl SummaryRequest {
    /// Returns the prompt for this request (`templates/summarize.md`).
    pub fn prompt(&self) -> String {
        let state_rules = if self.previous_state.is_some() {
            "- A previous state is given below, before the conversation. Update it with what the conversation \
             shows: keep what still holds, change what changed, and drop nothing without a reason. Do not \
             summarize it from scratch.\n"
        } else {
            ""
        };
        let instructions_block = match self
            .instructions
            .as_deref()
            .map(str::trim)
            .filter(|i| !i.is_empty())
        {
            Some(instructions) => format!(
                "\nThe user asked for this compaction with these instructions; follow them where they do not \
                 conflict with the rules above:\n<instructions>\n{instructions}\n</instructions>\n"
            ),
            None => String::new(),
        };
        let mut chunk_note = if self.chunk_count > 1 {
            format!(
                "\nThe conversation is summarized in {} parts, oldest first. This is part {}; the state below \
                 already covers the parts before it.\n",
                self.chunk_count,
                self.chunk_index + 1
            )
        } else {
            String::new()
        };
        if self.earlier_omitted && self.chunk_index == 0 {
            chunk_note.push_str(
                "\nThe conversation below begins in the middle: its older part was too long to summarize and is not \
                 shown. Its files, commands, errors and the original task are kept separately. Summarize what is \
                 shown, and do not guess what came before it.\n",
            );
        }
        let previous_state_block = match &self.previous_state {
            Some(state) => format!("\n<previous-state>\n{}\n</previous-state>\n", state.trim()),
            None => String::new(),
        };
        fill(
            SUMMARIZE_TEMPLATE,
            &[
                ("max_tokens", &group_thousands(u64::from(REQUESTED_TOKENS))),
                ("marker", END_MARKER),
                ("state_rules", state_rules),
                ("instructions_block", &instructions_block),
                ("chunk_note", &chunk_note),
                ("previous_state_block", &previous_state_block),
                ("conversation", self.span_text.trim()),
            ],
        )
    }
}

/// What the summarizer returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryResponse {
    /// The raw output, to be judged by the guards.
    pub text: String,
    /// The model that wrote it.
    pub model: String,
    /// Provider usage, when reported.
    pub usage: Option<Usage>,
}

/// Why a summarizer call produced no text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SummarizeError {
    /// The request did not fit the summarizer's own window; halving the
    /// chunk and retrying once can help.
    #[error("summarizer context overflow: {detail}")]
    Overflow {
        /// The provider's message.
        detail: String,
    },
    /// The call took longer than `timeoutMs` for its chunks; the
    /// deterministic capsule is used instead.
    #[error("summarizer timed out after {after_ms} ms")]
    Timeout {
        /// The deadline that passed.
        after_ms: u64,
    },
    /// The turn was cancelled; nothing is appended and no retry happens.
    #[error("summarizer call cancelled")]
    Cancelled,
    /// The provider failed (HTTP, auth, rate limit after retries).
    #[error("summarizer failed: {message}")]
    Provider {
        /// What the provider said.
        message: String,
    },
    /// The output failed a guard (SPEC §9.3).
    #[error(transparent)]
    Rejected(#[from] GuardRejection),
}

/// The future a summarizer returns.
pub type SummaryFuture<'a> =
    Pin<Box<dyn Future<Output = Result<SummaryResponse, SummarizeError>> + Send + 'a>>;

/// A summarizer: the LLM one in `soba-provider`, or `FakeSummarizer` (feature `testing`).
pub trait Summarizer: Send + Sync {
    /// Returns the model id recorded on capsules it writes.
    fn model(&self) -> &str;
    /// Returns the summarizer model's context window, which sets the chunk
    /// size.
    fn window_tokens(&self) -> TokenCount;
    /// Summarizes one chunk.
    fn summarize<'a>(&'a self, request: &'a SummaryRequest) -> SummaryFuture<'a>;

    /// Summarizes one chunk, reporting its output as it streams: `streamed`
    /// receives the cumulative output tokens of this chunk so far (each
    /// call at least the previous one), from which the barrier computes
    /// progress (SPEC §9.2). It may be called any number of times, from
    /// the task polling the future, and must return quickly.
    ///
    /// The default calls [`Summarizer::summarize`] and reports nothing, so
    /// progress then moves only when a chunk finishes; a summarizer that
    /// streams overrides it (the LLM one in `soba-provider` does).
    fn summarize_streaming<'a>(
        &'a self,
        request: &'a SummaryRequest,
        streamed: &'a (dyn Fn(u64) + Send + Sync),
    ) -> SummaryFuture<'a> {
        let _ = streamed;
        self.summarize(request)
    }
}

/// Returns the state the summarizer updates: the previous capsule's eight
/// narrative sections (for an imported capsule, its foreign summary). The
/// local sections stay out: they are extracted again and attached to the
/// new capsule, and a small model given them copies them into its
/// narrative, which then grows with every capsule (Qwen2.5-Coder 0.5B
/// repeated "## Original task" and the file lists inside "Next steps").
pub fn previous_state(previous: &Capsule) -> String {
    if previous.imported.is_some() {
        return previous.markdown.trim().to_owned();
    }
    render::narrative_markdown(&previous.narrative, 2)
}

fn cap(text: &str) -> String {
    let half = TOOL_RESULT_CAP_CHARS / 2;
    truncate_middle_chars(text.trim_end(), half, half)
}

/// Serialises a span for the summarizer, one item per entry that carries
/// content: messages (thinking omitted, tool results and tool-call arguments
/// capped at 2,000 characters, original bodies), checkpoints, skill changes
/// and loaded capsule files (marked untrusted).
pub fn span_items(span: &[Entry]) -> Vec<String> {
    span_items_indexed(span)
        .into_iter()
        .map(|item| item.text)
        .collect()
}

/// One serialised item of a span and the span entry it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanItem {
    /// Index of its entry in the span.
    pub entry: usize,
    /// The serialised text.
    pub text: String,
}

/// Serialises a span as [`span_items`] does, each item with the index of
/// its entry.
pub fn span_items_indexed(span: &[Entry]) -> Vec<SpanItem> {
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut items = Vec::new();
    for (index, entry) in span.iter().enumerate() {
        let mut push = |text: String| items.push(SpanItem { entry: index, text });
        match &entry.body {
            EntryBody::Message(message_entry) => {
                let message = &message_entry.message;
                let label = match (message.role, message.origin) {
                    (Role::System, _) => "system".to_owned(),
                    (Role::User, MessageOrigin::Typed) => "user".to_owned(),
                    (Role::User, origin) => format!("user · {}", origin.as_str()),
                    (Role::Assistant, _) => "assistant".to_owned(),
                    (Role::Tool, _) => "tool".to_owned(),
                };
                let mut parts: Vec<String> = Vec::new();
                let mut text = String::new();
                for block in &message.content {
                    match block {
                        Block::Text(body) => {
                            if !text.is_empty() {
                                text.push('\n');
                            }
                            text.push_str(body);
                        }
                        Block::Thinking { .. } => {}
                        Block::Image(_) => text.push_str("[image]"),
                        Block::ToolUse(call) => {
                            names.insert(call.id.as_str(), call.name.as_str());
                            parts.push(format!(
                                "[tool call {}]\n{}",
                                call.name,
                                cap(&call.input.to_json_text())
                            ));
                        }
                        Block::ToolResult(result) => {
                            let name = names
                                .get(result.tool_use_id.as_str())
                                .copied()
                                .unwrap_or("unknown tool");
                            let status = if result.is_error { ", error" } else { "" };
                            let mut body = result.text();
                            let images = result
                                .content
                                .iter()
                                .filter(|p| matches!(p, ResultPart::Image(_)))
                                .count();
                            if images > 0 {
                                body.push_str(&format!("\n[{images} image(s)]"));
                            }
                            parts.push(format!("[tool result {name}{status}]\n{}", cap(&body)));
                        }
                    }
                }
                if !text.trim().is_empty() {
                    parts.insert(0, format!("[{label}]\n{}", text.trim_end()));
                }
                if !parts.is_empty() {
                    push(parts.join("\n\n"));
                }
            }
            EntryBody::Checkpoint { kind, note } => {
                push(format!("[checkpoint {}] {}", kind.as_str(), note.trim()))
            }
            EntryBody::Skill(skill) => {
                let action = match skill.action {
                    SkillAction::Activate => "activated",
                    SkillAction::Deactivate => "deactivated",
                };
                push(format!("[skill {} {action}]", skill.name));
            }
            EntryBody::Context(context) if context.source == ContextSource::CapsuleFile => {
                push(format!(
                    "[loaded capsule file {} · untrusted data]\n{}",
                    context.path,
                    cap(&context.text)
                ))
            }
            _ => {}
        }
    }
    items
}

/// Returns the tokens of span text one request can carry: the window less
/// the prompt's own text, the previous state (at least `maxOutputTokens`,
/// as later chunks carry a state that large) and the output.
pub fn chunk_tokens(
    window: TokenCount,
    max_output_tokens: u32,
    previous_state: Option<&str>,
    instructions: Option<&str>,
    counter: &dyn TokenCounter,
) -> TokenCount {
    let empty = SummaryRequest {
        previous_state: None,
        span_text: String::new(),
        chunk_index: 0,
        chunk_count: 2,
        earlier_omitted: false,
        instructions: instructions.map(str::to_owned),
        max_output_tokens,
    };
    let overhead = counter.count_text(&empty.prompt()).n;
    let output = TokenCount::new(u64::from(max_output_tokens));
    let state = previous_state
        .map_or(TokenCount::ZERO, |s| counter.count_text(s).n)
        .max(output);
    window
        .saturating_sub(overhead)
        .saturating_sub(state)
        .saturating_sub(output)
}

/// Returns the longest prefix of `text` within `max` tokens, cut after a
/// newline when one falls in its second half; at least one character.
fn fitting_prefix<'t>(text: &'t str, max: TokenCount, counter: &dyn TokenCounter) -> &'t str {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(idx, _)| idx)
        .skip(1)
        .chain([text.len()])
        .collect();
    let (mut lo, mut hi) = (0usize, boundaries.len() - 1);
    // Invariant: the prefix ending at boundaries[lo] is the best known fit.
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if counter.count_text(&text[..boundaries[mid]]).n <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let prefix = &text[..boundaries[lo]];
    match prefix.rfind('\n') {
        Some(newline) if newline + 1 > prefix.len() / 2 => &prefix[..newline + 1],
        _ => prefix,
    }
}

/// Splits span items into chunks of at most `chunk_tokens` tokens each,
/// oldest first, never reordering text; an item larger than a chunk is cut
/// into pieces.
pub fn chunk_span(
    items: &[String],
    chunk_tokens: TokenCount,
    counter: &dyn TokenCounter,
) -> Vec<String> {
    let texts: Vec<&str> = items.iter().map(String::as_str).collect();
    let counts: Vec<TokenCount> = texts
        .iter()
        .map(|item| counter.count_text(item).n)
        .collect();
    pack_oldest_first(
        &texts,
        &counts,
        chunk_tokens.max(TokenCount::new(1)),
        counter,
    )
}

const SEPARATOR: &str = "\n\n";

/// Packs items greedily from the oldest, `counts` being their tokens.
fn pack_oldest_first(
    items: &[&str],
    counts: &[TokenCount],
    budget: TokenCount,
    counter: &dyn TokenCounter,
) -> Vec<String> {
    let separator_tokens = counter.count_text(SEPARATOR).n;
    let mut chunks: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut current_tokens = TokenCount::ZERO;
    for (item, &n) in items.iter().zip(counts) {
        if n > budget {
            if !current.is_empty() {
                chunks.push(std::mem::take(&mut current));
                current_tokens = TokenCount::ZERO;
            }
            chunks.extend(pieces(item, budget, counter).into_iter().map(str::to_owned));
            continue;
        }
        let added = if current.is_empty() {
            n
        } else {
            n + separator_tokens
        };
        if current_tokens + added > budget && !current.is_empty() {
            chunks.push(std::mem::take(&mut current));
            current_tokens = TokenCount::ZERO;
        }
        if !current.is_empty() {
            current.push_str(SEPARATOR);
            current_tokens += separator_tokens;
        }
        current.push_str(item);
        current_tokens += n;
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Cuts an item larger than a chunk into pieces of at most `budget`
/// tokens, in order.
fn pieces<'t>(item: &'t str, budget: TokenCount, counter: &dyn TokenCounter) -> Vec<&'t str> {
    let mut out = Vec::new();
    let mut rest = item;
    while !rest.is_empty() {
        let piece = fitting_prefix(rest, budget, counter);
        out.push(piece);
        rest = &rest[piece.len()..];
    }
    out
}

/// `compaction.summarizer.maxChunks` by default: the most summarizer calls
/// one compaction makes. Eight calls at the default `timeoutMs` bound a
/// compaction to minutes, and with a 128k-token summarizer carry about
/// 900k tokens of the newest history.
pub const MAX_CHUNKS: usize = 8;

/// The chunks the summarizer reads of a span, oldest first, and where they
/// begin when the span needs more than the configured number of chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanChunks {
    /// The chunks, oldest first; at most `max_chunks`.
    pub chunks: Vec<String>,
    /// Tokens of the span text the chunks carry.
    pub tokens: TokenCount,
    /// `Some` when the older part of the span is not sent.
    pub cut: Option<SpanCut>,
}

/// Where the summarized part of a span begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanCut {
    /// Index in the span of the oldest entry the chunks reach into.
    pub first_entry: usize,
    /// Whether only the end of that entry is sent (an item larger than a
    /// chunk, cut into pieces, of which only the newest fit).
    pub partial: bool,
}

/// Splits span items into at most `max_chunks` chunks of at most
/// `chunk_tokens` tokens: all of the span when it fits, packed as
/// [`chunk_span`] packs it; else its newest part, packed from the newest
/// item back, so that the older part is never tokenized (a first
/// compaction of an imported history can be millions of tokens).
pub fn chunk_newest(
    items: &[SpanItem],
    chunk_tokens: TokenCount,
    max_chunks: usize,
    counter: &dyn TokenCounter,
) -> SpanChunks {
    let budget = chunk_tokens.max(TokenCount::new(1));
    let max_chunks = max_chunks.max(1);
    let separator_tokens = counter.count_text(SEPARATOR).n;
    // Newest first: each chunk's pieces, newest first.
    let mut packed: Vec<Vec<&str>> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut current_tokens = TokenCount::ZERO;
    let mut tokens = TokenCount::ZERO;
    let mut counts: Vec<TokenCount> = Vec::with_capacity(items.len());
    let mut cut = None;
    'items: for (position, item) in items.iter().enumerate().rev() {
        let n = counter.count_text(&item.text).n;
        counts.push(n);
        if n > budget {
            if !current.is_empty() {
                packed.push(std::mem::take(&mut current));
                current_tokens = TokenCount::ZERO;
            }
            for piece in pieces(&item.text, budget, counter).into_iter().rev() {
                if packed.len() == max_chunks {
                    cut = Some(SpanCut {
                        first_entry: item.entry,
                        partial: true,
                    });
                    break 'items;
                }
                tokens += counter.count_text(piece).n;
                packed.push(vec![piece]);
            }
            continue;
        }
        if !current.is_empty() && current_tokens + separator_tokens + n > budget {
            packed.push(std::mem::take(&mut current));
            current_tokens = TokenCount::ZERO;
        }
        if current.is_empty() && packed.len() == max_chunks {
            // This item would open one chunk too many.
            cut = items.get(position + 1).map(|newer| SpanCut {
                first_entry: newer.entry,
                partial: false,
            });
            break;
        }
        if !current.is_empty() {
            current_tokens += separator_tokens;
        }
        current.push(&item.text);
        current_tokens += n;
        tokens += n;
    }
    if !current.is_empty() {
        packed.push(current);
    }
    if cut.is_none() {
        // All of it fits: pack it oldest first, as without a cap, unless
        // that packing needs one chunk more than the cap.
        counts.reverse();
        let texts: Vec<&str> = items.iter().map(|item| item.text.as_str()).collect();
        let chunks = pack_oldest_first(&texts, &counts, budget, counter);
        if chunks.len() <= max_chunks {
            return SpanChunks {
                chunks,
                tokens,
                cut: None,
            };
        }
    }
    let chunks = packed
        .into_iter()
        .rev()
        .map(|mut pieces| {
            pieces.reverse();
            pieces.join(SEPARATOR)
        })
        .collect();
    SpanChunks {
        chunks,
        tokens,
        cut,
    }
}

#[cfg(any(test, feature = "testing"))]
pub use fake::{FakeReply, FakeSummarizer};

#[cfg(any(test, feature = "testing"))]
mod fake {
    use std::collections::VecDeque;
    use std::sync::{Mutex, PoisonError};

    use super::{SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse};
    use crate::tokens::TokenCount;

    /// One scripted answer of the [`FakeSummarizer`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum FakeReply {
        /// Returns this text.
        Text(String),
        /// Fails with this error.
        Fail(SummarizeError),
        /// Never answers (for timeout and cancellation tests).
        Stall,
    }

    /// A summarizer that answers from a script, in order, and records every
    /// request.
    #[derive(Debug)]
    pub struct FakeSummarizer {
        model: String,
        window: TokenCount,
        replies: Mutex<VecDeque<FakeReply>>,
        requests: Mutex<Vec<SummaryRequest>>,
    }

    impl FakeSummarizer {
        /// Returns a fake with the given replies, model `fake-summarizer` and
        /// a 200,000-token window.
        pub fn new(replies: impl IntoIterator<Item = FakeReply>) -> Self {
            FakeSummarizer {
                model: "fake-summarizer".to_owned(),
                window: TokenCount::new(200_000),
                replies: Mutex::new(replies.into_iter().collect()),
                requests: Mutex::new(Vec::new()),
            }
        }

        /// Returns a fake that answers with these texts, in order.
        pub fn with_texts(texts: impl IntoIterator<Item = impl Into<String>>) -> Self {
            Self::new(texts.into_iter().map(|text| FakeReply::Text(text.into())))
        }

        /// Sets the window reported to the chunker.
        pub fn with_window(mut self, window: TokenCount) -> Self {
            self.window = window;
            self
        }

        /// Returns the requests received so far.
        pub fn requests(&self) -> Vec<SummaryRequest> {
            self.requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
    }

    impl Summarizer for FakeSummarizer {
        fn model(&self) -> &str {
            &self.model
        }

        fn window_tokens(&self) -> TokenCount {
            self.window
        }

        fn summarize<'a>(&'a self, request: &'a SummaryRequest) -> SummaryFuture<'a> {
            self.requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request.clone());
            let reply = self
                .replies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front();
            let model = self.model.clone();
            match reply {
                Some(FakeReply::Text(text)) => Box::pin(std::future::ready(Ok(SummaryResponse {
                    text,
                    model,
                    usage: None,
                }))),
                Some(FakeReply::Fail(error)) => Box::pin(std::future::ready(Err(error))),
                Some(FakeReply::Stall) => Box::pin(std::future::pending()),
                None => Box::pin(std::future::ready(Err(SummarizeError::Provider {
                    message:
                        "the fake summarizer has no scripted reply left: add one to its script"
                            .to_owned(),
                }))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::tokens::ByteCounter;

    fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
        let mut cx = Context::from_waker(Waker::noop());
        future.poll(&mut cx)
    }

    #[test]
    fn prompt_names_headings_marker_and_state() {
        let request = SummaryRequest {
            previous_state: Some("## Goal\nold goal".into()),
            span_text: "[user]\nhi".into(),
            chunk_index: 1,
            chunk_count: 3,
            earlier_omitted: false,
            instructions: Some("focus on the parser".into()),
            max_output_tokens: MAX_OUTPUT_TOKENS,
        };
        let prompt = request.prompt();
        for heading in crate::capsule::NARRATIVE_HEADINGS {
            assert!(prompt.contains(&format!("## {heading}\n")), "{heading}");
        }
        assert!(prompt.contains("At most 1,200 tokens"));
        assert!(prompt.contains("END-OF-SUMMARY"));
        assert!(prompt.contains("<previous-state>\n## Goal\nold goal\n</previous-state>"));
        assert!(prompt.contains("This is part 2;"));
        assert!(prompt.contains("focus on the parser"));
        assert!(!prompt.contains("{{"));
        // The last words a small model reads are the task, not the
        // conversation it would otherwise continue (Qwen2.5-Coder 0.5B
        // answered a prompt that ended on the conversation with tool calls).
        let after = prompt.rsplit("</conversation>").next().unwrap();
        assert!(
            after.contains(
                "starting with the line `## Goal` and ending with the line END-OF-SUMMARY"
            ),
            "{after}"
        );
    }

    #[test]
    fn the_previous_state_is_the_narrative_without_the_local_sections() {
        use crate::capsule::{Capsule, CapsuleState, LocalSections, Narrative, Quality, Trigger};
        let capsule = Capsule {
            trigger: Trigger::HardLimit,
            quality: Quality::Full,
            first_kept_entry_id: None,
            boundary_truncation: None,
            tokens_before: TokenCount::new(9_000),
            tokens_after: TokenCount::new(3_000),
            summarizer: "deterministic".into(),
            previous_capsule_id: None,
            state: CapsuleState::default(),
            instructions: None,
            native: None,
            overflow: None,
            imported: None,
            scope: None,
            narrative: Narrative {
                goal: "fix it".into(),
                ..Narrative::default()
            },
            earlier_narrative: None,
            rehydrated: Default::default(),
            local: LocalSections {
                original_task: "fix it".into(),
                files_read: vec!["a.rs".into()],
                ..LocalSections::default()
            },
            markdown: "## Goal\nfix it\n\n## Original task\nfix it\n\n### Files read\n- a.rs"
                .into(),
        };
        let state = previous_state(&capsule);
        assert!(state.starts_with("## Goal\nfix it\n"), "{state}");
        for heading in crate::capsule::NARRATIVE_HEADINGS {
            assert!(
                state.contains(&format!("## {heading}\n")),
                "{heading}: {state}"
            );
        }
        assert!(!state.contains("Original task"), "{state}");
        assert!(!state.contains("a.rs"), "{state}");
    }

    #[test]
    fn chunks_keep_order_and_fit() {
        let items: Vec<String> = (0..40).map(|i| format!("item {i} ").repeat(20)).collect();
        let chunks = chunk_span(&items, TokenCount::new(100), &ByteCounter);
        assert!(chunks.len() > 1);
        assert!(
            chunks
                .iter()
                .all(|c| ByteCounter.count_text(c).n.get() <= 100)
        );
        assert_eq!(chunks.join("\n\n"), items.join("\n\n"));
    }

    #[test]
    fn oversized_items_are_cut() {
        let items = vec!["x".repeat(1_000)];
        let chunks = chunk_span(&items, TokenCount::new(50), &ByteCounter);
        assert_eq!(chunks.len(), 5);
        assert_eq!(chunks.concat(), items[0]);
    }

    fn indexed(items: &[String]) -> Vec<SpanItem> {
        items
            .iter()
            .enumerate()
            .map(|(entry, text)| SpanItem {
                entry,
                text: text.clone(),
            })
            .collect()
    }

    /// Counts by size and records every text it was asked to count.
    #[derive(Default)]
    struct Recording(std::sync::Mutex<Vec<String>>);

    impl TokenCounter for Recording {
        fn encoding(&self) -> crate::tokens::Encoding {
            crate::tokens::Encoding::O200kBase
        }

        fn count_text(&self, text: &str) -> crate::tokens::Counted {
            self.0.lock().unwrap().push(text.to_owned());
            ByteCounter.count_text(text)
        }
    }

    #[test]
    fn a_span_within_the_cap_is_chunked_as_without_one() {
        let items: Vec<String> = (0..40).map(|i| format!("item {i} ").repeat(20)).collect();
        let whole = chunk_span(&items, TokenCount::new(100), &ByteCounter);
        let capped = chunk_newest(
            &indexed(&items),
            TokenCount::new(100),
            whole.len(),
            &ByteCounter,
        );
        assert_eq!(capped.chunks, whole);
        assert_eq!(capped.cut, None);
        let item_tokens: TokenCount = items.iter().map(|i| ByteCounter.count_text(i).n).sum();
        assert_eq!(capped.tokens, item_tokens);
    }

    #[test]
    fn a_span_over_the_cap_sends_its_newest_part_and_never_counts_the_rest() {
        // 40 items of 40 tokens, chunks of 100: two items a chunk, 20 in all.
        let items: Vec<String> = (0..40).map(|i| format!("{i:>4}").repeat(40)).collect();
        assert_eq!(ByteCounter.count_text(&items[0]).n, TokenCount::new(40));
        let counter = Recording::default();
        let capped = chunk_newest(&indexed(&items), TokenCount::new(100), 3, &counter);
        assert_eq!(capped.chunks.len(), 3);
        assert_eq!(
            capped.cut,
            Some(SpanCut {
                first_entry: 34,
                partial: false
            })
        );
        // The chunks are the newest six items, in order.
        assert_eq!(capped.chunks.join("\n\n"), items[34..].join("\n\n"));
        assert_eq!(capped.tokens, TokenCount::new(6 * 40));
        assert!(
            capped
                .chunks
                .iter()
                .all(|c| ByteCounter.count_text(c).n.get() <= 100)
        );
        // Only the item that did not fit was counted beyond the six.
        let counted = counter.0.lock().unwrap();
        for older in &items[..33] {
            assert!(
                !counted.contains(older),
                "an item before the cut was counted"
            );
        }
    }

    #[test]
    fn an_item_larger_than_the_cap_sends_only_its_end() {
        let items = vec!["a".repeat(400), "b".repeat(1_000)];
        let capped = chunk_newest(&indexed(&items), TokenCount::new(50), 3, &ByteCounter);
        assert_eq!(
            capped.cut,
            Some(SpanCut {
                first_entry: 1,
                partial: true
            })
        );
        assert_eq!(capped.chunks.len(), 3);
        let sent = capped.chunks.concat();
        assert!(items[1].ends_with(&sent), "the newest pieces, in order");
        assert_eq!(sent.len(), 600);
    }

    #[test]
    fn fake_answers_in_order_then_fails() {
        let fake = FakeSummarizer::new([FakeReply::Text("one".into()), FakeReply::Stall]);
        let request = SummaryRequest {
            previous_state: None,
            span_text: "x".into(),
            chunk_index: 0,
            chunk_count: 1,
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: 10,
        };
        let mut first = fake.summarize(&request);
        match poll_once(first.as_mut()) {
            Poll::Ready(Ok(response)) => assert_eq!(response.text, "one"),
            other => panic!("{other:?}"),
        }
        let mut second = fake.summarize(&request);
        assert!(poll_once(second.as_mut()).is_pending());
        let mut third = fake.summarize(&request);
        assert!(matches!(
            poll_once(third.as_mut()),
            Poll::Ready(Err(SummarizeError::Provider { .. }))
        ));
        assert_eq!(fake.requests().len(), 3);
    }

    #[test]
    fn the_default_streaming_call_summarizes_and_reports_nothing() {
        let fake = FakeSummarizer::with_texts(["one"]);
        let request = SummaryRequest {
            previous_state: None,
            span_text: "x".into(),
            chunk_index: 0,
            chunk_count: 1,
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: 10,
        };
        let reports = std::sync::Mutex::new(Vec::new());
        let streamed = |tokens: u64| reports.lock().unwrap().push(tokens);
        let mut future = fake.summarize_streaming(&request, &streamed);
        match poll_once(future.as_mut()) {
            Poll::Ready(Ok(response)) => assert_eq!(response.text, "one"),
            other => panic!("{other:?}"),
        }
        drop(future);
        assert!(reports.lock().unwrap().is_empty());
        assert_eq!(fake.requests(), [request]);
    }
}
