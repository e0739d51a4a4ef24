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
        "session {session} is already open for writing by another process ({path}); close it there or resume another session"
    )]
    Locked {
        /// The session's id (from its header, else its file name).
        session: String,
        /// The session file.
        path: PathBuf,
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
    /// A session path names something other than a regular file (a FIFO,
    /// a device, a directory). Not retryable: give a session file.
    #[error(transparent)]
    Unreadable(crate::untrusted::UntrustedReadError),
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
