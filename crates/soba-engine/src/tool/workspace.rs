//! Path confinement: every file tool resolves its paths and opens its files
//! through the [`Workspace`], which refuses `..`, absolute-path, symlink and
//! hard-link escapes from the workspace root (SPEC §11.1, §17).
//!
//! A path is first checked by name ([`Workspace::resolve`], for a clear
//! error), then every file is opened, created and replaced through a handle
//! on the root ([`soba_store::beneath`]: `openat2` with `RESOLVE_BENEATH`),
//! so a folder swapped for a symlink between the check and the use cannot
//! lead a tool out of the workspace.

use std::fs::{self, File, Metadata};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use soba_store::beneath::{Beneath, BeneathError, Links, Replaced};
use soba_store::untrusted::FileKind;

use super::ToolError;

/// The directory the file tools are confined to: the canonicalised
/// workspace root (SPEC §14.1), held open so that every file is resolved
/// beneath it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    beneath: Arc<Beneath>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for Workspace {}

impl Workspace {
    /// Opens a workspace at `root`, canonicalising it.
    ///
    /// Fails when the root does not exist, cannot be read or is not a
    /// directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        let given = root.as_ref();
        let root = fs::canonicalize(given).map_err(|source| ToolError::Root {
            path: given.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(ToolError::RootNotDirectory { path: root });
        }
        let beneath = Beneath::open(&root).map_err(|error| ToolError::Root {
            path: given.to_path_buf(),
            source: io::Error::other(error),
        })?;
        Ok(Workspace {
            root,
            beneath: Arc::new(beneath),
        })
    }

    /// Returns the canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path given to a tool (relative to the root, or absolute)
    /// to a canonical path inside the root.
    ///
    /// The path need not exist: its nearest existing ancestor is
    /// canonicalised (following symlinks) and must lie inside the root, and
    /// the missing rest is appended. A `..` is applied lexically, so it can
    /// never climb out through a symlinked directory. Dangling symlinks are
    /// refused because writing through one would create its target.
    pub fn resolve(&self, path: impl AsRef<Path>) -> Result<PathBuf, ToolError> {
        let given = path.as_ref();
        let shown = given.display().to_string();
        if given.as_os_str().is_empty() {
            return Err(ToolError::EmptyPath);
        }
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        let normal = normalize(&joined);

        // Walk up to the nearest ancestor that exists; the rest is created
        // later (by write_file) or reported missing (by the readers).
        let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
        let mut cursor: &Path = &normal;
        let canonical = loop {
            match fs::canonicalize(cursor) {
                Ok(canonical) => break canonical,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    if fs::symlink_metadata(cursor).is_ok() {
                        return Err(ToolError::DanglingSymlink {
                            path: shown,
                            root: self.root.clone(),
                        });
                    }
                    let (Some(parent), Some(name)) = (cursor.parent(), cursor.file_name()) else {
                        // Nothing exists up to the filesystem root: the root
                        // itself is gone.
                        return Err(ToolError::NotFound { path: shown });
                    };
                    missing.push(name);
                    cursor = parent;
                }
                Err(source) => {
                    return Err(ToolError::Io {
                        path: shown,
                        source,
                    });
                }
            }
        };

        if !canonical.starts_with(&self.root) {
            // A path that is lexically inside the root but resolves outside
            // went through a symlink; anything else was outside from the start.
            return Err(if normal.starts_with(&self.root) {
                ToolError::SymlinkEscape {
                    path: shown,
                    target: canonical,
                    root: self.root.clone(),
                }
            } else {
                ToolError::OutsideWorkspace {
                    path: shown,
                    root: self.root.clone(),
                }
            });
        }
        let mut resolved = canonical;
        for name in missing.iter().rev() {
            resolved.push(name);
        }
        Ok(resolved)
    }

    /// Resolves a path that is about to be written or edited: as
    /// [`Workspace::resolve`], and refuses directories, special files and
    /// regular files with more than one hard link (another link may live
    /// outside the root, and the write would break it). The checks look
    /// through the root's handle; [`Workspace::create_or_replace`] is what
    /// keeps the write itself inside.
    pub fn resolve_for_write(&self, path: impl AsRef<Path>) -> Result<PathBuf, ToolError> {
        let resolved = self.resolve(path.as_ref())?;
        let shown = path.as_ref().display().to_string();
        let inside = self.inside(&resolved);
        match self.beneath.metadata(inside, Links::FollowBeneath) {
            Ok(Some(meta)) if meta.is_dir() => Err(ToolError::IsDirectory { path: shown }),
            Ok(Some(meta)) if !meta.is_file() => Err(ToolError::NotRegular {
                path: shown,
                kind: FileKind::of(&meta),
            }),
            Ok(Some(meta)) => {
                let links = hard_links(&meta);
                if links > 1 {
                    Err(ToolError::HardLink {
                        path: shown,
                        links,
                        root: self.root.clone(),
                    })
                } else {
                    Ok(resolved)
                }
            }
            Ok(None) => Ok(resolved),
            Err(error) => Err(self.beneath_error(&shown, error)),
        }
    }

    /// Opens a regular file for reading: resolved by name, then opened
    /// beneath the root, and checked on the handle (a FIFO, socket, device
    /// or directory is refused without blocking). Returns the file, its
    /// metadata and the resolved path.
    pub fn open_read(&self, path: &str) -> Result<(File, Metadata, PathBuf), ToolError> {
        let resolved = self.resolve(path)?;
        let inside = self.inside(&resolved);
        let (file, meta) = self
            .beneath
            .open_regular(inside, Links::FollowBeneath)
            .map_err(|error| self.beneath_error(path, error))?;
        Ok((file, meta, resolved))
    }

    /// Writes `bytes` as the whole content of `path`, creating missing
    /// parent folders: checked as [`Workspace::resolve_for_write`], then a
    /// temporary file in the parent folder's handle is renamed over the
    /// name, so no swapped folder or planted link can redirect it. Returns
    /// what it did and the resolved path.
    pub fn create_or_replace(
        &self,
        path: &str,
        bytes: &[u8],
    ) -> Result<(Replaced, PathBuf), ToolError> {
        let resolved = self.resolve_for_write(path)?;
        let inside = self.inside(&resolved);
        if let Some(parent) = inside.parent() {
            self.beneath
                .create_dir_all(parent)
                .map_err(|error| self.beneath_error(path, error))?;
        }
        let replaced = self
            .beneath
            .replace(inside, bytes)
            .map_err(|error| self.beneath_error(path, error))?;
        Ok((replaced, resolved))
    }

    /// Returns whether `path` (a path a walk found under the root) names a
    /// file or symlink that is beneath the root right now, reached without
    /// following any symlink: the walk itself follows paths, so what it
    /// reports is kept only when this holds.
    pub(crate) fn has_entry(&self, path: &Path) -> bool {
        let Ok(inside) = path.strip_prefix(&self.root) else {
            return false;
        };
        matches!(self.beneath.metadata(inside, Links::Refuse), Ok(Some(meta)) if !meta.is_dir())
    }

    /// Opens a regular file a walk found under the root, following no
    /// symlink (the walk lists links but never follows them); `None` for
    /// anything else.
    pub(crate) fn open_entry(&self, path: &Path) -> Option<File> {
        let inside = path.strip_prefix(&self.root).ok()?;
        self.beneath
            .open_regular(inside, Links::Refuse)
            .ok()
            .map(|(file, _)| file)
    }

    /// Returns a resolved (canonical) path relative to the root.
    fn inside<'a>(&self, resolved: &'a Path) -> &'a Path {
        resolved.strip_prefix(&self.root).unwrap_or(Path::new(""))
    }

    /// Turns a failure beneath the root into the tool error the model sees.
    fn beneath_error(&self, shown: &str, error: BeneathError) -> ToolError {
        let shown = shown.to_owned();
        match error {
            // The name check passed, so a link on the way changed since.
            BeneathError::Escape { .. } => ToolError::ChangedDuringCall {
                path: shown,
                root: self.root.clone(),
            },
            BeneathError::NotRegular {
                kind: FileKind::Directory,
                ..
            } => ToolError::IsDirectory { path: shown },
            BeneathError::NotRegular { kind, .. } => ToolError::NotRegular { path: shown, kind },
            error if error.is_not_found() => ToolError::NotFound { path: shown },
            BeneathError::Io { source, .. } => ToolError::Io {
                path: shown,
                source,
            },
            other => ToolError::Io {
                path: shown,
                source: io::Error::other(other),
            },
        }
    }

    /// Returns `path` relative to the root for display (`.` for the root
    /// itself); paths outside the root are shown whole.
    pub fn relative(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rest) if rest.as_os_str().is_empty() => ".".to_owned(),
            Ok(rest) => rest.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }
}

/// Applies `.` and `..` lexically: `..` drops the previous component and
/// stops at the filesystem root.
fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => normal.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            Component::Normal(name) => normal.push(name),
        }
    }
    normal
}

fn hard_links(meta: &Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.nlink()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_applies_dots_lexically() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/a/../../..")), PathBuf::from("/"));
    }

    #[test]
    fn an_escape_after_the_name_check_says_the_path_changed_during_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        let error = workspace.beneath_error(
            "sub/a.txt",
            BeneathError::Escape {
                path: PathBuf::from("sub/a.txt"),
                root: workspace.root().to_path_buf(),
            },
        );
        assert_eq!(
            error.to_string(),
            format!(
                "`sub/a.txt` changed during the call: a folder on it was replaced by a symbolic link leading out of the workspace root {} between soba's check and its open, so soba refused it and read or wrote nothing through it; retry the call, and if this repeats, another program is moving files there",
                workspace.root().display()
            )
        );
    }

    #[test]
    fn relative_shows_root_as_dot() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        assert_eq!(workspace.relative(workspace.root()), ".");
        assert_eq!(
            workspace.relative(&workspace.root().join("src/a.rs")),
            "src/a.rs"
        );
        assert_eq!(workspace.relative(Path::new("/elsewhere")), "/elsewhere");
    }

    #[test]
    fn missing_components_are_appended_to_the_canonical_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        let resolved = workspace.resolve("new/dir/../file.txt").unwrap();
        assert_eq!(resolved, workspace.root().join("new/file.txt"));
    }

    #[test]
    fn root_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            Workspace::new(&file),
            Err(ToolError::RootNotDirectory { .. })
        ));
        assert!(matches!(
            Workspace::new(dir.path().join("missing")),
            Err(ToolError::Root { .. })
        ));
    }
}
