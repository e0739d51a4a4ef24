//! The LLM summarizer (SPEC §9.2): soba-core's [`Summarizer`] over any
//! [`ModelClient`], and the choice of the summarizer model from
//! `compaction.summarizer.model` and the model registry.
//!
//! [`LlmSummarizer`] sends [`SummaryRequest::prompt`] as one user message
//! (no system prompt, no tools, `max_tokens` = `summarizer.maxOutputTokens`
//! capped at the model's own maximum), streams the answer and returns its
//! text and usage. The guards judge the text later; this module never does.
//! While the answer streams, [`Summarizer::summarize_streaming`] reports the
//! visible text's tokens so far, for the barrier's progress (SPEC §9.2).
//! It holds an `Arc<dyn ModelClient>`, so it compiles without the `http`
//! feature; [`LlmSummarizer::connect`] (feature `http`) builds the client.

use std::fmt;
use std::sync::Arc;

use soba_core::Message;
use soba_core::TokenCount;
use soba_core::summarize::{
    SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse,
};
use soba_core::tokens::{BpeCounter, TokenCounter};

use crate::client::{Cancellation, ModelClient, NeverCancel};
use crate::error::ProviderError;
use crate::registry::{ModelInfo, ModelRegistry, RegistryError, canonical_name};
use crate::request::{ChatRequest, StopReason, StreamEvent};

/// The `compaction.summarizer.model` value that turns the LLM off.
pub const DETERMINISTIC: &str = "deterministic";

/// A [`Summarizer`] that asks a model through a [`ModelClient`].
#[derive(Clone)]
pub struct LlmSummarizer {
    client: Arc<dyn ModelClient>,
    model_id: String,
    wire_model: String,
    window: TokenCount,
    model_max_output: u64,
    /// The model's calibration seed × 1,000 (SPEC §4.1), which scales the
    /// local count of streamed text to the model's own tokens.
    seed_per_mille: u64,
    /// Counts the streamed text: the model's tokenizer by default.
    counter: Arc<dyn TokenCounter>,
    cancel: Arc<dyn Cancellation>,
}

impl fmt::Debug for LlmSummarizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmSummarizer")
            .field("model", &self.model_id)
            .field("api", &self.client.api())
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl LlmSummarizer {
    /// Returns a summarizer that sends to `client` the model `info`
    /// describes (its `wire_model` on the wire, its `id` on capsules).
    ///
    /// The window reported to the chunker is the model's context window
    /// divided by its calibration seed (SPEC §4.1): chunks are counted
    /// with the conversation's local tokenizer, and a model that counts
    /// 1.25 tokens per local token (Claude) would otherwise overflow on
    /// every full chunk.
    pub fn new(client: Arc<dyn ModelClient>, info: &ModelInfo) -> Self {
        let seed = if info.calibration_seed.is_finite() && info.calibration_seed >= 1.0 {
            info.calibration_seed
        } else {
            1.0
        };
        // Exact for the seeds in use (1.0, 1.1, 1.25): scaled to integers so
        // the window is the same on every platform.
        let seed_per_mille = (seed * 1_000.0).round() as u64;
        let window = info.context_window.saturating_mul(1_000) / seed_per_mille.max(1_000);
        LlmSummarizer {
            client,
            model_id: info.id.clone(),
            wire_model: info.wire_model.clone(),
            window: TokenCount::new(window),
            model_max_output: info.max_output_tokens,
            seed_per_mille: seed_per_mille.max(1_000),
            counter: Arc::new(BpeCounter::new(info.tokenizer)),
            cancel: Arc::new(NeverCancel),
        }
    }

    /// Returns the summarizer counting streamed text with `counter` instead
    /// of the model's tokenizer (tests use a byte counter for round
    /// figures).
    pub fn with_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = counter;
        self
    }

    /// Returns the summarizer with a cancellation signal its requests
    /// observe (besides being dropped, which also closes the connection).
    pub fn with_cancellation(mut self, cancel: Arc<dyn Cancellation>) -> Self {
        self.cancel = cancel;
        self
    }

    /// Returns the request sent for one summary call: the prompt as the
    /// only (user) message, no system prompt, no tools, and `max_tokens`
    /// the request's `maxOutputTokens` capped at the model's maximum.
    pub fn chat_request(&self, request: &SummaryRequest) -> ChatRequest {
        let max_tokens = u64::from(request.max_output_tokens)
            .min(self.model_max_output)
            .max(1);
        ChatRequest::new(
            self.wire_model.clone(),
            String::new(),
            vec![Message::user(request.prompt())],
            max_tokens,
        )
    }
}

#[cfg(feature = "http")]
impl LlmSummarizer {
    /// Builds the client for the summarizer model's provider (`api` and
    /// `endpoint` from that provider's config) and the summarizer on it.
    pub fn connect(
        api: crate::client::Api,
        endpoint: crate::client::Endpoint,
        config: crate::transport::HttpConfig,
        info: &ModelInfo,
    ) -> Result<Self, ProviderError> {
        let client: Arc<dyn ModelClient> =
            Arc::from(crate::transport::client_for(api, endpoint, config)?);
        Ok(LlmSummarizer::new(client, info))
    }
}

/// Maps a provider failure to the summarizer's error: an overflow (the
/// barrier halves the chunk and retries once), a cancellation (nothing is
/// appended), anything else a provider failure (the §9.3 failure policy).
pub fn summarize_error(err: ProviderError) -> SummarizeError {
    match err {
        ProviderError::ContextOverflow { .. } => SummarizeError::Overflow {
            detail: err.to_string(),
        },
        ProviderError::Cancelled => SummarizeError::Cancelled,
        other => SummarizeError::Provider {
            message: other.to_string(),
        },
    }
}

impl Summarizer for LlmSummarizer {
    fn model(&self) -> &str {
        &self.model_id
    }

    fn window_tokens(&self) -> TokenCount {
        self.window
    }

    fn summarize<'a>(&'a self, request: &'a SummaryRequest) -> SummaryFuture<'a> {
        // Nobody listens: the deltas are not counted.
        Box::pin(self.call(request, None))
    }

    /// Streams the answer, calling `streamed` after each text delta with the
    /// output tokens so far: each delta counted on its own with the model's
    /// tokenizer (a token split across two deltas counts in both, so the
    /// sum is off by at most one token per delta boundary), scaled by the
    /// model's calibration seed. Reasoning deltas are not counted: the
    /// divisor of SPEC §9.2's progress is the summary's length, a
    /// summarizer request asks for no reasoning, and where a provider
    /// streams some anyway it is a summary of it, not the billed tokens.
    fn summarize_streaming<'a>(
        &'a self,
        request: &'a SummaryRequest,
        streamed: &'a (dyn Fn(u64) + Send + Sync),
    ) -> SummaryFuture<'a> {
        Box::pin(self.call(request, Some(streamed)))
    }
}

impl LlmSummarizer {
    /// One summary call; `streamed`, when given, hears the output tokens so
    /// far after each text delta.
    async fn call(
        &self,
        request: &SummaryRequest,
        streamed: Option<&(dyn Fn(u64) + Send + Sync)>,
    ) -> Result<SummaryResponse, SummarizeError> {
        let chat = self.chat_request(request);
        let counter = self.counter.as_ref();
        let mut local = 0u64;
        let mut on_event = |event: StreamEvent| {
            if let (Some(streamed), StreamEvent::TextDelta(text)) = (streamed, event) {
                let n = counter.count_text(&text).n.get();
                if n > 0 {
                    local += n;
                    streamed(local.saturating_mul(self.seed_per_mille) / 1_000);
                }
            }
        };
        let response = self
            .client
            .stream(&chat, self.cancel.as_ref(), &mut on_event)
            .await
            .map_err(summarize_error)?;
        if response.stop_reason == StopReason::MaxTokens {
            // A cut summary lacks its last headings; the guards reject it.
            tracing::debug!(
                model = %self.model_id,
                max_tokens = chat.max_tokens,
                "summary stopped at max_tokens"
            );
        }
        Ok(SummaryResponse {
            text: response.message.text(),
            model: self.model_id.clone(),
            usage: response.message.usage,
        })
    }
}

/// Which summarizer a session uses.
#[derive(Debug, Clone, PartialEq)]
pub enum SummarizerChoice {
    /// No LLM: the deterministic builder (`quality: full` by configuration).
    Deterministic,
    /// This model.
    Model(ModelInfo),
}

/// Why the choice deserves the user's attention.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SummarizerWarning {
    /// The summarizer is the conversation model itself, which SPEC §9.2
    /// allows only with a warning: each compaction costs as much as a turn.
    ConversationModel {
        /// The model id.
        model: String,
        /// Whether `compaction.summarizer.model` named it (else it is the
        /// provider's cheap model, chosen by default).
        configured: bool,
    },
}

impl fmt::Display for SummarizerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SummarizerWarning::ConversationModel {
                model,
                configured: true,
            } => write!(
                f,
                "compaction.summarizer.model is the conversation model {model}: each compaction \
                 costs about as much as a turn; name a cheaper model or \"deterministic\""
            ),
            SummarizerWarning::ConversationModel {
                model,
                configured: false,
            } => write!(
                f,
                "the provider's cheap summarizer model {model} is also the conversation model; \
                 set compaction.summarizer.model to choose another, or \"deterministic\""
            ),
        }
    }
}

/// The summarizer a session uses, with the warnings to show.
#[derive(Debug, Clone, PartialEq)]
pub struct SummarizerSelection {
    /// The model, or the deterministic builder.
    pub choice: SummarizerChoice,
    /// Warnings to show once at start.
    pub warnings: Vec<SummarizerWarning>,
}

impl SummarizerSelection {
    /// Returns the id recorded on capsules: the model id, or
    /// `deterministic`.
    pub fn model_id(&self) -> &str {
        match &self.choice {
            SummarizerChoice::Deterministic => DETERMINISTIC,
            SummarizerChoice::Model(info) => &info.id,
        }
    }
}

fn same_model(a: &ModelInfo, b: &ModelInfo) -> bool {
    a.provider == b.provider && canonical_name(&a.wire_model) == canonical_name(&b.wire_model)
}

/// Chooses the summarizer (SPEC §9.2, §18): `configured` is
/// `compaction.summarizer.model`. `None` takes the registry's cheap model of
/// the conversation's provider, or the deterministic builder where the
/// provider names none (local endpoints); `"deterministic"` turns the LLM
/// off; any other value is resolved in the registry. Choosing the
/// conversation model, by default or by name, adds a warning.
///
/// Fails when the named model cannot be resolved (e.g. a local model with
/// no `contextWindow`): a configuration error naming the key.
pub fn select_summarizer(
    configured: Option<&str>,
    conversation: &ModelInfo,
    registry: &ModelRegistry,
) -> Result<SummarizerSelection, RegistryError> {
    let (id, is_configured) = match configured.map(str::trim) {
        Some(name) if name.eq_ignore_ascii_case(DETERMINISTIC) => {
            return Ok(SummarizerSelection {
                choice: SummarizerChoice::Deterministic,
                warnings: Vec::new(),
            });
        }
        Some(name) => (name.to_owned(), true),
        None => match &conversation.summarizer_model {
            Some(cheap) => (cheap.clone(), false),
            None => {
                return Ok(SummarizerSelection {
                    choice: SummarizerChoice::Deterministic,
                    warnings: Vec::new(),
                });
            }
        },
    };
    let info = registry.resolve(&id)?;
    let mut warnings = Vec::new();
    if same_model(&info, conversation) {
        warnings.push(SummarizerWarning::ConversationModel {
            model: info.id.clone(),
            configured: is_configured,
        });
    }
    Ok(SummarizerSelection {
        choice: SummarizerChoice::Model(info),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use soba_core::Usage;

    use soba_core::Role;

    use super::*;
    use crate::client::{Api, BoxFuture};
    use crate::registry::ModelOverride;
    use crate::request::ChatResponse;

    fn resolve(id: &str) -> ModelInfo {
        ModelRegistry::new().resolve(id).unwrap()
    }

    fn check(configured: Option<&str>, conversation: &str, expected: (&str, usize)) {
        let selection =
            select_summarizer(configured, &resolve(conversation), &ModelRegistry::new()).unwrap();
        assert_eq!(
            (selection.model_id(), selection.warnings.len()),
            expected,
            "{configured:?} with {conversation}"
        );
    }

    #[test]
    fn default_is_the_providers_cheap_model() {
        check(
            None,
            "anthropic/claude-sonnet-4-5",
            ("anthropic/claude-haiku-4-5", 0),
        );
        check(None, "openai/gpt-5", ("openai/gpt-5-mini", 0));
        check(
            None,
            "openrouter/anthropic/claude-sonnet-4.5",
            ("openrouter/anthropic/claude-haiku-4.5", 0),
        );
    }

    #[test]
    fn deterministic_by_name_or_where_the_provider_names_none() {
        check(Some("deterministic"), "openai/gpt-5", ("deterministic", 0));
        check(
            Some(" Deterministic "),
            "openai/gpt-5",
            ("deterministic", 0),
        );
        let mut registry = ModelRegistry::new();
        registry.set_override(
            "ollama/qwen3-coder",
            ModelOverride {
                context_window: Some(32_768),
                ..ModelOverride::default()
            },
        );
        let local = registry.resolve("ollama/qwen3-coder").unwrap();
        let selection = select_summarizer(None, &local, &registry).unwrap();
        assert_eq!(selection.choice, SummarizerChoice::Deterministic);
        assert!(selection.warnings.is_empty());
    }

    #[test]
    fn the_conversation_model_comes_with_a_warning() {
        check(
            None,
            "anthropic/claude-haiku-4-5",
            ("anthropic/claude-haiku-4-5", 1),
        );
        let selection = select_summarizer(
            Some("openai/gpt-5"),
            &resolve("openai/gpt-5-2025-08-07"),
            &ModelRegistry::new(),
        )
        .unwrap();
        assert_eq!(
            selection.warnings,
            [SummarizerWarning::ConversationModel {
                model: "openai/gpt-5".into(),
                configured: true,
            }]
        );
        assert!(
            selection.warnings[0]
                .to_string()
                .starts_with("compaction.summarizer.model is the conversation model openai/gpt-5:")
        );
        // Another explicit model: no warning.
        check(
            Some("anthropic/claude-haiku-4-5"),
            "openai/gpt-5",
            ("anthropic/claude-haiku-4-5", 0),
        );
    }

    #[test]
    fn an_unresolvable_model_is_a_configuration_error() {
        let err = select_summarizer(
            Some("ollama/tiny"),
            &resolve("openai/gpt-5"),
            &ModelRegistry::new(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "model ollama/tiny has no known context window: set models.\"ollama/tiny\".contextWindow in the config (and maxOutputTokens)"
        );
    }

    /// A client that answers from a closure and records the requests.
    struct Scripted {
        answer: Box<dyn Fn() -> Result<ChatResponse, ProviderError> + Send + Sync>,
        /// Streamed to `on_event` before the answer.
        events: Vec<StreamEvent>,
        seen: Mutex<Vec<ChatRequest>>,
    }

    impl ModelClient for Scripted {
        fn api(&self) -> Api {
            Api::OpenAiChat
        }

        fn stream<'a>(
            &'a self,
            request: &'a ChatRequest,
            _cancel: &'a dyn Cancellation,
            on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
            self.seen.lock().unwrap().push(request.clone());
            for event in &self.events {
                on_event(event.clone());
            }
            let answer = (self.answer)();
            Box::pin(std::future::ready(answer))
        }
    }

    fn request() -> SummaryRequest {
        SummaryRequest {
            previous_state: None,
            span_text: "[user]\nhi".into(),
            chunk_index: 0,
            chunk_count: 1,
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: 2_000,
        }
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the scripted client answers at once"),
        }
    }

    #[test]
    fn errors_map_to_the_summarizer_policy() {
        for (err, expected) in [
            (
                ProviderError::ContextOverflow {
                    status: 400,
                    stated_prompt: Some(300_000),
                    stated_limit: None,
                    body: "too long".into(),
                },
                "overflow",
            ),
            (ProviderError::Cancelled, "cancelled"),
            (
                ProviderError::Server {
                    status: 503,
                    attempts: 5,
                    body: String::new(),
                },
                "provider",
            ),
        ] {
            let name = match summarize_error(err) {
                SummarizeError::Overflow { .. } => "overflow",
                SummarizeError::Cancelled => "cancelled",
                SummarizeError::Provider { .. } => "provider",
                other => panic!("{other:?}"),
            };
            assert_eq!(name, expected);
        }
    }

    #[test]
    fn sends_the_prompt_alone_and_returns_text_and_usage() {
        let client = Arc::new(Scripted {
            answer: Box::new(|| {
                let mut message = Message::new(
                    Role::Assistant,
                    vec![soba_core::Block::Text("## Goal\nx".into())],
                );
                message.usage = Some(Usage {
                    input: 40,
                    output: 7,
                    ..Usage::default()
                });
                Ok(ChatResponse {
                    message,
                    stop_reason: StopReason::EndTurn,
                })
            }),
            events: vec![StreamEvent::TextDelta("## Goal\nx".into())],
            seen: Mutex::new(Vec::new()),
        });
        let mut overrides = BTreeMap::new();
        overrides.insert(
            "anthropic/claude-haiku-4-5".to_owned(),
            ModelOverride {
                context_window: Some(10_000),
                max_output_tokens: Some(1_500),
                ..ModelOverride::default()
            },
        );
        let info = ModelRegistry::with_overrides(overrides)
            .resolve("anthropic/claude-haiku-4-5")
            .unwrap();
        let summarizer = LlmSummarizer::new(client.clone(), &info);
        // 10,000 / 1.25 (the Claude seed).
        assert_eq!(summarizer.window_tokens(), TokenCount::new(8_000));
        assert_eq!(summarizer.model(), "anthropic/claude-haiku-4-5");
        let response = block_on(summarizer.summarize(&request())).unwrap();
        assert_eq!(response.text, "## Goal\nx");
        assert_eq!(response.model, "anthropic/claude-haiku-4-5");
        assert_eq!(response.usage.map(|u| (u.input, u.output)), Some((40, 7)));
        let seen = client.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].model, "claude-haiku-4-5");
        assert_eq!(seen[0].system, "");
        assert!(seen[0].tools.is_empty());
        // maxOutputTokens 2,000 capped at the model's 1,500.
        assert_eq!(seen[0].max_tokens, 1_500);
        assert_eq!(seen[0].messages.len(), 1);
        assert_eq!(seen[0].messages[0].role, Role::User);
        assert_eq!(seen[0].messages[0].text(), request().prompt());
    }

    fn streaming_client(events: Vec<StreamEvent>) -> Arc<Scripted> {
        Arc::new(Scripted {
            answer: Box::new(|| {
                Ok(ChatResponse {
                    message: Message::new(
                        Role::Assistant,
                        vec![soba_core::Block::Text("## Goal\nx".into())],
                    ),
                    stop_reason: StopReason::EndTurn,
                })
            }),
            events,
            seen: Mutex::new(Vec::new()),
        })
    }

    /// Runs one streaming call and returns what `streamed` received.
    fn reports(summarizer: &LlmSummarizer) -> Vec<u64> {
        let seen = Mutex::new(Vec::new());
        let streamed = |tokens: u64| seen.lock().unwrap().push(tokens);
        let response = block_on(summarizer.summarize_streaming(&request(), &streamed)).unwrap();
        assert_eq!(response.text, "## Goal\nx");
        seen.into_inner().unwrap()
    }

    #[test]
    fn streamed_text_is_reported_cumulatively_in_the_models_tokens() {
        let events = vec![
            StreamEvent::TextDelta("a".repeat(400)),
            // Reasoning is not the summary: not counted.
            StreamEvent::ThinkingDelta("t".repeat(400)),
            StreamEvent::TextDelta(String::new()),
            StreamEvent::Usage(Usage::default()),
            StreamEvent::TextDelta("b".repeat(3)),
            StreamEvent::TextDelta("c".repeat(396)),
            StreamEvent::Done {
                stop_reason: StopReason::EndTurn,
            },
        ];
        // gpt-5-mini (seed 1.0) under the byte counter: 100, 101, 200 tokens.
        let openai = LlmSummarizer::new(
            streaming_client(events.clone()),
            &resolve("openai/gpt-5-mini"),
        )
        .with_counter(Arc::new(soba_core::tokens::ByteCounter));
        assert_eq!(reports(&openai), [100, 101, 200]);
        // Claude (seed 1.25): the same local counts × 1.25, rounded down.
        let claude = LlmSummarizer::new(
            streaming_client(events),
            &resolve("anthropic/claude-haiku-4-5"),
        )
        .with_counter(Arc::new(soba_core::tokens::ByteCounter));
        assert_eq!(reports(&claude), [125, 126, 250]);
        // The plain call reports nothing and returns the same text.
        let response = block_on(claude.summarize(&request())).unwrap();
        assert_eq!(response.text, "## Goal\nx");
    }

    #[test]
    fn streamed_text_is_counted_with_the_models_tokenizer_by_default() {
        // o200k_base: "hello" and " world" are one token each.
        let client = streaming_client(vec![
            StreamEvent::TextDelta("hello".into()),
            StreamEvent::TextDelta(" world".into()),
        ]);
        let summarizer = LlmSummarizer::new(client, &resolve("openai/gpt-5-mini"));
        assert_eq!(reports(&summarizer), [1, 2]);
    }
}
