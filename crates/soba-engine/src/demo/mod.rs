//! `soba demo`: the whole engine — barrier, triggers, hygiene, capsules,
//! guards and the deterministic summarizer — offline, on a session the
//! project generates (SPEC §15.5). The model is scripted; the tools are
//! the agent's real tools, run in a temporary workspace.

pub mod scenario;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::render::{SystemHeader, system_prompt};
use soba_core::tokens::{BpeCounter, count_message, count_tool_schemas};
use soba_core::{
    Block, Encoding, Message, Role, TokenCount, TokenCounter, ToolInput, ToolUse, Usage,
};
use soba_provider::client::{Api, BoxFuture, Cancellation, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::request::{ChatRequest, ChatResponse, StopReason, StreamEvent};
use soba_store::log::{SessionHeader, SystemMinter, WriterOptions};
use tokio::sync::Mutex as AsyncMutex;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, tool_schema_values};
use crate::barrier::{BarrierContext, EventSink};
use crate::error::EngineError;
use crate::event::TurnEnd;
use crate::session::{ModelSpec, SessionConfig, SessionCore};
use crate::tool::Workspace;
use crate::tool::{ApprovalPolicy, Approvals};
use crate::tool::{ToolConfig, ToolContext, ToolRegistry};
use scenario::{DemoScenario, DemoStep};

/// The demo model: a 200,000-token window with 32,000 tokens of output, like
/// the Claude Sonnet class (hardLimit 159,808, autoLimit 80,000 by the
/// working-set cap, hygieneLimit 50,000).
pub fn demo_model() -> ModelSpec {
    ModelSpec {
        id: "demo/scripted".into(),
        context_window: TokenCount::new(200_000),
        max_output_tokens: TokenCount::new(32_000),
        encoding: Encoding::O200kBase,
        seed: Factor::new(1.0),
    }
}

/// A model client that answers from the scenario's script, reporting as
/// usage the request's size counted with `o200k_base`.
pub struct ScriptedModel {
    steps: Mutex<std::collections::VecDeque<DemoStep>>,
    counter: BpeCounter,
    calls: AtomicU64,
}

impl ScriptedModel {
    /// Returns a model that answers with `steps` in order.
    pub fn new(steps: Vec<DemoStep>) -> Self {
        ScriptedModel {
            steps: Mutex::new(steps.into()),
            counter: BpeCounter::new(Encoding::O200kBase),
            calls: AtomicU64::new(0),
        }
    }

    fn prompt_tokens(&self, request: &ChatRequest) -> u64 {
        let schemas: Vec<serde_json::Value> = request
            .tools
            .iter()
            .map(|tool| serde_json::json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}))
            .collect();
        let system = self.counter.count_text(&request.system).n.get() + 4;
        let tools = count_tool_schemas(&self.counter, &schemas).n.get();
        let messages: u64 = request
            .messages
            .iter()
            .map(|message| {
                count_message(&self.counter, message, TokenCount::new(1_100))
                    .n
                    .get()
            })
            .sum();
        system + tools + messages
    }
}

impl ModelClient for ScriptedModel {
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
            let next = self
                .steps
                .lock()
                .map(|mut steps| steps.pop_front())
                .unwrap_or(None);
            let step = next.unwrap_or_else(|| DemoStep {
                text: "(the script has ended)".into(),
                calls: Vec::new(),
            });
            let n_call = self.calls.fetch_add(1, Ordering::SeqCst);
            let mut content = Vec::new();
            if !step.text.is_empty() {
                on_event(StreamEvent::TextDelta(step.text.clone()));
                content.push(Block::Text(step.text.clone()));
            }
            for (idx, call) in step.calls.iter().enumerate() {
                content.push(Block::ToolUse(ToolUse {
                    id: format!("call_{n_call}_{idx}"),
                    name: call.tool.to_owned(),
                    input: ToolInput::from_value(call.input.clone()),
                }));
            }
            let stop_reason = if step.calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            };
            let mut message = Message::new(Role::Assistant, content);
            message.model = Some(demo_model().id);
            let output = 40 + step.text.len() as u64 / 4;
            message.usage = Some(Usage {
                input: self.prompt_tokens(request),
                output,
                ..Usage::default()
            });
            Ok(ChatResponse {
                message,
                stop_reason,
            })
        })
    }
}

/// What the demo did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSummary {
    /// The temporary directory.
    pub dir: PathBuf,
    /// The session log written.
    pub session_log: PathBuf,
    /// Turns run.
    pub turns: usize,
    /// Turns that did not complete, with their reasons.
    pub failed_turns: Vec<String>,
}

/// Where the demo writes: its directory and the folder of its session log.
#[derive(Debug, Clone)]
pub struct DemoPlaces {
    /// The demo's directory (a fresh temporary or `--keep` one): the
    /// workspace goes into `workspace/` under it.
    pub dir: PathBuf,
    /// The folder the session log goes into.
    pub sessions_dir: PathBuf,
    /// Set to the session log's path as soon as the log exists, so an
    /// event sink can read it (the demo prints what each capsule kept).
    pub session_log: Arc<std::sync::OnceLock<PathBuf>>,
}

/// Runs the demo in `places.dir` (a fresh directory): writes the
/// generated workspace, then drives every scripted turn through the real
/// agent loop, sending every event to `events`.
pub async fn run(
    places: &DemoPlaces,
    seed: u64,
    events: EventSink,
) -> Result<DemoSummary, EngineError> {
    let dir = places.dir.as_path();
    let scenario: DemoScenario = scenario::generate(seed);
    let workspace_dir = dir.join("workspace");
    for file in &scenario.files {
        let path = workspace_dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|err| {
                EngineError::Invalid(format!("cannot create {}: {err}", parent.display()))
            })?;
        }
        std::fs::write(&path, &file.content).map_err(|err| {
            EngineError::Invalid(format!("cannot write {}: {err}", path.display()))
        })?;
    }
    let workspace =
        Workspace::new(&workspace_dir).map_err(|err| EngineError::Invalid(err.to_string()))?;
    let root = workspace.root().display().to_string();
    let tools = Arc::new(ToolRegistry::builtin());
    let mut minter = SystemMinter;
    let header = SessionHeader::new(&mut minter, root.clone());
    let system = system_prompt(&SystemHeader {
        workspace_root: root.clone(),
        os: header.os.clone(),
        date: header.created_at.chars().take(10).collect(),
        memory: Vec::new(),
    });
    let config = SessionConfig {
        model: demo_model(),
        compaction: CompactionConfig::default(),
        system_prompt: system,
        tool_schemas: tool_schema_values(&tools),
        counter: None,
    };
    let session_log = places.sessions_dir.join(format!("{}.jsonl", header.id));
    let core = SessionCore::create(&session_log, header, config, WriterOptions::default())?;
    let _ = places.session_log.set(session_log.clone());
    let core = Arc::new(AsyncMutex::new(core));
    let op_counter = Arc::new(AtomicU64::new(0));
    let barrier = BarrierContext {
        core: core.clone(),
        events,
        summarizer: None,
        operation_ids: Arc::new(move || {
            format!("op_{}", op_counter.fetch_add(1, Ordering::SeqCst) + 1)
        }),
        clock: Arc::new(|| jiff::Timestamp::now().to_string()),
    };
    let steps: Vec<DemoStep> = scenario
        .turns
        .iter()
        .flat_map(|turn| turn.steps.clone())
        .collect();
    let agent = Agent {
        barrier,
        model: Arc::new(ScriptedModel::new(steps)),
        tools,
        approvals: Arc::new(Approvals::non_interactive(ApprovalPolicy::auto_approve())),
        tool_context: ToolContext::new(workspace, ToolConfig::default(), CancellationToken::new()),
        provider_model: "scripted".into(),
        text_tool_calls: false,
    };
    let cancel = CancellationToken::new();
    let mut failed_turns = Vec::new();
    for (idx, turn) in scenario.turns.iter().enumerate() {
        match agent.run_turn(&turn.user, &cancel).await? {
            TurnEnd::Completed => {}
            other => failed_turns.push(format!("turn {}: {other:?}", idx + 1)),
        }
    }
    Ok(DemoSummary {
        dir: dir.to_path_buf(),
        session_log,
        turns: scenario.turns.len(),
        failed_turns,
    })
}
