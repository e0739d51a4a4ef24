//! Capsules (SPEC §9): the structured working state that replaces old model
//! input.

use crate::entry::{ContextEntry, SkillEntry};
use crate::id::EntryId;
use crate::tokens::TokenCount;

/// What started a compaction (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Effective tokens above hardLimit at preflight: forced.
    HardLimit,
    /// A pending milestone checkpoint: soft intent.
    Milestone,
    /// A pending plan-pivot checkpoint: soft intent.
    PlanPivot,
    /// A completed turn: soft intent.
    TurnComplete,
    /// Effective tokens at or above autoLimit: soft.
    AutoThreshold,
    /// The provider's prompt cache expired during an idle gap (longer than
    /// `cacheTtlSeconds`) and effective is at or above softGate: soft. The
    /// whole prompt is written again anyway, so compacting now costs no
    /// extra cache writes.
    CacheExpired,
    /// Above softGate, the tokens a compaction would reclaim have grown
    /// large enough that carrying them costs more in cache reads, at the
    /// input's growth rate, than the compaction costs: soft. Checked by
    /// [`crate::plan::pays_off`] after planning.
    ReadCost,
    /// `/compact`: explicit.
    User,
    /// The provider reported a context overflow: forced.
    ContextOverflow,
    /// A compaction another agent made, imported from its transcript.
    Imported,
    /// A trigger this version does not know, read from a log a newer
    /// version wrote: neither soft nor forced. The reader reports the name
    /// it read; this version never makes one.
    Unknown,
}

impl Trigger {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::HardLimit => "hard_limit",
            Trigger::Milestone => "milestone",
            Trigger::PlanPivot => "plan_pivot",
            Trigger::TurnComplete => "turn_complete",
            Trigger::AutoThreshold => "auto_threshold",
            Trigger::CacheExpired => "cache_expired",
            Trigger::ReadCost => "read_cost",
            Trigger::User => "user",
            Trigger::ContextOverflow => "context_overflow",
            Trigger::Imported => "imported",
            Trigger::Unknown => "unknown",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "hard_limit" => Trigger::HardLimit,
            "milestone" => Trigger::Milestone,
            "plan_pivot" => Trigger::PlanPivot,
            "turn_complete" => Trigger::TurnComplete,
            "auto_threshold" => Trigger::AutoThreshold,
            "cache_expired" => Trigger::CacheExpired,
            "read_cost" => Trigger::ReadCost,
            "user" => Trigger::User,
            "context_overflow" => Trigger::ContextOverflow,
            "imported" => Trigger::Imported,
            _ => return None,
        })
    }

    /// Returns whether this trigger is soft (subject to softGate, the soft
    /// cap and both ROI checks).
    pub fn is_soft(self) -> bool {
        matches!(
            self,
            Trigger::Milestone
                | Trigger::PlanPivot
                | Trigger::TurnComplete
                | Trigger::AutoThreshold
                | Trigger::CacheExpired
                | Trigger::ReadCost
        )
    }

    /// Returns whether this trigger is forced (fires regardless of the cap
    /// and `auto`).
    pub fn is_forced(self) -> bool {
        matches!(self, Trigger::HardLimit | Trigger::ContextOverflow)
    }
}

/// How a capsule's narrative was made (SPEC §9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quality {
    /// An LLM summary that passed the guards, or a deterministic capsule by
    /// configuration.
    Full,
    /// A deterministic capsule made after an LLM failure or timeout.
    Degraded,
    /// A quality this version does not know, read from a log a newer
    /// version wrote. The reader reports the name it read; this version
    /// never makes one.
    Unknown,
}

impl Quality {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Quality::Full => "full",
            Quality::Degraded => "degraded",
            Quality::Unknown => "unknown",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "full" => Some(Quality::Full),
            "degraded" => Some(Quality::Degraded),
            _ => None,
        }
    }
}

/// The cut of a text-only straddler at the retention boundary (SPEC §8.2),
/// in Unicode scalar values over the message's text blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundaryTruncation {
    /// The truncated message.
    pub entry_id: EntryId,
    /// Characters kept from the start.
    pub head_chars: u64,
    /// Characters kept from the end.
    pub tail_chars: u64,
    /// Characters elided in the middle.
    pub omitted_chars: u64,
    /// Tokens of the kept text, taken without re-counting.
    pub kept_tokens: TokenCount,
}

/// The state in force at a capsule's append, so resume needs nothing before
/// the retained tail.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CapsuleState {
    /// The active model id.
    pub model: String,
    /// Calibration factor per model id.
    pub calibration: Vec<(String, f64)>,
    /// Whether soft triggers were enabled.
    pub auto_compact: bool,
    /// The `/auto-compact` setting in force on the path (its latest
    /// `config_change`), `None` when the session never set one and follows
    /// its configuration: a path resumed from the retained tail gets it
    /// back from here (SPEC §3.3, §6.2).
    pub auto_compact_override: Option<bool>,
    /// The "always" approvals in force on the path, `None` when the session
    /// made none: a path resumed from the retained tail keeps them.
    pub approvals: Option<crate::entry::ApprovalGrants>,
    /// Active skills with their snapshotted text.
    pub skills: Vec<SkillEntry>,
    /// The latest `agents_md` context on the path.
    pub pinned_agents_md: Option<ContextEntry>,
    /// The `system`-role messages on the path, as text.
    pub pinned_system: Vec<String>,
}

/// A native continuation item from OpenAI `/responses/compact` (SPEC §10.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeContinuation {
    /// The provider name.
    pub provider: String,
    /// The model id it was made for.
    pub model: String,
    /// `sha256(lower(baseUrl) + "\n" + organization + "\n" + project)`.
    pub endpoint_fingerprint: String,
    /// The returned `compaction` item, as JSON text (opaque).
    pub item: String,
}

/// Recorded on `context_overflow` capsules (SPEC §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowRecord {
    /// The prompt size the provider stated, when it did.
    pub stated_prompt: Option<u64>,
    /// The uncalibrated local count of the overflowing request.
    pub request_tokens_local: u64,
}

/// Marks a capsule imported from another agent's compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedCapsule {
    /// The agent (`pi`, `claude-code`, `codex`, …).
    pub agent: String,
    /// The source's own id or index for the event.
    pub original_id: String,
}

/// The eight narrative sections, in order (SPEC §9.1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Narrative {
    /// `## Goal`.
    pub goal: String,
    /// `## Constraints`.
    pub constraints: String,
    /// `## Done`.
    pub done: String,
    /// `## In progress`.
    pub in_progress: String,
    /// `## Pending`.
    pub pending: String,
    /// `## Decisions`.
    pub decisions: String,
    /// `## Blockers`.
    pub blockers: String,
    /// `## Next steps`.
    pub next_steps: String,
}

/// The eight narrative headings, in order.
pub const NARRATIVE_HEADINGS: [&str; 8] = [
    "Goal",
    "Constraints",
    "Done",
    "In progress",
    "Pending",
    "Decisions",
    "Blockers",
    "Next steps",
];

impl Narrative {
    /// Returns the sections paired with their headings, in order.
    pub fn sections(&self) -> [(&'static str, &str); 8] {
        [
            (NARRATIVE_HEADINGS[0], self.goal.as_str()),
            (NARRATIVE_HEADINGS[1], self.constraints.as_str()),
            (NARRATIVE_HEADINGS[2], self.done.as_str()),
            (NARRATIVE_HEADINGS[3], self.in_progress.as_str()),
            (NARRATIVE_HEADINGS[4], self.pending.as_str()),
            (NARRATIVE_HEADINGS[5], self.decisions.as_str()),
            (NARRATIVE_HEADINGS[6], self.blockers.as_str()),
            (NARRATIVE_HEADINGS[7], self.next_steps.as_str()),
        ]
    }

    /// Returns a mutable reference to the section under `heading`
    /// (case-insensitive), if it is one of the eight.
    pub fn section_mut(&mut self, heading: &str) -> Option<&mut String> {
        let idx = NARRATIVE_HEADINGS
            .iter()
            .position(|h| h.eq_ignore_ascii_case(heading.trim()))?;
        Some(match idx {
            0 => &mut self.goal,
            1 => &mut self.constraints,
            2 => &mut self.done,
            3 => &mut self.in_progress,
            4 => &mut self.pending,
            5 => &mut self.decisions,
            6 => &mut self.blockers,
            _ => &mut self.next_steps,
        })
    }
}

/// A verification command and its last result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// The command as run.
    pub command: String,
    /// Whether it last passed.
    pub passed: bool,
    /// Its exit code, when known.
    pub exit_code: Option<i64>,
}

/// The locally extracted sections (SPEC §9.1), never asked of the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalSections {
    /// The first real user message of the session (≤ 1,000 tokens).
    pub original_task: String,
    /// Real user messages, newest first, outside the retained tail.
    pub latest_instructions: Vec<String>,
    /// Files read, newest first.
    pub files_read: Vec<String>,
    /// Number of files read beyond those listed.
    pub files_read_more: u64,
    /// Every file modified, workspace-relative.
    pub files_modified: Vec<String>,
    /// Verification commands with their last result, newest first.
    pub verification: Vec<Verification>,
    /// Unresolved errors, newest first.
    pub unresolved_errors: Vec<String>,
    /// Checkpoint notes, `(kind, note)`, newest first.
    pub checkpoints: Vec<(crate::entry::CheckpointKind, String)>,
    /// Names of active skills.
    pub active_skills: Vec<String>,
    /// The goal when the user redirected the work after the original task
    /// (the redirecting message, ≤ 1,000 tokens); empty while the original
    /// task is the goal.
    pub goal: String,
    /// Constraints stated by the user or `AGENTS.md`/`CLAUDE.md`, verbatim,
    /// oldest first, within the constraint budget.
    pub constraints: Vec<String>,
    /// Constraints the budget left out (they are in the log).
    pub constraints_more: u64,
    /// The newest plan of the session (a plan tool's steps), in its order.
    pub plan: Vec<PlanItem>,
    /// The plan's explanation (Codex `update_plan`), empty when none.
    pub plan_explanation: String,
    /// What the agent answered where it changed no file (a review, an
    /// audit, an explanation), newest first: no other section holds it.
    pub answers: Vec<Answer>,
    /// Checks that failed before the session's first edit: each its
    /// shown key, then `\n` and the failing lines of that first run
    /// ([`crate::builder::failing_lines`]). A later failure of only those
    /// lines is work not done yet, not a regression.
    pub failing_before_edits: Vec<String>,
    /// Files of `files_modified` that only failed or denied edits touched
    /// so far: Done does not count them as modified. A file leaves the
    /// list once an edit of it succeeds.
    pub files_edit_failed: Vec<String>,
}

/// The agent's closing reply to one request that changed no file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    /// The request's first line, cut to [`crate::builder::ANSWER_REQUEST_CHARS`].
    pub request: String,
    /// The reply, middle-truncated to [`crate::builder::ANSWER_TOKENS`].
    pub text: String,
}

/// The state of a plan step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Finished.
    Completed,
}

impl PlanStatus {
    /// Parses the status words of TodoWrite, `update_plan` and `write_todos`;
    /// unknown words count as pending.
    pub fn parse(word: &str) -> Self {
        match word.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "in_progress" | "inprogress" | "active" | "doing" => PlanStatus::InProgress,
            "completed" | "complete" | "done" | "finished" | "cancelled" | "canceled" => {
                PlanStatus::Completed
            }
            _ => PlanStatus::Pending,
        }
    }

    /// Returns the wire spelling (`pending`, `in_progress`, `completed`).
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Pending => "pending",
            PlanStatus::InProgress => "in_progress",
            PlanStatus::Completed => "completed",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanItem {
    /// What the step is.
    pub text: String,
    /// Its state.
    pub status: PlanStatus,
}

/// How much of a span the LLM summarizer read, recorded when the span
/// needed more than `summarizer.maxChunks` chunks: the narrative covers
/// the newest part, the local sections the whole span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryScope {
    /// The oldest span entry the summarizer read (`None` when a damaged
    /// log lost it).
    pub from_entry_id: Option<EntryId>,
    /// Whether only the end of that entry was read.
    pub partial: bool,
    /// Summarizer calls made.
    pub chunks: u64,
    /// Tokens of span text the summarizer read.
    pub summarized_tokens: TokenCount,
    /// Tokens of the older span entries it did not read.
    pub facts_only_tokens: TokenCount,
}

/// One file placed after a capsule with its content as it was when the
/// capsule was made (issue 32: files come back after a compaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RehydratedFile {
    /// The path, workspace-relative as the capsule's facts list it.
    pub path: String,
    /// The lines shown: the whole content, or its first `shown_lines`
    /// lines when the per-file budget cut it.
    pub text: String,
    /// Lines of the whole content.
    pub total_lines: u64,
    /// Lines shown (`total_lines` unless cut).
    pub shown_lines: u64,
}

impl RehydratedFile {
    /// Returns whether the per-file budget cut the content.
    pub fn is_cut(&self) -> bool {
        self.shown_lines < self.total_lines
    }
}

/// The files a capsule brings back after it, recorded on the capsule entry
/// so that resume and rewind rebuild the same input without reading the
/// disk again ([`crate::rehydrate`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rehydration {
    /// Files with their content, most recently modified first.
    pub files: Vec<RehydratedFile>,
    /// Files modified before the capsule that the budget left out: listed
    /// by path only.
    pub paths_only: Vec<String>,
}

impl Rehydration {
    /// Returns whether nothing is brought back.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.paths_only.is_empty()
    }
}

/// A capsule entry's structured fields plus its rendered markdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Capsule {
    /// What started it.
    pub trigger: Trigger,
    /// Full or degraded.
    pub quality: Quality,
    /// The first entry of the retained tail; `None` when nothing is kept.
    pub first_kept_entry_id: Option<EntryId>,
    /// The cut straddler, if any.
    pub boundary_truncation: Option<BoundaryTruncation>,
    /// Effective tokens before.
    pub tokens_before: TokenCount,
    /// Effective tokens after, measured exactly.
    pub tokens_after: TokenCount,
    /// The summarizer model, or `deterministic`.
    pub summarizer: String,
    /// The capsule this one rolls up.
    pub previous_capsule_id: Option<EntryId>,
    /// State in force at the append.
    pub state: CapsuleState,
    /// `/compact` instructions, if any.
    pub instructions: Option<String>,
    /// A native continuation, if one was made.
    pub native: Option<NativeContinuation>,
    /// Set on `context_overflow` capsules.
    pub overflow: Option<OverflowRecord>,
    /// Set on capsules imported from another agent.
    pub imported: Option<ImportedCapsule>,
    /// Set when the summarizer read only the newest part of the span.
    pub scope: Option<SummaryScope>,
    /// The narrative sections.
    pub narrative: Narrative,
    /// The previous capsule's narrative, verbatim (≤ 2,000 tokens).
    pub earlier_narrative: Option<String>,
    /// The locally extracted sections.
    pub local: LocalSections,
    /// The rendered markdown (for imported capsules, the foreign summary).
    pub markdown: String,
    /// The files brought back after the capsule in the model input.
    pub rehydrated: Rehydration,
}
