//! Fidelity (issue 32, item 5): what each policy's model input still holds
//! of the history, at the last request of each fifth of a trace, and the
//! `--dump-inputs` file of those inputs.
//!
//! The items are taken from the transcript alone, by the small extractors
//! below (never by the capsule builder or the fact extractor, so a capsule
//! cannot grade itself). At a probe point, the history is every replayed
//! message recorded before that request:
//!
//! - **files touched**: the path argument (`path`, `file_path`, `filePath`,
//!   `file`, `filename`, `absolute_path`, `notebook_path`, `target_file`)
//!   of an assistant call to a file tool (a name containing `read`,
//!   `write`, `edit`, `create`, `replace`, `insert`, `view`, `open`,
//!   `notebook` or `patch`: Claude Code `Read`/`Edit`/`Write`, Codex
//!   `apply_patch`, Gemini `read_file`/`write_file`/`replace`, OpenHands
//!   and SWE-agent `str_replace_editor`, `open`, `create`), and every file
//!   named by an `*** Add/Update/Delete File:` or `*** Move to:` header of
//!   a patch in any call's arguments; made relative to the recorded
//!   working folder when under it.
//! - **open errors**: a tool result fails when the tool flagged an error,
//!   it states a non-zero exit (`exit code: 1`, `exit status 2`, `exited
//!   with code 1`) or, for a tool that is not a file tool, a line starts
//!   with `Traceback`, `error:`, `error[`, `fatal:`, `FAILED` or holds
//!   `panicked at`. It stays open until a later result of the same call
//!   (tool name plus its command, or else its path) does not fail. Its
//!   snippet is its first line naming the failure (`error`, `fail`,
//!   `panicked`, `exception`, `fatal`, `denied`, `not found`, `no such`),
//!   else its first line with a letter; exit and timing headers and
//!   Python's `Traceback (most recent call last):` are skipped.
//! - **constraints**: the sentences of real user messages (typed by a
//!   person: not tool results, capsules or injected text) that contain
//!   always, never, must, don't, do not, only, keep, avoid, prefer,
//!   should, make sure or ensure, 10 to 500 characters long; a sentence
//!   ends at `.`, `!` or `?` before whitespace, or at a line end; list
//!   markers are dropped.
//! - **open plan items**: the items of the newest `TodoWrite`,
//!   `update_plan` or `write_todos` call whose status is not completed,
//!   done or cancelled.
//! - **results 6–20 back**: of the tool results so far, the 6th to the
//!   20th newest, each by its longest line that has a letter.
//!
//! Every item is normalised as the recall probes normalise ([`normalize`]:
//! NFC, whitespace runs collapsed); snippets and lines keep their first
//! [`SNIPPET_CHARS`] characters; each category counts an item once. An
//! item is kept when it is a substring of one message of the policy's
//! input (message 0, the pinned `system` entries, any message verbatim or
//! rewritten, the capsule included). Shares are micro-averaged: items
//! kept over items, summed over the five points of every trace; a
//! category with no item is "n/a", not 1.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde_json::{Map, Value, json};
use soba_core::{Block, EntryBody, Message, MessageOrigin, Role, ToolInput, ToolResult};

use super::probe::{Item, ItemContent, ItemKind, ProbeIndex, normalize};
use super::trace::Trace;

/// The five categories, in report order (their JSON names).
pub const CATEGORIES: [&str; 5] = [
    "filesTouched",
    "openErrors",
    "constraints",
    "openPlanItems",
    "olderResults",
];

/// The categories' column titles.
pub const TITLES: [&str; 5] = ["files", "errors", "constraints", "plan", "results 6-20"];

/// Characters of an error snippet or a result line that must appear.
pub const SNIPPET_CHARS: usize = 160;

/// Tool results newer than the "6–20 back" window.
const NEWEST_SKIPPED: usize = 5;
/// The oldest result counted, from the newest.
const OLDEST_COUNTED: usize = 20;

/// Returns the probe points of a trace of `n` requests: the last request
/// of each fifth, ⌈k·n/5⌉−1 for k = 1…5 (repeating when `n` < 5; none when
/// `n` is 0).
pub fn probe_points(n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    (1..=5).map(|k| (k * n).div_ceil(5) - 1).collect()
}

/// Items kept and items in the history, per category, summed over probe
/// points (and traces).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FidelityCounts {
    /// Items present in the input.
    pub kept: [u64; 5],
    /// Items in the history.
    pub items: [u64; 5],
}

impl FidelityCounts {
    /// Adds another trace's counts.
    pub fn merge(&mut self, other: &FidelityCounts) {
        for idx in 0..5 {
            self.kept[idx] += other.kept[idx];
            self.items[idx] += other.items[idx];
        }
    }

    /// Returns the share kept of one category, `None` when it had no item.
    pub fn share(&self, idx: usize) -> Option<f64> {
        (self.items[idx] > 0).then(|| self.kept[idx] as f64 / self.items[idx] as f64)
    }

    /// Returns the `fidelity` object of `--json`.
    pub fn to_json(&self) -> Value {
        CATEGORIES
            .iter()
            .enumerate()
            .map(|(idx, name)| {
                let share = self
                    .share(idx)
                    .map(|share| (share * 1_000.0).round() / 1_000.0);
                (
                    (*name).to_owned(),
                    json!({"share": share, "kept": self.kept[idx], "items": self.items[idx]}),
                )
            })
            .collect::<Map<String, Value>>()
            .into()
    }
}

/// The items of the history at one request, normalised, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryItems {
    /// Files touched.
    pub files: Vec<String>,
    /// Snippets of errors still open.
    pub errors: Vec<String>,
    /// User sentences stating a constraint.
    pub constraints: Vec<String>,
    /// The open items of the newest plan.
    pub plan: Vec<String>,
    /// A line of each of the results 6–20 back, oldest first.
    pub results: Vec<String>,
}

impl HistoryItems {
    /// Returns the categories in report order.
    pub fn categories(&self) -> [&[String]; 5] {
        [
            &self.files,
            &self.errors,
            &self.constraints,
            &self.plan,
            &self.results,
        ]
    }
}

const PATH_KEYS: [&str; 8] = [
    "path",
    "file_path",
    "filePath",
    "file",
    "filename",
    "absolute_path",
    "notebook_path",
    "target_file",
];
const FILE_TOOL_WORDS: [&str; 10] = [
    "read", "write", "edit", "create", "replace", "insert", "view", "open", "notebook", "patch",
];
const PLAN_TOOLS: [&str; 3] = ["todowrite", "update_plan", "write_todos"];
const PLAN_TEXT_KEYS: [&str; 6] = ["content", "step", "description", "task", "title", "text"];
const PLAN_DONE: [&str; 4] = ["completed", "done", "cancelled", "canceled"];

static CONSTRAINT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(always|never|must|mustn[’']t|don[’']t|do not|only|keep|avoid|prefer|should|shouldn[’']t|make sure|ensure)\b",
    )
    .expect("the constraint pattern is a valid regex")
});
static EXIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(exit code|exit status|exited with code|exit_code|returncode)[\s:=]*(-?\d+)")
        .expect("the exit pattern is a valid regex")
});
static FAILURE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?m)^\s*(Traceback \(most recent call last\)|error:|error\[|fatal:|FAILED)|panicked at",
    )
    .expect("the failure pattern is a valid regex")
});
static NAMES_FAILURE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)error|fail|panicked|exception|fatal|denied|not found|no such")
        .expect("the failure-word pattern is a valid regex")
});
static HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(exit code|exit status|wall time|output:|process exited|chunk id|original token count|total output lines)")
        .expect("the header pattern is a valid regex")
});
static SENTENCE_END: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[.!?]\s+").expect("the sentence pattern is a valid regex"));

/// Returns whether a tool of this name reads or writes files.
fn is_file_tool(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    FILE_TOOL_WORDS.iter().any(|word| name.contains(word))
}

/// Returns a path as the items name it: relative to `cwd` when under it,
/// without a leading `./`.
fn relative(path: &str, cwd: Option<&str>) -> String {
    let path = path.trim();
    let path = cwd
        .map(|cwd| cwd.trim_end_matches('/'))
        .filter(|cwd| !cwd.is_empty())
        .and_then(|cwd| path.strip_prefix(cwd))
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(path);
    normalize(path.strip_prefix("./").unwrap_or(path))
}

/// Returns the files a call touches.
fn touched_files(name: &str, input: &ToolInput, cwd: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if is_file_tool(name)
        && let Some(path) = PATH_KEYS.iter().find_map(|key| input.str_arg(key))
    {
        out.push(relative(path, cwd));
    }
    let texts = input
        .object()
        .values()
        .filter_map(Value::as_str)
        .chain(input.raw())
        .chain(
            input
                .object()
                .values()
                .filter_map(Value::as_array)
                .flatten()
                .filter_map(Value::as_str),
        );
    for text in texts.filter(|text| text.contains("*** ")) {
        for line in text.lines() {
            let header = [
                "*** Add File:",
                "*** Update File:",
                "*** Delete File:",
                "*** Move to:",
            ]
            .iter()
            .find_map(|prefix| line.trim_start().strip_prefix(prefix));
            if let Some(path) = header {
                out.push(relative(path, cwd));
            }
        }
    }
    out.retain(|path| !path.is_empty());
    out
}

/// Returns what identifies a call for "a later success of the same call":
/// its tool and command, or else its path.
fn call_key(name: &str, input: &ToolInput) -> String {
    let command = ["command", "cmd"].iter().find_map(|key| {
        let value = input.object().get(*key)?;
        match value {
            Value::String(text) => Some(text.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        }
    });
    let target = command.or_else(|| {
        PATH_KEYS
            .iter()
            .find_map(|key| input.str_arg(key))
            .map(str::to_owned)
    });
    format!(
        "{}\0{}",
        name.to_ascii_lowercase(),
        target.unwrap_or_default()
    )
}

/// Returns whether a result (of a file tool or not) failed.
fn is_failed(result: &ToolResult, text: &str, file_tool: bool) -> bool {
    if result.is_error {
        return true;
    }
    let head: String = text.chars().take(2_000).collect();
    let exit = EXIT
        .captures(&head)
        .and_then(|caps| caps.get(2))
        .and_then(|code| code.as_str().parse::<i64>().ok());
    if let Some(code) = exit {
        return code != 0;
    }
    !file_tool && FAILURE_LINE.is_match(text)
}

/// Returns `text`'s first [`SNIPPET_CHARS`] characters, normalised.
fn snippet(line: &str) -> String {
    let line = normalize(line);
    match line.char_indices().nth(SNIPPET_CHARS) {
        Some((at, _)) => line[..at].trim_end().to_owned(),
        None => line,
    }
}

/// Returns the line of a failed result that names its failure.
fn error_snippet(text: &str) -> Option<String> {
    let lines = || {
        // Python's `Traceback (most recent call last):` opens every
        // traceback; the line naming the exception is the distinctive one.
        text.lines().map(str::trim).filter(|line| {
            line.chars().any(char::is_alphabetic)
                && !HEADER.is_match(line)
                && !line.starts_with("Traceback (most recent call last)")
        })
    };
    lines()
        .find(|line| NAMES_FAILURE.is_match(line))
        .or_else(|| lines().next())
        .map(snippet)
        .filter(|snippet| !snippet.is_empty())
}

/// Returns the longest line of a result that has a letter.
fn result_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| line.chars().any(char::is_alphabetic))
        .max_by_key(|line| line.chars().count())
        .map(snippet)
        .filter(|snippet| !snippet.is_empty())
}

/// Returns the constraint sentences of a user's text.
fn constraint_sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line
            .trim()
            .trim_start_matches(['-', '*', '#', '>', '+'])
            .trim_start();
        let mut start = 0;
        let mut pieces = Vec::new();
        for end in SENTENCE_END.find_iter(line) {
            pieces.push(&line[start..end.start() + 1]);
            start = end.end();
        }
        pieces.push(&line[start..]);
        for piece in pieces {
            let sentence = normalize(piece);
            let n = sentence.chars().count();
            if (10..=500).contains(&n) && CONSTRAINT.is_match(&sentence) {
                out.push(sentence);
            }
        }
    }
    out
}

/// Returns the open items of a plan call.
fn open_plan_items(input: &ToolInput) -> Vec<String> {
    let Some(items) = ["todos", "plan", "items"]
        .iter()
        .find_map(|key| input.object().get(*key).and_then(Value::as_array))
    else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let status = item
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_ascii_lowercase();
            if PLAN_DONE.contains(&status.as_str()) {
                return None;
            }
            let text = match item {
                Value::String(text) => text.as_str(),
                _ => PLAN_TEXT_KEYS
                    .iter()
                    .find_map(|key| item.get(*key).and_then(Value::as_str))?,
            };
            Some(normalize(text)).filter(|text| !text.is_empty())
        })
        .collect()
}

fn push_once(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Returns the items of a history: `messages` in order, paths made
/// relative to `cwd`.
pub fn extract<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
    cwd: Option<&str>,
) -> HistoryItems {
    let mut out = HistoryItems::default();
    // call id → (key, is a file tool)
    let mut calls: HashMap<&str, (String, bool)> = HashMap::new();
    // key → the open failure's snippet
    let mut open: Vec<(String, String)> = Vec::new();
    let mut results: Vec<Option<String>> = Vec::new();
    let mut plan: Option<Vec<String>> = None;
    for message in messages {
        if message.is_real_user() {
            for sentence in constraint_sentences(&message.text()) {
                push_once(&mut out.constraints, sentence);
            }
        }
        for block in &message.content {
            match block {
                Block::ToolUse(call) if message.role == Role::Assistant => {
                    for path in touched_files(&call.name, &call.input, cwd) {
                        push_once(&mut out.files, path);
                    }
                    if PLAN_TOOLS.contains(&call.name.to_ascii_lowercase().as_str()) {
                        plan = Some(open_plan_items(&call.input));
                    }
                    calls.insert(
                        &call.id,
                        (call_key(&call.name, &call.input), is_file_tool(&call.name)),
                    );
                }
                Block::ToolResult(result) => {
                    let text = result.text();
                    results.push(result_line(&text));
                    let (key, file_tool) = calls
                        .get(result.tool_use_id.as_str())
                        .cloned()
                        .unwrap_or_else(|| (format!("\0{}", result.tool_use_id), false));
                    open.retain(|(open_key, _)| *open_key != key);
                    if is_failed(result, &text, file_tool)
                        && let Some(snippet) = error_snippet(&text)
                    {
                        open.push((key, snippet));
                    }
                }
                _ => {}
            }
        }
    }
    for (_, snippet) in open {
        push_once(&mut out.errors, snippet);
    }
    out.plan = plan.unwrap_or_default();
    let n = results.len();
    let counted = n.saturating_sub(OLDEST_COUNTED)..n.saturating_sub(NEWEST_SKIPPED);
    for line in results[counted].iter().flatten() {
        push_once(&mut out.results, line.clone());
    }
    out
}

/// Returns the items of a trace's history before request `step`.
pub fn history_items(trace: &Trace, step: usize) -> HistoryItems {
    let upto = trace
        .steps
        .get(step)
        .map_or(trace.entries.len(), |step| step.response.start);
    let messages = trace.entries[..upto]
        .iter()
        .enumerate()
        .filter(|(idx, _)| !trace.ignored[*idx])
        .filter_map(|(_, entry)| match &entry.body {
            EntryBody::Message(message) if message.message.role != Role::System => {
                Some(&message.message)
            }
            _ => None,
        });
    extract(messages, trace.cwd.as_deref())
}

/// Message 0's text as sent: the system prompt and the tool schemas.
fn message0_parts(trace: &Trace) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if !trace.system_prompt.is_empty() {
        out.push(("system_prompt", trace.system_prompt.clone()));
    }
    if !trace.tool_schemas.is_empty() {
        out.push((
            "tools",
            Value::Array(trace.tool_schemas.clone()).to_string(),
        ));
    }
    out
}

/// The `system` entries recorded before `step`'s request.
fn system_before<'a>(trace: &Trace, index: &'a ProbeIndex, step: usize) -> &'a [usize] {
    let start = trace
        .steps
        .get(step)
        .map_or(usize::MAX, |step| step.response.start);
    let n = index.system_entries.partition_point(|&idx| idx < start);
    &index.system_entries[..n]
}

/// Counts, for each input of one probe point, the items of `history` it
/// keeps.
fn score(
    trace: &Trace,
    index: &ProbeIndex,
    message0: &str,
    step: usize,
    history: &HistoryItems,
    inputs: &[Vec<Item>],
) -> Vec<FidelityCounts> {
    let categories = history.categories();
    let mut patterns: Vec<&str> = Vec::new();
    let mut pattern_of: HashMap<&str, usize> = HashMap::new();
    let mut needle_ids: Vec<Vec<usize>> = Vec::new();
    for items in categories {
        let ids = items
            .iter()
            .map(|item| {
                *pattern_of.entry(item.as_str()).or_insert_with(|| {
                    patterns.push(item.as_str());
                    patterns.len() - 1
                })
            })
            .collect();
        needle_ids.push(ids);
    }
    let matcher = AhoCorasick::new(&patterns).ok();
    let system = system_before(trace, index, step);
    inputs
        .iter()
        .map(|items| {
            let mut found = vec![false; patterns.len()];
            let mut left = patterns.len();
            let texts = std::iter::once(message0)
                .chain(
                    system
                        .iter()
                        .filter_map(|&idx| index.entry_text(idx).map(|text| text.text.as_str())),
                )
                .chain(items.iter().filter_map(|item| match &item.content {
                    ItemContent::Entry(idx) => {
                        index.entry_text(*idx).map(|text| text.text.as_str())
                    }
                    ItemContent::Text(text) => Some(text.text.as_str()),
                }));
            for text in texts {
                if left == 0 {
                    break;
                }
                match &matcher {
                    Some(matcher) => {
                        for hit in matcher.find_overlapping_iter(text) {
                            let id = hit.pattern().as_usize();
                            if !found[id] {
                                found[id] = true;
                                left -= 1;
                            }
                        }
                    }
                    // Too many needles for one automaton: one at a time.
                    None => {
                        for (id, pattern) in patterns.iter().enumerate() {
                            if !found[id] && text.contains(pattern) {
                                found[id] = true;
                                left -= 1;
                            }
                        }
                    }
                }
            }
            let mut counts = FidelityCounts::default();
            for (idx, ids) in needle_ids.iter().enumerate() {
                counts.items[idx] = ids.len() as u64;
                counts.kept[idx] = ids.iter().filter(|&&id| found[id]).count() as u64;
            }
            counts
        })
        .collect()
}

/// Returns each runner's counts over the probe points of a trace;
/// `inputs` holds, per point, every runner's input (`n_runners` of them).
pub(crate) fn measure(
    trace: &Trace,
    index: &ProbeIndex,
    inputs: &[(usize, Vec<Vec<Item>>)],
    n_runners: usize,
) -> Vec<FidelityCounts> {
    let message0 = normalize(
        &message0_parts(trace)
            .into_iter()
            .map(|(_, text)| text)
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let mut out = vec![FidelityCounts::default(); n_runners];
    for (step, at_point) in inputs {
        let history = history_items(trace, *step);
        for (total, counts) in out
            .iter_mut()
            .zip(score(trace, index, &message0, *step, &history, at_point))
        {
            total.merge(&counts);
        }
    }
    out
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn dump_item(role: &str, kind: &str, real_user: bool, text: &str) -> Value {
    json!({"role": role, "kind": kind, "realUser": real_user, "text": text})
}

/// Returns the items of one message as sent: one per block.
fn message_items(message: &Message, out: &mut Vec<Value>) {
    let text_kind = match message.origin {
        MessageOrigin::Typed => "message",
        origin => origin.as_str(),
    };
    let role = role_name(message.role);
    for block in &message.content {
        out.push(match block {
            Block::Text(text) => dump_item(role, text_kind, message.is_real_user(), text),
            Block::Thinking { text, .. } => dump_item("assistant", "thinking", false, text),
            Block::ToolUse(call) => dump_item(
                "assistant",
                "tool_call",
                false,
                &format!("{}\n{}", call.name, call.input.to_json_text()),
            ),
            Block::ToolResult(result) => dump_item("tool", "tool_result", false, &result.text()),
            Block::Image(_) => dump_item(role, "image", false, ""),
        });
    }
}

/// Returns the `items` of one input as sent.
fn input_items(trace: &Trace, index: &ProbeIndex, step: usize, items: &[Item]) -> Vec<Value> {
    let mut out: Vec<Value> = message0_parts(trace)
        .iter()
        .map(|(kind, text)| dump_item("system", kind, false, text))
        .collect();
    let message = |idx: usize| match &trace.entries[idx].body {
        EntryBody::Message(message) => Some(&message.message),
        _ => None,
    };
    for &idx in system_before(trace, index, step) {
        if let Some(message) = message(idx) {
            message_items(message, &mut out);
        }
    }
    for item in items {
        match &item.content {
            ItemContent::Entry(idx) => {
                if let Some(message) = message(*idx) {
                    message_items(message, &mut out);
                }
            }
            ItemContent::Text(text) => {
                let source = item.source.and_then(message);
                let role = match source {
                    Some(message) if message.tool_results().next().is_some() => "tool",
                    Some(message) => role_name(message.role),
                    None => "user",
                };
                // A typed message cut to fit is still what the person typed.
                let real_user =
                    item.kind == ItemKind::Truncated && source.is_some_and(Message::is_real_user);
                out.push(dump_item(role, item.kind.as_str(), real_user, &text.raw));
            }
        }
    }
    out
}

/// Why `--dump-inputs` could not write its file.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the model inputs to {path}")]
pub struct DumpError {
    /// The file.
    pub path: PathBuf,
    /// The failure.
    #[source]
    pub source: io::Error,
}

/// The `--dump-inputs` file: JSON lines written through a 64 KiB buffer,
/// one trace's lines together (traces in the order they finish), into a
/// new file beside the target that [`InputDump::finish`] renames over it:
/// a replay that fails leaves the target as it was and no partial file.
pub struct InputDump {
    path: PathBuf,
    temporary: PathBuf,
    state: Mutex<DumpState>,
}

struct DumpState {
    out: BufWriter<File>,
    error: Option<io::Error>,
    finished: bool,
}

impl std::fmt::Debug for InputDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputDump")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for InputDump {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !state.finished {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

/// Says why `path` cannot take the dump without opening it: `-` (standard
/// output holds the report), something other than a regular file (a FIFO
/// would wait for a reader, a device never ends), or one of the
/// transcripts `replayed` (a file, or a folder walked for them), which
/// writing would destroy.
fn unfit_target(path: &Path, replayed: &[&Path]) -> Option<String> {
    if path.as_os_str() == "-" {
        return Some(
            "`-` is not standard output here (the report is printed there); pass a file path"
                .to_owned(),
        );
    }
    let existing = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Some("the path is a symbolic link; pass the path of a regular file".to_owned());
        }
        Ok(meta) if !meta.is_file() => {
            return Some(format!(
                "the path is {}, not a regular file",
                soba_store::untrusted::FileKind::of(&meta)
            ));
        }
        Ok(meta) => Some(meta),
        Err(_) => None,
    };
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let folder = std::fs::canonicalize(folder).ok();
    for input in replayed {
        let Ok(input_meta) = std::fs::metadata(input) else {
            continue;
        };
        if input_meta.is_dir() {
            let inside = folder.as_ref().zip(std::fs::canonicalize(input).ok());
            if inside.is_some_and(|(folder, input)| folder.starts_with(input)) {
                return Some(format!(
                    "it is inside {}, the folder being replayed, where it would be read as a transcript; write it elsewhere",
                    input.display()
                ));
            }
        } else if let Some(meta) = &existing {
            use std::os::unix::fs::MetadataExt;
            if meta.dev() == input_meta.dev() && meta.ino() == input_meta.ino() {
                return Some(
                    "it is the transcript being replayed, which writing would destroy; pass another file"
                        .to_owned(),
                );
            }
        }
    }
    None
}

impl InputDump {
    /// Prepares the dump into `path`, refused when `unfit_target` says
    /// so; `replayed` are the paths given to the replay. Writes go to a
    /// new file beside `path` until [`InputDump::finish`].
    pub fn create(path: &Path, replayed: &[&Path]) -> Result<InputDump, DumpError> {
        let fail = |source: io::Error| DumpError {
            path: path.to_owned(),
            source,
        };
        if let Some(why) = unfit_target(path, replayed) {
            return Err(fail(io::Error::other(why)));
        }
        let name = path
            .file_name()
            .ok_or_else(|| fail(io::Error::other("the path names no file")))?;
        let mut temporary_name = std::ffi::OsString::from(".");
        temporary_name.push(name);
        temporary_name.push(format!(".{}.tmp", std::process::id()));
        let temporary = path.with_file_name(temporary_name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)
            .map_err(fail)?;
        Ok(InputDump {
            path: path.to_owned(),
            temporary,
            state: Mutex::new(DumpState {
                out: BufWriter::with_capacity(64 << 10, file),
                error: None,
                finished: false,
            }),
        })
    }

    /// Writes one trace's lines: every runner's input at each probe point.
    /// The first write error is kept for [`InputDump::finish`].
    pub(crate) fn write_trace(
        &self,
        trace: &Trace,
        index: &ProbeIndex,
        names: &[String],
        inputs: &[(usize, Vec<Vec<Item>>)],
    ) {
        // A panic elsewhere while holding the lock leaves a buffer that is
        // still usable: take it back.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.error.is_some() {
            return;
        }
        let result = (|| -> io::Result<()> {
            for (step, at_point) in inputs {
                for (name, items) in names.iter().zip(at_point) {
                    let line = json!({
                        "trace": trace.name,
                        "request": step,
                        "requests": trace.steps.len(),
                        "policy": name,
                        "items": input_items(trace, index, *step, items),
                    });
                    serde_json::to_writer(&mut state.out, &line)?;
                    state.out.write_all(b"\n")?;
                }
            }
            Ok(())
        })();
        if let Err(err) = result {
            state.error = Some(err);
        }
    }

    /// Flushes the file and puts it in place of the target; returns the
    /// first error any write met (the target is then left as it was).
    pub fn finish(&self) -> Result<(), DumpError> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = match state.error.take() {
            Some(err) => Err(err),
            None => state
                .out
                .flush()
                .and_then(|()| std::fs::rename(&self.temporary, &self.path)),
        };
        state.finished = result.is_ok();
        result.map_err(|source| DumpError {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use soba_core::config::CompactionConfig;
    use soba_core::{ResultPart, ToolUse};

    use super::super::policy::{PolicyKind, PolicySpec};
    use super::super::testing::{Script, with_run};
    use super::*;

    fn call(id: &str, name: &str, input: Value) -> Message {
        Message::new(
            Role::Assistant,
            vec![Block::ToolUse(ToolUse {
                id: id.to_owned(),
                name: name.to_owned(),
                input: ToolInput::from_value(input),
            })],
        )
    }

    fn result(id: &str, body: &str, is_error: bool) -> Message {
        Message::new(
            Role::Tool,
            vec![Block::ToolResult(ToolResult {
                tool_use_id: id.to_owned(),
                content: vec![ResultPart::Text(body.to_owned())],
                is_error,
            })],
        )
    }

    fn check(messages: &[Message], expected: HistoryItems) {
        assert_eq!(extract(messages, Some("/work")), expected);
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn probe_points_are_the_last_request_of_each_fifth() {
        assert_eq!(probe_points(10), [1, 3, 5, 7, 9]);
        assert_eq!(probe_points(453), [90, 181, 271, 362, 452]);
        assert_eq!(probe_points(3), [0, 1, 1, 2, 2]);
        assert_eq!(probe_points(1), [0, 0, 0, 0, 0]);
        assert!(probe_points(0).is_empty());
    }

    #[test]
    fn files_are_the_paths_of_file_tools_and_patch_headers() {
        let patch = "*** Begin Patch\n*** Update File: src/d.rs\n@@\n-a\n+b\n*** Add File: /work/src/e.rs\n+x\n*** End Patch";
        check(
            &[
                call("1", "Read", json!({"file_path": "/work/src/a.rs"})),
                call(
                    "2",
                    "Edit",
                    json!({"file_path": "/work/src/b.rs", "old_string": "a"}),
                ),
                // A shell command naming a file is not a file tool.
                call("3", "Bash", json!({"command": "cat src/c.rs"})),
                call("4", "apply_patch", json!({"input": patch})),
                // The same file again counts once.
                call("5", "read_file", json!({"path": "./src/a.rs"})),
                call(
                    "6",
                    "str_replace_editor",
                    json!({"command": "view", "path": "/work/f.py"}),
                ),
                // A search names a folder, not a file it touched.
                call("7", "grep", json!({"pattern": "fn", "path": "src"})),
                // A patch through the shell (Codex) names its files too.
                call(
                    "8",
                    "shell",
                    json!({"command": ["apply_patch", "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch"]}),
                ),
                // Outside the working folder: as written.
                call("9", "write_file", json!({"file_path": "/tmp/notes.md"})),
            ],
            HistoryItems {
                files: strings(&[
                    "src/a.rs",
                    "src/b.rs",
                    "src/d.rs",
                    "src/e.rs",
                    "f.py",
                    "old.txt",
                    "/tmp/notes.md",
                ]),
                ..HistoryItems::default()
            },
        );
    }

    #[test]
    fn an_error_stays_open_until_the_same_call_succeeds() {
        let cargo = json!({"command": "cargo test"});
        check(
            &[
                call("1", "shell", cargo.clone()),
                result(
                    "1",
                    "Exit code: 101\nWall time: 1.2 seconds\nOutput:\n   Compiling a v0.1.0\nerror[E0308]: mismatched types\n  --> src/a.rs:3:5",
                    false,
                ),
                call("2", "shell", json!({"command": "python3 x.py"})),
                result(
                    "2",
                    "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nNameError: name 'y' is not defined",
                    false,
                ),
                call("3", "read", json!({"path": "/work/missing.rs"})),
                result("3", "File not found: /work/missing.rs", true),
                // A file's content that holds an error line is no failure.
                call("4", "read", json!({"path": "/work/log.txt"})),
                result("4", "error: this is a log line\nmore", false),
                // The same command again, now passing: the first error closes.
                call("5", "shell", cargo),
                result(
                    "5",
                    "Exit code: 0\nOutput:\ntest result: ok. 3 passed",
                    false,
                ),
                // A failure with only an exit line: its first line with a letter.
                call("6", "shell", json!({"command": "make lint"})),
                result("6", "exit status 2\nlint: 4 warnings", false),
            ],
            HistoryItems {
                files: strings(&["missing.rs", "log.txt"]),
                errors: strings(&[
                    "NameError: name 'y' is not defined",
                    "File not found: /work/missing.rs",
                    "lint: 4 warnings",
                ]),
                results: strings(&["error[E0308]: mismatched types"]),
                ..HistoryItems::default()
            },
        );
    }

    #[test]
    fn constraints_are_sentences_a_person_typed() {
        let mut injected = Message::user("You must always answer in English.");
        injected.origin = MessageOrigin::Injected;
        check(
            &[
                Message::user(
                    "Build the parser. Always run `sh run_tests.sh` after a change and keep the public functions pure.\n- Don't touch vendor/.\nThanks!",
                ),
                injected,
                call("1", "shell", json!({"command": "cat AGENTS.md"})),
                result("1", "You should never push to main.", false),
                Message::user("Never   use\tunwrap in library code!"),
                // The same sentence again counts once.
                Message::user("Don't touch vendor/."),
            ],
            HistoryItems {
                constraints: strings(&[
                    "Always run `sh run_tests.sh` after a change and keep the public functions pure.",
                    "Don't touch vendor/.",
                    "Never use unwrap in library code!",
                ]),
                ..HistoryItems::default()
            },
        );
    }

    #[test]
    fn open_plan_items_come_from_the_newest_plan() {
        let todo = call(
            "1",
            "TodoWrite",
            json!({"todos": [
                {"content": "Write the parser", "status": "completed", "activeForm": "Writing"},
                {"content": "Add tests", "status": "in_progress", "activeForm": "Adding"},
                {"content": "Update docs", "status": "pending", "activeForm": "Updating"},
            ]}),
        );
        let plan = call(
            "2",
            "update_plan",
            json!({"explanation": "tests pass", "plan": [
                {"step": "Add tests", "status": "completed"},
                {"step": "Ship it", "status": "pending"},
            ]}),
        );
        let todos = HistoryItems {
            plan: strings(&["Add tests", "Update docs"]),
            ..HistoryItems::default()
        };
        check(std::slice::from_ref(&todo), todos);
        check(
            &[todo, plan],
            HistoryItems {
                plan: strings(&["Ship it"]),
                ..HistoryItems::default()
            },
        );
        let gemini = call(
            "3",
            "write_todos",
            json!({"todos": [{"description": "Fix the bug", "status": "cancelled"}, {"description": "Run the tests", "status": "pending"}]}),
        );
        check(
            &[gemini],
            HistoryItems {
                plan: strings(&["Run the tests"]),
                ..HistoryItems::default()
            },
        );
    }

    #[test]
    fn older_results_are_the_sixth_to_the_twentieth_newest() {
        let mut messages = Vec::new();
        for i in 0..25 {
            messages.push(call(
                &i.to_string(),
                "shell",
                json!({"command": format!("echo {i}")}),
            ));
            messages.push(result(
                &i.to_string(),
                &format!("ok\nthe output of run number {i}\n"),
                false,
            ));
        }
        let lines: Vec<String> = (5..20)
            .map(|i| format!("the output of run number {i}"))
            .collect();
        check(
            &messages,
            HistoryItems {
                results: lines,
                ..HistoryItems::default()
            },
        );
        // Five results or fewer: none is 6 back.
        check(&messages[..10], HistoryItems::default());
    }

    /// A session with an item of every category that never nears the
    /// window.
    fn small_session() -> Script {
        let mut s = Script::new();
        s.user_text("Fix the parser. Always run the tests after a change.");
        let plan = s.call(
            "update_plan",
            json!({"plan": [{"step": "Fix the parser", "status": "in_progress"}]}),
        );
        s.result(&plan, "Plan updated", false);
        for i in 0..8 {
            s.read(&format!("src/f{i}.rs"), 200);
        }
        let test = s.call("shell", json!({"command": "cargo test"}));
        s.result(&test, "Exit code: 1\nerror: test parse_empty failed", false);
        s.answer("The parser fails on empty input.");
        s
    }

    #[test]
    fn none_keeps_everything_of_a_trace_that_fits() {
        let trace = small_session().trace(1_000_000, 10_000);
        let specs: Vec<PolicySpec> = PolicyKind::ALL.into_iter().map(PolicySpec::new).collect();
        with_run(
            &trace,
            &specs,
            &CompactionConfig::default(),
            |ctx, _, out| {
                assert_eq!(out.inputs.len(), 5);
                let counts = measure(&trace, ctx.index, &out.inputs, specs.len());
                // 11 requests: points 2, 4, 6, 8 and 10. Files: 1, 3, 5, 7 and
                // 8 read by then; the error opens at request 10 (its result
                // comes after 9); one constraint and one plan item at each
                // point; of 2, 4, 6, 8 and 10 results, 0, 0, 1, 3 and 5 are
                // 6–20 back.
                let expected = FidelityCounts {
                    kept: [24, 1, 5, 5, 9],
                    items: [24, 1, 5, 5, 9],
                };
                // Nothing compacts at this size: every policy keeps it all.
                for (spec, counts) in specs.iter().zip(&counts) {
                    assert_eq!(*counts, expected, "{spec}");
                }
            },
        );
    }

    #[test]
    fn a_policy_that_drops_old_results_keeps_fewer_of_them() {
        let mut s = Script::new();
        s.user_text("Read every file and only then summarise.");
        for i in 0..30 {
            s.read(&format!("src/f{i}.rs"), 2_000);
        }
        s.answer("done");
        let trace = s.trace(100_000, 10_000);
        let specs = [
            PolicySpec::new(PolicyKind::None),
            PolicySpec::parse("codex@40000").unwrap(),
        ];
        with_run(
            &trace,
            &specs,
            &CompactionConfig::default(),
            |ctx, _, out| {
                let counts = measure(&trace, ctx.index, &out.inputs, 2);
                let results = 4;
                assert_eq!(counts[0].kept[results], counts[0].items[results]);
                // 31 requests: points 6, 12, 18, 24 and 30, with 6, 12, 18, 24
                // and 30 results before them: 1, 7, 13, 15 and 15 of them 6–20
                // back.
                assert_eq!(counts[1].items[results], 51);
                // Codex keeps only the summary and the user messages after a
                // compaction: a result 6–20 back is kept when it was read
                // after the newest compaction, and the capsule quotes none.
                let verbatim: u64 = out
                    .inputs
                    .iter()
                    .map(|(step, inputs)| {
                        let history = history_items(&trace, *step);
                        let entries: Vec<usize> = inputs[1]
                            .iter()
                            .filter_map(|item| match item.content {
                                ItemContent::Entry(idx) => Some(idx),
                                ItemContent::Text(_) => None,
                            })
                            .collect();
                        history
                            .results
                            .iter()
                            .filter(|line| {
                                entries.iter().any(|&idx| {
                                    ctx.index
                                        .entry_text(idx)
                                        .is_some_and(|text| text.text.contains(line.as_str()))
                                })
                            })
                            .count() as u64
                    })
                    .sum();
                assert_eq!(counts[1].kept[results], verbatim);
                assert_eq!(counts[1].kept[results], 26);
                assert_eq!(counts[1].share(results), Some(26.0 / 51.0));
                // The files it read are named in the capsule.
                assert_eq!(counts[1].kept[0], counts[1].items[0]);
            },
        );
    }
}
