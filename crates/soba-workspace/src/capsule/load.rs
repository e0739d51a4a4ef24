//! Reading a `.capsule.md` for loading (a regular file of at most 1 MiB,
//! UTF-8) and checking it against SPEC §12's limits, as the context entry
//! to append.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use soba_core::render;
use soba_core::{ContextEntry, ContextSource, Quality, TokenCount, TokenCounter};

use super::display_path;
use crate::error::{Result, WorkspaceError};

/// Turns a capsule-file problem into an error naming the file.
fn capsule_file_error(path: &Path, err: render::CapsuleFileError) -> WorkspaceError {
    WorkspaceError::user(format!("cannot load {}: {err}", shown_name(path)))
}

/// A capsule file's name as soba shows and records it: whoever named the
/// file chose it, so a secret in it is redacted like one in its text.
fn shown_name(path: &Path) -> String {
    soba_core::redact::redact(&path.display().to_string()).text
}

/// Resolves a `/capsule load` path: relative to the workspace root unless
/// absolute.
pub fn load_path(root: &Path, given: &Path) -> PathBuf {
    if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    }
}

/// Reads a `.capsule.md` as UTF-8: a regular file (never a FIFO or a
/// device) of at most 1 MiB, the cap enforced while reading (SPEC §12).
/// A file under the workspace `root` is read beneath it, as the file tools
/// read (no link leads outside); one the user names elsewhere by an
/// absolute path is their choice, read with the same type and size checks.
pub fn read_capsule_text(root: &Path, file: &Path) -> Result<String> {
    let max = render::CAPSULE_FILE_MAX_BYTES;
    if let Ok(rel) = file.strip_prefix(root) {
        let bytes =
            crate::setup::read_workspace_file(root, rel, max as u64).map_err(|err| match err {
                crate::setup::WorkspaceReadError::TooLarge { size } => capsule_file_error(
                    file,
                    render::CapsuleFileError::TooLarge {
                        bytes: usize::try_from(size).unwrap_or(usize::MAX),
                        max,
                    },
                ),
                crate::setup::WorkspaceReadError::Missing => {
                    WorkspaceError::user(format!("cannot read {}: no such file", shown_name(file)))
                        .hint("list capsule files with `soba capsule list`")
                }
                crate::setup::WorkspaceReadError::Refused(why) => {
                    WorkspaceError::user(format!("cannot load {}: {why}", shown_name(file)))
                        .hint("a capsule file is a regular `.capsule.md` file")
                }
            })?;
        return capsule_text_of(file, bytes);
    }
    let bytes =
        soba_store::untrusted::read_untrusted(file, max as u64).map_err(|err| match err {
            soba_store::untrusted::UntrustedReadError::TooLarge { .. } => capsule_file_error(
                file,
                render::CapsuleFileError::TooLarge {
                    bytes: std::fs::metadata(file)
                        .ok()
                        .and_then(|metadata| usize::try_from(metadata.len()).ok())
                        .filter(|&bytes| bytes > max)
                        .unwrap_or(max + 1),
                    max,
                },
            ),
            other => {
                WorkspaceError::from(other).hint("a capsule file is a regular `.capsule.md` file")
            }
        })?;
    capsule_text_of(file, bytes)
}

/// Returns a capsule file's bytes as text, or says where it is not UTF-8.
fn capsule_text_of(file: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|err| {
        WorkspaceError::user(format!(
            "cannot load {}: not UTF-8 text (invalid byte at offset {})",
            shown_name(file),
            err.utf8_error().valid_up_to()
        ))
    })
}

/// A capsule file checked for loading, as the context entry to append.
pub struct Loadable {
    /// The `capsule_file` context entry.
    pub entry: ContextEntry,
    /// Its front matter's title.
    pub title: Option<String>,
    /// Its front matter's quality.
    pub quality: Option<Quality>,
    /// Its size in the session model's tokens.
    pub tokens: TokenCount,
}

impl Loadable {
    /// Returns `, "title"` and `, quality` for the confirmation line.
    pub fn details(&self) -> String {
        let title = self
            .title
            .as_deref()
            .map(|title| format!(", \"{title}\""))
            .unwrap_or_default();
        let quality = self
            .quality
            .map(|quality| format!(", {}", quality.as_str()))
            .unwrap_or_default();
        format!("{title}{quality}")
    }
}

/// Checks `text`, read from `file`, against SPEC §12's limits for a session
/// whose soft threshold is `auto_limit` and builds its context entry.
pub fn check_capsule_file(
    root: &Path,
    file: &Path,
    text: String,
    auto_limit: TokenCount,
    counter: &dyn TokenCounter,
) -> Result<Loadable> {
    let parsed = render::check_loadable(&text, auto_limit, counter)
        .map_err(|err| capsule_file_error(file, err))?;
    let tokens = counter.count_text(&text).n;
    Ok(Loadable {
        title: parsed.front.title.clone(),
        quality: parsed.front.quality,
        tokens,
        entry: ContextEntry {
            source: ContextSource::CapsuleFile,
            // Recorded and shown redacted (a secret in a file name).
            path: soba_core::redact::redact(&display_path(root, file)).text,
            sha256: Sha256::digest(text.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            text,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Runs `read_capsule_text` (the reader of `soba capsule load` and the
    /// TUI's `/capsule load`) on a thread, failing if it takes over 5 s.
    fn read_promptly(file: &Path) -> Result<String> {
        let (sender, receiver) = std::sync::mpsc::channel();
        let file = file.to_path_buf();
        std::thread::spawn(move || {
            let _ = sender.send(read_capsule_text(Path::new("/nonexistent-root"), &file));
        });
        receiver
            .recv_timeout(Duration::from_secs(5))
            .expect("read_capsule_text returned within 5 s")
    }

    #[test]
    fn capsule_files_must_be_regular_files_of_at_most_1_mib() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.capsule.md");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let err = read_promptly(&fifo).unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "{} is a FIFO (named pipe), not a regular file: soba reads only regular files here; copy the content into a file and use that",
                fifo.display()
            )
        );
        assert_eq!(
            err.hints,
            ["a capsule file is a regular `.capsule.md` file"]
        );
        let folder = dir.path().join("folder.capsule.md");
        std::fs::create_dir_all(&folder).unwrap();
        for (name, target, kind) in [
            (
                "zero.capsule.md",
                Path::new("/dev/zero"),
                "a character device",
            ),
            ("dir.capsule.md", folder.as_path(), "a directory"),
        ] {
            let link = dir.path().join(name);
            std::os::unix::fs::symlink(target, &link).unwrap();
            let err = read_promptly(&link).unwrap_err();
            assert!(
                err.message
                    .starts_with(&format!("{} is {kind}, not a regular file", link.display())),
                "{}",
                err.message
            );
        }
        let stdin = dir.path().join("stdin.capsule.md");
        std::os::unix::fs::symlink("/dev/stdin", &stdin).unwrap();
        // Whatever the test's stdin is, it is not read: a terminal, pipe or
        // /dev/null is refused; a regular file would be read (and capped).
        let _ = read_promptly(&stdin);
        let big = dir.path().join("big.capsule.md");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(render::CAPSULE_FILE_MAX_BYTES as u64 + 1)
            .unwrap();
        let err = read_promptly(&big).unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "cannot load {}: {}",
                big.display(),
                render::CapsuleFileError::TooLarge {
                    bytes: render::CAPSULE_FILE_MAX_BYTES + 1,
                    max: render::CAPSULE_FILE_MAX_BYTES
                }
            )
        );
    }
}
