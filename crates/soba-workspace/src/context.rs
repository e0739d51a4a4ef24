//! What every command that touches the workspace starts from: the
//! environment, the workspace root, the locations of SOBA's files and the
//! loaded configuration, plus finding sessions.

use std::path::{Path, PathBuf};

use soba_store::reader::{SessionSummary, find_session, has_content, list_sessions};

use crate::config::{self, LoadInput, Loaded};
use crate::error::{Result, WorkspaceError};
use crate::paths::{Env, Locations, Workspace};

/// The fewest characters of a session id shown (the first 8 hex digits of a
/// uuid v7 are its timestamp).
pub const MIN_SHORT_SESSION: usize = 8;

/// What a front door was told about the workspace (the global flags of
/// `soba`): `--cwd`, `--session-dir` and every `--set PATH=VALUE`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The workspace root (default: the current directory).
    pub cwd: Option<PathBuf>,
    /// The sessions directory (default: under `$SOBA_HOME` or
    /// `$XDG_DATA_HOME/soba`).
    pub session_dir: Option<PathBuf>,
    /// Settings given last, after every other source.
    pub set: Vec<String>,
}

/// The environment, workspace, locations and configuration of one command.
#[derive(Debug, Clone)]
pub struct Context {
    /// The captured environment.
    pub env: Env,
    /// The workspace root and slug.
    pub workspace: Workspace,
    /// Where the config, sessions and logs live.
    pub locations: Locations,
    /// The merged configuration.
    pub loaded: Loaded,
}

impl Context {
    /// Loads everything from the process environment and the global flags.
    pub fn load(global: &Options) -> Result<Self> {
        let cwd = match &global.cwd {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().map_err(|err| {
                WorkspaceError::user("cannot read the current directory")
                    .caused_by(err)
                    .hint("pass the workspace root with --cwd DIR")
            })?,
        };
        Context::load_with(Env::from_process(), &cwd, global)
    }

    /// Loads everything from an explicit environment and directory.
    pub fn load_with(env: Env, cwd: &Path, global: &Options) -> Result<Self> {
        let workspace = Workspace::at(cwd)?;
        if let Some(dir) = &global.session_dir
            && let Ok(metadata) = std::fs::metadata(dir)
            && !metadata.is_dir()
        {
            return Err(WorkspaceError::user(format!(
                "--session-dir {} is not a folder",
                dir.display()
            ))
            .hint("pass the folder that holds the session logs (it is created when missing)"));
        }
        let locations = Locations::resolve(&env, &workspace, global.session_dir.as_deref())?;
        let project_file = workspace.project_config();
        let loaded = config::load(&LoadInput {
            env: &env,
            user_file: &locations.user_config,
            project_file: Some(&project_file),
            sets: &global.set,
        })?;
        Ok(Context {
            env,
            workspace,
            locations,
            loaded,
        })
    }

    /// Returns the typed configuration.
    pub fn config(&self) -> &config::Config {
        &self.loaded.config
    }

    /// Finds a session: a path to a session file, an id or id prefix in
    /// the workspace's sessions folder, or (with `None`) the most recent one
    /// that holds something of the user's (an unused session, left by a
    /// crash or an older version, is passed over).
    pub fn select_session(&self, wanted: Option<&str>) -> Result<SessionSummary> {
        let dir = &self.locations.sessions_dir;
        match wanted {
            Some(text) => {
                let as_path = PathBuf::from(text);
                if text.ends_with(".jsonl") && as_path.is_file() {
                    return Ok(summary_of_file(&as_path));
                }
                match find_session(dir, text) {
                    Err(err @ soba_store::StoreError::SessionNotFound { .. }) => {
                        Err(not_a_session_file(&as_path).unwrap_or_else(|| err.into()))
                    }
                    found => Ok(found?),
                }
            }
            None => list_sessions(dir)?
                .into_iter()
                .find(|summary| summary.problem.is_none() && has_content(&summary.path))
                .ok_or_else(|| {
                    WorkspaceError::user(format!("no sessions in {}", dir.display()))
                        .hint("start one with `soba run \"<prompt>\"`, import one with `soba import`, or pass --session ID")
                }),
        }
    }
}

/// Says why `path`, which names no session by id, is not a session file
/// either, when something is there that is not a regular file: a folder,
/// a special file, a symbolic link loop. `None` when nothing is there or
/// it is a regular file.
fn not_a_session_file(path: &Path) -> Option<WorkspaceError> {
    let shown = path.display();
    let link = std::fs::symlink_metadata(path).ok()?;
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        // ELOOP (40 on Linux, 62 on macOS and the BSDs): the links never
        // reach a file.
        Err(err)
            if link.file_type().is_symlink() && matches!(err.raw_os_error(), Some(40 | 62)) =>
        {
            return Some(
                WorkspaceError::user(format!(
                    "{shown} is a symbolic link loop (following its links never reaches a file), not a session file"
                ))
                .hint("point the link at a session file, or pass the file itself"),
            );
        }
        Err(err) if link.file_type().is_symlink() => {
            return Some(
                WorkspaceError::user(format!(
                    "{shown} is a symbolic link whose target cannot be read, not a session file"
                ))
                .caused_by(err),
            );
        }
        Err(_) => return None,
    };
    if metadata.is_dir() {
        return Some(
            WorkspaceError::user(format!("{shown} is a folder, not a session file")).hint(format!(
                "pass a session file in it, import the transcripts it holds with `soba import {shown}`, or replay them with `soba replay {shown}`"
            )),
        );
    }
    if metadata.is_file() {
        return None;
    }
    use std::os::unix::fs::FileTypeExt;
    let file_type = metadata.file_type();
    let kind = if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device"
    } else {
        "a special file"
    };
    Some(
        WorkspaceError::user(format!(
            "{shown} is {kind}, not a session file: soba reads sessions only from regular files"
        ))
        .hint("copy what it holds into a file and pass that file"),
    )
}

/// Returns the length of the shortest prefix (at least `min`) that tells
/// every id apart.
pub fn shortest_unique_prefix(ids: &[&str], min: usize) -> usize {
    let mut sorted: Vec<&str> = ids.to_vec();
    sorted.sort_unstable();
    let shared = sorted
        .windows(2)
        .map(|pair| {
            pair[0]
                .chars()
                .zip(pair[1].chars())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    (shared + 1).max(min)
}

/// Returns the shortest prefix of session `id` (at least
/// [`MIN_SHORT_SESSION`] characters) that no other session of `dir`
/// starts with: how every hint to resume a session spells it, so `soba -r`
/// takes it back (ids are time-ordered: sessions started within about a
/// minute share their first 8 characters).
pub fn session_prefix(dir: &Path, id: &str) -> String {
    let ids: Vec<String> = list_sessions(dir)
        .map(|sessions| sessions.into_iter().map(|summary| summary.id).collect())
        .unwrap_or_default();
    let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    if !ids.contains(&id) {
        ids.push(id);
    }
    let len = shortest_unique_prefix(&ids, MIN_SHORT_SESSION);
    id.chars().take(len).collect()
}

/// Returns the line printed when a session is left: its shortest unique id
/// prefix among the sessions of `dir` and how to resume it.
pub fn resume_hint(dir: &Path, id: &str) -> String {
    let short = session_prefix(dir, id);
    format!("session {short}… saved — resume with `soba -c` (or `soba -r {short}`)")
}

/// Describes a session file given by path.
fn summary_of_file(path: &Path) -> SessionSummary {
    let metadata = std::fs::metadata(path).ok();
    let header = soba_store::reader::read_header(path);
    let stem = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (id, created_at, cwd, problem) = match header {
        Ok(header) => (
            header.id.as_str().to_owned(),
            Some(header.created_at),
            Some(header.cwd),
            None,
        ),
        Err(problem) => (stem, None, None, Some(problem)),
    };
    SessionSummary {
        id,
        path: path.to_path_buf(),
        created_at,
        cwd,
        size: metadata.as_ref().map_or(0, std::fs::Metadata::len),
        modified: metadata.and_then(|m| m.modified().ok()),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36 item 5: two sessions started within the same minute share
    /// their first 8 characters; the hint spells each one with the prefix
    /// that names it alone, and `soba -r` finds it by that prefix.
    #[test]
    fn a_resume_hint_names_its_session_alone() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ids = [
            "01a2b3c4-d5e6-7000-8000-000000000001",
            "01a2b3c4-d5f0-7000-8000-000000000002",
        ];
        for id in ids {
            let header = format!(
                r#"{{"type":"session","schemaVersion":1,"id":"{id}","createdAt":"2025-01-01T00:00:00.000Z","cwd":"/w","os":"linux","memory":[]}}"#
            );
            std::fs::write(dir.path().join(format!("{id}.jsonl")), header + "\n")
                .expect("a session");
        }
        assert_eq!(
            resume_hint(dir.path(), ids[0]),
            "session 01a2b3c4-d5e… saved — resume with `soba -c` (or `soba -r 01a2b3c4-d5e`)"
        );
        for id in ids {
            let prefix = session_prefix(dir.path(), id);
            let found = soba_store::reader::find_session(dir.path(), &prefix).expect("one");
            assert_eq!(found.id, id);
        }
        // Alone in its folder, a session keeps the 8-character prefix.
        let alone = tempfile::tempdir().expect("a temporary directory");
        assert_eq!(session_prefix(alone.path(), ids[0]), "01a2b3c4");
    }
}
