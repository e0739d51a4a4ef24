//! A fast in-process rig for the reliability campaigns (crash, race, soak,
//! escape): the real agent loop, barrier and tools over a session log in a
//! directory, a scripted model client without HTTP that reports the
//! session's local count as usage (calibration stays 1.0), the byte
//! counter, and summarizers that pause in controlled ways.
//!
//! The budgets are the harness's small model (hardLimit 13,000, autoLimit
//! 10,400, keepRecent 1,000).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use soba_core::config::CompactionConfig;
use soba_core::summarize::{
    SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse,
};
use soba_core::tokens::ByteCounter;
use soba_core::{Block, Message, Role, TokenCount, ToolInput, ToolUse, Usage};
use soba_engine::agent::{Agent, tool_schema_values};
use soba_engine::barrier::{BarrierContext, EventSink};
use soba_engine::session::{SessionConfig, SessionCore};
use soba_engine::tool::{
    ApprovalPolicy, Approvals, ToolConfig, ToolContext, ToolRegistry, Workspace,
};
use soba_provider::client::{Api, BoxFuture, Cancellation, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::request::{ChatRequest, ChatResponse, StopReason, StreamEvent};
use soba_store::log::{
    Durability, Minter, SequentialMinter, SessionHeader, SessionId, SystemMinter, WriterOptions,
};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::harness::{file_text, small_config, small_model};

/// One scripted inference: tool calls (none ends the turn) and text.
#[derive(Debug, Clone)]
pub struct Step {
    pub text: String,
    pub calls: Vec<(String, Value)>,
}

impl Step {
    /// A final answer.
    pub fn text(text: &str) -> Step {
        Step {
            text: text.to_owned(),
            calls: Vec::new(),
        }
    }

    /// One call of `tool` with `input`.
    pub fn call(tool: &str, input: Value) -> Step {
        Step {
            text: String::new(),
            calls: vec![(tool.to_owned(), input)],
        }
    }

    /// One `read_file` call.
    pub fn read(path: &str) -> Step {
        Step::call("read_file", json!({ "path": path }))
    }
}

/// A model client that answers from a queue of steps, in process, and
/// reports as input usage exactly the session's local count.
pub struct ScriptedClient {
    steps: StdMutex<VecDeque<Step>>,
    core: OnceLock<Arc<Mutex<SessionCore>>>,
    calls: AtomicU64,
    /// Every request received, when recording is on.
    pub requests: StdMutex<Vec<ChatRequest>>,
    record: bool,
}

impl ScriptedClient {
    fn new(record: bool) -> Self {
        ScriptedClient {
            steps: StdMutex::new(VecDeque::new()),
            core: OnceLock::new(),
            calls: AtomicU64::new(0),
            requests: StdMutex::new(Vec::new()),
            record,
        }
    }

    /// Queues steps.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.steps.lock().unwrap().extend(steps);
    }
}

impl ModelClient for ScriptedClient {
    fn api(&self) -> Api {
        Api::OpenAiChat
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        _cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            if self.record {
                self.requests.lock().unwrap().push(request.clone());
            }
            let local = match self.core.get() {
                Some(core) => core.lock().await.live().total_tokens().get(),
                None => 0,
            };
            let step = self
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Step::text("(the script has ended)"));
            let n_call = self.calls.fetch_add(1, Ordering::SeqCst);
            let mut content = Vec::new();
            if !step.text.is_empty() {
                on_event(StreamEvent::TextDelta(step.text.clone()));
                content.push(Block::Text(step.text.clone()));
            }
            for (idx, (name, input)) in step.calls.iter().enumerate() {
                content.push(Block::ToolUse(ToolUse {
                    id: format!("call_{n_call}_{idx}"),
                    name: name.clone(),
                    input: ToolInput::from_value(input.clone()),
                }));
            }
            let stop_reason = if step.calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            };
            let mut message = Message::new(Role::Assistant, content);
            message.model = Some("fake/model".into());
            message.usage = Some(Usage {
                input: local,
                output: 10,
                ..Usage::default()
            });
            Ok(ChatResponse {
                message,
                stop_reason,
            })
        })
    }
}

/// A summary that passes every guard (the harness's test text).
pub fn valid_summary() -> String {
    soba_core::capsule::NARRATIVE_HEADINGS
        .iter()
        .map(|heading| {
            format!("## {heading}\nReading the data files one by one to audit their contents.\n")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a [`PausingSummarizer`] does before answering each chunk.
#[derive(Clone)]
pub enum Pause {
    /// Yields to the scheduler this many times per chunk, in order, cycling.
    Yields(Arc<Vec<u32>>),
    /// Sleeps (tokio time) for this long per chunk, then calls the hook
    /// with the request.
    Sleep(Duration, Arc<dyn Fn(&SummaryRequest) + Send + Sync>),
}

/// A summarizer with a small window (so spans split into chunks) that
/// pauses before each answer and then returns [`valid_summary`] (or a text
/// of its own).
pub struct PausingSummarizer {
    pub pause: Pause,
    pub window: TokenCount,
    pub text: String,
    pub chunks: AtomicU64,
}

impl PausingSummarizer {
    pub fn new(pause: Pause, window: u64) -> Self {
        PausingSummarizer {
            pause,
            window: TokenCount::new(window),
            text: valid_summary(),
            chunks: AtomicU64::new(0),
        }
    }
}

impl Summarizer for PausingSummarizer {
    fn model(&self) -> &str {
        "test/pausing"
    }

    fn window_tokens(&self) -> TokenCount {
        self.window
    }

    fn summarize<'a>(&'a self, request: &'a SummaryRequest) -> SummaryFuture<'a> {
        let n = self.chunks.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match &self.pause {
                Pause::Yields(plan) => {
                    let n_yields = if plan.is_empty() {
                        0
                    } else {
                        plan[(n as usize) % plan.len()]
                    };
                    for _ in 0..n_yields {
                        tokio::task::yield_now().await;
                    }
                }
                Pause::Sleep(duration, hook) => {
                    tokio::time::sleep(*duration).await;
                    hook(request);
                }
            }
            Ok::<_, SummarizeError>(SummaryResponse {
                text: self.text.clone(),
                model: "test/pausing".into(),
                usage: Some(Usage {
                    input: 100,
                    output: 50,
                    ..Usage::default()
                }),
            })
        })
    }
}

/// How to build a rig.
pub struct RigOptions {
    pub compaction: CompactionConfig,
    pub summarizer: Option<Arc<dyn Summarizer>>,
    pub durability: Durability,
    /// A deterministic minter (ids and times) instead of the system clock.
    pub sequential_ids: bool,
    pub events: EventSink,
    /// Workspace files `data/fileNN.txt`: how many and how large.
    pub n_files: usize,
    pub file_bytes: usize,
    /// Keep every request the model receives.
    pub record_requests: bool,
}

impl Default for RigOptions {
    fn default() -> Self {
        RigOptions {
            compaction: small_config(),
            summarizer: None,
            durability: Durability::Flush,
            sequential_ids: true,
            events: Arc::new(|_| {}),
            n_files: 40,
            file_bytes: 4_000,
            record_requests: false,
        }
    }
}

/// The running rig.
pub struct Rig {
    pub agent: Agent,
    pub core: Arc<Mutex<SessionCore>>,
    pub client: Arc<ScriptedClient>,
    pub log_path: PathBuf,
}

/// Returns the session log path of a rig directory.
pub fn log_path_in(root: &Path) -> PathBuf {
    root.join("sessions").join("rig.jsonl")
}

/// Returns the session config every rig uses.
pub fn rig_config(compaction: CompactionConfig, tools: &ToolRegistry) -> SessionConfig {
    SessionConfig {
        model: small_model(),
        compaction,
        system_prompt: "You are a test agent.".into(),
        tool_schemas: tool_schema_values(tools),
        counter: Some(Arc::new(ByteCounter)),
    }
}

impl Rig {
    /// Opens the rig's session in `root` (creating the workspace and the
    /// session when missing; resuming it otherwise).
    pub fn open(root: &Path, options: RigOptions) -> Rig {
        let ws = root.join("workspace");
        for idx in 0..options.n_files {
            let path = ws.join(format!("data/file{idx:02}.txt"));
            if !path.exists() {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, file_text(idx, options.file_bytes)).unwrap();
            }
        }
        std::fs::create_dir_all(&ws).unwrap();
        let workspace = Workspace::new(&ws).unwrap();
        let tools = Arc::new(ToolRegistry::builtin());
        let config = rig_config(options.compaction, &tools);
        let mut minter: Box<dyn Minter> = if options.sequential_ids {
            Box::new(SequentialMinter::new(1_700_000_000))
        } else {
            Box::new(SystemMinter)
        };
        let log_path = log_path_in(root);
        let core = if log_path.exists() {
            let writer = WriterOptions {
                durability: options.durability,
                minter,
            };
            // Damage is the caller's to check (the crash campaign reads the
            // log itself); the rig only needs the session open.
            SessionCore::open(&log_path, config, writer).unwrap().0
        } else {
            let header = SessionHeader {
                id: SessionId::parse("rig").unwrap(),
                created_at: minter.timestamp(),
                cwd: workspace.root().display().to_string(),
                os: "linux".into(),
                memory: Vec::new(),
                imported_from: None,
            };
            let writer = WriterOptions {
                durability: options.durability,
                minter,
            };
            SessionCore::create(&log_path, header, config, writer).unwrap()
        };
        let core = Arc::new(Mutex::new(core));
        let client = Arc::new(ScriptedClient::new(options.record_requests));
        let _ = client.core.set(core.clone());
        let ops = Arc::new(AtomicU64::new(0));
        let barrier = BarrierContext {
            core: core.clone(),
            events: options.events,
            summarizer: options.summarizer,
            operation_ids: Arc::new(move || format!("op_{}", ops.fetch_add(1, Ordering::SeqCst))),
            clock: Arc::new(|| "2026-11-30T00:00:00Z".to_owned()),
        };
        let agent = Agent {
            barrier,
            model: client.clone(),
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
        Rig {
            agent,
            core,
            client,
            log_path,
        }
    }
}

/// Checks that a request carries no unpaired tool block: every call is
/// answered by a `tool` message before the next assistant or user message,
/// and every result answers an open call. Returns the first problem.
pub fn unpaired_tool_block(request: &ChatRequest) -> Option<String> {
    let mut open: Vec<String> = Vec::new();
    for (idx, message) in request.messages.iter().enumerate() {
        match message.role {
            Role::Assistant => {
                if !open.is_empty() {
                    return Some(format!("message {idx}: calls {open:?} unanswered"));
                }
                for block in &message.content {
                    match block {
                        Block::ToolUse(call) => open.push(call.id.clone()),
                        Block::ToolResult(result) => {
                            return Some(format!(
                                "message {idx}: result {} inside an assistant message",
                                result.tool_use_id
                            ));
                        }
                        _ => {}
                    }
                }
            }
            Role::Tool => {
                for block in &message.content {
                    match block {
                        Block::ToolResult(result) => {
                            match open.iter().position(|id| *id == result.tool_use_id) {
                                Some(pos) => {
                                    open.remove(pos);
                                }
                                None => {
                                    return Some(format!(
                                        "message {idx}: result {} answers no open call",
                                        result.tool_use_id
                                    ));
                                }
                            }
                        }
                        Block::ToolUse(call) => {
                            return Some(format!(
                                "message {idx}: call {} in a tool message",
                                call.id
                            ));
                        }
                        _ => {}
                    }
                }
            }
            Role::User | Role::System => {
                if !open.is_empty() {
                    return Some(format!(
                        "message {idx}: calls {open:?} unanswered before a {:?} message",
                        message.role
                    ));
                }
                if message
                    .content
                    .iter()
                    .any(|block| matches!(block, Block::ToolUse(_) | Block::ToolResult(_)))
                {
                    return Some(format!(
                        "message {idx}: a tool block in a {:?} message",
                        message.role
                    ));
                }
            }
        }
    }
    (!open.is_empty()).then(|| format!("calls {open:?} unanswered at the end"))
}

/// Returns the peak resident set size of this process in KiB (`VmHWM`).
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Returns the current resident set size of this process in KiB (`VmRSS`).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A xorshift64* generator: tests take their randomness from a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Returns a number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// Reads a count from an environment variable, else `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
