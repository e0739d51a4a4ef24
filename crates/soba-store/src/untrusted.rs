//! Reading files soba did not write: imports, capsule files, config files,
//! agent docs, skills, replayed traces and session logs given by path.
//!
//! Such a path may name anything: a FIFO (opening it would wait for a
//! writer), `/dev/stdin` (a cloned repository can carry that symlink), or
//! `/dev/zero` (it reports size 0 and never ends). [`open_untrusted`] opens
//! without blocking (`O_NONBLOCK`, `O_NOCTTY`), checks the *opened handle*
//! (`fstat`, after following links) and accepts only a regular file;
//! [`read_untrusted`] then reads at most `limit` bytes, enforcing the cap
//! while reading instead of trusting the reported size. Every reader of a
//! file a user or a repository supplies goes through these two functions.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What a path names when it is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device, such as `/dev/zero` or a terminal.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else that is not a regular file.
    Other,
}

impl FileKind {
    /// Returns the kind of a file that is not a regular one.
    pub fn of(metadata: &Metadata) -> FileKind {
        let file_type = metadata.file_type();
        if file_type.is_dir() {
            return FileKind::Directory;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if file_type.is_fifo() {
                return FileKind::Fifo;
            }
            if file_type.is_socket() {
                return FileKind::Socket;
            }
            if file_type.is_char_device() {
                return FileKind::CharDevice;
            }
            if file_type.is_block_device() {
                return FileKind::BlockDevice;
            }
        }
        FileKind::Other
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "a special file",
        })
    }
}

/// Why a file soba did not write could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UntrustedReadError {
    /// Opening or reading failed (missing file, permissions, I/O). A retry
    /// helps only when the cause is fixed; see [`Self::is_not_found`].
    #[error("cannot read {path}")]
    Io {
        /// The path given.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The path (after following links) is not a regular file: a FIFO,
    /// socket, device or directory. Not retryable: give a regular file.
    #[error(
        "{path} is {kind}, not a regular file: soba reads only regular files here; copy the content into a file and use that"
    )]
    NotRegular {
        /// The path given.
        path: PathBuf,
        /// What it is.
        kind: FileKind,
    },
    /// The file holds more than the reader's limit. Not retryable with the
    /// same file.
    #[error("{path} is larger than {}, the most soba reads here: use a smaller file", ByteSize(*limit))]
    TooLarge {
        /// The path given.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
}

impl UntrustedReadError {
    /// Returns whether the file does not exist (a missing optional file,
    /// or a dangling symlink).
    pub fn is_not_found(&self) -> bool {
        matches!(self, UntrustedReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Returns the path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            UntrustedReadError::Io { path, .. }
            | UntrustedReadError::NotRegular { path, .. }
            | UntrustedReadError::TooLarge { path, .. } => path,
        }
    }
}

/// A byte count shown in binary units when it is a whole number of them.
struct ByteSize(u64);

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (size, unit) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{} {unit}", self.0 / size);
            }
        }
        write!(f, "{} bytes", self.0)
    }
}

/// Opens a file soba did not write, accepting only a regular file.
///
/// The path is checked before opening, so a device or FIFO is not even
/// opened in the common case, and the opened handle is checked again
/// (`fstat`), so a path swapped between the two checks is still refused.
/// Opening never blocks: `O_NONBLOCK` makes a FIFO open return at once
/// (regular files ignore the flag for reads), `O_NOCTTY` keeps a terminal
/// from becoming the controlling one. Returns the file and its metadata.
pub fn open_untrusted(path: &Path) -> Result<(File, Metadata), UntrustedReadError> {
    open_untrusted_with(path, OpenOptions::new().read(true))
}

/// Opens `path` with `options` as [`open_untrusted`] does (regular files
/// only, never blocking); the session writer uses it to append.
pub(crate) fn open_untrusted_with(
    path: &Path,
    options: &mut OpenOptions,
) -> Result<(File, Metadata), UntrustedReadError> {
    let io_error = |source| UntrustedReadError::Io {
        path: path.to_owned(),
        source,
    };
    let not_regular = |metadata: &Metadata| UntrustedReadError::NotRegular {
        path: path.to_owned(),
        kind: FileKind::of(metadata),
    };
    let before = std::fs::metadata(path).map_err(io_error)?;
    if !before.is_file() {
        return Err(not_regular(&before));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path).map_err(io_error)?;
    let metadata = file.metadata().map_err(io_error)?;
    if !metadata.is_file() {
        return Err(not_regular(&metadata));
    }
    Ok((file, metadata))
}

/// Reads a whole file soba did not write, at most `limit` bytes.
///
/// The file must be a regular one ([`open_untrusted`]); the limit is
/// enforced while reading (one byte past it is an error), so a file that
/// grows, or reports a wrong size, cannot make soba read without end.
pub fn read_untrusted(path: &Path, limit: u64) -> Result<Vec<u8>, UntrustedReadError> {
    let (file, metadata) = open_untrusted(path)?;
    if metadata.len() > limit {
        return Err(UntrustedReadError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    // The reported size only sizes the buffer; the cap below is the guard.
    let capacity = usize::try_from(metadata.len().min(limit)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| UntrustedReadError::Io {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(UntrustedReadError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

/// Reads a whole UTF-8 text file soba did not write, at most `limit`
/// bytes; invalid UTF-8 is an [`UntrustedReadError::Io`] of kind
/// `InvalidData`, as [`std::fs::read_to_string`] reports it.
pub fn read_untrusted_to_string(path: &Path, limit: u64) -> Result<String, UntrustedReadError> {
    let bytes = read_untrusted(path, limit)?;
    String::from_utf8(bytes).map_err(|err| UntrustedReadError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, err.utf8_error()),
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Runs `read_untrusted` on a thread and fails if it does not return
    /// within five seconds, so a regression hangs no test run.
    fn read_promptly(path: &Path, limit: u64) -> Result<Vec<u8>, UntrustedReadError> {
        let (sender, receiver) = std::sync::mpsc::channel();
        let owned = path.to_owned();
        std::thread::spawn(move || {
            let _ = sender.send(read_untrusted(&owned, limit));
        });
        receiver
            .recv_timeout(Duration::from_secs(5))
            .expect("read_untrusted returned within 5 s")
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(status.success(), "mkfifo {}", path.display());
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello").expect("written");
        assert_eq!(read_promptly(&path, 5).expect("read"), b"hello");
        assert_eq!(
            read_untrusted_to_string(&path, 5).expect("read"),
            "hello".to_owned()
        );
    }

    #[test]
    fn a_file_one_byte_over_the_limit_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello!").expect("written");
        let err = read_promptly(&path, 5).expect_err("too large");
        assert!(matches!(err, UntrustedReadError::TooLarge { limit: 5, .. }));
        let err = read_promptly(&path, 2 << 20).map(|_| ());
        assert!(err.is_ok());
        std::fs::write(&path, vec![b'x'; (1 << 20) + 1]).expect("written");
        let err = read_promptly(&path, 1 << 20).expect_err("too large");
        assert_eq!(
            err.to_string(),
            format!(
                "{} is larger than 1 MiB, the most soba reads here: use a smaller file",
                path.display()
            )
        );
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pipe");
        mkfifo(&path);
        let started = Instant::now();
        let err = read_promptly(&path, 1 << 20).expect_err("refused");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(
            err.to_string(),
            format!(
                "{} is a FIFO (named pipe), not a regular file: soba reads only regular files here; copy the content into a file and use that",
                path.display()
            )
        );
    }

    #[test]
    fn devices_behind_symlinks_and_directories_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let zero = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let err = read_promptly(&zero, 1 << 20).expect_err("refused");
        assert!(
            matches!(
                err,
                UntrustedReadError::NotRegular {
                    kind: FileKind::CharDevice,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = read_promptly(dir.path(), 1 << 20).expect_err("refused");
        assert!(
            matches!(
                err,
                UntrustedReadError::NotRegular {
                    kind: FileKind::Directory,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_missing_file_and_a_dangling_link_are_not_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        assert!(
            read_promptly(&missing, 10)
                .expect_err("missing")
                .is_not_found()
        );
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(&missing, &dangling).expect("symlink");
        let err = read_promptly(&dangling, 10).expect_err("missing");
        assert!(err.is_not_found());
        assert_eq!(err.path(), dangling);
    }

    #[test]
    fn byte_sizes_use_whole_binary_units() {
        assert_eq!(ByteSize(4 << 30).to_string(), "4 GiB");
        assert_eq!(ByteSize(1 << 20).to_string(), "1 MiB");
        assert_eq!(ByteSize(256 << 10).to_string(), "256 KiB");
        assert_eq!(ByteSize(1000).to_string(), "1000 bytes");
    }
}
