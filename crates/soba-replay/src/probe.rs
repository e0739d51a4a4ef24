//! Retention probes (SPEC §15.3): ground truth taken from the transcript
//! (never from the capsule extractor), and the grading of a policy's model
//! input at one request.
//!
//! A needle is present when, NFC-normalised with whitespace collapsed, it is
//! a substring of the rendered input; for instructions, the task and tool
//! results, its first and last 200 characters both appearing suffice. A
//! modified file is present when its workspace-relative path appears. Every
//! entry's normalised text and the set of modified files it names are
//! computed once per trace and shared by all policies.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use regex::{RegexSet, RegexSetBuilder};
use serde_json::Value;
use soba_core::command::{OutcomeTracker, Status, patch_arg, path_arg};
use soba_core::facts::{patch_paths, workspace_relative};
use soba_core::{Block, EntryBody, Message, Role, ToolUse};
use unicode_normalization::UnicodeNormalization;

use super::trace::Trace;

/// Characters of a long needle that must appear from its start and its end.
pub const HEAD_TAIL_CHARS: usize = 200;
/// Tool results the "recent detail" probe looks for.
pub const RECENT_RESULTS: usize = 5;

/// The five probes, in report order.
pub const PROBE_NAMES: [&str; 5] = [
    "filesModified",
    "originalTask",
    "latestInstruction",
    "unresolvedError",
    "recentDetail",
];

/// Returns `text` NFC-normalised with every whitespace run collapsed to one
/// space and both ends trimmed.
pub fn normalize(text: &str) -> String {
    let nfc: Cow<'_, str> = if text.is_ascii() {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.nfc().collect())
    };
    let mut out = String::with_capacity(nfc.len());
    for word in nfc.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Returns the text of a message as it is rendered in a model input: text,
/// thinking, tool calls (name and arguments) and tool results.
pub fn message_text(message: &Message) -> String {
    let mut out = String::new();
    for block in &message.content {
        let piece: Cow<'_, str> = match block {
            Block::Text(text) => Cow::Borrowed(text),
            Block::Thinking { text, .. } => Cow::Borrowed(text),
            Block::ToolUse(call) => {
                Cow::Owned(format!("{}\n{}", call.name, call.input.to_json_text()))
            }
            Block::ToolResult(result) => Cow::Owned(result.text()),
            Block::Image(_) => continue,
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&piece);
    }
    out
}

/// A set of modified files (indexes into [`ProbeIndex::files`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSet(Vec<u64>);

impl FileSet {
    fn insert(&mut self, idx: usize) {
        let word = idx / 64;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (idx % 64);
    }

    fn union_with(&mut self, other: &FileSet) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            *mine |= theirs;
        }
    }

    /// Returns how many of the files `0..n` are in the set.
    fn count_below(&self, n: usize) -> usize {
        let mut count = 0;
        for (word_idx, word) in self.0.iter().enumerate() {
            let start = word_idx * 64;
            if start >= n {
                break;
            }
            let bits = if n - start >= 64 {
                *word
            } else {
                word & ((1u64 << (n - start)) - 1)
            };
            count += bits.count_ones() as usize;
        }
        count
    }
}

/// Rendered text of one input message, normalised, with the modified files
/// it names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextItem {
    /// The normalised text.
    pub text: String,
    /// The text as sent, before normalising (`--dump-inputs` writes it).
    pub raw: String,
    /// Modified files whose path appears in it.
    pub files: FileSet,
}

/// What one input message is, for probes.
#[derive(Debug, Clone)]
pub enum ItemContent {
    /// A trace entry sent exactly as recorded.
    Entry(usize),
    /// Anything else: a summary, a stub, a truncated or capped message.
    Text(Arc<TextItem>),
}

/// One message of a policy's model input after message 0.
#[derive(Debug, Clone)]
pub struct Item {
    /// Equal keys mean the same message with the same content (the cache
    /// prefix compares them).
    pub key: u64,
    /// Its local token count.
    pub tokens: u64,
    /// What it holds.
    pub content: ItemContent,
    /// The trace entry it renders, verbatim or rewritten; `None` for
    /// summaries and attachments.
    pub source: Option<usize>,
    /// What it is, for `--dump-inputs`.
    pub kind: ItemKind,
}

/// What one input message is, as `--dump-inputs` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// A trace entry sent as recorded.
    Entry,
    /// A summary or capsule standing for earlier messages.
    Capsule,
    /// A message whose content the policy replaced by a short note (a
    /// stubbed, swept or pruned tool result).
    Stub,
    /// A message the policy cut to fit (head and end kept, or capped).
    Truncated,
    /// A file's content re-attached after a compaction.
    File,
}

impl ItemKind {
    /// Returns the `kind` written for a rewritten item.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Entry => "message",
            ItemKind::Capsule => "capsule",
            ItemKind::Stub => "stub",
            ItemKind::Truncated => "truncated",
            ItemKind::File => "file",
        }
    }
}

impl Item {
    /// Returns the item of a trace entry sent verbatim.
    pub fn entry(idx: usize, tokens: u64) -> Item {
        Item {
            key: idx as u64,
            tokens,
            content: ItemContent::Entry(idx),
            source: Some(idx),
            kind: ItemKind::Entry,
        }
    }

    /// Returns an item holding other text: a capsule when it renders no
    /// entry, else a stub (see [`Item::with_kind`]).
    pub fn text(key: u64, tokens: u64, text: Arc<TextItem>, source: Option<usize>) -> Item {
        Item {
            key,
            tokens,
            content: ItemContent::Text(text),
            source,
            kind: if source.is_some() {
                ItemKind::Stub
            } else {
                ItemKind::Capsule
            },
        }
    }

    /// Returns the item named as another kind.
    pub fn with_kind(mut self, kind: ItemKind) -> Item {
        self.kind = kind;
        self
    }

    /// Returns whether it is a trace entry sent verbatim.
    pub fn is_verbatim(&self) -> bool {
        matches!(self.content, ItemContent::Entry(_))
    }
}

/// A needle: one text the input should still hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needle {
    /// The entry it comes from.
    pub entry: usize,
    /// The whole normalised text, or its first 200 characters.
    pub head: String,
    /// Its last 200 characters, when it is longer than 400.
    pub tail: Option<String>,
}

impl Needle {
    /// Builds a needle from raw text; a long one keeps only its head and
    /// tail (the SPEC's middle-truncation allowance).
    pub fn new(entry: usize, raw: &str) -> Needle {
        let text = normalize(raw);
        let n = text.chars().count();
        if n <= 2 * HEAD_TAIL_CHARS {
            return Needle {
                entry,
                head: text,
                tail: None,
            };
        }
        let head: String = text.chars().take(HEAD_TAIL_CHARS).collect();
        let tail: String = text.chars().skip(n - HEAD_TAIL_CHARS).collect();
        Needle {
            entry,
            head,
            tail: Some(tail),
        }
    }

    /// Builds a needle that must appear whole (a file path).
    pub fn whole(entry: usize, raw: &str) -> Needle {
        Needle {
            entry,
            head: normalize(raw),
            tail: None,
        }
    }
}

/// The ground truth before one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Truth {
    /// Files modified so far: the first `files` of [`ProbeIndex::files`].
    pub files: usize,
    /// The original task (index into the needles).
    pub task: Option<usize>,
    /// The latest real user message.
    pub instruction: Option<usize>,
    /// The newest unresolved error.
    pub error: Option<usize>,
    /// The newest tool results, newest first.
    pub recent: Vec<usize>,
}

/// One request's probe scores; `None` where the probe has nothing to look
/// for yet (no file modified, no error, …).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProbeScores {
    /// Fraction of modified files named.
    pub files: Option<f64>,
    /// Whether the original task is present.
    pub task: Option<f64>,
    /// Whether the latest instruction is present.
    pub instruction: Option<f64>,
    /// Whether the newest unresolved error is present.
    pub error: Option<f64>,
    /// Fraction of the newest tool results present.
    pub recent: Option<f64>,
}

impl ProbeScores {
    /// Returns the scores in [`PROBE_NAMES`] order.
    pub fn values(&self) -> [Option<f64>; 5] {
        [
            self.files,
            self.task,
            self.instruction,
            self.error,
            self.recent,
        ]
    }

    /// Returns the request's score: the mean of the applicable probes, 1
    /// when none applies.
    pub fn mean(&self) -> f64 {
        let applicable: Vec<f64> = self.values().into_iter().flatten().collect();
        if applicable.is_empty() {
            1.0
        } else {
            applicable.iter().sum::<f64>() / applicable.len() as f64
        }
    }
}

/// Everything the probes need about one trace.
#[derive(Debug)]
pub struct ProbeIndex {
    /// Every file an explicit edit tool modified, in order of first change.
    pub files: Vec<String>,
    matcher: Option<RegexSet>,
    file_needles: Vec<String>,
    entry_text: Vec<Option<Arc<TextItem>>>,
    message0: TextItem,
    /// Every needle, referenced by index from [`Truth`].
    pub needles: Vec<Needle>,
    /// The ground truth before each step's request.
    pub truth: Vec<Truth>,
    /// The ground truth before each recorded compaction.
    pub compaction_truth: Vec<Truth>,
    /// `system`-role entries, in order.
    pub system_entries: Vec<usize>,
    /// The first response entry of each step.
    step_starts: Vec<usize>,
}

/// Returns the files a call modifies with an explicit edit tool (SPEC
/// §15.3: write, edit, MultiEdit, `apply_patch` headers, `str_replace_editor`
/// create/str_replace/insert, Gemini `write_file`/`replace`), as written.
/// `open_file` is SWE-agent's current file, which its `edit` acts on.
pub fn edited_files(call: &ToolUse, open_file: &mut Option<String>) -> Vec<String> {
    let name = call.name.to_ascii_lowercase();
    let input = &call.input;
    match name.as_str() {
        "open" => {
            if let Some(path) = path_arg(input) {
                *open_file = Some(path.to_owned());
            }
            Vec::new()
        }
        "str_replace_editor" | "edit" if input.str_arg("command").is_some() => {
            match (input.str_arg("command"), path_arg(input)) {
                (Some("create" | "str_replace" | "insert"), Some(path)) => vec![path.to_owned()],
                _ => Vec::new(),
            }
        }
        "write" | "write_file" | "create_file" | "create" | "edit" | "edit_file" | "multiedit"
        | "notebookedit" | "replace" | "str_replace" | "insert" => match path_arg(input) {
            Some(path) => {
                if name == "create" {
                    *open_file = Some(path.to_owned());
                }
                vec![path.to_owned()]
            }
            None if matches!(name.as_str(), "edit" | "insert") => {
                open_file.iter().cloned().collect()
            }
            None => Vec::new(),
        },
        "apply_patch" => patch_arg(input).map(patch_paths).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Returns the workspace root files are made relative to: the recorded
/// cwd, else the deepest folder holding every absolute path an edit tool
/// wrote (at least two files, and deeper than `/`), else none.
pub fn workspace_root(trace: &Trace) -> Option<String> {
    if let Some(cwd) = &trace.cwd {
        return Some(cwd.clone());
    }
    let mut open_file = None;
    let mut paths: Vec<String> = Vec::new();
    for entry in &trace.entries {
        let EntryBody::Message(message) = &entry.body else {
            continue;
        };
        for call in message.message.tool_uses() {
            for path in edited_files(call, &mut open_file) {
                if path.starts_with('/') && !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
    }
    if paths.len() < 2 {
        return None;
    }
    let mut common: Vec<&str> = paths[0].split('/').collect();
    common.pop(); // the file name
    for path in &paths[1..] {
        let parts: Vec<&str> = path.split('/').collect();
        let dir = &parts[..parts.len().saturating_sub(1)];
        let shared = common.iter().zip(dir).take_while(|(a, b)| a == b).count();
        common.truncate(shared);
    }
    let root = common.join("/");
    (root.len() > 1).then_some(root)
}

impl ProbeIndex {
    /// Computes the ground truth of every step and every entry's normalised
    /// text.
    pub fn build(trace: &Trace) -> ProbeIndex {
        let root = workspace_root(trace);
        let cwd = root.as_deref();
        let mut files: Vec<String> = Vec::new();
        let mut needles: Vec<Needle> = Vec::new();
        let mut truth_now = Truth::default();
        let mut truth = Vec::with_capacity(trace.steps.len());
        let mut compaction_truth = Vec::with_capacity(trace.compaction_entries.len());
        // The same pairing of results with commands as the fact extractor
        // (soba_core::command), so both agree on what is unresolved.
        let mut outcomes = OutcomeTracker::new(cwd);
        let mut open_file: Option<String> = None;
        // (sequence, key, needle) of every failure; key → last success.
        let mut failures: Vec<(usize, String, usize)> = Vec::new();
        let mut last_success: HashMap<String, usize> = HashMap::new();
        let mut seq = 0usize;
        let mut recent: Vec<usize> = Vec::new();
        let mut system_entries = Vec::new();
        let mut next_step = 0usize;
        let mut next_compaction = 0usize;
        for idx in 0..=trace.entries.len() {
            // Snapshot the ground truth before each request and before each
            // recorded compaction that starts here.
            let step_here = |next: usize| {
                trace
                    .steps
                    .get(next)
                    .is_some_and(|step| step.response.start <= idx)
            };
            let compaction_here = |next: usize| {
                trace
                    .compaction_entries
                    .get(next)
                    .is_some_and(|&entry| entry <= idx)
            };
            if step_here(next_step) || compaction_here(next_compaction) {
                truth_now.files = files.len();
                truth_now.recent = recent.clone();
                truth_now.error = failures
                    .iter()
                    .rev()
                    .find(|(failed_at, key, _)| {
                        last_success
                            .get(key)
                            .is_none_or(|success| success < failed_at)
                    })
                    .map(|(_, _, needle)| *needle);
                while step_here(next_step) {
                    truth.push(truth_now.clone());
                    next_step += 1;
                }
                while compaction_here(next_compaction) {
                    compaction_truth.push(truth_now.clone());
                    next_compaction += 1;
                }
            }
            let Some(entry) = trace.entries.get(idx) else {
                break;
            };
            if trace.ignored[idx] {
                continue;
            }
            let EntryBody::Message(entry) = &entry.body else {
                continue;
            };
            let message = &entry.message;
            if message.role == Role::System {
                system_entries.push(idx);
            }
            if message.is_real_user() {
                let needle = needles.len();
                needles.push(Needle::new(idx, &message.text()));
                truth_now.task.get_or_insert(needle);
                truth_now.instruction = Some(needle);
            }
            for block in &message.content {
                match block {
                    Block::ToolUse(call) if message.role == Role::Assistant => {
                        for path in edited_files(call, &mut open_file) {
                            let rel = workspace_relative(&path, cwd);
                            if !files.contains(&rel) {
                                files.push(rel);
                            }
                        }
                        outcomes.call(call);
                    }
                    Block::ToolResult(result) => {
                        seq += 1;
                        let needle = needles.len();
                        needles.push(Needle::new(idx, &result.text()));
                        recent.insert(0, needle);
                        recent.truncate(RECENT_RESULTS);
                        let outcome = outcomes.result(result);
                        match outcome.status {
                            Status::Failure => failures.push((seq, outcome.key, needle)),
                            Status::Success => {
                                last_success.insert(outcome.key, seq);
                            }
                            // A process still running neither fails nor
                            // succeeds until a poll reports its exit.
                            Status::Pending => {}
                        }
                    }
                    _ => {}
                }
            }
        }

        let file_needles: Vec<String> = files.iter().map(|file| normalize(file)).collect();
        let matcher = if file_needles.is_empty() {
            None
        } else {
            RegexSetBuilder::new(file_needles.iter().map(|file| regex::escape(file)))
                .size_limit(256 << 20)
                .dfa_size_limit(64 << 20)
                .build()
                .ok()
        };
        let mut index = ProbeIndex {
            files,
            matcher,
            file_needles,
            entry_text: Vec::new(),
            message0: TextItem::default(),
            needles,
            truth,
            compaction_truth,
            system_entries,
            step_starts: trace.steps.iter().map(|step| step.response.start).collect(),
        };
        let mut message0 = trace.system_prompt.clone();
        if !trace.tool_schemas.is_empty() {
            message0.push('\n');
            message0.push_str(&Value::Array(trace.tool_schemas.clone()).to_string());
        }
        index.message0 = index.text_item(&message0);
        index.entry_text = trace
            .entries
            .iter()
            .enumerate()
            .map(|(idx, entry)| match &entry.body {
                EntryBody::Message(message) if !trace.ignored[idx] => {
                    Some(Arc::new(index.text_item(&message_text(&message.message))))
                }
                _ => None,
            })
            .collect();
        index
    }

    /// Returns the normalised text of `raw` with the modified files it names.
    pub fn text_item(&self, raw: &str) -> TextItem {
        let text = normalize(raw);
        let mut files = FileSet::default();
        match &self.matcher {
            Some(matcher) => {
                for idx in matcher.matches(&text).iter() {
                    files.insert(idx);
                }
            }
            None => {
                for (idx, file) in self.file_needles.iter().enumerate() {
                    if text.contains(file.as_str()) {
                        files.insert(idx);
                    }
                }
            }
        }
        TextItem {
            text,
            raw: raw.to_owned(),
            files,
        }
    }

    /// Returns an entry's normalised text.
    pub fn entry_text(&self, idx: usize) -> Option<&Arc<TextItem>> {
        self.entry_text.get(idx).and_then(Option::as_ref)
    }

    /// Grades an input at `step`. `same_as_none` short-cuts an input equal
    /// to the full history, where every needle is present by construction.
    pub fn grade(&self, step: usize, items: &[Item], same_as_none: bool) -> ProbeScores {
        let Some(truth) = self.truth.get(step) else {
            return ProbeScores::default();
        };
        let applicable =
            |present: Option<f64>, applies: bool| applies.then(|| present.unwrap_or(1.0));
        if same_as_none {
            return ProbeScores {
                files: applicable(None, truth.files > 0),
                task: applicable(None, truth.task.is_some()),
                instruction: applicable(None, truth.instruction.is_some()),
                error: applicable(None, truth.error.is_some()),
                recent: applicable(None, !truth.recent.is_empty()),
            };
        }
        let verbatim: std::collections::HashSet<usize> = items
            .iter()
            .filter_map(|item| match item.content {
                ItemContent::Entry(idx) => Some(idx),
                ItemContent::Text(_) => None,
            })
            .collect();
        let texts: Vec<&str> = self.texts(step, items).collect();
        let found = |needle_idx: usize| -> f64 {
            let needle = &self.needles[needle_idx];
            if verbatim.contains(&needle.entry) {
                return 1.0;
            }
            let head = texts.iter().any(|text| text.contains(needle.head.as_str()));
            let tail = needle
                .tail
                .as_ref()
                .is_none_or(|tail| texts.iter().any(|text| text.contains(tail.as_str())));
            if head && tail { 1.0 } else { 0.0 }
        };
        let files = (truth.files > 0).then(|| {
            let mut named = self.message0.files.clone();
            for &idx in self.system_before(step) {
                if let Some(text) = self.entry_text(idx) {
                    named.union_with(&text.files);
                }
            }
            for item in items {
                match &item.content {
                    ItemContent::Entry(idx) => {
                        if let Some(text) = self.entry_text(*idx) {
                            named.union_with(&text.files);
                        }
                    }
                    ItemContent::Text(text) => named.union_with(&text.files),
                }
            }
            named.count_below(truth.files) as f64 / truth.files as f64
        });
        let recent = (!truth.recent.is_empty()).then(|| {
            truth
                .recent
                .iter()
                .map(|&needle| found(needle))
                .sum::<f64>()
                / truth.recent.len() as f64
        });
        ProbeScores {
            files,
            task: truth.task.map(found),
            instruction: truth.instruction.map(found),
            error: truth.error.map(found),
            recent,
        }
    }

    /// Grades a summary text alone (SPEC §15.5) against `truth`.
    pub fn grade_text(&self, truth: &Truth, summary: &TextItem) -> ProbeScores {
        let found = |needle_idx: usize| -> f64 {
            let needle = &self.needles[needle_idx];
            let head = summary.text.contains(needle.head.as_str());
            let tail = needle
                .tail
                .as_ref()
                .is_none_or(|tail| summary.text.contains(tail.as_str()));
            if head && tail { 1.0 } else { 0.0 }
        };
        ProbeScores {
            files: (truth.files > 0)
                .then(|| summary.files.count_below(truth.files) as f64 / truth.files as f64),
            task: truth.task.map(found),
            instruction: truth.instruction.map(found),
            error: truth.error.map(found),
            recent: (!truth.recent.is_empty()).then(|| {
                truth
                    .recent
                    .iter()
                    .map(|&needle| found(needle))
                    .sum::<f64>()
                    / truth.recent.len() as f64
            }),
        }
    }

    /// Returns the `system` entries recorded before `step`'s request.
    fn system_before(&self, step: usize) -> &[usize] {
        let start = self.step_starts.get(step).copied().unwrap_or(usize::MAX);
        let n = self.system_entries.partition_point(|&idx| idx < start);
        &self.system_entries[..n]
    }

    fn texts<'a>(&'a self, step: usize, items: &'a [Item]) -> impl Iterator<Item = &'a str> + 'a {
        std::iter::once(self.message0.text.as_str())
            .chain(
                self.system_before(step)
                    .iter()
                    .filter_map(|&idx| self.entry_text(idx).map(|text| text.text.as_str())),
            )
            .chain(items.iter().filter_map(|item| match &item.content {
                ItemContent::Entry(idx) => self.entry_text(*idx).map(|text| text.text.as_str()),
                ItemContent::Text(text) => Some(text.text.as_str()),
            }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use soba_core::ToolInput;

    use super::super::testing::Script;
    use super::*;

    /// A session with every kind of ground truth; returns it with the
    /// entries of the task, the latest instruction and the unresolved
    /// error's result.
    fn session() -> (Script, usize, usize, usize) {
        let mut s = Script::new();
        let task = s.user_text("Build the parser for the config files.");
        let write = s.call(
            "write",
            json!({"path": "/work/src/a.rs", "content": "fn a() {}"}),
        );
        s.result(&write, "wrote src/a.rs", false);
        // A shell edit is not an explicit edit tool.
        let sed = s.call("bash", json!({"command": "sed -i s/x/y/ src/b.rs"}));
        s.result(&sed, "", false);
        let patch = s.call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Add File: src/c.rs\n+x\n*** End Patch"}),
        );
        s.result(&patch, "Done!", false);
        let test = s.call("bash", json!({"command": "cargo test"}));
        s.result(&test, "test parse ... FAILED", true);
        let build = s.call("bash", json!({"command": "cargo   build"}));
        let error = s.result(&build, "error[E0308]: mismatched types", true);
        // The same command, whitespace aside, passes: the test failure is
        // resolved; the build failure is not.
        let retest = s.call("bash", json!({"command": "cargo  test"}));
        s.result(&retest, "test result: ok", false);
        let instruction = s.user_text("Now add   docs.");
        let read = s.call("read", json!({"path": "src/a.rs"}));
        s.result(&read, "fn a() {}", false);
        s.answer("done");
        (s, task, instruction, error)
    }

    #[test]
    fn ground_truth_comes_from_the_transcript() {
        let (script, task, instruction, error) = session();
        let trace = script.trace(100_000, 10_000);
        let index = ProbeIndex::build(&trace);
        assert_eq!(index.files, ["src/a.rs", "src/c.rs"]);
        let last = index.truth.last().unwrap();
        assert_eq!(last.files, 2);
        assert_eq!(index.needles[last.task.unwrap()].entry, task);
        assert_eq!(index.needles[last.instruction.unwrap()].entry, instruction);
        assert_eq!(
            index.needles[last.instruction.unwrap()].head,
            "Now add docs."
        );
        assert_eq!(index.needles[last.error.unwrap()].entry, error);
        assert_eq!(last.recent.len(), RECENT_RESULTS);
        assert_eq!(index.needles[last.recent[0]].head, "fn a() {}");
        // Before the retest, the test failure was the newest unresolved one.
        let before_retest = &index.truth[5];
        assert_eq!(
            index.needles[before_retest.error.unwrap()].head,
            "error[E0308]: mismatched types"
        );
        let before_build = &index.truth[4];
        assert_eq!(
            index.needles[before_build.error.unwrap()].head,
            "test parse ... FAILED"
        );
        // Nothing was modified before the first call.
        assert_eq!(index.truth[0].files, 0);
        assert_eq!(index.truth[0].error, None);
    }

    /// Returns the extractor's unresolved errors over the trace's entries
    /// before `step`'s request, newest first, as (key, text).
    fn extracted_errors(trace: &Trace, step: usize) -> Vec<(String, String)> {
        let end = trace.steps[step].response.start;
        let span: Vec<soba_core::Entry> = trace.entries[..end]
            .iter()
            .enumerate()
            .filter(|(idx, _)| !trace.ignored[*idx])
            .map(|(_, entry)| entry.clone())
            .collect();
        let facts = soba_core::facts::extract(
            &soba_core::facts::FactsInput {
                tail: &[],
                span: &span,
                previous: None,
                retained: &std::collections::HashSet::new(),
                cwd: trace.cwd.as_deref(),
            },
            &soba_core::facts::FactsConfig::default(),
            &soba_core::tokens::ByteCounter,
        );
        facts
            .unresolved_errors
            .into_iter()
            .map(|error| (error.key, error.text))
            .collect()
    }

    #[test]
    fn the_probe_and_the_extractor_agree_on_unresolved_errors() {
        let mut s = Script::new();
        s.user_text("Fix the build and the tests.");
        let step = |s: &mut Script, tool: &str, input: serde_json::Value, out: &str, err: bool| {
            let id = s.call(tool, input);
            s.result(&id, out, err)
        };
        // Codex exec_command: `cmd` as a string, the directory as `workdir`.
        let go_test = step(
            &mut s,
            "exec_command",
            json!({"cmd": "go test ./...", "workdir": "/work/backend", "justification": "run tests"}),
            "Command: /bin/bash -lc 'go test ./...'\nChunk ID: a1\nWall time: 2.1 seconds\nProcess exited with code 1\nOutput:\n--- FAIL: TestLogin",
            false,
        );
        let npm_test = step(
            &mut s,
            "exec_command",
            json!({"cmd": "npm run test", "workdir": "/work/frontend"}),
            "Command: /bin/bash -lc 'npm run test'\nChunk ID: a2\nWall time: 3.0 seconds\nProcess exited with code 1\nOutput:\nFAIL src/App.test.js",
            false,
        );
        // Codex shell: an argv array with a `bash -lc` wrapper.
        let build = step(
            &mut s,
            "shell",
            json!({"command": ["bash", "-lc", "cargo build"]}),
            "error[E0432]: unresolved import `crate::db`\nExit code: 101",
            false,
        );
        // OpenHands str_replace_editor: keyed by its path, not by its
        // `command` argument.
        let replace = step(
            &mut s,
            "str_replace_editor",
            json!({"command": "str_replace", "path": "/work/a.py", "old_str": "x", "new_str": "y"}),
            "ERROR: No replacement was performed, old_str `x` did not appear verbatim in /work/a.py.",
            true,
        );
        step(
            &mut s,
            "str_replace_editor",
            json!({"command": "str_replace", "path": "/work/b.py", "old_str": "x", "new_str": "y"}),
            "The file /work/b.py has been edited.",
            false,
        );
        // `cd backend && …` from the root is the same command as the
        // workdir form: the go test failure is resolved.
        step(
            &mut s,
            "bash",
            json!({"command": "cd backend && go test ./..."}),
            "ok  pharma/internal 0.4s",
            false,
        );
        // The same npm command at the root is another command.
        step(
            &mut s,
            "exec_command",
            json!({"cmd": "npm run test"}),
            "Process exited with code 0\nOutput:\nno tests",
            false,
        );
        // A string `bash -lc` wrapper with other spacing resolves the build.
        step(
            &mut s,
            "bash",
            json!({"command": "bash -lc 'cargo  build'"}),
            "Finished `dev` profile",
            false,
        );
        // A background run fails through write_stdin; a second run that is
        // still running resolves nothing until its poll reports exit 0.
        step(
            &mut s,
            "exec_command",
            json!({"cmd": "./run_tests.sh", "workdir": "/work"}),
            "Command: /bin/bash -lc ./run_tests.sh\nChunk ID: b1\nWall time: 30.0 seconds\nProcess running with session ID 7\nOutput:\nRUNNING: Backend Go unit tests",
            false,
        );
        let run_failed = step(
            &mut s,
            "write_stdin",
            json!({"session_id": 7, "chars": "", "yield_time_ms": 30000}),
            "Command: /bin/bash -lc ./run_tests.sh\nChunk ID: b2\nWall time: 66.4 seconds\nProcess exited with code 1\nOutput:\nRESULT: FAIL - Wait for backend API",
            false,
        );
        step(
            &mut s,
            "exec_command",
            json!({"cmd": "./run_tests.sh"}),
            "Command: /bin/bash -lc ./run_tests.sh\nChunk ID: b3\nWall time: 10.0 seconds\nProcess running with session ID 8\nOutput:\n",
            false,
        );
        step(
            &mut s,
            "write_stdin",
            json!({"session_id": 8, "chars": ""}),
            "Command: /bin/bash -lc ./run_tests.sh\nChunk ID: b4\nWall time: 20.0 seconds\nProcess exited with code 0\nOutput:\nTEST SUMMARY Passed: 8 Failed: 0",
            false,
        );
        s.answer("All green.");
        let trace = s.trace(100_000, 10_000);
        let index = ProbeIndex::build(&trace);

        // The probe's newest unresolved error before each request (step k
        // follows the first k calls).
        let newest: Vec<Option<usize>> = index
            .truth
            .iter()
            .map(|truth| truth.error.map(|needle| index.needles[needle].entry))
            .collect();
        let (e1, e2, e3, e4, e5) = (
            Some(go_test),
            Some(npm_test),
            Some(build),
            Some(replace),
            Some(run_failed),
        );
        assert_eq!(
            newest,
            [None, e1, e2, e3, e4, e4, e4, e4, e4, e4, e5, e5, e4]
        );
        // The extractor, run on the same entries, lists that error first.
        for (step, truth) in index.truth.iter().enumerate() {
            let extracted = extracted_errors(&trace, step);
            let probe = truth.error.map(|needle| index.needles[needle].head.clone());
            let extractor = extracted.first().map(|(_, text)| normalize(text));
            assert_eq!(extractor, probe, "step {step}");
        }
        let keys: Vec<String> = extracted_errors(&trace, trace.steps.len() - 1)
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(
            keys,
            ["str_replace_editor a.py", "$ cd frontend && npm run test"]
        );
    }

    #[test]
    fn every_probe_grades_a_summary_only_input() {
        let (script, _, _, _) = session();
        let trace = script.trace(100_000, 10_000);
        let index = ProbeIndex::build(&trace);
        let step = trace.steps.len() - 1;
        let grade = |text: &str| {
            let item = Item::text(1 << 62, 10, Arc::new(index.text_item(text)), None);
            index.grade(step, &[item], false)
        };
        let nothing = grade("nothing useful");
        assert_eq!(nothing.files, Some(0.0));
        assert_eq!(nothing.task, Some(0.0));
        assert_eq!(nothing.instruction, Some(0.0));
        assert_eq!(nothing.error, Some(0.0));
        assert_eq!(nothing.recent, Some(0.0));
        assert_eq!(nothing.mean(), 0.0);

        let summary = grade(
            "Files: src/a.rs. Task: Build the parser for the config files. \
             Latest: Now add docs.\nError: error[E0308]: mismatched types\n fn a() {}",
        );
        assert_eq!(summary.files, Some(0.5));
        assert_eq!(summary.task, Some(1.0));
        assert_eq!(summary.instruction, Some(1.0), "whitespace collapsed");
        assert_eq!(summary.error, Some(1.0));
        // Of the newest five results ("fn a() {}", "test result: ok", the
        // build error, the test failure, "Done!"), two are in the summary.
        assert_eq!(summary.recent, Some(0.4));
        assert!((summary.mean() - (0.5 + 1.0 + 1.0 + 1.0 + 0.4) / 5.0).abs() < 1e-9);

        // An input equal to the full history is complete by construction.
        let complete = index.grade(step, &[], true);
        assert_eq!(complete.mean(), 1.0);
        assert_eq!(complete.files, Some(1.0));
    }

    #[test]
    fn verbatim_entries_hold_their_needles() {
        let (script, task, instruction, error) = session();
        let trace = script.trace(100_000, 10_000);
        let index = ProbeIndex::build(&trace);
        let step = trace.steps.len() - 1;
        let items: Vec<Item> = [task, instruction, error]
            .iter()
            .map(|&idx| Item::entry(idx, trace.entry_tokens[idx]))
            .collect();
        let scores = index.grade(step, &items, false);
        assert_eq!(scores.task, Some(1.0));
        assert_eq!(scores.instruction, Some(1.0));
        assert_eq!(scores.error, Some(1.0));
        assert_eq!(
            scores.recent,
            Some(0.2),
            "the error is one of the newest five"
        );
        // The write call names src/a.rs in its arguments; src/c.rs is named
        // nowhere.
        assert_eq!(scores.files, Some(0.0));
    }

    #[test]
    fn long_needles_need_only_their_head_and_tail() {
        let long = format!("{}{}{}", "a".repeat(300), "MIDDLE", "z".repeat(300));
        let needle = Needle::new(0, &long);
        assert_eq!(needle.head.chars().count(), HEAD_TAIL_CHARS);
        assert_eq!(
            needle.tail.as_deref().map(|t| t.chars().count()),
            Some(HEAD_TAIL_CHARS)
        );
        let mut s = Script::new();
        s.user_text(&long);
        s.answer("ok");
        let trace = s.trace(100_000, 10_000);
        let index = ProbeIndex::build(&trace);
        let cut = format!(
            "{}[… 206 characters omitted …]{}",
            "a".repeat(200),
            "z".repeat(200)
        );
        let item = Item::text(1 << 62, 10, Arc::new(index.text_item(&cut)), None);
        assert_eq!(index.grade(0, &[item], false).task, Some(1.0));
        let head_only = Item::text(
            1 << 62,
            10,
            Arc::new(index.text_item(&"a".repeat(300))),
            None,
        );
        assert_eq!(index.grade(0, &[head_only], false).task, Some(0.0));
    }

    #[test]
    fn needles_are_nfc_normalised_with_whitespace_collapsed() {
        assert_eq!(normalize("  e\u{301}t\u{e9} \n\t ok  "), "\u{e9}t\u{e9} ok");
        let mut s = Script::new();
        s.user_text("Caf\u{e9}   au lait");
        s.answer("ok");
        let trace = s.trace(100_000, 10_000);
        let index = ProbeIndex::build(&trace);
        let decomposed = Item::text(
            1 << 62,
            10,
            Arc::new(index.text_item("said: Cafe\u{301} au\nlait.")),
            None,
        );
        assert_eq!(index.grade(0, &[decomposed], false).task, Some(1.0));
    }

    #[test]
    fn without_a_recorded_cwd_files_are_relative_to_their_common_folder() {
        let mut s = Script::new();
        s.user_text("go");
        let a = s.call("Write", json!({"file_path": "/home/me/proj/src/a.rs"}));
        s.result(&a, "ok", false);
        let b = s.call("Edit", json!({"file_path": "/home/me/proj/docs/b.md"}));
        s.result(&b, "ok", false);
        s.answer("done");
        let mut session = s.session();
        session.cwd = None;
        let trace = crate::trace::Trace::prepare(
            "t".into(),
            session,
            &crate::trace::TraceOptions {
                window: Some(100_000),
                counting: crate::trace::Counting::Bytes,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(workspace_root(&trace).as_deref(), Some("/home/me/proj"));
        assert_eq!(ProbeIndex::build(&trace).files, ["src/a.rs", "docs/b.md"]);
    }

    #[test]
    fn edit_tools_name_their_files() {
        let call = |name: &str, input: serde_json::Value| ToolUse {
            id: "c".into(),
            name: name.into(),
            input: ToolInput::from_value(input),
        };
        let mut open = None;
        let edited = |c: ToolUse, open: &mut Option<String>| edited_files(&c, open);
        assert_eq!(
            edited(call("Edit", json!({"file_path": "a.rs"})), &mut open),
            ["a.rs"]
        );
        assert_eq!(
            edited(call("MultiEdit", json!({"file_path": "b.rs"})), &mut open),
            ["b.rs"]
        );
        assert_eq!(
            edited(
                call(
                    "str_replace_editor",
                    json!({"command": "view", "path": "c.rs"})
                ),
                &mut open
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            edited(
                call(
                    "str_replace_editor",
                    json!({"command": "insert", "path": "c.rs"})
                ),
                &mut open
            ),
            ["c.rs"]
        );
        assert_eq!(
            edited(call("replace", json!({"file_path": "d.rs"})), &mut open),
            ["d.rs"]
        );
        assert_eq!(
            edited(call("Read", json!({"file_path": "e.rs"})), &mut open),
            Vec::<String>::new()
        );
        // SWE-agent edits the file it opened last.
        assert!(edited(call("open", json!({"path": "f.py"})), &mut open).is_empty());
        assert_eq!(
            edited(call("edit", json!({"value": "10:12"})), &mut open),
            ["f.py"]
        );
    }
}
