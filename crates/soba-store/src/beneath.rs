//! Files beneath a directory handle: opening, inspecting, creating and
//! replacing files under a root so that no path, however it changes while it
//! is used, leads outside the root.
//!
//! Checking a path and then opening it is a race: a folder on the path can
//! be swapped for a symlink to a folder outside between the two steps.
//! [`Beneath`] holds a handle on the root directory and resolves every path
//! *by the kernel, relative to that handle*: `openat2(2)` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, which fails (`EXDEV`) the
//! moment a `..` or a symlink would leave the root, at the instant of the
//! open. On a kernel without `openat2` (`ENOSYS`, before Linux 5.6) the
//! same rules are applied by hand: one component at a time with
//! `openat(dirfd, name, O_NOFOLLOW)`, a symlink component read with
//! `readlinkat` and followed only as a relative path that stays beneath the
//! root (absolute symlinks are refused, as `RESOLVE_BENEATH` refuses them).
//!
//! Types and sizes are checked on the opened handle (`fstat`), never on the
//! path, and opening never blocks (`O_NONBLOCK`, so a FIFO is refused rather
//! than waited on). [`Beneath::replace`] writes a temporary sibling through
//! the parent directory's handle, fsyncs it and `renameat`s it over the
//! name, so a swapped parent cannot redirect the write and the bytes never
//! go through an existing inode (another hard link, or a symlink planted on
//! the last component, is replaced rather than written through).
//!
//! The mechanism uses `rustix` (already in the build through `tempfile`)
//! because the lints deny `unsafe`, and `cap-std`, which does the same, would
//! bring eight crates and still lacks the "no symlinks at all" resolution
//! the workspace walk needs.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::untrusted::FileKind;

/// Symlinks followed in one resolution before giving up, as Linux does.
const MAX_LINKS: usize = 40;

/// How symlinks on a path are treated. Either way no link leads out of the
/// root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Symlinks are followed while they stay beneath the root (relative
    /// targets only); one that would leave it is an [`BeneathError::Escape`].
    FollowBeneath,
    /// No symlink is followed anywhere on the path; a symlink as the last
    /// component is opened as the link itself (for [`Beneath::metadata`])
    /// or refused.
    Refuse,
}

/// Why a path beneath the root could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BeneathError {
    /// A `..` or a symlink on the path leads outside the root (at the
    /// moment of the open). Not retryable with the same path.
    #[error("{path} leads outside {root} through a symlink or `..`; refusing to follow it")]
    Escape {
        /// The path, relative to the root.
        path: PathBuf,
        /// The root.
        root: PathBuf,
    },
    /// The path names something other than a regular file (a FIFO, socket,
    /// device or directory) where a file was expected. Not retryable.
    #[error("{path} is {kind}, not a regular file")]
    NotRegular {
        /// The path, relative to the root.
        path: PathBuf,
        /// What it is.
        kind: FileKind,
    },
    /// The path is absolute or empty; paths are relative to the root. A
    /// caller's bug, not retryable.
    #[error("{path} is not a path relative to the root")]
    NotRelative {
        /// The path given.
        path: PathBuf,
    },
    /// Any other failure (missing file, permissions, a full disk); see
    /// [`BeneathError::is_not_found`]. A retry helps only when the cause is
    /// fixed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done: `open`, `create`, `write`, `rename`.
        action: &'static str,
        /// The path, relative to the root.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl BeneathError {
    /// Returns whether nothing exists at the path (or a folder on it).
    pub fn is_not_found(&self) -> bool {
        matches!(self, BeneathError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What [`Beneath::replace`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// No file was there; one was created.
    Created,
    /// A regular file was there and was replaced (its permissions kept).
    Overwrote,
}

/// A directory that paths are resolved beneath (see the module docs).
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    root_path: PathBuf,
    /// Resolves by walking even where `openat2` exists (tests of the
    /// fallback).
    walk_only: bool,
}

impl Beneath {
    /// Opens the directory `root` as the root of later lookups.
    pub fn open(root: &Path) -> Result<Beneath, BeneathError> {
        let fd = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| BeneathError::Io {
            action: "open",
            path: root.to_path_buf(),
            source: errno.into(),
        })?;
        Ok(Beneath {
            root: fd,
            root_path: root.to_path_buf(),
            walk_only: false,
        })
    }

    /// Opens `root` as [`Beneath::open`] does, resolving by walking as on a
    /// kernel without `openat2`.
    #[cfg(test)]
    fn open_walking(root: &Path) -> Result<Beneath, BeneathError> {
        Ok(Beneath {
            walk_only: true,
            ..Beneath::open(root)?
        })
    }

    /// Returns the root's path as given to [`Beneath::open`].
    pub fn root(&self) -> &Path {
        &self.root_path
    }

    /// Opens a regular file for reading; returns it with its metadata (from
    /// the handle). Never blocks: a FIFO, socket, device or directory is a
    /// [`BeneathError::NotRegular`].
    pub fn open_regular(
        &self,
        path: &Path,
        links: Links,
    ) -> Result<(File, Metadata), BeneathError> {
        let fd = match self.open_fd(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            links,
        ) {
            Ok(fd) => fd,
            // A socket cannot be opened at all (ENXIO): say what it is.
            Err(BeneathError::Io { source, .. })
                if source.raw_os_error() == Some(Errno::NXIO.raw_os_error()) =>
            {
                return match self.metadata(path, links) {
                    Ok(Some(metadata)) if !metadata.is_file() => Err(BeneathError::NotRegular {
                        path: path.to_path_buf(),
                        kind: FileKind::of(&metadata),
                    }),
                    _ => Err(self.io("open", path, source)),
                };
            }
            Err(error) => return Err(error),
        };
        let file = File::from(fd);
        let metadata = file
            .metadata()
            .map_err(|source| self.io("open", path, source))?;
        if !metadata.is_file() {
            return Err(BeneathError::NotRegular {
                path: path.to_path_buf(),
                kind: FileKind::of(&metadata),
            });
        }
        Ok((file, metadata))
    }

    /// Returns the metadata of what is at `path`, or `None` when nothing is.
    /// With [`Links::Refuse`] a symlink as the last component is described
    /// itself.
    pub fn metadata(&self, path: &Path, links: Links) -> Result<Option<Metadata>, BeneathError> {
        match self.open_fd(path, OFlags::PATH, links) {
            Ok(fd) => File::from(fd)
                .metadata()
                .map(Some)
                .map_err(|source| self.io("inspect", path, source)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Creates `path` and its missing parents as directories, each one
    /// inside the directory handle above it.
    pub fn create_dir_all(&self, path: &Path) -> Result<(), BeneathError> {
        let mut parent = PathBuf::new();
        for name in relative_components(path)? {
            // Each folder is made in the handle of the one above it, so a
            // parent swapped for a link cannot move the new folder outside.
            let dir = self.open_dir(&parent, Links::FollowBeneath)?;
            match rustix::fs::mkdirat(&dir, name.as_os_str(), Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(self.io("create", &parent.join(&name), errno.into())),
            }
            parent.push(name);
        }
        self.open_dir(path, Links::FollowBeneath).map(drop)
    }

    /// Opens the directory at `path` (the root itself for `.`).
    pub fn open_dir(&self, path: &Path, links: Links) -> Result<OwnedFd, BeneathError> {
        self.open_fd(path, OFlags::PATH | OFlags::DIRECTORY, links)
    }

    /// Replaces the file at `path` with `bytes`: a temporary sibling is
    /// written and fsynced in the parent directory's handle and renamed over
    /// the name, keeping the old file's permissions. A regular file or
    /// nothing must be there; its parent must exist.
    pub fn replace(&self, path: &Path, bytes: &[u8]) -> Result<Replaced, BeneathError> {
        let (parent, name) = split_parent(path)?;
        let dir = self.open_dir(parent, Links::FollowBeneath)?;
        let existing = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::NOENT) => None,
            Err(errno) => return Err(self.io("inspect", path, errno.into())),
        };
        let mode = match existing {
            Some(stat) if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file() => {
                Some(Mode::from_raw_mode(stat.st_mode & 0o7777))
            }
            Some(stat) => {
                let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
                return Err(BeneathError::NotRegular {
                    path: path.to_path_buf(),
                    kind: kind_of(kind),
                });
            }
            None => None,
        };
        let (temp_name, temp) = create_temporary(&dir, name)
            .map_err(|source| self.io("create a temporary file beside", path, source))?;
        let written = write_temporary(temp, bytes, mode)
            .map_err(|source| self.io("write", path, source))
            .and_then(|()| {
                rustix::fs::renameat(&dir, &temp_name, &dir, name)
                    .map_err(|errno| self.io("rename", path, errno.into()))
            });
        if let Err(error) = written {
            // The temporary file is ours; leaving it would litter the
            // workspace. A failure to remove it changes nothing more.
            let _ = rustix::fs::unlinkat(&dir, &temp_name, AtFlags::empty());
            return Err(error);
        }
        // The rename is durable once the directory is synced; a failure here
        // leaves the new content in place, so it is not reported.
        if let Ok(dir_file) = rustix::fs::openat(
            &dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            let _ = rustix::fs::fsync(dir_file);
        }
        Ok(if mode.is_some() {
            Replaced::Overwrote
        } else {
            Replaced::Created
        })
    }

    fn io(&self, action: &'static str, path: &Path, source: std::io::Error) -> BeneathError {
        BeneathError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Opens `path` beneath the root with `flags` (`O_CLOEXEC` is added).
    fn open_fd(&self, path: &Path, flags: OFlags, links: Links) -> Result<OwnedFd, BeneathError> {
        // Checked here so both resolutions refuse the same paths.
        relative_components(path)?;
        let flags = flags | OFlags::CLOEXEC;
        let resolve = match links {
            Links::FollowBeneath => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            Links::Refuse => ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        };
        let flags_for_openat2 = match links {
            Links::FollowBeneath => flags,
            // NO_SYMLINKS refuses a link as last component unless O_NOFOLLOW
            // asks for the link itself, which only O_PATH can open.
            Links::Refuse if flags.contains(OFlags::PATH) => flags | OFlags::NOFOLLOW,
            Links::Refuse => flags,
        };
        let target = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        if self.walk_only {
            return open_by_walking(self.root.as_fd(), path, flags, links)
                .map_err(|errno| self.open_error(path, errno));
        }
        let opened = match rustix::fs::openat2(
            self.root.as_fd(),
            target,
            flags_for_openat2,
            Mode::empty(),
            resolve,
        ) {
            Err(Errno::NOSYS) => open_by_walking(self.root.as_fd(), path, flags, links),
            // openat2 is interrupted (EAGAIN) when a rename elsewhere races
            // a `..` lookup; the walk has no such restriction.
            Err(Errno::AGAIN) => open_by_walking(self.root.as_fd(), path, flags, links),
            other => other,
        };
        opened.map_err(|errno| self.open_error(path, errno))
    }

    fn open_error(&self, path: &Path, errno: Errno) -> BeneathError {
        if errno == Errno::XDEV {
            BeneathError::Escape {
                path: path.to_path_buf(),
                root: self.root_path.clone(),
            }
        } else {
            self.io("open", path, errno.into())
        }
    }
}

/// Returns the normal components of a relative path; `.` is skipped and
/// `..` kept (the resolution refuses it when it would leave the root).
fn relative_components(path: &Path) -> Result<Vec<OsString>, BeneathError> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name.to_owned()),
            Component::ParentDir => names.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(BeneathError::NotRelative {
                    path: path.to_path_buf(),
                });
            }
        }
    }
    Ok(names)
}

/// Splits a path into its parent (`""` for the root) and last name, which
/// must be a normal one.
fn split_parent(path: &Path) -> Result<(&Path, &OsStr), BeneathError> {
    match (path.parent(), path.components().next_back()) {
        (Some(parent), Some(Component::Normal(name))) => Ok((parent, name)),
        _ => Err(BeneathError::NotRelative {
            path: path.to_path_buf(),
        }),
    }
}

fn kind_of(file_type: rustix::fs::FileType) -> FileKind {
    use rustix::fs::FileType;
    match file_type {
        FileType::Directory => FileKind::Directory,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::CharacterDevice => FileKind::CharDevice,
        FileType::BlockDevice => FileKind::BlockDevice,
        _ => FileKind::Other,
    }
}

/// Creates a new temporary file beside `name` in `dir` (`O_EXCL`, so never
/// an existing file or a planted link).
fn create_temporary(dir: &OwnedFd, name: &OsStr) -> std::io::Result<(OsString, File)> {
    let pid = std::process::id();
    let mut last_error = None;
    for attempt in 0..100u32 {
        let mut temp_name = OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{pid}.{attempt}.soba-tmp"));
        match rustix::fs::openat(
            dir,
            temp_name.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => return Ok((temp_name, File::from(fd))),
            Err(Errno::EXIST) => last_error = Some(Errno::EXIST),
            Err(errno) => return Err(errno.into()),
        }
    }
    Err(last_error.unwrap_or(Errno::EXIST).into())
}

fn write_temporary(mut temp: File, bytes: &[u8], mode: Option<Mode>) -> std::io::Result<()> {
    temp.write_all(bytes)?;
    if let Some(mode) = mode {
        temp.set_permissions(std::fs::Permissions::from_mode(mode.as_raw_mode()))?;
    }
    temp.sync_all()
}

/// The resolution of [`Beneath::open_fd`] for kernels without `openat2`:
/// one component at a time, each opened with `O_NOFOLLOW` in the directory
/// handle above it; a symlink is read and its relative target followed
/// in place of it, a `..` steps back to the handle before; leaving the root
/// (a `..` at the root, an absolute target) is `EXDEV`, as with `openat2`.
fn open_by_walking(
    root: BorrowedFd<'_>,
    path: &Path,
    flags: OFlags,
    links: Links,
) -> Result<OwnedFd, Errno> {
    let mut pending: VecDeque<OsString> = relative_components(path)
        .map_err(|_| Errno::INVAL)?
        .into_iter()
        .collect();
    // Directory handles below the root, deepest last.
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut n_links = 0usize;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            if stack.pop().is_none() {
                return Err(Errno::XDEV);
            }
            continue;
        }
        let current = stack.last().map_or(root, AsFd::as_fd);
        let last = pending.is_empty();
        let step_flags = if last {
            flags | OFlags::NOFOLLOW
        } else {
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        let opened = rustix::fs::openat(current, name.as_os_str(), step_flags, Mode::empty());
        let is_link = match &opened {
            // O_PATH|O_NOFOLLOW opens a link as itself.
            Ok(fd) if last && flags.contains(OFlags::PATH) => rustix::fs::fstat(fd)
                .is_ok_and(|stat| rustix::fs::FileType::from_raw_mode(stat.st_mode).is_symlink()),
            Ok(_) => false,
            Err(Errno::LOOP | Errno::NOTDIR) => true,
            Err(_) => false,
        };
        if !is_link {
            let fd = opened?;
            if last {
                return Ok(fd);
            }
            stack.push(fd);
            continue;
        }
        if links == Links::Refuse {
            return match opened {
                Ok(fd) if last => Ok(fd),
                _ => Err(Errno::LOOP),
            };
        }
        let target = match rustix::fs::readlinkat(current, name.as_os_str(), Vec::new()) {
            Ok(target) => target,
            // Not a link after all: the open's own error stands.
            Err(Errno::INVAL) => return opened.and(Err(Errno::NOTDIR)),
            Err(errno) => return Err(errno),
        };
        n_links += 1;
        if n_links > MAX_LINKS {
            return Err(Errno::LOOP);
        }
        let target = Path::new(OsStr::from_bytes(target.as_bytes()));
        let names = relative_components(target).map_err(|_| Errno::XDEV)?;
        for name in names.into_iter().rev() {
            pending.push_front(name);
        }
        if pending.is_empty() {
            // A link to `.`: the directory it sits in.
            pending.push_front(OsString::from("."));
        }
    }
    // The path ended at a directory handle (empty, `.` or `..`): open it
    // again with the caller's flags.
    let current = stack.last().map_or(root, AsFd::as_fd);
    rustix::fs::openat(current, ".", flags, Mode::empty())
}

#[cfg(test)]
mod tests;
