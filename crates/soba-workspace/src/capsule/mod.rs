//! Portable capsules (SPEC §12) as every front door uses them: a
//! capsule's title and redacted `.capsule.md`, finding one by id (in a
//! session, or the session of its folder that holds it), the listing of a
//! session's capsules and of the workspace's capsule files, and writing
//! under the workspace. [`load`] reads and checks a file for loading;
//! [`handoff`] makes a handoff of the whole live input; [`list`] words
//! `soba capsule list`.

pub mod handoff;
pub mod list;
pub mod load;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use soba_core::id::shortest_unique_len;
use soba_core::render::{self, CapsuleFileHeader, CapsuleView, RenderedCapsuleFile};
use soba_core::{Capsule, ContextEntry, ContextSource, Entry, EntryBody, EntryId, TokenCounter};
use soba_store::reader::{SessionLog, SessionSummary, read_log};

use crate::context::Context;
use crate::error::{Result, WorkspaceError};

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
pub fn write_file(root: &Path, path: &Path, text: &str, force: bool) -> Result {
    soba_store::output::write_output(root, path, text.as_bytes(), force)?;
    Ok(())
}

/// Resolves an export path: relative paths must stay inside the
/// workspace; absolute ones may go anywhere (SPEC §12). Links are checked
/// when the file is written ([`write_file`]).
pub fn export_path(root: &Path, given: &Path) -> Result<PathBuf> {
    Ok(soba_store::output::resolve_output(root, given)?)
}

/// Shows a path relative to the workspace when it is inside it.
pub fn display_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).map_or_else(
        |_| path.display().to_string(),
        |rel| rel.display().to_string(),
    )
}

/// A capsule, or a capsule file loaded into the session, as the listings
/// show it (`soba capsule list`, `/capsule`).
#[derive(Debug, Clone, Copy)]
pub struct Listed<'a> {
    /// The entry.
    pub entry: &'a Entry,
    /// Whether it is on the live path (else rewound past).
    pub on_path: bool,
    /// What it is.
    pub kind: ListedKind<'a>,
}

/// What a [`Listed`] entry is.
#[derive(Debug, Clone, Copy)]
pub enum ListedKind<'a> {
    /// A capsule the session made.
    Capsule(&'a Capsule),
    /// A `.capsule.md` loaded as context.
    Loaded(&'a ContextEntry),
}

/// Returns every capsule and loaded capsule file of `log`, in log order,
/// each marked on the live path or not.
pub fn listing(log: &SessionLog) -> Vec<Listed<'_>> {
    let on_path: HashSet<&EntryId> = log.path().iter().map(|logged| &logged.entry.id).collect();
    log.entries()
        .iter()
        .filter_map(|logged| {
            let kind = match &logged.entry.body {
                EntryBody::Capsule(capsule) => ListedKind::Capsule(capsule),
                EntryBody::Context(context) if context.source == ContextSource::CapsuleFile => {
                    ListedKind::Loaded(context)
                }
                _ => return None,
            };
            Some(Listed {
                entry: &logged.entry,
                on_path: on_path.contains(&logged.entry.id),
                kind,
            })
        })
        .collect()
}

/// A folder of `.capsule.md` files under `.soba/`.
#[derive(Debug, Clone)]
pub struct CapsuleFolder {
    /// `capsules` (handoffs, exports) or `memory` (Project Memory).
    pub dir: &'static str,
    /// The folder.
    pub folder: PathBuf,
    /// Its `.capsule.md` files, sorted (none when it cannot be read).
    pub files: Vec<PathBuf>,
}

/// Returns the workspace's two capsule folders, `.soba/capsules/` and
/// `.soba/memory/`, with their files.
pub fn capsule_folders(project_dir: &Path) -> Vec<CapsuleFolder> {
    ["capsules", "memory"]
        .into_iter()
        .map(|dir| {
            let folder = project_dir.join(dir);
            let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
                .map(|read_dir| {
                    read_dir
                        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                        .filter(|path| {
                            path.file_name()
                                .is_some_and(|name| name.to_string_lossy().ends_with(".capsule.md"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            CapsuleFolder { dir, folder, files }
        })
        .collect()
}

/// Reads a capsule file beneath the workspace `root` (a link or FIFO is
/// named, never followed or waited on) and parses its front matter, or
/// says why it cannot be.
pub fn describe_file(
    root: &Path,
    file: &Path,
) -> std::result::Result<render::ParsedCapsuleFile, String> {
    file.strip_prefix(root)
        .map_err(|err| err.to_string())
        .and_then(|rel| {
            crate::setup::read_workspace_file(root, rel, render::CAPSULE_FILE_MAX_BYTES as u64)
                .map_err(|err| err.to_string())
        })
        .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned()))
        .and_then(|text| render::parse_capsule_file(&text).map_err(|err| err.to_string()))
}

/// Finds a capsule entry among `entries` by full or short id.
pub fn find_capsule<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    wanted: &str,
) -> Result<(&'a EntryId, &'a Capsule)> {
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
                WorkspaceError::user(format!("no capsule {wanted} in this session")).hint(format!(
                    "list the capsules with `soba capsule list` (in soba: /capsule); {example}"
                )),
            )
        }
        several => {
            let ids: Vec<&str> = several.iter().map(|(id, _)| id.as_str()).collect();
            Err(WorkspaceError::user(format!(
                "{wanted} matches {} capsules ({}); give more digits",
                ids.len(),
                ids.join(", ")
            )))
        }
    }
}

/// A capsule rendered for export, not yet written.
pub struct Export {
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
pub struct ExportSource<'a, E> {
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
pub fn prepare_export<'a, E: IntoIterator<Item = &'a Entry> + Clone>(
    root: &Path,
    source: ExportSource<'_, E>,
    wanted: &str,
    given: &Path,
) -> Result<Export> {
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
///
/// `session` is the session named (`--session`), if any. Returns the
/// session, its log and, when it is not the one first searched, the line
/// saying so.
pub fn session_holding(
    ctx: &Context,
    session: Option<&str>,
    wanted: &str,
) -> Result<(SessionSummary, SessionLog, Option<String>)> {
    let summary = ctx.select_session(session)?;
    let log = read_log(&summary.path)?;
    let entries = || log.entries().iter().map(|logged| &logged.entry);
    let Err(err) = find_capsule(entries(), wanted) else {
        return Ok((summary, log, None));
    };
    if session.is_some() || !err.message.starts_with("no capsule") {
        return Err(err);
    }
    let searched = summary.path.parent().map_or_else(
        || summary.id.clone(),
        |dir| crate::context::session_prefix(dir, &summary.id),
    );
    let not_here = || {
        WorkspaceError::user(format!(
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
            let note = format!(
                "{wanted} is in session {}, not in the most recent one ({searched}): exporting it from there",
                crate::context::session_prefix(dir, &other.id)
            );
            Ok((other, other_log, Some(note)))
        }
        0 => Err(not_here()),
        n => Err(WorkspaceError::user(format!(
            "{wanted} is not in session {searched} (the workspace's most recent) but in {n} others"
        ))
        .hint("name the session with --session ID")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
