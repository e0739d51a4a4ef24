//! Path confinement: every file tool resolves its paths through the
//! [`Workspace`], which refuses `..`, absolute-path, symlink and hard-link
//! escapes from the workspace root (SPEC §11.1, §17).

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// The directory the file tools are confined to: the canonicalised
/// workspace root (SPEC §14.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

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
        Ok(Workspace { root })
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
    /// [`Workspace::resolve`], and refuses directories and regular files
    /// with more than one hard link (another link may live outside the root,
    /// and writing would change that file too).
    pub fn resolve_for_write(&self, path: impl AsRef<Path>) -> Result<PathBuf, ToolError> {
        let resolved = self.resolve(path.as_ref())?;
        let shown = path.as_ref().display().to_string();
        match fs::metadata(&resolved) {
            Ok(meta) if meta.is_dir() => Err(ToolError::IsDirectory { path: shown }),
            Ok(meta) => {
                let links = hard_links(&meta);
                if meta.is_file() && links > 1 {
                    Err(ToolError::HardLink {
                        path: shown,
                        links,
                        root: self.root.clone(),
                    })
                } else {
                    Ok(resolved)
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(resolved),
            Err(source) => Err(ToolError::Io {
                path: shown,
                source,
            }),
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

fn hard_links(meta: &fs::Metadata) -> u64 {
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
