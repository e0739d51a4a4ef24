//! Local fact extraction (SPEC §9.2): files read and modified, verification
//! commands, unresolved errors, checkpoints, active skills, the original task,
//! the latest user instructions, plan-tool state and the last assistant text,
//! read from the original entries of a compaction span (never from hygiene
//! stubs), for the tool vocabularies of every supported agent.
//!
//! The model is never trusted for these facts. Modified files come from
//! explicit edit tools only (SPEC §15.3's ground truth): a shell command that
//! writes a file (`cat > f`, `sed -i`) is not counted.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::capsule::{Answer, Capsule, Verification};
pub use crate::capsule::{PlanItem, PlanStatus};
use crate::command::{self, OutcomeTracker, Status, path_arg, shown_key};
use crate::directive;
use crate::entry::{CheckpointKind, ContextSource, Entry, EntryBody, SkillAction};
use crate::id::EntryId;
use crate::message::{Role, ToolUse};
use crate::tokens::{TokenCount, TokenCounter};
// The middle cuts live in `truncate`; these paths stay for the capsule
// builder, the summarizer and the analyzer, which name them here.
pub use crate::truncate::{
    omission_marker, truncate_middle_chars, truncate_middle_lines, truncate_middle_tokens,
};

pub(crate) mod instruction;
pub(crate) mod outcome;
pub(crate) mod shell;
mod verification;

// The submodules' public functions keep their `facts::` paths.
pub use instruction::is_go_on;
pub use outcome::{exit_code, is_failure};
use shell::{basename, is_plain_path, join, strip_prefixes, strip_redirections};
pub use shell::{patch_paths, shell_words, split_commands, workspace_relative};
use verification::same_check;
pub use verification::{check_key, is_verification};

/// `userMessageBudgetTokens`: the latest user instructions fill at most this
/// many tokens (SPEC §9.1).
pub const USER_MESSAGE_BUDGET: TokenCount = TokenCount::new(4_000);

/// The last assistant text kept for "In progress" (SPEC §9.4).
pub const LAST_ASSISTANT_TOKENS: TokenCount = TokenCount::new(300);

/// An instruction is only middle-truncated into the remaining budget when at
/// least this many tokens remain; a smaller remainder would hold little more
/// than the omission marker.
pub const MIN_TRUNCATED_INSTRUCTION: TokenCount = TokenCount::new(64);

/// Settings of the extractor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FactsConfig {
    /// `userMessageBudgetTokens` (default 4,000).
    pub user_message_budget: TokenCount,
}

impl Default for FactsConfig {
    fn default() -> Self {
        FactsConfig {
            user_message_budget: USER_MESSAGE_BUDGET,
        }
    }
}

/// What the extractor reads.
#[derive(Debug, Clone, Copy)]
pub struct FactsInput<'a> {
    /// The span in path order, with ORIGINAL tool results (not hygiene
    /// stubs); a truncated straddler is given whole.
    pub span: &'a [Entry],
    /// The previous capsule on the path, whose facts are carried forward.
    pub previous: Option<&'a Capsule>,
    /// Entries of the new retained tail kept whole; real user messages among
    /// them are not repeated as instructions. A truncated straddler is not
    /// "retained" (SPEC §8.2) and must not be in this set.
    pub retained: &'a HashSet<EntryId>,
    /// The workspace root, stripped from absolute paths.
    pub cwd: Option<&'a str>,
    /// The entries after the span on the path (the retained tail): read
    /// only for a newer plan, so a capsule never lists as open a step the
    /// tail already marks done.
    pub tail: &'a [Entry],
}

/// Where a plan came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanSource {
    /// Claude Code `TodoWrite` (or Gemini CLI `write_todos`).
    TodoWrite,
    /// Codex `update_plan`.
    UpdatePlan,
    /// Carried from the previous capsule.
    Carried,
}

/// The latest plan-tool state in a span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanState {
    /// The tool that set it.
    pub source: PlanSource,
    /// Codex's `explanation`, when given.
    pub explanation: Option<String>,
    /// The steps, in the tool's order.
    pub items: Vec<PlanItem>,
}

impl PlanState {
    /// Returns the steps not yet completed, in order.
    pub fn open_items(&self) -> impl Iterator<Item = &PlanItem> {
        self.items
            .iter()
            .filter(|item| item.status != PlanStatus::Completed)
    }

    /// Returns the next steps: every step in progress, then the first
    /// pending one.
    pub fn next_items(&self) -> Vec<&PlanItem> {
        let mut next: Vec<&PlanItem> = self
            .items
            .iter()
            .filter(|item| item.status == PlanStatus::InProgress)
            .collect();
        if let Some(first_pending) = self
            .items
            .iter()
            .find(|item| item.status == PlanStatus::Pending)
        {
            next.push(first_pending);
        }
        next
    }
}

/// A failing tool result not yet followed by a success of the same
/// normalised command, or of the same tool on the same path
/// ([`crate::command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedError {
    /// The [`command::error_key`] as shown ([`command::shown_key`]): `$
    /// <command>` for shell commands, `<tool> <path>` for file tools, else
    /// the tool with its arguments; one line, at most ~230 characters.
    pub key: String,
    /// The result text as returned (not yet bounded).
    pub text: String,
}

impl UnresolvedError {
    /// Returns the form stored in a capsule: the key on the first line, the
    /// result text after it.
    pub fn to_stored(&self) -> String {
        if self.text.is_empty() {
            self.key.clone()
        } else {
            format!("{}\n{}", self.key, self.text)
        }
    }

    /// Parses the stored form written by [`UnresolvedError::to_stored`].
    pub fn from_stored(stored: &str) -> Self {
        match stored.split_once('\n') {
            Some((key, text)) => UnresolvedError {
                key: key.to_owned(),
                text: text.to_owned(),
            },
            None => UnresolvedError {
                key: stored.to_owned(),
                text: String::new(),
            },
        }
    }
}

/// Everything extracted from a span, merged with what the previous capsule
/// carried. Lists are not yet bounded: the builder applies SPEC §9.4.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Facts {
    /// The first real user message of the session that asks for work
    /// ([`directive::is_task`]: a greeting is not one), in full (carried
    /// from the previous capsule when it has one).
    pub original_task: Option<String>,
    /// The newest message that redirected the work away from the original
    /// task ([`directive::is_redirect`]), in full, or the one the previous
    /// capsule carried; `None` while the original task is the goal.
    pub goal: Option<String>,
    /// Constraints from real user messages and `AGENTS.md`/`CLAUDE.md`,
    /// verbatim, each once, oldest first: the previous capsule's, then the
    /// span's. Not yet bounded.
    pub constraints: Vec<String>,
    /// Constraints an earlier capsule's budget already left out.
    pub constraints_hidden: u64,
    /// Real user messages outside the retained tail, newest first, within
    /// `userMessageBudgetTokens` (the oldest that fits middle-truncated).
    pub latest_instructions: Vec<String>,
    /// Files read, newest first, workspace-relative, each once.
    pub files_read: Vec<String>,
    /// Files read earlier whose names the previous capsule no longer listed.
    pub files_read_hidden: u64,
    /// Files modified by explicit edit tools, in order of first change.
    pub files_modified: Vec<String>,
    /// The files of [`Facts::files_modified`] that an edit call whose
    /// result succeeded changed in the span (a denied or failed edit
    /// changed nothing): what `/rewind` says stays changed on disk. Not
    /// carried from a previous capsule.
    pub files_changed: Vec<String>,
    /// The files of [`Facts::files_modified`] that only failed or denied
    /// edits touched: no edit of them succeeded in the span and no earlier
    /// capsule listed them. Done does not count them as modified. Not
    /// carried.
    pub files_edit_failed: Vec<String>,
    /// The last result of each distinct verification command, newest first.
    pub verification: Vec<Verification>,
    /// Unresolved errors, newest first, one per key.
    pub unresolved_errors: Vec<UnresolvedError>,
    /// Checkpoint notes, newest first (the span's, then the carried ones).
    pub checkpoints: Vec<(CheckpointKind, String)>,
    /// `plan_pivot` notes made inside the span, oldest first.
    pub span_pivots: Vec<String>,
    /// Active skills, in activation order.
    pub active_skills: Vec<String>,
    /// The newest plan-tool state: the tail's, else the span's, else the
    /// one the previous capsule carried.
    pub plan: Option<PlanState>,
    /// The last assistant text in the span, ≤ 300 tokens.
    pub last_assistant_text: Option<String>,
    /// The agent's closing replies to requests that changed no file,
    /// newest first (the span's, then the carried ones), each bounded,
    /// at most [`crate::builder::ANSWERS_SHOWN`].
    pub answers: Vec<Answer>,
    /// Checks whose first run failed before the session changed any file,
    /// with that run's failing lines (carried, then the span's), stored as
    /// [`crate::capsule::LocalSections::failing_before_edits`] says.
    pub failing_before_edits: Vec<String>,
    /// When the newest verification run (of the span or the tail) passed
    /// and an edit changed files after it: its command and those files,
    /// in order of change. Its "passed" no longer speaks for the files
    /// on disk (a walk found a capsule calling a check passed after a
    /// later edit broke the file).
    pub changed_since_check: Option<(String, Vec<String>)>,
}

/// What one tool call says about files, commands and plans.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallFacts {
    /// Files the call reads (counted only when its result succeeds).
    pub read: Vec<String>,
    /// Files the call modifies with an explicit edit tool.
    pub modified: Vec<String>,
    /// The normalised shell command, for shell tools
    /// ([`command::shell_command`]).
    pub command: Option<String>,
    /// A plan the call sets.
    pub plan: Option<PlanState>,
    /// The key that pairs a failure with a later success
    /// ([`command::error_key`]), whole.
    pub key: String,
}

/// State carried between calls of one span: SWE-agent edits the file it
/// opened last.
#[derive(Debug, Clone, Default)]
struct CallContext {
    open_file: Option<String>,
}

/// Returns the files a single tool call reads and modifies, with no earlier
/// context (an SWE-agent `edit` without an open file names nothing).
pub fn call_facts(call: &ToolUse, cwd: Option<&str>) -> CallFacts {
    call_facts_in(call, cwd, &mut CallContext::default())
}

fn call_facts_in(call: &ToolUse, cwd: Option<&str>, ctx: &mut CallContext) -> CallFacts {
    let name = call.name.to_ascii_lowercase();
    let input = &call.input;
    let mut facts = CallFacts::default();
    let rel = |path: &str| workspace_relative(path, cwd);
    match name.as_str() {
        // SOBA read_file, pi read, Claude Code Read, Gemini read_file,
        // OpenHands read, SWE-agent open.
        "read_file" | "read" | "open" | "view_file" => {
            if let Some(path) = path_arg(input) {
                let path = rel(path);
                if name == "open" {
                    ctx.open_file = Some(path.clone());
                }
                facts.read.push(path);
            }
        }
        "read_many_files" => {
            for key in ["paths", "include", "file_paths"] {
                if let Some(Value::Array(paths)) = input.object().get(key) {
                    for path in paths.iter().filter_map(Value::as_str) {
                        if is_plain_path(path) {
                            facts.read.push(rel(path));
                        }
                    }
                }
            }
        }
        // SOBA write_file, pi write, Claude Code Write, Gemini write_file,
        // SWE-agent create.
        "write_file" | "write" | "create" | "create_file" => {
            if let Some(path) = path_arg(input) {
                let path = rel(path);
                if name == "create" {
                    ctx.open_file = Some(path.clone());
                }
                facts.modified.push(path);
            }
        }
        // OpenHands and SWE-agent's editor, and OpenHands' `edit` action.
        "str_replace_editor" | "edit" if input.str_arg("command").is_some() => {
            let command = input.str_arg("command").unwrap_or_default();
            if let Some(path) = path_arg(input) {
                let path = rel(path);
                match command {
                    "view" => facts.read.push(path),
                    "create" | "str_replace" | "insert" => facts.modified.push(path),
                    _ => {}
                }
            }
        }
        // SOBA edit_file, pi edit, Claude Code Edit/MultiEdit/NotebookEdit,
        // Gemini replace, SWE-agent edit/insert on the open file.
        "edit_file" | "edit" | "multiedit" | "notebookedit" | "replace" | "str_replace"
        | "insert" => {
            if let Some(path) = path_arg(input) {
                facts.modified.push(rel(path));
            } else if let Some(open) = &ctx.open_file {
                facts.modified.push(open.clone());
            }
        }
        "apply_patch" => {
            if let Some(patch) = command::patch_arg(input) {
                facts
                    .modified
                    .extend(patch_paths(patch).iter().map(|path| rel(path)));
            }
        }
        shell if command::is_shell_tool(shell) => {
            if let Some(script) = command::command_arg(input) {
                let script = command::unwrap_shell(&script);
                let shell = shell_facts(&script, cwd, command::workdir_arg(input), ctx);
                facts.read = shell.read;
                facts.modified = shell.modified;
                facts.command = command::shell_command(call, cwd);
            }
        }
        "todowrite" | "write_todos" => {
            if let Some(Value::Array(todos)) = input.object().get("todos") {
                let items = todos
                    .iter()
                    .filter_map(|todo| {
                        let text = ["content", "description", "text", "title"]
                            .iter()
                            .find_map(|key| todo.get(key).and_then(Value::as_str))?;
                        let status = todo
                            .get("status")
                            .and_then(Value::as_str)
                            .unwrap_or("pending");
                        Some(PlanItem {
                            text: text.to_owned(),
                            status: PlanStatus::parse(status),
                        })
                    })
                    .collect();
                facts.plan = Some(PlanState {
                    source: PlanSource::TodoWrite,
                    explanation: None,
                    items,
                });
            }
        }
        "update_plan" => {
            let items = match input.object().get("plan") {
                Some(Value::Array(steps)) => steps
                    .iter()
                    .filter_map(|step| {
                        let text = step.get("step").and_then(Value::as_str)?;
                        let status = step
                            .get("status")
                            .and_then(Value::as_str)
                            .unwrap_or("pending");
                        Some(PlanItem {
                            text: text.to_owned(),
                            status: PlanStatus::parse(status),
                        })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let explanation = input
                .str_arg("explanation")
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned);
            facts.plan = Some(PlanState {
                source: PlanSource::UpdatePlan,
                explanation,
                items,
            });
        }
        _ => {}
    }
    facts.key = command::error_key(call, cwd);
    facts
}

// ---------------------------------------------------------------------------
// Shell parsing
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct ShellFacts {
    read: Vec<String>,
    modified: Vec<String>,
}

/// Extracts file reads (`cat`, `sed -n`, `head`, `tail`, `nl`, SWE-agent
/// `open`) and explicit edits (`apply_patch` headers, SWE-agent `create`
/// and `edit`) from a shell script.
fn shell_facts(
    script: &str,
    cwd: Option<&str>,
    workdir: Option<&str>,
    ctx: &mut CallContext,
) -> ShellFacts {
    let mut facts = ShellFacts::default();
    if script.contains("*** Begin Patch") {
        for path in patch_paths(script) {
            facts
                .modified
                .push(workspace_relative(&join(workdir, &path), cwd));
        }
    }
    let mut dir: Option<String> = workdir.map(str::to_owned);
    for segment in split_commands(script) {
        let words = strip_redirections(shell_words(&segment));
        let words = strip_prefixes(&words);
        let Some(program) = words.first() else {
            continue;
        };
        let args = &words[1..];
        let rel =
            |path: &str, dir: &Option<String>| workspace_relative(&join(dir.as_deref(), path), cwd);
        match basename(program) {
            "cd" => {
                if let Some(target) = args.first().filter(|t| is_plain_path(t)) {
                    dir = Some(join(dir.as_deref(), target));
                }
            }
            "cat" | "nl" | "bat" => {
                for arg in args.iter().filter(|a| is_plain_path(a)) {
                    facts.read.push(rel(arg, &dir));
                }
            }
            "head" | "tail" => {
                let mut iter = args.iter();
                while let Some(arg) = iter.next() {
                    if matches!(arg.as_str(), "-n" | "-c" | "--lines" | "--bytes") {
                        iter.next();
                    } else if is_plain_path(arg) && !arg.starts_with('+') {
                        facts.read.push(rel(arg, &dir));
                    }
                }
            }
            "sed" => {
                let quiet = args.iter().any(|a| {
                    a == "-n" || a == "--quiet" || (a.starts_with("-n") && !a.starts_with("--"))
                });
                let in_place = args
                    .iter()
                    .any(|a| a.starts_with("-i") || a.starts_with("--in-place"));
                if quiet && !in_place {
                    // The first operand is the script unless `-e`/`-f` gave it.
                    let mut has_script = args.iter().any(|a| a == "-e" || a == "-f");
                    let mut iter = args.iter();
                    while let Some(arg) = iter.next() {
                        if arg == "-e" || arg == "-f" {
                            iter.next();
                            continue;
                        }
                        if arg.starts_with('-') {
                            continue;
                        }
                        if has_script {
                            if is_plain_path(arg) {
                                facts.read.push(rel(arg, &dir));
                            }
                        } else {
                            has_script = true;
                        }
                    }
                }
            }
            // SWE-agent commands, run through its shell.
            "open" => {
                if let Some(path) = args.first().filter(|p| is_plain_path(p)) {
                    let path = rel(path, &dir);
                    ctx.open_file = Some(path.clone());
                    facts.read.push(path);
                }
            }
            "create" => {
                if let Some(path) = args.first().filter(|p| is_plain_path(p)) {
                    let path = rel(path, &dir);
                    ctx.open_file = Some(path.clone());
                    facts.modified.push(path);
                }
            }
            "edit" | "insert" => {
                let is_range = args.first().is_some_and(|range| {
                    range.chars().all(|c| c.is_ascii_digit() || c == ':') && !range.is_empty()
                });
                if (is_range || args.is_empty())
                    && let Some(open) = &ctx.open_file
                {
                    facts.modified.push(open.clone());
                }
            }
            "str_replace_editor" => {
                if let [command, path, ..] = args
                    && is_plain_path(path)
                {
                    let path = rel(path, &dir);
                    match command.as_str() {
                        "view" => facts.read.push(path),
                        "create" | "str_replace" | "insert" => facts.modified.push(path),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    facts
}

// ---------------------------------------------------------------------------
// Verification commands and exit status
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Text bounds
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Extraction
// ---------------------------------------------------------------------------

struct PendingCall {
    facts: CallFacts,
}

/// Extracts the facts of a span, merged with those the previous capsule
/// carried (files, verification, errors, checkpoints, skills, the original
/// task and older instructions).
pub fn extract(input: &FactsInput<'_>, config: &FactsConfig, counter: &dyn TokenCounter) -> Facts {
    let mut ctx = CallContext::default();
    let mut calls: HashMap<&str, PendingCall> = HashMap::new();
    let mut outcomes = OutcomeTracker::new(input.cwd);
    let mut reads: Vec<String> = Vec::new();
    let mut modified: Vec<String> = Vec::new();
    let mut changed: Vec<String> = Vec::new();
    // Paths of edit calls whose result in the span failed (or was denied).
    let mut edits_failed: Vec<String> = Vec::new();
    let mut verification: Vec<(i64, Verification)> = Vec::new();
    // Key → (sequence, the failure's text or None once it succeeded, whether
    // the key is already shown). Span results are keyed whole; carried
    // errors by their shown key.
    let mut errors: HashMap<String, (i64, Option<String>, bool)> = HashMap::new();
    let mut span_checkpoints: Vec<(CheckpointKind, String)> = Vec::new();
    let mut plan: Option<PlanState> = None;
    let mut last_assistant: Option<String> = None;
    let mut user_messages: Vec<(&EntryId, String)> = Vec::new();
    // One per real user message of the span: the request, its closing
    // reply so far (text after the turn's last tool call) and whether an
    // edit tool ran in it.
    // A span that opens mid-turn (a compaction inside a long tool loop)
    // continues the request the previous capsule named newest.
    let mut turns: Vec<Turn<'_>> = input
        .previous
        .and_then(|previous| previous.local.latest_instructions.first())
        .map(|request| Turn {
            id: None,
            request: request.clone(),
            reply: None,
            edited: false,
        })
        .into_iter()
        .collect();
    let mut skills: Vec<String> = match input.previous {
        Some(previous) if !previous.state.skills.is_empty() => previous
            .state
            .skills
            .iter()
            .map(|skill| skill.name.clone())
            .collect(),
        Some(previous) => previous.local.active_skills.clone(),
        None => Vec::new(),
    };

    // Carried errors are older than anything in the span.
    if let Some(previous) = input.previous {
        let n = previous.local.unresolved_errors.len() as i64;
        for (idx, stored) in previous.local.unresolved_errors.iter().enumerate() {
            let error = UnresolvedError::from_stored(stored);
            errors
                .entry(error.key)
                .or_insert((idx as i64 - n - 1, Some(error.text), true));
        }
    }

    // Constraints and the project's declared checks, read before the walk
    // so a declared command counts as verification wherever it runs.
    let mut constraints: Vec<String> = previous_local_constraints(input.previous);
    let mut constraint_keys: HashSet<String> = constraints
        .iter()
        .map(|text| directive::constraint_key(text))
        .collect();
    let mut declared: Vec<String> = Vec::new();
    if let Some(agents) = input
        .previous
        .and_then(|previous| previous.state.pinned_agents_md.as_ref())
    {
        add_declared(&agents.text, &mut declared);
    }
    for text in &constraints {
        add_declared(text, &mut declared);
    }
    for entry in input.span {
        let found = match &entry.body {
            EntryBody::Message(message_entry) if message_entry.message.is_real_user() => {
                let text = message_entry.message.text();
                add_declared(&text, &mut declared);
                mark_overridden(&mut constraints, &text);
                directive::user_constraints(&text)
            }
            EntryBody::Context(context) if context.source == ContextSource::AgentsMd => {
                add_declared(&context.text, &mut declared);
                directive::file_rules(&context.text)
            }
            _ => continue,
        };
        for text in found {
            if constraint_keys.insert(directive::constraint_key(&text)) {
                constraints.push(text);
            }
        }
    }

    let mut seq: i64 = 0;
    // Successful edits, by the sequence number of their result.
    let mut changes: Vec<(i64, Vec<String>)> = Vec::new();
    let previous_local = input.previous.map(|previous| &previous.local);
    let mut failing_before_edits: Vec<String> = previous_local
        .map(|local| local.failing_before_edits.clone())
        .unwrap_or_default();
    let edited_earlier = previous_local.is_some_and(|local| !local.files_modified.is_empty());
    for entry in input.span {
        match &entry.body {
            EntryBody::Message(message_entry) => {
                let message = &message_entry.message;
                if message.is_real_user() {
                    let text = message.text();
                    if !text.trim().is_empty() {
                        turns.push(Turn {
                            id: Some(&entry.id),
                            request: text.clone(),
                            reply: None,
                            edited: false,
                        });
                        user_messages.push((&entry.id, text));
                    }
                }
                if message.role == Role::Assistant {
                    let text = message.text();
                    if !text.trim().is_empty() {
                        last_assistant = Some(text.clone());
                    }
                    if let Some(turn) = turns.last_mut() {
                        // Text beside a tool call opens work; the reply is
                        // what the agent said after its last call.
                        turn.reply =
                            if message.tool_uses().next().is_some() || text.trim().is_empty() {
                                None
                            } else {
                                Some(text)
                            };
                    }
                }
                for call in message.tool_uses() {
                    let facts = call_facts_in(call, input.cwd, &mut ctx);
                    if !facts.modified.is_empty()
                        && let Some(turn) = turns.last_mut()
                    {
                        turn.edited = true;
                    }
                    add_new(&mut modified, &facts.modified);
                    if let Some(new_plan) = &facts.plan {
                        plan = Some(new_plan.clone());
                    }
                    outcomes.call(call);
                    calls.insert(call.id.as_str(), PendingCall { facts });
                }
                for result in message.tool_results() {
                    let outcome = outcomes.result(result);
                    match user_refusal(&result.text()) {
                        // A call the user said no to is the user's decision,
                        // not an error to fix: a constraint, carried on.
                        Some(Refusal::Denied) => {
                            let text = declined_constraint(&outcome.key);
                            if constraint_keys.insert(directive::constraint_key(&text)) {
                                constraints.push(text);
                            }
                            continue;
                        }
                        Some(Refusal::NotRun) => continue,
                        None => {}
                    }
                    let failing = match outcome.status {
                        // Still running: a later write_stdin poll reports it.
                        Status::Pending => continue,
                        Status::Failure => true,
                        Status::Success => false,
                    };
                    seq += 1;
                    if !failing && let Some(call) = calls.get(result.tool_use_id.as_str()) {
                        reads.extend(call.facts.read.iter().cloned());
                        add_new(&mut changed, &call.facts.modified);
                        if !call.facts.modified.is_empty() {
                            changes.push((seq, call.facts.modified.clone()));
                        }
                    }
                    if failing && let Some(call) = calls.get(result.tool_use_id.as_str()) {
                        add_new(&mut edits_failed, &call.facts.modified);
                    }
                    // A success or a newer failure also settles a carried
                    // error of the same (shown) key.
                    let shown = shown_key(&outcome.key);
                    if shown != outcome.key {
                        errors.remove(&shown);
                    }
                    let error_shown = shown.clone();
                    errors.insert(outcome.key, (seq, failing.then(|| result.text()), false));
                    if let Some(command) = outcome
                        .command
                        .filter(|c| is_verification(c) || directive::matches_declared(c, &declared))
                    {
                        let shown = shown_key(&command);
                        // The first run of a check, failing before any
                        // edit: what was already broken (or written test
                        // first) when the work began.
                        if failing
                            && !edited_earlier
                            && changes.is_empty()
                            && !failing_before_edits.iter().any(|stored| {
                                stored.split('\n').next() == Some(error_shown.as_str())
                            })
                            && let Some(lines) = crate::builder::failing_lines(&result.text())
                                .filter(|l| !l.is_empty())
                        {
                            failing_before_edits
                                .push(format!("{error_shown}\n{}", lines.join("\n")));
                        }
                        verification.retain(|(_, v)| !same_check(&v.command, &shown));
                        verification.push((
                            seq,
                            Verification {
                                command: shown,
                                passed: !failing,
                                exit_code: outcome.exit_code,
                            },
                        ));
                    }
                }
            }
            EntryBody::Checkpoint { kind, note } => {
                // A milestone records the turn's outcome itself.
                if *kind == CheckpointKind::Milestone
                    && let Some(turn) = turns.last_mut()
                {
                    turn.edited = true;
                }
                span_checkpoints.push((*kind, note.clone()));
            }
            EntryBody::Skill(skill) => match skill.action {
                SkillAction::Activate => {
                    if !skills.contains(&skill.name) {
                        skills.push(skill.name.clone());
                    }
                }
                SkillAction::Deactivate => skills.retain(|name| name != &skill.name),
            },
            _ => {}
        }
    }

    // The retained tail is newer than the span: a plan there wins, a
    // success there settles an error, a failure there replaces the text of
    // the same open error (the capsule never shows a failure the tail has
    // moved past), a file an edit tool names there is modified (as in the
    // span, whatever the call's outcome), and a verification
    // command's result is its newest. Its new failures are not copied (the
    // tail shows them verbatim), so the capsule never says "failing" or
    // "open" where the messages after it say otherwise.
    let mut tail_edits: HashMap<String, Vec<String>> = HashMap::new();
    for entry in input.tail {
        let EntryBody::Message(message_entry) = &entry.body else {
            continue;
        };
        for call in message_entry.message.tool_uses() {
            let facts = call_facts_in(call, input.cwd, &mut ctx);
            if let Some(new_plan) = &facts.plan {
                plan = Some(new_plan.clone());
            }
            add_new(&mut modified, &facts.modified);
            if !facts.modified.is_empty() {
                tail_edits.insert(call.id.clone(), facts.modified.clone());
            }
            outcomes.call(call);
        }
        for result in message_entry.message.tool_results() {
            let outcome = outcomes.result(result);
            if user_refusal(&result.text()).is_some() {
                // The tail shows it verbatim; it settles nothing.
                continue;
            }
            let failing = match outcome.status {
                Status::Pending => continue,
                Status::Failure => true,
                Status::Success => false,
            };
            seq += 1;
            if !failing && let Some(paths) = tail_edits.get(&result.tool_use_id) {
                changes.push((seq, paths.clone()));
            }
            if !failing {
                errors.remove(&shown_key(&outcome.key));
                errors.remove(&outcome.key);
            } else {
                let shown = shown_key(&outcome.key);
                for key in [&outcome.key, &shown] {
                    if let Some((open_seq, Some(text), _)) = errors.get_mut(key) {
                        *open_seq = seq;
                        *text = result.text();
                    }
                }
            }
            if let Some(command) = outcome
                .command
                .filter(|c| is_verification(c) || directive::matches_declared(c, &declared))
            {
                let shown = shown_key(&command);
                verification.retain(|(_, v)| !same_check(&v.command, &shown));
                verification.push((
                    seq,
                    Verification {
                        command: shown,
                        passed: !failing,
                        exit_code: outcome.exit_code,
                    },
                ));
            }
        }
    }
    if plan.is_none()
        && let Some(local) = previous_local.filter(|local| !local.plan.is_empty())
    {
        plan = Some(PlanState {
            source: PlanSource::Carried,
            explanation: Some(local.plan_explanation.clone()).filter(|e| !e.trim().is_empty()),
            items: local.plan.clone(),
        });
    }

    // Files read: newest first, each once, then the carried ones.
    let mut files_read: Vec<String> = Vec::new();
    for path in reads.into_iter().rev() {
        if !files_read.contains(&path) {
            files_read.push(path);
        }
    }
    let mut files_read_hidden = 0;
    if let Some(local) = previous_local {
        for path in &local.files_read {
            if !files_read.contains(path) {
                files_read.push(path.clone());
            }
        }
        files_read_hidden = local.files_read_more;
    }

    // Files modified: carried first, then new ones in order of first change.
    let mut files_modified: Vec<String> = previous_local
        .map(|l| l.files_modified.clone())
        .unwrap_or_default();
    // Carried: still failed unless an edit of it succeeded in the span.
    let mut files_edit_failed: Vec<String> = previous_local
        .map(|l| l.files_edit_failed.clone())
        .unwrap_or_default();
    files_edit_failed.retain(|path| !changed.contains(path));
    for path in modified {
        if !files_modified.contains(&path) {
            // A call whose result lies past the span (in the retained
            // tail) is not known to have failed.
            if edits_failed.contains(&path) && !changed.contains(&path) {
                files_edit_failed.push(path.clone());
            }
            files_modified.push(path);
        }
    }

    let changed_since_check = verification
        .iter()
        .max_by_key(|(seq, _)| *seq)
        .filter(|(_, check)| check.passed)
        .and_then(|(check_seq, check)| {
            let mut files = Vec::new();
            for (_, paths) in changes.iter().filter(|(seq, _)| seq > check_seq) {
                add_new(&mut files, paths);
            }
            (!files.is_empty()).then(|| (check.command.clone(), files))
        });
    verification.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    let mut verification: Vec<Verification> = verification.into_iter().map(|(_, v)| v).collect();
    if let Some(local) = previous_local {
        for carried in &local.verification {
            if !verification
                .iter()
                .any(|v| same_check(&v.command, &carried.command))
            {
                verification.push(carried.clone());
            }
        }
    }

    let mut unresolved: Vec<(i64, UnresolvedError)> = errors
        .into_iter()
        .filter_map(|(key, (seq, text, shown))| {
            text.map(|text| {
                let key = if shown { key } else { shown_key(&key) };
                (seq, UnresolvedError { key, text })
            })
        })
        .collect();
    unresolved.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.key.cmp(&b.1.key)));
    // Two long keys may be shown alike: the newest failure stands for both.
    let mut shown_keys: HashSet<String> = HashSet::new();
    let unresolved_errors = unresolved
        .into_iter()
        .map(|(_, error)| error)
        .filter(|error| shown_keys.insert(error.key.clone()))
        .collect();

    let span_pivots: Vec<String> = span_checkpoints
        .iter()
        .filter(|(kind, _)| *kind == CheckpointKind::PlanPivot)
        .map(|(_, note)| note.clone())
        .collect();
    let mut checkpoints: Vec<(CheckpointKind, String)> =
        span_checkpoints.into_iter().rev().collect();
    if let Some(local) = previous_local {
        checkpoints.extend(local.checkpoints.iter().cloned());
    }

    // The original task is carried; only a session's first span finds it.
    let carried_task = previous_local
        .map(|l| l.original_task.clone())
        .filter(|task| !task.trim().is_empty());
    let first_task = user_messages
        .iter()
        .find(|(_, text)| directive::is_task(text));
    let first_user_id = if carried_task.is_none() {
        first_task.map(|(id, _)| *id)
    } else {
        None
    };
    let original_task = carried_task.or_else(|| first_task.map(|(_, text)| text.clone()));
    let goal = user_messages
        .iter()
        .rev()
        .find(|(id, text)| Some(*id) != first_user_id && directive::is_redirect(text))
        .map(|(_, text)| text.clone())
        .or_else(|| {
            previous_local
                .map(|l| l.goal.clone())
                .filter(|goal| !goal.trim().is_empty())
        });

    let candidates: Vec<String> = user_messages
        .iter()
        .rev()
        .filter(|(id, _)| !input.retained.contains(*id) && Some(*id) != first_user_id)
        .map(|(_, text)| text.clone())
        .chain(
            previous_local
                .into_iter()
                .flat_map(|l| l.latest_instructions.iter().cloned()),
        )
        .collect();
    let latest_instructions = fill_budget(
        informative_instructions(candidates),
        config.user_message_budget,
        counter,
    );

    let last_assistant_text = last_assistant
        .map(|text| truncate_middle_tokens(text.trim(), LAST_ASSISTANT_TOKENS, counter));
    let answers = answers(&turns, input, previous_local, counter);

    Facts {
        original_task,
        goal,
        constraints,
        constraints_hidden: previous_local.map_or(0, |l| l.constraints_more),
        latest_instructions,
        files_read,
        files_read_hidden,
        files_modified,
        files_changed: changed,
        files_edit_failed,
        verification,
        unresolved_errors,
        checkpoints,
        span_pivots,
        active_skills: skills,
        plan,
        last_assistant_text,
        answers,
        failing_before_edits,
        changed_since_check,
    }
}

/// A real user message of the span and what followed it.
struct Turn<'a> {
    /// The request's entry; `None` for the request a span opened within.
    id: Option<&'a EntryId>,
    request: String,
    reply: Option<String>,
    /// An edit tool ran or a milestone was recorded in it.
    edited: bool,
}

/// Returns the closing replies worth carrying, newest first: those of
/// requests for work ([`directive::is_task`]) outside the retained tail
/// that changed no file and reached no milestone (an edit's outcome is
/// under Files modified, Verification and Checkpoints; a review's or an
/// audit's is nowhere else), then the previous capsule's, each once.
fn answers(
    turns: &[Turn<'_>],
    input: &FactsInput<'_>,
    previous_local: Option<&crate::capsule::LocalSections>,
    counter: &dyn TokenCounter,
) -> Vec<Answer> {
    let span = turns
        .iter()
        .rev()
        .filter(|turn| !turn.edited && turn.id.is_none_or(|id| !input.retained.contains(id)))
        .filter(|turn| directive::is_task(&turn.request))
        .filter_map(|turn| {
            let reply = turn.reply.as_deref()?.trim();
            Some(Answer {
                request: crate::builder::answer_request(&turn.request),
                text: truncate_middle_tokens(reply, crate::builder::ANSWER_TOKENS, counter),
            })
        });
    let carried = previous_local
        .into_iter()
        .flat_map(|local| local.answers.iter().cloned());
    let mut seen = HashSet::new();
    span.chain(carried)
        .filter(|answer| seen.insert((answer.request.clone(), answer.text.clone())))
        .take(crate::builder::ANSWERS_SHOWN)
        .collect()
}

/// Appends the paths of `new` that `list` does not hold yet, in order.
fn add_new(list: &mut Vec<String>, new: &[String]) {
    for path in new {
        if !list.contains(path) {
            list.push(path.clone());
        }
    }
}

/// Drops what the latest-instructions budget should not be spent on, newest
/// first as given: messages that ask for no work ([`directive::is_task`]:
/// a go-on, a greeting, a question about the agent), except a go-on that is
/// the newest candidate (it tells the model what was asked last), and
/// repeats of a newer message (compared with whitespace collapsed).
pub fn informative_instructions(candidates: Vec<String>) -> Vec<String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(candidates.len());
    for (idx, text) in candidates.into_iter().enumerate() {
        if !directive::is_task(&text) && (idx > 0 || !is_go_on(&text)) {
            continue;
        }
        let key = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if seen.insert(key) {
            out.push(text);
        }
    }
    out
}

/// Takes texts newest first while they fit in `budget`; the first that does
/// not fit is middle-truncated into what remains (when at least
/// [`MIN_TRUNCATED_INSTRUCTION`] remains), and the walk stops there.
pub fn fill_budget(
    candidates: Vec<String>,
    budget: TokenCount,
    counter: &dyn TokenCounter,
) -> Vec<String> {
    let mut used = TokenCount::ZERO;
    let mut out = Vec::new();
    for text in candidates {
        let n = counter.count_text(&text).n;
        if used + n <= budget {
            used += n;
            out.push(text);
            continue;
        }
        let remaining = budget.saturating_sub(used);
        if remaining >= MIN_TRUNCATED_INSTRUCTION {
            out.push(crate::truncate::cut_instruction(&text, remaining, counter));
        }
        break;
    }
    out
}

/// Returns the newest plan on a path (root → leaf): the last plan-tool
/// call (`update_plan`, `TodoWrite`, `write_todos`), else the plan the
/// newest capsule carries, else `None`.
pub fn newest_plan(path: &[Entry]) -> Option<PlanState> {
    for entry in path.iter().rev() {
        match &entry.body {
            EntryBody::Message(message_entry) => {
                let plan = message_entry
                    .message
                    .tool_uses()
                    .filter_map(|call| call_facts(call, None).plan)
                    .last();
                if plan.is_some() {
                    return plan;
                }
            }
            EntryBody::Capsule(capsule) if !capsule.local.plan.is_empty() => {
                return Some(PlanState {
                    source: PlanSource::Carried,
                    explanation: Some(capsule.local.plan_explanation.clone())
                        .filter(|e| !e.trim().is_empty()),
                    items: capsule.local.plan.clone(),
                });
            }
            EntryBody::Capsule(_) => return None,
            _ => {}
        }
    }
    None
}

/// Adds the commands `text` names as checks ([`directive::declared_commands`]).
fn add_declared(text: &str, declared: &mut Vec<String>) {
    for command in directive::declared_commands(text) {
        if !declared.contains(&command) {
            declared.push(command);
        }
    }
}

/// The error result of a call the user denied (the engine writes it; the
/// capsule reads it as the user's decision, not an error).
pub const USER_DENIAL: &str = "not approved: the user denied this call";

/// The result of a call of the batch after one the user denied: the turn
/// stopped there.
pub const NOT_RUN_AFTER_DENIAL: &str =
    "not run: the user denied an earlier call of this batch and stopped the turn";

/// What a user's "no" left as a tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The user denied this call.
    Denied,
    /// The call was not run: the user denied an earlier one of its batch.
    NotRun,
}

/// Returns whether a tool result is SOBA's record of a user's "no".
fn user_refusal(text: &str) -> Option<Refusal> {
    let text = text.trim_start();
    if text.starts_with(USER_DENIAL) {
        Some(Refusal::Denied)
    } else if text.starts_with(NOT_RUN_AFTER_DENIAL) {
        Some(Refusal::NotRun)
    } else {
        None
    }
}

/// The constraint a denied call leaves, e.g. "The user declined
/// `$ git push origin main` when asked: do not run it again unasked."
fn declined_constraint(key: &str) -> String {
    format!(
        "The user declined {} when asked: do not run it again unasked.",
        crate::render::code_span(key)
    )
}

/// Marks each constraint a sentence of the user's message `text`
/// overrides ([`directive::overrides`]) with that sentence: the rule stays
/// verbatim, so the next reader sees both and which came last.
fn mark_overridden(constraints: &mut [String], text: &str) {
    let sentences = directive::sentences(text);
    for constraint in constraints
        .iter_mut()
        .filter(|constraint| !constraint.contains(directive::OVERRIDDEN_MARK))
    {
        if let Some(later) = sentences
            .iter()
            .find(|sentence| directive::overrides(sentence, constraint))
        {
            *constraint = directive::overridden_text(constraint, later);
        }
    }
}

/// Returns the constraints the previous capsule carried.
fn previous_local_constraints(previous: Option<&Capsule>) -> Vec<String> {
    previous
        .map(|previous| previous.local.constraints.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolInput;

    use serde_json::json;

    fn call(name: &str, input: Value) -> ToolUse {
        ToolUse {
            id: "t1".into(),
            name: name.into(),
            input: ToolInput::from_value(input),
        }
    }

    #[test]
    fn splits_commands_and_skips_heredocs() {
        let script = "cd backend && cat > a.txt <<'EOF'\ncat secret.rs\nEOF\ncat b.rs | head -n 3; echo '&& cat c.rs'";
        assert_eq!(
            split_commands(script),
            vec![
                "cd backend",
                "cat > a.txt",
                "cat b.rs",
                "head -n 3",
                "echo '&& cat c.rs'"
            ]
        );
    }

    #[test]
    fn words_remove_quotes() {
        assert_eq!(
            shell_words(r#"sed -n '1,20p' "a b.rs" c\ d"#),
            vec!["sed", "-n", "1,20p", "a b.rs", "c d"]
        );
    }

    #[test]
    fn workspace_relative_strips_root() {
        assert_eq!(workspace_relative("/w/src/a.rs", Some("/w")), "src/a.rs");
        assert_eq!(workspace_relative("/w/src/a.rs", Some("/w/")), "src/a.rs");
        assert_eq!(workspace_relative("/wx/a.rs", Some("/w")), "/wx/a.rs");
        assert_eq!(workspace_relative("./a.rs", None), "a.rs");
        assert_eq!(workspace_relative("/w", Some("/w")), ".");
    }

    #[test]
    fn shell_reads_follow_cd() {
        let facts = call_facts(
            &call(
                "bash",
                json!({"command": "cd /w/sub && sed -n '1,9p' x.rs"}),
            ),
            Some("/w"),
        );
        assert_eq!(facts.read, vec!["sub/x.rs"]);
        assert!(facts.modified.is_empty());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            exit_code("Command: x\nChunk ID: 1\nProcess exited with code 101\nOutput:\n"),
            Some(101)
        );
        assert_eq!(
            exit_code("...\n[The command completed with exit code 2.]"),
            Some(2)
        );
        assert_eq!(exit_code("Output: x\nExit Code: 0\nSignal: 0"), Some(0));
        assert_eq!(exit_code("Command exited with code 1"), Some(1));
        assert_eq!(exit_code("all good"), None);
        // Claude Code: the code opens the result, and the output after it
        // can be longer than the tail searched for a trailing code.
        let long = format!(
            "Exit code 1\nls: /opt/x: No such file or directory\n{}",
            "more output\n".repeat(40)
        );
        assert_eq!(exit_code(&long), Some(1));
        assert_eq!(exit_code("Exit code 0"), Some(0));
        // Only as the first line: a line quoting it later is output.
        assert_eq!(
            exit_code(&format!(
                "ok\nExit code 3 is documented\n{}",
                "x\n".repeat(200)
            )),
            None
        );
        // Attack findings: a code too large for an i64 is still a failure;
        // only ASCII digits are a code; a CR alone ends the first line.
        assert_eq!(
            exit_code("Exit code 99999999999999999999999\nerror: boom"),
            Some(i64::MAX)
        );
        assert_eq!(
            exit_code("Exit code -99999999999999999999999"),
            Some(i64::MIN)
        );
        assert_eq!(exit_code("Exit code \u{661}"), None);
        assert_eq!(
            exit_code(&format!("Exit code 1\r{}", "line\r".repeat(200))),
            Some(1)
        );
    }

    #[test]
    fn a_check_piped_into_a_viewer_is_the_same_check() {
        assert_eq!(check_key("npm run check 2>&1 | tail -5"), "npm run check");
        assert_eq!(
            check_key("npm run check 2>&1 | grep -E \"(error|warning)\" | head -20"),
            "npm run check"
        );
        assert_eq!(check_key("bash -lc 'cargo test | tail -3'"), "cargo test");
        // The directory and other commands of a chain stay part of the check.
        assert_eq!(check_key("cd web && npm test"), "cd web ; npm test");
        assert_ne!(check_key("cd web && npm test"), check_key("npm test"));
        assert_ne!(check_key("cargo test -p a"), check_key("cargo test -p b"));
        // A viewer is only dropped after the check, never as the check.
        assert_eq!(check_key("cat log.txt | grep FAIL"), "cat log.txt");
        // Redirections joining streams do not split a command.
        assert_eq!(
            split_commands("make 2>&1 | tee out; ls &>/dev/null & wait"),
            ["make 2>&1", "tee out", "ls &>/dev/null", "wait"]
        );
    }

    #[test]
    fn verification_commands() {
        for yes in [
            "cargo test -p soba-core",
            "cd backend && go build ./...",
            "npm test",
            "npm run lint",
            "pnpm typecheck",
            "python -m pytest tests/",
            "pytest -x",
            "RUST_LOG=debug cargo clippy --all-targets",
            "make",
            "./gradlew build",
            "mvn -q package",
            "npx tsc --noEmit",
            "bash -lc 'cargo build'",
            "timeout 600 cargo nextest run",
            "sh run_tests.sh",
            "bash -e scripts/ci.sh",
            "./run_tests.sh",
            "scripts/check",
            "cd app && ./build.sh --release",
            "python -m pytest",
            "go test ./...",
        ] {
            assert!(is_verification(yes), "{yes}");
        }
        for no in [
            "ls -la",
            "cat Cargo.toml",
            "npm install",
            "python reproduce.py",
            "git status",
            "cargo run",
            "sh deploy.sh",
            "./start.sh",
            "bash",
            "bin/server --port 80",
        ] {
            assert!(!is_verification(no), "{no}");
        }
    }

    #[test]
    fn go_on_messages_are_recognised() {
        for text in [
            "continue",
            "Continue.",
            "go on",
            "ok, keep going",
            "please proceed",
            "Next!",
        ] {
            assert!(is_go_on(text), "{text}");
        }
        for text in [
            "yes",
            "continue with the parser",
            "go fix the lexer",
            "",
            "no, stop",
        ] {
            assert!(!is_go_on(text), "{text}");
        }
    }

    #[test]
    fn instructions_skip_go_on_and_repeats_but_keep_the_newest() {
        let texts = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let got = informative_instructions(texts(&[
            "continue",
            "run the tests",
            "continue",
            "Use  tabs",
            "go on",
            "use tabs",
            "Use tabs",
        ]));
        assert_eq!(
            got,
            texts(&["continue", "run the tests", "Use  tabs", "use tabs"])
        );
    }
}
