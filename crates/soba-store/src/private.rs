//! Session files are readable only by their owner: a log holds every
//! prompt, file and command output of a session (as the TUI's input
//! history does, which is 0600 too). Logs, flight records and recovery
//! files are created 0600, the folders SOBA makes for them 0700.
//!
//! `open` is the one way the store opens a file it writes beside a log:
//! never through a symlink (`O_NOFOLLOW`: a link planted where a flight
//! record goes would send it anywhere), never blocking (`O_NONBLOCK`: a
//! FIFO there is refused, not waited on), a regular file only, and one
//! that others can read or write is made owner-only. [`create_dir_all`]
//! and [`tighten_dir`] do the same for folders.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The mode of a file SOBA creates for a session.
#[cfg(unix)]
const FILE_MODE: u32 = 0o600;

/// The mode of a folder SOBA creates for sessions.
#[cfg(unix)]
const DIR_MODE: u32 = 0o700;

/// Makes `options` create the file readable and writable by its owner
/// only.
fn owner_only(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE);
    }
    options
}

/// Opens `path` with `options` as a private session file (see the module
/// documentation): created 0600, through no symlink, never blocking, a
/// regular file only, its mode tightened to 0600 when others had access.
pub(crate) fn open(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    owner_only(options);
    let refused = |metadata: &std::fs::Metadata| {
        io::Error::other(if metadata.file_type().is_symlink() {
            "it is a symbolic link, and soba writes session files only as regular files: remove the link".to_owned()
        } else {
            format!(
                "it is {}, not a regular file: remove it",
                crate::untrusted::FileKind::of(metadata)
            )
        })
    };
    // Checked before opening (a FIFO with no reader fails the open with a
    // cryptic ENXIO) and again on the handle (a path swapped in between).
    if let Ok(metadata) = std::fs::symlink_metadata(path)
        && !metadata.is_file()
    {
        return Err(refused(&metadata));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path).map_err(|err| {
        #[cfg(unix)]
        if err.raw_os_error() == Some(libc::ELOOP) {
            return io::Error::other(
                "it is a symbolic link, and soba writes session files only as regular files: remove the link",
            );
        }
        err
    })?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(refused(&metadata));
    }
    tighten_file(&file)?;
    Ok(file)
}

/// Makes an open session file owner-only when others had access to it.
pub(crate) fn tighten_file(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if file.metadata()?.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
        }
    }
    Ok(())
}

/// Creates `dir` and its missing parents, each new one owner-only, and
/// makes `dir` itself owner-only if it already existed with access for
/// others (see [`tighten_dir`]).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DIR_MODE);
    }
    builder.create(dir)?;
    tighten_dir(dir)
}

/// Makes a folder SOBA keeps private files in (sessions, logs) owner-only
/// when others can enter it. A folder the user does not own cannot be
/// changed and is left as its owner made it.
pub fn tighten_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::symlink_metadata(dir)?;
        if metadata.is_dir() && metadata.permissions().mode() & 0o077 != 0 {
            match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)) {
                Err(err) if err.kind() == io::ErrorKind::PermissionDenied => {}
                other => other?,
            }
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .expect("test setup")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_planted_link_fifo_or_wide_mode_is_refused_or_tightened() {
        // The attack of session 22: a symlink where the flight record goes
        // had soba append to a file outside the sessions folder; a FIFO
        // there hung `soba stats`.
        let dir = tempfile::tempdir().expect("test setup");
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "mine\n").expect("test setup");
        let link = dir.path().join("s.flight.jsonl");
        std::os::unix::fs::symlink(&victim, &link).expect("test setup");
        let append = || OpenOptions::new().append(true).create(true).clone();
        let err = open(&mut append(), &link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("test setup"),
            "mine\n"
        );

        let fifo = dir.path().join("f.flight.jsonl");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("test setup");
        assert!(status.success());
        let err = open(&mut append(), &fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");

        let wide = dir.path().join("w.jsonl");
        std::fs::write(&wide, "").expect("test setup");
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o666))
            .expect("test setup");
        open(&mut append(), &wide)
            .expect("test setup")
            .write_all(b"x\n")
            .expect("test setup");
        assert_eq!(mode(&wide), 0o600);

        let folder = dir.path().join("sessions");
        std::fs::create_dir(&folder).expect("test setup");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777))
            .expect("test setup");
        create_dir_all(&folder).expect("test setup");
        assert_eq!(mode(&folder), 0o700);
    }
}
