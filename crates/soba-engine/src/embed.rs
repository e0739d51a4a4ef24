//! The embedding API: SOBA's compaction engine behind a small surface that
//! another agent drives from its own loop, with its own model client, tools
//! and UI.
//!
//! An [`Engine`] owns one session log. The host appends what happens in its
//! loop (user messages, assistant messages with their usage, tool results),
//! and before every inference calls [`Engine::prepare`]: the preflight
//! barrier of SPEC §7 (hygiene, at most one trigger, a capsule appended only
//! if the turn was not cancelled and the leaf did not move) followed by the
//! rebuild of the model input. The returned [`Prepared::request`] is what to
//! send; it is never over hardLimit. The host calls its model itself, or
//! hands a [`ModelClient`] to [`Engine::step`].
//!
//! Nothing here needs SOBA's tools, TUI or HTTP clients: the module builds
//! with `--no-default-features`.
//!
//! ```
//! use soba_core::calibration::Factor;
//! use soba_core::{Encoding, Message, TokenCount, Usage};
//! use soba_engine::embed::{Engine, EngineConfig};
//! use soba_engine::session::ModelSpec;
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let model = ModelSpec {
//!     id: "local/my-model".into(),
//!     context_window: TokenCount::new(65_000),
//!     max_output_tokens: TokenCount::new(8_000),
//!     encoding: Encoding::O200kBase,
//!     seed: Factor::new(1.1),
//! };
//! let config = EngineConfig::new(model, "You are a helpful coding agent.")
//!     .with_provider_model("my-model")
//!     .with_workspace_root("/home/me/project");
//! let engine = Engine::create(&dir.path().join("session.jsonl"), config)?;
//!
//! engine.append_user("List the failing tests.").await?;
//! let cancel = CancellationToken::new();
//! let prepared = engine.prepare(&cancel).await?;
//! assert!(prepared.effective <= engine.budget().hard_limit());
//! assert_eq!(prepared.request.messages.len(), 1);
//!
//! // The host sends `prepared.request` with its own client, then reports
//! // the answer with the provider's usage.
//! let mut answer = Message::assistant("Two tests fail: parser_empty and cli_json.");
//! answer.usage = Some(Usage { input: 60, output: 14, ..Usage::default() });
//! engine.append_assistant(answer).await?;
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use soba_core::budget::Budget;
use soba_core::calibration::{Measurement, MeasurementSource};
use soba_core::config::CompactionConfig;
use soba_core::summarize::Summarizer;
use soba_core::{CheckpointKind, EntryBody, EntryId, Message, Role, TokenCount, TokenCounter};
use soba_provider::client::{BoxFuture, Cancellation, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::request::{ChatRequest, StreamEvent, ToolSchema};
use soba_store::log::{Durability, Minter, SessionHeader, SessionId, SystemMinter, WriterOptions};
use tokio::sync::{Mutex, broadcast};
use tokio_util::sync::CancellationToken;

use crate::barrier::{BarrierContext, EventSink, Forced, Preflight};
use crate::error::EngineError;
use crate::event::{CompactionEnd, EngineEvent, Outcome};
use crate::session::{ModelSpec, SessionConfig, SessionCore};

/// How many events a [`Engine::subscribe`] receiver may fall behind before
/// it starts losing the oldest ones.
pub const EVENT_CAPACITY: usize = 256;

/// Why an embedding call failed or why the turn must end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The session log, budget or configuration failed; see the source.
    /// Retrying helps only once the cause is fixed.
    #[error("engine")]
    Engine(#[from] EngineError),
    /// The cancel token fired before or during the barrier. Nothing was
    /// appended; end the turn (the user message stays unanswered).
    #[error("the turn was cancelled; nothing was appended")]
    Cancelled {
        /// The barrier's end event, when a compaction was running.
        compaction: Option<Box<CompactionEnd>>,
    },
    /// The leaf moved while the barrier generated a capsule (a rewind from
    /// another task). Nothing was appended; end the turn.
    #[error("the session leaf moved during the barrier; nothing was appended")]
    Stale {
        /// The barrier's end event.
        compaction: Box<CompactionEnd>,
    },
    /// A forced compaction (`hard_limit`, `context_overflow`) or a `/compact`
    /// could not produce a capsule that fits; end the turn with the reason.
    #[error("compaction failed: {reason}")]
    CompactionFailed {
        /// Why, e.g. `newest unit 171,204 tokens > hardLimit 159,808`.
        reason: String,
        /// The barrier's end event.
        compaction: Box<CompactionEnd>,
    },
    /// The request would exceed hardLimit even after the barrier; it must
    /// not be sent (SPEC §7.2). End the turn.
    #[error(
        "the request would be {effective} tokens > hardLimit {hard_limit}; not sent: end the turn or rewind"
    )]
    OverHardLimit {
        /// The measured effective tokens.
        effective: TokenCount,
        /// The limit.
        hard_limit: TokenCount,
    },
    /// A second context overflow in the same turn (SPEC §6.3): the turn
    /// fails and the same request must not be sent again.
    #[error(
        "context overflow again after a recovery compaction in this turn: end the turn; the request is not retried"
    )]
    OverflowAgain {
        /// The prompt size the second error stated, when it stated one.
        stated_prompt: Option<u64>,
    },
    /// [`Engine::report_overflow`] was called before any [`Engine::prepare`]:
    /// there is no request to attribute the overflow to.
    #[error("no request was prepared yet: call prepare before report_overflow")]
    NothingPrepared,
    /// The model client failed with something other than an overflow (in
    /// [`Engine::step`]); whether a retry helps depends on the error.
    #[error("model client")]
    Provider(#[source] Box<ProviderError>),
}

type Callback = Arc<dyn Fn(&EngineEvent) + Send + Sync>;

/// Everything an [`Engine`] needs besides its log path: the model, the
/// compaction settings, the system prompt and tools the host sends, and
/// optional parts (summarizer, counter, clock, event callback).
///
/// Only the model and the system prompt are required; every `with_*`
/// method has a default that the method documents.
pub struct EngineConfig {
    model: ModelSpec,
    system_prompt: String,
    provider_model: Option<String>,
    tools: Vec<ToolSchema>,
    compaction: CompactionConfig,
    counter: Option<Arc<dyn TokenCounter>>,
    summarizer: Option<Arc<dyn Summarizer>>,
    workspace_root: Option<String>,
    durability: Durability,
    minter: Option<Box<dyn Minter>>,
    callbacks: Vec<Callback>,
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("model", &self.model)
            .field("provider_model", &self.provider_model)
            .field("tools", &self.tools.len())
            .field("summarizer", &self.summarizer.as_ref().map(|s| s.model()))
            .finish_non_exhaustive()
    }
}

impl EngineConfig {
    /// Returns a configuration for `model` with this system prompt, the
    /// default `compaction.*` settings (SPEC §14.3), no tools, the
    /// deterministic capsule builder and the model's BPE counter.
    pub fn new(model: ModelSpec, system_prompt: impl Into<String>) -> Self {
        EngineConfig {
            model,
            system_prompt: system_prompt.into(),
            provider_model: None,
            tools: Vec::new(),
            compaction: CompactionConfig::default(),
            counter: None,
            summarizer: None,
            workspace_root: None,
            durability: Durability::Fsync,
            minter: None,
            callbacks: Vec::new(),
        }
    }

    /// Sets the model name put in requests (default: the part of the model
    /// id after `provider/`).
    pub fn with_provider_model(mut self, name: impl Into<String>) -> Self {
        self.provider_model = Some(name.into());
        self
    }

    /// Sets the tools the host offers the model. They are sent with every
    /// request and counted once per request (SPEC §4.1); SOBA never runs
    /// them.
    pub fn with_tools(mut self, tools: Vec<ToolSchema>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the `compaction.*` settings (default: SPEC §14.3's).
    pub fn with_compaction(mut self, compaction: CompactionConfig) -> Self {
        self.compaction = compaction;
        self
    }

    /// Sets the token counter (default: the BPE of the model's encoding).
    pub fn with_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// Sets the LLM summarizer capsules are written with (default: none,
    /// the deterministic builder of SPEC §9.4). Its output faces the guards
    /// of SPEC §9.3; a failure falls back as §9.3 says.
    pub fn with_summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// Sets the workspace root recorded in a new session's header, which
    /// capsules use to write workspace-relative paths (default: the
    /// process's current directory). Ignored by [`Engine::open`].
    pub fn with_workspace_root(mut self, root: impl Into<String>) -> Self {
        self.workspace_root = Some(root.into());
        self
    }

    /// Sets `session.durability` (default: `fsync` after every append).
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets where entry ids and timestamps come from (default: the system
    /// clock and random uuid v7s). Tests pass a
    /// [`SequentialMinter`](soba_store::log::SequentialMinter).
    pub fn with_minter(mut self, minter: Box<dyn Minter>) -> Self {
        self.minter = Some(minter);
        self
    }

    /// Adds a callback that receives every [`EngineEvent`] (compaction
    /// start, progress and end, hygiene), synchronously, in order, from the
    /// task that runs the barrier. Keep it short; for async consumers use
    /// [`Engine::subscribe`].
    pub fn on_event(mut self, callback: impl Fn(&EngineEvent) + Send + Sync + 'static) -> Self {
        self.callbacks.push(Arc::new(callback));
        self
    }
}

impl From<&soba_provider::registry::ModelInfo> for ModelSpec {
    /// Returns the spec of a model the registry resolved
    /// (`ModelRegistry::new().resolve("anthropic/claude-sonnet-4-5")`):
    /// window, `maxOutputTokens`, tokenizer and calibration seed.
    fn from(info: &soba_provider::registry::ModelInfo) -> Self {
        ModelSpec {
            id: info.id.clone(),
            context_window: TokenCount::new(info.context_window),
            max_output_tokens: TokenCount::new(info.max_output_tokens),
            encoding: info.tokenizer,
            seed: soba_core::calibration::Factor::new(info.calibration_seed),
        }
    }
}

/// What [`Engine::prepare`] returns: the request to send now and what the
/// barrier did to make it fit.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Prepared {
    /// The request, rebuilt from the log: system prompt, tools, the latest
    /// capsule, its retained tail and every later message, after hygiene
    /// stubs, the orphan sweep and tool-output caps (SPEC §5).
    pub request: ChatRequest,
    /// The effective tokens of the request (SPEC §4.2), calibrated; never
    /// above hardLimit.
    pub effective: TokenCount,
    /// How `effective` was measured.
    pub source: MeasurementSource,
    /// The compaction this preflight ran, if any: `completed` (a capsule
    /// was appended), `skipped`, or a soft `failed` (the full history is
    /// sent).
    pub compaction: Option<CompactionEnd>,
}

/// What one [`Engine::step`] appended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Step {
    /// The assistant message's entry.
    pub entry_id: EntryId,
    /// The assistant message as appended (with usage, model and
    /// `requestTokensLocal`).
    pub message: Message,
    /// The compactions run before the request that answered, in order
    /// (two when a context overflow was recovered).
    pub compactions: Vec<CompactionEnd>,
}

/// A [`Cancellation`] over a `tokio_util` [`CancellationToken`], for hosts
/// that call a [`ModelClient`] themselves without soba-provider's `http`
/// feature (which implements [`Cancellation`] for the token directly).
#[derive(Debug, Clone, Copy)]
pub struct TokenCancellation<'a>(pub &'a CancellationToken);

impl Cancellation for TokenCancellation<'_> {
    fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    fn cancelled(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.cancelled())
    }
}

/// State of the host's loop the log does not hold.
#[derive(Debug, Default)]
struct LoopState {
    /// The overflow recovery the next `prepare` runs.
    pending: Option<Forced>,
    /// The turn (its starting user message) whose one recovery was used.
    recovered_turn: Option<Option<EntryId>>,
    /// The local count of the last prepared request.
    last_local: Option<u64>,
    /// Whether silent truncation was already reported (SPEC §10.4: once).
    truncation_warned: bool,
    /// The tool calls of the last assistant message as (id the model
    /// gave, id as appended, answered), so that results the host reports
    /// under a duplicate id reach the renamed calls in order.
    calls: Vec<(String, String, bool)>,
}

/// One embedded session: its log, the preflight barrier, and the events it
/// emits. Methods take `&self`, so an `Arc<Engine>` can be shared between
/// the host's loop and a UI task.
pub struct Engine {
    core: Arc<Mutex<SessionCore>>,
    barrier: BarrierContext,
    tools: Vec<ToolSchema>,
    provider_model: String,
    model_id: String,
    context_window: TokenCount,
    budget: Budget,
    session_id: SessionId,
    log_path: PathBuf,
    diagnostics: Vec<String>,
    events: broadcast::Sender<EngineEvent>,
    state: StdMutex<LoopState>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("log_path", &self.log_path)
            .field("model", &self.model_id)
            .finish_non_exhaustive()
    }
}

fn schema_values(tools: &[ToolSchema]) -> Vec<serde_json::Value> {
    // The same JSON shape the agent counts its own tools with.
    tools
        .iter()
        .map(|tool| {
            serde_json::json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
            })
        })
        .collect()
}

impl Engine {
    /// Creates a new session log at `path` (its folder is created; the
    /// file must not exist) and opens it for writing. Flight records go to
    /// `<session-id>.flight.jsonl` beside it.
    pub fn create(path: &Path, config: EngineConfig) -> Result<Engine, EmbedError> {
        let mut config = config;
        let mut minter = config
            .minter
            .take()
            .unwrap_or_else(|| Box::new(SystemMinter));
        let root = config.workspace_root.clone().unwrap_or_else(|| {
            std::env::current_dir()
                .map(|dir| dir.display().to_string())
                .unwrap_or_else(|_| ".".to_owned())
        });
        let header = SessionHeader::new(minter.as_mut(), root);
        let options = WriterOptions {
            durability: config.durability,
            minter,
        };
        let core = SessionCore::create(path, header, Self::session_config(&config), options)?;
        Ok(Self::assemble(core, config, Vec::new()))
    }

    /// Opens an existing session log for writing (resume). Damaged lines
    /// are skipped and listed by [`Engine::diagnostics`]; a second writer
    /// on the same log gets an error naming it.
    pub fn open(path: &Path, config: EngineConfig) -> Result<Engine, EmbedError> {
        let mut config = config;
        let minter = config
            .minter
            .take()
            .unwrap_or_else(|| Box::new(SystemMinter));
        let options = WriterOptions {
            durability: config.durability,
            minter,
        };
        let (core, diagnostics) = SessionCore::open(path, Self::session_config(&config), options)?;
        Ok(Self::assemble(core, config, diagnostics))
    }

    fn session_config(config: &EngineConfig) -> SessionConfig {
        SessionConfig {
            model: config.model.clone(),
            compaction: config.compaction.clone(),
            system_prompt: config.system_prompt.clone(),
            tool_schemas: schema_values(&config.tools),
            counter: config.counter.clone(),
        }
    }

    fn assemble(core: SessionCore, config: EngineConfig, diagnostics: Vec<String>) -> Engine {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let sender = events.clone();
        let callbacks = config.callbacks;
        let sink: EventSink = Arc::new(move |event: EngineEvent| {
            for callback in &callbacks {
                callback(&event);
            }
            // No receiver is not an error: subscribing is optional.
            let _ = sender.send(event);
        });
        let budget = *core.budget();
        let session_id = core.header().id.clone();
        let log_path = core.log_path().to_path_buf();
        let core = Arc::new(Mutex::new(core));
        let barrier = BarrierContext {
            core: core.clone(),
            events: sink,
            summarizer: config.summarizer,
            operation_ids: Arc::new(|| format!("op_{}", uuid::Uuid::now_v7().simple())),
            clock: Arc::new(|| jiff::Timestamp::now().to_string()),
        };
        let provider_model = config.provider_model.unwrap_or_else(|| {
            config
                .model
                .id
                .split_once('/')
                .map_or(config.model.id.as_str(), |(_, name)| name)
                .to_owned()
        });
        Engine {
            core,
            barrier,
            tools: config.tools,
            provider_model,
            model_id: config.model.id,
            context_window: config.model.context_window,
            budget,
            session_id,
            log_path,
            diagnostics,
            events,
            state: StdMutex::new(LoopState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LoopState> {
        // The state holds plain values; a panic elsewhere cannot leave it
        // half-updated in a way that matters, so poisoning is ignored.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns the session's id.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// Returns the log file's path.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Returns the limits of SPEC §4.3 for the configured model.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Returns the diagnostics of damaged lines skipped by [`Engine::open`]
    /// (empty for a created session).
    pub fn diagnostics(&self) -> &[String] {
        &self.diagnostics
    }

    /// Returns a receiver of every event from now on. Events are also
    /// delivered to [`EngineConfig::on_event`] callbacks; a receiver that
    /// falls more than [`EVENT_CAPACITY`] events behind loses the oldest.
    ///
    /// ```
    /// # use soba_core::calibration::Factor;
    /// # use soba_core::{Encoding, Message, TokenCount};
    /// # use soba_engine::embed::{Engine, EngineConfig};
    /// # use soba_engine::event::{EngineEvent, Outcome};
    /// # use soba_engine::session::ModelSpec;
    /// # use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let model = ModelSpec {
    /// #     id: "local/model".into(),
    /// #     context_window: TokenCount::new(65_000),
    /// #     max_output_tokens: TokenCount::new(8_000),
    /// #     encoding: Encoding::O200kBase,
    /// #     seed: Factor::new(1.1),
    /// # };
    /// # let engine = Engine::create(&dir.path().join("s.jsonl"), EngineConfig::new(model, "system"))?;
    /// let mut events = engine.subscribe();
    /// for part in 0..12 {
    ///     engine.append_user(format!("part {part}: {}", "lorem ipsum ".repeat(1_500))).await?;
    ///     engine.append_assistant(Message::assistant("noted")).await?;
    /// }
    /// let end = engine.compact(None, &CancellationToken::new()).await?;
    /// assert_eq!(end.outcome, Outcome::Completed);
    /// let mut seen = Vec::new();
    /// while let Ok(event) = events.try_recv() {
    ///     seen.push(event.to_json()["type"].as_str().unwrap_or("").to_owned());
    /// }
    /// assert_eq!(seen, ["compaction_start", "compaction_end"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self) -> broadcast::Receiver<EngineEvent> {
        self.events.subscribe()
    }

    /// Returns the session itself, for what this API does not cover
    /// (entries, the path, the live input). Appending through it bypasses
    /// the bookkeeping of [`Engine::append_assistant`].
    pub fn core(&self) -> &Arc<Mutex<SessionCore>> {
        &self.core
    }

    /// Appends a real user message: a new user turn starts (SPEC §1), which
    /// clears the soft cap and the overflow retry of the previous turn.
    pub async fn append_user(&self, text: impl Into<String>) -> Result<EntryId, EmbedError> {
        self.append_message(Message::user(text)).await
    }

    /// Appends any message as given (a `system` message, injected context,
    /// a tool result built by hand). Use [`Engine::append_assistant`] for
    /// the model's answers.
    pub async fn append_message(&self, message: Message) -> Result<EntryId, EmbedError> {
        let entry = self.core.lock().await.append_message(message)?;
        Ok(entry.id)
    }

    /// Appends the model's answer to the last prepared request. Set its
    /// `usage` to the provider's normalised usage (SPEC §4.2) when known:
    /// it feeds calibration and the `provider_usage` measurement. Its
    /// `model` defaults to the configured model id and its
    /// `requestTokensLocal` to the local count of the last prepared
    /// request. A reported prompt above the context window (silent
    /// overflow) or below 0.8 × the estimate (silent truncation, reported
    /// once) emits an [`EngineEvent::Warning`].
    ///
    /// A tool-call id given twice, or already used on the path, is made
    /// unique first (`<id>_2`, with a warning; see
    /// [`crate::agent::unique_call_ids`]): results reported with
    /// [`Engine::append_tool_result`] under the id the model gave are
    /// paired with its calls in order, and [`Step::message`] shows the ids
    /// as appended.
    pub async fn append_assistant(&self, message: Message) -> Result<EntryId, EmbedError> {
        let mut message = message;
        if message.role != Role::Assistant {
            return Err(EngineError::Invalid(format!(
                "append_assistant takes an assistant message, not a {} one: use append_message",
                message.role.as_str()
            ))
            .into());
        }
        let last_local = self.state().last_local;
        if message.model.is_none() {
            message.model = Some(self.model_id.clone());
        }
        if message.request_tokens_local.is_none() {
            message.request_tokens_local = last_local;
        }
        let mut warnings = Vec::new();
        let mut core = self.core.lock().await;
        if let (Some(usage), Some(local)) = (message.usage, message.request_tokens_local) {
            let reported = usage.prompt();
            if soba_provider::is_silent_overflow(reported, self.context_window.get()) {
                warnings.push(format!(
                    "the provider reported a prompt of {reported} tokens, above the {} token window; the answer is kept and calibration corrected",
                    self.context_window
                ));
            } else if core.factor().reveals_truncation(reported, local) {
                let mut state = self.state();
                if !state.truncation_warned {
                    state.truncation_warned = true;
                    warnings.push(format!(
                        "the endpoint seems to truncate prompts to about {reported} tokens; set contextWindow (Ollama: OLLAMA_CONTEXT_LENGTH)"
                    ));
                }
            }
        }
        let given: Vec<String> = message.tool_uses().map(|call| call.id.clone()).collect();
        let renames = crate::agent::unique_call_ids(&mut message, core.path());
        for (old, new) in &renames {
            warnings.push(crate::agent::renamed_call_warning(old, new));
        }
        let entry = core.append_message(message.clone())?;
        drop(core);
        self.state().calls = given
            .into_iter()
            .zip(message.tool_uses().map(|call| call.id.clone()))
            .map(|(given, appended)| (given, appended, false))
            .collect();
        for message in warnings {
            (self.barrier.events)(EngineEvent::Warning { message });
        }
        Ok(entry.id)
    }

    /// Appends the result of one tool call (one `tool` message per result,
    /// SPEC §3.1), answering the call `tool_use_id` of the last assistant
    /// message. When [`Engine::append_assistant`] renamed calls sharing
    /// that id, each result under it answers the next of them, in order.
    pub async fn append_tool_result(
        &self,
        tool_use_id: impl Into<String>,
        output: impl Into<String>,
        is_error: bool,
    ) -> Result<EntryId, EmbedError> {
        let given = tool_use_id.into();
        let appended = {
            let mut state = self.state();
            match state
                .calls
                .iter_mut()
                .find(|(id, _, answered)| *id == given && !answered)
            {
                Some((_, appended, answered)) => {
                    *answered = true;
                    appended.clone()
                }
                None => given,
            }
        };
        self.append_message(Message::tool_result(appended, output, is_error))
            .await
    }

    /// Appends a checkpoint entry (a milestone or a plan pivot with a
    /// note). With `compaction.compactOnMilestone` it leaves an intent the
    /// next preflight may compact on (SPEC §6).
    pub async fn checkpoint(
        &self,
        kind: CheckpointKind,
        note: impl Into<String>,
    ) -> Result<EntryId, EmbedError> {
        let entry = self.core.lock().await.append(EntryBody::Checkpoint {
            kind,
            note: note.into(),
        })?;
        Ok(entry.id)
    }

    /// Moves the leaf back to `target` (a `leaf` entry; nothing is
    /// deleted). The next request is rebuilt from the new path (SPEC §3.3).
    pub async fn rewind(&self, target: EntryId) -> Result<EntryId, EmbedError> {
        let entry = self.core.lock().await.rewind(target)?;
        Ok(entry.id)
    }

    /// Returns the effective tokens of the input as it would be sent now,
    /// with its source (SPEC §4.2).
    pub async fn measure(&self) -> Measurement {
        self.core.lock().await.measure()
    }

    /// Returns the request the session would send now, without running the
    /// barrier: what a resumed session sends is this, rebuilt from the log.
    pub async fn current_request(&self) -> ChatRequest {
        let core = self.core.lock().await;
        build_request(&core, &self.provider_model, &self.tools)
    }

    /// Runs the preflight barrier, then rebuilds the model input and
    /// returns the request to send.
    ///
    /// Call it before every inference, including each step of a tool loop.
    /// After [`Engine::report_overflow`], this preflight runs the forced
    /// `context_overflow` compaction instead of choosing a trigger.
    ///
    /// Errors that end the turn: [`EmbedError::Cancelled`],
    /// [`EmbedError::Stale`], [`EmbedError::CompactionFailed`] and
    /// [`EmbedError::OverHardLimit`]. None of them appends anything.
    pub async fn prepare(&self, cancel: &CancellationToken) -> Result<Prepared, EmbedError> {
        if cancel.is_cancelled() {
            return Err(EmbedError::Cancelled { compaction: None });
        }
        let forced = self.state().pending.take();
        let compaction = match self.barrier.preflight(forced, cancel).await? {
            Preflight::Proceed => None,
            Preflight::Compacted(end) => Some(end),
            Preflight::EndTurn(end) => return Err(end_turn(end)),
        };
        if cancel.is_cancelled() {
            return Err(EmbedError::Cancelled {
                compaction: compaction.map(Box::new),
            });
        }
        let mut core = self.core.lock().await;
        let measurement = core.measure();
        let hard_limit = core.budget().hard_limit();
        if measurement.tokens > hard_limit {
            return Err(EmbedError::OverHardLimit {
                effective: measurement.tokens,
                hard_limit,
            });
        }
        let request = build_request(&core, &self.provider_model, &self.tools);
        core.last_request_at = Some((self.barrier.clock)());
        self.state().last_local = Some(core.live().total_tokens().get());
        Ok(Prepared {
            request,
            effective: measurement.tokens,
            source: measurement.source,
            compaction,
        })
    }

    /// Reports that the provider rejected the last prepared request as a
    /// context overflow (SPEC §6.3), with the prompt size the error states
    /// when it states one (`soba_provider::classify_overflow` reads it from
    /// a status and body).
    ///
    /// The one-retry rule: the first overflow of a user turn makes the next
    /// [`Engine::prepare`] run a forced `context_overflow` compaction that
    /// corrects calibration and plans for a result ≤ autoLimit; send its
    /// request once. A second overflow in the same turn returns
    /// [`EmbedError::OverflowAgain`]: end the turn, and do not resend.
    ///
    /// ```
    /// # use soba_core::calibration::Factor;
    /// # use soba_core::{Encoding, TokenCount};
    /// # use soba_engine::embed::{EmbedError, Engine, EngineConfig};
    /// # use soba_engine::session::ModelSpec;
    /// # use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let model = ModelSpec {
    /// #     id: "local/model".into(),
    /// #     context_window: TokenCount::new(65_000),
    /// #     max_output_tokens: TokenCount::new(8_000),
    /// #     encoding: Encoding::O200kBase,
    /// #     seed: Factor::new(1.1),
    /// # };
    /// # let engine = Engine::create(&dir.path().join("s.jsonl"), EngineConfig::new(model, "system"))?;
    /// let cancel = CancellationToken::new();
    /// engine.append_user("Summarise the logs.").await?;
    /// let first = engine.prepare(&cancel).await?;
    /// // The provider answered 400 "prompt is too long: 70123 tokens > 65000".
    /// let overflow = soba_provider::classify_overflow(400, "prompt is too long: 70123 tokens > 65000 maximum");
    /// engine.report_overflow(overflow.and_then(|o| o.stated_prompt)).await?;
    /// let retry = engine.prepare(&cancel).await?; // runs the context_overflow compaction
    /// assert!(retry.compaction.is_some());
    /// // The retry overflowed too: the turn fails, nothing is resent.
    /// let again = engine.report_overflow(None).await;
    /// assert!(matches!(again, Err(EmbedError::OverflowAgain { .. })));
    /// # let _ = first;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn report_overflow(&self, stated_prompt: Option<u64>) -> Result<(), EmbedError> {
        let turn = self.core.lock().await.derived().turn_start;
        let mut state = self.state();
        let Some(local) = state.last_local else {
            return Err(EmbedError::NothingPrepared);
        };
        if state.recovered_turn.as_ref() == Some(&turn) {
            state.pending = None;
            return Err(EmbedError::OverflowAgain { stated_prompt });
        }
        state.recovered_turn = Some(turn);
        state.pending = Some(Forced::ContextOverflow {
            stated_prompt,
            request_tokens_local: local,
            stated_limit: None,
        });
        Ok(())
    }

    /// Compacts now, as `/compact [instructions]` does (trigger `user`):
    /// no ROI gate, the deterministic capsule as fallback; `skipped` when
    /// nothing precedes the keep window. No inference follows.
    pub async fn compact(
        &self,
        instructions: Option<String>,
        cancel: &CancellationToken,
    ) -> Result<CompactionEnd, EmbedError> {
        if cancel.is_cancelled() {
            return Err(EmbedError::Cancelled { compaction: None });
        }
        let forced = Forced::User { instructions };
        match self.barrier.preflight(Some(forced), cancel).await? {
            Preflight::Compacted(end) => Ok(end),
            Preflight::EndTurn(end) => Err(end_turn(end)),
            // A forced trigger always plans; no plan means nothing to do.
            Preflight::Proceed => Err(EngineError::Invalid(
                "the compaction did not run: nothing to compact".to_owned(),
            )
            .into()),
        }
    }

    /// Runs one step with the host's model client: [`Engine::prepare`],
    /// the request, and [`Engine::append_assistant`] with the answer. A
    /// context overflow is recovered once per turn as
    /// [`Engine::report_overflow`] says. The host runs the tool calls of
    /// [`Step::message`] itself and appends their results.
    pub async fn step(
        &self,
        client: &dyn ModelClient,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<Step, EmbedError> {
        let mut compactions = Vec::new();
        loop {
            let prepared = self.prepare(cancel).await?;
            compactions.extend(prepared.compaction);
            let cancellation = TokenCancellation(cancel);
            let response = tokio::select! {
                _ = cancel.cancelled() => return Err(EmbedError::Cancelled { compaction: None }),
                response = client.stream(&prepared.request, &cancellation, on_event) => response,
            };
            match response {
                Ok(response) => {
                    if cancel.is_cancelled() {
                        // Linearisation: a cancel seen before the append
                        // appends nothing.
                        return Err(EmbedError::Cancelled { compaction: None });
                    }
                    let message = response.message;
                    let entry_id = self.append_assistant(message.clone()).await?;
                    let message = {
                        let core = self.core.lock().await;
                        core.entry(&entry_id)
                            .and_then(|entry| match &entry.body {
                                EntryBody::Message(logged) => Some(logged.message.clone()),
                                _ => None,
                            })
                            .unwrap_or(message)
                    };
                    return Ok(Step {
                        entry_id,
                        message,
                        compactions,
                    });
                }
                Err(err) if err.is_overflow() => {
                    self.report_overflow(err.stated_prompt()).await?;
                }
                Err(_) if cancel.is_cancelled() => {
                    return Err(EmbedError::Cancelled { compaction: None });
                }
                Err(err) => return Err(EmbedError::Provider(Box::new(err))),
            }
        }
    }
}

/// Maps a barrier outcome that ends the turn to its error.
fn end_turn(end: CompactionEnd) -> EmbedError {
    match end.outcome {
        Outcome::Cancelled => EmbedError::Cancelled {
            compaction: Some(Box::new(end)),
        },
        Outcome::Stale => EmbedError::Stale {
            compaction: Box::new(end),
        },
        _ => EmbedError::CompactionFailed {
            reason: end
                .reason
                .clone()
                .unwrap_or_else(|| "the compaction failed".to_owned()),
            compaction: Box::new(end),
        },
    }
}

/// Builds the request the session would send now with the host's tools.
fn build_request(core: &SessionCore, model: &str, tools: &[ToolSchema]) -> ChatRequest {
    crate::agent::request_with_tools(core, model, tools.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::calibration::Factor;
    use soba_core::tokens::ByteCounter;
    use soba_core::{Encoding, Usage};

    fn model() -> ModelSpec {
        ModelSpec {
            id: "test/model".into(),
            context_window: TokenCount::new(16_000),
            max_output_tokens: TokenCount::new(2_000),
            encoding: Encoding::O200kBase,
            seed: Factor::new(1.0),
        }
    }

    fn config() -> EngineConfig {
        EngineConfig::new(model(), "You are a test agent.")
            .with_counter(Arc::new(ByteCounter))
            .with_workspace_root("/work")
            .with_durability(Durability::Flush)
    }

    #[test]
    fn provider_model_defaults_to_the_name_after_the_provider() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = Engine::create(&dir.path().join("s.jsonl"), config()).expect("create");
        assert_eq!(engine.provider_model, "model");
        let named = Engine::create(
            &dir.path().join("t.jsonl"),
            config().with_provider_model("custom"),
        )
        .expect("create");
        assert_eq!(named.provider_model, "custom");
    }

    #[tokio::test]
    async fn report_overflow_needs_a_prepared_request_and_allows_one_retry_per_turn() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = Engine::create(&dir.path().join("s.jsonl"), config()).expect("create");
        engine.append_user("hello").await.expect("append");
        assert!(matches!(
            engine.report_overflow(Some(20_000)).await,
            Err(EmbedError::NothingPrepared)
        ));
        let cancel = CancellationToken::new();
        engine.prepare(&cancel).await.expect("prepare");
        engine.report_overflow(Some(20_000)).await.expect("first");
        assert!(matches!(
            engine.report_overflow(Some(21_000)).await,
            Err(EmbedError::OverflowAgain {
                stated_prompt: Some(21_000)
            })
        ));
        // A new user turn gets its own recovery.
        engine.append_user("again").await.expect("append");
        engine.report_overflow(None).await.expect("new turn");
    }

    #[tokio::test]
    async fn append_assistant_fills_model_and_local_count_and_rejects_other_roles() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = Engine::create(&dir.path().join("s.jsonl"), config()).expect("create");
        engine.append_user("hello").await.expect("append");
        let prepared = engine
            .prepare(&CancellationToken::new())
            .await
            .expect("prepare");
        let mut answer = Message::assistant("hi");
        answer.usage = Some(Usage {
            input: prepared.effective.get(),
            output: 1,
            ..Usage::default()
        });
        let local = engine.state().last_local;
        assert!(local.is_some_and(|n| n > 0));
        let id = engine.append_assistant(answer).await.expect("append");
        let core = engine.core().lock().await;
        let Some(EntryBody::Message(logged)) = core.entry(&id).map(|entry| &entry.body) else {
            panic!("the assistant entry is a message");
        };
        assert_eq!(logged.message.model.as_deref(), Some("test/model"));
        assert_eq!(logged.message.request_tokens_local, local);
        drop(core);
        assert!(
            engine
                .append_assistant(Message::user("not an answer"))
                .await
                .is_err()
        );
    }

    #[test]
    fn a_registry_model_becomes_a_spec() {
        let info = soba_provider::registry::ModelRegistry::new()
            .resolve("anthropic/claude-sonnet-4-5")
            .expect("a built-in model");
        let spec = ModelSpec::from(&info);
        assert_eq!(spec.id, "anthropic/claude-sonnet-4-5");
        assert_eq!(spec.context_window, TokenCount::new(200_000));
        assert_eq!(spec.max_output_tokens, TokenCount::new(32_000));
        assert_eq!(spec.seed, Factor::new(1.25));
    }

    #[tokio::test]
    async fn a_cancelled_token_prepares_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = Engine::create(&dir.path().join("s.jsonl"), config()).expect("create");
        engine.append_user("hello").await.expect("append");
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(matches!(
            engine.prepare(&cancel).await,
            Err(EmbedError::Cancelled { compaction: None })
        ));
    }
}
