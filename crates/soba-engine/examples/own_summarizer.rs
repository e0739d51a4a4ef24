//! A host that brings its own summarizer and its own model client.
//!
//! SOBA's barrier decides when to compact and what the span is; the text of
//! the capsule's narrative comes from whatever implements soba-core's
//! `Summarizer` trait. Here it is a rule-based summarizer that keeps every
//! `DECISION:` and `TODO:` line it sees and carries the previous capsule's
//! decisions forward; a real host would call its own LLM there. Its output
//! still faces SOBA's guards (the eight headings, a minimum length, smaller
//! than the span), and the locally extracted sections (original task,
//! latest instructions, files, errors) are added by SOBA, never asked of it.
//!
//! The model is a `ModelClient` the host implements (scripted here), driven
//! by `Engine::step`, which also recovers a context overflow once per turn.
//! Events arrive through a callback.
//!
//! Run it with `cargo run -p soba-engine --example own_summarizer`.

use std::error::Error;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use soba_core::calibration::Factor;
use soba_core::capsule::NARRATIVE_HEADINGS;
use soba_core::config::CompactionConfig;
use soba_core::guard::END_MARKER;
use soba_core::summarize::{
    SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse,
};
use soba_core::tokens::{BpeCounter, count_message, count_tool_schemas};
use soba_core::{
    Block, Encoding, EntryBody, Message, Quality, Role, TokenCount, TokenCounter, ToolInput,
    ToolUse, Usage,
};
use soba_engine::embed::{Engine, EngineConfig};
use soba_engine::event::EngineEvent;
use soba_engine::session::ModelSpec;
use soba_provider::client::{Api, BoxFuture, Cancellation, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::request::{ChatRequest, ChatResponse, StopReason, StreamEvent, ToolSchema};
use tokio_util::sync::CancellationToken;

/// The error type of the example: anything, with a message.
pub type AnyError = Box<dyn Error + Send + Sync>;

/// A summarizer that keeps `DECISION:` and `TODO:` lines. It never calls a
/// network; swap its body for a call to your own model.
#[derive(Debug, Default)]
pub struct DecisionLog {
    calls: AtomicUsize,
    instructions_seen: Mutex<Vec<String>>,
}

impl DecisionLog {
    /// Returns how many chunks it summarized.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Returns the `/compact` instructions it was given, in order.
    pub fn instructions_seen(&self) -> Vec<String> {
        self.instructions_seen
            .lock()
            .map(|seen| seen.clone())
            .unwrap_or_default()
    }
}

/// Returns the lines under `## <heading>` in a markdown state.
fn section_lines<'a>(state: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in state.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            inside = title.trim().eq_ignore_ascii_case(heading);
            continue;
        }
        if inside && line.starts_with("- ") {
            lines.push(line);
        }
    }
    lines
}

impl Summarizer for DecisionLog {
    fn model(&self) -> &str {
        "host/decision-log"
    }

    fn window_tokens(&self) -> TokenCount {
        TokenCount::new(32_000)
    }

    fn summarize<'a>(&'a self, request: &'a SummaryRequest) -> SummaryFuture<'a> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(instructions) = &request.instructions
                && let Ok(mut seen) = self.instructions_seen.lock()
            {
                seen.push(instructions.clone());
            }
            let previous = request.previous_state.as_deref().unwrap_or("");
            // Carry the previous state's decisions, then add the new ones.
            let mut decisions: Vec<String> = section_lines(previous, "Decisions")
                .into_iter()
                .map(str::to_owned)
                .collect();
            let mut pending = Vec::new();
            for line in request.span_text.lines() {
                if let Some(decision) = line.trim().strip_prefix("DECISION:") {
                    let item = format!("- {}", decision.trim());
                    if !decisions.contains(&item) {
                        decisions.push(item);
                    }
                } else if let Some(todo) = line.trim().strip_prefix("TODO:") {
                    pending.push(format!("- {}", todo.trim()));
                }
            }
            let goal = section_lines(previous, "Goal")
                .first()
                .map(|line| (*line).to_owned())
                .unwrap_or_else(|| "- Keep the service's health checks passing".to_owned());
            let mut text = String::new();
            // The eight headings every summary must carry (SPEC §9.1).
            for heading in NARRATIVE_HEADINGS {
                let body = match heading {
                    "Goal" => goal.clone(),
                    "Decisions" if !decisions.is_empty() => decisions.join("\n"),
                    "Pending" if !pending.is_empty() => pending.join("\n"),
                    "Next steps" => pending
                        .last()
                        .cloned()
                        .unwrap_or_else(|| "- Run the next check".to_owned()),
                    _ => "(none)".to_owned(),
                };
                text.push_str(&format!("## {heading}\n{body}\n\n"));
            }
            text.push_str(END_MARKER);
            if text.len() > 40_000 {
                // A real summarizer reports its failures; the barrier then
                // replays the full history (soft) or falls back to the
                // deterministic capsule (forced).
                return Err(SummarizeError::Provider {
                    message: "summary too long".into(),
                });
            }
            Ok(SummaryResponse {
                text,
                model: self.model().to_owned(),
                usage: None,
            })
        })
    }
}

/// A scripted model client: asked something, it runs `check`; given the
/// result, it answers with a decision and a to-do. It reports the prompt it
/// counted as usage, as a provider does.
pub struct ScriptedClient {
    counter: BpeCounter,
    calls: AtomicUsize,
}

impl ScriptedClient {
    fn prompt_tokens(&self, request: &ChatRequest) -> u64 {
        let schemas: Vec<serde_json::Value> = request
            .tools
            .iter()
            .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}))
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
            let n_call = self.calls.fetch_add(1, Ordering::SeqCst);
            let turn = number_asked(request);
            let answered_tool = request
                .messages
                .last()
                .is_some_and(|message| message.role == Role::Tool);
            let (content, stop_reason) = if answered_tool {
                let text = format!(
                    "The check passed.\nDECISION: service {turn} keeps its retry budget at {} requests\n\
                     TODO: add an alert for service {turn}",
                    3 + turn % 4
                );
                on_event(StreamEvent::TextDelta(text.clone()));
                (vec![Block::Text(text)], StopReason::EndTurn)
            } else {
                let call = ToolUse {
                    id: format!("call_{n_call}"),
                    name: "check".into(),
                    input: ToolInput::from_value(json!({ "service": turn })),
                };
                (vec![Block::ToolUse(call)], StopReason::ToolUse)
            };
            let mut message = Message::new(Role::Assistant, content);
            message.usage = Some(Usage {
                input: self.prompt_tokens(request),
                output: 60,
                ..Usage::default()
            });
            Ok(ChatResponse {
                message,
                stop_reason,
            })
        })
    }
}

/// Returns the first number in the latest real user message of `request`
/// (the model's input is all it knows: after a capsule, earlier user
/// messages are no longer in it).
fn number_asked(request: &ChatRequest) -> u64 {
    let text = request
        .messages
        .iter()
        .rev()
        .find(|message| message.is_real_user())
        .map(Message::text)
        .unwrap_or_default();
    let digits: String = text
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(0)
}

/// The host's tool: a long health-check log for one service.
fn check(service: u64) -> String {
    let mut out = format!("health check of service {service}\n");
    for probe in 0..120 {
        out.push_str(&format!(
            "probe {probe:03}: GET /health/{service}/{probe} 200 in {} ms (p99 budget 250 ms)\n",
            20 + (probe * 37 + service * 11) % 180
        ));
    }
    out.push_str("all probes passed\n");
    out
}

/// What the run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// User turns run.
    pub turns: usize,
    /// Chunks the host's summarizer summarized.
    pub summarizer_calls: usize,
    /// Capsules in the log, as `(summarizer, quality)`.
    pub capsules: Vec<(String, Quality)>,
    /// The latest capsule's decisions, as the host's summarizer wrote them.
    pub decisions: Vec<String>,
    /// The `/compact` instructions the summarizer received.
    pub instructions_seen: Vec<String>,
    /// The result lines of every compaction, from the event callback.
    pub result_lines: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for line in &self.result_lines {
            writeln!(f, "{line}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{} turns; the host's summarizer ran {} times and wrote {} capsules",
            self.turns,
            self.summarizer_calls,
            self.capsules.len()
        )?;
        writeln!(f, "decisions carried in the latest capsule:")?;
        for decision in &self.decisions {
            writeln!(f, "  {decision}")?;
        }
        write!(
            f,
            "/compact instructions received by the summarizer: {:?}",
            self.instructions_seen
        )
    }
}

/// Runs eight turns with the host's summarizer and client in a new session
/// under `dir`, then a `/compact` with instructions.
pub async fn run(dir: &Path) -> Result<Report, AnyError> {
    let summarizer = Arc::new(DecisionLog::default());
    let result_lines = Arc::new(Mutex::new(Vec::new()));
    let lines = result_lines.clone();
    let model = ModelSpec {
        id: "example/scripted".into(),
        context_window: TokenCount::new(16_000),
        max_output_tokens: TokenCount::new(2_000),
        encoding: Encoding::O200kBase,
        seed: Factor::new(1.0),
    };
    let compaction = CompactionConfig {
        safety_reserve_tokens: TokenCount::new(1_000),
        min_tokens_for_auto_compact: TokenCount::new(6_000),
        keep_recent_tokens: TokenCount::new(1_000),
        min_reclaimable_tokens: TokenCount::new(500),
        // No hygiene here, so that every compaction is a capsule.
        min_hygiene_tokens: TokenCount::new(100_000),
        ..CompactionConfig::default()
    };
    let config = EngineConfig::new(model, "You keep the services healthy.")
        .with_compaction(compaction)
        .with_tools(vec![ToolSchema {
            name: "check".into(),
            description: "Runs the health checks of one service.".into(),
            input_schema: json!({"type": "object", "properties": {"service": {"type": "integer"}}}),
        }])
        .with_summarizer(summarizer.clone())
        .with_workspace_root("/srv/ops")
        .on_event(move |event| {
            if let EngineEvent::CompactionEnd(end) = event
                && let Ok(mut lines) = lines.lock()
            {
                lines.push(end.result_line(|id| id.short_with(4)));
            }
        });
    let log_path = dir.join("own-summarizer.jsonl");
    let engine = Engine::create(&log_path, config)?;
    let client = ScriptedClient {
        counter: BpeCounter::new(Encoding::O200kBase),
        calls: AtomicUsize::new(0),
    };
    let cancel = CancellationToken::new();
    let mut ignore_stream = |_event: StreamEvent| {};
    let n_turns = 8;
    for turn in 1..=n_turns {
        engine
            .append_user(format!("Check service {turn} and decide its retry budget."))
            .await?;
        loop {
            let step = engine.step(&client, &cancel, &mut ignore_stream).await?;
            let calls: Vec<ToolUse> = step.message.tool_uses().cloned().collect();
            if calls.is_empty() {
                break;
            }
            for call in calls {
                let service = call.input.object().get("service").and_then(|v| v.as_u64());
                engine
                    .append_tool_result(&call.id, check(service.unwrap_or(0)), false)
                    .await?;
            }
        }
    }
    engine
        .compact(Some("keep every retry-budget decision".to_owned()), &cancel)
        .await?;

    let core = engine.core().lock().await;
    // The core keeps only the live stretch in memory; every capsule of the
    // session is read from its log.
    let log = core.read_log()?;
    let capsules: Vec<_> = log
        .entries()
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) => Some(capsule),
            _ => None,
        })
        .collect();
    let decisions = capsules
        .last()
        .map(|capsule| {
            capsule
                .narrative
                .decisions
                .lines()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let capsules = capsules
        .iter()
        .map(|capsule| (capsule.summarizer.clone(), capsule.quality))
        .collect();
    drop(core);
    let result_lines = result_lines
        .lock()
        .map(|lines| lines.clone())
        .unwrap_or_default();
    Ok(Report {
        turns: n_turns,
        summarizer_calls: summarizer.calls(),
        capsules,
        decisions,
        instructions_seen: summarizer.instructions_seen(),
        result_lines,
    })
}

fn main() -> Result<(), AnyError> {
    // An argument names a directory to keep the session in; without one a
    // temporary directory is used and removed at the end.
    let temporary = tempfile::tempdir()?;
    let dir = match std::env::args_os().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => temporary.path().to_path_buf(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(&dir))?;
    println!("{report}");
    Ok(())
}
