//! The file walk shared by `list_files` and `search`: honours `.gitignore`
//! (also outside a git repository), `.ignore` and `.git/info/exclude`, skips
//! `.git/`, never follows symlinks, filters by a glob and comes back sorted.

use std::path::{Path, PathBuf};

use ignore::WalkBuilder;
use ignore::overrides::{Override, OverrideBuilder};
use tokio_util::sync::CancellationToken;

use super::{ToolError, ToolOutcome, Workspace};

/// Resolves the directory (or file) a walk starts from; `None` is the root.
pub(crate) fn base(workspace: &Workspace, path: Option<&str>) -> Result<PathBuf, ToolOutcome> {
    let given = path.filter(|path| !path.is_empty()).unwrap_or(".");
    let resolved = workspace.resolve(given).map_err(ToolOutcome::from)?;
    if !resolved.exists() {
        return Err(ToolError::NotFound {
            path: given.to_owned(),
        }
        .into());
    }
    Ok(resolved)
}

/// Compiles a gitignore-style glob (`*.rs`, `src/**/*.md`) matched
/// relative to `base`.
pub(crate) fn glob(base: &Path, glob: Option<&str>) -> Result<Option<Override>, ToolOutcome> {
    let Some(glob) = glob.filter(|glob| !glob.is_empty()) else {
        return Ok(None);
    };
    let dir = if base.is_dir() {
        base
    } else {
        base.parent().unwrap_or(base)
    };
    let mut builder = OverrideBuilder::new(dir);
    let built = builder.add(glob).and_then(|builder| builder.build());
    built
        .map(Some)
        .map_err(|error| ToolOutcome::error(format!("invalid glob `{glob}`: {error}")))
}

/// Returns every non-directory entry under `base` that is not ignored and
/// matches `filter`, sorted by path. Symlinks are listed, not followed.
///
/// The walker opens folders by path, so a folder swapped for a symlink
/// while it runs could make it list a folder outside; each entry is kept
/// only if it is beneath the root, reached without any symlink, when
/// checked through the root's handle ([`Workspace::has_entry`]).
pub(crate) fn files(
    workspace: &Workspace,
    base: &Path,
    filter: Option<&Override>,
    cancel: &CancellationToken,
) -> Result<Vec<PathBuf>, ToolOutcome> {
    let mut builder = WalkBuilder::new(base);
    builder
        .hidden(false)
        .require_git(false)
        // The user's global excludes are environment, not project: leave
        // them out so results depend on the workspace alone.
        .git_global(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git");
    let mut found = Vec::new();
    for entry in builder.build() {
        if cancel.is_cancelled() {
            return Err(ToolOutcome::error("cancelled"));
        }
        // Unreadable directories are skipped, as `rg` does.
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_none_or(|kind| kind.is_dir()) {
            continue;
        }
        // Overrides are applied here rather than in the walker, where a
        // whitelist glob would win over `.gitignore`.
        if let Some(filter) = filter
            && !filter.matched(entry.path(), false).is_whitelist()
        {
            continue;
        }
        if !workspace.has_entry(entry.path()) {
            continue;
        }
        found.push(entry.into_path());
    }
    found.sort();
    Ok(found)
}
