//! The CLI's one error type and every conversion into it, with exit codes:
//! usage 2, user or configuration 1, internal 255, broken pipe a quiet 0.

use std::fmt;
use std::io::Write;
use std::process::ExitCode;

/// What kind of failure, which decides the exit code.
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
}

/// An error the CLI reports: what went wrong, its cause, and what to do.
#[derive(Debug)]
pub struct CliError {
    /// The kind, for the exit code.
    pub kind: ErrorKind,
    /// The message, lowercase, without a trailing period.
    pub message: String,
    /// The underlying cause, if any.
    pub source: Option<anyhow::Error>,
    /// What the user can do about it.
    pub hints: Vec<String>,
}

impl CliError {
    /// Builds a user or configuration error (exit 1).
    pub fn user(message: impl Into<String>) -> Self {
        CliError {
            kind: ErrorKind::User,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// Builds a usage error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            kind: ErrorKind::Usage,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// Builds an internal error (exit 255).
    pub fn internal(message: impl Into<String>) -> Self {
        CliError {
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

    /// Attaches a cause.
    pub fn caused_by(mut self, source: impl Into<anyhow::Error>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Returns the exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ErrorKind::Usage => 2,
            ErrorKind::User => 1,
            ErrorKind::Internal => 255,
            ErrorKind::BrokenPipe => 0,
            ErrorKind::Interrupted => 130,
        }
    }

    /// Prints the error (unless it is a broken pipe) and returns the exit code.
    pub fn report(&self) -> ExitCode {
        if self.kind != ErrorKind::BrokenPipe {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "{self}");
        }
        ExitCode::from(self.exit_code())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)?;
        if let Some(source) = &self.source {
            for cause in source.chain() {
                write!(f, ": {cause}")?;
            }
        }
        for hint in &self.hints {
            write!(f, "\nhint: {hint}")?;
        }
        Ok(())
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            return CliError {
                kind: ErrorKind::BrokenPipe,
                message: String::new(),
                source: None,
                hints: Vec::new(),
            };
        }
        CliError::internal("i/o failed").caused_by(err)
    }
}

impl From<crate::config::ConfigError> for CliError {
    fn from(err: crate::config::ConfigError) -> Self {
        let hint = err.hint();
        let mut cli_error = match &err {
            crate::config::ConfigError::BadAssignment { .. } => CliError::usage(err.to_string()),
            _ => CliError::user(err.to_string()),
        };
        if let Some(hint) = hint {
            cli_error = cli_error.hint(hint);
        }
        cli_error
    }
}

impl From<crate::paths::PathsError> for CliError {
    fn from(err: crate::paths::PathsError) -> Self {
        let message = err.to_string();
        match std::error::Error::source(&err) {
            Some(cause) => CliError::user(format!("{message}: {cause}")),
            None => CliError::user(message),
        }
    }
}

impl From<soba_store::StoreError> for CliError {
    fn from(err: soba_store::StoreError) -> Self {
        use soba_store::StoreError;
        match err {
            StoreError::Io { .. } | StoreError::Encode { .. } => {
                CliError::internal("session storage failed").caused_by(err)
            }
            other => CliError::user(other.to_string()),
        }
    }
}

impl From<soba_store::import::ImportError> for CliError {
    fn from(err: soba_store::import::ImportError) -> Self {
        let message = err.to_string();
        match std::error::Error::source(&err) {
            Some(cause) => CliError::user(format!("{message}: {cause}")),
            None => CliError::user(message),
        }
    }
}

impl From<soba_store::untrusted::UntrustedReadError> for CliError {
    fn from(err: soba_store::untrusted::UntrustedReadError) -> Self {
        use soba_store::untrusted::UntrustedReadError;
        match &err {
            UntrustedReadError::Io { source, .. } => CliError::user(format!("{err}: {source}")),
            _ => CliError::user(err.to_string()),
        }
    }
}

impl From<soba_store::output::OutputPathError> for CliError {
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
        let cli_error = CliError::user(message);
        match hint {
            Some(hint) => cli_error.hint(hint),
            None => cli_error,
        }
    }
}

impl From<soba_engine::EngineError> for CliError {
    fn from(err: soba_engine::EngineError) -> Self {
        match err {
            soba_engine::EngineError::Store(store) => CliError::from(store),
            other => CliError::user(other.to_string()),
        }
    }
}

/// The CLI's result type.
pub type CliResult<T = ()> = Result<T, CliError>;
