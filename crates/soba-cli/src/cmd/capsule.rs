//! `soba capsule list|export|load|create` (SPEC §12): portable capsules.
//! Export renders an existing capsule to a redacted `.capsule.md`; load
//! validates a file and appends it as untrusted `capsule_file` context;
//! create writes a handoff capsule of the whole live input to
//! `.soba/capsules/` and appends nothing to the log (only a flight record).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use soba_core::builder::{self, BuildOptions, CapsuleContent};
use soba_core::facts::{self, FactsConfig, FactsInput};
use soba_core::render::{self, CapsuleFileHeader, CapsuleView, RenderedCapsuleFile};
use soba_core::summarize::{self, Summarizer, SummaryRequest};
use soba_core::tokens::{BpeCounter, group_thousands};
use soba_core::{
    Capsule, ContextEntry, ContextSource, Encoding, Entry, EntryBody, EntryId, IdKind, Quality,
    TokenCount, TokenCounter, Trigger, Usage,
};
use soba_store::flight::{
    FlightAppender, FlightLevel, FlightLimits, FlightOutcome, FlightRecord, FlightSummarizer,
    flight_path,
};
use soba_store::log::{SessionId, SessionWriter, SystemMinter, WriterOptions};
use soba_store::reader::{SessionLog, SessionSummary, read_log};

use crate::cli::{CapsuleAction, CapsuleArgs, GlobalArgs};
use crate::context::Context;
use crate::engine::{self, ModelSetup};
use crate::error::{CliError, CliResult};

/// Runs `soba capsule`.
pub fn cmd_capsule(args: &CapsuleArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(global)?;
    let _logs = crate::logging::init(&ctx.env);
    ctx.print_warnings();
    match &args.action {
        CapsuleAction::List => list(&ctx, args),
        CapsuleAction::Export {
            checkpoint,
            path,
            force,
        } => export(&ctx, args, checkpoint, path, *force),
        CapsuleAction::Load { path } => load(&ctx, args, path),
        CapsuleAction::Create { title, force } => create(&ctx, args, title, *force),
    }
}

/// Reads the chosen session in full.
fn session(ctx: &Context, args: &CapsuleArgs) -> CliResult<(SessionSummary, SessionLog)> {
    let summary = ctx.select_session(args.session.as_deref())?;
    let log = read_log(&summary.path)?;
    Ok((summary, log))
}

fn path_entries(log: &SessionLog) -> Vec<Entry> {
    log.path()
        .iter()
        .map(|logged| logged.entry.clone())
        .collect()
}

/// The model whose limits apply to the session: `--model`, its own, the
/// one its import recorded, else the configured one.
fn session_model(ctx: &Context, args: &CapsuleArgs, log: &SessionLog) -> CliResult<String> {
    engine::model_for_session_with(ctx, args.model.as_deref(), &path_entries(log), log.header())
}

/// Returns the token counter of the session's model, or `o200k_base` when
/// the model cannot be resolved (export only counts for the front matter).
fn counter_for(ctx: &Context, args: &CapsuleArgs, log: &SessionLog) -> BpeCounter {
    let encoding = session_model(ctx, args, log)
        .ok()
        .and_then(|id| ctx.config().registry().resolve(&id).ok())
        .map_or(Encoding::O200kBase, |info| info.tokenizer);
    BpeCounter::new(encoding)
}

/// A capsule's title: the first line of its goal, else a generic one.
pub fn title_of(capsule: &Capsule, id: &EntryId) -> String {
    let goal = capsule
        .narrative
        .goal
        .lines()
        .map(|line| line.trim().trim_start_matches(['-', '*', '#', ' ']))
        .find(|line| !line.is_empty() && *line != render::NONE_RECORDED)
        .map(|line| line.chars().take(80).collect::<String>());
    goal.unwrap_or_else(|| format!("{} capsule {}", capsule.trigger.as_str(), id.short_with(4)))
}

/// Renders a capsule as a `.capsule.md`, redacted.
pub fn render_file(
    view: &CapsuleView<'_>,
    id: &str,
    title: &str,
    session: &str,
    leaf: &str,
    counter: &dyn TokenCounter,
) -> RenderedCapsuleFile {
    let created_at = format!("{:.3}", jiff::Timestamp::now());
    render::capsule_file(
        &CapsuleFileHeader {
            id,
            title,
            created_at: &created_at,
            source_session: session,
            source_leaf: leaf,
        },
        view,
        counter,
    )
}

/// Says how many secrets were redacted, by kind.
pub fn redaction_note(rendered: &RenderedCapsuleFile) -> String {
    if rendered.redactions == 0 {
        return "no secrets found".to_owned();
    }
    let kinds: Vec<String> = rendered
        .redactions_by_kind
        .iter()
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect();
    format!(
        "{} secret{} redacted ({})",
        rendered.redactions,
        if rendered.redactions == 1 { "" } else { "s" },
        kinds.join(", ")
    )
}

/// Writes `text` to `path`, refusing to overwrite without `force`.
pub fn write_file(path: &Path, text: &str, force: bool) -> CliResult {
    if path.exists() && !force {
        return Err(CliError::user(format!("{} already exists", path.display()))
            .hint("pass --force to overwrite it, or choose another path"));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|err| {
            CliError::user(format!("cannot create {}", parent.display())).caused_by(err)
        })?;
    }
    std::fs::write(path, text)
        .map_err(|err| CliError::user(format!("cannot write {}", path.display())).caused_by(err))
}

/// Resolves an export path: relative paths must stay inside the
/// workspace; absolute ones may go anywhere (SPEC §12).
fn export_path(root: &Path, given: &Path) -> CliResult<PathBuf> {
    if given.is_absolute() {
        return Ok(given.to_path_buf());
    }
    let mut resolved = root.to_path_buf();
    for component in given.components() {
        match component {
            Component::Normal(part) => resolved.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if resolved == root || !resolved.pop() || !resolved.starts_with(root) {
                    return Err(CliError::user(format!(
                        "{} is outside the workspace {}",
                        given.display(),
                        root.display()
                    ))
                    .hint(
                        "give a path inside the workspace, or an absolute path to write elsewhere",
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Ok(resolved)
}

/// Shows a path relative to the workspace when it is inside it.
fn display_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).map_or_else(
        |_| path.display().to_string(),
        |rel| rel.display().to_string(),
    )
}

fn list(ctx: &Context, args: &CapsuleArgs) -> CliResult {
    let mut out = String::new();
    match session(ctx, args) {
        Ok((summary, log)) => {
            let on_path: HashSet<&EntryId> =
                log.path().iter().map(|logged| &logged.entry.id).collect();
            out.push_str(&format!("session {}\n", summary.id));
            let mut n_capsules = 0;
            for logged in log.entries() {
                if let EntryBody::Capsule(capsule) = &logged.entry.body {
                    n_capsules += 1;
                    out.push_str(&format!(
                        "{} {}  {:<16} {:<8} {:>9} → {:<9} {}  {}\n",
                        if on_path.contains(&logged.entry.id) {
                            '*'
                        } else {
                            ' '
                        },
                        logged.entry.id.short_with(4),
                        capsule.trigger.as_str(),
                        capsule.quality.as_str(),
                        group_thousands(capsule.tokens_before.get()),
                        group_thousands(capsule.tokens_after.get()),
                        capsule.summarizer,
                        logged
                            .entry
                            .timestamp
                            .chars()
                            .take(16)
                            .collect::<String>()
                            .replace('T', " ")
                    ));
                }
                if let EntryBody::Context(context) = &logged.entry.body
                    && context.source == ContextSource::CapsuleFile
                {
                    out.push_str(&format!(
                        "{} {}  loaded {}\n",
                        if on_path.contains(&logged.entry.id) {
                            '*'
                        } else {
                            ' '
                        },
                        logged.entry.id.short_with(4),
                        context.path
                    ));
                }
            }
            if n_capsules == 0 {
                out.push_str("  no capsules yet (soba compact makes one)\n");
            }
        }
        Err(err) if args.session.is_none() => {
            out.push_str(&format!("no session: {}\n", err.message));
        }
        Err(err) => return Err(err),
    }
    for (label, dir) in [("capsule files", "capsules"), ("Project Memory", "memory")] {
        let folder = ctx.workspace.project_dir().join(dir);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map(|read_dir| {
                read_dir
                    .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                    .filter(|path| {
                        path.file_name()
                            .and_then(|name| name.to_str())
                            .is_some_and(|name| name.ends_with(".capsule.md"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if files.is_empty() {
            continue;
        }
        files.sort();
        out.push_str(&format!(
            "\n{label} ({}):\n",
            display_path(&ctx.workspace.root, &folder)
        ));
        for file in files {
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let described = std::fs::read_to_string(&file)
                .map_err(|err| err.to_string())
                .and_then(|text| render::parse_capsule_file(&text).map_err(|err| err.to_string()));
            match described {
                Ok(parsed) => out.push_str(&format!(
                    "  {name}  {}  {}  {} tokens\n",
                    parsed.front.title.as_deref().unwrap_or("(untitled)"),
                    parsed.front.quality.map_or("-", |q| q.as_str()),
                    parsed
                        .front
                        .tokens
                        .map_or_else(|| "?".to_owned(), group_thousands)
                )),
                Err(problem) => out.push_str(&format!("  {name}  (unreadable: {problem})\n")),
            }
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    Ok(stdout.flush()?)
}

/// Finds a capsule entry by full or short id.
fn find_capsule<'a>(log: &'a SessionLog, wanted: &str) -> CliResult<(&'a EntryId, &'a Capsule)> {
    let matches: Vec<(&EntryId, &Capsule)> = log
        .entries()
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) if logged.entry.id.matches_short(wanted) => {
                Some((&logged.entry.id, capsule.as_ref()))
            }
            _ => None,
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(
            CliError::user(format!("no capsule {wanted} in this session"))
                .hint("list the capsules with `soba capsule list`; ids look like ck_7f3a"),
        ),
        several => {
            let ids: Vec<&str> = several.iter().map(|(id, _)| id.as_str()).collect();
            Err(CliError::user(format!(
                "{wanted} matches {} capsules ({}); give more digits",
                ids.len(),
                ids.join(", ")
            )))
        }
    }
}

fn export(ctx: &Context, args: &CapsuleArgs, wanted: &str, given: &Path, force: bool) -> CliResult {
    let (summary, log) = session(ctx, args)?;
    let (id, capsule) = find_capsule(&log, wanted)?;
    let target = export_path(&ctx.workspace.root, given)?;
    let counter = counter_for(ctx, args, &log);
    let leaf = log.leaf().map(EntryId::as_str).unwrap_or_default();
    let rendered = render_file(
        &CapsuleView::from(capsule),
        id.as_str(),
        &title_of(capsule, id),
        &summary.id,
        leaf,
        &counter,
    );
    write_file(&target, &rendered.text, force)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "exported {} to {} ({} tokens; {})",
        id.short_with(4),
        target.display(),
        group_thousands(rendered.tokens.get()),
        redaction_note(&rendered)
    )?;
    Ok(stdout.flush()?)
}

/// Turns a capsule-file problem into an error naming the file.
fn capsule_file_error(path: &Path, err: render::CapsuleFileError) -> CliError {
    CliError::user(format!("cannot load {}: {err}", path.display()))
}

fn load(ctx: &Context, args: &CapsuleArgs, given: &Path) -> CliResult {
    let file = if given.is_absolute() {
        given.to_path_buf()
    } else {
        ctx.workspace.root.join(given)
    };
    let metadata = std::fs::metadata(&file)
        .map_err(|err| CliError::user(format!("cannot read {}", file.display())).caused_by(err))?;
    if metadata.len() > render::CAPSULE_FILE_MAX_BYTES as u64 {
        return Err(capsule_file_error(
            &file,
            render::CapsuleFileError::TooLarge {
                bytes: usize::try_from(metadata.len()).unwrap_or(usize::MAX),
                max: render::CAPSULE_FILE_MAX_BYTES,
            },
        ));
    }
    let bytes = std::fs::read(&file)
        .map_err(|err| CliError::user(format!("cannot read {}", file.display())).caused_by(err))?;
    let text = String::from_utf8(bytes).map_err(|err| {
        CliError::user(format!(
            "cannot load {}: not UTF-8 text (invalid byte at offset {})",
            file.display(),
            err.utf8_error().valid_up_to()
        ))
    })?;
    let (summary, log) = session(ctx, args)?;
    let model = session_model(ctx, args, &log)?;
    let setup = ModelSetup::resolve(ctx, &model)?;
    let budget = setup.budget(ctx)?;
    let counter = BpeCounter::new(setup.info.tokenizer);
    let parsed = render::check_loadable(&text, budget.auto_limit(), &counter)
        .map_err(|err| capsule_file_error(&file, err))?;
    let tokens = counter.count_text(&text).n;
    let entry = ContextEntry {
        source: ContextSource::CapsuleFile,
        path: display_path(&ctx.workspace.root, &file),
        sha256: Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        text,
    };
    let mut writer = SessionWriter::open(
        &summary.path,
        WriterOptions {
            durability: ctx.config().durability,
            minter: Box::new(SystemMinter),
        },
    )?;
    let appended = writer.append(EntryBody::Context(entry))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "loaded {} into session {} as {} ({} tokens{}{}); the model sees it as untrusted data",
        display_path(&ctx.workspace.root, &file),
        summary.id,
        appended.id.short_with(4),
        group_thousands(tokens.get()),
        parsed
            .front
            .title
            .as_deref()
            .map(|title| format!(", \"{title}\""))
            .unwrap_or_default(),
        parsed
            .front
            .quality
            .map(|quality| format!(", {}", quality.as_str()))
            .unwrap_or_default(),
    )?;
    Ok(stdout.flush()?)
}

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

/// Asks the LLM summarizer for the narrative of `span`, chunk by chunk,
/// under the per-chunk deadline, then the guards; `Err` says why it failed.
async fn llm_narrative(
    summarizer: &dyn Summarizer,
    span: &[Entry],
    previous: Option<&Capsule>,
    max_output_tokens: u32,
    timeout: Duration,
    counter: &dyn TokenCounter,
) -> Result<(soba_core::capsule::Narrative, Option<Usage>), String> {
    let items = summarize::span_items(span);
    let span_tokens = counter.count_text(&items.join("\n\n")).n;
    let mut state = previous.map(summarize::previous_state);
    let budget = summarize::chunk_tokens(
        summarizer.window_tokens(),
        max_output_tokens,
        state.as_deref(),
        None,
        counter,
    );
    let chunks = summarize::chunk_span(&items, budget, counter);
    let mut usage: Option<Usage> = None;
    for (idx, chunk) in chunks.iter().enumerate() {
        let request = SummaryRequest {
            previous_state: state.clone(),
            span_text: chunk.clone(),
            chunk_index: idx,
            chunk_count: chunks.len(),
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
        soba_core::guard::check_summary(&state.unwrap_or_default(), span_tokens, counter)
            .map_err(|rejection| format!("summary rejected by guard {}", rejection.name()))?;
    Ok((narrative, usage))
}

fn create(ctx: &Context, args: &CapsuleArgs, title: &str, force: bool) -> CliResult {
    let started = Instant::now();
    let (summary, log) = session(ctx, args)?;
    let model = session_model(ctx, args, &log)?;
    let setup = ModelSetup::resolve(ctx, &model)?;
    let budget = setup.budget(ctx)?;
    let counter = BpeCounter::new(setup.info.tokenizer);
    let mut notes = Vec::new();
    let summarizer: Option<Arc<dyn Summarizer>> = engine::summarizer(ctx, &setup, &mut notes)?;
    for note in notes {
        eprintln!("{note}");
    }
    // The whole live input, no tail: everything from the latest capsule's
    // retained tail on, with that capsule as the previous state.
    let stretch: Vec<Entry> = log
        .live_stretch()
        .iter()
        .map(|logged| logged.entry.clone())
        .collect();
    let previous: Option<&Capsule> =
        log.latest_capsule()
            .and_then(|logged| match &logged.entry.body {
                EntryBody::Capsule(capsule) => Some(capsule.as_ref()),
                _ => None,
            });
    let span: Vec<Entry> = stretch
        .into_iter()
        .filter(|entry| !matches!(entry.body, EntryBody::Capsule(_)))
        .collect();
    if span.is_empty() && previous.is_none() {
        return Err(CliError::user(format!(
            "session {} has nothing to hand off yet",
            summary.id
        ))
        .hint("run a turn first with `soba run -c \"<prompt>\"`"));
    }
    let compaction = &ctx.config().compaction;
    let header = log.header().cloned();
    let cwd = header.as_ref().map(|h| h.cwd.clone());
    let facts = facts::extract(
        &FactsInput {
            span: &span,
            previous,
            retained: &HashSet::new(),
            cwd: cwd.as_deref(),
        },
        &FactsConfig {
            user_message_budget: compaction.user_message_budget_tokens,
        },
        &counter,
    );
    let options = |quality| BuildOptions {
        auto_limit: budget.auto_limit(),
        trigger: Trigger::User,
        quality,
        instructions: None,
    };
    let mut fallback_reason = None;
    let (content, usage): (CapsuleContent, Option<Usage>) = match &summarizer {
        None => (
            builder::build_deterministic(&facts, previous, &options(Quality::Full), &counter),
            None,
        ),
        Some(summarizer) => {
            let runtime = engine::runtime()?;
            let attempt = runtime.block_on(llm_narrative(
                summarizer.as_ref(),
                &span,
                previous,
                u32::try_from(compaction.summarizer.max_output_tokens.get()).unwrap_or(u32::MAX),
                Duration::from_millis(compaction.timeout_ms),
                &counter,
            ));
            match attempt {
                Ok((narrative, usage)) => (
                    builder::build_with_narrative(
                        narrative,
                        summarizer.model(),
                        &facts,
                        &options(Quality::Full),
                        &counter,
                    ),
                    usage,
                ),
                Err(reason) => {
                    fallback_reason = Some(reason);
                    (
                        builder::build_deterministic(
                            &facts,
                            previous,
                            &options(Quality::Degraded),
                            &counter,
                        ),
                        None,
                    )
                }
            }
        }
    };
    let id = EntryId::from_uuid(IdKind::Capsule, uuid::Uuid::now_v7().as_u128());
    let leaf = log.leaf().map(EntryId::as_str).unwrap_or_default();
    let rendered = render_file(
        &content.view(),
        id.as_str(),
        title,
        &summary.id,
        leaf,
        &counter,
    );
    let date = jiff::ZonedDateTime::now().date().to_string();
    let file = ctx
        .workspace
        .project_dir()
        .join("capsules")
        .join(format!("{date}-{}.capsule.md", slug(title)));
    write_file(&file, &rendered.text, force)?;
    let span_tokens: u64 = span
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message(message) => message.tokens.map(|t| t.n.get()),
            _ => None,
        })
        .sum();
    let record = FlightRecord {
        operation_id: format!("op_{}", uuid::Uuid::now_v7().simple()),
        timestamp: format!("{:.3}", jiff::Timestamp::now()),
        level: FlightLevel::CapsuleCreate,
        trigger: Some(Trigger::User),
        limits: FlightLimits {
            hard_limit: budget.hard_limit(),
            soft_limit: budget.soft_limit(),
            auto_limit: budget.auto_limit(),
            hygiene_limit: budget.hygiene_limit(),
        },
        tokens_before: TokenCount::new(span_tokens),
        tokens_after: TokenCount::new(span_tokens),
        reclaimed: TokenCount::ZERO,
        outcome: FlightOutcome::Completed,
        reason: fallback_reason.clone(),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        checkpoint_id: Some(id.clone()),
        quality: Some(content.quality),
        summarizer: Some(FlightSummarizer {
            model: content.summarizer.clone(),
            usage,
        }),
        expected_cache_write: None,
    };
    if let (Some(dir), Ok(session_id)) = (summary.path.parent(), SessionId::parse(&summary.id)) {
        // The flight record is observability: failing to write it must not
        // undo the handoff the user asked for.
        let written = FlightAppender::open(
            flight_path(dir, &session_id),
            soba_store::log::Durability::Flush,
        )
        .and_then(|mut appender| appender.append(&record));
        if let Err(err) = written {
            eprintln!("warning: flight record not written: {err}");
        }
    }
    if let Some(reason) = &fallback_reason {
        eprintln!("fallback used: {reason}; the capsule is deterministic (degraded)");
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "wrote {} ({}, {} tokens, {}; {})",
        display_path(&ctx.workspace.root, &file),
        id.short_with(4),
        group_thousands(rendered.tokens.get()),
        content.quality.as_str(),
        redaction_note(&rendered)
    )?;
    Ok(stdout.flush()?)
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
    fn export_paths_stay_inside_unless_absolute() {
        let root = Path::new("/ws");
        assert_eq!(
            export_path(root, Path::new("out/a.capsule.md")).unwrap(),
            PathBuf::from("/ws/out/a.capsule.md")
        );
        assert_eq!(
            export_path(root, Path::new("out/../b.md")).unwrap(),
            PathBuf::from("/ws/b.md")
        );
        assert!(export_path(root, Path::new("../x.md")).is_err());
        assert!(export_path(root, Path::new("a/../../x.md")).is_err());
        assert_eq!(
            export_path(root, Path::new("/tmp/x.md")).unwrap(),
            PathBuf::from("/tmp/x.md")
        );
    }
}
