//! Writing an imported session as a SOBA session file, and finding the
//! sessions an output folder already holds from earlier imports, so the
//! same source session is never imported twice (SPEC §3.4).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, json};

use super::ImportedSession;
use crate::error::StoreError;
use crate::log::write_new_session;
use crate::reader::{list_sessions, read_header, session_path};
use crate::session::{ImportedFrom, SessionHeader, SessionId, SystemMinter};

/// Identifies a source session: its canonical file (the path as given when
/// it cannot be resolved) and its original id.
pub fn import_key(source: &Path, original_id: &str) -> (String, String) {
    let path = std::fs::canonicalize(source).unwrap_or_else(|_| source.to_path_buf());
    (path.display().to_string(), original_id.to_owned())
}

/// An earlier import of a source session, found in an output folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousImport {
    /// The SOBA session id it was written as.
    pub id: String,
    /// Its session file.
    pub path: PathBuf,
    /// How many entries the source session had then (`sourceEntries` of
    /// its header; `None` for imports written before it was recorded).
    pub source_entries: Option<usize>,
}

/// Finds the sessions of `dir` that were imported, by [`import_key`]: the
/// newest import of each source session (the one of most entries). A
/// folder that cannot be listed, or a session whose header cannot be read,
/// gives nothing.
pub fn previous_imports(dir: &Path) -> HashMap<(String, String), PreviousImport> {
    let mut found: HashMap<(String, String), PreviousImport> = HashMap::new();
    let Ok(sessions) = list_sessions(dir) else {
        return found;
    };
    for summary in sessions {
        let Ok(header) = read_header(&summary.path) else {
            continue;
        };
        if let Some(from) = header.imported_from
            && let Some(original_id) = from.original_id
        {
            let source_entries = from
                .extra
                .get(SOURCE_ENTRIES)
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| usize::try_from(n).ok());
            let import = PreviousImport {
                id: header.id.as_str().to_owned(),
                path: summary.path,
                source_entries,
            };
            match found.entry((from.path, original_id)) {
                std::collections::hash_map::Entry::Occupied(mut slot) => {
                    if import.source_entries > slot.get().source_entries {
                        slot.insert(import);
                    }
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(import);
                }
            }
        }
    }
    found
}

/// The `importedFrom` field holding how many entries the source session
/// had when it was imported, so a source that has grown since (the agent
/// went on with it) is imported again rather than skipped.
const SOURCE_ENTRIES: &str = "sourceEntries";

/// Writes one imported session as a new SOBA session file in `out_dir`
/// (whole or not at all: a full disk or a refused entry leaves no partial
/// session behind) and returns its id and path. A session that names no
/// working folder gets `root`.
///
/// # Errors
///
/// The [`StoreError`] of [`write_new_session`].
pub fn write_session(
    session: &ImportedSession,
    out_dir: &Path,
    root: &Path,
) -> Result<(SessionId, PathBuf), StoreError> {
    let mut minter = SystemMinter;
    let cwd = session
        .cwd
        .clone()
        .unwrap_or_else(|| root.display().to_string());
    let mut header = SessionHeader::new(&mut minter, cwd);
    if let Some(created_at) = &session.created_at {
        header.created_at = created_at.clone();
    }
    let mut extra = Map::new();
    if let Some(model) = &session.model {
        extra.insert("model".into(), json!(model));
    }
    if let Some(window) = session.context_window {
        extra.insert("contextWindow".into(), json!(window));
    }
    extra.insert(SOURCE_ENTRIES.into(), json!(session.entries.len()));
    let (source_path, original_id) = import_key(&session.source, &session.original_id);
    header.imported_from = Some(ImportedFrom {
        format: session.format.as_str().to_owned(),
        path: source_path,
        original_id: Some(original_id),
        extra,
    });
    let path = session_path(out_dir, &header.id);
    write_new_session(&path, &header, &session.entries)?;
    Ok((header.id, path))
}
