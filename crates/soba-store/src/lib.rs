//! SOBA's bytes on disk: the append-only JSONL session log (wire records,
//! writer, tolerant and backward readers, lock, rewind), flight records,
//! portable capsule files and importers of foreign transcripts.
//!
//! - [`SessionWriter`] creates or opens a log, holds its exclusive lock and
//!   appends crash-safely; [`SessionWriter::rewind`] appends a `leaf` entry.
//! - [`read_log`] reads everything tolerantly into a [`SessionLog`] (good
//!   entries plus [`Diagnostic`]s, the path, the live stretch).
//! - [`resume()`] reads backwards from the end until it has the live
//!   stretch: its cost grows with the live tail, not with the history.
//! - [`FlightAppender`] and [`read_flight_records`] handle
//!   `<id>.flight.jsonl`; [`list_sessions`] and [`find_session`] find logs.
//! - [`untrusted::read_untrusted`] reads any file soba did not write
//!   (imports, capsule and config files, agent docs): regular files only,
//!   never blocking on a FIFO, with a size cap enforced while reading;
//!   [`output::write_output`] writes a file at a path a user or repository
//!   chose without following links out of the workspace.
//!
//! # Wire format
//!
//! A session is one UTF-8 file `<sessions-dir>/<session-id>.jsonl`: one JSON
//! object per line, each line ended by `\n`. Field names are camelCase,
//! times RFC 3339 UTC strings. Optional fields are omitted when absent;
//! fields a reader does not know are ignored.
//!
//! **Line 1, the header:**
//!
//! ```json
//! {"type":"session","schemaVersion":1,"id":"0190f3a2-b4c5-7…","createdAt":"2025-01-01T00:00:00.000Z",
//!  "cwd":"/home/me/project","os":"linux",
//!  "memory":[{"id":"ck_…","title":"…","createdAt":"…","path":".soba/memory/ck_….capsule.md"}],
//!  "importedFrom":{"format":"pi","path":"…","originalId":"…", …}}
//! ```
//!
//! `schemaVersion` is 1; a header without it is not a SOBA log (pi uses the
//! same `type`). `importedFrom` is present on imported sessions only and may
//! carry further importer fields.
//!
//! **Every later line is an entry:** `{"type","id","parentId","timestamp",
//! …body}`. `id` is `e_` (or `ck_` for capsules) plus 32 lowercase hex
//! digits of a uuid v7; `parentId` is the id of the current leaf at the
//! append, `null` at the root. Bodies by `type`:
//!
//! | `type` | body fields |
//! |---|---|
//! | `message` | `role` (`system`, `user`, `assistant`, `tool`; `developer` reads as `system`), `origin`? (`injected`, `demonstration`, `observation`, `summary`, `marker`; absent = typed), `content` (blocks), `model`?, `usage`? `{input,cacheRead,cacheWrite,output,reasoning}`, `requestTokensLocal`?, `tokens`? `{encoding,n,estimated?}` |
//! | `context` | `source` (`capsule_file`, `agents_md`), `path`, `sha256`, `text` |
//! | `capsule` | `trigger`, `quality`, `firstKeptEntryId` (or `null`), `boundaryTruncation`? `{entryId,headChars,tailChars,omittedChars,keptTokens}`, `tokensBefore`, `tokensAfter`, `summarizer`, `previousCapsuleId` (or `null`), `state` `{model, calibration:{<model>:factor}, autoCompact, autoCompactOverride?, approvals?, skills:[{name,sha256,text}], pinned:{agentsMd:{source,path,sha256,text}\|null, system:[text]}}`, `instructions`?, `native`? `{provider,model,endpointFingerprint,item}`, `overflow`? `{statedPrompt,requestTokensLocal}`, `imported`? `{agent,originalId}`, `narrative` `{goal,constraints,done,inProgress,pending,decisions,blockers,nextSteps}`, `earlierNarrative`?, `local` `{originalTask,latestInstructions,filesRead,filesReadMore,filesModified,verification:[{command,passed,exitCode?}],unresolvedErrors,checkpoints:[{kind,note}],activeSkills}`, `markdown` |
//! | `hygiene` | `prunedThroughEntryId`, `reclaimedTokens` |
//! | `checkpoint` | `kind` (`milestone`, `plan_pivot`), `note` |
//! | `leaf` | `targetId` |
//! | `model_change` | `model` |
//! | `config_change` | `autoCompact`?, `approvals`? (`{"tools","bashWords"}`: every "always" approval from here on) |
//! | `skill` | `name`, `action` (`activate`, `deactivate`), `sha256`, `text` |
//!
//! Content blocks carry their own `type`: `{"type":"text","text"}`,
//! `{"type":"thinking","thinking","signature"?}`,
//! `{"type":"tool_use","id","name","input":{…},"rawInput"?}` (`rawInput`
//! keeps argument text that was not a JSON object),
//! `{"type":"tool_result","toolUseId","content":[{"type":"text","text"} |
//! {"type":"image",…}],"isError"}` and
//! `{"type":"image","mediaType","data"|"url"}`. A message's `tokens` is its
//! count at append in the encoding of the model active then (`o200k_base`
//! or `cl100k_base`), 4 tokens of message overhead included; `estimated` is
//! present and true when a block was counted by size.
//!
//! **Unknown entry types** are kept: they need a valid `id` and `parentId`,
//! keep their raw line
//! ([`LoggedEntry::raw`]) and read as [`soba_core::EntryBody::Unknown`].
//!
//! **The current leaf**, in file order: a `leaf` entry sets it to its
//! `targetId`, any other entry to its own id. A `leaf` entry is never on a
//! path.
//!
//! **Damage:** a last line without `\n` is torn (an append cut short, never
//! acknowledged): reported on every read and ignored; the next append writes
//! `\n` first. Any other line that is not UTF-8, not JSON, or whose `id` or
//! `parentId` cannot be read is skipped with a diagnostic. Every other line
//! keeps its place in the tree ([`wire::decode_entry`]): unknown enum values
//! of a capsule's `trigger`/`quality`, a message's `origin` and content
//! blocks of unknown type are read forward-compatibly, out-of-range figures
//! are clamped, and a body that does not fit otherwise becomes an
//! [`soba_core::EntryBody::Damaged`] placeholder (ignored like an unknown
//! type, never a capsule boundary), each with a diagnostic. Blank lines are ignored. Nothing is
//! ever rewritten. A torn line that lacked only its newline reads, once the
//! next append has ended it, as the complete entry it is: on a side branch,
//! since the writer that ended it took the leaf before it as parent. A line
//! repeating an id already seen shadows the earlier one, with a diagnostic
//! (resume, reading backwards, meets it first).
//!
//! **Flight records** (`<session-id>.flight.jsonl`) are one line each:
//! `{"operationId","timestamp","level":"hygiene"|"compaction"|"capsule_create",
//! "trigger"|null,"limits":{"hardLimit","softLimit","autoLimit","hygieneLimit"},
//! "tokensBefore","tokensAfter","reclaimed","outcome","reason"?,"durationMs",
//! "checkpointId"|null,"quality"|null,"summarizer"?:{"model","usage"?},
//! "expectedCacheWrite"?}` — never summary text.
#![warn(missing_docs)]

pub mod beneath;
pub mod check;
mod diagnostic;
pub mod error;
#[cfg(feature = "testing")]
pub mod fixtures;
pub mod flight;
pub mod import;
mod line;
pub mod log;
pub mod output;
pub mod private;
pub mod reader;
pub mod resume;
mod session;
pub mod untrusted;
pub mod wire;

pub use error::StoreError;
pub use flight::{
    FlightAppender, FlightLevel, FlightLimits, FlightOutcome, FlightRecord, FlightSummarizer,
    flight_path, read_flight_records,
};
pub use log::{
    Durability, ImportedFrom, MemoryItem, Minter, SequentialMinter, SessionHeader, SessionId,
    SessionWriter, SystemMinter, WriterOptions, write_new_session,
};
pub use reader::{
    Diagnostic, DiagnosticKind, Location, LoggedEntry, SessionLog, SessionSummary, find_session,
    list_sessions, read_header, read_log, read_log_outline, session_path,
};
pub use resume::{ResumeOptions, Resumed, resume, resume_with};
