//! Wire records of the session log: the serde shapes of the header and of
//! every entry type, and their conversions to and from the domain types of
//! `soba-core` (which derive no `Serialize`). The format is specified in the
//! crate documentation under "Wire format".

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use soba_core::capsule::{
    BoundaryTruncation, ImportedCapsule, LocalSections, Narrative, NativeContinuation,
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

/// One field of an entry line that did not fit its type, and what the
/// decoder made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldIssue {
    /// The field, as a path into the line (`tokensBefore`,
    /// `content[0].text`); empty when the line as a whole is meant.
    pub field: String,
    /// What was wrong, and for a repair what was read instead.
    pub problem: String,
}

impl FieldIssue {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldIssue {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl std::fmt::Display for FieldIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "`{}`: {}", self.field, self.problem)
        }
    }
}

/// An entry line decoded tolerantly by [`decode_entry`].
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedEntry {
    /// The entry. Its body is [`EntryBody::Damaged`] when the body does not
    /// fit its type; the entry still keeps its place in the tree.
    pub entry: Entry,
    /// What did not fit. For an [`EntryBody::Damaged`] body, the one reason
    /// it is a placeholder; otherwise the repairs made (an out-of-range
    /// figure clamped, an unknown enum value read as `unknown`, an unknown
    /// content block left out), each on an entry that is otherwise intact.
    pub issues: Vec<FieldIssue>,
}

/// How many fields of one line the decoder repairs before it gives up and
/// keeps the entry as a placeholder.
const MAX_REPAIRS: usize = 32;

/// Decodes one entry line, tolerantly (the one decoder of entry lines: the
/// full reader, resume and the writer's reopening all use it).
///
/// Only a line whose place in the tree cannot be read is an error: not
/// JSON, not an object, a second header, or no valid `id` or `parentId`.
/// Everything else gives an entry:
///
/// - an unknown `type` reads as [`EntryBody::Unknown`];
/// - an unknown value of an enum-valued field is forward-compatible data
///   where the entry stays usable (a capsule's `trigger` and `quality` read
///   as `unknown`, a message's `origin` as `injected`, a content block of
///   unknown `type` is left out), with an issue;
/// - a figure out of range (a negative or fractional token count, a number
///   beyond what JSON numbers hold) is clamped into range, with an issue;
/// - a body that does not fit its type in any other way (a wrong JSON type,
///   a missing field, an unknown `role`) gives an [`EntryBody::Damaged`]
///   placeholder that keeps the envelope, with the reason;
/// - a missing or non-string `timestamp` reads as empty, with an issue.
///
/// Clean lines take a fast path: they are decoded straight from the text.
pub fn decode_entry(line: &str) -> Result<DecodedEntry, DecodeError> {
    if let Some(decoded) = decode_clean(line) {
        return Ok(decoded);
    }
    decode_tolerant(line)
}

/// Decodes a line that fits its type, straight from the text; `None` when
/// anything is off (the tolerant path then decides).
fn decode_clean(line: &str) -> Option<DecodedEntry> {
    // Most lines are messages, and SOBA writes `type` first: those are
    // read in one pass, envelope and body together.
    if line.starts_with(MESSAGE_LINE_START)
        && let Ok(message) = serde_json::from_str::<MessageLine>(line)
        && message.type_name == "message"
    {
        let (envelope, record) = message.split();
        return decode_record(envelope, BodyRecord::Message(record));
    }
    let envelope: Envelope = serde_json::from_str(line).ok()?;
    if envelope.type_name == HEADER_TYPE {
        return None;
    }
    fn body<T: serde::de::DeserializeOwned>(line: &str) -> Option<T> {
        serde_json::from_str(line).ok()
    }
    let record = match envelope.type_name.as_str() {
        "message" => BodyRecord::Message(body(line)?),
        "context" => BodyRecord::Context(body(line)?),
        "capsule" => BodyRecord::Capsule(Box::new(body(line)?)),
        "hygiene" => BodyRecord::Hygiene(body(line)?),
        "checkpoint" => BodyRecord::Checkpoint(body(line)?),
        "leaf" => BodyRecord::Leaf(body(line)?),
        "model_change" => BodyRecord::ModelChange(body(line)?),
        "config_change" => BodyRecord::ConfigChange(body(line)?),
        "skill" => BodyRecord::Skill(body(line)?),
        _ => BodyRecord::Unknown {
            type_name: envelope.type_name.clone(),
        },
    };
    decode_record(envelope, record)
}

/// Builds the entry of a line decoded into its envelope and body record;
/// `None` when anything is off.
fn decode_record(envelope: Envelope, record: BodyRecord) -> Option<DecodedEntry> {
    let id = EntryId::parse(envelope.id.as_deref()?).ok()?;
    let timestamp = envelope.timestamp?;
    let parent_id = match envelope.parent_id.as_deref() {
        Some(parent) => Some(EntryId::parse(parent).ok()?),
        None => None,
    };
    let mut issues = Vec::new();
    let body = record.into_body(&mut issues).ok()?;
    if !issues.is_empty() {
        return None;
    }
    Some(DecodedEntry {
        entry: Entry {
            id,
            parent_id,
            timestamp,
            body,
        },
        issues,
    })
}

/// The JSON kind of a value, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Decodes a line that does not fit its type: through a JSON value, field
/// by field, repairing what can be repaired.
fn decode_tolerant(line: &str) -> Result<DecodedEntry, DecodeError> {
    let mut issues = Vec::new();
    let mut value = match parse_value(line, &mut issues) {
        Ok(value) => value,
        Err(DecodeError::Syntax(message)) if message.starts_with("recursion limit exceeded") => {
            return too_deep(line, &message);
        }
        Err(err) => return Err(err),
    };
    let Value::Object(object) = &mut value else {
        return Err(DecodeError::shape(format!(
            "expected a JSON object, found {}",
            json_kind(&value)
        )));
    };
    let type_name = match object.get("type") {
        Some(Value::String(name)) => Ok(name.clone()),
        Some(other) => Err(FieldIssue::new(
            "type",
            format!("expected a string, found {}", json_kind(other)),
        )),
        None => Err(FieldIssue::new("type", "missing")),
    };
    if type_name.as_deref() == Ok(HEADER_TYPE) {
        return Err(DecodeError::shape("a session header after line 1"));
    }
    let id = match object.get("id") {
        Some(Value::String(text)) => parse_id("id", text).map_err(into_shape)?,
        Some(other) => {
            return Err(DecodeError::shape(format!(
                "`id`: expected a string, found {}",
                json_kind(other)
            )));
        }
        None => return Err(DecodeError::shape("missing field `id`")),
    };
    let parent_id = match object.get("parentId") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(parse_id("parentId", text).map_err(into_shape)?),
        Some(other) => {
            return Err(DecodeError::shape(format!(
                "`parentId`: expected a string or null, found {}",
                json_kind(other)
            )));
        }
    };
    let timestamp = match object.get("timestamp") {
        Some(Value::String(text)) => text.clone(),
        Some(other) => {
            issues.push(FieldIssue::new(
                "timestamp",
                format!(
                    "expected a string, found {}; read as no time",
                    json_kind(other)
                ),
            ));
            String::new()
        }
        None => {
            issues.push(FieldIssue::new("timestamp", "missing; read as no time"));
            String::new()
        }
    };
    let placeholder = |type_name: String, cause: FieldIssue| DecodedEntry {
        entry: Entry {
            id: id.clone(),
            parent_id: parent_id.clone(),
            timestamp: timestamp.clone(),
            body: EntryBody::Damaged {
                type_name,
                reason: cause.to_string(),
            },
        },
        issues: vec![cause],
    };
    let type_name = match type_name {
        Ok(name) => name,
        Err(cause) => return Ok(placeholder(String::new(), cause)),
    };
    let record = match type_name.as_str() {
        "message" => record_from_value(&mut value, &mut issues).map(BodyRecord::Message),
        "context" => record_from_value(&mut value, &mut issues).map(BodyRecord::Context),
        "capsule" => record_from_value(&mut value, &mut issues)
            .map(|record| BodyRecord::Capsule(Box::new(record))),
        "hygiene" => record_from_value(&mut value, &mut issues).map(BodyRecord::Hygiene),
        "checkpoint" => record_from_value(&mut value, &mut issues).map(BodyRecord::Checkpoint),
        "leaf" => record_from_value(&mut value, &mut issues).map(BodyRecord::Leaf),
        "model_change" => record_from_value(&mut value, &mut issues).map(BodyRecord::ModelChange),
        "config_change" => record_from_value(&mut value, &mut issues).map(BodyRecord::ConfigChange),
        "skill" => record_from_value(&mut value, &mut issues).map(BodyRecord::Skill),
        _ => Ok(BodyRecord::Unknown {
            type_name: type_name.clone(),
        }),
    };
    let body = match record.and_then(|record| record.into_body(&mut issues)) {
        Ok(body) => body,
        Err(cause) => return Ok(placeholder(type_name, cause)),
    };
    Ok(DecodedEntry {
        entry: Entry {
            id,
            parent_id,
            timestamp,
            body,
        },
        issues,
    })
}

/// Keeps a line nested too deeply to read as a value as a placeholder,
/// when its envelope can still be read.
fn too_deep(line: &str, message: &str) -> Result<DecodedEntry, DecodeError> {
    let too_deep = || DecodeError::Syntax(message.to_owned());
    let envelope: Envelope = serde_json::from_str(line).map_err(|_| too_deep())?;
    if envelope.type_name == HEADER_TYPE {
        return Err(DecodeError::shape("a session header after line 1"));
    }
    let id = parse_id("id", envelope.id.as_deref().ok_or_else(too_deep)?).map_err(into_shape)?;
    let parent_id = match envelope.parent_id.as_deref() {
        Some(parent) => Some(parse_id("parentId", parent).map_err(into_shape)?),
        None => None,
    };
    let cause = FieldIssue::new(
        "",
        "nested more than 128 levels deep, beyond what this version reads",
    );
    Ok(DecodedEntry {
        entry: Entry {
            id,
            parent_id,
            timestamp: envelope.timestamp.unwrap_or_default(),
            body: EntryBody::Damaged {
                type_name: envelope.type_name,
                reason: cause.to_string(),
            },
        },
        issues: vec![cause],
    })
}

fn into_shape(issue: FieldIssue) -> DecodeError {
    DecodeError::Shape(issue.to_string())
}

/// Parses a line into a JSON value. A number beyond what an `f64` holds
/// (`1e400`), which serde_json refuses, is read as the largest one of its
/// sign, with an issue; the field's own check then clamps it.
fn parse_value(line: &str, issues: &mut Vec<FieldIssue>) -> Result<Value, DecodeError> {
    match serde_json::from_str::<Value>(line) {
        Ok(value) => Ok(value),
        Err(err) if err.is_syntax() && err.to_string().starts_with("number out of range") => {
            let (clamped, replaced) = clamp_number_literals(line);
            let value = serde_json::from_str::<Value>(&clamped)
                .map_err(|err| DecodeError::from_json_line(&err, line))?;
            for literal in replaced {
                issues.push(FieldIssue::new(
                    "",
                    format!(
                        "the number {literal} is beyond the range of JSON numbers; read as {}",
                        if literal.starts_with('-') {
                            "-1.7976931348623157e+308"
                        } else {
                            "1.7976931348623157e+308"
                        }
                    ),
                ));
            }
            Ok(value)
        }
        Err(err) => Err(DecodeError::from_json_line(&err, line)),
    }
}

/// Rewrites number literals outside strings that overflow an `f64` as the
/// largest finite one of their sign; returns the text and the literals
/// replaced.
fn clamp_number_literals(line: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(line.len());
    let mut replaced = Vec::new();
    let mut chars = line.char_indices().peekable();
    let mut in_string = false;
    let mut escaped = false;
    while let Some((start, c)) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push(c);
            continue;
        }
        if c == '-' || c.is_ascii_digit() {
            let mut end = start + c.len_utf8();
            while let Some(&(idx, next)) = chars.peek() {
                if next.is_ascii_digit() || matches!(next, '.' | 'e' | 'E' | '+' | '-') {
                    end = idx + next.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let literal = &line[start..end];
            match literal.parse::<f64>() {
                Ok(number) if number.is_infinite() => {
                    out.push_str(if number < 0.0 {
                        "-1.7976931348623157e308"
                    } else {
                        "1.7976931348623157e308"
                    });
                    replaced.push(literal.to_owned());
                }
                _ => out.push_str(literal),
            }
            continue;
        }
        out.push(c);
    }
    (out, replaced)
}

/// One step of a path into a JSON value.
enum Step {
    Key(String),
    Index(usize),
}

/// Deserializes a record from `value`, repairing the fields that can be
/// repaired (each with an issue) and retrying; the error names the field
/// that does not fit.
fn record_from_value<T: serde::de::DeserializeOwned>(
    value: &mut Value,
    issues: &mut Vec<FieldIssue>,
) -> Result<T, FieldIssue> {
    for _ in 0..MAX_REPAIRS {
        let err = match serde_path_to_error::deserialize::<_, T>(&*value) {
            Ok(record) => return Ok(record),
            Err(err) => err,
        };
        let mut steps = Vec::new();
        let mut exact = true;
        for segment in err.path().iter() {
            match segment {
                serde_path_to_error::Segment::Map { key } => steps.push(Step::Key(key.clone())),
                serde_path_to_error::Segment::Seq { index } => steps.push(Step::Index(*index)),
                _ => exact = false,
            }
        }
        let field = match err.path().to_string() {
            path if path == "." => String::new(),
            path => path,
        };
        let message = err.into_inner().to_string();
        if exact && let Some(problem) = repair(value, &steps, &message) {
            issues.push(FieldIssue::new(field, problem));
            continue;
        }
        return Err(FieldIssue::new(field, message));
    }
    Err(FieldIssue::new(
        "",
        format!("more than {MAX_REPAIRS} fields do not fit"),
    ))
}

/// Returns the value at `steps` inside `root`.
fn value_at<'v>(root: &'v mut Value, steps: &[Step]) -> Option<&'v mut Value> {
    let mut cursor = root;
    for step in steps {
        cursor = match (step, cursor) {
            (Step::Key(key), Value::Object(map)) => map.get_mut(key)?,
            (Step::Index(index), Value::Array(items)) => items.get_mut(*index)?,
            _ => return None,
        };
    }
    Some(cursor)
}

/// Repairs the field at `steps` that failed with `message`, when its class
/// allows: a figure out of range is clamped into range, an array item of
/// an unknown `type` (a content block a newer version writes) is left out.
/// Returns what was done; `None` leaves the failure standing.
fn repair(root: &mut Value, steps: &[Step], message: &str) -> Option<String> {
    let target = value_at(root, steps)?;
    match target {
        Value::Number(number) => {
            let shown = number.to_string();
            let figure = number.as_f64()?;
            let (clamped, range) = if message.ends_with("expected u64") {
                let clamped = if figure <= 0.0 {
                    0
                } else if figure >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    figure.floor() as u64
                };
                (Value::from(clamped), "a whole number from 0 up")
            } else if message.ends_with("expected i64") {
                let clamped = if figure <= i64::MIN as f64 {
                    i64::MIN
                } else if figure >= i64::MAX as f64 {
                    i64::MAX
                } else {
                    figure.trunc() as i64
                };
                (Value::from(clamped), "a whole number")
            } else {
                return None;
            };
            let problem = format!("{shown} is out of range (expected {range}); read as {clamped}");
            *target = clamped;
            Some(problem)
        }
        // An array item whose `type` this version does not know (a
        // content block or result part a newer version writes).
        Value::String(name)
            if message.starts_with(&format!("unknown variant `{name}`"))
                && matches!(steps, [.., Step::Index(_), Step::Key(key)] if key == "type") =>
        {
            let name = name.clone();
            let [parent_steps @ .., Step::Index(index), _] = steps else {
                return None;
            };
            let Value::Array(items) = value_at(root, parent_steps)? else {
                return None;
            };
            items.remove(*index);
            Some(format!(
                "unknown type {name:?} (written by a newer soba?); left out"
            ))
        }
        _ => None,
    }
}

fn parse_id(field: &str, text: &str) -> Result<EntryId, FieldIssue> {
    EntryId::parse(text).map_err(|err| FieldIssue::new(field, err.to_string()))
}

/// Parses an optional id whose loss costs only itself: a bad one is left
/// out with an issue, and the entry kept.
fn optional_id(field: &str, text: Option<&str>, issues: &mut Vec<FieldIssue>) -> Option<EntryId> {
    match parse_id(field, text?) {
        Ok(id) => Some(id),
        Err(problem) => {
            issues.push(FieldIssue {
                problem: format!("{}; left out", problem.problem),
                ..problem
            });
            None
        }
    }
}

fn parse_name<T>(
    field: &str,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, FieldIssue> {
    parse(name).ok_or_else(|| FieldIssue::new(field, unknown_value(name)))
}

/// Says that an enum-valued field holds a name this version does not know.
fn unknown_value(name: &str) -> String {
    format!("unknown value {name:?} (written by a newer soba?)")
}

impl BodyRecord {
    /// Builds the wire body of a domain body; fails on a non-finite
    /// calibration factor, which JSON cannot hold.
    pub fn from_body(body: &EntryBody) -> Result<Self, String> {
        Ok(match body {
            EntryBody::Message(entry) => BodyRecord::Message(MessageRecord::from_entry(entry)),
            EntryBody::Context(context) => {
                BodyRecord::Context(ContextRecord::from_context(context))
            }
            EntryBody::Capsule(capsule) => {
                BodyRecord::Capsule(Box::new(CapsuleRecord::from_capsule(capsule)?))
            }
            EntryBody::Hygiene {
                pruned_through,
                reclaimed_tokens,
                stubbed_calls,
            } => BodyRecord::Hygiene(HygieneRecord {
                pruned_through_entry_id: pruned_through.as_str().to_owned(),
                reclaimed_tokens: reclaimed_tokens.get(),
                stubbed_calls: stubbed_calls.clone(),
            }),
            EntryBody::Checkpoint { kind, note } => BodyRecord::Checkpoint(CheckpointRecord {
                kind: kind.as_str().to_owned(),
                note: note.clone(),
            }),
            EntryBody::Leaf { target } => BodyRecord::Leaf(LeafRecord {
                target_id: target.as_str().to_owned(),
            }),
            EntryBody::ModelChange { model } => BodyRecord::ModelChange(ModelChangeRecord {
                model: model.clone(),
            }),
            EntryBody::ConfigChange {
                auto_compact,
                approvals,
            } => BodyRecord::ConfigChange(ConfigChangeRecord {
                auto_compact: *auto_compact,
                approvals: approvals.as_ref().map(ApprovalGrantsRecord::from_grants),
            }),
            EntryBody::Skill(skill) => BodyRecord::Skill(SkillRecord {
                name: skill.name.clone(),
                action: skill_action_name(skill.action).to_owned(),
                sha256: skill.sha256.clone(),
                text: skill.text.clone(),
            }),
            EntryBody::Unknown { type_name } => BodyRecord::Unknown {
                type_name: type_name.clone(),
            },
            EntryBody::Damaged { type_name, .. } => {
                return Err(format!(
                    "a damaged {type_name:?} entry is a placeholder read from a log, never written"
                ));
            }
        })
    }

    /// Converts the wire body to the domain body, checking names and ids.
    /// Repairs (an unknown enum value read as forward-compatible data) go
    /// to `issues`; the error is why the body cannot be used at all.
    pub fn into_body(self, issues: &mut Vec<FieldIssue>) -> Result<EntryBody, FieldIssue> {
        Ok(match self {
            BodyRecord::Message(record) => EntryBody::Message(record.into_entry(issues)?),
            BodyRecord::Context(record) => EntryBody::Context(record.into_context()?),
            BodyRecord::Capsule(record) => {
                EntryBody::Capsule(Box::new(record.into_capsule(issues)?))
            }
            BodyRecord::Hygiene(record) => EntryBody::Hygiene {
                pruned_through: parse_id("prunedThroughEntryId", &record.pruned_through_entry_id)?,
                reclaimed_tokens: TokenCount::new(record.reclaimed_tokens),
                stubbed_calls: record.stubbed_calls,
            },
            BodyRecord::Checkpoint(record) => EntryBody::Checkpoint {
                kind: parse_name("kind", &record.kind, CheckpointKind::parse)?,
                note: record.note,
            },
            BodyRecord::Leaf(record) => EntryBody::Leaf {
                target: parse_id("targetId", &record.target_id)?,
            },
            BodyRecord::ModelChange(record) => EntryBody::ModelChange {
                model: record.model,
            },
            BodyRecord::ConfigChange(record) => EntryBody::ConfigChange {
                auto_compact: record.auto_compact,
                approvals: record.approvals.map(ApprovalGrantsRecord::into_grants),
            },
            BodyRecord::Skill(record) => EntryBody::Skill(SkillEntry {
                name: record.name,
                action: parse_name("action", &record.action, parse_skill_action)?,
                sha256: record.sha256,
                text: record.text,
            }),
            BodyRecord::Unknown { type_name } => EntryBody::Unknown { type_name },
        })
    }
}

/// Returns the wire name of a skill action.
pub fn skill_action_name(action: SkillAction) -> &'static str {
    match action {
        SkillAction::Activate => "activate",
        SkillAction::Deactivate => "deactivate",
    }
}

/// Parses the wire name of a skill action.
pub fn parse_skill_action(name: &str) -> Option<SkillAction> {
    match name {
        "activate" => Some(SkillAction::Activate),
        "deactivate" => Some(SkillAction::Deactivate),
        _ => None,
    }
}

impl MessageRecord {
    /// Builds the record of a message entry.
    pub fn from_entry(entry: &MessageEntry) -> Self {
        let message = &entry.message;
        MessageRecord {
            role: message.role.as_str().to_owned(),
            origin: (message.origin != MessageOrigin::Typed)
                .then(|| message.origin.as_str().to_owned()),
            content: message
                .content
                .iter()
                .map(BlockRecord::from_block)
                .collect(),
            model: message.model.clone(),
            usage: message.usage.map(|usage| UsageRecord {
                input: usage.input,
                cache_read: usage.cache_read,
                cache_write: usage.cache_write,
                output: usage.output,
                reasoning: usage.reasoning,
            }),
            request_tokens_local: message.request_tokens_local,
            tokens: entry.tokens.map(|tokens| TokensRecord {
                encoding: tokens.encoding.as_str().to_owned(),
                n: tokens.n.get(),
                estimated: tokens.estimated,
            }),
        }
    }

    /// Converts the record to a message entry. A count in a vocabulary this
    /// version does not know is dropped (it would be re-counted anyway); an
    /// unknown `origin` reads as `injected` (not a real user message), with
    /// an issue.
    pub fn into_entry(self, issues: &mut Vec<FieldIssue>) -> Result<MessageEntry, FieldIssue> {
        let role = parse_name("role", &self.role, Role::parse)?;
        let origin = match &self.origin {
            Some(name) => MessageOrigin::parse(name).unwrap_or_else(|| {
                issues.push(FieldIssue::new(
                    "origin",
                    format!(
                        "{}; read as \"injected\" (not a real user message)",
                        unknown_value(name)
                    ),
                ));
                MessageOrigin::Injected
            }),
            None => MessageOrigin::Typed,
        };
        let mut content = self
            .content
            .into_iter()
            .enumerate()
            .map(|(idx, block)| {
                block.into_block().map_err(|problem| FieldIssue {
                    field: format!("content[{idx}]"),
                    ..problem
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The list grew by doubling while it was read (and the blocks took
        // the records' room in place): most messages hold one or two
        // blocks, and a long history held in memory would carry the spare
        // room of every one.
        content.shrink_to_fit();
        let message = Message {
            role,
            content,
            origin,
            model: self.model,
            usage: self.usage.map(|usage| Usage {
                input: usage.input,
                cache_read: usage.cache_read,
                cache_write: usage.cache_write,
                output: usage.output,
                reasoning: usage.reasoning,
            }),
            request_tokens_local: self.request_tokens_local,
        };
        let tokens = self.tokens.and_then(|tokens| {
            Encoding::parse(&tokens.encoding).map(|encoding| StoredTokens {
                encoding,
                n: TokenCount::new(tokens.n),
                estimated: tokens.estimated,
            })
        });
        Ok(MessageEntry { message, tokens })
    }
}

impl BlockRecord {
    /// Builds the record of a block.
    pub fn from_block(block: &Block) -> Self {
        match block {
            Block::Text(text) => BlockRecord::Text { text: text.clone() },
            Block::Thinking { text, signature } => BlockRecord::Thinking {
                thinking: text.clone(),
                signature: signature.clone(),
            },
            Block::ToolUse(call) => BlockRecord::ToolUse {
                id: call.id.clone(),
                name: call.name.clone(),
                input: Value::Object(call.input.object().clone()),
                raw_input: call.input.raw().map(str::to_owned),
            },
            Block::ToolResult(result) => BlockRecord::ToolResult {
                tool_use_id: result.tool_use_id.clone(),
                content: result
                    .content
                    .iter()
                    .map(|part| match part {
                        ResultPart::Text(text) => ResultPartRecord::Text { text: text.clone() },
                        ResultPart::Image(image) => {
                            ResultPartRecord::Image(ImageRecord::from_image(image))
                        }
                    })
                    .collect(),
                is_error: result.is_error,
            },
            Block::Image(image) => BlockRecord::Image(ImageRecord::from_image(image)),
        }
    }

    /// Converts the record to a block. A non-object `input` is wrapped as
    /// `{"value": …}` with its text kept as the raw input.
    pub fn into_block(self) -> Result<Block, FieldIssue> {
        Ok(match self {
            BlockRecord::Text { text } => Block::Text(text),
            BlockRecord::Thinking {
                thinking,
                signature,
            } => Block::Thinking {
                text: thinking,
                signature,
            },
            BlockRecord::ToolUse {
                id,
                name,
                input,
                raw_input,
            } => {
                let input = match input {
                    Value::Object(map) => ToolInput::with_raw(map, raw_input),
                    other => {
                        let wrapped = ToolInput::from_value(other);
                        match raw_input {
                            Some(raw) => ToolInput::with_raw(wrapped.object().clone(), Some(raw)),
                            None => wrapped,
                        }
                    }
                };
                Block::ToolUse(ToolUse { id, name, input })
            }
            BlockRecord::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Block::ToolResult(ToolResult {
                tool_use_id,
                content: content
                    .into_iter()
                    .map(|part| match part {
                        ResultPartRecord::Text { text } => Ok(ResultPart::Text(text)),
                        ResultPartRecord::Image(image) => image.into_image().map(ResultPart::Image),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                is_error,
            }),
            BlockRecord::Image(image) => Block::Image(image.into_image()?),
        })
    }
}

impl ImageRecord {
    /// Builds the record of an image.
    pub fn from_image(image: &Image) -> Self {
        let (data, url) = match &image.source {
            ImageSource::Data(data) => (Some(data.clone()), None),
            ImageSource::Url(url) => (None, Some(url.clone())),
        };
        ImageRecord {
            media_type: image.media_type.clone(),
            data,
            url,
        }
    }

    /// Converts the record to an image; exactly one of `data` and `url` must be set.
    pub fn into_image(self) -> Result<Image, FieldIssue> {
        let source = match (self.data, self.url) {
            (Some(data), None) => ImageSource::Data(data),
            (None, Some(url)) => ImageSource::Url(url),
            _ => {
                return Err(FieldIssue::new(
                    "",
                    "an image needs exactly one of `data` and `url`",
                ));
            }
        };
        Ok(Image {
            media_type: self.media_type,
            source,
        })
    }
}

impl ContextRecord {
    /// Builds the record of a context entry.
    pub fn from_context(context: &ContextEntry) -> Self {
        ContextRecord {
            source: context.source.as_str().to_owned(),
            path: context.path.clone(),
            sha256: context.sha256.clone(),
            text: context.text.clone(),
        }
    }

    /// Converts the record to a context entry.
    pub fn into_context(self) -> Result<ContextEntry, FieldIssue> {
        Ok(ContextEntry {
            source: parse_name("source", &self.source, ContextSource::parse)?,
            path: self.path,
            sha256: self.sha256,
            text: self.text,
        })
    }
}

impl CapsuleRecord {
    /// Builds the record of a capsule; fails on a non-finite calibration factor.
    pub fn from_capsule(capsule: &Capsule) -> Result<Self, String> {
        let mut calibration = Map::new();
        for (model, factor) in &capsule.state.calibration {
            let number = serde_json::Number::from_f64(*factor).ok_or_else(|| {
                format!("calibration factor {factor} of {model} is not a finite number")
            })?;
            calibration.insert(model.clone(), Value::Number(number));
        }
        let state = &capsule.state;
        let narrative = &capsule.narrative;
        let local = &capsule.local;
        Ok(CapsuleRecord {
            trigger: capsule.trigger.as_str().to_owned(),
            quality: capsule.quality.as_str().to_owned(),
            first_kept_entry_id: capsule
                .first_kept_entry_id
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            boundary_truncation: capsule.boundary_truncation.as_ref().map(|cut| {
                BoundaryTruncationRecord {
                    entry_id: cut.entry_id.as_str().to_owned(),
                    head_chars: cut.head_chars,
                    tail_chars: cut.tail_chars,
                    omitted_chars: cut.omitted_chars,
                    kept_tokens: cut.kept_tokens.get(),
                }
            }),
            tokens_before: capsule.tokens_before.get(),
            tokens_after: capsule.tokens_after.get(),
            summarizer: capsule.summarizer.clone(),
            previous_capsule_id: capsule
                .previous_capsule_id
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            state: CapsuleStateRecord {
                model: state.model.clone(),
                calibration,
                auto_compact: state.auto_compact,
                auto_compact_override: state.auto_compact_override,
                approvals: state
                    .approvals
                    .as_ref()
                    .map(ApprovalGrantsRecord::from_grants),
                skills: state
                    .skills
                    .iter()
                    .map(|skill| StateSkillRecord {
                        name: skill.name.clone(),
                        sha256: skill.sha256.clone(),
                        text: skill.text.clone(),
                    })
                    .collect(),
                pinned: PinnedRecord {
                    agents_md: state
                        .pinned_agents_md
                        .as_ref()
                        .map(ContextRecord::from_context),
                    system: state.pinned_system.clone(),
                },
            },
            instructions: capsule.instructions.clone(),
            native: capsule.native.as_ref().map(|native| NativeRecord {
                provider: native.provider.clone(),
                model: native.model.clone(),
                endpoint_fingerprint: native.endpoint_fingerprint.clone(),
                item: native.item.clone(),
            }),
            overflow: capsule.overflow.map(|overflow| OverflowRecordWire {
                stated_prompt: overflow.stated_prompt,
                request_tokens_local: overflow.request_tokens_local,
            }),
            imported: capsule
                .imported
                .as_ref()
                .map(|imported| ImportedCapsuleRecord {
                    agent: imported.agent.clone(),
                    original_id: imported.original_id.clone(),
                }),
            summary_scope: capsule.scope.as_ref().map(|scope| {
                serde_json::json!(SummaryScopeRecord {
                    from_entry_id: scope
                        .from_entry_id
                        .as_ref()
                        .map(|id| id.as_str().to_owned()),
                    partial: scope.partial,
                    chunks: scope.chunks,
                    summarized_tokens: scope.summarized_tokens.get(),
                    facts_only_tokens: scope.facts_only_tokens.get(),
                })
            }),
            narrative: NarrativeRecord {
                goal: narrative.goal.clone(),
                constraints: narrative.constraints.clone(),
                done: narrative.done.clone(),
                in_progress: narrative.in_progress.clone(),
                pending: narrative.pending.clone(),
                decisions: narrative.decisions.clone(),
                blockers: narrative.blockers.clone(),
                next_steps: narrative.next_steps.clone(),
            },
            earlier_narrative: capsule.earlier_narrative.clone(),
            rehydrated: (!capsule.rehydrated.is_empty()).then(|| {
                serde_json::json!(RehydratedRecord {
                    files: capsule
                        .rehydrated
                        .files
                        .iter()
                        .map(|file| RehydratedFileRecord {
                            path: file.path.clone(),
                            text: file.text.clone(),
                            total_lines: file.total_lines,
                            shown_lines: file.shown_lines,
                        })
                        .collect(),
                    paths_only: capsule.rehydrated.paths_only.clone(),
                })
            }),
            local: LocalSectionsRecord {
                original_task: local.original_task.clone(),
                latest_instructions: local.latest_instructions.clone(),
                files_read: local.files_read.clone(),
                files_read_more: local.files_read_more,
                files_modified: local.files_modified.clone(),
                verification: local
                    .verification
                    .iter()
                    .map(|check| VerificationRecord {
                        command: check.command.clone(),
                        passed: check.passed,
                        exit_code: check.exit_code,
                    })
                    .collect(),
                unresolved_errors: local.unresolved_errors.clone(),
                goal: local.goal.clone(),
                constraints: local.constraints.clone(),
                constraints_more: local.constraints_more,
                plan: local
                    .plan
                    .iter()
                    .map(|item| PlanStepRecord {
                        step: item.text.clone(),
                        status: item.status.as_str().to_owned(),
                    })
                    .collect(),
                plan_explanation: local.plan_explanation.clone(),
                checkpoints: local
                    .checkpoints
                    .iter()
                    .map(|(kind, note)| CheckpointRecord {
                        kind: kind.as_str().to_owned(),
                        note: note.clone(),
                    })
                    .collect(),
                active_skills: local.active_skills.clone(),
            },
            markdown: capsule.markdown.clone(),
        })
    }

    /// Converts the record to a capsule. Skills in `state` are active ones.
    /// What does not fit but leaves the capsule usable is repaired, with an
    /// issue: an unknown `trigger` or `quality` reads as `unknown`, a
    /// calibration factor that is not a number, a pinned `AGENTS.md` or a
    /// checkpoint of unknown kind and an unreadable `previousCapsuleId` or
    /// `boundaryTruncation` are left out. An unreadable `firstKeptEntryId`
    /// makes the capsule unusable (its retained tail is unknown).
    pub fn into_capsule(self, issues: &mut Vec<FieldIssue>) -> Result<Capsule, FieldIssue> {
        let mut calibration = Vec::with_capacity(self.state.calibration.len());
        for (model, factor) in self.state.calibration {
            match factor.as_f64() {
                Some(factor) => calibration.push((model, factor)),
                None => issues.push(FieldIssue::new(
                    format!("state.calibration.{model}"),
                    format!(
                        "expected a number, found {}; left out (the model's factor starts from its seed)",
                        json_kind(&factor)
                    ),
                )),
            }
        }
        let pinned_agents_md = match self.state.pinned.agents_md.map(ContextRecord::into_context) {
            Some(Ok(context)) => Some(context),
            Some(Err(problem)) => {
                issues.push(FieldIssue::new(
                    "state.pinned.agentsMd",
                    format!("{problem}; left out"),
                ));
                None
            }
            None => None,
        };
        let mut checkpoints = Vec::with_capacity(self.local.checkpoints.len());
        for (idx, record) in self.local.checkpoints.into_iter().enumerate() {
            match CheckpointKind::parse(&record.kind) {
                Some(kind) => checkpoints.push((kind, record.note)),
                None => issues.push(FieldIssue::new(
                    format!("local.checkpoints[{idx}].kind"),
                    format!(
                        "{}; the checkpoint is left out",
                        unknown_value(&record.kind)
                    ),
                )),
            }
        }
        let boundary_truncation = match self.boundary_truncation {
            Some(cut) => match parse_id("boundaryTruncation.entryId", &cut.entry_id) {
                Ok(entry_id) => Some(BoundaryTruncation {
                    entry_id,
                    head_chars: cut.head_chars,
                    tail_chars: cut.tail_chars,
                    omitted_chars: cut.omitted_chars,
                    kept_tokens: TokenCount::new(cut.kept_tokens),
                }),
                Err(problem) => {
                    issues.push(FieldIssue {
                        problem: format!(
                            "{}; left out (the first kept message is sent whole)",
                            problem.problem
                        ),
                        ..problem
                    });
                    None
                }
            },
            None => None,
        };
        let trigger = Trigger::parse(&self.trigger).unwrap_or_else(|| {
            issues.push(FieldIssue::new(
                "trigger",
                format!(
                    "{}; read as \"unknown\" (neither soft nor forced)",
                    unknown_value(&self.trigger)
                ),
            ));
            Trigger::Unknown
        });
        let quality = Quality::parse(&self.quality).unwrap_or_else(|| {
            issues.push(FieldIssue::new(
                "quality",
                format!("{}; read as \"unknown\"", unknown_value(&self.quality)),
            ));
            Quality::Unknown
        });
        let previous_capsule_id = optional_id(
            "previousCapsuleId",
            self.previous_capsule_id.as_deref(),
            issues,
        );
        // The scope only describes what the narrative covers: a damaged
        // one is left out and the capsule kept; a bad id alone leaves the
        // figures, which tell the model its narrative is partial.
        let scope = match self
            .summary_scope
            .map(serde_json::from_value::<SummaryScopeRecord>)
        {
            None => None,
            Some(Err(err)) => {
                issues.push(FieldIssue::new(
                    "summaryScope",
                    format!("{err}; left out, the capsule is kept"),
                ));
                None
            }
            Some(Ok(record)) => {
                let from_entry_id = optional_id(
                    "summaryScope.fromEntryId",
                    record.from_entry_id.as_deref(),
                    issues,
                );
                Some(SummaryScope {
                    from_entry_id,
                    partial: record.partial,
                    chunks: record.chunks,
                    summarized_tokens: TokenCount::new(record.summarized_tokens),
                    facts_only_tokens: TokenCount::new(record.facts_only_tokens),
                })
            }
        };
        // The files only add to the model input: a damaged record is left
        // out and the capsule kept.
        let rehydrated = match self
            .rehydrated
            .map(serde_json::from_value::<RehydratedRecord>)
        {
            None => Rehydration::default(),
            Some(Err(err)) => {
                issues.push(FieldIssue::new(
                    "rehydrated",
                    format!("{err}; left out, the capsule is kept without the files after it"),
                ));
                Rehydration::default()
            }
            Some(Ok(record)) => Rehydration {
                files: record
                    .files
                    .into_iter()
                    .map(|file| RehydratedFile {
                        path: file.path,
                        text: file.text,
                        total_lines: file.total_lines,
                        shown_lines: file.shown_lines.min(file.total_lines),
                    })
                    .collect(),
                paths_only: record.paths_only,
            },
        };
        Ok(Capsule {
            rehydrated,
            trigger,
            quality,
            first_kept_entry_id: self
                .first_kept_entry_id
                .as_deref()
                .map(|id| parse_id("firstKeptEntryId", id))
                .transpose()?,
            boundary_truncation,
            tokens_before: TokenCount::new(self.tokens_before),
            tokens_after: TokenCount::new(self.tokens_after),
            summarizer: self.summarizer,
            previous_capsule_id,
            state: CapsuleState {
                model: self.state.model,
                calibration,
                auto_compact: self.state.auto_compact,
                auto_compact_override: self.state.auto_compact_override,
                approvals: self.state.approvals.map(ApprovalGrantsRecord::into_grants),
                skills: self
                    .state
                    .skills
                    .into_iter()
                    .map(|skill| SkillEntry {
                        name: skill.name,
                        action: SkillAction::Activate,
                        sha256: skill.sha256,
                        text: skill.text,
                    })
                    .collect(),
                pinned_agents_md,
                pinned_system: self.state.pinned.system,
            },
            instructions: self.instructions,
            native: self.native.map(|native| NativeContinuation {
                provider: native.provider,
                model: native.model,
                endpoint_fingerprint: native.endpoint_fingerprint,
                item: native.item,
            }),
            overflow: self.overflow.map(|overflow| OverflowRecord {
                stated_prompt: overflow.stated_prompt,
                request_tokens_local: overflow.request_tokens_local,
            }),
            imported: self.imported.map(|imported| ImportedCapsule {
                agent: imported.agent,
                original_id: imported.original_id,
            }),
            scope,
            narrative: Narrative {
                goal: self.narrative.goal,
                constraints: self.narrative.constraints,
                done: self.narrative.done,
                in_progress: self.narrative.in_progress,
                pending: self.narrative.pending,
                decisions: self.narrative.decisions,
                blockers: self.narrative.blockers,
                next_steps: self.narrative.next_steps,
            },
            earlier_narrative: self.earlier_narrative,
            local: LocalSections {
                original_task: self.local.original_task,
                latest_instructions: self.local.latest_instructions,
                files_read: self.local.files_read,
                files_read_more: self.local.files_read_more,
                files_modified: self.local.files_modified,
                verification: self
                    .local
                    .verification
                    .into_iter()
                    .map(|check| Verification {
                        command: check.command,
                        passed: check.passed,
                        exit_code: check.exit_code,
                    })
                    .collect(),
                unresolved_errors: self.local.unresolved_errors,
                checkpoints,
                active_skills: self.local.active_skills,
                goal: self.local.goal,
                constraints: self.local.constraints,
                constraints_more: self.local.constraints_more,
                plan: self
                    .local
                    .plan
                    .into_iter()
                    .map(|step| PlanItem {
                        text: step.step,
                        status: PlanStatus::parse(&step.status),
                    })
                    .collect(),
                plan_explanation: self.local.plan_explanation,
            },
            markdown: self.markdown,
        })
    }
}

#[cfg(test)]
mod tests {
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
