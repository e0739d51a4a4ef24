//! A minimal agent loop that embeds SOBA's engine: the host owns the loop,
//! the model call and the tools; SOBA owns the session log and decides,
//! before every inference, what the model sees.
//!
//! The "model" is scripted (it reads one part of some design notes with a
//! tool, then answers), so the example runs offline. The window is small
//! (16,000 tokens) and the compaction settings are scaled down with it, so
//! the preflight barrier, hygiene and a capsule all show within ten turns.
//! At the end the engine is dropped and the log reopened: the resumed
//! session sends exactly the request the live one would have sent.
//!
//! Run it with `cargo run -p soba-engine --example minimal_agent`.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::tokens::{BpeCounter, count_message, count_tool_schemas};
use soba_core::{Block, Encoding, Message, Role, TokenCount, TokenCounter, ToolInput, ToolUse};
use soba_core::{Usage, tokens::group_thousands};
use soba_engine::embed::{Engine, EngineConfig, Prepared};
use soba_engine::event::EngineEvent;
use soba_engine::session::ModelSpec;
use soba_provider::request::{ChatRequest, ToolSchema};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// The error type of the example: anything, with a message.
pub type AnyError = Box<dyn Error + Send + Sync>;

/// What the run did, for the printout and the test that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The session log written.
    pub log_path: PathBuf,
    /// User turns run (the last one after the resume).
    pub turns: usize,
    /// Requests sent to the scripted model.
    pub requests: usize,
    /// The largest prompt the model saw, as it counted it.
    pub largest_request: u64,
    /// The model's hardLimit.
    pub hard_limit: u64,
    /// One line per barrier event (hygiene, compaction start and end).
    pub barrier_lines: Vec<String>,
    /// Capsules appended.
    pub capsules: usize,
    /// The first lines of the capsule message the model last received.
    pub capsule_head: Vec<String>,
    /// Whether the reopened session's next request equals the live one's.
    pub resume_matches: bool,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for line in &self.barrier_lines {
            writeln!(f, "{line}")?;
        }
        writeln!(f)?;
        if !self.capsule_head.is_empty() {
            writeln!(f, "the model now starts from this capsule:")?;
            for line in &self.capsule_head {
                writeln!(f, "  | {line}")?;
            }
            writeln!(f, "  | …")?;
            writeln!(f)?;
        }
        writeln!(
            f,
            "{} turns, {} requests, {} capsules; largest request {} tokens (hardLimit {})",
            self.turns,
            self.requests,
            self.capsules,
            group_thousands(self.largest_request),
            group_thousands(self.hard_limit)
        )?;
        writeln!(
            f,
            "resume: the reopened session's next request {} the live one's",
            if self.resume_matches {
                "equals"
            } else {
                "DIFFERS FROM"
            }
        )?;
        write!(f, "session log: {}", self.log_path.display())
    }
}

/// A 16,000-token window with 2,000 tokens of output: hardLimit 13,000,
/// autoLimit 10,400 and hygieneLimit 6,500 with [`compaction`].
pub fn model() -> ModelSpec {
    ModelSpec {
        id: "example/scripted".into(),
        context_window: TokenCount::new(16_000),
        max_output_tokens: TokenCount::new(2_000),
        encoding: Encoding::O200kBase,
        seed: Factor::new(1.0),
    }
}

/// The defaults of SPEC §14.3 scaled down to the small window.
pub fn compaction() -> CompactionConfig {
    CompactionConfig {
        safety_reserve_tokens: TokenCount::new(1_000),
        min_tokens_for_auto_compact: TokenCount::new(8_000),
        keep_recent_tokens: TokenCount::new(1_000),
        min_reclaimable_tokens: TokenCount::new(500),
        min_hygiene_tokens: TokenCount::new(1_500),
        ..CompactionConfig::default()
    }
}

/// The host's one tool.
fn read_notes_tool() -> ToolSchema {
    ToolSchema {
        name: "read_notes".into(),
        description: "Returns one part of the project's design notes.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"part": {"type": "integer"}},
            "required": ["part"]
        }),
    }
}

/// The engine's configuration; built twice (create, then open on resume).
fn config() -> EngineConfig {
    EngineConfig::new(
        model(),
        "You are a careful assistant. Read the notes you are asked about with read_notes, \
         then answer in two sentences.",
    )
    .with_compaction(compaction())
    .with_tools(vec![read_notes_tool()])
    .with_workspace_root("/home/example/project")
}

/// The host's tool: about 1,500 tokens of notes for `part`.
fn read_notes(part: u64) -> String {
    let topics = [
        "the cache layer",
        "the retry policy",
        "the schema migration",
        "the metrics exporter",
        "the CLI flags",
        "the config loader",
    ];
    let mut text = format!("Design notes, part {part}\n");
    for line in 0..90 {
        let topic = topics[(part as usize + line) % topics.len()];
        text.push_str(&format!(
            "{part}.{line}: for {topic} we keep the behaviour simple and measurable; option {} was \
             rejected after the benchmark in run {}.\n",
            (line * 7 + part as usize) % 13,
            100 + line * 3 + part as usize
        ));
    }
    text
}

/// The scripted model: asked a question, it calls `read_notes`; given the
/// tool's result, it answers. Like a provider, it reports the prompt size
/// it counted as usage.
fn scripted_model(request: &ChatRequest, counter: &dyn TokenCounter, n_call: usize) -> Message {
    let prompt = prompt_tokens(request, counter);
    let last = request.messages.last();
    let mut message = match last.map(|message| message.role) {
        Some(Role::Tool) => {
            let notes = last.map(tool_text).unwrap_or_default();
            // The answer quotes the decisions it found: assistant text is
            // never pruned by hygiene, so the session grows until a capsule
            // replaces its older part.
            let decisions: Vec<&str> = notes.lines().skip(1).step_by(3).collect();
            Message::assistant(format!(
                "Every decision favours the simpler design; each rejected option is backed by a \
                 benchmark run. The decisions:\n{}",
                decisions.join("\n")
            ))
        }
        _ => {
            let part = number_asked(request);
            Message::new(
                Role::Assistant,
                vec![
                    Block::Text(format!("Reading part {part}.")),
                    Block::ToolUse(ToolUse {
                        id: format!("call_{n_call}"),
                        name: "read_notes".into(),
                        input: ToolInput::from_value(json!({ "part": part })),
                    }),
                ],
            )
        }
    };
    message.usage = Some(Usage {
        input: prompt,
        output: 40,
        ..Usage::default()
    });
    message
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

/// Counts a request as the engine's model input does: the system prompt,
/// the tool schemas once, and every message with its 4-token overhead.
pub fn prompt_tokens(request: &ChatRequest, counter: &dyn TokenCounter) -> u64 {
    let schemas: Vec<serde_json::Value> = request
        .tools
        .iter()
        .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}))
        .collect();
    let system = counter.count_text(&request.system).n.get() + 4;
    let tools = count_tool_schemas(counter, &schemas).n.get();
    let messages: u64 = request
        .messages
        .iter()
        .map(|message| {
            count_message(counter, message, TokenCount::new(1_100))
                .n
                .get()
        })
        .sum();
    system + tools + messages
}

/// Returns the text of a tool message's results.
fn tool_text(message: &Message) -> String {
    message
        .tool_results()
        .map(|result| result.text())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Turns the events received so far into lines.
fn drain(events: &mut broadcast::Receiver<EngineEvent>, turn: usize, lines: &mut Vec<String>) {
    while let Ok(event) = events.try_recv() {
        match event {
            EngineEvent::Hygiene {
                reclaimed, stubbed, ..
            } => lines.push(format!(
                "turn {turn:>2}  hygiene: {stubbed} tool output{} pruned, {reclaimed} tokens reclaimed",
                if stubbed == 1 { "" } else { "s" }
            )),
            EngineEvent::CompactionStart {
                trigger,
                tokens_before,
                ..
            } => lines.push(format!(
                "turn {turn:>2}  Compacting context before response ({}, {tokens_before} tokens)",
                trigger.as_str()
            )),
            EngineEvent::CompactionEnd(end) => lines.push(format!(
                "turn {turn:>2}  {}",
                end.result_line(|id| id.short_with(4))
            )),
            EngineEvent::Warning { message } => lines.push(format!("turn {turn:>2}  warning: {message}")),
            _ => {}
        }
    }
}

/// The host's loop for one user turn: prepare, call the model, append its
/// answer, run its tool calls, until an answer without tool calls.
async fn run_turn(
    engine: &Engine,
    text: String,
    counter: &dyn TokenCounter,
    report: &mut Report,
    capsule_seen: &mut Option<String>,
) -> Result<(), AnyError> {
    let cancel = CancellationToken::new();
    engine.append_user(text).await?;
    loop {
        // The barrier runs here: hygiene, at most one compaction, then the
        // request rebuilt from the log. It never exceeds hardLimit.
        let Prepared {
            request,
            compaction,
            ..
        } = engine.prepare(&cancel).await?;
        if compaction.is_some_and(|end| end.checkpoint_id.is_some()) {
            report.capsules += 1;
            *capsule_seen = request.messages.first().map(Message::text);
        }
        report.requests += 1;
        let answer = scripted_model(&request, counter, report.requests);
        report.largest_request = report
            .largest_request
            .max(answer.usage.map_or(0, |usage| usage.prompt()));
        let calls: Vec<ToolUse> = answer.tool_uses().cloned().collect();
        engine.append_assistant(answer).await?;
        if calls.is_empty() {
            return Ok(());
        }
        for call in calls {
            let part = call.input.object().get("part").and_then(|v| v.as_u64());
            let output = read_notes(part.unwrap_or(0));
            engine.append_tool_result(&call.id, output, false).await?;
        }
    }
}

/// Runs ten turns in a new session under `dir`, reopens the log, checks
/// the resumed request and runs one more turn.
pub async fn run(dir: &Path) -> Result<Report, AnyError> {
    let log_path = dir.join("sessions").join("minimal.jsonl");
    let counter = BpeCounter::new(Encoding::O200kBase);
    let engine = Engine::create(&log_path, config())?;
    let mut events = engine.subscribe();
    let mut report = Report {
        log_path: log_path.clone(),
        turns: 0,
        requests: 0,
        largest_request: 0,
        hard_limit: engine.budget().hard_limit().get(),
        barrier_lines: Vec::new(),
        capsules: 0,
        capsule_head: Vec::new(),
        resume_matches: false,
    };
    let mut capsule_text = None;
    for turn in 1..=10 {
        let text = format!("Read part {turn} of the design notes and tell me what it decides.");
        run_turn(&engine, text, &counter, &mut report, &mut capsule_text).await?;
        drain(&mut events, turn, &mut report.barrier_lines);
        report.turns += 1;
    }

    // Resume: what the live session would send next, then the same from a
    // fresh open of the log. Dropping the engine releases the log's lock.
    let live_next = engine.current_request().await;
    drop(engine);
    let engine = Arc::new(Engine::open(&log_path, config())?);
    let mut events = engine.subscribe();
    report.resume_matches = engine.current_request().await == live_next;
    let text = "Summarise every decision so far in one list.".to_owned();
    run_turn(&engine, text, &counter, &mut report, &mut capsule_text).await?;
    report.turns += 1;
    drain(&mut events, report.turns, &mut report.barrier_lines);

    report.capsule_head = capsule_text
        .unwrap_or_default()
        .lines()
        .skip_while(|line| !line.starts_with("## Goal"))
        .filter(|line| !line.trim().is_empty())
        .take(10)
        .map(str::to_owned)
        .collect();
    Ok(report)
}

fn main() -> Result<(), AnyError> {
    // An argument names a directory to keep the session in; without one a
    // temporary directory is used and removed at the end.
    let temporary = tempfile::tempdir()?;
    let kept = std::env::args_os().nth(1).map(std::path::PathBuf::from);
    let dir = kept
        .clone()
        .unwrap_or_else(|| temporary.path().to_path_buf());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(&dir))?;
    println!("{report}");
    if kept.is_none() {
        println!("(a temporary directory, removed at exit: pass a directory to keep the log)");
    }
    Ok(())
}
