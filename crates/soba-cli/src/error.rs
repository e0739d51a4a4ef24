//! The CLI's one error type and every conversion into it, with exit codes:
//! usage 2, user or configuration 1, internal 255, broken pipe a quiet 0,
//! SIGINT 130 and SIGTERM 143.
//!
//! I/O failures are classified here once ([`environment_hint`]): a failure
//! the user or the machine can fix — permission denied, a read-only file
//! system, a full disk or quota, a missing file or folder, a file where a
//! folder should be — is an environment error (exit 1) with a hint saying
//! what to do, wherever it is found in an error's cause chain; 255 is left
//! for real internal failures.

use std::fmt;
use std::io::Write;
use std::process::ExitCode;

use soba_core::terminal::sanitize;

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
    /// The command was asked to stop with SIGTERM (exit 143).
    Terminated,
    /// The terminal was closed (SIGHUP, exit 129).
    HungUp,
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

    /// Attaches a cause. An I/O failure of the environment in its chain
    /// makes an internal error an environment one (exit 1) and adds what to
    /// do about it.
    pub fn caused_by(mut self, source: impl Into<anyhow::Error>) -> Self {
        let source = source.into();
        let io_cause = source
            .chain()
            .find_map(|cause| cause.downcast_ref::<std::io::Error>());
        if let Some(cause) = io_cause {
            self = self.classified(cause);
        }
        self.source = Some(source);
        self
    }

    /// Applies the I/O classification of [`environment_hint`] to this error:
    /// an internal error becomes a user one, and the hint is added once.
    fn classified(mut self, cause: &std::io::Error) -> Self {
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

    /// Returns the exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ErrorKind::Usage => 2,
            ErrorKind::User => 1,
            ErrorKind::Internal => 255,
            ErrorKind::BrokenPipe => 0,
            ErrorKind::Interrupted => 130,
            ErrorKind::Terminated => 143,
            ErrorKind::HungUp => 129,
        }
    }

    /// Prints the error (unless it is a broken pipe) and returns the exit code.
    pub fn report(&self) -> ExitCode {
        if self.kind != ErrorKind::BrokenPipe {
            let mut stderr = crate::output::stderr();
            let _ = writeln!(stderr, "{self}");
        }
        ExitCode::from(self.exit_code())
    }
}

/// Shows the error as the user sees it. Messages, causes and hints often
/// quote files and configuration values, so each part goes through the
/// terminal sanitizer: escape sequences are shown, never sent.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", sanitize(&self.message))?;
        if let Some(source) = &self.source {
            for cause in source.chain() {
                write!(f, ": {}", sanitize(&cause.to_string()))?;
            }
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
        let cli_error = match std::error::Error::source(&err) {
            Some(cause) => CliError::user(format!("{message}: {cause}")),
            None => CliError::user(message),
        };
        match io_cause(&err) {
            Some(cause) => cli_error.classified(cause),
            None => cli_error,
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
        let cli_error = match std::error::Error::source(&err) {
            Some(cause) => CliError::user(format!("{message}: {cause}")),
            None => CliError::user(message),
        };
        match io_cause(&err) {
            Some(cause) => cli_error.classified(cause),
            None => cli_error,
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
            other => {
                let cli_error = CliError::user(other.to_string());
                match io_cause(&other) {
                    Some(cause) => cli_error.classified(cause),
                    None => cli_error,
                }
            }
        }
    }
}

/// The CLI's result type.
pub type CliResult<T = ()> = Result<T, CliError>;

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind as Kind};
    use std::path::Path;

    use super::*;

    /// Checks the exit code and the hints of the error built from `err`.
    fn check(error: CliError, exit_code: u8, hint: Option<&str>) {
        assert_eq!(error.exit_code(), exit_code, "{error}");
        assert_eq!(error.hints.first().map(String::as_str), hint, "{error}");
        assert!(error.hints.len() <= 1, "one hint: {error}");
    }

    fn store_io(kind: Kind) -> soba_store::StoreError {
        soba_store::StoreError::Io {
            action: "append to",
            path: Path::new("/s/x.jsonl").to_path_buf(),
            source: Error::from(kind),
        }
    }

    #[test]
    fn environment_failures_exit_1_with_what_to_do() {
        for (kind, starts) in [
            (Kind::PermissionDenied, "permission denied: check the owner"),
            (Kind::ReadOnlyFilesystem, "the file system is read-only"),
            (Kind::StorageFull, "the disk is full: free some space"),
            (Kind::QuotaExceeded, "the disk quota is exhausted"),
            (Kind::NotFound, "a file or folder does not exist"),
            (Kind::NotADirectory, "a file is where a folder should be"),
        ] {
            let hint = environment_hint(&Error::from(kind)).expect("an environment failure");
            assert!(hint.starts_with(starts), "{kind:?}: {hint}");
            check(CliError::from(Error::from(kind)), 1, Some(hint));
            check(CliError::from(store_io(kind)), 1, Some(hint));
            check(
                CliError::internal("cannot create a temporary directory")
                    .caused_by(Error::from(kind)),
                1,
                Some(hint),
            );
        }
    }

    #[test]
    fn raw_os_errors_are_classified_by_their_kind() {
        // ENOSPC, EDQUOT, EROFS, EACCES and EPERM on Linux.
        for code in [28, 122, 30, 13, 1] {
            let error = CliError::from(store_io(Error::from_raw_os_error(code).kind()));
            assert_eq!(error.exit_code(), 1, "errno {code}: {error}");
            let raw = CliError::from(Error::from_raw_os_error(code));
            assert_eq!(raw.exit_code(), 1, "errno {code}: {raw}");
        }
    }

    #[test]
    fn a_symlink_loop_is_an_environment_error_with_its_hint() {
        let store = soba_store::StoreError::Io {
            action: "list",
            path: Path::new("/s/loop").to_path_buf(),
            source: Error::from_raw_os_error(libc::ELOOP),
        };
        for error in [
            CliError::from(Error::from_raw_os_error(libc::ELOOP)),
            CliError::from(store),
        ] {
            assert_eq!(error.exit_code(), 1, "{error}");
            assert_eq!(
                error.hints,
                vec![
                    "a symbolic link on the path loops (or links are nested too deeply): check it with `readlink -f` and give the real folder"
                ],
                "{error}"
            );
        }
    }

    #[test]
    fn other_io_failures_stay_internal_and_broken_pipes_quiet() {
        check(CliError::from(store_io(Kind::InvalidData)), 255, None);
        check(CliError::from(Error::other("boom")), 255, None);
        check(CliError::from(Error::from(Kind::BrokenPipe)), 0, None);
    }

    #[test]
    fn a_user_error_keeps_its_kind_and_gains_the_hint_once() {
        let error = CliError::user("cannot read x")
            .caused_by(Error::from(Kind::PermissionDenied))
            .caused_by(Error::from(Kind::PermissionDenied));
        assert_eq!(error.kind, ErrorKind::User);
        assert_eq!(error.hints.len(), 1);
    }

    #[test]
    fn import_errors_carrying_io_failures_get_the_hint() {
        let err = soba_store::import::ImportError::Io {
            path: "/t/a.jsonl".into(),
            source: Error::from(Kind::PermissionDenied),
        };
        let error = CliError::from(err);
        assert_eq!(error.exit_code(), 1);
        assert!(error.hints[0].starts_with("permission denied"), "{error}");
    }
}
