//! `soba capsule list|export|load|create` (SPEC §12): portable capsules.
//! Export renders an existing capsule to a redacted `.capsule.md`; load
//! validates a file and appends it as untrusted `capsule_file` context;
//! create writes a handoff capsule of the whole live input to
//! `.soba/capsules/` and appends nothing to the log (only a flight record).
//! The TUI's `/capsule` commands call the same helpers.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use soba_core::builder::{self, BuildOptions, CapsuleContent};
use soba_core::config::CompactionConfig;
use soba_core::facts::{self, FactsConfig, FactsInput};
use soba_core::id::shortest_unique_len;
use soba_core::render::{self, CapsuleFileHeader, CapsuleView, RenderedCapsuleFile};
use soba_core::summarize::{self, Summarizer, SummaryRequest};
use soba_core::terminal::Line;
use soba_core::tokens::{BpeCounter, group_thousands};
use soba_core::{
    Capsule, ContextEntry, ContextSource, Encoding, Entry, EntryBody, EntryId, IdKind, Quality,
    SummaryScope, TokenCount, TokenCounter, Trigger, Usage,
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

/// A capsule's title: the first line of its goal, else a generic one
/// naming the id with `short` random digits (the session's unique length).
pub fn title_of(capsule: &Capsule, id: &EntryId, short: usize) -> String {
    let goal = capsule
        .narrative
        .goal
        .lines()
        .map(|line| line.trim().trim_start_matches(['-', '*', '#', ' ']))
        .find(|line| !line.is_empty() && *line != render::NONE_RECORDED)
        .map(|line| render::shorten(first_sentence(line, 80), 80));
    goal.unwrap_or_else(|| {
        format!(
            "{} capsule {}",
            capsule.trigger.as_str(),
            id.short_with(short)
        )
    })
}

/// The first sentence of `line` when `line` is longer than `max`
/// characters and that sentence fits, so a title is not cut mid-sentence;
/// else `line`.
fn first_sentence(line: &str, max: usize) -> &str {
    if line.chars().count() <= max {
        return line;
    }
    let end = line
        .char_indices()
        .take(max)
        .filter(|(idx, c)| {
            matches!(c, '.' | '?' | '!') && line[idx + 1..].starts_with(' ') && *idx >= 15
        })
        .map(|(idx, _)| idx + 1)
        .last();
    end.map_or(line, |end| &line[..end])
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

/// Writes `text` to `path` (relative to the workspace `root`, or
/// absolute), refusing to overwrite without `force`; a path inside the
/// workspace may not lead out of it through a link, and a link at the
/// path itself is never followed ([`soba_store::output::write_output`]).
pub fn write_file(root: &Path, path: &Path, text: &str, force: bool) -> CliResult {
    soba_store::output::write_output(root, path, text.as_bytes(), force)?;
    Ok(())
}

/// Resolves an export path: relative paths must stay inside the
/// workspace; absolute ones may go anywhere (SPEC §12). Links are checked
/// when the file is written ([`write_file`]).
pub(crate) fn export_path(root: &Path, given: &Path) -> CliResult<PathBuf> {
    Ok(soba_store::output::resolve_output(root, given)?)
}

/// Shows a path relative to the workspace when it is inside it.
pub(crate) fn display_path(root: &Path, path: &Path) -> String {
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
            let short = soba_core::id::shortest_unique_len(
                log.entries().iter().map(|logged| &logged.entry.id),
            );
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
                        logged.entry.id.short_with(short),
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
                        logged.entry.id.short_with(short),
                        context.path
                    ));
                }
            }
            if n_capsules == 0 {
                out.push_str("  no capsules yet (soba compact makes one)\n");
            } else {
                out.push_str(
                    "  (* on the live path, the rest rewound past · capsule id · trigger · quality · \
                     effective tokens before → after · summarizer · time; \
                     soba capsule export ID FILE writes one as markdown)\n",
                );
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
            // Read beneath the workspace root: a link or FIFO is named, never
            // followed or waited on.
            let described = file
                .strip_prefix(&ctx.workspace.root)
                .map_err(|err| err.to_string())
                .and_then(|rel| {
                    crate::engine::read_workspace_file(
                        &ctx.workspace.root,
                        rel,
                        render::CAPSULE_FILE_MAX_BYTES as u64,
                    )
                    .map_err(|err| err.to_string())
                })
                .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned()))
                .and_then(|text| render::parse_capsule_file(&text).map_err(|err| err.to_string()));
            match described {
                Ok(parsed) => out.push_str(&format!(
                    "  {}  {}  {}  {} tokens\n",
                    Line(&name),
                    Line(parsed.front.title.as_deref().unwrap_or("(untitled)")),
                    parsed.front.quality.map_or("-", |q| q.as_str()),
                    parsed
                        .front
                        .tokens
                        .map_or_else(|| "?".to_owned(), group_thousands)
                )),
                Err(problem) => out.push_str(&format!(
                    "  {}  (unreadable: {})\n",
                    Line(&name),
                    Line(&problem)
                )),
            }
        }
    }
    let mut stdout = crate::output::stdout();
    stdout.write_all(out.as_bytes())?;
    Ok(stdout.flush()?)
}

/// Finds a capsule entry among `entries` by full or short id.
pub(crate) fn find_capsule<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    wanted: &str,
) -> CliResult<(&'a EntryId, &'a Capsule)> {
    let entries: Vec<&Entry> = entries.into_iter().collect();
    let matches: Vec<(&EntryId, &Capsule)> = entries
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) if entry.id.matches_short(wanted) => {
                Some((&entry.id, capsule.as_ref()))
            }
            _ => None,
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => {
            // An example at the length this session's ids are told apart
            // by, not a 4-digit one next to 11-digit ids.
            let short = shortest_unique_len(entries.iter().map(|entry| &entry.id));
            let example = entries
                .iter()
                .rev()
                .find(|entry| matches!(entry.body, EntryBody::Capsule(_)))
                .map_or_else(
                    || "ids look like ck_7f3a".to_owned(),
                    |entry| format!("the newest is {}", entry.id.short_with(short)),
                );
            Err(
                CliError::user(format!("no capsule {wanted} in this session")).hint(format!(
                    "list the capsules with `soba capsule list` (in soba: /capsule); {example}"
                )),
            )
        }
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

/// A capsule rendered for export, not yet written.
pub(crate) struct Export {
    /// The capsule's id.
    pub id: EntryId,
    /// Where it goes.
    pub file: PathBuf,
    /// The redacted `.capsule.md`.
    pub rendered: RenderedCapsuleFile,
    /// The session's short-id length: the id is shown with it.
    pub short: usize,
}

/// What `/capsule export` needs from the session.
pub(crate) struct ExportSource<'a, E> {
    /// Every entry of the session (a capsule need not be on the path).
    pub entries: E,
    /// The session's id.
    pub session: &'a str,
    /// The current leaf.
    pub leaf: &'a str,
    /// The session model's counter (for the front matter's `tokens`).
    pub counter: &'a dyn TokenCounter,
}

/// Finds capsule `wanted`, resolves `given` against the workspace `root`
/// (SPEC §12) and renders the capsule redacted; the caller writes it with
/// [`write_file`], outside any session lock.
pub(crate) fn prepare_export<'a, E: IntoIterator<Item = &'a Entry> + Clone>(
    root: &Path,
    source: ExportSource<'_, E>,
    wanted: &str,
    given: &Path,
) -> CliResult<Export> {
    let short = shortest_unique_len(source.entries.clone().into_iter().map(|entry| &entry.id));
    let (id, capsule) = find_capsule(source.entries, wanted)?;
    let file = export_path(root, given)?;
    let rendered = render_file(
        &CapsuleView::from(capsule),
        id.as_str(),
        &title_of(capsule, id, short),
        source.session,
        source.leaf,
        source.counter,
    );
    Ok(Export {
        id: id.clone(),
        file,
        rendered,
        short,
    })
}

/// Finds the session holding capsule `wanted` when none was named: the
/// workspace's most recent, else the one other session of its folder that
/// holds it (a walk exported a capsule of the session before, got "no
/// capsule in this session", and was not told which session was
/// searched). A capsule id is random, so a match elsewhere is that one.
fn session_holding(
    ctx: &Context,
    args: &CapsuleArgs,
    wanted: &str,
) -> CliResult<(SessionSummary, SessionLog)> {
    let (summary, log) = session(ctx, args)?;
    let entries = || log.entries().iter().map(|logged| &logged.entry);
    let Err(err) = find_capsule(entries(), wanted) else {
        return Ok((summary, log));
    };
    if args.session.is_some() || !err.message.starts_with("no capsule") {
        return Err(err);
    }
    let searched = summary.path.parent().map_or_else(
        || summary.id.clone(),
        |dir| crate::context::session_prefix(dir, &summary.id),
    );
    let not_here = || {
        CliError::user(format!(
            "no capsule {wanted} in session {searched} (the workspace's most recent) or any other session of its folder"
        ))
        .hint("`soba capsule list --session ID` lists a session's capsules (`soba sessions` lists the sessions); a handoff file's id is not a session's: load the file with `soba capsule load FILE`")
    };
    let Some(dir) = summary.path.parent() else {
        return Err(not_here());
    };
    let mut found = Vec::new();
    for other in soba_store::reader::list_sessions(dir).unwrap_or_default() {
        if other.id == summary.id {
            continue;
        }
        let Ok(other_log) = read_log(&other.path) else {
            continue;
        };
        let holds = find_capsule(
            other_log.entries().iter().map(|logged| &logged.entry),
            wanted,
        )
        .is_ok();
        if holds {
            found.push((other, other_log));
        }
    }
    match found.len() {
        1 => {
            let (other, other_log) = found.remove(0);
            crate::output::errln!(
                "{wanted} is in session {}, not in the most recent one ({searched}): exporting it from there",
                crate::context::session_prefix(dir, &other.id)
            );
            Ok((other, other_log))
        }
        0 => Err(not_here()),
        n => Err(CliError::user(format!(
            "{wanted} is not in session {searched} (the workspace's most recent) but in {n} others"
        ))
        .hint("name the session with --session ID")),
    }
}

fn export(ctx: &Context, args: &CapsuleArgs, wanted: &str, given: &Path, force: bool) -> CliResult {
    let (summary, log) = session_holding(ctx, args, wanted)?;
    let counter = counter_for(ctx, args, &log);
    let export = prepare_export(
        &ctx.workspace.root,
        ExportSource {
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
            redaction_note(&export.rendered)
        );
        return Ok(());
    }
    write_file(
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
        redaction_note(&export.rendered)
    )?;
    Ok(stdout.flush()?)
}

/// Turns a capsule-file problem into an error naming the file.
fn capsule_file_error(path: &Path, err: render::CapsuleFileError) -> CliError {
    CliError::user(format!("cannot load {}: {err}", shown_name(path)))
}

/// A capsule file's name as soba shows and records it: whoever named the
/// file chose it, so a secret in it is redacted like one in its text.
fn shown_name(path: &Path) -> String {
    soba_core::redact::redact(&path.display().to_string()).text
}

/// Resolves a `/capsule load` path: relative to the workspace root unless
/// absolute.
pub(crate) fn load_path(root: &Path, given: &Path) -> PathBuf {
    if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    }
}

/// Reads a `.capsule.md` as UTF-8: a regular file (never a FIFO or a
/// device) of at most 1 MiB, the cap enforced while reading (SPEC §12).
/// A file under the workspace `root` is read beneath it, as the file tools
/// read (no link leads outside); one the user names elsewhere by an
/// absolute path is their choice, read with the same type and size checks.
pub(crate) fn read_capsule_text(root: &Path, file: &Path) -> CliResult<String> {
    let max = render::CAPSULE_FILE_MAX_BYTES;
    if let Ok(rel) = file.strip_prefix(root) {
        let bytes =
            crate::engine::read_workspace_file(root, rel, max as u64).map_err(|err| match err {
                crate::engine::WorkspaceReadError::TooLarge { size } => capsule_file_error(
                    file,
                    render::CapsuleFileError::TooLarge {
                        bytes: usize::try_from(size).unwrap_or(usize::MAX),
                        max,
                    },
                ),
                crate::engine::WorkspaceReadError::Missing => {
                    CliError::user(format!("cannot read {}: no such file", shown_name(file)))
                        .hint("list capsule files with `soba capsule list`")
                }
                crate::engine::WorkspaceReadError::Refused(why) => {
                    CliError::user(format!("cannot load {}: {why}", shown_name(file)))
                        .hint("a capsule file is a regular `.capsule.md` file")
                }
            })?;
        return capsule_text_of(file, bytes);
    }
    let bytes =
        soba_store::untrusted::read_untrusted(file, max as u64).map_err(|err| match err {
            soba_store::untrusted::UntrustedReadError::TooLarge { .. } => capsule_file_error(
                file,
                render::CapsuleFileError::TooLarge {
                    bytes: std::fs::metadata(file)
                        .ok()
                        .and_then(|metadata| usize::try_from(metadata.len()).ok())
                        .filter(|&bytes| bytes > max)
                        .unwrap_or(max + 1),
                    max,
                },
            ),
            other => CliError::from(other).hint("a capsule file is a regular `.capsule.md` file"),
        })?;
    capsule_text_of(file, bytes)
}

/// Returns a capsule file's bytes as text, or says where it is not UTF-8.
fn capsule_text_of(file: &Path, bytes: Vec<u8>) -> CliResult<String> {
    String::from_utf8(bytes).map_err(|err| {
        CliError::user(format!(
            "cannot load {}: not UTF-8 text (invalid byte at offset {})",
            shown_name(file),
            err.utf8_error().valid_up_to()
        ))
    })
}

/// A capsule file checked for loading, as the context entry to append.
pub(crate) struct Loadable {
    /// The `capsule_file` context entry.
    pub entry: ContextEntry,
    /// Its front matter's title.
    pub title: Option<String>,
    /// Its front matter's quality.
    pub quality: Option<Quality>,
    /// Its size in the session model's tokens.
    pub tokens: TokenCount,
}

impl Loadable {
    /// Returns `, "title"` and `, quality` for the confirmation line.
    pub fn details(&self) -> String {
        let title = self
            .title
            .as_deref()
            .map(|title| format!(", \"{title}\""))
            .unwrap_or_default();
        let quality = self
            .quality
            .map(|quality| format!(", {}", quality.as_str()))
            .unwrap_or_default();
        format!("{title}{quality}")
    }
}

/// Checks `text`, read from `file`, against SPEC §12's limits for a session
/// whose soft threshold is `auto_limit` and builds its context entry.
pub(crate) fn check_capsule_file(
    root: &Path,
    file: &Path,
    text: String,
    auto_limit: TokenCount,
    counter: &dyn TokenCounter,
) -> CliResult<Loadable> {
    let parsed = render::check_loadable(&text, auto_limit, counter)
        .map_err(|err| capsule_file_error(file, err))?;
    let tokens = counter.count_text(&text).n;
    Ok(Loadable {
        title: parsed.front.title.clone(),
        quality: parsed.front.quality,
        tokens,
        entry: ContextEntry {
            source: ContextSource::CapsuleFile,
            // Recorded and shown redacted (a secret in a file name).
            path: soba_core::redact::redact(&display_path(root, file)).text,
            sha256: Sha256::digest(text.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            text,
        },
    })
}

fn load(ctx: &Context, args: &CapsuleArgs, given: &Path) -> CliResult {
    let root = &ctx.workspace.root;
    let file = load_path(root, given);
    let text = read_capsule_text(root, &file)?;
    let (summary, log) = session(ctx, args)?;
    let model = session_model(ctx, args, &log)?;
    let setup = ModelSetup::resolve(ctx, &model)?;
    let budget = setup.budget(ctx)?;
    let counter = BpeCounter::new(setup.info.tokenizer);
    let loadable = check_capsule_file(root, &file, text, budget.auto_limit(), &counter)?;
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
pub(crate) struct HandoffInput<'a> {
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
pub(crate) struct Handoff {
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
pub(crate) async fn create_handoff(input: HandoffInput<'_>) -> CliResult<Handoff> {
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
        crate::output::errln!("{note}");
    }
    // The whole live input, no tail: everything from the latest capsule's
    // retained tail on, with that capsule as the previous state.
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
        return Err(CliError::user(format!(
            "session {} has nothing to hand off yet",
            summary.id
        ))
        .hint("run a turn first with `soba run -c \"<prompt>\"`"));
    }
    let cwd = log.header().map(|header| header.cwd.clone());
    let project_dir = ctx.workspace.project_dir();
    let handoff = engine::runtime()?.block_on(create_handoff(HandoffInput {
        title,
        force,
        root: &ctx.workspace.root,
        project_dir: &project_dir,
        session: &summary.id,
        leaf: log.leaf().map(EntryId::as_str).unwrap_or_default(),
        cwd: cwd.as_deref(),
        span: &span,
        previous,
        summarizer: summarizer.as_deref(),
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
    if let (Some(dir), Ok(session_id)) = (summary.path.parent(), SessionId::parse(&summary.id)) {
        // The flight record is observability: failing to write it must not
        // undo the handoff the user asked for.
        let written = FlightAppender::open(
            flight_path(dir, &session_id),
            soba_store::log::Durability::Flush,
        )
        .and_then(|mut appender| appender.append(&handoff.record));
        if let Err(err) = written {
            crate::output::errln!("warning: flight record not written: {err}");
        }
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
    fn a_long_title_ends_at_its_first_sentence_when_that_fits() {
        let long = "We are extending loglens, our access-log analyzer. Over this session I'll ask for ten features.";
        assert_eq!(
            first_sentence(long, 80),
            "We are extending loglens, our access-log analyzer."
        );
        assert_eq!(
            first_sentence("Fix it. Then test.", 80),
            "Fix it. Then test."
        );
        // No sentence end within the limit, or too short a sentence: whole.
        let run_on = "x".repeat(100);
        assert_eq!(first_sentence(&run_on, 80), run_on);
        assert_eq!(
            first_sentence(&format!("Hi. {run_on}"), 80),
            format!("Hi. {run_on}")
        );
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

    /// Runs `read_capsule_text` (the reader of `soba capsule load` and the
    /// TUI's `/capsule load`) on a thread, failing if it takes over 5 s.
    fn read_promptly(file: &Path) -> CliResult<String> {
        let (sender, receiver) = std::sync::mpsc::channel();
        let file = file.to_path_buf();
        std::thread::spawn(move || {
            let _ = sender.send(read_capsule_text(Path::new("/nonexistent-root"), &file));
        });
        receiver
            .recv_timeout(Duration::from_secs(5))
            .expect("read_capsule_text returned within 5 s")
    }

    #[test]
    fn capsule_files_must_be_regular_files_of_at_most_1_mib() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.capsule.md");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let err = read_promptly(&fifo).unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "{} is a FIFO (named pipe), not a regular file: soba reads only regular files here; copy the content into a file and use that",
                fifo.display()
            )
        );
        assert_eq!(
            err.hints,
            ["a capsule file is a regular `.capsule.md` file"]
        );
        let folder = dir.path().join("folder.capsule.md");
        std::fs::create_dir_all(&folder).unwrap();
        for (name, target, kind) in [
            (
                "zero.capsule.md",
                Path::new("/dev/zero"),
                "a character device",
            ),
            ("dir.capsule.md", folder.as_path(), "a directory"),
        ] {
            let link = dir.path().join(name);
            std::os::unix::fs::symlink(target, &link).unwrap();
            let err = read_promptly(&link).unwrap_err();
            assert!(
                err.message
                    .starts_with(&format!("{} is {kind}, not a regular file", link.display())),
                "{}",
                err.message
            );
        }
        let stdin = dir.path().join("stdin.capsule.md");
        std::os::unix::fs::symlink("/dev/stdin", &stdin).unwrap();
        // Whatever the test's stdin is, it is not read: a terminal, pipe or
        // /dev/null is refused; a regular file would be read (and capped).
        let _ = read_promptly(&stdin);
        let big = dir.path().join("big.capsule.md");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(render::CAPSULE_FILE_MAX_BYTES as u64 + 1)
            .unwrap();
        let err = read_promptly(&big).unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "cannot load {}: {}",
                big.display(),
                render::CapsuleFileError::TooLarge {
                    bytes: render::CAPSULE_FILE_MAX_BYTES + 1,
                    max: render::CAPSULE_FILE_MAX_BYTES
                }
            )
        );
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
