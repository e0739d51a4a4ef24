//! Wire records of the session log: the serde shapes of the header and of
//! every entry type, and their conversions to and from the domain types of
//! `soba-core` (which derive no `Serialize`). The format is specified in the
//! crate documentation under "Wire format".

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use soba_core::capsule::{
    Answer, BoundaryTruncation, ImportedCapsule, LocalSections, Narrative, NativeContinuation,
    OverflowRecord, PlanItem, PlanStatus, RehydratedFile, Rehydration, SummaryScope, Verification,
};
use soba_core::entry::{ApprovalGrants, SkillAction, SkillEntry, StoredTokens};
use soba_core::{
    Block, Capsule, CapsuleState, CheckpointKind, ContextEntry, ContextSource, Encoding, Entry,
    EntryBody, EntryId, Image, ImageSource, Message, MessageEntry, MessageOrigin, Quality,
    ResultPart, Role, TokenCount, ToolInput, ToolResult, ToolUse, Trigger, Usage,
};

use crate::error::StoreError;
use crate::session::{ImportedFrom, MemoryItem, SessionHeader, SessionId};

mod convert;
mod decode;

pub use convert::{parse_skill_action, skill_action_name};
pub use decode::{DecodedEntry, FieldIssue, decode_entry};

/// The `schemaVersion` this version writes and the highest it reads.
pub const SCHEMA_VERSION: u64 = 1;

/// The `type` tag of the header line.
pub const HEADER_TYPE: &str = "session";

/// Why one line could not be turned into a header or an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The line is not JSON at all (syntax error or cut short).
    #[error("invalid JSON: {0}")]
    Syntax(String),
    /// The line is JSON but not of the shape its `type` requires.
    #[error("wrong shape: {0}")]
    Shape(String),
}

impl DecodeError {
    /// Classifies a serde error on `line`, naming the JSON kind when the
    /// line is valid JSON but not an object.
    pub(crate) fn from_json_line(err: &serde_json::Error, line: &str) -> Self {
        let found = match line.trim_start().chars().next() {
            Some('[') => "an array",
            Some('"') => "a string",
            Some('t' | 'f') => "a boolean",
            Some('n') => "null",
            Some('-' | '0'..='9') => "a number",
            _ => return DecodeError::from_json(err),
        };
        match err.classify() {
            serde_json::error::Category::Data => {
                DecodeError::Shape(format!("expected a JSON object, found {found}"))
            }
            _ => DecodeError::from_json(err),
        }
    }

    pub(crate) fn from_json(err: &serde_json::Error) -> Self {
        match err.classify() {
            serde_json::error::Category::Data => DecodeError::Shape(err.to_string()),
            _ => DecodeError::Syntax(err.to_string()),
        }
    }

    fn shape(message: impl Into<String>) -> Self {
        DecodeError::Shape(message.into())
    }
}

// ---------------------------------------------------------------------------
// Header

/// Line 1 of a session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderRecord {
    /// Always `session`.
    #[serde(rename = "type")]
    pub type_tag: String,
    /// The format version; absent in pi logs, which share the `type` tag.
    pub schema_version: Option<u64>,
    /// The session id.
    pub id: String,
    /// RFC 3339 UTC creation time.
    pub created_at: String,
    /// The workspace root.
    pub cwd: String,
    /// The operating system (`linux`, `macos`, …).
    pub os: String,
    /// The Project Memory index at creation.
    #[serde(default)]
    pub memory: Vec<MemoryRecord>,
    /// Where an imported session came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<ImportedFromRecord>,
}

/// One Project Memory capsule listed in the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryRecord {
    /// The capsule's checkpoint id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its creation time.
    pub created_at: String,
    /// Its path, workspace-relative.
    pub path: String,
}

/// The origin of an imported session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportedFromRecord {
    /// The source format (`pi`, `claude-code`, `codex`, …).
    pub format: String,
    /// The source file.
    pub path: String,
    /// The source's own session id, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_id: Option<String>,
    /// Anything else the importer recorded.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl HeaderRecord {
    /// Builds the record of a header.
    pub fn from_header(header: &SessionHeader) -> Self {
        HeaderRecord {
            type_tag: HEADER_TYPE.to_owned(),
            schema_version: Some(SCHEMA_VERSION),
            id: header.id.as_str().to_owned(),
            created_at: header.created_at.clone(),
            cwd: header.cwd.clone(),
            os: header.os.clone(),
            memory: header
                .memory
                .iter()
                .map(|item| MemoryRecord {
                    id: item.id.clone(),
                    title: item.title.clone(),
                    created_at: item.created_at.clone(),
                    path: item.path.clone(),
                })
                .collect(),
            imported_from: header
                .imported_from
                .as_ref()
                .map(|from| ImportedFromRecord {
                    format: from.format.clone(),
                    path: from.path.clone(),
                    original_id: from.original_id.clone(),
                    extra: from.extra.clone(),
                }),
        }
    }

    /// Checks the record and converts it to a header.
    pub fn into_header(self) -> Result<SessionHeader, DecodeError> {
        check_version(Some(&self.type_tag), self.schema_version)?;
        let id = SessionId::parse(&self.id).map_err(|err| DecodeError::shape(err.to_string()))?;
        Ok(SessionHeader {
            id,
            created_at: self.created_at,
            cwd: self.cwd,
            os: self.os,
            memory: self
                .memory
                .into_iter()
                .map(|m| MemoryItem {
                    id: m.id,
                    title: m.title,
                    created_at: m.created_at,
                    path: m.path,
                })
                .collect(),
            imported_from: self.imported_from.map(|from| ImportedFrom {
                format: from.format,
                path: from.path,
                original_id: from.original_id,
                extra: from.extra,
            }),
        })
    }
}

/// Encodes a header as one JSON line (without the newline).
pub fn encode_header(header: &SessionHeader) -> Result<String, StoreError> {
    serde_json::to_string(&HeaderRecord::from_header(header)).map_err(|err| StoreError::Encode {
        id: header.id.as_str().to_owned(),
        reason: err.to_string(),
    })
}

/// Checks a header's `type` and `schemaVersion`.
fn check_version(type_tag: Option<&str>, schema_version: Option<u64>) -> Result<(), DecodeError> {
    match type_tag {
        Some(HEADER_TYPE) => {}
        Some(other) => {
            return Err(DecodeError::shape(format!(
                "line 1 has type {other:?}, not \"session\""
            )));
        }
        None => return Err(DecodeError::shape("line 1 has no `type`")),
    }
    let Some(version) = schema_version else {
        return Err(DecodeError::shape(
            "the header has no schemaVersion (a pi log? import it with `soba import`)",
        ));
    };
    if version == 0 || version > SCHEMA_VERSION {
        return Err(DecodeError::shape(format!(
            "schemaVersion {version} is not supported (this version reads {SCHEMA_VERSION}); upgrade soba"
        )));
    }
    Ok(())
}

/// The tag and version of a header line, checked before its other fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VersionPeek {
    #[serde(rename = "type")]
    type_name: Option<String>,
    schema_version: Option<u64>,
}

/// Decodes line 1 of a session log.
pub fn decode_header(line: &str) -> Result<SessionHeader, DecodeError> {
    // The version first, so that a pi log or a newer format is named as
    // such rather than reported as a missing field.
    let peek: VersionPeek =
        serde_json::from_str(line).map_err(|err| DecodeError::from_json_line(&err, line))?;
    check_version(peek.type_name.as_deref(), peek.schema_version)?;
    let record: HeaderRecord =
        serde_json::from_str(line).map_err(|err| DecodeError::from_json_line(&err, line))?;
    record.into_header()
}

// ---------------------------------------------------------------------------
// Entries

/// The fields every entry line starts with; the body is read separately.
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    type_name: String,
    id: Option<String>,
    #[serde(rename = "parentId", default)]
    parent_id: Option<String>,
    timestamp: Option<String>,
}

/// How a `message` line as SOBA writes it starts.
const MESSAGE_LINE_START: &str = r#"{"type":"message","#;

/// A `message` line: the [`Envelope`] and the [`MessageRecord`] fields in
/// one struct, so the line is parsed once (a flattened body would be
/// buffered and parsed twice).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageLine {
    #[serde(rename = "type")]
    type_name: String,
    id: Option<String>,
    #[serde(default)]
    parent_id: Option<String>,
    timestamp: Option<String>,
    role: String,
    #[serde(default)]
    origin: Option<String>,
    content: Vec<BlockRecord>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<UsageRecord>,
    #[serde(default)]
    request_tokens_local: Option<u64>,
    #[serde(default)]
    tokens: Option<TokensRecord>,
}

impl MessageLine {
    fn split(self) -> (Envelope, MessageRecord) {
        let envelope = Envelope {
            type_name: self.type_name,
            id: self.id,
            parent_id: self.parent_id,
            timestamp: self.timestamp,
        };
        let record = MessageRecord {
            role: self.role,
            origin: self.origin,
            content: self.content,
            model: self.model,
            usage: self.usage,
            request_tokens_local: self.request_tokens_local,
            tokens: self.tokens,
        };
        (envelope, record)
    }
}

/// Only the `type` of a line, to tell a header from an entry.
#[derive(Debug, Deserialize)]
struct TypePeek {
    #[serde(rename = "type")]
    type_name: Option<String>,
}

/// Returns the `type` tag of a JSON line, `None` when it has none.
pub fn peek_type(line: &str) -> Result<Option<String>, DecodeError> {
    let peek: TypePeek =
        serde_json::from_str(line).map_err(|err| DecodeError::from_json_line(&err, line))?;
    Ok(peek.type_name)
}

/// The body of an entry as written on the wire, one variant per `type`.
#[derive(Debug, Clone, PartialEq)]
pub enum BodyRecord {
    /// `message`.
    Message(MessageRecord),
    /// `context`.
    Context(ContextRecord),
    /// `capsule`.
    Capsule(Box<CapsuleRecord>),
    /// `hygiene`.
    Hygiene(HygieneRecord),
    /// `checkpoint`.
    Checkpoint(CheckpointRecord),
    /// `leaf`.
    Leaf(LeafRecord),
    /// `model_change`.
    ModelChange(ModelChangeRecord),
    /// `config_change`.
    ConfigChange(ConfigChangeRecord),
    /// `skill`.
    Skill(SkillRecord),
    /// A type this version does not know: only the envelope is read.
    Unknown {
        /// The `type` tag.
        type_name: String,
    },
}

/// A `message` entry's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRecord {
    /// `system`, `user`, `assistant` or `tool` (`developer` reads as `system`).
    pub role: String,
    /// Where a user message came from; absent for typed ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The content blocks.
    pub content: Vec<BlockRecord>,
    /// The model that produced an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Normalised usage of the request that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageRecord>,
    /// The uncalibrated local count of that request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_tokens_local: Option<u64>,
    /// The message's own count, stored at append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokensRecord>,
}

/// A content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockRecord {
    /// `{"type":"text","text"}`.
    Text {
        /// The text.
        text: String,
    },
    /// `{"type":"thinking","thinking","signature"?}`.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// `{"type":"tool_use","id","name","input","rawInput"?}`.
    ToolUse {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The arguments object.
        input: Value,
        /// The raw argument text when it did not parse as an object.
        #[serde(rename = "rawInput", default, skip_serializing_if = "Option::is_none")]
        raw_input: Option<String>,
    },
    /// `{"type":"tool_result","toolUseId","content":[…],"isError"}`.
    ToolResult {
        /// The call answered.
        #[serde(rename = "toolUseId")]
        tool_use_id: String,
        /// Text and image parts.
        content: Vec<ResultPartRecord>,
        /// Whether the tool failed.
        #[serde(rename = "isError", default)]
        is_error: bool,
    },
    /// `{"type":"image","mediaType","data"|"url"}`.
    Image(ImageRecord),
}

/// One part of a tool result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResultPartRecord {
    /// Text output.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image(ImageRecord),
}

/// An image: exactly one of `data` (base64) and `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    /// MIME type.
    pub media_type: String,
    /// Base64 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Normalised usage (SPEC §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// Uncached prompt tokens.
    #[serde(default)]
    pub input: u64,
    /// Cached prompt tokens read.
    #[serde(default)]
    pub cache_read: u64,
    /// Prompt tokens written to the cache.
    #[serde(default)]
    pub cache_write: u64,
    /// Generated tokens, reasoning included.
    #[serde(default)]
    pub output: u64,
    /// The reasoning part of `output`.
    #[serde(default)]
    pub reasoning: u64,
}

/// A stored token count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensRecord {
    /// `o200k_base` or `cl100k_base`.
    pub encoding: String,
    /// The count, message overhead included.
    pub n: u64,
    /// Present and true when a block was counted by size.
    #[serde(default, skip_serializing_if = "is_false")]
    pub estimated: bool,
}

/// A `context` entry's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextRecord {
    /// `capsule_file` or `agents_md`.
    pub source: String,
    /// The file read.
    pub path: String,
    /// Lowercase hex sha256 of `text`.
    pub sha256: String,
    /// The text.
    pub text: String,
}

/// A `capsule` entry's body (SPEC §9.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleRecord {
    /// What started it.
    pub trigger: String,
    /// `full` or `degraded`.
    pub quality: String,
    /// The first entry of the retained tail, `null` when nothing is kept.
    pub first_kept_entry_id: Option<String>,
    /// The cut straddler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary_truncation: Option<BoundaryTruncationRecord>,
    /// Effective tokens before.
    pub tokens_before: u64,
    /// Effective tokens after.
    pub tokens_after: u64,
    /// The summarizer model or `deterministic`.
    pub summarizer: String,
    /// The capsule rolled up, `null` for the first.
    #[serde(default)]
    pub previous_capsule_id: Option<String>,
    /// The state in force at the append.
    pub state: CapsuleStateRecord,
    /// `/compact` instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// A native continuation item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeRecord>,
    /// Set on `context_overflow` capsules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<OverflowRecordWire>,
    /// Set on imported capsules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<ImportedCapsuleRecord>,
    /// Set when the summarizer read only the newest part of the span;
    /// decoded on its own, so a damaged scope leaves the capsule usable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_scope: Option<Value>,
    /// The eight narrative sections.
    pub narrative: NarrativeRecord,
    /// The previous capsule's narrative, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_narrative: Option<String>,
    /// The locally extracted sections.
    pub local: LocalSectionsRecord,
    /// The rendered markdown.
    pub markdown: String,
    /// The files brought back after the capsule in the model input
    /// ([`RehydratedRecord`]), absent when none; decoded on its own, so a
    /// damaged one leaves the capsule usable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rehydrated: Option<Value>,
}

/// `boundaryTruncation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundaryTruncationRecord {
    /// The truncated message.
    pub entry_id: String,
    /// Characters kept from the start.
    pub head_chars: u64,
    /// Characters kept from the end.
    pub tail_chars: u64,
    /// Characters elided.
    pub omitted_chars: u64,
    /// Tokens of the kept text.
    pub kept_tokens: u64,
}

/// A capsule's `state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleStateRecord {
    /// The active model.
    pub model: String,
    /// `{model: factor}`.
    #[serde(default)]
    pub calibration: Map<String, Value>,
    /// Whether soft triggers were on.
    pub auto_compact: bool,
    /// The `/auto-compact` setting on the path, when one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compact_override: Option<bool>,
    /// The "always" approvals on the path, when any were made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalGrantsRecord>,
    /// Active skills.
    #[serde(default)]
    pub skills: Vec<StateSkillRecord>,
    /// Pinned context.
    #[serde(default)]
    pub pinned: PinnedRecord,
}

/// An active skill in a capsule's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSkillRecord {
    /// Its name.
    pub name: String,
    /// Lowercase hex sha256 of `text`.
    pub sha256: String,
    /// The snapshotted text.
    pub text: String,
}

/// A capsule state's `pinned`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinnedRecord {
    /// The latest `agents_md` context on the path.
    #[serde(default)]
    pub agents_md: Option<ContextRecord>,
    /// The `system` messages, as text.
    #[serde(default)]
    pub system: Vec<String>,
}

/// `native`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeRecord {
    /// The provider.
    pub provider: String,
    /// The model.
    pub model: String,
    /// The endpoint fingerprint.
    pub endpoint_fingerprint: String,
    /// The opaque item, as JSON text.
    pub item: String,
}

/// `overflow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverflowRecordWire {
    /// The prompt size the provider stated.
    #[serde(default)]
    pub stated_prompt: Option<u64>,
    /// The local count of the overflowing request.
    pub request_tokens_local: u64,
}

/// `imported`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportedCapsuleRecord {
    /// The agent.
    pub agent: String,
    /// The source's id for the event.
    pub original_id: String,
}

/// `rehydrated`: the files a capsule brings back after it, with their
/// content as it was when the capsule was made.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RehydratedRecord {
    /// Files with their content, most recently modified first.
    #[serde(default)]
    pub files: Vec<RehydratedFileRecord>,
    /// Files listed by path only.
    #[serde(default)]
    pub paths_only: Vec<String>,
}

/// One file of `rehydrated.files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RehydratedFileRecord {
    /// The path, workspace-relative.
    pub path: String,
    /// The lines shown.
    pub text: String,
    /// Lines of the whole content.
    pub total_lines: u64,
    /// Lines shown (fewer than `totalLines` when cut).
    pub shown_lines: u64,
}

/// `summaryScope`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryScopeRecord {
    /// The oldest span entry the summarizer read.
    #[serde(default)]
    pub from_entry_id: Option<String>,
    /// Whether only the end of that entry was read.
    #[serde(default)]
    pub partial: bool,
    /// Summarizer calls made.
    pub chunks: u64,
    /// Tokens of span text the summarizer read.
    pub summarized_tokens: u64,
    /// Tokens of the older span entries it did not read.
    pub facts_only_tokens: u64,
}

/// `narrative`: the eight sections.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NarrativeRecord {
    /// Goal.
    pub goal: String,
    /// Constraints.
    pub constraints: String,
    /// Done.
    pub done: String,
    /// In progress.
    pub in_progress: String,
    /// Pending.
    pub pending: String,
    /// Decisions.
    pub decisions: String,
    /// Blockers.
    pub blockers: String,
    /// Next steps.
    pub next_steps: String,
}

/// `local`: the locally extracted sections.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalSectionsRecord {
    /// The original task.
    pub original_task: String,
    /// Latest user instructions, newest first.
    pub latest_instructions: Vec<String>,
    /// Files read, newest first.
    pub files_read: Vec<String>,
    /// Files read beyond those listed.
    pub files_read_more: u64,
    /// Files modified.
    pub files_modified: Vec<String>,
    /// Verification commands.
    pub verification: Vec<VerificationRecord>,
    /// Unresolved errors.
    pub unresolved_errors: Vec<String>,
    /// Checkpoint notes.
    pub checkpoints: Vec<CheckpointRecord>,
    /// Active skill names.
    pub active_skills: Vec<String>,
    /// The goal after a redirect (absent while the original task is it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub goal: String,
    /// Constraints, verbatim, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    /// Constraints the budget left out.
    #[serde(skip_serializing_if = "is_zero")]
    pub constraints_more: u64,
    /// The newest plan's steps.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<PlanStepRecord>,
    /// The plan's explanation.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub plan_explanation: String,
    /// Closing replies to requests that changed no file, newest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<AnswerRecord>,
    /// Checks that failed before the first edit: key, `\n`, failing lines.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing_before_edits: Vec<String>,
    /// Files modified whose every edit so far failed or was denied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files_edit_failed: Vec<String>,
}

/// One of a capsule's answers: `{request, text}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerRecord {
    /// The request's first line, cut.
    pub request: String,
    /// The reply, bounded.
    pub text: String,
}

/// One plan step: `{step, status}` with status `pending`, `in_progress` or
/// `completed` (another word reads as pending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStepRecord {
    /// What the step is.
    pub step: String,
    /// Its state.
    pub status: String,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// One verification command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationRecord {
    /// The command.
    pub command: String,
    /// Whether it last passed.
    pub passed: bool,
    /// Its exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

/// A `hygiene` entry's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HygieneRecord {
    /// Tool results up to this entry on the path are stubbed.
    pub pruned_through_entry_id: String,
    /// Tokens reclaimed.
    pub reclaimed_tokens: u64,
    /// The calls whose results were stubbed (absent in older logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stubbed_calls: Option<Vec<String>>,
}

/// A `checkpoint` entry's body (also a capsule's checkpoint list item).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// `milestone` or `plan_pivot`.
    pub kind: String,
    /// The note.
    pub note: String,
}

/// A `leaf` entry's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeafRecord {
    /// The new current leaf.
    pub target_id: String,
}

/// A `model_change` entry's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelChangeRecord {
    /// The new model.
    pub model: String,
}

/// A `config_change` entry's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigChangeRecord {
    /// The new `compaction.auto`, when this change sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compact: Option<bool>,
    /// Every "always" approval from here on, when this change sets them.
    /// Added in a later version: readers that do not know it ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalGrantsRecord>,
}

/// The session's "always" approvals: `{"tools": [...], "bashWords": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalGrantsRecord {
    /// Tools approved for every call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// First words of approved `bash` commands.
    #[serde(default)]
    pub bash_words: Vec<String>,
}

impl ApprovalGrantsRecord {
    fn from_grants(grants: &ApprovalGrants) -> Self {
        ApprovalGrantsRecord {
            tools: grants.tools.iter().cloned().collect(),
            bash_words: grants.bash_words.iter().cloned().collect(),
        }
    }

    fn into_grants(self) -> ApprovalGrants {
        ApprovalGrants {
            tools: self.tools.into_iter().collect(),
            bash_words: self.bash_words.into_iter().collect(),
        }
    }
}

/// A `skill` entry's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillRecord {
    /// The skill's name.
    pub name: String,
    /// `activate` or `deactivate`.
    pub action: String,
    /// Lowercase hex sha256 of `text`.
    pub sha256: String,
    /// The snapshotted text.
    pub text: String,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// The envelope written before the body, flattened into one JSON object.
#[derive(Serialize)]
struct EntryOut<'a, B: Serialize> {
    #[serde(rename = "type")]
    type_name: &'a str,
    id: &'a str,
    #[serde(rename = "parentId")]
    parent_id: Option<&'a str>,
    timestamp: &'a str,
    #[serde(flatten)]
    body: &'a B,
}

/// An entry with no body fields (unknown types).
#[derive(Serialize)]
struct NoBody {}

/// Encodes an entry as one JSON line (without the newline).
///
/// Fails only on values JSON cannot hold (a non-finite calibration factor).
pub fn encode_entry(entry: &Entry) -> Result<String, StoreError> {
    let body = BodyRecord::from_body(&entry.body).map_err(|reason| StoreError::Encode {
        id: entry.id.as_str().to_owned(),
        reason,
    })?;
    let type_name = entry.body.type_name();
    let id = entry.id.as_str();
    let parent_id = entry.parent_id.as_ref().map(EntryId::as_str);
    let timestamp = entry.timestamp.as_str();
    fn out<B: Serialize>(
        type_name: &str,
        id: &str,
        parent_id: Option<&str>,
        timestamp: &str,
        body: &B,
    ) -> Result<String, serde_json::Error> {
        serde_json::to_string(&EntryOut {
            type_name,
            id,
            parent_id,
            timestamp,
            body,
        })
    }
    let encoded = match &body {
        BodyRecord::Message(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::Context(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::Capsule(record) => out(type_name, id, parent_id, timestamp, record.as_ref()),
        BodyRecord::Hygiene(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::Checkpoint(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::Leaf(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::ModelChange(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::ConfigChange(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::Skill(record) => out(type_name, id, parent_id, timestamp, record),
        BodyRecord::Unknown { .. } => out(type_name, id, parent_id, timestamp, &NoBody {}),
    };
    encoded.map_err(|err| StoreError::Encode {
        id: id.to_owned(),
        reason: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::decode::clamp_number_literals;
    use super::*;
    use soba_core::IdKind;

    fn id(kind: IdKind, n: u128) -> EntryId {
        EntryId::from_uuid(kind, n)
    }

    fn check(entry: &Entry, expected_line: &str) {
        let line = encode_entry(entry).expect("encodes");
        assert_eq!(line, expected_line);
        let decoded = decode_entry(&line).expect("decodes");
        assert_eq!(&decoded.entry, entry);
        assert_eq!(decoded.issues, vec![]);
    }

    #[test]
    fn message_lines_are_camel_case_with_typed_blocks() {
        let mut message = Message::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    text: "hm".into(),
                    signature: Some("sig".into()),
                },
                Block::Text("ok".into()),
                Block::ToolUse(ToolUse {
                    id: "t1".into(),
                    name: "read".into(),
                    input: ToolInput::from_json_text("{\"path\":\"a\""),
                }),
            ],
        );
        message.model = Some("openai/gpt-5".into());
        message.usage = Some(Usage {
            input: 1,
            cache_read: 2,
            cache_write: 3,
            output: 4,
            reasoning: 1,
        });
        message.request_tokens_local = Some(9);
        let entry = Entry {
            id: id(IdKind::Entry, 1),
            parent_id: None,
            timestamp: "2025-01-01T00:00:00Z".into(),
            body: EntryBody::Message(MessageEntry {
                message,
                tokens: Some(StoredTokens {
                    encoding: Encoding::O200kBase,
                    n: TokenCount::new(12),
                    estimated: false,
                }),
            }),
        };
        check(
            &entry,
            concat!(
                r#"{"type":"message","id":"e_00000000000000000000000000000001","parentId":null,"timestamp":"2025-01-01T00:00:00Z","#,
                r#""role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"text","text":"ok"},"#,
                r#"{"type":"tool_use","id":"t1","name":"read","input":{},"rawInput":"{\"path\":\"a\""}],"model":"openai/gpt-5","#,
                r#""usage":{"input":1,"cacheRead":2,"cacheWrite":3,"output":4,"reasoning":1},"requestTokensLocal":9,"#,
                r#""tokens":{"encoding":"o200k_base","n":12}}"#
            ),
        );
    }

    #[test]
    fn tool_results_images_and_origin() {
        let mut message = Message::new(
            Role::User,
            vec![
                Block::ToolResult(ToolResult {
                    tool_use_id: "t1".into(),
                    content: vec![
                        ResultPart::Text("out".into()),
                        ResultPart::Image(Image {
                            media_type: "image/png".into(),
                            source: ImageSource::Data("AA==".into()),
                        }),
                    ],
                    is_error: true,
                }),
                Block::Image(Image {
                    media_type: "image/jpeg".into(),
                    source: ImageSource::Url("https://x/y.jpg".into()),
                }),
            ],
        );
        message.origin = MessageOrigin::Observation;
        let entry = Entry {
            id: id(IdKind::Entry, 2),
            parent_id: Some(id(IdKind::Entry, 1)),
            timestamp: "t".into(),
            body: EntryBody::Message(MessageEntry {
                message,
                tokens: Some(StoredTokens {
                    encoding: Encoding::Cl100kBase,
                    n: TokenCount::new(7),
                    estimated: true,
                }),
            }),
        };
        check(
            &entry,
            concat!(
                r#"{"type":"message","id":"e_00000000000000000000000000000002","parentId":"e_00000000000000000000000000000001","timestamp":"t","#,
                r#""role":"user","origin":"observation","content":[{"type":"tool_result","toolUseId":"t1","content":[{"type":"text","text":"out"},"#,
                r#"{"type":"image","mediaType":"image/png","data":"AA=="}],"isError":true},"#,
                r#"{"type":"image","mediaType":"image/jpeg","url":"https://x/y.jpg"}],"tokens":{"encoding":"cl100k_base","n":7,"estimated":true}}"#
            ),
        );
    }

    #[test]
    fn small_bodies_have_their_documented_fields() {
        let e1 = id(IdKind::Entry, 1);
        let cases = [
            (
                EntryBody::Hygiene {
                    pruned_through: e1.clone(),
                    reclaimed_tokens: TokenCount::new(20_000),
                    stubbed_calls: None,
                },
                r#""prunedThroughEntryId":"e_00000000000000000000000000000001","reclaimedTokens":20000}"#,
            ),
            (
                EntryBody::Checkpoint {
                    kind: CheckpointKind::PlanPivot,
                    note: "n".into(),
                },
                r#""kind":"plan_pivot","note":"n"}"#,
            ),
            (
                EntryBody::Leaf { target: e1.clone() },
                r#""targetId":"e_00000000000000000000000000000001"}"#,
            ),
            (
                EntryBody::ModelChange { model: "m".into() },
                r#""model":"m"}"#,
            ),
            (
                EntryBody::ConfigChange {
                    auto_compact: Some(false),
                    approvals: None,
                },
                r#""autoCompact":false}"#,
            ),
            (
                EntryBody::ConfigChange {
                    auto_compact: None,
                    approvals: Some(ApprovalGrants {
                        tools: ["write_file".to_owned()].into_iter().collect(),
                        bash_words: ["cargo".to_owned(), "make".to_owned()]
                            .into_iter()
                            .collect(),
                    }),
                },
                r#""approvals":{"tools":["write_file"],"bashWords":["cargo","make"]}}"#,
            ),
            (
                EntryBody::Skill(SkillEntry {
                    name: "rust".into(),
                    action: SkillAction::Deactivate,
                    sha256: "ab".into(),
                    text: "t".into(),
                }),
                r#""name":"rust","action":"deactivate","sha256":"ab","text":"t"}"#,
            ),
            (
                EntryBody::Context(ContextEntry {
                    source: ContextSource::AgentsMd,
                    path: "AGENTS.md".into(),
                    sha256: "cd".into(),
                    text: "x".into(),
                }),
                r#""source":"agents_md","path":"AGENTS.md","sha256":"cd","text":"x"}"#,
            ),
        ];
        for (body, tail) in cases {
            let type_name = body.type_name().to_owned();
            let entry = Entry {
                id: id(IdKind::Entry, 3),
                parent_id: None,
                timestamp: "t".into(),
                body,
            };
            let expected = format!(
                r#"{{"type":"{type_name}","id":"e_00000000000000000000000000000003","parentId":null,"timestamp":"t",{tail}"#
            );
            check(&entry, &expected);
        }
    }

    #[test]
    fn unknown_types_keep_their_envelope() {
        let line = r#"{"type":"bookmark","id":"e_00000000000000000000000000000004","parentId":null,"timestamp":"t","label":"x"}"#;
        let entry = decode_entry(line).expect("decodes").entry;
        assert_eq!(
            entry.body,
            EntryBody::Unknown {
                type_name: "bookmark".into()
            }
        );
        assert_eq!(
            encode_entry(&entry).expect("encodes"),
            r#"{"type":"bookmark","id":"e_00000000000000000000000000000004","parentId":null,"timestamp":"t"}"#
        );
    }

    #[test]
    fn decode_errors_tell_syntax_from_shape() {
        assert!(matches!(
            decode_entry("{\"type\":"),
            Err(DecodeError::Syntax(_))
        ));
        assert_eq!(
            decode_entry("[1,2]"),
            Err(DecodeError::Shape(
                "expected a JSON object, found an array".into()
            ))
        );
        assert_eq!(
            decode_entry(r#"{"type":"leaf","id":"x","timestamp":"t","targetId":"x"}"#),
            Err(DecodeError::Shape(
                "`id`: entry id \"x\" has no `ck_` or `e_` prefix".into()
            ))
        );
        assert_eq!(
            decode_entry(
                r#"{"type":"message","id":"e_00000000000000000000000000000001","parentId":7}"#
            ),
            Err(DecodeError::Shape(
                "`parentId`: expected a string or null, found a number".into()
            ))
        );
        let header = r#"{"type":"session","schemaVersion":1,"id":"s","createdAt":"t","cwd":"/","os":"linux"}"#;
        assert_eq!(
            decode_entry(header),
            Err(DecodeError::Shape("a session header after line 1".into()))
        );
    }

    const ENVELOPE: &str = r#""id":"e_00000000000000000000000000000001","parentId":"e_00000000000000000000000000000002","timestamp":"t""#;

    /// Decodes `{"type":<type_name>, <envelope>, <body>}`; returns the body
    /// and the issues as `field: problem`.
    fn tolerant(type_name: &str, body: &str) -> (EntryBody, Vec<String>) {
        let line = format!(r#"{{"type":"{type_name}",{ENVELOPE},{body}}}"#);
        let decoded = decode_entry(&line).expect("keeps the entry");
        assert_eq!(decoded.entry.id, id(IdKind::Entry, 1));
        assert_eq!(decoded.entry.parent_id, Some(id(IdKind::Entry, 2)));
        let issues = decoded.issues.iter().map(ToString::to_string).collect();
        (decoded.entry.body, issues)
    }

    fn damaged(type_name: &str, reason: &str) -> EntryBody {
        EntryBody::Damaged {
            type_name: type_name.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_body_that_does_not_fit_keeps_the_envelope_as_a_placeholder() {
        let cases = [
            (
                "message",
                r#""role":"robot","content":[]"#,
                "`role`: unknown value \"robot\" (written by a newer soba?)",
            ),
            (
                "message",
                r#""role":"user","content":"not an array""#,
                "`content`: invalid type: string \"not an array\", expected a sequence",
            ),
            (
                "message",
                r#""role":"user","content":[{"type":"image","mediaType":"image/png"}]"#,
                "`content[0]`: an image needs exactly one of `data` and `url`",
            ),
            ("leaf", r#""other":1"#, "missing field `targetId`"),
            (
                "checkpoint",
                r#""kind":"party","note":"x""#,
                "`kind`: unknown value \"party\" (written by a newer soba?)",
            ),
            ("capsule", r#""trigger":"user""#, "missing field `quality`"),
        ];
        for (type_name, body, reason) in cases {
            let (decoded, issues) = tolerant(type_name, body);
            assert_eq!(decoded, damaged(type_name, reason), "{body}");
            assert_eq!(issues, vec![reason.to_owned()], "{body}");
        }
        // A line without a string `type` keeps its place too.
        let line = format!(r#"{{"type":7,{ENVELOPE}}}"#);
        let decoded = decode_entry(&line).expect("keeps the entry");
        assert_eq!(
            decoded.entry.body,
            damaged("", "`type`: expected a string, found a number")
        );
    }

    fn capsule_body(trigger: &str, quality: &str, tokens_before: &str) -> String {
        format!(
            concat!(
                r#""trigger":"{}","quality":"{}","firstKeptEntryId":null,"tokensBefore":{},"tokensAfter":10,"#,
                r#""summarizer":"deterministic","previousCapsuleId":null,"state":{{"model":"m","autoCompact":true}},"#,
                r#""narrative":{{}},"local":{{}},"markdown":"md""#
            ),
            trigger, quality, tokens_before
        )
    }

    #[test]
    fn unknown_enum_values_of_a_capsule_are_forward_compatible_data() {
        let (body, issues) = tolerant("capsule", &capsule_body("idle_gap", "excellent", "500"));
        let EntryBody::Capsule(capsule) = body else {
            panic!("a capsule: {body:?}")
        };
        assert_eq!(capsule.trigger, Trigger::Unknown);
        assert_eq!(capsule.quality, Quality::Unknown);
        assert_eq!(capsule.tokens_before, TokenCount::new(500));
        assert_eq!(capsule.markdown, "md");
        assert_eq!(
            issues,
            vec![
                "`trigger`: unknown value \"idle_gap\" (written by a newer soba?); read as \"unknown\" (neither soft nor forced)",
                "`quality`: unknown value \"excellent\" (written by a newer soba?); read as \"unknown\"",
            ]
        );
    }

    /// A damaged `summaryScope` costs the scope, never the capsule; a bad
    /// id alone costs only the id (found by an attack on the field).
    #[test]
    fn a_damaged_summary_scope_leaves_the_capsule_usable() {
        for (scope, expected) in [
            (r#""junk""#, None),
            (r#"{"fromEntryId":"e_01"}"#, None),
            (
                r#"{"chunks":"3","summarizedTokens":1,"factsOnlyTokens":2}"#,
                None,
            ),
            (
                r#"{"fromEntryId":"\u001b]0;pwned\u0007","chunks":3,"summarizedTokens":12000,"factsOnlyTokens":50000}"#,
                Some((3, 12_000, 50_000)),
            ),
        ] {
            let body = format!(
                "{},\"summaryScope\":{scope}",
                capsule_body("user", "full", "500")
            );
            let (body, issues) = tolerant("capsule", &body);
            let EntryBody::Capsule(capsule) = body else {
                panic!("a capsule whatever the scope {scope}: {body:?}")
            };
            assert_eq!(capsule.markdown, "md");
            let figures = capsule.scope.as_ref().map(|scope| {
                assert_eq!(scope.from_entry_id, None);
                (
                    scope.chunks,
                    scope.summarized_tokens.get(),
                    scope.facts_only_tokens.get(),
                )
            });
            assert_eq!(figures, expected, "{scope}");
            assert_eq!(issues.len(), 1, "{scope}: {issues:?}");
            assert!(issues[0].contains("left out"), "{issues:?}");
        }
    }

    #[test]
    fn out_of_range_figures_are_clamped_on_a_kept_entry() {
        for (figure, read_as, problem) in [
            (
                "-5000",
                0,
                "-5000 is out of range (expected a whole number from 0 up); read as 0",
            ),
            (
                "12.7",
                12,
                "12.7 is out of range (expected a whole number from 0 up); read as 12",
            ),
            (
                "1e30",
                u64::MAX,
                "1e+30 is out of range (expected a whole number from 0 up); read as 18446744073709551615",
            ),
        ] {
            let (body, issues) = tolerant("capsule", &capsule_body("user", "full", figure));
            let EntryBody::Capsule(capsule) = body else {
                panic!("a capsule: {body:?}")
            };
            assert_eq!(capsule.tokens_before, TokenCount::new(read_as));
            assert_eq!(issues, vec![format!("`tokensBefore`: {problem}")]);
        }
        // Beyond an f64: read as the largest one, then clamped.
        let (body, issues) = tolerant(
            "hygiene",
            r#""prunedThroughEntryId":"e_00000000000000000000000000000002","reclaimedTokens":-1e400"#,
        );
        assert_eq!(
            body,
            EntryBody::Hygiene {
                pruned_through: id(IdKind::Entry, 2),
                reclaimed_tokens: TokenCount::ZERO,
                stubbed_calls: None,
            }
        );
        assert_eq!(
            issues,
            vec![
                "the number -1e400 is beyond the range of JSON numbers; read as -1.7976931348623157e+308",
                "`reclaimedTokens`: -1.7976931348623157e+308 is out of range (expected a whole number from 0 up); read as 0",
            ]
        );
        // A string that merely contains digits is left alone.
        assert_eq!(
            clamp_number_literals(r#"{"a":"1e400","b":1e400}"#),
            (
                r#"{"a":"1e400","b":1.7976931348623157e308}"#.to_owned(),
                vec!["1e400".to_owned()]
            )
        );
    }

    #[test]
    fn unknown_blocks_are_left_out_and_unknown_origins_read_as_injected() {
        let (body, issues) = tolerant(
            "message",
            r#""role":"user","origin":"voice","content":[{"type":"video","url":"v"},{"type":"text","text":"hi"}],"usage":{"input":-3}"#,
        );
        let EntryBody::Message(message) = body else {
            panic!("a message: {body:?}")
        };
        assert_eq!(message.message.content, vec![Block::Text("hi".into())]);
        assert_eq!(message.message.origin, MessageOrigin::Injected);
        assert_eq!(message.message.usage.map(|usage| usage.input), Some(0));
        assert_eq!(
            issues,
            vec![
                "`content[0].type`: unknown type \"video\" (written by a newer soba?); left out",
                "`usage.input`: -3 is out of range (expected a whole number from 0 up); read as 0",
                "`origin`: unknown value \"voice\" (written by a newer soba?); read as \"injected\" (not a real user message)",
            ]
        );
        // A missing timestamp reads as none.
        let line = r#"{"type":"model_change","id":"e_00000000000000000000000000000001","parentId":null,"model":"m"}"#;
        let decoded = decode_entry(line).expect("keeps the entry");
        assert_eq!(decoded.entry.timestamp, "");
        assert_eq!(
            decoded.entry.body,
            EntryBody::ModelChange { model: "m".into() }
        );
        assert_eq!(
            decoded.issues,
            vec![FieldIssue::new("timestamp", "missing; read as no time")]
        );
    }

    #[test]
    fn developer_role_reads_as_system_and_scalar_input_is_wrapped() {
        let line = r#"{"type":"message","id":"e_00000000000000000000000000000001","timestamp":"t","role":"developer","content":[{"type":"tool_use","id":"c","name":"n","input":3}]}"#;
        let entry = decode_entry(line).expect("decodes").entry;
        let EntryBody::Message(message) = entry.body else {
            panic!("a message")
        };
        assert_eq!(message.message.role, Role::System);
        let Block::ToolUse(call) = &message.message.content[0] else {
            panic!("a tool call")
        };
        assert_eq!(call.input.object().get("value"), Some(&Value::from(3)));
        assert_eq!(call.input.raw(), Some("3"));
    }

    #[test]
    fn a_message_line_reads_the_same_whatever_its_field_order() {
        // SOBA writes `type` first and such lines are read in one pass;
        // any other order takes the two-pass path, to the same entry.
        let first = r#"{"type":"message","id":"e_00000000000000000000000000000001","parentId":"e_00000000000000000000000000000002","timestamp":"t","role":"user","content":[{"type":"text","text":"hi"}],"tokens":{"encoding":"o200k_base","n":5}}"#;
        let reordered = r#"{"role":"user","content":[{"type":"text","text":"hi"}],"tokens":{"encoding":"o200k_base","n":5},"timestamp":"t","parentId":"e_00000000000000000000000000000002","id":"e_00000000000000000000000000000001","type":"message"}"#;
        let one = decode_entry(first).expect("decodes");
        let two = decode_entry(reordered).expect("decodes");
        assert_eq!(one.entry, two.entry);
        assert_eq!(one.issues, vec![]);
        assert_eq!(
            one.entry.parent_id,
            Some(id(IdKind::Entry, 2)),
            "the envelope is read with the body"
        );
    }

    #[test]
    fn headers_round_trip_and_need_schema_version() {
        let header = SessionHeader {
            id: SessionId::parse("0190f3a2-b4c5-7000-8000-000000000001").expect("valid"),
            created_at: "2025-01-01T00:00:00Z".into(),
            cwd: "/w".into(),
            os: "linux".into(),
            memory: vec![MemoryItem {
                id: "ck_1".into(),
                title: "T".into(),
                created_at: "c".into(),
                path: "p".into(),
            }],
            imported_from: Some(ImportedFrom {
                format: "pi".into(),
                path: "/x.jsonl".into(),
                original_id: Some("abc".into()),
                extra: Map::from_iter([("version".to_owned(), Value::from(3))]),
            }),
        };
        let line = encode_header(&header).expect("encodes");
        assert_eq!(
            line,
            concat!(
                r#"{"type":"session","schemaVersion":1,"id":"0190f3a2-b4c5-7000-8000-000000000001","createdAt":"2025-01-01T00:00:00Z","#,
                r#""cwd":"/w","os":"linux","memory":[{"id":"ck_1","title":"T","createdAt":"c","path":"p"}],"#,
                r#""importedFrom":{"format":"pi","path":"/x.jsonl","originalId":"abc","version":3}}"#
            )
        );
        assert_eq!(decode_header(&line), Ok(header));
        let pi = r#"{"type":"session","id":"x","timestamp":"t","cwd":"/"}"#;
        assert!(matches!(decode_header(pi), Err(DecodeError::Shape(_))));
        let future = r#"{"type":"session","schemaVersion":2,"id":"x","createdAt":"t","cwd":"/","os":"linux"}"#;
        assert_eq!(
            decode_header(future),
            Err(DecodeError::Shape(
                "schemaVersion 2 is not supported (this version reads 1); upgrade soba".into()
            ))
        );
    }

    #[test]
    fn non_finite_calibration_cannot_be_encoded() {
        let capsule = Capsule {
            trigger: Trigger::User,
            quality: Quality::Full,
            first_kept_entry_id: None,
            boundary_truncation: None,
            tokens_before: TokenCount::ZERO,
            tokens_after: TokenCount::ZERO,
            summarizer: "deterministic".into(),
            previous_capsule_id: None,
            state: CapsuleState {
                calibration: vec![("m".into(), f64::NAN)],
                ..CapsuleState::default()
            },
            instructions: None,
            native: None,
            overflow: None,
            imported: None,
            scope: None,
            narrative: Narrative::default(),
            earlier_narrative: None,
            rehydrated: Default::default(),
            local: LocalSections::default(),
            markdown: String::new(),
        };
        let entry = Entry {
            id: id(IdKind::Capsule, 1),
            parent_id: None,
            timestamp: "t".into(),
            body: EntryBody::Capsule(Box::new(capsule)),
        };
        assert!(matches!(
            encode_entry(&entry),
            Err(StoreError::Encode { .. })
        ));
    }
}
