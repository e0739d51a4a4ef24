//! Input history: the lines submitted in this workspace, walked with
//! Up/Down in the input box ([`InputHistory`], pure) and kept across runs
//! in [`HistoryFile`], `input-history.ndjson` beside the workspace's
//! sessions (one JSON string per line, appended with one `write` each).
//!
//! The file lives with the sessions rather than in the workspace's
//! `.soba/`, which holds shareable project files and is often committed:
//! prompts can hold secrets. It is bounded: reading keeps the newest
//! [`MAX_ENTRIES`], and once it holds twice that the file is rewritten
//! with them (a temporary sibling renamed over it). Nothing here fails the
//! UI: a problem becomes one note.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The most entries kept.
pub const MAX_ENTRIES: usize = 500;
/// The longest entry recorded (a bigger paste is not kept).
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;
/// The most bytes read from the end of the file.
const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;
/// The file's name in the sessions folder (not `.jsonl`: that is a session).
pub const FILE_NAME: &str = "input-history.ndjson";

/// Submitted lines, oldest first, and where an Up/Down walk stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputHistory {
    entries: Vec<String>,
    /// The entry shown (an index into `entries`) and the draft to restore.
    walk: Option<(usize, String)>,
    /// Recorded lines not yet written to the file.
    unsaved: Vec<String>,
}

impl InputHistory {
    /// Returns a history holding `entries` (oldest first).
    pub fn new(mut entries: Vec<String>) -> Self {
        if entries.len() > MAX_ENTRIES {
            entries.drain(..entries.len() - MAX_ENTRIES);
        }
        InputHistory {
            entries,
            walk: None,
            unsaved: Vec::new(),
        }
    }

    /// Returns the entries, oldest first.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Records a submitted line (not a repeat of the newest entry, not an
    /// oversized paste) and ends any walk.
    pub fn record(&mut self, line: &str) {
        self.walk = None;
        if line.trim().is_empty()
            || line.len() > MAX_ENTRY_BYTES
            || self.entries.last().is_some_and(|last| last == line)
        {
            return;
        }
        self.entries.push(line.to_owned());
        if self.entries.len() > MAX_ENTRIES {
            self.entries.remove(0);
        }
        self.unsaved.push(line.to_owned());
    }

    /// Returns the lines recorded since the last call, for the file.
    pub fn take_unsaved(&mut self) -> Vec<String> {
        std::mem::take(&mut self.unsaved)
    }

    /// Steps to the next older entry; `draft` is what the box holds now
    /// (kept to come back to). Returns the text to show, `None` at the
    /// oldest entry or with no history.
    pub fn older(&mut self, draft: &str) -> Option<String> {
        let idx = match &self.walk {
            None => self.entries.len().checked_sub(1)?,
            Some((0, _)) => return None,
            Some((idx, _)) => idx - 1,
        };
        let kept = match self.walk.take() {
            Some((_, kept)) => kept,
            None => draft.to_owned(),
        };
        self.walk = Some((idx, kept));
        self.entries.get(idx).cloned()
    }

    /// Steps to the next newer entry, or back to the draft after the
    /// newest. Returns the text to show, `None` when not walking.
    pub fn newer(&mut self) -> Option<String> {
        let (idx, draft) = self.walk.take()?;
        if idx + 1 < self.entries.len() {
            let text = self.entries[idx + 1].clone();
            self.walk = Some((idx + 1, draft));
            Some(text)
        } else {
            Some(draft)
        }
    }

    /// Returns whether an Up/Down walk is in progress.
    pub fn is_walking(&self) -> bool {
        self.walk.is_some()
    }
}

/// The history file of one workspace.
#[derive(Debug)]
pub struct HistoryFile {
    path: PathBuf,
    /// Whether a write already failed (said once, then quiet).
    failed: bool,
}

/// Opens `path` for appending: created `0600`, never through a symlink.
fn open_append(path: &Path) -> std::io::Result<File> {
    if std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.file_type().is_file()) {
        return Err(std::io::Error::other("not a regular file"));
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Parses the file's lines; a line that is not a JSON string is skipped.
fn parse_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<String>(line).ok())
        .filter(|entry| !entry.trim().is_empty())
        .collect()
}

impl HistoryFile {
    /// Returns the history file in the sessions folder `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        HistoryFile {
            path: dir.join(FILE_NAME),
            failed: false,
        }
    }

    /// Reads the newest [`MAX_ENTRIES`] entries; a missing file is an
    /// empty history, any other problem a note. Rewrites a file that has
    /// grown past twice the bound.
    pub fn load(&self) -> (InputHistory, Option<String>) {
        match self.read() {
            Ok(entries) => {
                let grown = entries.len() > 2 * MAX_ENTRIES;
                let history = InputHistory::new(entries);
                let note = if grown {
                    self.rewrite(history.entries()).err().map(|err| {
                        format!(
                            "warning: cannot trim the input history {}: {err}",
                            self.path.display()
                        )
                    })
                } else {
                    None
                };
                (history, note)
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                (InputHistory::default(), None)
            }
            Err(err) => (
                InputHistory::default(),
                Some(format!(
                    "warning: input history not loaded from {}: {err}",
                    self.path.display()
                )),
            ),
        }
    }

    fn read(&self) -> std::io::Result<Vec<String>> {
        let (mut file, metadata) =
            soba_store::untrusted::open_untrusted(&self.path).map_err(|err| match err {
                soba_store::untrusted::UntrustedReadError::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            })?;
        let skip = metadata.len().saturating_sub(MAX_READ_BYTES);
        file.seek(SeekFrom::Start(skip))?;
        let mut bytes = Vec::new();
        file.take(MAX_READ_BYTES).read_to_end(&mut bytes)?;
        if skip > 0 {
            // Started inside a line: drop its rest.
            let start = bytes
                .iter()
                .position(|b| *b == b'\n')
                .map_or(0, |at| at + 1);
            bytes.drain(..start);
        }
        Ok(parse_lines(&String::from_utf8_lossy(&bytes)))
    }

    fn rewrite(&self, entries: &[String]) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
        for entry in entries {
            writeln!(temporary, "{}", serde_json::Value::from(entry.as_str()))?;
        }
        temporary.as_file().sync_all()?;
        temporary.persist(&self.path).map_err(|err| err.error)?;
        Ok(())
    }

    /// Appends `lines`; returns a note the first time writing fails.
    pub fn append(&mut self, lines: &[String]) -> Option<String> {
        if lines.is_empty() || self.failed {
            return None;
        }
        let mut text = String::new();
        for line in lines {
            text.push_str(&serde_json::Value::from(line.as_str()).to_string());
            text.push('\n');
        }
        let written = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| open_append(&self.path))
            // One write: appends from two soba processes do not interleave.
            .and_then(|mut file| file.write_all(text.as_bytes()));
        match written {
            Ok(()) => None,
            Err(err) => {
                self.failed = true;
                Some(format!(
                    "warning: input history not saved to {}: {err}",
                    self.path.display()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[&str]) -> InputHistory {
        InputHistory::new(entries.iter().map(|entry| (*entry).to_owned()).collect())
    }

    #[test]
    fn walking_goes_newest_first_and_comes_back_to_the_draft() {
        let mut walk = history(&["one", "two", "three"]);
        assert_eq!(walk.older("draft").as_deref(), Some("three"));
        assert_eq!(walk.older("three").as_deref(), Some("two"));
        assert_eq!(walk.older("two").as_deref(), Some("one"));
        assert_eq!(walk.older("one"), None);
        assert_eq!(walk.newer().as_deref(), Some("two"));
        assert_eq!(walk.newer().as_deref(), Some("three"));
        assert_eq!(walk.newer().as_deref(), Some("draft"));
        assert_eq!(walk.newer(), None);
        assert!(!walk.is_walking());
        assert_eq!(InputHistory::default().older("x"), None);
    }

    #[test]
    fn recording_skips_repeats_and_stays_bounded() {
        let mut walk = InputHistory::default();
        walk.record("a");
        walk.record("a");
        walk.record("  ");
        walk.record(&"x".repeat(MAX_ENTRY_BYTES + 1));
        assert_eq!(walk.entries(), ["a"]);
        for n in 0..MAX_ENTRIES + 5 {
            walk.record(&n.to_string());
        }
        assert_eq!(walk.entries().len(), MAX_ENTRIES);
        assert_eq!(walk.entries().last().map(String::as_str), Some("504"));
        assert_eq!(walk.take_unsaved().len(), MAX_ENTRIES + 6);
        assert!(walk.take_unsaved().is_empty());
    }

    #[test]
    fn the_file_round_trips_and_is_trimmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sessions = dir.path().join("sessions");
        let mut file = HistoryFile::in_dir(&sessions);
        assert_eq!(file.load(), (InputHistory::default(), None));
        let lines: Vec<String> = (0..2 * MAX_ENTRIES + 1)
            .map(|n| format!("line {n}\nsecond \"row\""))
            .collect();
        assert_eq!(file.append(&lines), None);
        std::fs::OpenOptions::new()
            .append(true)
            .open(sessions.join(FILE_NAME))
            .and_then(|mut f| f.write_all(b"not json\n"))
            .expect("a damaged line");
        let (loaded, note) = file.load();
        assert_eq!(note, None);
        assert_eq!(loaded.entries(), &lines[lines.len() - MAX_ENTRIES..]);
        let text = std::fs::read_to_string(sessions.join(FILE_NAME)).expect("file");
        assert_eq!(text.lines().count(), MAX_ENTRIES, "trimmed");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(sessions.join(FILE_NAME))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn problems_are_notes_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The history path is a directory: unreadable, unwritable.
        std::fs::create_dir_all(dir.path().join(FILE_NAME)).expect("dir");
        let mut file = HistoryFile::in_dir(dir.path());
        let (loaded, note) = file.load();
        assert_eq!(loaded, InputHistory::default());
        assert!(note.is_some_and(|note| note.starts_with("warning: input history not loaded")),);
        let first = file.append(&["a".to_owned()]);
        assert!(first.is_some_and(|note| note.starts_with("warning: input history not saved")),);
        assert_eq!(file.append(&["b".to_owned()]), None);
    }
}
