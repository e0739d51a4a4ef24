//! Importers of foreign transcripts (SPEC §3.4): pi, SWE-agent, OpenHands,
//! Gemini CLI (JSON and JSONL), Claude Code, Codex and opencode sessions converted
//! into SOBA domain values — entries, recorded inferences and import
//! statistics.
//!
//! The importers return values; writing them as a SOBA session is done by the
//! session writer. Every importer is tolerant: a malformed line or record is
//! skipped with a diagnostic (naming its line or index), never an abort, and
//! no input makes them panic.
//!
//! Decisions where the formats leave room (see `traces/FORMATS.md`):
//! - Unpaired tool calls are kept as they are (no synthetic result) and
//!   counted in [`ImportStats::unpaired_tool_calls`].
//! - One pairing check (in the session builder) serves every importer: a
//!   result recorded directly before the assistant entry making its call is
//!   moved after it; any other result with no earlier call is kept as an
//!   `observation` user message; both are counted in [`ImportStats`] and
//!   named in the diagnostics, so an imported session passes
//!   `soba show --check`.
//! - Consecutive assistant records of one model response (Claude Code lines
//!   sharing `message.id`, openai-chat runs, Codex items, OpenHands actions
//!   sharing `model_response.id`) become one assistant entry.
//! - A recorded compaction becomes an imported capsule entry placed where
//!   the source recorded it; a summary message that follows it stays in the
//!   entries as a `user` message with [`MessageOrigin::Summary`].
//! - Entry ids are uuid v7 built from the entry's own timestamp (bumped to
//!   stay strictly increasing) and random bits hashed from the source path,
//!   the session id and the entry's position: the same file always gives the
//!   same ids, in entry order.
//!
//! [`MessageOrigin::Summary`]: soba_core::MessageOrigin::Summary

mod builder;
mod claude_code;
mod codex;
mod detect;
mod gemini;
mod lines;
mod opencode;
mod openhands;
mod pi;
mod scan;
mod soba_log;
mod swe_agent;
mod text;
mod tree;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::reader::SessionLog;
use crate::untrusted::{FileKind, UntrustedReadError};
use serde_json::Value;
use soba_core::{Entry, Usage};

pub use detect::{Detected, Truncated, detect_bytes, detect_format, detect_truncated};
pub use text::LoneSurrogates;
pub use write::{PreviousImport, import_key, previous_imports, write_session};

/// A foreign transcript format the importers understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Format {
    /// pi session JSONL, old flat layout (file order).
    PiV1,
    /// pi (or GJC) session JSONL with `id`/`parentId` tree, `version: 3`.
    PiV3,
    /// SWE-agent 1.x `.traj` (function calling, tool-call ids).
    SweAgent1,
    /// SWE-agent 0.x `.traj` (actions written as text, no ids).
    SweAgent0,
    /// OpenHands evaluation `output.jsonl`, one instance per line.
    OpenHands,
    /// Gemini CLI chat-recording JSON (`session-*.json`, one document).
    GeminiCli,
    /// Gemini CLI chat-recording JSONL (`session-*.jsonl`, the append-only
    /// form that replaced the JSON one).
    GeminiCliJsonl,
    /// Claude Code native session JSONL (and its stream-json variant).
    ClaudeCode,
    /// The "openai-chat" JSON export of a Claude Code session.
    ClaudeCodeOpenAiChat,
    /// Codex CLI native rollout JSONL.
    CodexRollout,
    /// A Codex rollout converted to `{messages, meta}`.
    CodexMessagesMeta,
    /// The document `opencode export` writes (`{info, messages}`).
    OpenCode,
    /// A session file of opencode's JSON storage layout (before 1.2.0),
    /// read with its message and part files.
    OpenCodeStorage,
    /// opencode's SQLite database (`opencode.db`, 1.2.0 and later): every
    /// session it holds.
    OpenCodeDb,
    /// A SOBA session log, read for `soba replay` only ([`replay_path`]):
    /// `soba import` refuses it. Not in [`Format::ALL`].
    Soba,
}

impl Format {
    /// Every format, in detection order after SOBA itself.
    pub const ALL: [Format; 14] = [
        Format::PiV1,
        Format::PiV3,
        Format::SweAgent1,
        Format::SweAgent0,
        Format::OpenHands,
        Format::GeminiCli,
        Format::ClaudeCodeOpenAiChat,
        Format::CodexMessagesMeta,
        Format::GeminiCliJsonl,
        Format::ClaudeCode,
        Format::CodexRollout,
        Format::OpenCode,
        Format::OpenCodeStorage,
        Format::OpenCodeDb,
    ];

    /// Returns the format's name as reported by `soba import --json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::PiV1 => "pi-v1",
            Format::PiV3 => "pi-v3",
            Format::SweAgent1 => "swe-agent-1",
            Format::SweAgent0 => "swe-agent-0",
            Format::OpenHands => "openhands",
            Format::GeminiCli => "gemini-cli",
            Format::GeminiCliJsonl => "gemini-cli-jsonl",
            Format::ClaudeCode => "claude-code",
            Format::ClaudeCodeOpenAiChat => "claude-code-openai-chat",
            Format::CodexRollout => "codex-rollout",
            Format::CodexMessagesMeta => "codex-messages-meta",
            Format::OpenCode => "opencode",
            Format::OpenCodeStorage => "opencode-storage",
            Format::OpenCodeDb => "opencode-db",
            Format::Soba => "soba",
        }
    }

    /// Parses a name written by [`Format::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Format::ALL
            .into_iter()
            .find(|format| format.as_str() == name)
    }

    /// Returns the agent that wrote the format (`pi`, `swe-agent`,
    /// `openhands`, `gemini-cli`, `claude-code`, `codex`, `opencode`), as recorded on
    /// imported capsules.
    pub fn agent(self) -> &'static str {
        match self {
            Format::PiV1 | Format::PiV3 => "pi",
            Format::SweAgent1 | Format::SweAgent0 => "swe-agent",
            Format::OpenHands => "openhands",
            Format::GeminiCli | Format::GeminiCliJsonl => "gemini-cli",
            Format::ClaudeCode | Format::ClaudeCodeOpenAiChat => "claude-code",
            Format::CodexRollout | Format::CodexMessagesMeta => "codex",
            Format::OpenCode | Format::OpenCodeStorage | Format::OpenCodeDb => "opencode",
            Format::Soba => "soba",
        }
    }

    /// Returns every format name, comma-separated, for error messages.
    pub fn list() -> String {
        Format::ALL
            .iter()
            .map(|format| format.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a file could not be imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file or folder could not be read. Retrying helps only when the
    /// cause (permissions, a vanished file) is fixed.
    #[error("cannot read {path}")]
    Io {
        /// The path being read.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file matches none of the supported formats. Retrying cannot help.
    #[error("{path} is not a transcript soba can import; supported formats: {formats}")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// The supported format names, comma-separated.
        formats: String,
    },
    /// The file is recognised as a format soba imports, but misses what
    /// importing it needs (Claude Code lines without `uuid`). Retrying
    /// cannot help.
    #[error("{path} looks like {looks_like}, but {missing}, so soba cannot import it")]
    Unusable {
        /// The file.
        path: PathBuf,
        /// What it was recognised as.
        looks_like: &'static str,
        /// What it lacks, and why that matters.
        missing: &'static str,
    },
    /// The file begins like a whole-document JSON transcript but ends
    /// early: it was cut while being written or copied. Retrying helps only
    /// with a complete copy.
    #[error(
        "{path} looks like {looks_like} but ends early at byte {ends_at} (truncated?): re-copy it"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What its beginning looks like, e.g. "a SWE-agent trajectory".
        looks_like: &'static str,
        /// Where the document ends: the file's length.
        ends_at: u64,
    },
    /// The file is already a SOBA session log; it needs no import.
    #[error(
        "{path} is already a soba session (schemaVersion {schema_version}); open or replay it directly instead of importing it"
    )]
    AlreadySoba {
        /// The file.
        path: PathBuf,
        /// The header's `schemaVersion`.
        schema_version: u64,
    },
    /// The path is not a regular file (a FIFO, a device, a directory given
    /// where a file is needed) or is larger than [`IMPORT_LIMIT`]. Not
    /// retryable with the same path.
    #[error(transparent)]
    Unreadable(crate::untrusted::UntrustedReadError),
    /// An SQLite database (opencode's `opencode.db`) that cannot be read as
    /// opencode's sessions: damaged, cut short, changed while read, or
    /// another program's. The reason says what to do.
    #[error("cannot read {path} as opencode's session database: {reason}")]
    Database {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The file has the shape of a format but holds no importable session
    /// (e.g. every line is malformed). Retrying cannot help.
    #[error("{path} looks like {format} but holds no importable session: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The format it was detected as.
        format: Format,
        /// What is wrong, in a few words.
        reason: String,
    },
}

/// Options of an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOptions {
    /// Unix milliseconds used as the timestamp of entries whose source
    /// records no time (SWE-agent, the openai-chat export); each later entry
    /// is one millisecond after the previous one.
    pub fallback_timestamp_ms: i64,
}

impl ImportOptions {
    /// Returns options with the given fallback time.
    pub fn with_fallback_ms(fallback_timestamp_ms: i64) -> Self {
        ImportOptions {
            fallback_timestamp_ms,
        }
    }
}

/// One inference (model request) recorded in a transcript, as SPEC §15.1
/// defines it per format.
#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    /// Index into [`ImportedSession::entries`] of the first assistant entry
    /// the inference produced.
    pub first_entry: usize,
    /// Index of the last assistant entry it produced (equal to
    /// `first_entry` when the response is one entry).
    pub last_entry: usize,
    /// Normalised usage of the request, when the source records it per
    /// request.
    pub usage: Option<Usage>,
    /// RFC 3339 UTC time of the response, when the source records one.
    pub timestamp: Option<String>,
    /// The model that answered, when recorded.
    pub model: Option<String>,
    /// The source's id of the response (`message.id`, `model_response.id`),
    /// when it has one.
    pub response_id: Option<String>,
}

/// Counts and totals of one imported session (the fields of
/// `soba import --json`, SPEC §3.4).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImportStats {
    /// Message records as the source stores them, before any merging.
    pub messages: u64,
    /// Source records per kind as stored (role, line type or event kind).
    pub records: std::collections::BTreeMap<String, u64>,
    /// SOBA message entries produced.
    pub entries: u64,
    /// `tool_use` blocks produced.
    pub tool_calls: u64,
    /// `tool_result` blocks produced.
    pub tool_results: u64,
    /// Tool calls with no result anywhere in the session (kept unpaired).
    pub unpaired_tool_calls: u64,
    /// Tool results whose call is nowhere in the session (its record was
    /// damaged or dropped); each is kept as an `observation` user message
    /// and named in `diagnostics`.
    pub orphan_tool_results: u64,
    /// Tool results recorded before their call that could not be moved
    /// after it; kept as `observation` user messages, named in
    /// `diagnostics`.
    pub results_before_calls: u64,
    /// Tool results recorded directly before the assistant entry making
    /// their call, moved after it (named in `diagnostics`).
    pub reordered_tool_results: u64,
    /// Normalised usage totals (SPEC §4.2); for cumulative counters, the
    /// last value normalised.
    pub usage: Usage,
    /// The sum of the usage stored on the imported messages: what `soba
    /// show` reports. Below `usage` when the source counted requests that
    /// left no message with usage (interrupted turns, a cumulative counter).
    pub stored_usage: Usage,
    /// The source's own usage names and meanings: raw sums, or the last
    /// value of cumulative counters, plus `"counting"` saying which.
    pub usage_raw: Value,
    /// The largest per-request prompt size, `None` without per-request usage.
    pub peak_prompt_tokens: Option<u64>,
    /// Recorded compactions (imported capsules).
    pub compactions: u64,
    /// What was skipped or guessed, one line each (with line numbers or
    /// record indexes where known): the first thousand.
    pub diagnostics: Vec<String>,
    /// How many more there were, not listed.
    pub diagnostics_unlisted: u64,
    /// The file was not valid UTF-8: where and how much was replaced (also
    /// the first line of `diagnostics`).
    pub invalid_utf8: Option<InvalidUtf8>,
    /// Every response the provider billed, in file order: each once (as
    /// the agent de-duplicates them), abandoned branches, sub-agent lines
    /// and interrupted requests included. The history (`inferences`) holds
    /// only what the conversation kept; this is what the session cost.
    pub billed: Vec<BilledResponse>,
}

/// One response a provider billed, as the transcript records it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BilledResponse {
    /// The model that answered, as recorded.
    pub model: Option<String>,
    /// Its normalised usage.
    pub usage: Usage,
    /// The part of `usage.cache_write` written with the 1-hour lifetime
    /// (Anthropic's `cache_creation.ephemeral_1h_input_tokens`).
    pub cache_write_1h: u64,
    /// RFC 3339 UTC time of the response, when recorded.
    pub timestamp: Option<String>,
}

impl ImportStats {
    /// The number of diagnostics, those not listed included.
    pub fn diagnostics_total(&self) -> u64 {
        self.diagnostics.len() as u64 + self.diagnostics_unlisted
    }

    /// Adds diagnostics found after the session was finished (a file's
    /// own, on its last session), within the same limit.
    pub(crate) fn add_diagnostics(&mut self, more: builder::Diagnostics) {
        let (listed, unlisted) = more.into_parts();
        for note in listed {
            if self.diagnostics.len() < builder::DIAGNOSTICS_LISTED {
                self.diagnostics.push(note);
            } else {
                self.diagnostics_unlisted += 1;
            }
        }
        self.diagnostics_unlisted += unlisted;
    }
}

/// Invalid UTF-8 in an imported file. Importers read it lossily: each
/// invalid sequence becomes U+FFFD and everything else is imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidUtf8 {
    /// Byte offset of the first invalid sequence.
    pub first_offset: u64,
    /// How many invalid sequences were replaced by U+FFFD.
    pub replaced: u64,
}

impl InvalidUtf8 {
    /// Scans `bytes`; `None` when they are valid UTF-8. Sequences are
    /// counted as [`String::from_utf8_lossy`] replaces them.
    pub fn scan(bytes: &[u8]) -> Option<InvalidUtf8> {
        let valid_up_to = match std::str::from_utf8(bytes) {
            Ok(_) => return None,
            Err(err) => err.valid_up_to(),
        };
        let replaced = bytes[valid_up_to..]
            .utf8_chunks()
            .filter(|chunk| !chunk.invalid().is_empty())
            .count();
        Some(InvalidUtf8 {
            first_offset: valid_up_to as u64,
            replaced: replaced as u64,
        })
    }
}

impl fmt::Display for InvalidUtf8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sequences = if self.replaced == 1 {
            "sequence"
        } else {
            "sequences"
        };
        write!(
            f,
            "not valid UTF-8: first invalid byte at offset {}, {} invalid {sequences} replaced by U+FFFD and the rest imported; convert the file to UTF-8 and import it again to keep those bytes",
            self.first_offset, self.replaced
        )
    }
}

/// One foreign session converted to SOBA domain values.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedSession {
    /// The source format.
    pub format: Format,
    /// The file it came from.
    pub source: PathBuf,
    /// The source's own session id (or instance id, or file stem).
    pub original_id: String,
    /// The workspace directory the session ran in, when recorded.
    pub cwd: Option<String>,
    /// RFC 3339 UTC creation time, when recorded.
    pub created_at: Option<String>,
    /// The session's (first) model, when recorded.
    pub model: Option<String>,
    /// The context window the agent reported (Codex `model_context_window`,
    /// OpenHands `max_input_tokens`).
    pub context_window: Option<u64>,
    /// The system prompt, when the trace records it.
    pub system_prompt: Option<String>,
    /// Whether `system_prompt` is also in `entries` as a `system` message
    /// (SWE-agent, OpenHands); when false it was recorded outside the
    /// conversation (Codex base instructions) and must be added to rebuild
    /// the model input.
    pub system_prompt_in_entries: bool,
    /// Tool schemas as the trace records them (OpenHands `args.tools`).
    pub tool_schemas: Vec<Value>,
    /// SOBA entries: messages, imported capsules and model changes, in order,
    /// each the parent of the next.
    pub entries: Vec<Entry>,
    /// The recorded inferences, in order.
    pub inferences: Vec<Inference>,
    /// Counts, usage and diagnostics.
    pub stats: ImportStats,
}

impl ImportedSession {
    /// Returns the number of recorded inferences.
    pub fn inference_count(&self) -> usize {
        self.inferences.len()
    }

    /// Stores each message's token count in `counter`'s encoding (images
    /// costing `image_tokens` each), as the session writer does for a
    /// message SOBA appends: a resume with the same tokenizer then reads
    /// the counts instead of tokenizing the history again. The messages
    /// are counted on every core. Returns the tokens counted.
    pub fn store_counts(
        &mut self,
        counter: &dyn soba_core::TokenCounter,
        image_tokens: soba_core::TokenCount,
    ) -> soba_core::TokenCount {
        use rayon::prelude::*;
        // The vocabulary loads on this thread, into the memory the import
        // freed, rather than into a fresh arena of a worker thread.
        counter.count_text("load");
        self.entries
            .par_iter_mut()
            .map(|entry| {
                let soba_core::EntryBody::Message(logged) = &mut entry.body else {
                    return soba_core::TokenCount::ZERO;
                };
                let counted =
                    soba_core::tokens::count_message(counter, &logged.message, image_tokens);
                logged.tokens = Some(soba_core::entry::StoredTokens {
                    encoding: counter.encoding(),
                    n: counted.n,
                    estimated: counted.estimated,
                });
                counted.n
            })
            .reduce(|| soba_core::TokenCount::ZERO, |a, b| a + b)
    }
}

/// What importing one file of a folder gave.
#[derive(Debug)]
pub enum FileOutcome {
    /// The file held these sessions.
    Imported(Vec<ImportedSession>),
    /// The file was skipped (unknown format, already a SOBA session, not a
    /// regular file, a dangling link); the text is the diagnostic.
    Skipped(String),
    /// The file looked importable but failed.
    Failed(ImportError),
}

/// One file visited by [`import_dir`].
#[derive(Debug)]
pub struct FileImport {
    /// The file.
    pub path: PathBuf,
    /// What importing it gave.
    pub outcome: FileOutcome,
}

/// Imports every session a file holds, detecting its format.
///
/// Entries of sources without timestamps are dated from the file's
/// modification time. A SOBA session gives [`ImportError::AlreadySoba`].
/// A line-oriented transcript (pi, Claude Code, a Codex rollout, OpenHands)
/// is streamed: its lines are read and converted one at a time, so the
/// memory used is that of the converted session, not of the file and its
/// parsed lines; a whole-document transcript is read whole.
pub fn import_path(path: &Path) -> Result<Vec<ImportedSession>, ImportError> {
    read_path(path, SobaLogs::Refuse)
}

/// Reads every session a file holds for `soba replay`: as
/// [`import_path`] does, except that a SOBA session log is read too (its
/// path before any compaction, [`Format::Soba`]), not refused.
pub fn replay_path(path: &Path) -> Result<Vec<ImportedSession>, ImportError> {
    read_path(path, SobaLogs::Read)
}

/// Whether a SOBA session log is read ([`replay_path`]) or refused
/// ([`import_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SobaLogs {
    Refuse,
    Read,
}

fn read_path(path: &Path, soba_logs: SobaLogs) -> Result<Vec<ImportedSession>, ImportError> {
    let (file, metadata) = crate::untrusted::open_untrusted(path).map_err(read_error)?;
    // A database is read through SQLite, row by row: the cap is per row.
    if metadata.len() > IMPORT_LIMIT && !detect::is_sqlite(&file) {
        return Err(ImportError::Unreadable(UntrustedReadError::TooLarge {
            path: path.to_owned(),
            limit: IMPORT_LIMIT,
        }));
    }
    let fallback_ms = metadata
        .modified()
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|elapsed| i64::try_from(elapsed.as_millis()).ok())
        .unwrap_or(0);
    let options = ImportOptions::with_fallback_ms(fallback_ms);
    if detect::is_sqlite(&file) {
        return opencode::import_db(path, &file, &options);
    }
    let head = detect::read_head(&file).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    if head.cannot_be_json() {
        return Err(ImportError::UnknownFormat {
            path: path.to_owned(),
            formats: Format::list(),
        });
    }
    // A file that holds more than its reported size (`/proc` files report
    // 0) is read whole: the passes read the reported size.
    let detected = head.streamable().filter(|_| head.len() <= metadata.len());
    match detected {
        Some(Detected::Foreign(format)) => {
            let lines = lines::Lines::file(path, file, metadata.len());
            return import_lines(&lines, format, path, &options);
        }
        Some(Detected::Soba { .. }) if soba_logs == SobaLogs::Read => {
            // The head was read through the same handle: back to its start.
            use std::io::Seek;
            let io_error = |source| ImportError::Io {
                path: path.to_owned(),
                source,
            };
            let mut file = file;
            file.rewind().map_err(io_error)?;
            // Only the length checked against the limit is read: a log
            // appended to meanwhile is read as it was.
            use std::io::Read;
            let log = SessionLog::from_reader(std::io::BufReader::with_capacity(
                1 << 20,
                file.take(metadata.len()),
            ))
            .map_err(io_error)?;
            return soba_log::read(log, path, &options);
        }
        Some(Detected::Soba { schema_version }) => {
            return Err(ImportError::AlreadySoba {
                path: path.to_owned(),
                schema_version,
            });
        }
        None => {}
    }
    let bytes = read_import(path)?;
    if soba_logs == SobaLogs::Read && matches!(detect_bytes(&bytes), Some(Detected::Soba { .. })) {
        let log = SessionLog::from_bytes(&bytes);
        drop(bytes);
        return soba_log::read(log, path, &options);
    }
    import_bytes(&bytes, path, &options)
}

/// The error of a transcript that cannot be opened or read.
fn read_error(err: UntrustedReadError) -> ImportError {
    match err {
        UntrustedReadError::Io { path, source } => ImportError::Io { path, source },
        other => ImportError::Unreadable(other),
    }
}

/// The largest transcript `soba import` reads: 1 GiB.
pub const IMPORT_LIMIT: u64 = 1 << 30;

/// Reads a transcript to import: a regular file of at most
/// [`IMPORT_LIMIT`] bytes ([`crate::untrusted::read_untrusted`]).
pub(crate) fn read_import(path: &Path) -> Result<Vec<u8>, ImportError> {
    crate::untrusted::read_untrusted(path, IMPORT_LIMIT).map_err(read_error)
}

/// Imports every session in `bytes`, read from `source` (used in errors,
/// diagnostics and id seeds only).
pub fn import_bytes(
    bytes: &[u8],
    source: &Path,
    options: &ImportOptions,
) -> Result<Vec<ImportedSession>, ImportError> {
    let format = match detect_bytes(bytes) {
        Some(Detected::Foreign(format)) => format,
        Some(Detected::Soba { schema_version }) => {
            return Err(ImportError::AlreadySoba {
                path: source.to_owned(),
                schema_version,
            });
        }
        None => return Err(unknown_or_truncated(bytes, source)),
    };
    import_as(bytes, format, source, options)
}

/// The error for bytes of no known format: [`ImportError::Truncated`] when
/// they begin like a whole-document transcript that ends early, else
/// [`ImportError::UnknownFormat`].
fn unknown_or_truncated(bytes: &[u8], source: &Path) -> ImportError {
    match detect_truncated(bytes, source) {
        Some(truncated) => ImportError::Truncated {
            path: source.to_owned(),
            looks_like: truncated.looks_like,
            ends_at: truncated.ends_at,
        },
        None if claude_code_without_uuid(bytes) => ImportError::Unusable {
            path: source.to_owned(),
            looks_like: "a Claude Code transcript",
            missing: "its message lines have no `uuid` (the id each message's successor names as `parentUuid`), so the conversation's order cannot be rebuilt; export the session again from Claude Code, whose own files carry them",
        },
        None => ImportError::UnknownFormat {
            path: source.to_owned(),
            formats: Format::list(),
        },
    }
}

/// Returns whether the first lines of `bytes` include a Claude Code
/// message line (`sessionId`, `type` user or assistant, `message`) that
/// lacks the `uuid` detection needs.
fn claude_code_without_uuid(bytes: &[u8]) -> bool {
    bytes
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .take(64)
        .filter_map(|line| serde_json::from_slice::<serde_json::Map<String, Value>>(line).ok())
        .any(|line| {
            line.contains_key("sessionId")
                && line.contains_key("message")
                && !line.contains_key("uuid")
                && matches!(
                    line.get("type").and_then(Value::as_str),
                    Some("user" | "assistant")
                )
        })
}

/// Imports `bytes` as the given format, without detection.
pub fn import_as(
    bytes: &[u8],
    format: Format,
    source: &Path,
    options: &ImportOptions,
) -> Result<Vec<ImportedSession>, ImportError> {
    let invalid_utf8 = InvalidUtf8::scan(bytes);
    let (text, surrogates) = text::repair_lossy(String::from_utf8_lossy(bytes));
    let notes = TextNotes {
        invalid_utf8,
        surrogates,
    };
    let ctx = builder::Context {
        source: source.to_owned(),
        fallback_ms: options.fallback_timestamp_ms,
    };
    let sessions = match format {
        Format::SweAgent1 | Format::SweAgent0 => swe_agent::import(&text, &ctx),
        Format::GeminiCli => gemini::import(&text, &ctx),
        Format::ClaudeCodeOpenAiChat => claude_code::import_openai_chat(&text, &ctx),
        Format::CodexMessagesMeta => codex::import_messages_meta(&text, &ctx),
        Format::OpenCode => opencode::import_export(&text, &ctx),
        Format::OpenCodeStorage => opencode::import_storage(&text, &ctx),
        Format::OpenCodeDb => Err(
            "an SQLite database is read from its file, not from bytes: import it by its path"
                .into(),
        ),
        Format::Soba => Err("a SOBA session log is not imported: open or replay it".into()),
        line_format => {
            return import_lines(&lines::Lines::Text(&text), line_format, source, options)
                .map(|sessions| notes.add_to(sessions, source));
        }
    };
    let sessions = sessions.map_err(|reason| ImportError::Malformed {
        path: source.to_owned(),
        format,
        reason,
    })?;
    Ok(notes.add_to(sessions, source))
}

/// Imports the lines of a line-oriented format (pi, Claude Code native, a
/// Codex rollout, OpenHands, Gemini CLI JSONL).
fn import_lines(
    lines: &lines::Lines<'_>,
    format: Format,
    source: &Path,
    options: &ImportOptions,
) -> Result<Vec<ImportedSession>, ImportError> {
    let ctx = builder::Context {
        source: source.to_owned(),
        fallback_ms: options.fallback_timestamp_ms,
    };
    let sessions = match format {
        Format::PiV1 | Format::PiV3 => pi::import(lines, &ctx),
        Format::OpenHands => openhands::import(lines, &ctx),
        Format::ClaudeCode => claude_code::import_native(lines, &ctx),
        Format::CodexRollout => codex::import_rollout(lines, &ctx),
        Format::GeminiCliJsonl => gemini::import_jsonl(lines, &ctx),
        other => Err(format!("{other} is not a line-oriented format")),
    };
    if let Some((path, source)) = lines.take_error() {
        return Err(ImportError::Io { path, source });
    }
    let sessions = sessions.map_err(|reason| ImportError::Malformed {
        path: source.to_owned(),
        format,
        reason,
    })?;
    let notes = TextNotes {
        invalid_utf8: lines.invalid_utf8(),
        surrogates: lines.lone_surrogates(),
    };
    Ok(notes.add_to(sessions, source))
}

/// What reading a file's bytes as text repaired ([`text`]).
struct TextNotes {
    invalid_utf8: Option<InvalidUtf8>,
    surrogates: Option<LoneSurrogates>,
}

impl TextNotes {
    /// Records the repairs on every session the file held: the first
    /// diagnostics say where they were and what was done.
    fn add_to(self, mut sessions: Vec<ImportedSession>, source: &Path) -> Vec<ImportedSession> {
        let notes: Vec<String> = [
            self.invalid_utf8.map(|invalid| invalid.to_string()),
            self.surrogates.map(|found| found.to_string()),
        ]
        .into_iter()
        .flatten()
        .map(|note| format!("{}: {note}", source.display()))
        .collect();
        for session in &mut sessions {
            session.stats.invalid_utf8 = self.invalid_utf8;
            session
                .stats
                .diagnostics
                .splice(0..0, notes.iter().cloned());
        }
        sessions
    }
}

/// Walks `dir` recursively (sorted by name, symlinked folders not followed)
/// and imports every file, returning one outcome per file in walk order.
/// Unknown files, SOBA sessions, special files (FIFOs, sockets, devices,
/// links to them or to folders) and dangling links are
/// [`FileOutcome::Skipped`] with a diagnostic saying why, an unreadable
/// subfolder is [`FileOutcome::Failed`]; only an unreadable `dir` itself is
/// an error. Every file's sessions are held at once: [`dir_files`] imports
/// one file at a time.
pub fn import_dir(dir: &Path) -> Result<Vec<FileImport>, ImportError> {
    Ok(dir_files(dir)?.into_iter().map(DirFile::import).collect())
}

/// A file of a folder walked by [`dir_files`], imported when asked.
#[derive(Debug)]
pub struct DirFile {
    /// The file (or the subfolder that could not be read).
    pub path: PathBuf,
    walk_error: Option<std::io::Error>,
}

impl DirFile {
    /// Imports the file, as [`import_dir`] does.
    pub fn import(self) -> FileImport {
        self.read(SobaLogs::Refuse)
    }

    /// Reads the file for `soba replay`, as [`replay_path`] does: a SOBA
    /// session log is read, not skipped.
    pub fn replay(self) -> FileImport {
        self.read(SobaLogs::Read)
    }

    fn read(self, soba_logs: SobaLogs) -> FileImport {
        let path = self.path;
        let outcome = match self.walk_error {
            Some(source) => FileOutcome::Failed(ImportError::Io {
                path: path.clone(),
                source,
            }),

            None => match read_path(&path, soba_logs) {
                Ok(sessions) => FileOutcome::Imported(sessions),
                Err(ImportError::UnknownFormat { .. } | ImportError::AlreadySoba { .. })
                    if let Some(what) = soba_bookkeeping(&path) =>
                {
                    FileOutcome::Skipped(format!("skipped: {what}"))
                }
                Err(
                    err @ (ImportError::UnknownFormat { .. }
                    | ImportError::AlreadySoba { .. }
                    | ImportError::Unusable { .. }),
                ) => FileOutcome::Skipped(format!("skipped: {err}")),
                Err(ImportError::Unreadable(UntrustedReadError::NotRegular { kind, .. })) => {
                    FileOutcome::Skipped(not_regular_note(&path, kind))
                }
                Err(ImportError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && std::fs::symlink_metadata(&path)
                            .is_ok_and(|meta| meta.file_type().is_symlink()) =>
                {
                    FileOutcome::Skipped("skipped: a link whose target does not exist".to_owned())
                }
                Err(err) => FileOutcome::Failed(err),
            },
        };
        FileImport { path, outcome }
    }
}

impl DirFile {
    /// Returns why the walk could not read this subfolder, when it is one.
    pub fn walk_error(&self) -> Option<&std::io::Error> {
        self.walk_error.as_ref()
    }
}

/// Walks `dir` as [`import_dir`] does and returns its files in walk order,
/// not yet imported: a caller that writes each file's sessions before
/// importing the next holds one file's sessions at a time.
pub fn dir_files(dir: &Path) -> Result<Vec<DirFile>, ImportError> {
    dir_files_within(dir, usize::MAX)
}

/// Walks `dir` as [`dir_files`] does, entering at most `depth` levels of
/// subfolders (0: the files of `dir` itself): where an agent's layout puts
/// sessions at a known depth, nothing deeper is read.
pub fn dir_files_within(dir: &Path, depth: usize) -> Result<Vec<DirFile>, ImportError> {
    let mut walked = Vec::new();
    if let Err(source) = collect_files(dir, depth, &mut walked) {
        return Err(ImportError::Io {
            path: dir.to_owned(),
            source,
        });
    }
    Ok(walked
        .into_iter()
        .map(|(path, walk_error)| DirFile { path, walk_error })
        .collect())
}

/// The lock file `soba import` keeps in a folder it writes sessions to.
pub const IMPORT_LOCK: &str = ".import.lock";

/// What SOBA's own bookkeeping file at `path` is, by its name, when it is
/// no transcript: a flight record or the import lock. `None` for any other
/// name.
fn soba_bookkeeping(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.to_string_lossy();
    if name.ends_with(".flight.jsonl") {
        Some(
            "a SOBA flight record (the engine's decisions, not a conversation; the session log beside it holds the conversation)",
        )
    } else if name == IMPORT_LOCK {
        Some("the lock file `soba import` keeps beside the sessions it writes")
    } else {
        None
    }
}

/// The diagnostic of a folder entry that is not a regular file (after
/// following links): what it is, so nothing in the folder is left out
/// without a word.
fn not_regular_note(path: &Path, kind: FileKind) -> String {
    let link = std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink());
    match (kind, link) {
        (FileKind::Directory, true) => {
            "skipped: a link to a folder (the walk does not follow linked folders)".to_owned()
        }
        (kind, true) => format!(
            "skipped: a link to {kind}, not a regular file (only regular files are imported)"
        ),
        (kind, false) => {
            format!("skipped: {kind}, not a regular file (only regular files are imported)")
        }
    }
}

/// Pushes every entry under `dir` but folders onto `walked` (regular
/// files, links and special files alike: [`import_dir`] reads each through
/// [`crate::untrusted`], which refuses all but regular files, and reports
/// what it skips), depth first, each folder's children sorted by name; a
/// subfolder that cannot be read is pushed with its error. Fails only when
/// `dir` itself cannot be read.
fn collect_files(
    dir: &Path,
    depth: usize,
    walked: &mut Vec<(PathBuf, Option<std::io::Error>)>,
) -> std::io::Result<()> {
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    children.sort();
    for child in children {
        let Ok(meta) = std::fs::symlink_metadata(&child) else {
            continue;
        };
        if meta.is_dir() {
            if depth == 0 {
                continue;
            }
            if let Err(err) = collect_files(&child, depth - 1, walked) {
                walked.push((child, Some(err)));
            }
        } else {
            walked.push((child, None));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_lines_without_uuid_are_named_as_such() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("cc.jsonl");
        std::fs::write(
            &path,
            "{\"sessionId\":\"s\",\"type\":\"user\",\"timestamp\":\"2025-01-01T00:00:00Z\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n\
             {\"sessionId\":\"s\",\"type\":\"assistant\",\"timestamp\":\"2025-01-01T00:00:01Z\",\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}}\n",
        )
        .expect("write");
        let err = import_path(&path).expect_err("refused");
        assert!(
            matches!(
                err,
                ImportError::Unusable {
                    looks_like: "a Claude Code transcript",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("have no `uuid`"), "{err}");
        // In a folder it is skipped with the same words.
        let outcome = dir_files(dir.path())
            .expect("walks")
            .remove(0)
            .import()
            .outcome;
        assert!(
            matches!(&outcome, FileOutcome::Skipped(note) if note.contains("have no `uuid`")),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_file_that_cannot_be_json_is_refused_from_its_head() {
        let dir = tempfile::tempdir().expect("a folder");
        // Zeros, and a head of nothing but whitespace, then anything.
        let zeros = dir.path().join("zeros.jsonl");
        std::fs::write(&zeros, vec![0u8; 1 << 20]).expect("write");
        let spaces = dir.path().join("spaces.json");
        let mut bytes = vec![b'\n'; 17 << 20];
        bytes.extend_from_slice(b"{}");
        std::fs::write(&spaces, bytes).expect("write");
        for path in [zeros, spaces] {
            let err = import_path(&path).expect_err("not a transcript");
            assert!(matches!(err, ImportError::UnknownFormat { .. }), "{err}");
        }
    }

    #[test]
    fn invalid_utf8_is_located_and_counted_as_the_lossy_reader_replaces_it() {
        assert_eq!(InvalidUtf8::scan("héllo".as_bytes()), None);
        assert_eq!(InvalidUtf8::scan(b""), None);
        // A lone continuation byte, a truncated 3-byte sequence followed by
        // ASCII, and two bytes that are never valid: four replacements.
        let bytes = b"ok \x80 then \xe2\x82 and \xff\xfe";
        let found = InvalidUtf8::scan(bytes).expect("invalid");
        assert_eq!(
            found,
            InvalidUtf8 {
                first_offset: 3,
                replaced: 4
            }
        );
        let lossy = String::from_utf8_lossy(bytes);
        assert_eq!(lossy.matches('\u{fffd}').count(), 4);
        assert_eq!(
            found.to_string(),
            "not valid UTF-8: first invalid byte at offset 3, 4 invalid sequences replaced by U+FFFD and the rest imported; convert the file to UTF-8 and import it again to keep those bytes"
        );
    }

    #[test]
    fn an_import_of_invalid_utf8_keeps_the_rest_and_says_where() {
        let header = "{\"type\":\"session\",\"id\":\"s\",\"timestamp\":\"2025-01-01T00:00:00Z\",\"cwd\":\"/w\"}\n";
        let message = "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:01Z\",\"message\":{\"role\":\"user\",\"content\":\"caf\u{e9} \u{ff}\"}}\n";
        let mut bytes = header.as_bytes().to_vec();
        let at = bytes.len() + message.find('\u{ff}').expect("marker");
        bytes.extend(message.as_bytes());
        // Replace the two-byte U+00FF by a lone 0xFF byte.
        bytes.splice(at..at + 2, [0xff]);
        let sessions = import_bytes(
            &bytes,
            Path::new("t.jsonl"),
            &ImportOptions::with_fallback_ms(0),
        )
        .expect("imports");
        assert_eq!(sessions.len(), 1);
        let stats = &sessions[0].stats;
        assert_eq!(
            stats.invalid_utf8,
            Some(InvalidUtf8 {
                first_offset: at as u64,
                replaced: 1
            })
        );
        assert_eq!(
            stats.diagnostics[0],
            format!(
                "t.jsonl: not valid UTF-8: first invalid byte at offset {at}, 1 invalid sequence replaced by U+FFFD and the rest imported; convert the file to UTF-8 and import it again to keep those bytes"
            )
        );
        assert_eq!(stats.entries, 1, "the message is kept");
    }
}
