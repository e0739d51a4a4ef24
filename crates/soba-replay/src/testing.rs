//! Synthetic sessions for the replay's unit tests: texts of an exact token
//! size under [`Counting::Bytes`] (`ceil(bytes / 4)`), tool calls and
//! results, turns and recorded inferences, and a harness that replays them
//! through chosen policies and hands the runners back for inspection.

use std::path::PathBuf;

use serde_json::{Value, json};
use soba_core::budget::Budget;
use soba_core::config::CompactionConfig;
use soba_core::entry::MessageEntry;
use soba_core::{
    Block, Entry, EntryBody, EntryId, IdKind, Message, ResultPart, Role, TokenCount, ToolInput,
    ToolResult, ToolUse, Usage,
};
use soba_store::import::{Format, ImportStats, ImportedSession, Inference};

use super::cost::{CacheMode, CostModel};
use super::policy::{NoneRunner, PeerRunner, PolicyKind, PolicySpec};
use super::probe::ProbeIndex;
use super::run::{self, Ctx, RunOutput, Runner};
use super::soba::SobaRunner;
use super::trace::{Counting, Trace, TraceOptions};

/// Returns a text of exactly `tokens` tokens under byte counting, starting
/// with `tag` (so texts stay distinct and findable).
pub fn text(tag: &str, tokens: u64) -> String {
    let bytes = (tokens * 4) as usize;
    let mut out = String::with_capacity(bytes);
    out.push_str(tag);
    out.push(' ');
    while out.len() < bytes {
        out.push('x');
    }
    out.truncate(bytes);
    out
}

/// A scripted session.
#[derive(Debug, Default)]
pub struct Script {
    entries: Vec<Entry>,
    inferences: Vec<Inference>,
    calls: u64,
    /// Milliseconds between recorded responses (0: no timestamps).
    pub step_ms: i64,
}

impl Script {
    /// Returns an empty script without timestamps.
    pub fn new() -> Self {
        Script::default()
    }

    fn push(&mut self, message: Message) -> usize {
        let idx = self.entries.len();
        self.entries.push(Entry {
            id: EntryId::from_uuid(IdKind::Entry, idx as u128 + 1),
            parent_id: idx
                .checked_sub(1)
                .map(|parent| EntryId::from_uuid(IdKind::Entry, parent as u128 + 1)),
            timestamp: String::new(),
            body: EntryBody::Message(MessageEntry {
                message,
                tokens: None,
            }),
        });
        idx
    }

    fn infer(&mut self, idx: usize, usage: Option<u64>) {
        let n = self.inferences.len() as i64;
        let timestamp = (self.step_ms > 0).then(|| {
            jiff::Timestamp::from_millisecond(1_700_000_000_000 + n * self.step_ms)
                .map(|ts| ts.to_string())
                .unwrap_or_default()
        });
        self.inferences.push(Inference {
            first_entry: idx,
            last_entry: idx,
            usage: usage.map(|prompt| Usage {
                input: prompt,
                ..Usage::default()
            }),
            timestamp,
            model: None,
            response_id: None,
        });
    }

    /// Records `ms` after the script's epoch as the time of entry `idx`.
    pub fn stamp(&mut self, idx: usize, ms: i64) {
        self.entries[idx].timestamp = jiff::Timestamp::from_millisecond(1_700_000_000_000 + ms)
            .map(|ts| ts.to_string())
            .unwrap_or_default();
    }

    /// Appends a real user message of `tokens` text tokens; returns its entry.
    pub fn user(&mut self, tag: &str, tokens: u64) -> usize {
        self.push(Message::user(text(tag, tokens)))
    }

    /// Appends a real user message with this text.
    pub fn user_text(&mut self, body: &str) -> usize {
        self.push(Message::user(body))
    }

    /// Appends an assistant message (one inference) calling `tool` with
    /// `input`; returns the call id.
    pub fn call(&mut self, tool: &str, input: Value) -> String {
        self.calls += 1;
        let id = format!("c{}", self.calls);
        let message = Message::new(
            Role::Assistant,
            vec![Block::ToolUse(ToolUse {
                id: id.clone(),
                name: tool.to_owned(),
                input: ToolInput::from_value(input),
            })],
        );
        let idx = self.push(message);
        self.infer(idx, None);
        id
    }

    /// Appends the result of call `id`.
    pub fn result(&mut self, id: &str, body: &str, is_error: bool) -> usize {
        self.push(Message::new(
            Role::Tool,
            vec![Block::ToolResult(ToolResult {
                tool_use_id: id.to_owned(),
                content: vec![ResultPart::Text(body.to_owned())],
                is_error,
            })],
        ))
    }

    /// One tool step: a `read` of `path` answered with `tokens` tokens.
    pub fn read(&mut self, path: &str, tokens: u64) -> usize {
        let id = self.call("read", json!({ "path": path }));
        self.result(&id, &text(path, tokens), false)
    }

    /// Appends an assistant text answer (one inference, ends the turn).
    pub fn answer(&mut self, body: &str) -> usize {
        let idx = self.push(Message::assistant(body));
        self.infer(idx, None);
        idx
    }

    /// Appends a `system`-role message of `tokens` text tokens (pinned: it
    /// joins message 0 of every request).
    pub fn system(&mut self, tag: &str, tokens: u64) -> usize {
        self.push(Message::new(
            Role::System,
            vec![Block::Text(text(tag, tokens))],
        ))
    }

    /// Returns the imported session.
    pub fn session(&self) -> ImportedSession {
        ImportedSession {
            format: Format::PiV1,
            source: PathBuf::from("synthetic.jsonl"),
            original_id: "synthetic".to_owned(),
            cwd: Some("/work".to_owned()),
            created_at: None,
            model: Some("gpt-5".to_owned()),
            context_window: None,
            system_prompt: None,
            system_prompt_in_entries: false,
            tool_schemas: Vec::new(),
            entries: self.entries.clone(),
            inferences: self.inferences.clone(),
            stats: ImportStats::default(),
        }
    }

    /// Prepares the trace with byte counting.
    pub fn trace(&self, window: u64, max_output: u64) -> Trace {
        Trace::prepare(
            "synthetic".to_owned(),
            self.session(),
            &TraceOptions {
                window: Some(window),
                max_output: Some(max_output),
                cache: Some(CacheMode::Anthropic),
                image_tokens: TokenCount::new(1_100),
                counting: Counting::Bytes,
                registry: Default::default(),
            },
        )
        .expect("a synthetic trace prepares")
    }
}

/// Replays `trace` through `specs` and calls `check` with the context, the
/// runners (as they are after the last step) and the recorded figures.
pub fn with_run<R>(
    trace: &Trace,
    specs: &[PolicySpec],
    config: &CompactionConfig,
    check: impl FnOnce(&Ctx<'_>, &[Box<dyn Runner + '_>], &RunOutput) -> R,
) -> R {
    let budget = Budget::compute(
        TokenCount::new(trace.window),
        TokenCount::new(trace.max_output),
        config,
    )
    .expect("a valid budget");
    let index = ProbeIndex::build(trace);
    let cost = CostModel {
        mode: trace.cache,
        openai_read: 0.1,
        ttl_ms: 300_000,
        summarizer_price: 0.33,
    };
    let ctx = Ctx::new(trace, &index, cost, config, budget.auto_limit());
    let steps = trace.steps.len();
    let mut runners: Vec<Box<dyn Runner + '_>> = specs
        .iter()
        .map(|spec| -> Box<dyn Runner + '_> {
            match spec.kind {
                PolicyKind::None => Box::new(NoneRunner::new(steps)),
                PolicyKind::Soba => Box::new(SobaRunner::new(&ctx, config.clone(), budget)),
                _ => Box::new(PeerRunner::new(
                    *spec,
                    trace.window,
                    trace.max_output,
                    steps,
                )),
            }
        })
        .collect();
    let output = run::run(&ctx, &mut runners);
    check(&ctx, &runners, &output)
}

/// Returns the `none` input size at each step of a trace (full history).
pub fn none_sizes(trace: &Trace) -> Vec<u64> {
    trace
        .full_history_local()
        .iter()
        .enumerate()
        .map(|(step, &local)| trace.step_calibration(step).apply(local))
        .collect()
}

/// Returns the first step whose full-history input is at least `tokens`.
pub fn first_step_at(trace: &Trace, tokens: u64) -> Option<usize> {
    none_sizes(trace).iter().position(|&size| size >= tokens)
}
