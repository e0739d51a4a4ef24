//! The store's error type: failures of the file system and of the lock.
//! Damaged log content is never an error; it is a [`crate::Diagnostic`].

use std::path::PathBuf;

/// Everything that can go wrong while storing or finding sessions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file operation failed (open, read, write, fsync, list). A retry can
    /// help when the cause is transient (disk full, interrupted).
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done, e.g. `append to`.
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the session open for writing. Retrying helps
    /// only after that process ends.
    #[error(
        "session {session} is already open for writing by another process{} ({path}); close it there or resume another session",
        holder.as_ref().map(|holder| format!(" ({holder})")).unwrap_or_default()
    )]
    Locked {
        /// The session's id (from its header, else its file name).
        session: String,
        /// The session file.
        path: PathBuf,
        /// The process holding the lock, `pid N, command`, when the system
        /// says (Linux's `/proc/locks`).
        holder: Option<String>,
    },
    /// `create` found a file already at the path. Not retryable: pick a new id.
    #[error("session file {path} already exists; choose a new session id")]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// A file opened for appending has no valid session header on line 1.
    /// Not retryable: the file is not a SOBA session (try `soba import`).
    #[error("{path} is not a soba session ({reason}); import it with `soba import` instead")]
    NotASession {
        /// The file.
        path: PathBuf,
        /// Why line 1 was rejected.
        reason: String,
    },
    /// An entry could not be encoded (an unknown entry type without its raw
    /// line, or a value JSON cannot hold). Not retryable.
    #[error("cannot encode entry {id}: {reason}")]
    Encode {
        /// The entry's id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A session id contains characters unsafe in a file name. Not retryable.
    #[error("invalid session id {id:?}: use letters, digits, `-` and `_` only")]
    InvalidSessionId {
        /// The rejected id.
        id: String,
    },
    /// No session in the directory matches the id prefix. Not retryable;
    /// list sessions with `soba sessions`.
    #[error("no session matching {prefix:?} in {dir}; list them with `soba sessions`")]
    SessionNotFound {
        /// The prefix looked for.
        prefix: String,
        /// The sessions directory.
        dir: PathBuf,
    },
    /// More than one session matches the id prefix. Not retryable; give a
    /// longer prefix.
    #[error("{prefix:?} matches {} sessions ({}); give a longer prefix", candidates.len(), candidates.join(", "))]
    AmbiguousSession {
        /// The prefix looked for.
        prefix: String,
        /// The ids that match.
        candidates: Vec<String>,
    },
    /// The session file at the path is no longer the one this writer
    /// opened: another program replaced it (an editor saving by rename) or
    /// removed it. The append is refused, so nothing is written to a file
    /// no path names; the lines the file at the path lacks went to a
    /// recovery file when one could be made. Not retryable.
    #[error("{}", replaced_message(path, how, session, recovery.as_deref(), recovery_error.as_ref()))]
    LogReplaced {
        /// The session file's path.
        path: PathBuf,
        /// `replaced`, `removed`, `truncated` or `moved away with its
        /// folder`.
        how: &'static str,
        /// The session's id.
        session: String,
        /// The recovery file (`<id>.recovered-<time>.jsonl`), when made.
        recovery: Option<PathBuf>,
        /// Why the recovery file could not be written, when it could not
        /// (in the message, so not a `#[source]`).
        recovery_error: Option<std::io::Error>,
    },
    /// Appending to the session file failed (a full disk, a file size
    /// limit, a quota): part of the line may be on disk, ended by a newline
    /// before the next one. The line, and every later one from this writer,
    /// went to a recovery file when one could be made. Retryable once the
    /// cause is fixed, in a new command.
    #[error("{}", append_failed_message(path, session, cause, recovery.as_deref(), recovery_error.as_ref()))]
    AppendFailed {
        /// The session file's path.
        path: PathBuf,
        /// The session's id.
        session: String,
        /// Why the append failed (in the message, so not a `#[source]`).
        cause: std::io::Error,
        /// The recovery file (`<id>.recovered-<time>.jsonl`), when made.
        recovery: Option<PathBuf>,
        /// Why the recovery file could not be written, when it could not.
        recovery_error: Option<std::io::Error>,
    },
    /// Two or more files in the sessions folder carry the session id looked
    /// for in their headers (a copy, or files joined by hand). Not
    /// retryable: pass the file meant by its path, or move the copy away.
    #[error("session {id} is in {} files ({}); pass the one meant by its path, or move the other out of the sessions folder", paths.len(), paths.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", "))]
    DuplicateSession {
        /// The shared header id.
        id: String,
        /// The files carrying it.
        paths: Vec<PathBuf>,
    },
    /// A session path names something other than a regular file (a FIFO,
    /// a device, a directory). Not retryable: give a session file.
    #[error(transparent)]
    Unreadable(crate::untrusted::UntrustedReadError),
}

/// Says what happened to a replaced log and where its unwritten lines are.
fn replaced_message(
    path: &std::path::Path,
    how: &str,
    session: &str,
    recovery: Option<&std::path::Path>,
    recovery_error: Option<&std::io::Error>,
) -> String {
    let head = format!(
        "the log of session {session} ({}) was {how} by another program while soba was writing it, so nothing more is written to it",
        path.display()
    );
    match (recovery, recovery_error) {
        (Some(recovery), _) => format!(
            "{head}; the entries missing from the file now at that path are in {recovery}: look at them with `cat {recovery}`, and append them to the log (`cat {recovery} >> {path}`) if it should keep them",
            recovery = recovery.display(),
            path = path.display()
        ),
        (None, Some(err)) => format!(
            "{head}; the entries not written there are lost: no recovery file could be made beside it ({err})"
        ),
        (None, None) => format!("{head}; the entries not written there are lost"),
    }
}

/// Says why an append failed, what to do, and where the line went.
fn append_failed_message(
    path: &std::path::Path,
    session: &str,
    cause: &std::io::Error,
    recovery: Option<&std::path::Path>,
    recovery_error: Option<&std::io::Error>,
) -> String {
    let remedy = match cause.raw_os_error() {
        Some(code) if code == libc::ENOSPC => "free space on that disk",
        Some(code) if code == libc::EFBIG => {
            "the log reached the largest file this process may write (`ulimit -f`) or the file system allows; raise the limit or start a new session"
        }
        Some(code) if code == libc::EDQUOT => "free space within your disk quota",
        _ => "fix the cause",
    };
    let head = format!(
        "cannot append to the log of session {session} ({}): {cause}",
        path.display()
    );
    match (recovery, recovery_error) {
        (Some(recovery), _) => format!(
            "{head}; the entries not written are in {recovery}: {remedy}, then append them to the log (`cat {recovery} >> {path}`)",
            recovery = recovery.display(),
            path = path.display()
        ),
        (None, Some(err)) => format!(
            "{head}; the entries not written are lost: no recovery file could be made ({err}); {remedy}"
        ),
        (None, None) => format!("{head}; the entries not written are lost; {remedy}"),
    }
}

impl StoreError {
    /// Wraps a failure to open a session file: an I/O failure stays
    /// [`StoreError::Io`] (action `open`), anything else is
    /// [`StoreError::Unreadable`].
    pub(crate) fn open(err: crate::untrusted::UntrustedReadError) -> Self {
        match err {
            crate::untrusted::UntrustedReadError::Io { path, source } => StoreError::Io {
                action: "open",
                path,
                source,
            },
            other => StoreError::Unreadable(other),
        }
    }

    /// Wraps an I/O error with what was being done to which path.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        StoreError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
