//! The one error type of a workspace operation and every conversion into
//! it: what went wrong, its kind (which decides a front door's exit code:
//! soba-cli maps it), its cause and what to do about it.
//!
//! I/O failures are classified here once ([`environment_hint`]): a failure
//! the user or the machine can fix — permission denied, a read-only file
//! system, a full disk or quota, a missing file or folder, a file where a
//! folder should be — is an environment error (exit 1) with a hint saying
//! what to do, wherever it is found in an error's cause chain; 255 is left
//! for real internal failures.

use std::fmt;

use soba_core::terminal::sanitize;

/// What kind of failure, which decides a front door's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The command line was wrong (exit 2).
    Usage,
    /// Bad input, configuration or a failed turn (exit 1).
    User,
    /// A bug or an environment failure (exit 255).
    Internal,
    /// stdout was closed by the reader (a quiet exit 0).
    BrokenPipe,
    /// The user interrupted the command with SIGINT (exit 130).
    Interrupted,
    /// The command was asked to stop with SIGTERM (exit 143).
    Terminated,
    /// The terminal was closed (SIGHUP, exit 129).
    HungUp,
}

/// An error a front door reports: what went wrong, its cause, and what to
/// do. Built by the workspace's operations and by conversion from the
/// libraries' own errors (all here); shown by its `Display`.
#[derive(Debug, thiserror::Error)]
pub struct WorkspaceError {
    /// The kind, for the exit code.
    pub kind: ErrorKind,
    /// The message, lowercase, without a trailing period.
    pub message: String,
    /// The underlying cause, if any.
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// What the user can do about it.
    pub hints: Vec<String>,
}

impl WorkspaceError {
    /// Builds a user or configuration error (exit 1).
    pub fn user(message: impl Into<String>) -> Self {
        WorkspaceError {
            kind: ErrorKind::User,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// Builds a usage error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        WorkspaceError {
            kind: ErrorKind::Usage,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// Builds an internal error (exit 255).
    pub fn internal(message: impl Into<String>) -> Self {
        WorkspaceError {
            kind: ErrorKind::Internal,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// Adds a hint line.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// Attaches a cause. An I/O failure of the environment in its chain
    /// makes an internal error an environment one (exit 1) and adds what to
    /// do about it.
    pub fn caused_by(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        let source = source.into();
        if let Some(cause) = io_cause(&*source) {
            self = self.classified(cause);
        }
        self.source = Some(source);
        self
    }

    /// Returns the cause chain, outermost first (empty without a cause).
    pub fn causes(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        let mut current = self
            .source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static));
        std::iter::from_fn(move || {
            let cause = current?;
            current = cause.source();
            Some(cause)
        })
    }

    /// Applies the I/O classification of [`environment_hint`] to this error:
    /// an internal error becomes a user one, and the hint is added once.
    pub fn classified(mut self, cause: &std::io::Error) -> Self {
        if let Some(hint) = environment_hint(cause) {
            if self.kind == ErrorKind::Internal {
                self.kind = ErrorKind::User;
            }
            if !self.hints.iter().any(|existing| existing == hint) {
                self.hints.push(hint.to_owned());
            }
        }
        self
    }
}

/// Shows the error as the user sees it. Messages, causes and hints often
/// quote files and configuration values, so each part goes through the
/// terminal sanitizer: escape sequences are shown, never sent.
impl fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", sanitize(&self.message))?;
        for cause in self.causes() {
            write!(f, ": {}", sanitize(&cause.to_string()))?;
        }
        for hint in &self.hints {
            write!(f, "\nhint: {}", sanitize(hint))?;
        }
        Ok(())
    }
}

/// Returns what to do about an I/O failure the user or the machine can fix
/// (the environment), or `None` for one that points at a bug.
pub fn environment_hint(err: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind as Kind;
    // ELOOP has no stable `ErrorKind` yet (it reads as `Uncategorized`).
    if err.raw_os_error() == Some(libc::ELOOP) {
        return Some(
            "a symbolic link on the path loops (or links are nested too deeply): check it with `readlink -f` and give the real folder",
        );
    }
    let hint = match err.kind() {
        Kind::PermissionDenied => {
            "permission denied: check the owner and mode of the file and its folder (ls -l), or use another location (SOBA_HOME, --session-dir, --out)"
        }
        Kind::ReadOnlyFilesystem => {
            "the file system is read-only: remount it writable or use another location (SOBA_HOME, --session-dir, --out)"
        }
        Kind::StorageFull => "the disk is full: free some space (df -h) and run the command again",
        Kind::QuotaExceeded => {
            "the disk quota is exhausted: free some space (quota -s) and run the command again"
        }
        Kind::FileTooLarge => {
            "the file is larger than the file system allows: use another location"
        }
        Kind::NotFound => "a file or folder does not exist: check the path",
        Kind::NotADirectory | Kind::IsADirectory => {
            "a file is where a folder should be, or a folder where a file should be: check the path"
        }
        // Creating a folder where a file (or a dangling link) already is.
        Kind::AlreadyExists => {
            "something already exists at that path (a file where a folder should be, or a dangling link): check the path or choose another"
        }
        Kind::InvalidFilename => {
            "the file name is too long or not allowed here: use a shorter path"
        }
        _ => return None,
    };
    Some(hint)
}

/// Returns the first I/O error in `err`'s cause chain, `err` included.
fn io_cause<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut current = Some(err);
    while let Some(cause) = current {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        current = cause.source();
    }
    None
}

impl From<std::io::Error> for WorkspaceError {
    fn from(err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            return WorkspaceError {
                kind: ErrorKind::BrokenPipe,
                message: String::new(),
                source: None,
                hints: Vec::new(),
            };
        }
        WorkspaceError::internal("i/o failed").caused_by(err)
    }
}

impl From<crate::config::ConfigError> for WorkspaceError {
    fn from(err: crate::config::ConfigError) -> Self {
        let hint = err.hint();
        let mut cli_error = match &err {
            crate::config::ConfigError::BadAssignment { .. } => {
                WorkspaceError::usage(err.to_string())
            }
            _ => WorkspaceError::user(err.to_string()),
        };
        if let Some(hint) = hint {
            cli_error = cli_error.hint(hint);
        }
        cli_error
    }
}

impl From<crate::paths::PathsError> for WorkspaceError {
    fn from(err: crate::paths::PathsError) -> Self {
        let message = err.to_string();
        let cli_error = match std::error::Error::source(&err) {
            Some(cause) => WorkspaceError::user(format!("{message}: {cause}")),
            None => WorkspaceError::user(message),
        };
        match io_cause(&err) {
            Some(cause) => cli_error.classified(cause),
            None => cli_error,
        }
    }
}

impl From<soba_store::StoreError> for WorkspaceError {
    fn from(err: soba_store::StoreError) -> Self {
        use soba_store::StoreError;
        match err {
            StoreError::Io { .. } | StoreError::Encode { .. } => {
                WorkspaceError::internal("session storage failed").caused_by(err)
            }
            other => WorkspaceError::user(other.to_string()),
        }
    }
}

impl From<soba_store::import::ImportError> for WorkspaceError {
    fn from(err: soba_store::import::ImportError) -> Self {
        let message = err.to_string();
        let cli_error = match std::error::Error::source(&err) {
            Some(cause) => WorkspaceError::user(format!("{message}: {cause}")),
            None => WorkspaceError::user(message),
        };
        match io_cause(&err) {
            Some(cause) => cli_error.classified(cause),
            None => cli_error,
        }
    }
}

impl From<soba_store::untrusted::UntrustedReadError> for WorkspaceError {
    fn from(err: soba_store::untrusted::UntrustedReadError) -> Self {
        use soba_store::untrusted::UntrustedReadError;
        match &err {
            UntrustedReadError::Io { source, .. } => {
                WorkspaceError::user(format!("{err}: {source}"))
            }
            _ => WorkspaceError::user(err.to_string()),
        }
    }
}

impl From<soba_store::output::OutputPathError> for WorkspaceError {
    fn from(err: soba_store::output::OutputPathError) -> Self {
        use soba_store::output::OutputPathError;
        let hint = match &err {
            OutputPathError::Outside { .. } | OutputPathError::ThroughLink { .. } => {
                Some("give a path inside the workspace, or an absolute path to write elsewhere")
            }
            OutputPathError::Link { .. } => {
                Some("remove the link or choose another path; soba never follows it")
            }
            OutputPathError::Exists { .. } => {
                Some("pass --force to overwrite it, or choose another path")
            }
            OutputPathError::NotRegular { .. } | OutputPathError::NoFileName { .. } => {
                Some("choose a path naming a file")
            }
            _ => None,
        };
        let message = match std::error::Error::source(&err) {
            Some(cause) => format!("{err}: {cause}"),
            None => err.to_string(),
        };
        let cli_error = WorkspaceError::user(message);
        match hint {
            Some(hint) => cli_error.hint(hint),
            None => cli_error,
        }
    }
}

impl From<soba_engine::EngineError> for WorkspaceError {
    fn from(err: soba_engine::EngineError) -> Self {
        match err {
            soba_engine::EngineError::Store(store) => WorkspaceError::from(store),
            other => {
                let cli_error = WorkspaceError::user(other.to_string());
                match io_cause(&other) {
                    Some(cause) => cli_error.classified(cause),
                    None => cli_error,
                }
            }
        }
    }
}

/// The result of a workspace operation.
pub type Result<T = (), E = WorkspaceError> = std::result::Result<T, E>;
