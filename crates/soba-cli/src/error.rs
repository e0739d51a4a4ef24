//! The CLI's exit codes for the workspace's one error type: usage 2, user
//! or configuration 1, internal 255, broken pipe a quiet 0, SIGINT 130,
//! SIGTERM 143 and SIGHUP 129; printing it once.
//!
//! The error and every conversion into it (with the one classification of
//! I/O failures, [`environment_hint`]) live in `soba_workspace::error`, so
//! the TUI and the commands report alike.

use std::io::Write;
use std::process::ExitCode;

pub use soba_workspace::error::{ErrorKind, WorkspaceError as CliError};

/// The CLI's result type.
pub type CliResult<T = ()> = Result<T, CliError>;

/// The exit code of an error, and its one printing.
pub trait Exit {
    /// Returns the exit code for this error.
    fn exit_code(&self) -> u8;

    /// Prints the error (unless it is a broken pipe) and returns the exit code.
    fn report(&self) -> ExitCode;
}

impl Exit for CliError {
    fn exit_code(&self) -> u8 {
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

    fn report(&self) -> ExitCode {
        if self.kind != ErrorKind::BrokenPipe {
            let mut stderr = crate::output::stderr();
            let _ = writeln!(stderr, "{self}");
        }
        ExitCode::from(self.exit_code())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind as Kind};

    use soba_workspace::error::environment_hint;
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
