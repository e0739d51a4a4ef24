//! Reading a whole session log tolerantly: the good entries plus
//! diagnostics for everything damaged, the current leaf, the path and the
//! live stretch; and finding sessions in a directory.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use soba_core::{Entry, EntryBody, EntryId};

use crate::error::StoreError;
// The diagnostics live in `diagnostic`; these paths stay for the crates
// that name them here.
pub use crate::diagnostic::{Diagnostic, DiagnosticKind, Location};
use crate::line::{LineOutcome, UTF8_BOM, classify_line, read_first_line, starts_with_bom};
use crate::session::{RECOVERED_INFIX, SessionHeader, SessionId, leaf_after};
use crate::wire;

/// One good entry with where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEntry {
    /// The entry.
    pub entry: Entry,
    /// Its line.
    pub location: Location,
    /// The raw JSON line of an entry of unknown type or of a damaged one
    /// ([`EntryBody::Damaged`]), kept verbatim.
    pub raw: Option<String>,
}

/// A whole session log, read tolerantly.
#[derive(Debug, Clone, Default)]
pub struct SessionLog {
    header: Option<SessionHeader>,
    entries: Vec<LoggedEntry>,
    index: HashMap<EntryId, usize>,
    leaf: Option<EntryId>,
    diagnostics: Vec<Diagnostic>,
}

/// Reads a whole session log. Damaged content gives diagnostics, never an
/// error; only failing to open or read the file is one.
pub fn read_log(path: impl AsRef<Path>) -> Result<SessionLog, StoreError> {
    read_log_keeping(path.as_ref(), Keep::Whole)
}

/// Reads a session log's outline: every entry, id, parent, type, role,
/// origin, usage, token count, tool-call ids and names, tool-result ids and
/// error flags, capsule figures, state and references, and every
/// diagnostic, exactly as [`read_log`] gives them; texts cut to their first
/// [`OUTLINE_CHARS`] characters, timestamps, message models, tool
/// arguments, images and reasoning dropped, capsule sections and the
/// files brought back after a capsule emptied. Memory grows with the
/// number of entries, not the log's size: `soba show` reads a 1 GB log
/// this way; a line that cannot be an entry (a zero-filled tail, a run
/// of bytes without a newline) is read past, not held (`read_log_line`).
pub fn read_log_outline(path: impl AsRef<Path>) -> Result<SessionLog, StoreError> {
    read_log_keeping(path.as_ref(), Keep::Outline)
}

fn read_log_keeping(path: &Path, keep: Keep) -> Result<SessionLog, StoreError> {
    let (file, _) = crate::untrusted::open_untrusted(path).map_err(StoreError::open)?;
    SessionLog::read(BufReader::with_capacity(1 << 20, file), keep)
        .map_err(|err| StoreError::io("read", path, err))
}

/// The characters of each text an outline keeps.
pub const OUTLINE_CHARS: usize = 80;

/// How much of each entry a reader keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Keep {
    #[default]
    Whole,
    Outline,
}

/// Cuts `text` to its first [`OUTLINE_CHARS`] characters, in place.
fn cut_text(text: &mut String) {
    if let Some((at, _)) = text.char_indices().nth(OUTLINE_CHARS) {
        text.truncate(at);
        text.shrink_to_fit();
    }
}

/// Reduces an entry to its outline (see [`read_log_outline`]).
fn outline(entry: &mut Entry) {
    use soba_core::message::{Block, ResultPart, ToolInput};
    entry.timestamp = String::new();
    match &mut entry.body {
        EntryBody::Message(message_entry) => {
            message_entry.message.model = None;
            message_entry.message.content.shrink_to_fit();
            for block in &mut message_entry.message.content {
                match block {
                    Block::Text(text) => cut_text(text),
                    Block::Thinking { text, signature } => {
                        *text = String::new();
                        *signature = None;
                    }
                    Block::ToolUse(call) => {
                        call.input = ToolInput::from_value(serde_json::Value::Object(
                            serde_json::Map::new(),
                        ));
                    }
                    Block::ToolResult(result) => {
                        let first_text = result.content.iter_mut().find_map(|part| match part {
                            ResultPart::Text(text) => Some(std::mem::take(text)),
                            ResultPart::Image(_) => None,
                        });
                        result.content = first_text
                            .map(|mut text| {
                                cut_text(&mut text);
                                vec![ResultPart::Text(text)]
                            })
                            .unwrap_or_default();
                    }
                    Block::Image(_) => *block = Block::Text(String::new()),
                }
            }
        }
        EntryBody::Capsule(capsule) => {
            capsule.narrative = Default::default();
            capsule.local = Default::default();
            capsule.earlier_narrative = None;
            capsule.native = None;
            capsule.markdown = String::new();
            // The files brought back after it are model input, as large
            // as its sections (25,000 tokens by default).
            capsule.rehydrated = Default::default();
            if let Some(instructions) = &mut capsule.instructions {
                cut_text(instructions);
            }
        }
        EntryBody::Checkpoint { note, .. } => cut_text(note),
        EntryBody::Damaged { reason, .. } => cut_text(reason),
        _ => {}
    }
}

impl SessionLog {
    /// Parses a log held in memory.
    pub fn from_bytes(bytes: &[u8]) -> SessionLog {
        let mut builder = LogBuilder::default();
        let mut offset = 0usize;
        while offset < bytes.len() {
            let (line, terminated) = match bytes[offset..].iter().position(|&b| b == b'\n') {
                Some(nl) => (&bytes[offset..offset + nl], true),
                None => (&bytes[offset..], false),
            };
            builder.line(offset as u64, line, terminated);
            offset += line.len() + 1;
        }
        builder.finish(bytes.len() as u64)
    }

    /// Parses a log from a reader, one line at a time.
    pub fn from_reader(reader: impl BufRead) -> std::io::Result<SessionLog> {
        SessionLog::read(reader, Keep::Whole)
    }

    fn read(mut reader: impl BufRead, keep: Keep) -> std::io::Result<SessionLog> {
        let mut builder = LogBuilder {
            keep,
            ..LogBuilder::default()
        };
        let mut offset = 0u64;
        let mut line = Vec::new();
        loop {
            let read = read_log_line(&mut reader, &mut line, MAX_LOG_LINE)?;
            let (n_read, terminated, skipped) = match read {
                LogLine::End => break,
                LogLine::Held { n_read, terminated } => (n_read, terminated, None),
                LogLine::Skipped {
                    n_read,
                    terminated,
                    why,
                } => (n_read, terminated, Some(why)),
            };
            match skipped {
                None => {
                    let body = if terminated {
                        &line[..line.len() - 1]
                    } else {
                        &line[..]
                    };
                    builder.line(offset, body, terminated);
                }
                Some(why) => {
                    let n_bytes = n_read - u64::from(terminated);
                    builder.skipped_line(offset, n_bytes, terminated, &why);
                }
            }
            offset += n_read;
        }
        Ok(builder.finish(offset))
    }

    /// Returns the header, if line 1 was a valid one.
    pub fn header(&self) -> Option<&SessionHeader> {
        self.header.as_ref()
    }

    /// Returns the good entries in file order, including any shadowed by a
    /// later line with the same id.
    pub fn entries(&self) -> &[LoggedEntry] {
        &self.entries
    }

    /// Returns the diagnostics in file order (path checks last).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Returns whether the log had no damage at all.
    pub fn is_clean(&self) -> bool {
        self.diagnostics.is_empty()
    }

    /// Returns the current leaf: set by the last good entry in file order
    /// (SPEC §3.1). When that entry is a `leaf` entry whose target is
    /// itself a `leaf` entry, the targets are followed to the first entry
    /// that is not one; a chain that loops or reaches a missing entry
    /// leaves the position on the first target (with a diagnostic).
    pub fn leaf(&self) -> Option<&EntryId> {
        self.leaf.as_ref()
    }

    /// Returns where the current position lands when a `leaf` entry sets
    /// it to `target`: `target` itself unless it is a `leaf` entry, else
    /// the first entry that is not one along the targets from it, else
    /// (a loop or a missing entry) `target`.
    pub fn position_at(&self, target: &EntryId) -> EntryId {
        match self.entry(target) {
            Some(logged) if matches!(logged.entry.body, EntryBody::Leaf { .. }) => self
                .through_leaves(target)
                .unwrap_or_else(|| target.clone()),
            _ => target.clone(),
        }
    }

    /// Follows `leaf` entries from `id` through their targets to the first
    /// entry that is not one; `None` when the chain reaches a missing entry
    /// or loops (it takes at most one step per entry of the log).
    fn through_leaves(&self, id: &EntryId) -> Option<EntryId> {
        let mut cursor = id;
        for _ in 0..=self.entries.len() {
            match &self.entry(cursor)?.entry.body {
                EntryBody::Leaf { target } => cursor = target,
                _ => return Some(cursor.clone()),
            }
        }
        None
    }

    /// Returns the entry with this id.
    pub fn entry(&self, id: &EntryId) -> Option<&LoggedEntry> {
        self.index.get(id).map(|&idx| &self.entries[idx])
    }

    /// Returns the path from the root to the current leaf.
    pub fn path(&self) -> Vec<&LoggedEntry> {
        match &self.leaf {
            Some(leaf) => self.path_to(leaf),
            None => Vec::new(),
        }
    }

    /// Returns the path from the root to `leaf`, stopping early at a missing
    /// parent, a `leaf` entry (which is never on a path) or an entry already
    /// on the path (a parent cycle in a hand-edited log).
    pub fn path_to(&self, leaf: &EntryId) -> Vec<&LoggedEntry> {
        let mut path = Vec::new();
        let mut seen = HashSet::new();
        let mut cursor = Some(leaf);
        while let Some(id) = cursor {
            let Some(logged) = self.entry(id) else { break };
            if matches!(logged.entry.body, EntryBody::Leaf { .. }) || !seen.insert(id) {
                break;
            }
            path.push(logged);
            cursor = logged.entry.parent_id.as_ref();
        }
        path.reverse();
        path
    }

    /// Returns the entries of the current path, root-most first, by value
    /// (the rest of the log is dropped): a reader that converts the path
    /// holds it once, not beside the log it came from.
    pub fn into_path(self) -> Vec<LoggedEntry> {
        let positions: Vec<usize> = self
            .path()
            .iter()
            .filter_map(|logged| self.index.get(&logged.entry.id).copied())
            .collect();
        let mut slots: Vec<Option<LoggedEntry>> = self.entries.into_iter().map(Some).collect();
        positions
            .into_iter()
            .filter_map(|position| slots.get_mut(position).and_then(Option::take))
            .collect()
    }

    /// Returns the latest capsule on the current path.
    pub fn latest_capsule(&self) -> Option<&LoggedEntry> {
        self.path()
            .into_iter()
            .rev()
            .find(|logged| matches!(logged.entry.body, EntryBody::Capsule(_)))
    }

    /// Returns the live stretch of the current path, root-most first: from
    /// the latest capsule's `firstKeptEntryId` (or the capsule itself when
    /// nothing is kept) to the leaf; the whole path without a capsule. This
    /// is what resume reads (SPEC §3.3).
    pub fn live_stretch(&self) -> Vec<&LoggedEntry> {
        let mut chase = StretchChase::default();
        let mut stretch = Vec::new();
        for logged in self.path().into_iter().rev() {
            stretch.push(logged);
            if chase.feed(&logged.entry) {
                break;
            }
        }
        stretch.reverse();
        stretch
    }
}

/// Walks a path leaf→root and says where the live stretch ends.
#[derive(Debug, Default)]
pub(crate) struct StretchChase {
    stop_at: Option<EntryId>,
}

impl StretchChase {
    /// Takes the next entry towards the root; returns true when it is the
    /// last one of the stretch.
    pub(crate) fn feed(&mut self, entry: &Entry) -> bool {
        if let Some(stop) = &self.stop_at {
            return *stop == entry.id;
        }
        if let EntryBody::Capsule(capsule) = &entry.body {
            match &capsule.first_kept_entry_id {
                Some(first_kept) => self.stop_at = Some(first_kept.clone()),
                None => return true,
            }
        }
        false
    }
}

/// Accumulates lines into a [`SessionLog`].
#[derive(Debug, Default)]
struct LogBuilder {
    keep: Keep,
    log: SessionLog,
    n_lines: u64,
    missing_header: Option<String>,
    last_location: Location,
}

impl LogBuilder {
    fn line(&mut self, offset: u64, bytes: &[u8], terminated: bool) {
        self.n_lines += 1;
        let location = Location {
            offset,
            line: Some(self.n_lines),
        };
        self.last_location = location;
        let is_first = self.n_lines == 1;
        if !terminated {
            if is_first {
                self.missing_header = Some("line 1 is torn".to_owned());
            }
            if !bytes.iter().all(u8::is_ascii_whitespace) {
                self.push_diagnostic(
                    location,
                    DiagnosticKind::TornLine {
                        bytes: bytes.len() as u64,
                    },
                );
            }
            return;
        }
        if starts_with_bom(bytes, is_first) {
            self.push_diagnostic(location, DiagnosticKind::ByteOrderMark);
        }
        match classify_line(bytes, is_first, &mut self.missing_header) {
            LineOutcome::Blank => {}
            LineOutcome::Header(header) => self.log.header = Some(header),
            LineOutcome::Entry { entry, raw, damage } => {
                for kind in damage {
                    self.push_diagnostic(location, kind);
                }
                self.push_entry(entry, location, raw);
            }
            LineOutcome::Damaged(kind) => self.push_diagnostic(location, kind),
        }
    }

    /// A line [`read_log_line`] read past without holding it: a torn last
    /// line as [`LogBuilder::line`] reports one, else invalid JSON saying
    /// why it was not held.
    fn skipped_line(&mut self, offset: u64, n_bytes: u64, terminated: bool, why: &str) {
        self.n_lines += 1;
        let location = Location {
            offset,
            line: Some(self.n_lines),
        };
        self.last_location = location;
        let is_first = self.n_lines == 1;
        if !terminated {
            if is_first {
                self.missing_header = Some("line 1 is torn".to_owned());
            }
            self.push_diagnostic(location, DiagnosticKind::TornLine { bytes: n_bytes });
            return;
        }
        if is_first {
            self.missing_header = Some(format!("line 1 is not JSON: {why}"));
        }
        let message = format!("{why}; its {n_bytes} bytes were read past, not held");
        self.push_diagnostic(location, DiagnosticKind::InvalidJson { message });
    }

    fn push_entry(&mut self, mut entry: Entry, location: Location, mut raw: Option<String>) {
        if self.keep == Keep::Outline {
            outline(&mut entry);
            if let Some(raw) = &mut raw {
                cut_text(raw);
            }
        }
        if self.log.index.contains_key(&entry.id) {
            // The later line wins, as it does for resume, which reads
            // backwards and meets it first.
            self.push_diagnostic(
                location,
                DiagnosticKind::DuplicateId {
                    id: entry.id.clone(),
                },
            );
        }
        self.log.leaf = Some(leaf_after(&entry));
        self.log
            .index
            .insert(entry.id.clone(), self.log.entries.len());
        self.log.entries.push(LoggedEntry {
            entry,
            location,
            raw,
        });
    }

    fn push_diagnostic(&mut self, location: Location, kind: DiagnosticKind) {
        self.log.diagnostics.push(Diagnostic { location, kind });
    }

    fn finish(mut self, n_bytes: u64) -> SessionLog {
        let start = Location {
            offset: 0,
            line: Some(1),
        };
        if n_bytes == 0 {
            self.log.diagnostics.insert(
                0,
                Diagnostic {
                    location: start,
                    kind: DiagnosticKind::EmptyFile,
                },
            );
        } else if self.log.header.is_none() {
            let reason = self
                .missing_header
                .take()
                .unwrap_or_else(|| "no line 1".to_owned());
            let diagnostic = Diagnostic {
                location: start,
                kind: DiagnosticKind::MissingHeader { reason },
            };
            self.log.diagnostics.insert(0, diagnostic);
        }
        self.check_path();
        self.log
    }

    /// Settles the current position (following a chain of `leaf` entries)
    /// and reports where the current path breaks.
    fn check_path(&mut self) {
        let Some(leaf) = self.log.leaf.clone() else {
            return;
        };
        let Some(mut logged) = self.log.entry(&leaf) else {
            let location = self
                .log
                .entries
                .last()
                .map_or(self.last_location, |last| last.location);
            self.push_diagnostic(location, DiagnosticKind::DanglingLeaf { target: leaf });
            return;
        };
        if matches!(logged.entry.body, EntryBody::Leaf { .. }) {
            // Only a `leaf` entry read last can leave the position on
            // another one (any other entry sets it to its own id).
            let falls_back_to = self.log.through_leaves(&leaf);
            if let Some(last) = self.log.entries.last() {
                let diagnostic = Diagnostic {
                    location: last.location,
                    kind: DiagnosticKind::LeafTargetsLeaf {
                        id: last.entry.id.clone(),
                        target: leaf.clone(),
                        falls_back_to: falls_back_to.clone(),
                    },
                };
                self.log.diagnostics.push(diagnostic);
            }
            // The history is kept: the position moves to where the chain
            // leads, unless it leads nowhere.
            let Some(position) = falls_back_to else {
                return;
            };
            self.log.leaf = Some(position.clone());
            let Some(resolved) = self.log.entry(&position) else {
                return;
            };
            logged = resolved;
        }
        let mut n_steps = 0;
        while let Some(parent) = &logged.entry.parent_id {
            n_steps += 1;
            match self.log.entry(parent) {
                Some(next) if matches!(next.entry.body, EntryBody::Leaf { .. }) => {
                    let diagnostic = Diagnostic {
                        location: logged.location,
                        kind: DiagnosticKind::ParentIsLeaf {
                            id: logged.entry.id.clone(),
                            parent: parent.clone(),
                            rewind_to: self.log.through_leaves(parent),
                        },
                    };
                    self.log.diagnostics.push(diagnostic);
                    return;
                }
                Some(next) if n_steps <= self.log.entries.len() => logged = next,
                Some(_) => return,
                None => {
                    let diagnostic = Diagnostic {
                        location: logged.location,
                        kind: DiagnosticKind::DanglingParent {
                            id: logged.entry.id.clone(),
                            parent: parent.clone(),
                        },
                    };
                    self.log.diagnostics.push(diagnostic);
                    return;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Discovery

/// A session file found in a directory.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The session id: the header's, else the file stem.
    pub id: String,
    /// The file.
    pub path: PathBuf,
    /// The header's creation time.
    pub created_at: Option<String>,
    /// The header's workspace root.
    pub cwd: Option<String>,
    /// The file size in bytes.
    pub size: u64,
    /// The file's modification time.
    pub modified: Option<SystemTime>,
    /// Why the header could not be read, when it could not.
    pub problem: Option<String>,
}

/// Returns the path of session `id` in `dir`.
pub fn session_path(dir: impl AsRef<Path>, id: &SessionId) -> PathBuf {
    dir.as_ref().join(format!("{id}.jsonl"))
}

/// Lists the `*.jsonl` sessions in `dir` (flight records and recovery
/// files excluded), most
/// recently modified first. A missing directory has no sessions.
pub fn list_sessions(dir: impl AsRef<Path>) -> Result<Vec<SessionSummary>, StoreError> {
    list_sessions_and_skipped(dir).map(|(sessions, _)| sessions)
}

/// An entry of a sessions folder named like a session log (`*.jsonl`) that
/// is not a regular file, so it is not listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedEntry {
    /// Its file name.
    pub name: String,
    /// What it is instead, e.g. `a FIFO`, `a broken symbolic link`.
    pub kind: String,
}

/// Says what a `*.jsonl` entry that is not a regular file is.
fn skipped_kind(path: &Path, metadata: &std::fs::Metadata) -> String {
    use std::os::unix::fs::FileTypeExt;
    let file_type = metadata.file_type();
    if file_type.is_symlink() {
        return match std::fs::metadata(path) {
            Ok(_) => "a symbolic link (sessions are read from regular files only)".to_owned(),
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
                "a symbolic link loop".to_owned()
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                "a broken symbolic link".to_owned()
            }
            Err(err) => format!("a symbolic link that cannot be followed ({err})"),
        };
    }
    let kind = if file_type.is_dir() {
        "a folder"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device"
    } else {
        "a special file"
    };
    kind.to_owned()
}

/// [`list_sessions`], plus the `*.jsonl` entries it skipped because they
/// are not regular files (FIFOs, sockets, folders, links), by name.
pub fn list_sessions_and_skipped(
    dir: impl AsRef<Path>,
) -> Result<(Vec<SessionSummary>, Vec<SkippedEntry>), StoreError> {
    let dir = dir.as_ref();
    let mut skipped = Vec::new();
    let read_dir = match std::fs::read_dir(dir) {
        Ok(read_dir) => read_dir,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Vec::new(), skipped));
        }
        Err(err) => return Err(StoreError::io("list", dir, err)),
    };
    let mut sessions = Vec::new();
    for dir_entry in read_dir {
        let dir_entry = dir_entry.map_err(|err| StoreError::io("list", dir, err))?;
        let path = dir_entry.path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".jsonl") else {
            continue;
        };
        if stem.ends_with(".flight") || stem.contains(RECOVERED_INFIX) || stem.is_empty() {
            continue;
        }
        let metadata = match dir_entry.metadata() {
            Ok(metadata) => metadata,
            Err(err) => {
                skipped.push(SkippedEntry {
                    name: name.to_owned(),
                    kind: format!("unreadable ({err})"),
                });
                continue;
            }
        };
        if !metadata.is_file() {
            skipped.push(SkippedEntry {
                name: name.to_owned(),
                kind: skipped_kind(&path, &metadata),
            });
            continue;
        }
        let mut summary = SessionSummary {
            id: stem.to_owned(),
            path: path.clone(),
            created_at: None,
            cwd: None,
            size: metadata.len(),
            modified: metadata.modified().ok(),
            problem: None,
        };
        match read_header(&path) {
            Ok(header) => {
                summary.id = header.id.as_str().to_owned();
                summary.created_at = Some(header.created_at);
                summary.cwd = Some(header.cwd);
            }
            Err(problem) => summary.problem = Some(problem),
        }
        sessions.push(summary);
    }
    sessions.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.id.cmp(&b.id)));
    skipped.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((sessions, skipped))
}

/// Reads only line 1 of a session file; the error says why it is not a header.
pub fn read_header(path: impl AsRef<Path>) -> Result<SessionHeader, String> {
    let (file, _) = crate::untrusted::open_untrusted(path.as_ref()).map_err(|err| match err {
        crate::untrusted::UntrustedReadError::Io { source, .. } => format!("cannot open: {source}"),
        other => other.to_string(),
    })?;
    let first = read_first_line(&file).map_err(|err| format!("cannot read: {err}"))?;
    if !first.terminated {
        return Err(if first.bytes.is_empty() {
            "the file is empty"
        } else {
            "line 1 is torn"
        }
        .to_owned());
    }
    let text = std::str::from_utf8(&first.bytes).map_err(|_| "line 1 is not UTF-8".to_owned())?;
    wire::decode_header(text).map_err(|err| err.to_string())
}

/// Returns whether a session log holds anything of the user's: an entry
/// other than the ones SOBA writes when it opens a session (`model_change`,
/// `config_change` and an `agents_md` snapshot). A session without one was
/// opened and left before anything was said; `soba -c` and the session
/// lists pass over it, and the TUI removes it when it leaves it.
///
/// Reads line by line after the header and stops at the first such entry,
/// so a session with a message costs its first few lines. Errs towards
/// keeping: a file that cannot be read, a line that is not a JSON object
/// with a `type` (a torn or damaged line included) and an entry of a type
/// this version does not know all count as content.
pub fn has_content(path: impl AsRef<Path>) -> bool {
    /// The fields of a line that say whether it is content.
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        source: Option<String>,
    }
    let Ok((file, _)) = crate::untrusted::open_untrusted(path.as_ref()) else {
        return true;
    };
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut line_no = 0usize;
    loop {
        match read_line_bounded(&mut reader, &mut line, MAX_PEEKED_LINE) {
            Ok(LineRead::End) => return false,
            Ok(LineRead::Line) => {}
            // A line longer than any opening entry is content.
            Ok(LineRead::TooLong) | Err(_) => return true,
        }
        line_no += 1;
        if line_no == 1 {
            // The header: whether it is valid is `read_header`'s question.
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(peek) = serde_json::from_slice::<Peek>(&line) else {
            return true;
        };
        let opening = match peek.kind.as_str() {
            "model_change" | "config_change" => true,
            "context" => peek.source.as_deref() == Some("agents_md"),
            _ => false,
        };
        if !opening {
            return true;
        }
    }
}

/// Returns the id of every entry line of the log at `path`, in file order,
/// reading one line at a time (memory stays at one line plus the ids):
/// what the shortest unique id length needs, without decoding entries.
/// Lines without a valid id (the header, damaged lines) are skipped.
pub fn entry_ids(path: impl AsRef<Path>) -> Result<Vec<EntryId>, StoreError> {
    #[derive(serde::Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow)]
        id: Option<std::borrow::Cow<'a, str>>,
    }
    let path = path.as_ref();
    let (file, _) = crate::untrusted::open_untrusted(path).map_err(StoreError::open)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut ids = Vec::new();
    loop {
        match read_line_bounded(&mut reader, &mut line, MAX_PEEKED_LINE)
            .map_err(|err| StoreError::io("read", path, err))?
        {
            LineRead::End => return Ok(ids),
            // No entry is that long: a huge run of bytes without a newline
            // (a sparse file put at the path) is skipped, never buffered.
            LineRead::TooLong => continue,
            LineRead::Line => {}
        }
        if let Ok(IdOnly { id: Some(id) }) = serde_json::from_slice::<IdOnly<'_>>(&line)
            && let Ok(id) = EntryId::parse(&id)
        {
            ids.push(id);
        }
    }
}

/// The longest line [`entry_ids`] and [`has_content`] look into; a longer
/// one is skipped as it is read, never held whole.
const MAX_PEEKED_LINE: usize = 256 << 20;

/// What [`read_line_bounded`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineRead {
    /// A line (with its `\n` unless it ends the file) is in the buffer.
    Line,
    /// The line was longer than the limit: it was read past, the buffer
    /// holds only its head.
    TooLong,
    /// The end of the file.
    End,
}

/// Reads the next line into `line` (cleared first), holding at most `max`
/// bytes of it: the rest of a longer line is read and dropped, so memory
/// stays bounded whatever the file holds.
pub(crate) fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if buffer.is_empty() {
            break;
        }
        any = true;
        let (chunk, done) = match buffer.iter().position(|&byte| byte == b'\n') {
            Some(at) => (&buffer[..=at], true),
            None => (buffer, false),
        };
        let n = chunk.len();
        if !too_long {
            if line.len() + n > max {
                too_long = true;
            } else {
                line.extend_from_slice(chunk);
            }
        }
        reader.consume(n);
        if done {
            break;
        }
    }
    Ok(match (any, too_long) {
        (false, _) => LineRead::End,
        (true, true) => LineRead::TooLong,
        (true, false) => LineRead::Line,
    })
}

/// The longest line a session log reader holds: no entry is longer (an
/// import reads at most [`crate::import::IMPORT_LIMIT`] bytes in all). A
/// longer line is read past and reported, never held.
const MAX_LOG_LINE: usize = 1 << 30;

/// How much of a line is held before it is checked as it grows: below
/// this, every line is held whole and judged by the JSON parser, as
/// before; past it, a line that cannot be JSON stops being held.
const LOG_LINE_CHECKED_AFTER: usize = 1 << 20;

/// What [`read_log_line`] found.
#[derive(Debug, PartialEq, Eq)]
enum LogLine {
    /// The end of the file.
    End,
    /// A line is in the buffer, with its `\n` when `terminated`.
    Held { n_read: u64, terminated: bool },
    /// A line that cannot be an entry was read past; the buffer holds at
    /// most its head. `why` says what it is.
    Skipped {
        n_read: u64,
        terminated: bool,
        why: String,
    },
}

/// Reads the next line of a session log into `line` (cleared first). A
/// line is held whole up to [`LOG_LINE_CHECKED_AFTER`] bytes; past that it
/// stops being held (the rest is read and dropped, so memory stays bounded
/// whatever the file holds: a sparse or zero-filled tail, a run of bytes
/// without a newline) as soon as it cannot be JSON: a raw control byte
/// (JSON text holds none but tab, carriage return and the newline that
/// ends it), a first byte that does not open an object, or more than `max`
/// bytes.
fn read_log_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LogLine> {
    line.clear();
    let mut n_read = 0u64;
    let mut why: Option<String> = None;
    let mut check = LineCheck::default();
    let mut terminated = false;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if buffer.is_empty() {
            break;
        }
        let (chunk, done) = match buffer.iter().position(|&byte| byte == b'\n') {
            Some(at) => (&buffer[..=at], true),
            None => (buffer, false),
        };
        let n = chunk.len();
        if why.is_none() {
            line.extend_from_slice(chunk);
            if line.len() > LOG_LINE_CHECKED_AFTER {
                why = check.not_json(line, max);
                if why.is_some() {
                    line.truncate(LOG_LINE_CHECKED_AFTER);
                    line.shrink_to_fit();
                }
            }
        }
        n_read += n as u64;
        reader.consume(n);
        if done {
            terminated = true;
            break;
        }
    }
    if n_read == 0 {
        return Ok(LogLine::End);
    }
    Ok(match why {
        None => LogLine::Held { n_read, terminated },
        Some(why) => LogLine::Skipped {
            n_read,
            terminated,
            why,
        },
    })
}

/// How far [`read_log_line`] has checked the line it holds.
#[derive(Debug, Default)]
struct LineCheck {
    /// Bytes already looked at.
    checked: usize,
    /// Whether the first byte that is not whitespace (a `{`) was seen.
    opened: bool,
}

impl LineCheck {
    /// Says why the line held so far cannot be a JSON entry, looking only
    /// at the bytes not yet checked; `None` while it still could be one.
    fn not_json(&mut self, line: &[u8], max: usize) -> Option<String> {
        let start = self.checked;
        self.checked = line.len();
        let fresh = &line[start..];
        if !self.opened {
            let body = if start == 0 {
                fresh.strip_prefix(UTF8_BOM).unwrap_or(fresh)
            } else {
                fresh
            };
            if let Some(&first) = body.iter().find(|byte| !byte.is_ascii_whitespace()) {
                if first != b'{' {
                    return Some(format!(
                        "it starts with byte 0x{first:02x}, not with the `{{` of an entry"
                    ));
                }
                self.opened = true;
            }
        }
        if let Some(at) = fresh
            .iter()
            .position(|&byte| byte < 0x20 && !matches!(byte, b'\t' | b'\r' | b'\n'))
        {
            return Some(format!(
                "a raw control byte 0x{:02x} at byte {}, which no JSON line holds",
                fresh[at],
                start + at
            ));
        }
        (line.len() > max).then(|| format!("it is longer than {max} bytes, more than any entry"))
    }
}

/// Finds the session whose id is `prefix` or starts with it.
pub fn find_session(dir: impl AsRef<Path>, prefix: &str) -> Result<SessionSummary, StoreError> {
    let dir = dir.as_ref();
    let sessions = list_sessions(dir)?;
    let exact: Vec<&SessionSummary> = sessions.iter().filter(|s| s.id == prefix).collect();
    let mut matching: Vec<SessionSummary> = if exact.is_empty() {
        sessions
            .iter()
            .filter(|s| s.id.starts_with(prefix))
            .cloned()
            .collect()
    } else {
        exact.into_iter().cloned().collect()
    };
    // Two files with one header id (a copy, files joined by hand): which
    // one is meant cannot be guessed.
    if matching.len() > 1 && matching.iter().all(|s| s.id == matching[0].id) {
        let id = matching[0].id.clone();
        let mut paths: Vec<PathBuf> = matching.into_iter().map(|s| s.path).collect();
        paths.sort();
        return Err(StoreError::DuplicateSession { id, paths });
    }
    match matching.len() {
        0 => Err(StoreError::SessionNotFound {
            prefix: prefix.to_owned(),
            dir: dir.to_path_buf(),
        }),
        1 => Ok(matching.remove(0)),
        _ => {
            let mut candidates: Vec<String> = matching.into_iter().map(|s| s.id).collect();
            candidates.sort();
            Err(StoreError::AmbiguousSession {
                prefix: prefix.to_owned(),
                candidates,
            })
        }
    }
}

/// What a session picker shows of a session besides its id, time and size
/// (`soba sessions`, `/resume`, `soba -r`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionGlance {
    /// The session's title: its first typed message that asks for work
    /// ([`soba_core::directive::is_task`]: not a greeting, nor a question
    /// about the agent), else its first typed message; whitespace collapsed
    /// to single spaces, not escaped nor cut.
    pub title: Option<String>,
    /// How many messages the log holds (user, assistant and tool results).
    pub n_messages: u64,
}

impl SessionGlance {
    /// Returns the title as a session list shows it: on one line, escaped
    /// for the terminal, at most 60 characters (cut at a word).
    pub fn title_line(&self) -> Option<String> {
        self.title.as_deref().map(|title| {
            soba_core::terminal::sanitize_line(&soba_core::render::shorten(title, 60)).into_owned()
        })
    }
}

/// Returns whether a log line is a `message` entry: at once when it opens
/// as soba writes it (`{"type":"message"`), else by reading its `type` (a
/// log written by another tool may space or order its keys otherwise).
fn is_message_line(line: &[u8]) -> bool {
    /// The field of a line that says what it is.
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(rename = "type")]
        kind: String,
    }
    if line.starts_with(br#"{"type":"message""#) {
        return true;
    }
    line.windows(b"\"message\"".len())
        .any(|window| window == b"\"message\"")
        && serde_json::from_slice::<Peek>(line).is_ok_and(|peek| peek.kind == "message")
}

/// Reads a session log once, forwards: its message count and its title.
/// Only message lines are decoded, and none after the title is found; an
/// unreadable file gives an empty glance.
pub fn session_glance(path: impl AsRef<Path>) -> SessionGlance {
    let mut glance = SessionGlance::default();
    let Ok((file, _)) = crate::untrusted::open_untrusted(path.as_ref()) else {
        return glance;
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut first_typed: Option<String> = None;
    let mut found_task = false;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !is_message_line(&line) {
            continue;
        }
        glance.n_messages += 1;
        if found_task {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            continue;
        };
        let Ok(decoded) = wire::decode_entry(text.trim_end()) else {
            continue;
        };
        let EntryBody::Message(stored) = &decoded.entry.body else {
            continue;
        };
        if !stored.message.is_real_user() {
            continue;
        }
        // The first text block: what was typed (an attachment follows it).
        let typed = stored.message.content.iter().find_map(|block| match block {
            soba_core::Block::Text(text) if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        });
        let text = typed
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if text.is_empty() {
            continue;
        }
        if soba_core::directive::is_task(&text) {
            found_task = true;
            glance.title = Some(text);
        } else if first_typed.is_none() {
            first_typed = Some(text);
        }
    }
    if glance.title.is_none() {
        glance.title = first_typed;
    }
    glance
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"session","schemaVersion":1,"id":"0194c2d0-e4c0-7000-8000-000000000001","createdAt":"2025-01-01T00:00:00.000Z","cwd":"/w","os":"linux","memory":[]}"#;

    fn id(n: u32) -> String {
        format!("e_0194c2d0e4c07{n:03x}8000000000000001")
    }

    /// Issue 36 item 3: a session's title is its first typed task (a
    /// greeting and a question about the agent are passed over; an
    /// injected user message is not typed), its message count every
    /// message line.
    #[test]
    fn a_glance_titles_a_session_by_its_first_task() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("s.jsonl");
        let user = |n: u32, parent: u32, text: &str, origin: &str| {
            format!(
                r#"{{"type":"message","id":"{}","parentId":"{}","timestamp":"2025-01-01T00:00:00Z","role":"user"{origin},"content":[{{"type":"text","text":{}}}]}}"#,
                id(n),
                id(parent),
                serde_json::Value::from(text)
            )
        };
        let lines = [
            HEADER.to_owned(),
            message(1, None).replace("m1", "hello, what can you do?"),
            user(2, 1, "Go on with the summary", r#","origin":"injected""#),
            // Written by another tool, with spaces after the colons.
            user(3, 2, "Fix the\nparser \u{1b}[31mnow", "").replace("\":", "\": "),
            user(4, 3, "Thanks, and add a test", ""),
        ];
        std::fs::write(&path, lines.join("\n") + "\n").expect("the log");
        let glance = session_glance(&path);
        assert_eq!(glance.n_messages, 4);
        assert_eq!(
            glance.title.as_deref(),
            Some("Fix the parser \u{1b}[31mnow")
        );
        assert_eq!(
            glance.title_line().as_deref(),
            Some("Fix the parser \\x1b[31mnow")
        );
        // Only a greeting: it is the title, for want of a task.
        std::fs::write(
            &path,
            [HEADER.to_owned(), message(1, None).replace("m1", "hi")].join("\n") + "\n",
        )
        .expect("the log");
        assert_eq!(session_glance(&path).title.as_deref(), Some("hi"));
    }

    fn message(n: u32, parent: Option<u32>) -> String {
        let parent = parent.map_or("null".to_owned(), |p| format!("\"{}\"", id(p)));
        format!(
            r#"{{"type":"message","id":"{}","parentId":{parent},"timestamp":"2025-01-01T00:00:00Z","role":"user","content":[{{"type":"text","text":"m{n}"}}]}}"#,
            id(n)
        )
    }

    fn leaf(n: u32, parent: u32, target: u32) -> String {
        format!(
            r#"{{"type":"leaf","id":"{}","parentId":"{}","timestamp":"t","targetId":"{}"}}"#,
            id(n),
            id(parent),
            id(target)
        )
    }

    fn log(lines: &[String]) -> SessionLog {
        let mut text = format!("{HEADER}\n");
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        SessionLog::from_bytes(text.as_bytes())
    }

    fn entry_id(n: u32) -> EntryId {
        EntryId::parse(&id(n)).expect("a valid id")
    }

    #[test]
    fn a_leaf_entry_targeting_a_leaf_entry_falls_back_to_where_its_target_leads() {
        // m1 ← m2; leaf 3 moves back to m1; leaf 4 targets leaf 3.
        let log = log(&[
            message(1, None),
            message(2, Some(1)),
            leaf(3, 2, 1),
            leaf(4, 1, 3),
        ]);
        // The history is kept: the position is m1, where leaf 3 points.
        assert_eq!(log.leaf(), Some(&entry_id(1)));
        let path: Vec<_> = log.path().iter().map(|l| l.entry.id.clone()).collect();
        assert_eq!(path, vec![entry_id(1)]);
        assert_eq!(log.live_stretch().len(), 1);
        assert_eq!(log.diagnostics().len(), 1, "{:?}", log.diagnostics());
        let diagnostic = &log.diagnostics()[0];
        assert_eq!(diagnostic.location.line, Some(5));
        assert_eq!(
            diagnostic.kind,
            DiagnosticKind::LeafTargetsLeaf {
                id: entry_id(4),
                target: entry_id(3),
                falls_back_to: Some(entry_id(1)),
            }
        );
        assert_eq!(
            diagnostic.to_string(),
            format!(
                "line 5 (byte {}): leaf entry {} targets leaf entry {}, which is never on a path; the current position falls back to {}, where the targets of the leaf entries lead (/rewind to another entry listed by soba show --entries if that is not the place)",
                diagnostic.location.offset,
                id(4),
                id(3),
                id(1),
            )
        );
        assert_eq!(log.position_at(&entry_id(4)), entry_id(1));
        assert_eq!(log.position_at(&entry_id(2)), entry_id(2));
        assert_eq!(log.position_at(&entry_id(9)), entry_id(9));
    }

    #[test]
    fn a_chain_of_leaf_entries_is_followed_and_a_loop_keeps_the_position() {
        // m1 ← m2; leaf 3 → m2; leaf 4 → leaf 3; leaf 5 → leaf 4.
        let chain = log(&[
            message(1, None),
            message(2, Some(1)),
            leaf(3, 2, 2),
            leaf(4, 2, 3),
            leaf(5, 2, 4),
        ]);
        assert_eq!(chain.leaf(), Some(&entry_id(2)));
        assert_eq!(chain.path().len(), 2);
        assert!(matches!(
            chain.diagnostics(),
            [Diagnostic { kind: DiagnosticKind::LeafTargetsLeaf { target, falls_back_to: Some(to), .. }, .. }]
                if *to == entry_id(2) && *target == entry_id(4)
        ));
        // Leaf 2 targets leaf 3, which targets leaf 2.
        let looping = log(&[message(1, None), leaf(2, 1, 3), leaf(3, 1, 2)]);
        assert_eq!(looping.leaf(), Some(&entry_id(2)));
        assert!(looping.path().is_empty());
        assert_eq!(looping.position_at(&entry_id(2)), entry_id(2));
        let [diagnostic] = looping.diagnostics() else {
            panic!("{:?}", looping.diagnostics())
        };
        assert_eq!(
            diagnostic.kind,
            DiagnosticKind::LeafTargetsLeaf {
                id: entry_id(3),
                target: entry_id(2),
                falls_back_to: None,
            }
        );
        assert!(
            diagnostic.to_string().ends_with(&format!(
                "leaf entry {} targets leaf entry {}, which is never on a path, and the targets of the leaf entries from {} loop or reach a missing entry; the current position stays on {}, so the path is empty: list the entries with soba show --entries, then /rewind <id> to one of them",
                id(3),
                id(2),
                id(2),
                id(2)
            )),
            "{diagnostic}"
        );
        // Leaf 3 targets leaf 2, whose target is missing.
        let dangling = log(&[message(1, None), leaf(2, 1, 9), leaf(3, 1, 2)]);
        assert_eq!(dangling.leaf(), Some(&entry_id(2)));
        assert!(dangling.path().is_empty());
        assert!(matches!(
            dangling.diagnostics(),
            [Diagnostic {
                kind: DiagnosticKind::LeafTargetsLeaf {
                    falls_back_to: None,
                    ..
                },
                ..
            }]
        ));
        // A leaf entry targeting itself.
        let itself = log(&[message(1, None), leaf(2, 1, 2)]);
        assert_eq!(itself.leaf(), Some(&entry_id(2)));
        assert!(itself.path().is_empty());
        assert_eq!(itself.diagnostics().len(), 1);
    }

    #[test]
    fn the_path_from_a_fallen_back_position_is_still_checked() {
        // m2 names a missing parent; leaf 4 → leaf 3 → m2.
        let log = log(&[message(2, Some(7)), leaf(3, 2, 2), leaf(4, 2, 3)]);
        assert_eq!(log.leaf(), Some(&entry_id(2)));
        let kinds: Vec<_> = log.diagnostics().iter().map(|d| d.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                DiagnosticKind::LeafTargetsLeaf {
                    id: entry_id(4),
                    target: entry_id(3),
                    falls_back_to: Some(entry_id(2)),
                },
                DiagnosticKind::DanglingParent {
                    id: entry_id(2),
                    parent: entry_id(7),
                },
            ]
        );
    }

    #[test]
    fn an_entry_under_a_leaf_entry_ends_the_path_with_a_diagnostic() {
        let log = log(&[
            message(1, None),
            message(2, Some(1)),
            leaf(3, 2, 1),
            leaf(4, 1, 3),
            message(5, Some(3)),
        ]);
        assert_eq!(log.leaf(), Some(&entry_id(5)));
        assert_eq!(log.path().len(), 1);
        let [diagnostic] = log.diagnostics() else {
            panic!("{:?}", log.diagnostics())
        };
        assert_eq!(diagnostic.location.line, Some(6));
        assert_eq!(
            diagnostic.kind,
            DiagnosticKind::ParentIsLeaf {
                id: entry_id(5),
                parent: entry_id(3),
                rewind_to: Some(entry_id(1)),
            }
        );
    }

    #[test]
    fn an_ordinary_rewind_gives_no_diagnostic() {
        let log = log(&[message(1, None), message(2, Some(1)), leaf(3, 2, 1)]);
        assert!(log.is_clean(), "{:?}", log.diagnostics());
        assert_eq!(log.leaf(), Some(&entry_id(1)));
        assert_eq!(log.path().len(), 1);
    }
}

#[cfg(test)]
mod content_tests {
    use super::*;

    const HEADER: &str = r#"{"type":"session","schemaVersion":1,"id":"0194c2d0-e4c0-7000-8000-000000000001","createdAt":"2025-01-01T00:00:00.000Z","cwd":"/w","os":"linux","memory":[]}"#;
    const MODEL: &str = r#"{"type":"model_change","id":"e_0194c2d0e4c070018000000000000001","parentId":null,"timestamp":"t","model":"fake/m"}"#;
    const AGENTS: &str = r#"{"type":"context","id":"e_0194c2d0e4c070028000000000000001","parentId":null,"timestamp":"t","source":"agents_md","path":"AGENTS.md","sha256":"00","text":"x"}"#;
    const SETTING: &str = r#"{"type":"config_change","id":"e_0194c2d0e4c070038000000000000001","parentId":null,"timestamp":"t","autoCompact":false}"#;
    const MESSAGE: &str = r#"{"type":"message","id":"e_0194c2d0e4c070048000000000000001","parentId":null,"timestamp":"t","role":"user","content":[{"type":"text","text":"hi"}]}"#;
    const LOADED: &str = r#"{"type":"context","id":"e_0194c2d0e4c070058000000000000001","parentId":null,"timestamp":"t","source":"capsule_file","path":"a.capsule.md","sha256":"00","text":"x"}"#;

    /// Writes `text` as a session file and says whether it has content.
    fn check(text: &str, expected: bool) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, text).expect("the file is written");
        assert_eq!(has_content(&path), expected, "{text}");
    }

    #[test]
    fn only_what_opening_a_session_writes_is_no_content() {
        check(&format!("{HEADER}\n"), false);
        check(
            &format!("{HEADER}\n{MODEL}\n{AGENTS}\n\n{SETTING}\n"),
            false,
        );
        check(&format!("{HEADER}\n{MODEL}\n{MESSAGE}\n"), true);
        check(&format!("{HEADER}\n{MODEL}\n{LOADED}\n"), true);
        check(
            &format!("{HEADER}\n{MODEL}\n{{\"type\":\"future_kind\"}}\n"),
            true,
        );
        // A torn or damaged line may have been a message: it is content.
        check(&format!("{HEADER}\n{MODEL}\n{{\"type\":\"mess"), true);
        check(&format!("{HEADER}\nnot json\n"), true);
        // A file that cannot be read is never called empty.
        assert!(has_content("/nonexistent/soba/session.jsonl"));
    }

    #[test]
    fn a_line_longer_than_the_limit_is_read_past_not_held() {
        // A tiny buffer, so the long line arrives in many pieces.
        let text = b"short\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nlast";
        let mut reader = std::io::BufReader::with_capacity(4, &text[..]);
        let mut line = Vec::new();
        let mut seen = Vec::new();
        loop {
            let read = read_line_bounded(&mut reader, &mut line, 8).expect("reads");
            if read == LineRead::End {
                break;
            }
            assert!(line.len() <= 8, "{} bytes held", line.len());
            let held = match read {
                LineRead::TooLong => String::new(),
                _ => String::from_utf8_lossy(&line).into_owned(),
            };
            seen.push((read, held));
        }
        assert_eq!(
            seen,
            [
                (LineRead::Line, "short\n".to_owned()),
                (LineRead::TooLong, String::new()),
                (LineRead::Line, "last".to_owned()),
            ]
        );
    }

    /// A header, a message, `bad` (a line of its own), then a message
    /// under the first.
    fn around(bad: &[u8]) -> Vec<u8> {
        let mut text = format!("{HEADER}\n{MESSAGE}\n").into_bytes();
        text.extend_from_slice(bad);
        text.extend_from_slice(
            br#"{"type":"message","id":"e_0194c2d0e4c070068000000000000001","parentId":"e_0194c2d0e4c070048000000000000001","timestamp":"t","role":"user","content":[{"type":"text","text":"after"}]}"#,
        );
        text.push(b'\n');
        text
    }

    /// Reads `text` through a small buffer, as a file arrives in pieces.
    fn read_in_pieces(text: &[u8]) -> SessionLog {
        SessionLog::read(BufReader::with_capacity(4096, text), Keep::Outline).expect("reads")
    }

    #[test]
    fn a_long_line_that_cannot_be_json_is_read_past_not_held() {
        let long = 3 * LOG_LINE_CHECKED_AFTER;
        for (bad, why) in [
            // A zero-filled stretch (a sparse file, a crash that left zeros).
            (
                [b"{".as_slice(), &vec![0u8; long], b"\n"].concat(),
                "raw control byte 0x00",
            ),
            // A run of bytes that does not open an object.
            (
                [vec![b'x'; long], b"\n".to_vec()].concat(),
                "starts with byte 0x78",
            ),
        ] {
            let mut reader = BufReader::with_capacity(4096, &bad[..]);
            let mut line = Vec::new();
            let read = read_log_line(&mut reader, &mut line, MAX_LOG_LINE).expect("reads");
            assert!(
                matches!(&read, LogLine::Skipped { n_read, terminated: true, why: found } if *n_read == bad.len() as u64 && found.contains(why)),
                "{read:?}"
            );
            assert!(
                line.len() <= LOG_LINE_CHECKED_AFTER,
                "{} bytes held",
                line.len()
            );
            // The entries on both sides are read, and the path goes on.
            let log = read_in_pieces(&around(&bad));
            assert_eq!(log.entries().len(), 2);
            assert_eq!(log.path().len(), 2);
            let messages: Vec<String> = log.diagnostics().iter().map(ToString::to_string).collect();
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert!(
                messages[0].starts_with("line 3")
                    && messages[0].contains(why)
                    && messages[0].contains(&format!("its {} bytes were read past", bad.len() - 1)),
                "{messages:?}"
            );
        }
    }

    #[test]
    fn a_long_valid_line_and_a_long_torn_tail_read_as_before() {
        // A message of 3 MiB of text is held and read.
        let text = "y".repeat(3 * LOG_LINE_CHECKED_AFTER);
        let big = format!(
            r#"{{"type":"message","id":"e_0194c2d0e4c070078000000000000001","parentId":"e_0194c2d0e4c070048000000000000001","timestamp":"t","role":"user","content":[{{"type":"text","text":"{text}"}}]}}"#
        );
        let log = read_in_pieces(
            &[
                HEADER.as_bytes(),
                b"\n",
                MESSAGE.as_bytes(),
                b"\n",
                big.as_bytes(),
                b"\n",
            ]
            .concat(),
        );
        assert!(log.is_clean(), "{:?}", log.diagnostics());
        assert_eq!(log.path().len(), 2);
        // A zero-filled tail without a newline is a torn last line.
        let mut torn = format!("{HEADER}\n{MESSAGE}\n{{").into_bytes();
        torn.extend(vec![0u8; 3 * LOG_LINE_CHECKED_AFTER]);
        let log = read_in_pieces(&torn);
        let expected = 1 + 3 * LOG_LINE_CHECKED_AFTER as u64;
        assert!(
            matches!(log.diagnostics(), [Diagnostic { kind: DiagnosticKind::TornLine { bytes }, .. }] if *bytes == expected),
            "{:?}",
            log.diagnostics()
        );
        assert_eq!(log.path().len(), 1);
    }

    #[test]
    fn an_outline_leaves_out_the_files_brought_back_after_a_capsule() {
        let capsule = r#"{"type":"capsule","id":"ck_0194c2d0e4c070088000000000000001","parentId":"e_0194c2d0e4c070048000000000000001","timestamp":"t","trigger":"user","quality":"full","firstKeptEntryId":null,"tokensBefore":40000,"tokensAfter":2000,"summarizer":"deterministic","previousCapsuleId":null,"state":{"model":"fake/m","calibration":{},"autoCompact":true,"skills":[],"pinned":{"agentsMd":null,"system":[]}},"narrative":{"goal":"g","constraints":"","done":"","inProgress":"","pending":"","decisions":"","blockers":"","nextSteps":""},"local":{"originalTask":"g","latestInstructions":[],"filesRead":[],"filesReadMore":0,"filesModified":["a.rs"],"verification":[],"unresolvedErrors":[],"checkpoints":[],"activeSkills":[]},"markdown":"g","rehydrated":{"files":[{"path":"a.rs","text":"fn main() {}\n","totalLines":1,"shownLines":1}],"pathsOnly":["b.rs"]}}"#;
        let text = format!("{HEADER}\n{MESSAGE}\n{capsule}\n");
        let rehydrated = |log: &SessionLog| match &log.entries()[1].entry.body {
            EntryBody::Capsule(capsule) => capsule.rehydrated.clone(),
            other => panic!("not a capsule: {other:?}"),
        };
        let whole = SessionLog::from_bytes(text.as_bytes());
        assert_eq!(rehydrated(&whole).files.len(), 1);
        assert!(rehydrated(&read_in_pieces(text.as_bytes())).is_empty());
    }
}
