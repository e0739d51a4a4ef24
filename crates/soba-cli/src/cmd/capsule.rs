//! `soba capsule list|export|load|create` (SPEC §12): portable capsules.
//! Export renders an existing capsule to a redacted `.capsule.md`; load
//! validates a file and appends it as untrusted `capsule_file` context;
//! create writes a handoff capsule of the whole live input to
//! `.soba/capsules/` and appends nothing to the log (only a flight record).
//! The operations are `soba_workspace::capsule`'s, which the TUI's
//! `/capsule` commands call too; this file picks the session and prints.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use soba_core::id::shortest_unique_len;
use soba_core::summarize::Summarizer;
use soba_core::terminal::Line;
use soba_core::tokens::{BpeCounter, group_thousands};
use soba_core::{Encoding, Entry, EntryBody, EntryId};
use soba_store::log::{SessionWriter, SystemMinter, WriterOptions};
use soba_store::reader::{SessionLog, SessionSummary, read_log};
use soba_workspace::capsule;
use soba_workspace::capsule::handoff;
use soba_workspace::context::Context;
use soba_workspace::setup::{self, ModelSetup};

use crate::cli::{CapsuleAction, CapsuleArgs, GlobalArgs};
use crate::error::CliResult;

/// Runs `soba capsule`.
pub fn cmd_capsule(args: &CapsuleArgs, global: &GlobalArgs) -> CliResult {
    let ctx = Context::load(&global.options())?;
    let _logs = crate::logging::init(&ctx.env);
    crate::output::print_warnings(&ctx);
    match args.action.as_ref().unwrap_or(&CapsuleAction::List) {
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
    setup::model_for_session_with(ctx, args.model.as_deref(), &path_entries(log), log.header())
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

fn list(ctx: &Context, args: &CapsuleArgs) -> CliResult {
    let text = capsule::list::list_text(ctx, args.session.as_deref())?;
    let mut stdout = crate::output::stdout();
    stdout.write_all(text.as_bytes())?;
    Ok(stdout.flush()?)
}

fn export(ctx: &Context, args: &CapsuleArgs, wanted: &str, given: &Path, force: bool) -> CliResult {
    let (summary, log, note) = capsule::session_holding(ctx, args.session.as_deref(), wanted)?;
    if let Some(note) = note {
        crate::output::errln!("{note}");
    }
    let counter = counter_for(ctx, args, &log);
    let export = capsule::prepare_export(
        &ctx.workspace.root,
        capsule::ExportSource {
            entries: log.entries().iter().map(|logged| &logged.entry),
            session: &summary.id,
            leaf: log.leaf().map(EntryId::as_str).unwrap_or_default(),
            counter: &counter,
        },
        wanted,
        given,
    )?;
    if given == Path::new("-") {
        // `-` is standard output, as for most tools: the file's text there,
        // the line about it on stderr (a walk got a file named `-`).
        let mut stdout = crate::output::stdout();
        stdout.write_all(export.rendered.text.as_bytes())?;
        stdout.flush()?;
        crate::output::errln!(
            "exported {} to standard output ({} tokens; {})",
            export.id.short_with(export.short),
            group_thousands(export.rendered.tokens.get()),
            capsule::redaction_note(&export.rendered)
        );
        return Ok(());
    }
    capsule::write_file(
        &ctx.workspace.root,
        &export.file,
        &export.rendered.text,
        force,
    )?;
    let mut stdout = crate::output::stdout();
    writeln!(
        stdout,
        "exported {} to {} ({} tokens; {})",
        export.id.short_with(export.short),
        crate::output::path(&export.file),
        group_thousands(export.rendered.tokens.get()),
        capsule::redaction_note(&export.rendered)
    )?;
    Ok(stdout.flush()?)
}

fn load(ctx: &Context, args: &CapsuleArgs, given: &Path) -> CliResult {
    let root = &ctx.workspace.root;
    let file = capsule::load::load_path(root, given);
    let text = capsule::load::read_capsule_text(root, &file)?;
    let (summary, log) = session(ctx, args)?;
    let model = session_model(ctx, args, &log)?;
    let setup = ModelSetup::resolve(ctx, &model)?;
    let budget = setup.budget(ctx)?;
    let counter = BpeCounter::new(setup.info.tokenizer);
    let loadable =
        capsule::load::check_capsule_file(root, &file, text, budget.auto_limit(), &counter)?;
    let mut writer = SessionWriter::open(
        &summary.path,
        WriterOptions {
            durability: ctx.config().durability,
            minter: Box::new(SystemMinter),
        },
    )?;
    let (details, shown) = (loadable.details(), loadable.entry.path.clone());
    let appended = writer.append(EntryBody::Context(loadable.entry))?;
    let short = shortest_unique_len(
        log.entries()
            .iter()
            .map(|logged| &logged.entry.id)
            .chain([&appended.id]),
    );
    let mut stdout = crate::output::stdout();
    writeln!(
        stdout,
        "loaded {} into session {} as {} ({} tokens{}); the model sees it as untrusted data",
        Line(&shown),
        Line(&summary.id),
        appended.id.short_with(short),
        group_thousands(loadable.tokens.get()),
        Line(&details),
    )?;
    Ok(stdout.flush()?)
}

fn create(ctx: &Context, args: &CapsuleArgs, title: &str, force: bool) -> CliResult {
    let started = Instant::now();
    let (summary, log) = session(ctx, args)?;
    let model = session_model(ctx, args, &log)?;
    let setup = ModelSetup::resolve(ctx, &model)?;
    setup.budget(ctx)?;
    let mut notes = Vec::new();
    let summarizer: Option<Arc<dyn Summarizer>> = setup::summarizer(ctx, &setup, &mut notes)?;
    for note in notes {
        crate::output::errln!("{note}");
    }
    let (handoff, warning) = handoff::create_from_log(
        ctx,
        (&summary, &log),
        &setup,
        summarizer.as_deref(),
        title,
        force,
        started,
    )?;
    if let Some(warning) = warning {
        crate::output::errln!("{warning}");
    }
    if let Some(reason) = &handoff.fallback {
        crate::output::errln!(
            "fallback used: {}; the capsule is deterministic (degraded)",
            Line(reason)
        );
    }
    let mut stdout = crate::output::stdout();
    writeln!(stdout, "{}", handoff.line(&ctx.workspace.root))?;
    Ok(stdout.flush()?)
}
