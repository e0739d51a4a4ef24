//! Files come back after a compaction (issue 32, item 3): the current
//! content of the files modified before a capsule, most recently modified
//! first, is placed after the capsule in the model input, within a budget
//! (`compaction.rehydrate.*`: 5 files, 5,000 tokens each, 25,000 in all by
//! default), as Claude Code and Qwen Code do.
//!
//! The candidates ([`candidates`]) are the files modified in the span
//! being compacted, most recently modified first. A file only an earlier
//! capsule knew of (brought back, listed, or modified before it) and that
//! nothing has modified since is listed by path only: the work has moved on
//! from it for a whole compaction cycle, and bringing it back at every
//! compaction would pay for its content at every later request (on the
//! tuning half of the shared traces this cost 4 % of the billed tokens for
//! no item the fidelity probe counts). The rules, in order, for each file
//! modified in the span:
//!
//! - a file gone from the workspace is skipped;
//! - a file whose content is already verbatim in the retained tail (a write
//!   call's `content`, or a tool result that contains it, line numbers of a
//!   `cat -n` or `N→` read taken off) is skipped: the model input has it;
//! - once `maxFiles` files are shown or `maxTokens` are used, a file is
//!   listed by path only (at most [`PATHS_ONLY_MAX`] paths; the capsule's
//!   "Files modified" has them all); so is a file that cannot be read as
//!   text (binary, too large, not a regular file) or of which not one line
//!   fits what is left;
//! - a file over `maxTokensPerFile` (or over what is left of `maxTokens`) is
//!   cut on line boundaries, and a marker says where and how to read the
//!   rest (`read_file` with `offset`).
//!
//! What was brought back is recorded on the capsule entry
//! ([`crate::capsule::Rehydration`]), so resume and rewind rebuild the same
//! input without reading the disk again. Nothing here reads a file: the
//! driver gives a [`FileSource`] (the engine reads the workspace through its
//! confinement, the replay the newest content the transcript shows,
//! [`TranscriptFiles`]).

use std::collections::HashMap;

use crate::capsule::{Capsule, RehydratedFile, Rehydration};
use crate::config::RehydrateConfig;
use crate::entry::{Entry, EntryBody};
use crate::facts::call_facts;
use crate::render::{self, LABEL_MAX_CHARS};
use crate::tokens::{TokenCount, TokenCounter};

const FILE_TEMPLATE: &str = include_str!("../templates/rehydrated_file.md");
const PATHS_TEMPLATE: &str = include_str!("../templates/rehydrated_paths.md");

/// The most paths listed without content after a capsule.
pub const PATHS_ONLY_MAX: usize = 20;

/// What a [`FileSource`] found at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileContent {
    /// The file's text.
    Text(String),
    /// Nothing is there any more: the file is skipped.
    Gone,
    /// Something is there but cannot be shown as text (binary, too large,
    /// not a regular file, outside the workspace, unknown to a transcript):
    /// listed by path only.
    Unreadable,
}

/// What a [`FileSource`] knows of a path without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileProbe {
    /// A file of this many bytes, which [`FileSource::read`] may still
    /// find unreadable (binary).
    Bytes(u64),
    /// Nothing is there any more.
    Gone,
    /// Something that cannot be shown as text is there.
    Unreadable,
}

/// Where the current content of a file comes from.
pub trait FileSource {
    /// Returns the content of `path` (workspace-relative, as the capsule's
    /// facts list it).
    fn read(&self, path: &str) -> FileContent;

    /// Returns what is at `path` without reading it: for the planner's
    /// estimate, run at every preflight that plans, and for a file listed
    /// by path only.
    fn probe(&self, path: &str) -> FileProbe;
}

/// The files a capsule may bring back ([`candidates`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidates {
    /// Files modified in the span, most recently modified first: shown
    /// with their content, within the budget.
    pub fresh: Vec<String>,
    /// Files only the previous capsule knew of (brought back, listed, or
    /// modified before it), newest first: listed by path only.
    pub carried: Vec<String>,
}

impl Candidates {
    /// Returns candidates that are all fresh.
    pub fn fresh(paths: &[String]) -> Self {
        Candidates {
            fresh: paths.to_vec(),
            carried: Vec::new(),
        }
    }
}

/// Returns the files modified in `span` (by the explicit edit tools and the
/// shell commands the capsule's facts recognise), most recently modified
/// first, and apart from them those the previous capsule brought back or
/// listed or that were modified before it, newest first.
pub fn candidates(span: &[Entry], previous: Option<&Capsule>, cwd: Option<&str>) -> Candidates {
    let mut last_change: HashMap<String, usize> = HashMap::new();
    let mut seq = 0usize;
    for entry in span {
        let EntryBody::Message(message) = &entry.body else {
            continue;
        };
        for call in message.message.tool_uses() {
            for path in call_facts(call, cwd).modified {
                seq += 1;
                last_change.insert(path, seq);
            }
        }
    }
    let mut ordered: Vec<(String, usize)> = last_change.into_iter().collect();
    ordered.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let fresh: Vec<String> = ordered.into_iter().map(|(path, _)| path).collect();
    let mut carried: Vec<String> = Vec::new();
    if let Some(previous) = previous {
        let known = previous
            .rehydrated
            .files
            .iter()
            .map(|file| &file.path)
            .chain(previous.rehydrated.paths_only.iter())
            .chain(previous.local.files_modified.iter().rev());
        for path in known {
            if !fresh.contains(path) && !carried.contains(path) {
                carried.push(path.clone());
            }
        }
    }
    Candidates { fresh, carried }
}

/// Lists the carried candidates that are still there by path only, after
/// whatever `paths_only` already holds, up to [`PATHS_ONLY_MAX`].
fn list_carried(carried: &[String], files: &dyn FileSource, paths_only: &mut Vec<String>) {
    for path in carried {
        if paths_only.len() >= PATHS_ONLY_MAX {
            break;
        }
        if !paths_only.contains(path) && files.probe(path) != FileProbe::Gone {
            paths_only.push(path.clone());
        }
    }
}

/// Chooses what comes back after a capsule: `candidates` in order (most
/// recently modified first), read from `files`, within `config` (see the
/// module docs); `retained` is the retained tail, whose verbatim copies are
/// not repeated.
pub fn select(
    candidates: &Candidates,
    files: &dyn FileSource,
    retained: &[Entry],
    config: &RehydrateConfig,
    counter: &dyn TokenCounter,
) -> Rehydration {
    let mut out = Rehydration::default();
    if !config.is_enabled() {
        return out;
    }
    let mut used = TokenCount::ZERO;
    for path in &candidates.fresh {
        let full = out.files.len() >= config.max_files || used >= config.max_tokens;
        if full {
            if out.paths_only.len() >= PATHS_ONLY_MAX {
                break;
            }
            if files.probe(path) != FileProbe::Gone {
                out.paths_only.push(path.clone());
            }
            continue;
        }
        let content = match files.read(path) {
            FileContent::Gone => continue,
            FileContent::Unreadable => {
                if out.paths_only.len() < PATHS_ONLY_MAX {
                    out.paths_only.push(path.clone());
                }
                continue;
            }
            FileContent::Text(text) => text,
        };
        if is_verbatim_in(retained, &content) {
            continue;
        }
        let allowance = config
            .max_tokens_per_file
            .min(config.max_tokens.saturating_sub(used));
        match fit_file(path, &content, allowance, counter) {
            Some((file, n_tokens)) => {
                used += n_tokens;
                out.files.push(file);
            }
            None if out.paths_only.len() < PATHS_ONLY_MAX => out.paths_only.push(path.clone()),
            None => {}
        }
    }
    list_carried(&candidates.carried, files, &mut out.paths_only);
    out
}

/// Bytes per token the planner's estimate assumes: fewer than source code
/// averages, so the estimate stays above what [`select`] brings back.
const ESTIMATE_BYTES_PER_TOKEN: u64 = 3;

/// Estimates the tokens [`select`] would bring back for `candidates`,
/// from the files' sizes alone ([`FileSource::probe`]): an upper bound the
/// planner takes at every preflight that plans, where reading and counting
/// every file would cost too much. Verbatim copies in the tail are not
/// looked for.
pub fn estimate(
    candidates: &Candidates,
    files: &dyn FileSource,
    config: &RehydrateConfig,
    counter: &dyn TokenCounter,
) -> TokenCount {
    if !config.is_enabled() {
        return TokenCount::ZERO;
    }
    let mut used = TokenCount::ZERO;
    let mut shown = 0usize;
    let mut paths_only: Vec<String> = Vec::new();
    for path in &candidates.fresh {
        if shown >= config.max_files || used >= config.max_tokens {
            if paths_only.len() >= PATHS_ONLY_MAX {
                break;
            }
            if files.probe(path) != FileProbe::Gone {
                paths_only.push(path.clone());
            }
            continue;
        }
        match files.probe(path) {
            FileProbe::Gone => {}
            FileProbe::Unreadable => {
                if paths_only.len() < PATHS_ONLY_MAX {
                    paths_only.push(path.clone());
                }
            }
            FileProbe::Bytes(n_bytes) => {
                let frame = RehydratedFile {
                    path: path.clone(),
                    text: String::new(),
                    total_lines: 2,
                    shown_lines: 1,
                };
                let overhead = counter.count_text(&render_file(&frame)).n;
                let content = TokenCount::new(n_bytes.div_ceil(ESTIMATE_BYTES_PER_TOKEN));
                let allowance = config
                    .max_tokens_per_file
                    .min(config.max_tokens.saturating_sub(used));
                used += (overhead + content).min(allowance);
                shown += 1;
            }
        }
    }
    list_carried(&candidates.carried, files, &mut paths_only);
    let listed = Rehydration {
        files: Vec::new(),
        paths_only,
    };
    used + tokens(&listed, counter)
}

/// Returns the text blocks that follow the capsule in its model-input
/// message: one labelled block per file, then one listing the paths shown
/// by path only.
pub fn blocks(rehydration: &Rehydration) -> Vec<String> {
    let mut out: Vec<String> = rehydration.files.iter().map(render_file).collect();
    if !rehydration.paths_only.is_empty() {
        let paths = rehydration
            .paths_only
            .iter()
            .map(|path| format!("`{}`", render::neutral_label(path, LABEL_MAX_CHARS)))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(
            render::fill(PATHS_TEMPLATE, &[("paths", &paths)])
                .trim_end()
                .to_owned(),
        );
    }
    out
}

/// Returns the local tokens the blocks of `rehydration` add to the model
/// input.
pub fn tokens(rehydration: &Rehydration, counter: &dyn TokenCounter) -> TokenCount {
    blocks(rehydration)
        .iter()
        .map(|block| counter.count_text(block).n)
        .sum()
}

/// Renders one file's block.
pub fn render_file(file: &RehydratedFile) -> String {
    let path = render::neutral_label(&file.path, LABEL_MAX_CHARS);
    let plural = |n: u64| if n == 1 { "line" } else { "lines" };
    let extent = if file.total_lines == 0 {
        "empty".to_owned()
    } else if file.is_cut() {
        format!("lines 1–{} of {}", file.shown_lines, file.total_lines)
    } else {
        format!("{} {}", file.total_lines, plural(file.total_lines))
    };
    let cut_note = if file.is_cut() {
        format!(
            "\n\n[Cut after line {} of {} to stay within the budget: read_file `{path}` with offset {} for the rest.]",
            file.shown_lines,
            file.total_lines,
            file.shown_lines + 1
        )
    } else {
        String::new()
    };
    let fence = fence_for(&file.text);
    render::fill(
        FILE_TEMPLATE,
        &[
            ("path", &path),
            ("extent", &extent),
            ("fence", &fence),
            ("text", &file.text),
            ("cut_note", &cut_note),
        ],
    )
    .trim_end()
    .to_owned()
}

/// Returns a backtick fence longer than any backtick run in `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0usize;
    let mut run = 0usize;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// Returns the number of lines of `text` (a last line without a newline
/// counts).
fn count_lines(text: &str) -> u64 {
    text.split_inclusive('\n').count() as u64
}

/// Fits one file into `allowance` tokens: whole, or its first lines with a
/// cut marker; `None` when not one line fits.
fn fit_file(
    path: &str,
    content: &str,
    allowance: TokenCount,
    counter: &dyn TokenCounter,
) -> Option<(RehydratedFile, TokenCount)> {
    let total_lines = count_lines(content);
    let whole = RehydratedFile {
        path: path.to_owned(),
        text: content.trim_end_matches('\n').to_owned(),
        total_lines,
        shown_lines: total_lines,
    };
    let n_whole = counter.count_text(&render_file(&whole)).n;
    if n_whole <= allowance {
        return Some((whole, n_whole));
    }
    let cut = |shown: usize| {
        let text: String = content.split_inclusive('\n').take(shown).collect();
        RehydratedFile {
            path: path.to_owned(),
            text: text.trim_end_matches('\n').to_owned(),
            total_lines,
            shown_lines: shown as u64,
        }
    };
    // Estimate from per-line counts (only as many lines as can fit are
    // counted), then check the rendered block and step back until it fits.
    let overhead = counter.count_text(&render_file(&cut(0))).n;
    let room = allowance.saturating_sub(overhead);
    // Running sums of the lines' counts: prefix[k] is the first k lines'.
    let mut prefix: Vec<TokenCount> = vec![TokenCount::ZERO];
    for line in content.split_inclusive('\n') {
        let sum = prefix[prefix.len() - 1] + counter.count_text(line).n;
        if sum > room {
            break;
        }
        prefix.push(sum);
    }
    let mut shown = prefix.len() - 1;
    while shown > 0 {
        let file = cut(shown);
        let n_tokens = counter.count_text(&render_file(&file)).n;
        if n_tokens <= allowance {
            return Some((file, n_tokens));
        }
        // Drop the fewest lines whose estimate covers the excess.
        let excess = n_tokens.saturating_sub(allowance);
        let mut keep = shown - 1;
        while keep > 0 && prefix[shown].saturating_sub(prefix[keep]) < excess {
            keep -= 1;
        }
        shown = keep;
    }
    None
}

/// Returns whether `content` is already verbatim in the retained tail: a
/// tool call's string argument equal to it (a `write_file` content) or a
/// tool result that contains it.
fn is_verbatim_in(retained: &[Entry], content: &str) -> bool {
    let needle = content.trim();
    if needle.is_empty() {
        return false;
    }
    retained.iter().any(|entry| {
        let EntryBody::Message(message) = &entry.body else {
            return false;
        };
        let message = &message.message;
        message.tool_uses().any(|call| {
            call.input
                .object()
                .values()
                .any(|value| value.as_str().is_some_and(|text| text.trim() == needle))
        }) || message.tool_results().any(|result| {
            let text = result.text();
            !result.is_error
                && (text.contains(needle) || strip_line_numbers(&text).contains(needle))
        })
    })
}

/// The newest content a transcript shows for each file: the `content` of
/// its newest whole-file write, or the text of its newest successful read
/// (line numbers in the `cat -n` or `N→` style taken off), whichever came
/// later. The replay's [`FileSource`]: an edit after it is not applied, and
/// a file the transcript never showed is [`FileContent::Unreadable`].
#[derive(Debug, Clone, Default)]
pub struct TranscriptFiles {
    newest: HashMap<String, String>,
    /// Read calls waiting for their result: call id → file.
    reads: HashMap<String, String>,
}

impl TranscriptFiles {
    /// Indexes `entries` (a session path, oldest first).
    pub fn new(entries: &[Entry], cwd: Option<&str>) -> Self {
        let mut files = TranscriptFiles::default();
        files.extend(entries, cwd);
        files
    }

    /// Indexes more entries of the same path, in order.
    pub fn extend(&mut self, entries: &[Entry], cwd: Option<&str>) {
        for entry in entries {
            let EntryBody::Message(message) = &entry.body else {
                continue;
            };
            for call in message.message.tool_uses() {
                let facts = call_facts(call, cwd);
                if let ([written], Some(content)) =
                    (facts.modified.as_slice(), call.input.str_arg("content"))
                {
                    self.newest.insert(written.clone(), content.to_owned());
                }
                if let [read] = facts.read.as_slice() {
                    self.reads.insert(call.id.clone(), read.clone());
                }
            }
            for result in message.message.tool_results() {
                if let Some(read) = self.reads.remove(result.tool_use_id.as_str())
                    && !result.is_error
                {
                    self.newest.insert(read, strip_line_numbers(&result.text()));
                }
            }
        }
    }
}

impl FileSource for TranscriptFiles {
    fn read(&self, path: &str) -> FileContent {
        match self.newest.get(path) {
            Some(text) => FileContent::Text(text.clone()),
            None => FileContent::Unreadable,
        }
    }

    fn probe(&self, path: &str) -> FileProbe {
        match self.newest.get(path) {
            Some(text) => FileProbe::Bytes(text.len() as u64),
            None => FileProbe::Unreadable,
        }
    }
}

/// Takes the line numbers off a `read` result when every non-empty line
/// carries one (`   12\tcode` or `    12→code`).
fn strip_line_numbers(text: &str) -> String {
    let split = |line: &str| -> Option<usize> {
        let digits = line.trim_start();
        let n_digits = digits.bytes().take_while(u8::is_ascii_digit).count();
        if n_digits == 0 {
            return None;
        }
        let rest = &digits[n_digits..];
        let sep = if rest.starts_with('\t') {
            1
        } else if rest.starts_with('→') {
            '→'.len_utf8()
        } else {
            return None;
        };
        Some(line.len() - rest.len() + sep)
    };
    let numbered = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .all(|line| split(line).is_some());
    if !numbered || text.trim().is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match split(line) {
            Some(at) => out.push_str(&line[at..]),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
