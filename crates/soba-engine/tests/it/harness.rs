//! A harness that drives the real agent loop against the fake provider
//! server (OpenAI Chat Completions dialect) with small, exact budgets.
//! Counting uses the deterministic byte counter (`ceil(bytes / 4)`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use serde_json::json;
use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::summarize::Summarizer;
use soba_core::tokens::ByteCounter;
use soba_core::{Encoding, Entry, EntryBody, TokenCount, Usage};
use soba_engine::agent::{Agent, build_request, tool_schema_values};
use soba_engine::barrier::BarrierContext;
use soba_engine::event::{CompactionEnd, EngineEvent, TurnEnd};
use soba_engine::session::{ModelSpec, SessionConfig, SessionCore};
use soba_engine::tool::{
    ApprovalPolicy, Approvals, ToolConfig, ToolContext, ToolRegistry, Workspace,
};
use soba_provider::client::{Api, BoxFuture, Cancellation, Endpoint, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
use soba_provider::request::{ChatRequest, ChatResponse, StreamEvent};
use soba_provider::transport::{HttpConfig, OpenAiChatClient, RetryPolicy};
use soba_store::log::{SequentialMinter, SessionHeader, WriterOptions};
use tempfile::TempDir;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The test model: window 16,000, max output 2,000; with [`small_config`]
/// hardLimit 13,000, autoLimit 10,400, hygieneLimit 6,500, keepRecent
/// 1,000, softGate 2,000, roiFloor 500.
pub fn small_model() -> ModelSpec {
    ModelSpec {
        id: "fake/model".into(),
        context_window: TokenCount::new(16_000),
        max_output_tokens: TokenCount::new(2_000),
        encoding: Encoding::O200kBase,
        seed: Factor::new(1.0),
    }
}

/// Compaction settings scaled down for the small model.
pub fn small_config() -> CompactionConfig {
    CompactionConfig {
        safety_reserve_tokens: TokenCount::new(1_000),
        min_tokens_for_auto_compact: TokenCount::new(2_000),
        keep_recent_tokens: TokenCount::new(1_000),
        min_reclaimable_tokens: TokenCount::new(500),
        min_hygiene_tokens: TokenCount::new(1_500),
        hygiene_keep_messages: 4,
        timeout_ms: 200,
        // These tests script exact trigger sequences; read_cost, a standing
        // candidate above softGate, has tests of its own.
        compact_on_read_cost: false,
        // The test clock ticks far apart: no cache_expired either.
        cache_ttl_seconds: 0,
        ..CompactionConfig::default()
    }
}

/// Reports as usage exactly the local count of the request the session
/// sends (a provider that counts like us), so calibration stays at 1.0.
struct EchoUsage {
    inner: OpenAiChatClient,
    core: Arc<Mutex<SessionCore>>,
    /// (local count, effective tokens, hardLimit) of every request sent.
    sent: Arc<StdMutex<Vec<(u64, TokenCount, TokenCount)>>>,
}

impl ModelClient for EchoUsage {
    fn api(&self) -> Api {
        Api::OpenAiChat
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let local = {
                let core = self.core.lock().await;
                let local = core.live().total_tokens().get();
                self.sent.lock().unwrap().push((
                    local,
                    core.measure().tokens,
                    core.budget().hard_limit(),
                ));
                local
            };
            let mut response = self.inner.stream(request, cancel, on_event).await?;
            response.message.usage = Some(Usage {
                input: local,
                output: 10,
                ..Usage::default()
            });
            response.message.model = Some("fake/model".into());
            Ok(response)
        })
    }
}

/// The running harness.
pub struct Harness {
    pub dir: TempDir,
    pub server: FakeServer,
    pub agent: Agent,
    pub core: Arc<Mutex<SessionCore>>,
    pub events: Arc<StdMutex<Vec<EngineEvent>>>,
    pub log_path: PathBuf,
    pub config: SessionConfig,
    /// (local count, effective tokens, hardLimit) of every request sent.
    pub sent: Arc<StdMutex<Vec<(u64, TokenCount, TokenCount)>>>,
    next_call: AtomicU64,
}

/// Options for [`Harness::start`].
pub struct Options {
    pub compaction: CompactionConfig,
    pub summarizer: Option<Arc<dyn Summarizer>>,
    /// Files written to the workspace: (path, bytes).
    pub files: Vec<(String, usize)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            compaction: small_config(),
            summarizer: None,
            files: (0..40)
                .map(|idx| (format!("data/file{idx:02}.txt"), 4_000))
                .collect(),
        }
    }
}

/// Returns `n_bytes` of varied, line-structured text.
pub fn file_text(seed: usize, n_bytes: usize) -> String {
    let mut text = String::new();
    let mut line = 0;
    while text.len() < n_bytes {
        text.push_str(&format!(
            "line {line} of file {seed}: the quick brown fox jumps over the lazy dog\n"
        ));
        line += 1;
    }
    text.truncate(n_bytes);
    text
}

impl Harness {
    pub async fn start(options: Options) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        for (idx, (path, n_bytes)) in options.files.iter().enumerate() {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, file_text(idx, *n_bytes)).unwrap();
        }
        std::fs::create_dir_all(&root).unwrap();
        let workspace = Workspace::new(&root).unwrap();
        let tools = Arc::new(ToolRegistry::builtin());
        let config = SessionConfig {
            model: small_model(),
            compaction: options.compaction,
            system_prompt: "You are a test agent.".into(),
            tool_schemas: tool_schema_values(&tools),
            counter: Some(Arc::new(ByteCounter)),
        };
        let mut minter = SequentialMinter::new(1_700_000_000);
        let header = SessionHeader::new(&mut minter, workspace.root().display().to_string());
        let log_path = dir
            .path()
            .join("sessions")
            .join(format!("{}.jsonl", header.id));
        let options_writer = WriterOptions {
            minter: Box::new(minter),
            ..WriterOptions::default()
        };
        let core = SessionCore::create(&log_path, header, config.clone(), options_writer).unwrap();
        let core = Arc::new(Mutex::new(core));
        let server = FakeServer::start().await.unwrap();
        let http = HttpConfig {
            connect_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_millis(500),
            stream_timeout: Duration::from_secs(60),
            retry: RetryPolicy {
                max_retries: 0,
                ..RetryPolicy::default()
            },
        };
        let endpoint = Endpoint {
            base_url: server.url(),
            api_key: Some("test-key".into()),
            organization: None,
            project: None,
        };
        let client = OpenAiChatClient::new(endpoint, http).unwrap();
        let events: Arc<StdMutex<Vec<EngineEvent>>> = Arc::new(StdMutex::new(Vec::new()));
        let sent = Arc::new(StdMutex::new(Vec::new()));
        let sink_events = events.clone();
        let ops = Arc::new(AtomicU64::new(0));
        let barrier = BarrierContext {
            core: core.clone(),
            events: Arc::new(move |event| sink_events.lock().unwrap().push(event)),
            summarizer: options.summarizer,
            operation_ids: Arc::new(move || format!("op_{}", ops.fetch_add(1, Ordering::SeqCst))),
            clock: Arc::new(|| "2026-11-30T00:00:00Z".to_owned()),
        };
        let agent = Agent {
            barrier,
            model: Arc::new(EchoUsage {
                inner: client,
                core: core.clone(),
                sent: sent.clone(),
            }),
            tools,
            approvals: Arc::new(Approvals::non_interactive(ApprovalPolicy::auto_approve())),
            tool_context: ToolContext::new(
                workspace,
                ToolConfig::default(),
                CancellationToken::new(),
            ),
            provider_model: "model".into(),
            text_tool_calls: false,
        };
        Harness {
            dir,
            server,
            agent,
            core,
            events,
            log_path,
            config,
            sent,
            next_call: AtomicU64::new(0),
        }
    }

    /// Queues one step that reads `path`.
    pub fn push_read(&self, path: &str) {
        let id = format!("call_{}", self.next_call.fetch_add(1, Ordering::SeqCst));
        let reply = Reply::text("").with_tool_call(&id, "read_file", json!({ "path": path }));
        self.server.push(Script::stream(Dialect::Chat, &reply));
    }

    /// Queues one step that makes `tool` call with `arguments`.
    pub fn push_call(&self, tool: &str, arguments: serde_json::Value) {
        let id = format!("call_{}", self.next_call.fetch_add(1, Ordering::SeqCst));
        let reply = Reply::text("").with_tool_call(&id, tool, arguments);
        self.server.push(Script::stream(Dialect::Chat, &reply));
    }

    /// Queues a final text answer.
    pub fn push_text(&self, text: &str) {
        self.server
            .push(Script::stream(Dialect::Chat, &Reply::text(text)));
    }

    /// Runs a turn.
    pub async fn turn(&self, text: &str) -> TurnEnd {
        self.agent
            .run_turn(text, &CancellationToken::new())
            .await
            .unwrap()
    }

    /// Returns every compaction end event so far.
    pub fn compaction_ends(&self) -> Vec<CompactionEnd> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                EngineEvent::CompactionEnd(end) => Some(end.clone()),
                _ => None,
            })
            .collect()
    }

    /// Returns how many hygiene events were emitted.
    pub fn hygiene_events(&self) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, EngineEvent::Hygiene { .. }))
            .count()
    }

    /// Returns every entry of the log, read back from disk.
    pub fn logged_entries(&self) -> Vec<Entry> {
        let log = soba_store::reader::read_log(&self.log_path).unwrap();
        assert!(log.diagnostics().is_empty(), "{:?}", log.diagnostics());
        log.entries()
            .iter()
            .map(|logged| logged.entry.clone())
            .collect()
    }

    /// Returns the count of logged entries of a type.
    pub fn count_logged(&self, type_name: &str) -> usize {
        self.logged_entries()
            .iter()
            .filter(|entry| entry.body.type_name() == type_name)
            .count()
    }

    /// Returns the request the session would send next.
    pub async fn next_request(&self) -> ChatRequest {
        let core = self.core.lock().await;
        build_request(&core, "model", &self.agent.tools)
    }

    /// Returns the effective tokens now.
    pub async fn effective(&self) -> TokenCount {
        self.core.lock().await.measure().tokens
    }
}

/// Checks that no recorded request carries an unpaired tool block: every
/// assistant tool call is answered by a `tool` message and every `tool`
/// message answers a call made before it.
pub fn assert_paired(server: &FakeServer) {
    for (idx, request) in server.requests().iter().enumerate() {
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut open: Vec<String> = Vec::new();
        for message in &messages {
            match message["role"].as_str() {
                Some("assistant") => {
                    assert!(
                        open.is_empty(),
                        "request {idx}: calls {open:?} unanswered before the next assistant message"
                    );
                    for call in message["tool_calls"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                    {
                        open.push(call["id"].as_str().unwrap().to_owned());
                    }
                }
                Some("tool") => {
                    let id = message["tool_call_id"].as_str().unwrap();
                    let pos = open.iter().position(|open_id| open_id == id);
                    assert!(
                        pos.is_some(),
                        "request {idx}: result {id} answers no open call"
                    );
                    open.remove(pos.unwrap());
                }
                _ => assert!(
                    open.is_empty(),
                    "request {idx}: calls {open:?} unanswered before a user message"
                ),
            }
        }
        assert!(
            open.is_empty(),
            "request {idx}: calls {open:?} unanswered at the end"
        );
    }
}

/// Counts capsule entries on the log by trigger name.
pub fn capsule_triggers(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => Some(capsule.trigger.as_str().to_owned()),
            _ => None,
        })
        .collect()
}
