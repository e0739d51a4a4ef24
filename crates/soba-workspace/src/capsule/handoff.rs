//! A handoff capsule (SPEC §12, `soba capsule create`, `/capsule create`):
//! the whole live input summarized under the `user` rules, written to
//! `.soba/capsules/`, with the flight record for the caller to write
//! (`create_from_log` writes it, for a session read from its log);
//! nothing is appended to the session.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use soba_core::builder::{self, BuildOptions, CapsuleContent};
use soba_core::config::CompactionConfig;
use soba_core::facts::{self, FactsConfig, FactsInput};
use soba_core::render::RenderedCapsuleFile;
use soba_core::summarize::{self, Summarizer, SummaryRequest};
use soba_core::terminal::Line;
use soba_core::tokens::BpeCounter;
use soba_core::tokens::group_thousands;
use soba_core::{
    Capsule, Entry, EntryBody, EntryId, IdKind, Quality, SummaryScope, TokenCount, TokenCounter,
    Trigger, Usage,
};
use soba_store::flight::{
    FlightAppender, FlightLevel, FlightLimits, FlightOutcome, FlightRecord, FlightSummarizer,
    flight_path,
};
use soba_store::log::{Durability, SessionId};
use soba_store::reader::{SessionLog, SessionSummary};

use super::{display_path, redaction_note, render_file, write_file};
use crate::context::Context;
use crate::error::{Result, WorkspaceError};
use crate::setup::ModelSetup;

/// Returns a file-name slug: lowercase ASCII letters and digits, other
/// runs as one `-`, at most 60 characters; `capsule` when nothing is left.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let mut out: String = out.trim_matches('-').chars().take(60).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "capsule".to_owned()
    } else {
        out
    }
}

/// Returns the file-name slug of a title as [`slug`] does, built from the
/// redacted title: a file name is committed and shared, so a secret in the
/// title must not reach it.
pub fn file_slug(title: &str) -> String {
    slug(&soba_core::redact::redact(title).text)
}

/// Asks the LLM summarizer for the narrative of `span`, chunk by chunk,
/// under the per-chunk deadline, then the guards; `Err` says why it failed.
/// A span longer than `max_chunks` chunks has its newest part summarized,
/// and the scope says so.
async fn llm_narrative(
    summarizer: &dyn Summarizer,
    span: &[Entry],
    previous: Option<&Capsule>,
    max_output_tokens: u32,
    max_chunks: usize,
    timeout: Duration,
    counter: &dyn TokenCounter,
) -> Result<
    (
        soba_core::capsule::Narrative,
        Option<Usage>,
        Option<SummaryScope>,
    ),
    String,
> {
    let items = summarize::span_items_indexed(span);
    let mut state = previous.map(summarize::previous_state);
    let budget = summarize::chunk_tokens(
        summarizer.window_tokens(),
        max_output_tokens,
        state.as_deref(),
        None,
        counter,
    );
    let packed = summarize::chunk_newest(&items, budget, max_chunks, counter);
    let scope = packed.cut.map(|cut| SummaryScope {
        from_entry_id: Some(span[cut.first_entry].id.clone()),
        partial: cut.partial,
        chunks: packed.chunks.len() as u64,
        summarized_tokens: packed.tokens,
        facts_only_tokens: items
            .iter()
            .take_while(|item| item.entry < cut.first_entry)
            .map(|item| soba_core::tokens::estimate_by_size(&item.text))
            .sum(),
    });
    let chunks = packed.chunks;
    let mut usage: Option<Usage> = None;
    for (idx, chunk) in chunks.iter().enumerate() {
        let request = SummaryRequest {
            previous_state: state.clone(),
            span_text: chunk.clone(),
            chunk_index: idx,
            chunk_count: chunks.len(),
            earlier_omitted: scope.is_some(),
            instructions: None,
            max_output_tokens,
        };
        let response = tokio::time::timeout(timeout, summarizer.summarize(&request))
            .await
            .map_err(|_| format!("summarizer timed out after {} ms", timeout.as_millis()))?
            .map_err(|err| err.to_string())?;
        if let Some(reported) = response.usage {
            usage.get_or_insert_with(Usage::default).add(&reported);
        }
        state = Some(response.text);
    }
    let narrative =
        soba_core::guard::check_summary(&state.unwrap_or_default(), packed.tokens, counter)
            .map_err(|rejection| format!("summary rejected by guard {}", rejection.name()))?;
    Ok((narrative, usage, scope))
}

/// What a `/capsule create` handoff is made from (SPEC §12).
pub struct HandoffInput<'a> {
    /// The title (front matter, file name).
    pub title: &'a str,
    /// Overwrite an existing file.
    pub force: bool,
    /// The workspace root: the file may not lead out of it.
    pub root: &'a Path,
    /// `.soba/` of the workspace, where `capsules/` goes.
    pub project_dir: &'a Path,
    /// The session's id and current leaf (front matter).
    pub session: &'a str,
    /// The current leaf.
    pub leaf: &'a str,
    /// The session's workspace root, for the facts' relative paths.
    pub cwd: Option<&'a str>,
    /// The whole live model input, no tail: everything after the latest
    /// capsule's retained tail starts, capsules left out.
    pub span: &'a [Entry],
    /// The latest capsule, the state the summary updates.
    pub previous: Option<&'a Capsule>,
    /// The LLM summarizer, or `None` for the deterministic builder.
    pub summarizer: Option<&'a dyn Summarizer>,
    /// `compaction.*` (summarizer output, deadline, user-message budget).
    pub compaction: &'a CompactionConfig,
    /// The session's soft threshold (the capsule's size cap follows it).
    pub auto_limit: TokenCount,
    /// The session's limits, for the flight record.
    pub limits: FlightLimits,
    /// The session model's counter.
    pub counter: &'a dyn TokenCounter,
    /// When the command started, for the flight record's duration.
    pub started: Instant,
}

/// A handoff file written.
pub struct Handoff {
    /// Where it was written.
    pub file: PathBuf,
    /// The rendered file.
    pub rendered: RenderedCapsuleFile,
    /// `full`, or `degraded` after a fallback.
    pub quality: Quality,
    /// Why the LLM summary was not used, when it was not.
    pub fallback: Option<String>,
    /// The flight record to write (SPEC §12: the only trace in the log's
    /// folder).
    pub record: FlightRecord,
}

impl Handoff {
    /// Returns the confirmation line, e.g. `wrote .soba/capsules/… (812
    /// tokens, full; no secrets found); load it with …`. The file is the
    /// handle: its capsule id is in no session, so no command takes it (a
    /// walk tried `capsule export` with the id an earlier line printed).
    pub fn line(&self, root: &Path) -> String {
        let shown = display_path(root, &self.file);
        format!(
            "wrote {} ({} tokens, {}; {}); load it into a session with `soba capsule load {}` (in soba: /capsule load)",
            Line(&shown),
            group_thousands(self.rendered.tokens.get()),
            self.quality.as_str(),
            redaction_note(&self.rendered),
            Line(&shown),
        )
    }
}

/// Makes a handoff capsule of the whole live input under the `user` rules
/// (SPEC §12): the LLM narrative when it passes the guards, else the
/// deterministic capsule marked `degraded`; with no summarizer, the
/// deterministic one as `full`. Writes
/// `.soba/capsules/<yyyy-mm-dd>-<slug>.capsule.md` (no overwrite without
/// `force`) and returns the flight record for the caller to write; nothing
/// is appended to the session.
pub async fn create_handoff(input: HandoffInput<'_>) -> Result<Handoff> {
    let compaction = input.compaction;
    let facts = facts::extract(
        &FactsInput {
            tail: &[],
            span: input.span,
            previous: input.previous,
            retained: &HashSet::new(),
            cwd: input.cwd,
        },
        &FactsConfig {
            user_message_budget: compaction.user_message_budget_tokens,
        },
        input.counter,
    );
    let options = |quality| BuildOptions {
        auto_limit: input.auto_limit,
        trigger: Trigger::User,
        quality,
        instructions: None,
    };
    let mut fallback = None;
    let (content, usage): (CapsuleContent, Option<Usage>) = match input.summarizer {
        None => (
            builder::build_deterministic(
                &facts,
                input.previous,
                &options(Quality::Full),
                input.counter,
            ),
            None,
        ),
        Some(summarizer) => match llm_narrative(
            summarizer,
            input.span,
            input.previous,
            u32::try_from(compaction.summarizer.max_output_tokens.get()).unwrap_or(u32::MAX),
            compaction.summarizer.max_chunks,
            Duration::from_millis(compaction.timeout_ms),
            input.counter,
        )
        .await
        .and_then(|(narrative, usage, scope)| {
            // A summary the log contradicts too often is rejected like any
            // other; a few contradicted items are removed (and logged).
            let (narrative, corrections) = soba_core::consistency::check(narrative, &facts)
                .map_err(|rejection| format!("summary rejected by guard {}", rejection.name()))?;
            for correction in &corrections {
                tracing::info!(%correction, "summary item contradicted by the log, removed");
            }
            Ok((narrative, usage, scope))
        }) {
            Ok((narrative, usage, scope)) => {
                let content = builder::build_with_narrative(
                    narrative,
                    summarizer.model(),
                    &facts,
                    &options(Quality::Full),
                    input.counter,
                );
                let content = match scope {
                    Some(scope) => content.with_scope(scope, input.counter),
                    None => content,
                };
                (content, usage)
            }
            Err(reason) => {
                fallback = Some(reason);
                (
                    builder::build_deterministic(
                        &facts,
                        input.previous,
                        &options(Quality::Degraded),
                        input.counter,
                    ),
                    None,
                )
            }
        },
    };
    let id = EntryId::from_uuid(IdKind::Capsule, uuid::Uuid::now_v7().as_u128());
    let rendered = render_file(
        &content.view(),
        id.as_str(),
        input.title,
        input.session,
        input.leaf,
        input.counter,
    );
    let date = jiff::ZonedDateTime::now().date().to_string();
    let file = input
        .project_dir
        .join("capsules")
        .join(format!("{date}-{}.capsule.md", file_slug(input.title)));
    write_file(input.root, &file, &rendered.text, input.force)?;
    let span_tokens = TokenCount::new(
        input
            .span
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Message(message) => message.tokens.map(|t| t.n.get()),
                _ => None,
            })
            .sum(),
    );
    let record = FlightRecord {
        operation_id: format!("op_{}", uuid::Uuid::now_v7().simple()),
        timestamp: format!("{:.3}", jiff::Timestamp::now()),
        level: FlightLevel::CapsuleCreate,
        trigger: Some(Trigger::User),
        limits: input.limits,
        tokens_before: span_tokens,
        tokens_after: span_tokens,
        reclaimed: TokenCount::ZERO,
        outcome: FlightOutcome::Completed,
        reason: fallback.clone(),
        duration_ms: u64::try_from(input.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        checkpoint_id: Some(id.clone()),
        quality: Some(content.quality),
        summarizer: Some(FlightSummarizer {
            model: content.summarizer.clone(),
            usage,
        }),
        expected_cache_write: None,
    };
    Ok(Handoff {
        file,
        rendered,
        quality: content.quality,
        fallback,
        record,
    })
}

/// Makes a handoff of a session read from its log (`soba capsule
/// create`, which holds no lock on it) on `setup`'s model, blocking on the
/// workspace's runtime: the whole live input, no tail — everything from
/// the latest capsule's retained tail on, with that capsule as the
/// previous state. Its flight record is written beside the log; failing
/// to write it must not undo the handoff the user asked for, so that is
/// returned as a warning line, not an error.
pub fn create_from_log(
    ctx: &Context,
    (summary, log): (&SessionSummary, &SessionLog),
    setup: &ModelSetup,
    summarizer: Option<&dyn Summarizer>,
    title: &str,
    force: bool,
    started: Instant,
) -> Result<(Handoff, Option<String>)> {
    let budget = setup.budget(ctx)?;
    let counter = BpeCounter::new(setup.info.tokenizer);
    let previous: Option<&Capsule> =
        log.latest_capsule()
            .and_then(|logged| match &logged.entry.body {
                EntryBody::Capsule(capsule) => Some(capsule.as_ref()),
                _ => None,
            });
    let span: Vec<Entry> = log
        .live_stretch()
        .iter()
        .map(|logged| logged.entry.clone())
        .filter(|entry| !matches!(entry.body, EntryBody::Capsule(_)))
        .collect();
    if span.is_empty() && previous.is_none() {
        return Err(WorkspaceError::user(format!(
            "session {} has nothing to hand off yet",
            summary.id
        ))
        .hint("run a turn first with `soba run -c \"<prompt>\"`"));
    }
    let cwd = log.header().map(|header| header.cwd.clone());
    let project_dir = ctx.workspace.project_dir();
    let handoff = crate::setup::runtime()?.block_on(create_handoff(HandoffInput {
        title,
        force,
        root: &ctx.workspace.root,
        project_dir: &project_dir,
        session: &summary.id,
        leaf: log.leaf().map(EntryId::as_str).unwrap_or_default(),
        cwd: cwd.as_deref(),
        span: &span,
        previous,
        summarizer,
        compaction: &ctx.config().compaction.for_window(
            TokenCount::new(setup.info.context_window),
            TokenCount::new(setup.info.max_output_tokens),
        ),
        auto_limit: budget.auto_limit(),
        limits: FlightLimits {
            hard_limit: budget.hard_limit(),
            soft_limit: budget.soft_limit(),
            auto_limit: budget.auto_limit(),
            hygiene_limit: budget.hygiene_limit(),
        },
        counter: &counter,
        started,
    }))?;
    let mut warning = None;
    if let (Some(dir), Ok(session_id)) = (summary.path.parent(), SessionId::parse(&summary.id)) {
        let written = FlightAppender::open(flight_path(dir, &session_id), Durability::Flush)
            .and_then(|mut appender| appender.append(&handoff.record));
        if let Err(err) = written {
            warning = Some(format!("warning: flight record not written: {err}"));
        }
    }
    Ok((handoff, warning))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slug("Auth refactor: phase 2!"), "auth-refactor-phase-2");
        assert_eq!(slug("  "), "capsule");
        assert_eq!(slug("日本語"), "capsule");
        assert_eq!(slug(&"a ".repeat(100)).len(), 59);
    }

    #[test]
    fn file_slugs_come_from_the_redacted_title() {
        assert_eq!(
            file_slug("Deploy with AKIAIOSFODNN7EXAMPLE today"),
            "deploy-with-redacted-aws-access-key-today"
        );
        assert_eq!(
            file_slug("Auth refactor: phase 2!"),
            "auth-refactor-phase-2"
        );
    }
}
