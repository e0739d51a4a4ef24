//! Creating files at paths a user or a repository chose: capsule exports,
//! handoff capsules, Project Memory files, replay charts.
//!
//! [`write_output`] is the one way soba writes such a file. A path given
//! relative to the base folder (the workspace root), or absolute but inside
//! it, must stay inside it *after following links*: the parent folder is
//! canonicalized and checked against the canonical base, before and after
//! creating missing folders, so a symlinked folder in a cloned repository
//! cannot carry the write elsewhere. An absolute path outside the base is
//! taken as typed. Whatever the path, its last component must not be a
//! symbolic link (dangling or not), and the file is created with
//! `O_EXCL`, or, when overwriting, opened with `O_NOFOLLOW`, so a link
//! swapped in after the check is not followed either.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// Why a file could not be written at the path given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputPathError {
    /// A relative path climbs out of the base folder with `..`. Not
    /// retryable: give a path inside it, or an absolute one.
    #[error("{given} is outside the workspace {root}")]
    Outside {
        /// The path given.
        given: PathBuf,
        /// The base folder.
        root: PathBuf,
    },
    /// A folder on the path is a symbolic link leading outside the base
    /// folder. Not retryable: write elsewhere or remove the link.
    #[error("{given} leads outside the workspace {root} through a symbolic link (to {resolved})")]
    ThroughLink {
        /// The path given.
        given: PathBuf,
        /// The base folder.
        root: PathBuf,
        /// Where the path's folder really is.
        resolved: PathBuf,
    },
    /// The file to write is a symbolic link (perhaps dangling). Not
    /// retryable: soba never writes through a link.
    #[error("{path} is a symbolic link; soba does not write through links")]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// Something other than a regular file is at the path. Not retryable.
    #[error("{path} exists and is not a regular file")]
    NotRegular {
        /// The path.
        path: PathBuf,
    },
    /// A file already exists and overwriting was not asked for. Not
    /// retryable without overwriting.
    #[error("{path} already exists")]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// The path names no file (it ends in `..` or is empty). Not retryable.
    #[error("{given} does not name a file")]
    NoFileName {
        /// The path given.
        given: PathBuf,
    },
    /// Creating a folder or writing the file failed. A retry helps only
    /// when the cause (permissions, a full disk) is fixed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done, e.g. `create`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves `given` against `root` lexically: a relative path is joined
/// to `root` and may not climb out of it with `..`; an absolute path is
/// returned as it is. Links are not looked at ([`write_output`] does).
pub fn resolve_output(root: &Path, given: &Path) -> Result<PathBuf, OutputPathError> {
    if given.is_absolute() {
        return Ok(given.to_path_buf());
    }
    let mut resolved = root.to_path_buf();
    for component in given.components() {
        match component {
            Component::Normal(part) => resolved.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if resolved == root || !resolved.pop() || !resolved.starts_with(root) {
                    return Err(OutputPathError::Outside {
                        given: given.to_path_buf(),
                        root: root.to_path_buf(),
                    });
                }
            }
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Ok(resolved)
}

/// Writes `bytes` to a new file at `given` (relative to `root`, the
/// workspace), creating missing folders; with `overwrite`, an existing
/// regular file is replaced. Returns the path written (lexical, for
/// display). See the module documentation for the rules on links.
pub fn write_output(
    root: &Path,
    given: &Path,
    bytes: &[u8],
    overwrite: bool,
) -> Result<PathBuf, OutputPathError> {
    let path = resolve_output(root, given)?;
    let confined = !given.is_absolute() || path.starts_with(root);
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(OutputPathError::NoFileName {
            given: given.to_path_buf(),
        });
    };
    let canonical_root = if confined {
        Some(
            std::fs::canonicalize(root).map_err(|source| OutputPathError::Io {
                action: "resolve",
                path: root.to_path_buf(),
                source,
            })?,
        )
    } else {
        None
    };
    let check = |folder: &Path| -> Result<PathBuf, OutputPathError> {
        let real = std::fs::canonicalize(folder).map_err(|source| OutputPathError::Io {
            action: "resolve",
            path: folder.to_path_buf(),
            source,
        })?;
        match &canonical_root {
            Some(canonical_root) if !real.starts_with(canonical_root) => {
                Err(OutputPathError::ThroughLink {
                    given: given.to_path_buf(),
                    root: root.to_path_buf(),
                    resolved: real,
                })
            }
            _ => Ok(real),
        }
    };
    // The deepest folder that exists is checked before anything is created
    // under it, so no folder appears outside the workspace either.
    if let Some(existing) = parent.ancestors().find(|folder| folder.exists()) {
        check(existing)?;
    }
    std::fs::create_dir_all(parent).map_err(|source| OutputPathError::Io {
        action: "create",
        path: parent.to_path_buf(),
        source,
    })?;
    let real_file = check(parent)?.join(name);
    let existing = match std::fs::symlink_metadata(&real_file) {
        Ok(metadata) => Some(metadata),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(OutputPathError::Io {
                action: "inspect",
                path: path.clone(),
                source,
            });
        }
    };
    let file = match existing {
        Some(metadata) if metadata.file_type().is_symlink() => {
            return Err(OutputPathError::Link { path });
        }
        Some(metadata) if !metadata.is_file() => {
            return Err(OutputPathError::NotRegular { path });
        }
        Some(_) if !overwrite => return Err(OutputPathError::Exists { path }),
        Some(_) => open_existing(&real_file, &path)?,
        None => OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&real_file)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::AlreadyExists => OutputPathError::Exists { path: path.clone() },
                _ => OutputPathError::Io {
                    action: "create",
                    path: path.clone(),
                    source,
                },
            })?,
    };
    write_all(file, bytes, &path)?;
    Ok(path)
}

/// Opens an existing regular file for overwriting without following a
/// link at its last component, and checks the opened handle.
fn open_existing(real_file: &Path, path: &Path) -> Result<File, OutputPathError> {
    let mut options = OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(real_file).map_err(|source| {
        #[cfg(unix)]
        if source.raw_os_error() == Some(libc::ELOOP) {
            return OutputPathError::Link {
                path: path.to_path_buf(),
            };
        }
        OutputPathError::Io {
            action: "open",
            path: path.to_path_buf(),
            source,
        }
    })?;
    let is_file = file.metadata().is_ok_and(|metadata| metadata.is_file());
    if !is_file {
        return Err(OutputPathError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    file.set_len(0).map_err(|source| OutputPathError::Io {
        action: "truncate",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(file)
}

fn write_all(mut file: File, bytes: &[u8], path: &Path) -> Result<(), OutputPathError> {
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .map_err(|source| OutputPathError::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Rig {
        _dir: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn rig() -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).expect("ws");
        std::fs::create_dir_all(&outside).expect("outside");
        Rig {
            _dir: dir,
            root,
            outside,
        }
    }

    #[test]
    fn a_relative_path_is_written_inside_the_workspace() {
        let rig = rig();
        let written =
            write_output(&rig.root, Path::new("out/a.md"), b"hi", false).expect("written");
        assert_eq!(written, rig.root.join("out/a.md"));
        assert_eq!(std::fs::read(&written).expect("read"), b"hi");
        let err =
            write_output(&rig.root, Path::new("out/a.md"), b"again", false).expect_err("exists");
        assert!(matches!(err, OutputPathError::Exists { .. }), "{err:?}");
        write_output(&rig.root, Path::new("out/a.md"), b"again", true).expect("overwritten");
        assert_eq!(std::fs::read(&written).expect("read"), b"again");
    }

    #[test]
    fn dot_dot_cannot_climb_out() {
        let rig = rig();
        for given in ["../x.md", "a/../../x.md"] {
            let err = write_output(&rig.root, Path::new(given), b"x", false).expect_err(given);
            assert!(matches!(err, OutputPathError::Outside { .. }), "{err:?}");
        }
        assert!(!rig.outside.join("x.md").exists());
    }

    #[test]
    fn a_symlinked_folder_cannot_carry_the_write_outside() {
        let rig = rig();
        symlink(&rig.outside, rig.root.join("out")).expect("symlink");
        for given in ["out/a.md", "out/new/a.md"] {
            let err = write_output(&rig.root, Path::new(given), b"x", false).expect_err(given);
            assert!(
                matches!(err, OutputPathError::ThroughLink { .. }),
                "{err:?}"
            );
        }
        // Absolute but inside the workspace: confined too.
        let err = write_output(&rig.root, &rig.root.join("out/a.md"), b"x", false)
            .expect_err("absolute inside");
        assert!(
            matches!(err, OutputPathError::ThroughLink { .. }),
            "{err:?}"
        );
        assert_eq!(std::fs::read_dir(&rig.outside).expect("dir").count(), 0);
    }

    #[test]
    fn a_link_as_the_file_is_refused_dangling_or_not() {
        let rig = rig();
        let target = rig.outside.join("victim");
        symlink(&target, rig.root.join("dangling.md")).expect("symlink");
        for overwrite in [false, true] {
            let err = write_output(&rig.root, Path::new("dangling.md"), b"x", overwrite)
                .expect_err("dangling");
            assert!(matches!(err, OutputPathError::Link { .. }), "{err:?}");
        }
        assert!(!target.exists());
        std::fs::write(&target, b"keep").expect("victim");
        let err = write_output(&rig.root, Path::new("dangling.md"), b"x", true).expect_err("link");
        assert!(matches!(err, OutputPathError::Link { .. }), "{err:?}");
        assert_eq!(std::fs::read(&target).expect("read"), b"keep");
    }

    #[test]
    fn an_absolute_path_outside_is_taken_as_typed() {
        let rig = rig();
        let file = rig.outside.join("b.md");
        assert_eq!(
            write_output(&rig.root, &file, b"x", false).expect("written"),
            file
        );
        symlink(rig.outside.join("c"), rig.outside.join("link.md")).expect("symlink");
        let err =
            write_output(&rig.root, &rig.outside.join("link.md"), b"x", false).expect_err("link");
        assert!(matches!(err, OutputPathError::Link { .. }), "{err:?}");
    }

    #[test]
    fn a_folder_at_the_path_is_not_a_file() {
        let rig = rig();
        std::fs::create_dir_all(rig.root.join("d.md")).expect("dir");
        let err = write_output(&rig.root, Path::new("d.md"), b"x", true).expect_err("dir");
        assert!(matches!(err, OutputPathError::NotRegular { .. }), "{err:?}");
    }
}
