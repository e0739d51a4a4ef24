//! The deterministic capsule (SPEC §9.4), built from local facts only, and
//! the bounds every capsule's local sections obey, LLM capsules included.
//!
//! Bounds: files modified, every path in full; files read, newest 50 then
//! "and N more"; verification, newest 20 checks (a check piped into `tail`
//! or `grep` is the same check); unresolved errors, newest 20 of 500
//! characters each, plus up to 3 lines from the cut middle that name the
//! failure ([`error_excerpt`]); checkpoints, newest 20; the original task, 1,000
//! tokens; the earlier narrative, 2,000 tokens. The whole capsule (its model
//! input rendering) is ≤ min(8,000, floor(0.1 × autoLimit)) tokens, trimmed
//! in this order: files read (not the newest 20), earlier narrative,
//! checkpoints, verification (not the newest result), then each latest
//! instruction cut in its middle to one cap (no lower than
//! [`MIN_TRUNCATED_INSTRUCTION`] tokens), with a marker saying how much was
//! cut and that the session log has it whole. The narrative, files modified
//! and the original task are never trimmed below their own caps: when they
//! alone exceed the bound, the bound yields.

use std::sync::LazyLock;

use regex::Regex;

use crate::capsule::{
    BoundaryTruncation, Capsule, CapsuleState, ImportedCapsule, LocalSections, Narrative,
    NativeContinuation, OverflowRecord, Quality, SummaryScope, Trigger,
};
use crate::directive::constraint_key;
use crate::entry::CheckpointKind;
use crate::facts::{
    Facts, MIN_TRUNCATED_INSTRUCTION, PlanItem, PlanState, PlanStatus, UnresolvedError,
    omission_marker, truncate_middle_lines, truncate_middle_tokens,
};
use crate::id::EntryId;
use crate::render::{self, CapsuleView, NONE_RECORDED, code_span};
use crate::tokens::{TokenCount, TokenCounter};
use crate::truncate::cut_instruction;

/// The original task is kept verbatim up to this many tokens.
pub const ORIGINAL_TASK_TOKENS: TokenCount = TokenCount::new(1_000);
/// Files read listed by name, newest first.
pub const FILES_READ_SHOWN: usize = 50;
/// Files read that the bound never trims: the newest this many.
pub const FILES_READ_KEPT: usize = 20;

/// The newest verification results never trimmed from a capsule to meet
/// its bound.
pub const VERIFICATION_KEPT: usize = 1;
/// Verification commands listed, newest first.
pub const VERIFICATION_SHOWN: usize = 20;
/// Unresolved errors listed, newest first (SPEC §9.4 says 10; 20 keeps
/// as many open errors as the peers' inputs do, ARCHITECTURE.md).
pub const ERRORS_SHOWN: usize = 20;
/// Closing replies kept under "Answers given", newest first.
pub const ANSWERS_SHOWN: usize = 4;
/// A reply is middle-truncated to this many tokens.
pub const ANSWER_TOKENS: TokenCount = TokenCount::new(200);
/// A reply's request is named by its first line, cut to this many
/// characters.
pub const ANSWER_REQUEST_CHARS: usize = 100;

/// Returns how "Answers given" names a request: its first line, at most
/// [`ANSWER_REQUEST_CHARS`] characters, cut between words (a key cut in
/// half would escape redaction) and marked `…` when cut.
pub fn answer_request(request: &str) -> String {
    let trimmed = request.trim();
    let line = trimmed.lines().next().unwrap_or_default().trim();
    let mut named: String = line.chars().take(ANSWER_REQUEST_CHARS).collect();
    if named.chars().count() < trimmed.chars().count() {
        if named.chars().count() < line.chars().count() {
            let cut = named.rfind(char::is_whitespace).unwrap_or(named.len());
            named.truncate(cut);
        }
        named = named.trim_end().to_owned();
        named.push('…');
    }
    named
}

/// A check's failing lines remembered from before the first edit: at
/// most this many (a run with more is not remembered).
pub const BASELINE_LINES: usize = 50;

/// Returns the lines of a check's output that name a failure (TAP's
/// `not ok`, or the failure words of `names_failure`), each once, trimmed; `None`
/// when there are more than [`BASELINE_LINES`].
pub fn failing_lines(output: &str) -> Option<Vec<String>> {
    let mut lines: Vec<String> = Vec::new();
    for line in output.lines().map(str::trim) {
        if (line.starts_with("not ok") || names_failure(line)) && !lines.iter().any(|l| l == line) {
            lines.push(line.to_owned());
        }
    }
    (lines.len() <= BASELINE_LINES).then_some(lines)
}

/// Characters kept from the start of an unresolved error.
pub const ERROR_HEAD_CHARS: usize = 250;
/// Characters kept from the end of an unresolved error.
pub const ERROR_TAIL_CHARS: usize = 250;

/// Lines of an error's omitted middle kept because they name the failure.
pub const ERROR_KEY_LINES: usize = 3;
/// Characters of one such line.
const ERROR_KEY_LINE_CHARS: usize = 200;

/// Returns whether `line` names a failure (an error, a failed check, a
/// panic, a missing file…): the lines a reader looks for first in a cut
/// error, and that a stack trace's frames do not.
pub(crate) fn names_failure(line: &str) -> bool {
    static FAILURE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)\b(error|errors|fail|failed|failure|failing|panic|panicked|exception|fatal|denied|not found|no such|cannot|can't|undefined|assert)",
        )
        .expect("the failure vocabulary is a valid regex")
    });
    !line
        .trim_start()
        .starts_with("Traceback (most recent call last)")
        && FAILURE.is_match(line)
}

/// Returns an unresolved error's text as the capsule shows it: whole lines
/// from its start and end within [`ERROR_HEAD_CHARS`] and
/// [`ERROR_TAIL_CHARS`] (as [`truncate_middle_lines`] cuts), and from the
/// middle it omits, up to [`ERROR_KEY_LINES`] lines that name the failure,
/// each marker saying how much was left out around them. A stack trace's
/// head and tail are frames; the line that says what went wrong is often
/// in between.
pub fn error_excerpt(text: &str) -> String {
    if text.chars().count() <= ERROR_HEAD_CHARS + ERROR_TAIL_CHARS {
        return text.to_owned();
    }
    let plain = truncate_middle_lines(text, ERROR_HEAD_CHARS, ERROR_TAIL_CHARS);
    let lines: Vec<&str> = text.lines().collect();
    let chars = |line: &str| line.chars().count() + 1;
    let mut head_end = 0;
    let mut used = 0;
    while head_end < lines.len() && used + chars(lines[head_end]) <= ERROR_HEAD_CHARS {
        used += chars(lines[head_end]);
        head_end += 1;
    }
    let mut tail_start = lines.len();
    let mut tail_used = 0;
    while tail_start > head_end && tail_used + chars(lines[tail_start - 1]) <= ERROR_TAIL_CHARS {
        tail_used += chars(lines[tail_start - 1]);
        tail_start -= 1;
    }
    // A head or tail cut inside its only line is the plain cut's job.
    if head_end == 0 || tail_start == lines.len() {
        return plain;
    }
    let key: Vec<usize> = (head_end..tail_start)
        .filter(|&idx| names_failure(lines[idx]))
        .take(ERROR_KEY_LINES)
        .collect();
    if key.is_empty() {
        return plain;
    }
    let mut out = lines[..head_end].join("\n");
    let mut next = head_end;
    for idx in key {
        let omitted: usize = lines[next..idx].iter().map(|line| chars(line)).sum();
        if omitted > 0 {
            out.push_str(&omission_marker(omitted));
        } else {
            out.push('\n');
        }
        out.push_str(&cut_line(lines[idx], ERROR_KEY_LINE_CHARS));
        next = idx + 1;
    }
    let omitted: usize = lines[next..tail_start].iter().map(|line| chars(line)).sum();
    if omitted > 0 {
        out.push_str(&omission_marker(omitted));
    } else {
        out.push('\n');
    }
    out.push_str(&lines[tail_start..].join("\n"));
    out
}

/// Returns `line` whole when it has at most `max` characters, else its
/// start cut at the last word break that keeps at least half of them, and
/// `…`.
fn cut_line(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let head: String = line.chars().take(max.saturating_sub(1)).collect();
    let cut = match head.rfind(char::is_whitespace) {
        Some(idx) if head[..idx].chars().count() >= max / 2 => &head[..idx],
        _ => head.as_str(),
    };
    format!("{}…", cut.trim_end())
}
/// Checkpoint entries listed, newest first.
pub const CHECKPOINTS_SHOWN: usize = 20;
/// Constraints are kept verbatim, oldest first, up to this many tokens.
pub const CONSTRAINT_TOKENS: TokenCount = TokenCount::new(1_000);
/// The earlier narrative is kept verbatim up to this many tokens.
pub const EARLIER_NARRATIVE_TOKENS: TokenCount = TokenCount::new(2_000);
/// No capsule is larger than this, whatever the window.
pub const CAPSULE_MAX_TOKENS: TokenCount = TokenCount::new(8_000);
/// The summarizer name of a deterministic capsule.
pub const DETERMINISTIC: &str = "deterministic";

/// Written in place of an earlier narrative the size bound removed.
pub const EARLIER_NARRATIVE_OMITTED: &str = "(omitted to fit the capsule size bound)";

/// Returns the capsule size bound, min(8,000, floor(0.1 × autoLimit)).
pub fn capsule_bound(auto_limit: TokenCount) -> TokenCount {
    CAPSULE_MAX_TOKENS.min(TokenCount::new(auto_limit.get() / 10))
}

/// How a capsule is built.
#[derive(Debug, Clone, Copy)]
pub struct BuildOptions<'a> {
    /// autoLimit, which sets the size bound.
    pub auto_limit: TokenCount,
    /// What started the compaction.
    pub trigger: Trigger,
    /// `Full` for a deterministic capsule by configuration (or an LLM
    /// summary that passed the guards), `Degraded` for a fallback after an
    /// LLM failure or timeout.
    pub quality: Quality,
    /// The `/compact` instructions, if any.
    pub instructions: Option<&'a str>,
}

/// A built capsule's content, before the caller frames it as an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CapsuleContent {
    /// The eight sections.
    pub narrative: Narrative,
    /// The previous capsule's narrative (deterministic capsules only).
    pub earlier_narrative: Option<String>,
    /// The bounded local sections.
    pub local: LocalSections,
    /// Full or degraded.
    pub quality: Quality,
    /// What started it.
    pub trigger: Trigger,
    /// The summarizer model, or [`DETERMINISTIC`].
    pub summarizer: String,
    /// The sections as markdown (stored on the capsule entry).
    pub markdown: String,
    /// Tokens of the capsule's model-input rendering.
    pub tokens: TokenCount,
    /// The size bound it was fitted to.
    pub bound: TokenCount,
    /// Set when the summarizer read only the newest part of the span.
    pub scope: Option<SummaryScope>,
}

impl CapsuleContent {
    /// Returns the borrowed view the renderers take.
    pub fn view(&self) -> CapsuleView<'_> {
        CapsuleView {
            narrative: &self.narrative,
            earlier_narrative: self.earlier_narrative.as_deref(),
            local: &self.local,
            quality: self.quality,
            trigger: self.trigger,
            summarizer: &self.summarizer,
            imported: None,
            scope: self.scope.as_ref(),
        }
    }

    /// Records that the summarizer read only the newest part of the span
    /// (the capsule says so to the model) and fits the capsule again.
    pub fn with_scope(mut self, scope: SummaryScope, counter: &dyn TokenCounter) -> Self {
        self.scope = Some(scope);
        fit(self, counter)
    }

    /// Frames the content as a capsule entry's fields.
    pub fn into_capsule(self, frame: CapsuleFrame) -> Capsule {
        Capsule {
            trigger: self.trigger,
            quality: self.quality,
            first_kept_entry_id: frame.first_kept_entry_id,
            boundary_truncation: frame.boundary_truncation,
            tokens_before: frame.tokens_before,
            tokens_after: frame.tokens_after,
            summarizer: self.summarizer,
            previous_capsule_id: frame.previous_capsule_id,
            state: frame.state,
            instructions: frame.instructions,
            native: frame.native,
            overflow: frame.overflow,
            imported: frame.imported,
            scope: self.scope,
            narrative: self.narrative,
            earlier_narrative: self.earlier_narrative,
            local: self.local,
            markdown: self.markdown,
            rehydrated: frame.rehydrated,
        }
    }
}

/// The entry fields a capsule needs beyond its content.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CapsuleFrame {
    /// The first entry of the retained tail.
    pub first_kept_entry_id: Option<EntryId>,
    /// The cut straddler, if any.
    pub boundary_truncation: Option<BoundaryTruncation>,
    /// Effective tokens before.
    pub tokens_before: TokenCount,
    /// Effective tokens after, measured exactly.
    pub tokens_after: TokenCount,
    /// The capsule this one rolls up.
    pub previous_capsule_id: Option<EntryId>,
    /// The state in force at the append.
    pub state: CapsuleState,
    /// The `/compact` instructions.
    pub instructions: Option<String>,
    /// A native continuation.
    pub native: Option<NativeContinuation>,
    /// Set on `context_overflow` capsules.
    pub overflow: Option<OverflowRecord>,
    /// Set on imported capsules.
    pub imported: Option<ImportedCapsule>,
    /// The files brought back after the capsule.
    pub rehydrated: crate::capsule::Rehydration,
}

/// Returns a previous section's text, or `None` when it is empty or only
/// says nothing was recorded.
fn carried(text: &str) -> Option<&str> {
    let text = text.trim();
    let empty = text.is_empty() || text == NONE_RECORDED || text.eq_ignore_ascii_case("(none)");
    (!empty).then_some(text)
}

/// Applies SPEC §9.4's per-section bounds to extracted facts.
pub fn bounded_local(facts: &Facts, counter: &dyn TokenCounter) -> LocalSections {
    let original_task = facts
        .original_task
        .as_deref()
        .map(|task| truncate_middle_tokens(task.trim(), ORIGINAL_TASK_TOKENS, counter))
        .unwrap_or_default();
    let shown_read = facts.files_read.len().min(FILES_READ_SHOWN);
    LocalSections {
        original_task,
        latest_instructions: facts.latest_instructions.clone(),
        files_read: facts.files_read[..shown_read].to_vec(),
        files_read_more: (facts.files_read.len() - shown_read) as u64 + facts.files_read_hidden,
        files_modified: facts.files_modified.clone(),
        verification: facts
            .verification
            .iter()
            .take(VERIFICATION_SHOWN)
            .cloned()
            .collect(),
        unresolved_errors: facts
            .unresolved_errors
            .iter()
            .take(ERRORS_SHOWN)
            .map(|error| {
                // The bound applies to the error text; the key line (the
                // command, or tool and path, already shortened) stays whole
                // so the error's own first characters are never pushed out.
                UnresolvedError {
                    key: error.key.clone(),
                    text: error_excerpt(&error.text),
                }
                .to_stored()
            })
            .collect(),
        checkpoints: facts
            .checkpoints
            .iter()
            .take(CHECKPOINTS_SHOWN)
            .cloned()
            .collect(),
        active_skills: facts.active_skills.clone(),
        goal: facts
            .goal
            .as_deref()
            .map(|goal| truncate_middle_tokens(goal.trim(), ORIGINAL_TASK_TOKENS, counter))
            .unwrap_or_default(),
        constraints: constraints_within(&facts.constraints, counter),
        constraints_more: facts.constraints_hidden
            + (facts.constraints.len() - constraints_within(&facts.constraints, counter).len())
                as u64,
        plan: facts
            .plan
            .as_ref()
            .map(|plan| plan.items.clone())
            .unwrap_or_default(),
        plan_explanation: facts
            .plan
            .as_ref()
            .and_then(|plan| plan.explanation.clone())
            .unwrap_or_default(),
        answers: facts.answers.clone(),
        failing_before_edits: facts.failing_before_edits.clone(),
        files_edit_failed: facts.files_edit_failed.clone(),
    }
}

/// Returns whether `error` is a check failing only where it failed before
/// the session's first edit (`failing_before_edits`): work not done yet
/// (a test written first, a suite already broken), not a regression.
pub fn fails_as_before(error: &UnresolvedError, failing_before_edits: &[String]) -> bool {
    let Some(before) = failing_before_edits.iter().find_map(|stored| {
        let (key, lines) = stored.split_once('\n')?;
        (key == error.key).then(|| lines.lines().collect::<Vec<_>>())
    }) else {
        return false;
    };
    failing_lines(&error.text).is_some_and(|now| {
        !now.is_empty() && now.iter().all(|line| before.contains(&line.as_str()))
    })
}

/// Returns the constraints that fit [`CONSTRAINT_TOKENS`], oldest first.
fn constraints_within(constraints: &[String], counter: &dyn TokenCounter) -> Vec<String> {
    let mut used = TokenCount::ZERO;
    constraints
        .iter()
        .take_while(|text| {
            used += counter.count_text(&format!("- {text}\n")).n;
            used <= CONSTRAINT_TOKENS
        })
        .cloned()
        .collect()
}

/// Returns the "Earlier narrative" section, ≤ 2,000 tokens: the previous
/// capsule's model-written narrative (or an imported capsule's foreign
/// summary), which holds what the log cannot give back. A previous
/// deterministic capsule's own sections are not repeated (its goal,
/// constraints, plan and decisions are carried as facts); the earlier
/// narrative it carried passes on once more.
pub fn earlier_narrative(previous: Option<&Capsule>, counter: &dyn TokenCounter) -> Option<String> {
    let previous = previous?;
    if previous.summarizer == DETERMINISTIC && previous.imported.is_none() {
        return previous
            .earlier_narrative
            .clone()
            .filter(|text| carried(text).is_some() && text != EARLIER_NARRATIVE_OMITTED);
    }
    let has_narrative = previous
        .narrative
        .sections()
        .iter()
        .any(|(_, body)| carried(body).is_some());
    let text = if has_narrative {
        render::narrative_markdown(&previous.narrative, 3)
    } else {
        previous.markdown.trim().to_owned()
    };
    (!text.is_empty()).then(|| truncate_middle_tokens(&text, EARLIER_NARRATIVE_TOKENS, counter))
}

fn plan_line(item: &PlanItem) -> String {
    format!("- {}", item.text.trim().replace('\n', " "))
}

/// Returns the start of the original task for the Goal: its first
/// paragraph, at most 200 characters.
fn task_gist(task: &str) -> String {
    let first = task.trim().split("\n\n").next().unwrap_or_default().trim();
    let mut gist: String = first.chars().take(200).collect();
    if gist.chars().count() < task.trim().chars().count() {
        gist.push('…');
    }
    gist
}

/// Said in a working-state section when no plan tool recorded a plan.
pub const NO_PLAN: &str = "(no plan recorded: the latest user instructions and the messages after this capsule show the work in hand)";

/// Said under Pending and Next steps when no plan tool recorded a plan:
/// [`NO_PLAN`], said once under In progress, is not repeated.
pub const NO_PLAN_SEE_ABOVE: &str = "(no plan recorded; see In progress)";

/// The four working-state sections a plan gives: done, in progress,
/// pending (after the next step) and next steps, each step in one of them.
struct PlanSections {
    done: Vec<String>,
    in_progress: String,
    pending: String,
    next_steps: String,
}

fn plan_sections(plan: &PlanState) -> PlanSections {
    let done = plan
        .items
        .iter()
        .filter(|item| item.status == PlanStatus::Completed)
        .map(plan_line)
        .collect();
    let in_progress: Vec<String> = plan
        .items
        .iter()
        .filter(|item| item.status == PlanStatus::InProgress)
        .map(plan_line)
        .collect();
    let mut pending = plan
        .items
        .iter()
        .filter(|item| item.status == PlanStatus::Pending);
    let next = pending.next();
    let in_progress_text = in_progress.join("\n");
    PlanSections {
        done,
        in_progress: if in_progress_text.is_empty() {
            "(no plan step is in progress)".to_owned()
        } else {
            in_progress_text
        },
        pending: {
            let rest: Vec<String> = pending.map(plan_line).collect();
            if rest.is_empty() {
                "(no other plan step is pending)".to_owned()
            } else {
                rest.join("\n")
            }
        },
        next_steps: match next {
            Some(item) => plan_line(item),
            None if in_progress.is_empty() => {
                "(every plan step is done; newer requests, if any, are under Latest user instructions)"
                    .to_owned()
            }
            None => "(finish the step in progress; no plan step is pending)".to_owned(),
        },
    }
}

/// Returns `lines` with every line whose text (trimmed) an earlier line
/// or `seen` already holds left out.
fn unique_lines(lines: Vec<String>, seen: &mut std::collections::HashSet<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|line| {
            let key = line.trim().to_owned();
            key.is_empty() || seen.insert(key)
        })
        .collect()
}

/// Returns the Constraints section: every kept constraint verbatim, then
/// how many the budget left out.
fn constraints_section(constraints: &[String], more: u64) -> String {
    let mut lines: Vec<String> = constraints.iter().map(|text| format!("- {text}")).collect();
    if more > 0 {
        lines.push(format!(
            "- … and {more} more stated earlier (the session log has them verbatim)"
        ));
    }
    lines.join("\n")
}

/// The Next steps line for a check that passed before an edit changed
/// `files`: its "passed" under Verification no longer speaks for them.
pub fn check_again_line(command: &str, files: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut named: Vec<String> = files.iter().take(SHOWN).map(|f| code_span(f)).collect();
    if files.len() > SHOWN {
        named.push(format!("{} more", files.len() - SHOWN));
    }
    format!(
        "- Run {} again: {} changed after it last passed",
        code_span(command),
        named.join(", ")
    )
}

/// The Constraints line for `n` rules the Goal states verbatim.
pub fn constraints_in_goal(n: usize) -> String {
    match n {
        1 => "- 1 more, stated in the Goal above (kept there, not repeated)".to_owned(),
        n => format!("- {n} more, stated in the Goal above (kept there, not repeated)"),
    }
}

/// The task with the rules listed verbatim under Constraints taken out,
/// so each is said once; `None` when it holds none of them, or holds
/// little else. Only a sentence that opens with a rule word ("Always …",
/// "Never …", "Do not …") is taken out: a sentence that states the work
/// ("Make it return an error, and keep the API") stays in the Goal even
/// when it is a constraint too.
fn without_constraints(task: &str, constraints: &[String]) -> Option<String> {
    const RULE_WORDS: [&str; 10] = [
        "always ",
        "never ",
        "must ",
        "don't ",
        "do not ",
        "avoid ",
        "prefer ",
        "only ",
        "keep ",
        "make sure ",
    ];
    let mut rest = task.to_owned();
    for constraint in constraints.iter().map(|c| c.trim()).filter(|c| {
        let lower = c.to_lowercase();
        RULE_WORDS.iter().any(|word| lower.starts_with(word))
    }) {
        rest = rest.replacen(constraint, "", 1);
    }
    if rest == task {
        return None;
    }
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    (rest.chars().count() >= 20).then_some(rest)
}

/// Returns the Goal: the redirected goal or the original task (its first
/// paragraph, saying where the rest is), and the `/compact` instructions
/// given for this capsule alone.
fn goal_section(facts: &Facts, local: &LocalSections, instructions: Option<&str>) -> String {
    let mut goal = if !local.goal.trim().is_empty() {
        format!(
            "{} (the work was redirected by this message; the first task is under Original task)",
            task_gist(&local.goal)
        )
    } else {
        facts
            .original_task
            .as_deref()
            .filter(|task| !task.trim().is_empty())
            .map(|task| {
                let gist = task_gist(task);
                if gist != task.trim() {
                    format!("{gist} (the full text is under Original task)")
                } else if let Some(rest) = without_constraints(&gist, &local.constraints) {
                    format!("{rest} {}", render::GOAL_RULES_UNDER_CONSTRAINTS)
                } else {
                    gist
                }
            })
            .unwrap_or_default()
    };
    if let Some(instructions) = instructions.map(str::trim).filter(|i| !i.is_empty()) {
        if !goal.is_empty() {
            goal.push_str("\n\n");
        }
        goal.push_str("Instructions given with /compact for this capsule: ");
        goal.push_str(instructions);
    }
    goal
}

/// Builds the eight sections from local facts (SPEC §9.4): the goal from
/// the task (or the message that redirected it), the constraints verbatim,
/// done / in progress / pending / next steps from the newest plan (and
/// the milestones when there is none), decisions from plan pivots, each
/// fact in one section.
pub fn deterministic_narrative(
    facts: &Facts,
    local: &LocalSections,
    previous: Option<&Capsule>,
    instructions: Option<&str>,
) -> Narrative {
    let prev = previous
        .filter(|capsule| capsule.summarizer == DETERMINISTIC)
        .map(|capsule| &capsule.narrative);
    let mut seen = std::collections::HashSet::new();

    let plan = facts.plan.as_ref().filter(|plan| !plan.items.is_empty());
    // Milestones are listed once, under Checkpoints (bounded there).
    let milestones = match facts
        .checkpoints
        .iter()
        .filter(|(kind, _)| *kind == CheckpointKind::Milestone)
        .count()
    {
        0 => Vec::new(),
        1 => vec!["- 1 milestone reached (listed under Checkpoints).".to_owned()],
        n => vec![format!(
            "- {n} milestones reached (the newest listed under Checkpoints)."
        )],
    };
    let (mut done, in_progress, pending, mut next_steps) = match plan {
        Some(plan) => {
            let sections = plan_sections(plan);
            (
                sections.done,
                sections.in_progress,
                sections.pending,
                sections.next_steps,
            )
        }
        None => (
            milestones,
            NO_PLAN.to_owned(),
            NO_PLAN_SEE_ABOVE.to_owned(),
            NO_PLAN_SEE_ABOVE.to_owned(),
        ),
    };
    if let Some((command, files)) = &facts.changed_since_check {
        let rerun = check_again_line(command, files);
        next_steps = if next_steps == NO_PLAN_SEE_ABOVE {
            rerun
        } else {
            format!("{rerun}\n{next_steps}")
        };
    }
    // A file only a failed or denied edit touched was not modified.
    match facts.files_modified.len()
        - facts
            .files_edit_failed
            .len()
            .min(facts.files_modified.len())
    {
        0 => {}
        1 => done.push("- Modified 1 file (listed under Files modified).".to_owned()),
        n => done.push(format!(
            "- Modified {n} files (listed under Files modified)."
        )),
    }
    let done = unique_lines(done, &mut seen);

    let mut decisions: Vec<String> = prev
        .and_then(|n| carried(&n.decisions))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default();
    decisions.extend(
        facts
            .span_pivots
            .iter()
            .map(|note| format!("- Plan pivot: {}", note.trim().replace('\n', " "))),
    );
    if let Some(explanation) = plan
        .and_then(|plan| plan.explanation.as_deref())
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        decisions.push(format!("- Plan: {}", explanation.replace('\n', " ")));
    }
    let decisions = unique_lines(decisions, &mut seen);

    let (as_before, new_failures): (Vec<&UnresolvedError>, Vec<&UnresolvedError>) = facts
        .unresolved_errors
        .iter()
        .take(ERRORS_SHOWN)
        .partition(|error| fails_as_before(error, &facts.failing_before_edits));
    let blockers: Vec<String> = new_failures
        .iter()
        .map(|error| {
            format!(
                "- {} failed (details under Unresolved errors)",
                code_span(&error.key)
            )
        })
        .collect();
    // A check that fails only where it failed before the first change is
    // work still to do, not something the work broke.
    let pending = as_before.iter().fold(pending, |pending, error| {
        let line = format!(
            "- {} still fails only where it failed before the first change: work not done yet, not a regression (details under Unresolved errors)",
            code_span(&error.key)
        );
        if pending.starts_with('(') {
            line
        } else {
            format!("{pending}\n{line}")
        }
    });

    // A constraint the Goal states verbatim (a task sentence that is a
    // rule too) is said once, there (a walk found the whole task repeated
    // as a constraint).
    let goal = goal_section(facts, local, instructions);
    let goal_key = constraint_key(&goal);
    let (in_goal, listed): (Vec<String>, Vec<String>) = local
        .constraints
        .iter()
        .cloned()
        .partition(|text| goal_key.contains(&constraint_key(text)));
    let mut constraints = constraints_section(&listed, 0);
    for line in [
        (!in_goal.is_empty()).then(|| constraints_in_goal(in_goal.len())),
        Some(constraints_section(&[], local.constraints_more)).filter(|more| !more.is_empty()),
    ]
    .into_iter()
    .flatten()
    {
        if !constraints.is_empty() {
            constraints.push('\n');
        }
        constraints.push_str(&line);
    }

    Narrative {
        goal,
        constraints,
        done: done.join("\n"),
        in_progress,
        pending,
        decisions: decisions.join("\n"),
        blockers: blockers.join("\n"),
        next_steps,
    }
}

/// Completes a summarizer's narrative with what the log knows for certain:
/// every kept constraint the model left out is added verbatim, and when a
/// plan tool recorded a plan, in progress / pending / next steps are the
/// plan's (the log is newer than anything the model recalls).
pub fn ground_narrative(
    mut narrative: Narrative,
    facts: &Facts,
    local: &LocalSections,
) -> Narrative {
    let missing: Vec<&String> = local
        .constraints
        .iter()
        .filter(|text| !constraint_key(&narrative.constraints).contains(&constraint_key(text)))
        .collect();
    if !missing.is_empty() || local.constraints_more > 0 {
        let extra = constraints_section(
            &missing.into_iter().cloned().collect::<Vec<_>>(),
            local.constraints_more,
        );
        let own = carried(&narrative.constraints)
            .unwrap_or_default()
            .to_owned();
        narrative.constraints = [own, extra]
            .into_iter()
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
    }
    if let Some(plan) = facts.plan.as_ref().filter(|plan| !plan.items.is_empty()) {
        let sections = plan_sections(plan);
        narrative.in_progress = sections.in_progress;
        narrative.pending = sections.pending;
        narrative.next_steps = sections.next_steps;
    }
    narrative
}

/// Builds the deterministic capsule from local facts only.
pub fn build_deterministic(
    facts: &Facts,
    previous: Option<&Capsule>,
    options: &BuildOptions<'_>,
    counter: &dyn TokenCounter,
) -> CapsuleContent {
    let local = bounded_local(facts, counter);
    let content = CapsuleContent {
        narrative: deterministic_narrative(facts, &local, previous, options.instructions),
        earlier_narrative: earlier_narrative(previous, counter),
        local,
        quality: options.quality,
        trigger: options.trigger,
        summarizer: DETERMINISTIC.to_owned(),
        markdown: String::new(),
        tokens: TokenCount::ZERO,
        bound: capsule_bound(options.auto_limit),
        scope: None,
    };
    fit(content, counter)
}

/// Builds a capsule around a narrative from the LLM summarizer that passed
/// the guards: the same bounded local sections, no earlier narrative (the
/// previous state was given to the summarizer to update).
pub fn build_with_narrative(
    narrative: Narrative,
    summarizer: &str,
    facts: &Facts,
    options: &BuildOptions<'_>,
    counter: &dyn TokenCounter,
) -> CapsuleContent {
    let local = bounded_local(facts, counter);
    let content = CapsuleContent {
        narrative: ground_narrative(narrative, facts, &local),
        earlier_narrative: None,
        local,
        quality: options.quality,
        trigger: options.trigger,
        summarizer: summarizer.to_owned(),
        markdown: String::new(),
        tokens: TokenCount::ZERO,
        bound: capsule_bound(options.auto_limit),
        scope: None,
    };
    fit(content, counter)
}

fn measure(content: &CapsuleContent, counter: &dyn TokenCounter) -> TokenCount {
    counter
        .count_text(&render::capsule_input(&content.view()))
        .n
}

/// Drops the oldest items of one list (its tail) until the capsule fits:
/// estimates how many from each item's own tokens, re-measures, and finally
/// adds back any item that still fits, so the most that fit are kept.
/// `apply(content, k)` keeps the first `k` items. Returns the new measure.
fn trim_oldest(
    content: &mut CapsuleContent,
    mut tokens: TokenCount,
    costs: &[TokenCount],
    apply: &dyn Fn(&mut CapsuleContent, usize),
    counter: &dyn TokenCounter,
) -> TokenCount {
    let bound = content.bound;
    let mut keep = costs.len();
    while tokens > bound && keep > 0 {
        let mut over = tokens.saturating_sub(bound);
        while keep > 0 && over > TokenCount::ZERO {
            keep -= 1;
            over = over.saturating_sub(costs[keep]);
        }
        apply(content, keep);
        tokens = measure(content, counter);
    }
    // Token counts are not exactly additive: the estimate may have dropped
    // one item too many.
    while tokens <= bound && keep < costs.len() {
        apply(content, keep + 1);
        let grown = measure(content, counter);
        if grown > bound {
            apply(content, keep);
            break;
        }
        keep += 1;
        tokens = grown;
    }
    tokens
}

/// Trims the content to its bound, in SPEC §9.4's order, and measures it.
fn fit(mut content: CapsuleContent, counter: &dyn TokenCounter) -> CapsuleContent {
    let bound = content.bound;
    let mut tokens = measure(&content, counter);

    // 1. Files read, oldest first, down to the newest FILES_READ_KEPT;
    // they join "and N more". A name costs a few tokens and tells the next
    // reader what to read again: the newest are never traded for bound.
    if tokens > bound && content.local.files_read.len() > FILES_READ_KEPT {
        let all = content.local.files_read.clone();
        let more = content.local.files_read_more;
        let costs: Vec<TokenCount> = all[FILES_READ_KEPT..]
            .iter()
            .map(|path| counter.count_text(&format!("- {}\n", code_span(path))).n)
            .collect();
        let apply = |content: &mut CapsuleContent, keep: usize| {
            content.local.files_read = all[..FILES_READ_KEPT + keep].to_vec();
            content.local.files_read_more = more + (all.len() - FILES_READ_KEPT - keep) as u64;
        };
        tokens = trim_oldest(&mut content, tokens, &costs, &apply, counter);
    }

    // 2. The earlier narrative, middle-truncated, then omitted.
    if tokens > bound
        && let Some(full) = content.earlier_narrative.clone()
    {
        let mut cap = counter.count_text(&full).n;
        loop {
            let over = tokens.saturating_sub(bound);
            // Shrink by the overshoot plus a margin for the marker.
            cap = cap.saturating_sub(over + TokenCount::new(16));
            if cap < TokenCount::new(64) {
                content.earlier_narrative = Some(EARLIER_NARRATIVE_OMITTED.to_owned());
                tokens = measure(&content, counter);
                break;
            }
            content.earlier_narrative = Some(truncate_middle_tokens(&full, cap, counter));
            tokens = measure(&content, counter);
            if tokens <= bound {
                break;
            }
        }
    }

    // 2b. Answers, oldest first.
    if tokens > bound && !content.local.answers.is_empty() {
        let all = content.local.answers.clone();
        let costs: Vec<TokenCount> = all
            .iter()
            .map(|answer| {
                counter
                    .count_text(&format!("### to {}\n{}\n", answer.request, answer.text))
                    .n
            })
            .collect();
        let apply = |content: &mut CapsuleContent, keep: usize| {
            content.local.answers = all[..keep].to_vec();
        };
        tokens = trim_oldest(&mut content, tokens, &costs, &apply, counter);
    }

    // 3. Checkpoint entries, oldest first.
    if tokens > bound && !content.local.checkpoints.is_empty() {
        let all = content.local.checkpoints.clone();
        let costs: Vec<TokenCount> = all
            .iter()
            .map(|(kind, note)| {
                counter
                    .count_text(&format!("- {}: {note}\n", kind.as_str()))
                    .n
            })
            .collect();
        let apply = |content: &mut CapsuleContent, keep: usize| {
            content.local.checkpoints = all[..keep].to_vec()
        };
        tokens = trim_oldest(&mut content, tokens, &costs, &apply, counter);
    }

    // 4. Verification commands, oldest first, down to the newest
    // VERIFICATION_KEPT: what last passed or failed is a line the next
    // reader needs more than the other trimmed items (a walk found a small
    // window's handoff with none, the check carried from the capsule
    // before it dropped).
    if tokens > bound && content.local.verification.len() > VERIFICATION_KEPT {
        let all = content.local.verification.clone();
        let costs: Vec<TokenCount> = all[VERIFICATION_KEPT..]
            .iter()
            .map(|v| {
                counter
                    .count_text(&format!("- passed (exit 0): {}\n", code_span(&v.command)))
                    .n
            })
            .collect();
        let apply = |content: &mut CapsuleContent, keep: usize| {
            content.local.verification = all[..VERIFICATION_KEPT + keep].to_vec()
        };
        tokens = trim_oldest(&mut content, tokens, &costs, &apply, counter);
    }

    // 5. The latest instructions, each cut in its middle to one cap that is
    // lowered until the capsule fits (not below
    // MIN_TRUNCATED_INSTRUCTION): on a small window, userMessageBudgetTokens
    // alone can exceed the bound, and one long message (a pasted or
    // @-attached file) must not carry the capsule past it. The marker says
    // how much was cut and that the log has the message whole.
    if tokens > bound && !content.local.latest_instructions.is_empty() {
        let all = content.local.latest_instructions.clone();
        let costs: Vec<TokenCount> = all.iter().map(|text| counter.count_text(text).n).collect();
        let mut cap = costs.iter().copied().max().unwrap_or(TokenCount::ZERO);
        while tokens > bound && cap > MIN_TRUNCATED_INSTRUCTION {
            let over = tokens.saturating_sub(bound);
            cap = cap
                .saturating_sub(over + TokenCount::new(16))
                .max(MIN_TRUNCATED_INSTRUCTION);
            content.local.latest_instructions = all
                .iter()
                .zip(&costs)
                .map(|(text, n)| {
                    if *n > cap {
                        cut_instruction(text, cap, counter)
                    } else {
                        text.clone()
                    }
                })
                .collect();
            tokens = measure(&content, counter);
        }
    }

    content.markdown = render::sections_markdown(&content.view());
    content.tokens = tokens;
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_keeps_the_lines_naming_the_failure_from_its_cut_middle() {
        // A Node stack trace: its head and tail are frames; the line that
        // says what went wrong is in between.
        let frames = "    at Module._load (node:internal/modules/cjs/loader:1104:12)\n".repeat(12);
        let text = format!(
            "/repo/node_modules/tsx/dist/register.cjs:3\n{}\n{frames}\
             Error: Cannot find module './src/utils/config.js'\n{frames}\
             Node.js v23.4.0\n\nCommand exited with code 1",
            "x".repeat(900)
        );
        let shown = error_excerpt(&text);
        assert!(
            shown.contains("\nError: Cannot find module './src/utils/config.js'\n[… "),
            "{shown}"
        );
        assert!(shown.starts_with("/repo/node_modules/tsx/dist/register.cjs:3\n[… "));
        assert!(shown.ends_with("Node.js v23.4.0\n\nCommand exited with code 1"));
        // Every cut is on a line boundary and says how much it left out.
        assert_eq!(shown.matches("characters omitted").count(), 2, "{shown}");
        assert!(shown.chars().count() < 700, "{}", shown.chars().count());
        // Without such a line it is the plain cut; a short error is whole.
        let plain = format!("{}\n{}\ndone", "a".repeat(300), "b ".repeat(300));
        assert_eq!(
            error_excerpt(&plain),
            truncate_middle_lines(&plain, ERROR_HEAD_CHARS, ERROR_TAIL_CHARS)
        );
        assert_eq!(error_excerpt("error: short"), "error: short");
        // At most three such lines, each cut at a word break.
        let many = format!(
            "head\n{}{}\ntail",
            "filler line\n".repeat(30),
            format!("error: {}\n", "word ".repeat(60)).repeat(5)
        );
        let shown = error_excerpt(&many);
        assert_eq!(shown.matches("\nerror: ").count(), 3, "{shown}");
        assert!(shown.contains("word word…\n"), "{shown}");
    }

    #[test]
    fn bound_is_a_tenth_of_auto_limit_up_to_8000() {
        assert_eq!(
            capsule_bound(TokenCount::new(160_000)),
            TokenCount::new(8_000)
        );
        assert_eq!(
            capsule_bound(TokenCount::new(25_999)),
            TokenCount::new(2_599)
        );
        assert_eq!(
            capsule_bound(TokenCount::new(80_000)),
            TokenCount::new(8_000)
        );
    }

    #[test]
    fn task_gist_cuts_at_the_first_paragraph() {
        assert_eq!(
            task_gist("Fix the parser.\n\nDetails follow."),
            "Fix the parser.…"
        );
        assert_eq!(task_gist("Fix it"), "Fix it");
    }
}
