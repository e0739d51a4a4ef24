//! Property tests of the model-input rebuild and the planner (SPEC §17,
//! STYLE "Tests"), over generated sessions counted with the fast
//! `ByteCounter` (`ceil(bytes / 4)`). `PROPTEST_CASES` sets the number of
//! cases (256 in CI, ≥ 2,000 locally).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use soba_core::budget::Budget;
use soba_core::calibration::Factor;
use soba_core::capsule::{Capsule, CapsuleState, LocalSections, Narrative, Quality, Trigger};
use soba_core::command::shown_key;
use soba_core::config::CompactionConfig;
use soba_core::entry::{
    CheckpointKind, ContextEntry, ContextSource, Entry, EntryBody, MessageEntry,
};
use soba_core::facts::{self, FactsConfig, FactsInput};
use soba_core::hygiene::{self, HygieneConfig, HygieneDecision};
use soba_core::id::{EntryId, IdKind};
use soba_core::input::{InputConfig, InputMessage, InputOrigin, InputSetup, LiveInput, ResultInfo};
use soba_core::message::{Block, Image, ImageSource, Message, Role, ToolInput, ToolUse};
use soba_core::plan::{self, Plan, PlanError, PlanRequest, SkipReason};
use soba_core::tokens::{ByteCounter, TokenCount};
use soba_core::unit;

/// A linear session path with deterministic ids.
#[derive(Debug, Clone, Default)]
pub(crate) struct Session {
    pub(crate) path: Vec<Entry>,
    next: u128,
}

impl Session {
    pub(crate) fn push(&mut self, body: EntryBody) -> EntryId {
        self.next += 1;
        let kind = if matches!(body, EntryBody::Capsule(_)) {
            IdKind::Capsule
        } else {
            IdKind::Entry
        };
        let id = EntryId::from_uuid(kind, self.next);
        let parent_id = self.path.last().map(|entry| entry.id.clone());
        self.path.push(Entry {
            id: id.clone(),
            parent_id,
            timestamp: String::new(),
            body,
        });
        id
    }

    pub(crate) fn message(&mut self, message: Message) -> EntryId {
        self.push(EntryBody::Message(MessageEntry {
            message,
            tokens: None,
        }))
    }

    pub(crate) fn user(&mut self, text: impl Into<String>) -> EntryId {
        self.message(Message::user(text))
    }

    pub(crate) fn assistant(&mut self, text: impl Into<String>) -> EntryId {
        self.message(Message::assistant(text))
    }

    /// Appends an assistant message making one call per `(call id, tool,
    /// arguments)`.
    pub(crate) fn calls(&mut self, calls: &[(&str, &str, Value)]) -> EntryId {
        let blocks = calls
            .iter()
            .map(|(id, name, args)| {
                Block::ToolUse(ToolUse {
                    id: (*id).to_owned(),
                    name: (*name).to_owned(),
                    input: ToolInput::from_value(args.clone()),
                })
            })
            .collect();
        self.message(Message::new(Role::Assistant, blocks))
    }

    pub(crate) fn result(
        &mut self,
        call_id: &str,
        text: impl Into<String>,
        is_error: bool,
    ) -> EntryId {
        self.message(Message::tool_result(call_id, text, is_error))
    }

    /// Appends a capsule applying `plan`, with `state` as the pinned state
    /// in force and a rendered size of `capsule_tokens` (message overhead
    /// included) under the markdown renderer.
    pub(crate) fn apply(&mut self, live: &LiveInput, plan: &Plan, capsule_tokens: u64) -> EntryId {
        let pinned = live.pinned_state();
        let markdown = "c".repeat((capsule_tokens.saturating_sub(4) * 4) as usize);
        let capsule = Capsule {
            trigger: plan.trigger,
            quality: Quality::Full,
            first_kept_entry_id: plan.first_kept_entry_id.clone(),
            boundary_truncation: plan.boundary_truncation.clone(),
            tokens_before: plan.effective,
            tokens_after: TokenCount::ZERO,
            summarizer: "deterministic".into(),
            previous_capsule_id: plan.previous_capsule_id.clone(),
            state: CapsuleState {
                skills: pinned.skills,
                pinned_agents_md: pinned.agents_md,
                pinned_system: pinned.system_messages,
                ..CapsuleState::default()
            },
            instructions: None,
            native: None,
            overflow: None,
            imported: None,
            scope: None,
            narrative: Narrative {
                goal: "keep going".into(),
                ..Narrative::default()
            },
            earlier_narrative: None,
            rehydrated: Default::default(),
            local: LocalSections::default(),
            markdown,
        };
        self.push(EntryBody::Capsule(Box::new(capsule)))
    }
}

/// A setup counting with `ByteCounter` and rendering a capsule as its
/// markdown.
pub(crate) fn setup(budget: &Budget, protected: &[&str]) -> InputSetup {
    InputSetup::new(
        Arc::new(ByteCounter),
        InputConfig {
            max_tool_result_tokens: budget.max_tool_result_tokens(),
            image_tokens: TokenCount::new(1_100),
            protected_tools: protected.iter().map(|tool| (*tool).to_owned()).collect(),
        },
    )
    .with_system_prompt("You are SOBA, a coding agent.")
    .with_tool_schemas(vec![
        json!({"name": "bash", "parameters": {"command": "string"}}),
    ])
    .with_renderer(Arc::new(|capsule: &Capsule| capsule.markdown.clone()))
}

pub(crate) fn budget(window: u64, max_output: u64, config: &CompactionConfig) -> Budget {
    Budget::compute(TokenCount::new(window), TokenCount::new(max_output), config)
        .expect("a valid budget")
}

/// Asserts that every tool call of the input is answered exactly once,
/// right after it, and that every result answers such a call.
pub(crate) fn assert_paired(messages: &[InputMessage<'_>]) -> Result<(), TestCaseError> {
    let mut open: Option<Vec<String>> = None;
    for message in messages {
        let results: Vec<&str> = message
            .message
            .tool_results()
            .map(|result| result.tool_use_id.as_str())
            .collect();
        if results.is_empty() {
            if let Some(unanswered) = open.take() {
                prop_assert!(
                    unanswered.is_empty(),
                    "calls {unanswered:?} unanswered before {:?}",
                    message.source
                );
            }
            let calls: Vec<String> = message
                .message
                .tool_uses()
                .map(|call| call.id.clone())
                .collect();
            if !calls.is_empty() {
                prop_assert_eq!(message.message.role, Role::Assistant);
                open = Some(calls);
            }
        } else {
            let Some(unanswered) = open.as_mut() else {
                return Err(TestCaseError::fail(format!(
                    "result without a call in {:?}",
                    message.source
                )));
            };
            for id in results {
                let Some(at) = unanswered.iter().position(|call| call == id) else {
                    return Err(TestCaseError::fail(format!(
                        "unpaired result {id} in {:?}",
                        message.source
                    )));
                };
                unanswered.remove(at);
            }
        }
    }
    if let Some(unanswered) = open {
        prop_assert!(
            unanswered.is_empty(),
            "calls {unanswered:?} unanswered at the end"
        );
    }
    Ok(())
}

/// One generated thing to append.
#[derive(Debug, Clone)]
enum Step {
    User(usize),
    Assistant(usize),
    /// One result per call: `(result chars, tool, is_error, missing)`.
    Batch(Vec<(usize, usize, bool, bool)>),
    StrayResult,
    System(usize),
    CapsuleFile(usize),
    Checkpoint,
    ImageMessage,
    /// One tool batch of shell commands, Codex polls and edits.
    Calls(Vec<Call>),
}

/// The workspace root of generated sessions.
const ROOT: &str = "/w";
const COMMANDS: [&str; 3] = ["cargo test", "make", "./run_tests.sh"];
const DIRS: [&str; 3] = ["", "backend", "frontend"];

/// What a generated call's result says.
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// Codex's `Process exited with code N`.
    Exit(u8),
    /// Codex's `Process running with session ID N`.
    Running(u32),
    /// A result flagged `isError`.
    Flagged,
    /// No result: the orphan sweep answers it.
    Missing,
}

/// One generated tool call with its result.
#[derive(Debug, Clone)]
enum Call {
    /// A command of [`COMMANDS`] in a directory of [`DIRS`], written in
    /// one of four agents' styles.
    Shell {
        command: usize,
        dir: usize,
        style: usize,
        reply: Reply,
    },
    /// A Codex `write_stdin` poll of a session.
    Poll { session: u32, reply: Reply },
    /// An edit of one of two files.
    Edit { file: usize, reply: Reply },
}

fn reply_strategy() -> impl Strategy<Value = Reply> {
    prop_oneof![
        3 => (0u8..2).prop_map(Reply::Exit),
        2 => (1u32..4).prop_map(Reply::Running),
        1 => Just(Reply::Flagged),
        1 => Just(Reply::Missing),
    ]
}

fn call_strategy() -> impl Strategy<Value = Call> {
    prop_oneof![
        4 => (0usize..3, 0usize..3, 0usize..4, reply_strategy()).prop_map(
            |(command, dir, style, reply)| Call::Shell { command, dir, style, reply }
        ),
        3 => (1u32..4, reply_strategy()).prop_map(|(session, reply)| Call::Poll { session, reply }),
        1 => (0usize..2, reply_strategy()).prop_map(|(file, reply)| Call::Edit { file, reply }),
    ]
}

impl Call {
    fn tool_and_args(&self) -> (&'static str, Value) {
        match *self {
            Call::Shell {
                command,
                dir,
                style,
                ..
            } => {
                let (command, dir) = (COMMANDS[command], DIRS[dir]);
                let absolute = if dir.is_empty() {
                    ROOT.to_owned()
                } else {
                    format!("{ROOT}/{dir}")
                };
                match style {
                    0 if dir.is_empty() => ("bash", json!({ "command": command })),
                    0 => (
                        "bash",
                        json!({ "command": format!("cd {dir} && {command}") }),
                    ),
                    1 => (
                        "exec_command",
                        json!({ "cmd": command, "workdir": absolute }),
                    ),
                    2 => (
                        "shell",
                        json!({ "command": ["bash", "-lc", command], "workdir": dir }),
                    ),
                    _ => (
                        "Bash",
                        json!({ "command": format!("cd {absolute} &&  {command}") }),
                    ),
                }
            }
            Call::Poll { session, .. } => {
                ("write_stdin", json!({ "session_id": session, "chars": "" }))
            }
            Call::Edit { file, .. } => ("edit_file", json!({ "path": format!("src/f{file}.rs") })),
        }
    }

    fn reply(&self) -> Reply {
        match *self {
            Call::Shell { reply, .. } | Call::Poll { reply, .. } | Call::Edit { reply, .. } => {
                reply
            }
        }
    }
}

/// Appends one tool batch making `calls`, then a result message for each
/// that has one.
fn append_calls(session: &mut Session, calls: &[Call]) {
    let seed = session.path.len();
    let ids: Vec<String> = (0..calls.len()).map(|n| format!("run{seed}_{n}")).collect();
    let specs: Vec<(String, &str, Value)> = calls
        .iter()
        .zip(&ids)
        .map(|(call, id)| {
            let (tool, args) = call.tool_and_args();
            (id.clone(), tool, args)
        })
        .collect();
    let specs: Vec<(&str, &str, Value)> = specs
        .iter()
        .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
        .collect();
    session.calls(&specs);
    for (call, id) in calls.iter().zip(&ids) {
        let body = "log line\n".repeat(40);
        match call.reply() {
            Reply::Exit(code) => {
                session.result(
                    id,
                    format!("Process exited with code {code}\nOutput:\n{body}"),
                    false,
                );
            }
            Reply::Running(n) => {
                session.result(
                    id,
                    format!("Process running with session ID {n}\nOutput:\n{body}"),
                    false,
                );
            }
            Reply::Flagged => {
                session.result(id, format!("error: it broke\n{body}"), true);
            }
            Reply::Missing => {}
        }
    }
}

const TOOLS: [&str; 4] = ["bash", "read_file", "edit_file", "keep"];

fn text(chars: usize, seed: usize) -> String {
    // Mixed widths so that character and byte offsets differ.
    const PATTERN: &str = "lorem ipsum dolor é sit amet — 合 ";
    PATTERN
        .chars()
        .cycle()
        .skip(seed % 7)
        .take(chars.max(1))
        .collect()
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let size = prop_oneof![8 => 1usize..2_000, 3 => 2_000usize..8_000, 1 => 8_000usize..40_000];
    let result = (
        prop_oneof![4 => 1usize..4_000, 1 => 4_000usize..30_000],
        0usize..4,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.05),
    );
    prop_oneof![
        6 => size.clone().prop_map(Step::User),
        3 => size.clone().prop_map(Step::Assistant),
        8 => prop::collection::vec(result, 1..4).prop_map(Step::Batch),
        3 => prop::collection::vec(call_strategy(), 1..3).prop_map(Step::Calls),
        1 => Just(Step::StrayResult),
        1 => (1usize..400).prop_map(Step::System),
        1 => (1usize..2_000).prop_map(Step::CapsuleFile),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::ImageMessage),
    ]
}

fn append(session: &mut Session, step: &Step) {
    let seed = session.path.len();
    match step {
        Step::User(chars) => {
            session.user(text(*chars, seed));
        }
        Step::Assistant(chars) => {
            session.assistant(text(*chars, seed));
        }
        Step::Batch(calls) => {
            let ids: Vec<String> = (0..calls.len())
                .map(|n| format!("call{seed}_{n}"))
                .collect();
            let specs: Vec<(&str, &str, Value)> = calls
                .iter()
                .zip(&ids)
                .map(|((_, tool, _, _), id)| {
                    let args = match TOOLS[*tool] {
                        "bash" => json!({"command": format!("cargo test {}", seed % 3)}),
                        name => json!({"path": format!("src/{name}_{}.rs", seed % 2)}),
                    };
                    (id.as_str(), TOOLS[*tool], args)
                })
                .collect();
            session.calls(&specs);
            for ((chars, _, is_error, missing), id) in calls.iter().zip(&ids) {
                if !missing {
                    session.result(id, text(*chars, seed), *is_error);
                }
            }
        }
        Step::StrayResult => {
            session.result("nobody", "stray output", false);
        }
        Step::System(chars) => {
            session.message(Message::new(
                Role::System,
                vec![Block::Text(text(*chars, seed))],
            ));
        }
        Step::CapsuleFile(chars) => {
            session.push(EntryBody::Context(ContextEntry {
                source: ContextSource::CapsuleFile,
                path: "notes.capsule.md".into(),
                sha256: "00".into(),
                text: text(*chars, seed),
            }));
        }
        Step::Checkpoint => {
            session.push(EntryBody::Checkpoint {
                kind: CheckpointKind::Milestone,
                note: "step".into(),
            });
        }
        Step::ImageMessage => {
            let image = Image {
                media_type: "image/png".into(),
                source: ImageSource::Data("AAAA".into()),
            };
            session.message(Message::new(
                Role::User,
                vec![Block::Text("see".into()), Block::Image(image)],
            ));
        }
        Step::Calls(calls) => append_calls(session, calls),
    }
}

/// What a round does after appending.
#[derive(Debug, Clone)]
struct Round {
    steps: Vec<Step>,
    /// Rewind this many entries before compacting (0: none).
    rewind: usize,
    trigger: Trigger,
    /// Where the capsule's size falls inside its budget (0..=100 %).
    capsule_share: u64,
    hygiene: bool,
}

fn round_strategy() -> impl Strategy<Value = Round> {
    (
        prop::collection::vec(step_strategy(), 1..14),
        prop_oneof![4 => Just(0usize), 1 => 1usize..6],
        prop_oneof![
            Just(Trigger::User),
            Just(Trigger::HardLimit),
            Just(Trigger::AutoThreshold),
            Just(Trigger::ContextOverflow),
        ],
        0u64..=100,
        prop::bool::weighted(0.3),
    )
        .prop_map(|(steps, rewind, trigger, capsule_share, hygiene)| Round {
            steps,
            rewind,
            trigger,
            capsule_share,
            hygiene,
        })
}

#[derive(Debug, Clone)]
struct Limits {
    window: u64,
    max_output: u64,
    keep_recent: u64,
    summarizer_max_output: u64,
    facts: u64,
}

fn limits_strategy() -> impl Strategy<Value = Limits> {
    (
        8_000u64..60_000,
        500u64..3_000,
        256u64..8_000,
        100u64..6_000,
        0u64..3_000,
    )
        .prop_map(
            |(window, max_output, keep_recent, summarizer_max_output, facts)| Limits {
                window,
                max_output,
                keep_recent,
                summarizer_max_output,
                facts,
            },
        )
}

fn config_of(limits: &Limits) -> CompactionConfig {
    CompactionConfig {
        keep_recent_tokens: TokenCount::new(limits.keep_recent),
        safety_reserve_tokens: TokenCount::new(1_000),
        min_tokens_for_auto_compact: TokenCount::new(1_000),
        min_reclaimable_tokens: TokenCount::new(500),
        max_working_set_tokens: None,
        min_hygiene_tokens: TokenCount::new(1_000),
        hygiene_keep_messages: 4,
        ..CompactionConfig::default()
    }
}

/// The entries a keep window held, with each message as it was sent.
type Window = Vec<(EntryId, Message)>;

fn window_of(live: &LiveInput) -> Window {
    live.view()
        .messages
        .iter()
        .filter(|message| message.origin != InputOrigin::SyntheticResult)
        .map(|message| (message.source.clone(), message.message.clone()))
        .collect()
}

fn position(path: &[Entry], id: &EntryId) -> Option<usize> {
    path.iter().position(|entry| &entry.id == id)
}

/// Checks the laws of one plan against the input it was made from, then
/// applies it and checks the rebuilt input.
fn check_plan(
    session: &mut Session,
    live: &mut LiveInput,
    budget: &Budget,
    limits: &Limits,
    round: &Round,
    kept: &mut Option<(EntryId, Window)>,
) -> Result<(), TestCaseError> {
    let request = PlanRequest {
        trigger: round.trigger,
        effective: live.total_tokens(),
        budget,
        summarizer_max_output_tokens: TokenCount::new(limits.summarizer_max_output),
        facts_tokens: TokenCount::new(limits.facts),
        rehydrate_tokens: soba_core::TokenCount::ZERO,
        factor: Factor::ONE,
    };
    let planned = plan::plan(live, &request);
    // Idempotent: the same input gives the same plan.
    prop_assert_eq!(&planned, &plan::plan(live, &request));
    let fit_limit = if round.trigger == Trigger::ContextOverflow {
        budget.auto_limit()
    } else {
        budget.hard_limit()
    };
    let view = live.view();
    let units = unit::units(&view.messages);
    let plan = match planned {
        Ok(plan) => plan,
        Err(PlanError::NewestUnitTooLarge {
            unit_tokens, limit, ..
        }) => {
            prop_assert_eq!(Some(unit_tokens), units.last().map(|unit| unit.tokens));
            prop_assert!(unit_tokens > limit);
            return Ok(());
        }
        Err(PlanError::NoRoomForNewestUnit {
            unit_tokens,
            fixed_tokens,
            capsule_budget,
            limit,
            ..
        }) => {
            prop_assert_eq!(Some(unit_tokens), units.last().map(|unit| unit.tokens));
            prop_assert!(unit_tokens + fixed_tokens + capsule_budget > limit);
            return Ok(());
        }
        Err(other) => return Err(TestCaseError::fail(format!("unexpected error {other}"))),
    };
    prop_assert!(
        plan.fixed_tokens + plan.capsule_budget + plan.tail_tokens <= fit_limit || units.is_empty()
    );

    // The boundary is a unit's first entry: never inside a tool batch.
    if let Some(first) = &plan.first_kept_entry_id {
        prop_assert!(
            units.iter().any(|unit| &unit.first_entry_id == first),
            "boundary {first} inside a unit"
        );
        let first_message = view.messages.iter().find(|message| message.source == first);
        prop_assert!(first_message.is_some_and(|message| !message.is_result()));
    }
    // Every live message is summarized or retained, never both; a cut
    // straddler (its middle summarized now or by the previous capsule) is
    // not retained.
    let span: HashSet<&EntryId> = plan.span_entry_ids.iter().collect();
    let retained: HashSet<&EntryId> = plan.retained_entry_ids.iter().collect();
    prop_assert!(span.is_disjoint(&retained));
    for message in view
        .messages
        .iter()
        .filter(|message| message.origin != InputOrigin::SyntheticResult)
    {
        let is_cut = plan
            .boundary_truncation
            .as_ref()
            .is_some_and(|cut| &cut.entry_id == message.source);
        prop_assert!(span.contains(message.source) || retained.contains(message.source) || is_cut);
        prop_assert!(!(is_cut && retained.contains(message.source)));
    }
    // firstKeptEntryId never moves backwards on the path.
    let previous_first = view
        .capsule
        .as_ref()
        .and_then(|capsule| capsule.capsule.first_kept_entry_id.clone());
    if let (Some(new), Some(old)) = (&plan.first_kept_entry_id, &previous_first)
        && let (Some(new_at), Some(old_at)) =
            (position(&session.path, new), position(&session.path, old))
    {
        prop_assert!(new_at >= old_at, "boundary moved back from {old} to {new}");
        if new_at == old_at
            && let (Some(new_cut), Some(old_cut)) = (
                &plan.boundary_truncation,
                view.capsule
                    .as_ref()
                    .and_then(|capsule| capsule.capsule.boundary_truncation.as_ref()),
            )
        {
            prop_assert!(
                new_cut.head_chars <= old_cut.head_chars
                    && new_cut.tail_chars <= old_cut.tail_chars
            );
        }
    }
    // Nothing the previous compaction kept vanishes: each entry of its
    // keep window is in the span or still in the input, verbatim unless
    // stubbed or cut.
    if let Some((capsule_id, window)) = kept.as_ref()
        && view
            .capsule
            .as_ref()
            .is_some_and(|capsule| capsule.id == capsule_id)
    {
        let span: HashSet<&EntryId> = plan.span_entry_ids.iter().collect();
        let boundary_at = plan
            .first_kept_entry_id
            .as_ref()
            .and_then(|id| position(&session.path, id));
        for (id, message) in window {
            let at = position(&session.path, id);
            let in_tail = match (at, boundary_at) {
                (Some(at), Some(boundary)) => at >= boundary,
                _ => false,
            };
            prop_assert!(
                span.contains(id) || in_tail,
                "{id} kept by the previous capsule vanished"
            );
            if in_tail && !span.contains(id) {
                let now = view.messages.iter().find(|candidate| {
                    candidate.source == id && candidate.origin != InputOrigin::SyntheticResult
                });
                prop_assert!(now.is_some(), "{id} missing from the input");
                if let Some(now) = now
                    && !now.rewrites.stubbed
                    && !now.rewrites.truncated
                {
                    prop_assert_eq!(now.message, message, "{} changed", id);
                }
            }
        }
    }
    drop(view);

    if plan.skip.is_some() {
        if plan.skip == Some(SkipReason::NothingToCompact) {
            prop_assert!(plan.span_entry_ids.is_empty());
        }
        return Ok(());
    }
    // Apply the plan with a capsule inside its budget, then rebuild.
    let capsule_budget = plan.capsule_budget.get();
    let capsule_tokens =
        (4 + (capsule_budget.saturating_sub(4)) * round.capsule_share / 100).min(capsule_budget);
    let capsule_id = session.apply(live, &plan, capsule_tokens);
    live.extend(&session.path);
    let rebuilt = LiveInput::build(live.setup().clone(), &session.path);
    prop_assert_eq!(rebuilt.total_tokens(), live.total_tokens());
    let view = live.view();
    assert_paired(&view.messages)?;
    let tail: TokenCount = view.messages.iter().map(|message| message.tokens).sum();
    prop_assert_eq!(
        tail,
        plan.tail_tokens,
        "the rebuilt tail is the planned one"
    );
    prop_assert!(
        live.total_tokens() <= fit_limit || plan.first_kept_entry_id.is_none(),
        "input {} > limit {}",
        live.total_tokens(),
        fit_limit
    );
    // Planning again right away finds nothing before the keep window.
    let again = plan::plan(
        live,
        &PlanRequest {
            trigger: Trigger::User,
            effective: live.total_tokens(),
            ..request
        },
    );
    if let Ok(again) = again {
        prop_assert_eq!(again.skip, Some(SkipReason::NothingToCompact), "{}", again);
        prop_assert_eq!(&again.first_kept_entry_id, &plan.first_kept_entry_id);
        prop_assert_eq!(&again.boundary_truncation, &plan.boundary_truncation);
    }
    *kept = Some((capsule_id, window_of(live)));
    Ok(())
}

/// Every result the input carries, with its key, outcome and stub flag.
fn result_infos(live: &LiveInput) -> Vec<ResultInfo> {
    live.view()
        .messages
        .iter()
        .flat_map(|message| message.results.iter().cloned())
        .collect()
}

fn run_rounds(limits: &Limits, rounds: &[Round]) -> Result<(), TestCaseError> {
    let config = config_of(limits);
    let Ok(budget) = Budget::compute(
        TokenCount::new(limits.window),
        TokenCount::new(limits.max_output),
        &config,
    ) else {
        return Ok(());
    };
    let mut session = Session::default();
    session.user("the original task");
    let mut live = LiveInput::new(setup(&budget, &["keep"]).with_cwd(Some(ROOT.into())));
    let mut kept: Option<(EntryId, Window)> = None;
    let hygiene_config = HygieneConfig::new(&budget, &config);
    for round in rounds {
        for step in &round.steps {
            append(&mut session, step);
            live.extend(&session.path);
        }
        if round.rewind > 0 {
            let keep = session.path.len().saturating_sub(round.rewind).max(1);
            session.path.truncate(keep);
            live.extend(&session.path);
        }
        // The incremental input equals a rebuild, and never pairs badly.
        let rebuilt = LiveInput::build(live.setup().clone(), &session.path);
        prop_assert_eq!(rebuilt.total_tokens(), live.total_tokens());
        prop_assert_eq!(rebuilt.view().total_tokens(), live.total_tokens());
        // So do every result's key, outcome and stub, and the unresolved
        // errors.
        prop_assert_eq!(result_infos(&rebuilt), result_infos(&live));
        prop_assert_eq!(
            rebuilt.unresolved_error_calls(),
            live.unresolved_error_calls()
        );
        assert_paired(&live.view().messages)?;
        // So does a build that empties the entries it reads.
        let mut consumed = session.path.clone();
        let consuming = LiveInput::build_consuming(live.setup().clone(), &mut consumed);
        prop_assert_eq!(consuming.message_tokens(), live.message_tokens());
        prop_assert_eq!(result_infos(&consuming), result_infos(&live));
        // And a measurement that keeps no content counts the same.
        let mut measured = session.path.clone();
        let measure = LiveInput::measure_consuming(live.setup().clone(), &mut measured);
        prop_assert_eq!(&measure.messages, &live.message_tokens());
        prop_assert_eq!(measure.fixed_tokens, live.fixed_tokens());
        prop_assert_eq!(measure.count_sources, live.count_sources());
        // The cached count from a message on equals the listed one.
        let listed = live.message_tokens();
        for entry in &session.path {
            let expected = listed
                .iter()
                .position(|message| message.entry_id.as_ref() == Some(&entry.id))
                .map(|idx| {
                    listed[idx..]
                        .iter()
                        .map(|message| message.tokens)
                        .sum::<TokenCount>()
                });
            prop_assert_eq!(live.tokens_from(&entry.id), expected);
        }
        if round.hygiene
            && let HygieneDecision::Apply(pass) =
                hygiene::plan_hygiene(&live, live.total_tokens(), &hygiene_config)
        {
            let before = live.total_tokens();
            prop_assert!(pass.reclaimed_tokens >= hygiene_config.min_tokens);
            prop_assert!(pass.stubbed.iter().all(|stub| stub.tool != "keep"));
            session.push(pass.entry_body());
            live.extend(&session.path);
            prop_assert_eq!(
                live.total_tokens() + pass.reclaimed_tokens,
                before,
                "hygiene reclaims what it planned"
            );
        }
        check_plan(&mut session, &mut live, &budget, limits, round, &mut kept)?;
    }
    Ok(())
}

/// One generated act of a session checked against the extractor.
#[derive(Debug, Clone)]
enum Act {
    Calls(Vec<Call>),
    User,
    /// A hygiene entry pruning through the newest entry.
    Hygiene,
}

fn act_strategy() -> impl Strategy<Value = Act> {
    prop_oneof![
        8 => prop::collection::vec(call_strategy(), 1..3).prop_map(Act::Calls),
        1 => Just(Act::User),
        1 => Just(Act::Hygiene),
    ]
}

/// Hygiene keeps exactly the errors the extractor lists as unresolved
/// (SPEC §8.1, §9.2), over a session whose every logged result is in the
/// input (no stray or late results: those the sweep drops are not in the
/// input to be kept). The extractor lists one error per key, the newest
/// failure; hygiene keeps every failure after the key's last success. So:
/// the shown keys of hygiene's unresolved results are the extractor's keys,
/// and the newest of them per key carries the extractor's text. None of
/// them is stubbed, whatever hygiene entries came before.
fn check_unresolved(acts: &[Act]) -> Result<(), TestCaseError> {
    let config = CompactionConfig::default();
    let budget = budget(200_000, 32_000, &config);
    let mut session = Session::default();
    session.user("fix the build");
    for act in acts {
        match act {
            Act::Calls(calls) => append_calls(&mut session, calls),
            Act::User => {
                session.user("go on");
            }
            Act::Hygiene => {
                let through = session.path.last().map(|entry| entry.id.clone());
                if let Some(pruned_through) = through {
                    session.push(EntryBody::Hygiene {
                        pruned_through,
                        reclaimed_tokens: TokenCount::ZERO,
                        stubbed_calls: None,
                    });
                }
            }
        }
    }
    let setup = setup(&budget, &[]).with_cwd(Some(ROOT.into()));
    let live = LiveInput::build(setup.clone(), &session.path);
    let mut incremental = LiveInput::new(setup.clone());
    for end in 1..=session.path.len() {
        incremental.extend(&session.path[..end]);
    }
    prop_assert_eq!(result_infos(&incremental), result_infos(&live));
    // A build that empties the entries it reads gives the same input.
    let mut consumed = session.path.clone();
    let consuming = LiveInput::build_consuming(setup.clone(), &mut consumed);
    prop_assert_eq!(result_infos(&consuming), result_infos(&live));
    prop_assert_eq!(consuming.total_tokens(), live.total_tokens());
    prop_assert_eq!(consuming.message_tokens(), live.message_tokens());
    // Hygiene entries look back at earlier results: a measurement that
    // drops content keeps what they read, and counts the same.
    let mut measured = session.path.clone();
    let measure = LiveInput::measure_consuming(setup.clone(), &mut measured);
    prop_assert_eq!(&measure.messages, &live.message_tokens());
    prop_assert_eq!(measure.count_sources, live.count_sources());
    let messages = |input: &LiveInput| -> Vec<soba_core::Message> {
        input
            .view()
            .messages
            .iter()
            .map(|m| m.message.clone())
            .collect()
    };
    prop_assert_eq!(messages(&consuming), messages(&live));

    let logged: HashMap<String, String> = session
        .path
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message(message) => Some(message.message.tool_results()),
            _ => None,
        })
        .flatten()
        .map(|result| (result.tool_use_id.clone(), result.text()))
        .collect();
    let unresolved: HashSet<&str> = live.unresolved_error_calls().into_iter().collect();
    let mut kept: BTreeMap<String, String> = BTreeMap::new();
    for info in result_infos(&live) {
        if unresolved.contains(info.call_id.as_str()) {
            prop_assert!(!info.stubbed, "unresolved {} was stubbed", info.call_id);
            prop_assert!(info.is_error);
            kept.insert(shown_key(info.key.as_str()), logged[&info.call_id].clone());
        }
    }
    let retained = HashSet::new();
    let extracted = facts::extract(
        &FactsInput {
            tail: &[],
            span: &session.path,
            previous: None,
            retained: &retained,
            cwd: Some(ROOT),
        },
        &FactsConfig::default(),
        &ByteCounter,
    );
    let listed: BTreeMap<String, String> = extracted
        .unresolved_errors
        .iter()
        .map(|error| (error.key.clone(), error.text.clone()))
        .collect();
    prop_assert_eq!(listed.len(), extracted.unresolved_errors.len());
    prop_assert_eq!(kept, listed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Hygiene's unresolved errors are the extractor's (see
    /// [`check_unresolved`]).
    #[test]
    fn hygiene_keeps_the_errors_the_extractor_lists(acts in prop::collection::vec(act_strategy(), 1..24)) {
        check_unresolved(&acts)?;
    }

    /// Five compactions in a row, with appends, hygiene and rewinds between:
    /// every plan fits or fails naming the newest unit; no unpaired tool
    /// block; the boundary is never inside a tool batch and never moves
    /// back; nothing kept by one compaction vanishes at the next; planning
    /// is idempotent and a no-op right after a compaction.
    #[test]
    fn compactions_in_a_row_keep_the_laws(limits in limits_strategy(), rounds in prop::collection::vec(round_strategy(), 5)) {
        run_rounds(&limits, &rounds)?;
    }

    /// Under budget — everything inside keepRecent — `/compact` is a no-op.
    #[test]
    fn planning_under_budget_is_a_no_op(steps in prop::collection::vec(step_strategy(), 1..6)) {
        let config = CompactionConfig::default();
        let budget = budget(1_000_000, 64_000, &config);
        let mut session = Session::default();
        for step in &steps {
            append(&mut session, step);
        }
        let live = LiveInput::build(setup(&budget, &[]), &session.path);
        let view = live.view();
        let live_tokens: TokenCount = view.messages.iter().map(|message| message.tokens).sum();
        prop_assume!(live_tokens <= budget.keep_recent());
        let request = PlanRequest {
            trigger: Trigger::User,
            effective: live.total_tokens(),
            budget: &budget,
            summarizer_max_output_tokens: TokenCount::new(2_000),
            facts_tokens: TokenCount::ZERO,
            rehydrate_tokens: soba_core::TokenCount::ZERO,
            factor: Factor::ONE,
        };
        let plan = plan::plan(&live, &request).expect("a small session fits");
        prop_assert_eq!(plan.skip, Some(SkipReason::NothingToCompact));
        prop_assert!(plan.span_entry_ids.is_empty());
    }
}

/// The shrunk case proptest found at 5,000 cases: hygiene stubs a
/// background command's output, two `/compact`s follow.
#[test]
fn a_compaction_after_hygiene_keeps_the_planned_tail() {
    let shell = |command, dir, style, reply| Call::Shell {
        command,
        dir,
        style,
        reply,
    };
    let round = |steps: Vec<Step>, hygiene| Round {
        steps,
        rewind: 0,
        trigger: Trigger::User,
        capsule_share: 0,
        hygiene,
    };
    let limits = Limits {
        window: 14_375,
        max_output: 500,
        keep_recent: 1_248,
        summarizer_max_output: 100,
        facts: 0,
    };
    let rounds = vec![
        round(vec![Step::User(1)], false),
        round(
            vec![Step::Calls(vec![shell(0, 1, 0, Reply::Running(1))])],
            false,
        ),
        round(
            vec![
                Step::Batch(vec![(9_699, 3, false, false), (10_285, 0, false, false)]),
                Step::Calls(vec![
                    shell(0, 1, 1, Reply::Exit(1)),
                    Call::Edit {
                        file: 0,
                        reply: Reply::Exit(0),
                    },
                ]),
                Step::Calls(vec![Call::Poll {
                    session: 1,
                    reply: Reply::Exit(0),
                }]),
                Step::Calls(vec![
                    shell(0, 1, 1, Reply::Running(1)),
                    shell(1, 0, 0, Reply::Exit(0)),
                ]),
            ],
            true,
        ),
        round(vec![Step::User(1)], false),
        round(vec![Step::User(1)], false),
    ];
    run_rounds(&limits, &rounds).unwrap();
}
