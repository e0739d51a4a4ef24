//! Creating files at paths a user or a repository chose: capsule exports,
//! handoff capsules, Project Memory files, replay charts.
//!
//! [`write_output`] is the one way soba writes such a file. A path given
//! relative to the base folder (the workspace root), or absolute but inside
//! it, must stay inside it *after following links*: the parent folder is
//! canonicalized and checked against the canonical base, before and after
//! creating missing folders, so a symlinked folder in a cloned repository
//! cannot carry the write elsewhere; the folder is then held open beneath
//! the base (`openat2` with `RESOLVE_BENEATH`, [`crate::beneath`]) and every
//! later step names the file through that handle, so a folder swapped for a
//! link between the check and the write cannot carry it out either. An absolute path outside the base is
//! taken as typed. Whatever the path, its last component must not be a
//! symbolic link (dangling or not) or anything but a regular file.
//!
//! The bytes never go through an existing inode: they are written to a
//! temporary sibling created with `O_EXCL`, flushed to disk (`fsync`), and
//! only then given the final name, by a rename over the old file when
//! overwriting (atomic replace: a hard link's other names and a link
//! swapped in after the check keep their bytes) or by a hard link that
//! fails if a file appeared meanwhile (no clobbering). On any error the
//! temporary file is removed, so a full disk or a denied write leaves
//! neither an empty nor a partial file, and an overwritten file keeps its
//! old content.

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
    /// The path names no file (it ends in `.` or `..`, or is empty). Not
    /// retryable.
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
    write_output_with(root, given, bytes, overwrite, write_bytes)
}

/// How the bytes go into the temporary file (tests inject failures).
type Writer = fn(&mut File, &[u8]) -> std::io::Result<()>;

fn write_bytes(file: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.flush()
}

fn write_output_with(
    root: &Path,
    given: &Path,
    bytes: &[u8],
    overwrite: bool,
    writer: Writer,
) -> Result<PathBuf, OutputPathError> {
    // `.`, `dir/.` and `dir/` name no file (the path's own normalisation would
    // otherwise read `.` as the folder above it); an existing folder is
    // refused as not a regular file below.
    let text = given.as_os_str().as_encoded_bytes();
    let names_folder = text == b"." || text.ends_with(b"/.") || text.ends_with(b"/");
    if names_folder {
        return Err(OutputPathError::NoFileName {
            given: given.to_path_buf(),
        });
    }
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
    let real_parent = check(parent)?;
    // Held open beneath the workspace from here on, so a folder swapped for
    // a link after the checks above cannot lead the write out.
    let held = match &canonical_root {
        Some(canonical_root) => hold_parent(canonical_root, root, given, &real_parent)?,
        None => None,
    };
    let real_file = match &held {
        Some(fd) => held_path(fd).join(name),
        None => real_parent.join(name),
    };
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
    match existing {
        Some(metadata) if metadata.file_type().is_symlink() => {
            return Err(OutputPathError::Link { path });
        }
        Some(metadata) if !metadata.is_file() => {
            return Err(OutputPathError::NotRegular { path });
        }
        Some(_) if !overwrite => return Err(OutputPathError::Exists { path }),
        Some(metadata) => {
            let temp = write_temp(&real_file, bytes, writer, &path, |file| {
                file.set_permissions(metadata.permissions())
            })?;
            // Replaces the directory entry, never the inode behind it: a hard
            // link's other names and a link swapped in keep their bytes.
            std::fs::rename(&temp, &real_file).map_err(|source| {
                remove_quietly(&temp);
                OutputPathError::Io {
                    action: "replace",
                    path: path.clone(),
                    source,
                }
            })?;
        }
        None => {
            let temp = write_temp(&real_file, bytes, writer, &path, |_| Ok(()))?;
            let published = publish_new(&temp, &real_file, &path);
            remove_quietly(&temp);
            published?;
        }
    }
    Ok(path)
}

/// Opens the checked folder `real_parent` (canonical, so free of links)
/// beneath `canonical_root`, for a write confined to the workspace: a link
/// swapped in after the check cannot lead the open out. `None` when the
/// system has no `/proc/self/fd` to name files through the handle: the
/// checked path is used then.
fn hold_parent(
    canonical_root: &Path,
    root: &Path,
    given: &Path,
    real_parent: &Path,
) -> Result<Option<std::os::fd::OwnedFd>, OutputPathError> {
    use crate::beneath::{Beneath, BeneathError, Links};
    if !Path::new("/proc/self/fd").is_dir() {
        return Ok(None);
    }
    let relative = match real_parent.strip_prefix(canonical_root) {
        Ok(rel) if rel.as_os_str().is_empty() => Path::new("."),
        Ok(rel) => rel,
        Err(_) => {
            return Err(OutputPathError::ThroughLink {
                given: given.to_path_buf(),
                root: root.to_path_buf(),
                resolved: real_parent.to_path_buf(),
            });
        }
    };
    let opened = Beneath::open(canonical_root)
        .and_then(|beneath| beneath.open_dir(relative, Links::FollowBeneath));
    match opened {
        Ok(fd) => Ok(Some(fd)),
        Err(BeneathError::Escape { .. }) => Err(OutputPathError::ThroughLink {
            given: given.to_path_buf(),
            root: root.to_path_buf(),
            resolved: real_parent.to_path_buf(),
        }),
        Err(err) => Err(OutputPathError::Io {
            action: "open",
            path: real_parent.to_path_buf(),
            source: std::io::Error::other(err.to_string()),
        }),
    }
}

/// The path that names `fd`'s folder itself, whatever is at its old name.
fn held_path(fd: &std::os::fd::OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Where a temporary sibling of `real_file` is written: a short hidden
/// name in the same folder (so a rename is atomic), unique per process.
fn temp_sibling(real_file: &Path, attempt: u32) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!(".soba-{}-{n}-{attempt}.tmp", std::process::id());
    real_file.with_file_name(name)
}

/// Writes `bytes` to a new temporary sibling of `real_file` (created with
/// `O_EXCL`, so never through a link), applies `prepare`, flushes it to
/// disk and returns its path. On any error the temporary file is removed,
/// so a full disk leaves nothing behind.
fn write_temp(
    real_file: &Path,
    bytes: &[u8],
    writer: Writer,
    path: &Path,
    prepare: impl FnOnce(&File) -> std::io::Result<()>,
) -> Result<PathBuf, OutputPathError> {
    let mut attempt = 0;
    let (temp, mut file) = loop {
        let temp = temp_sibling(real_file, attempt);
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => break (temp, file),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                attempt += 1;
            }
            Err(source) => {
                return Err(OutputPathError::Io {
                    action: "create",
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    };
    let written = prepare(&file)
        .and_then(|()| writer(&mut file, bytes))
        .and_then(|()| file.sync_all());
    drop(file);
    match written {
        Ok(()) => Ok(temp),
        Err(source) => {
            remove_quietly(&temp);
            Err(OutputPathError::Io {
                action: "write",
                path: path.to_path_buf(),
                source,
            })
        }
    }
}

/// Gives the complete temporary file its final name without replacing
/// anything there: a hard link fails if a file appeared meanwhile. Where a
/// file system has no hard links, a rename after checking the name is
/// still free is the fallback.
fn publish_new(temp: &Path, real_file: &Path, path: &Path) -> Result<(), OutputPathError> {
    let linked = std::fs::hard_link(temp, real_file);
    let source = match linked {
        Ok(()) => return Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(OutputPathError::Exists {
                path: path.to_path_buf(),
            });
        }
        Err(err) => err,
    };
    match std::fs::symlink_metadata(real_file) {
        Ok(_) => Err(OutputPathError::Exists {
            path: path.to_path_buf(),
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => std::fs::rename(temp, real_file)
            .map_err(|source| OutputPathError::Io {
                action: "create",
                path: path.to_path_buf(),
                source,
            }),
        Err(_) => Err(OutputPathError::Io {
            action: "create",
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn remove_quietly(temp: &Path) {
    // Best effort: the temporary file is ours, and a failure to remove it
    // must not hide the error that made us remove it.
    let _ = std::fs::remove_file(temp);
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

    /// A folder swapped for a link to a folder outside, again and again,
    /// while files are written into it: the check-then-write of the old
    /// code let some writes land outside; the held folder never does.
    #[test]
    fn a_folder_swapped_for_a_link_during_writes_never_leads_out() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let rig = rig();
        let sub = rig.root.join("sub");
        std::fs::create_dir_all(&sub).expect("sub");
        let (parked, link) = (rig.root.join("sub.real"), rig.root.join("sub.link"));
        symlink(&rig.outside, &link).expect("link");
        let stop = Arc::new(AtomicBool::new(false));
        let n_swaps = Arc::new(AtomicU64::new(0));
        let swapper = {
            let (stop, n_swaps) = (stop.clone(), n_swaps.clone());
            let (sub, parked, link) = (sub.clone(), parked.clone(), link.clone());
            std::thread::spawn(move || {
                // A write may create `sub` again while it is parked, so a
                // step can fail; only the swaps that put the link in count.
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(&sub, &parked);
                    if std::fs::rename(&link, &sub).is_ok() {
                        n_swaps.fetch_add(1, Ordering::Relaxed);
                        let _ = std::fs::rename(&sub, &link);
                    }
                    let _ = std::fs::rename(&parked, &sub);
                }
            })
        };
        for n in 0..1_000 {
            let _ = write_output(&rig.root, Path::new(&format!("sub/w{n}.md")), b"w", true);
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().expect("the swapper ends");
        assert!(n_swaps.load(Ordering::Relaxed) > 0);
        let outside: Vec<_> = std::fs::read_dir(&rig.outside)
            .expect("outside")
            .map(|entry| entry.expect("an entry").file_name())
            .collect();
        assert_eq!(outside, Vec::<std::ffi::OsString>::new());
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
    fn a_dot_names_no_file() {
        let rig = rig();
        std::fs::create_dir_all(rig.root.join("sub")).expect("a folder");
        for given in [".", "sub/.", "./", "sub/"] {
            let err = write_output(&rig.root, Path::new(given), b"x", true).unwrap_err();
            assert!(
                matches!(err, OutputPathError::NoFileName { .. }),
                "{given}: {err}"
            );
        }
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

    #[test]
    fn an_overwrite_replaces_the_name_not_the_inode_of_a_hard_link() {
        let rig = rig();
        let victim = rig.outside.join("victim.txt");
        std::fs::write(&victim, b"ORIGINAL").expect("victim");
        std::fs::hard_link(&victim, rig.root.join("out.md")).expect("hard link");
        write_output(&rig.root, Path::new("out.md"), b"new", true).expect("overwritten");
        assert_eq!(std::fs::read(&victim).expect("read"), b"ORIGINAL");
        assert_eq!(
            std::fs::read(rig.root.join("out.md")).expect("read"),
            b"new"
        );
        assert_eq!(names(&rig.root), ["out.md"]);
    }

    fn names(folder: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(folder)
            .expect("dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    fn half_then_full_disk(file: &mut File, bytes: &[u8]) -> std::io::Result<()> {
        file.write_all(&bytes[..bytes.len() / 2])?;
        Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
    }

    #[test]
    fn a_failed_write_leaves_no_file_and_keeps_an_old_one() {
        let rig = rig();
        let err = write_output_with(
            &rig.root,
            Path::new("out/new.md"),
            b"0123456789",
            false,
            half_then_full_disk,
        )
        .expect_err("full disk");
        assert!(
            matches!(
                err,
                OutputPathError::Io {
                    action: "write",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(names(&rig.root.join("out")), Vec::<String>::new());
        std::fs::write(rig.root.join("out/old.md"), b"old").expect("old");
        let err = write_output_with(
            &rig.root,
            Path::new("out/old.md"),
            b"0123456789",
            true,
            half_then_full_disk,
        )
        .expect_err("full disk");
        assert!(
            matches!(
                err,
                OutputPathError::Io {
                    action: "write",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(names(&rig.root.join("out")), ["old.md"]);
        assert_eq!(
            std::fs::read(rig.root.join("out/old.md")).expect("read"),
            b"old"
        );
    }

    #[test]
    fn a_new_file_never_clobbers_and_leaves_no_temporary_file() {
        let rig = rig();
        write_output(&rig.root, Path::new("a.md"), b"first", false).expect("written");
        let err = write_output(&rig.root, Path::new("a.md"), b"second", false).expect_err("exists");
        assert!(matches!(err, OutputPathError::Exists { .. }), "{err:?}");
        assert_eq!(
            std::fs::read(rig.root.join("a.md")).expect("read"),
            b"first"
        );
        assert_eq!(names(&rig.root), ["a.md"]);
    }

    #[test]
    fn an_overwrite_keeps_the_old_files_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let rig = rig();
        let file = rig.root.join("p.md");
        std::fs::write(&file, b"old").expect("old");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        write_output(&rig.root, Path::new("p.md"), b"new", true).expect("overwritten");
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
