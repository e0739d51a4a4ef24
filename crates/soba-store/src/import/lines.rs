//! The lines of a JSONL transcript, held in memory or streamed from its
//! file.
//!
//! A streamed file is read again on each pass, one line at a time, so an
//! importer holds at most one source line (plus what it converted) instead
//! of the whole file and every parsed line: tree-shaped formats read the
//! file once for the ids and parents of its lines and once more for the
//! lines on the branch they keep. Every pass reads the same file (the
//! handle opened first, so a file renamed over it or removed changes
//! nothing) and the same leading bytes (its length when it was opened, so
//! an agent still appending does not change what is imported); a file
//! rewritten in place between the passes is found by the hash of the bytes
//! each pass read, and is an error, not a mixed session.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::hash::Hasher;
use std::io::{BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use rustc_hash::FxHasher;
use serde_json::{Map, Value};

use super::InvalidUtf8;
use super::text::{self, LoneSurrogates};

/// Bytes read from the file per system call.
const READ_BUFFER: usize = 256 * 1024;

/// The lines of a JSONL transcript.
pub(crate) enum Lines<'a> {
    /// The whole text, in memory.
    Text(&'a str),
    /// The file, read again on each pass.
    File(FileLines),
}

/// A JSONL file read line by line.
pub(crate) struct FileLines {
    path: PathBuf,
    file: File,
    /// The bytes every pass reads.
    len: u64,
    /// The invalid UTF-8 the first pass met.
    invalid_utf8: Cell<Option<InvalidUtf8>>,
    /// The lone surrogate escapes the first pass replaced.
    surrogates: Cell<Option<LoneSurrogates>>,
    /// The hash of the bytes the first pass read.
    scanned: Cell<Option<u64>>,
    /// The first read error or change found; the import fails with it.
    error: RefCell<Option<std::io::Error>>,
}

impl Lines<'_> {
    /// Returns the lines of the first `len` bytes of `file`, opened at
    /// `path` (named in errors).
    pub fn file(path: &Path, file: File, len: u64) -> Lines<'static> {
        Lines::File(FileLines {
            path: path.to_owned(),
            file,
            len,
            invalid_utf8: Cell::new(None),
            surrogates: Cell::new(None),
            scanned: Cell::new(None),
            error: RefCell::new(None),
        })
    }

    /// Calls `each(line_idx, line)` for every line: split as
    /// [`str::lines`] splits, a UTF-8 byte-order mark before the first
    /// line removed, invalid UTF-8 replaced by U+FFFD. `each` returns
    /// `false` to stop early. Lone surrogate escapes are replaced too
    /// ([`text`]) in a file's lines; text in memory is read as given (the
    /// importer repaired it whole when it decoded it).
    pub fn each_line(&self, mut each: impl FnMut(usize, &str) -> bool) {
        match self {
            Lines::Text(text) => {
                let text = text.strip_prefix('\u{feff}').unwrap_or(text);
                for (line_idx, line) in text.lines().enumerate() {
                    if !each(line_idx, line) {
                        return;
                    }
                }
            }
            Lines::File(file) => file.each_line(each),
        }
    }

    /// Parses the lines at `wanted` (ascending line indexes of lines that
    /// were JSON objects on an earlier pass) and calls `each` with each
    /// object, in order. A wanted line that is no longer an object means
    /// the file changed between the passes: the import fails with that
    /// error (see [`Lines::take_error`]) and `each` is not called again.
    pub fn each_object_at(
        &self,
        wanted: &[usize],
        mut each: impl FnMut(usize, Map<String, Value>),
    ) {
        let mut next = 0usize;
        let mut changed = false;
        self.each_line(|line_idx, line| {
            let Some(&want) = wanted.get(next) else {
                return false;
            };
            if line_idx < want {
                return true;
            }
            next += 1;
            match serde_json::from_str::<Value>(line.trim()) {
                Ok(Value::Object(obj)) if line_idx == want => {
                    each(line_idx, obj);
                    true
                }
                _ => {
                    changed = true;
                    false
                }
            }
        });
        if changed || next < wanted.len() {
            self.fail(changed_error());
        }
    }

    /// Returns the invalid UTF-8 the first pass over a file found (text in
    /// memory is already valid: its reader scanned the bytes).
    pub fn invalid_utf8(&self) -> Option<InvalidUtf8> {
        match self {
            Lines::Text(_) => None,
            Lines::File(file) => file.invalid_utf8.get(),
        }
    }

    /// Returns the lone surrogate escapes the first pass over a file
    /// replaced (text in memory: see [`Lines::each_line`]).
    pub fn lone_surrogates(&self) -> Option<LoneSurrogates> {
        match self {
            Lines::Text(_) => None,
            Lines::File(file) => file.surrogates.get(),
        }
    }

    /// Returns the read error that cut a pass short, with the file's path.
    pub fn take_error(&self) -> Option<(PathBuf, std::io::Error)> {
        match self {
            Lines::Text(_) => None,
            Lines::File(file) => file
                .error
                .borrow_mut()
                .take()
                .map(|err| (file.path.clone(), err)),
        }
    }

    fn fail(&self, err: std::io::Error) {
        if let Lines::File(file) = self {
            file.fail(err);
        }
    }
}

/// The error of a file rewritten between two passes.
fn changed_error() -> std::io::Error {
    std::io::Error::other(
        "the file changed while soba was reading it; import it again once the agent writing it has stopped",
    )
}

impl FileLines {
    fn fail(&self, err: std::io::Error) {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    fn each_line(&self, mut each: impl FnMut(usize, &str) -> bool) {
        if self.error.borrow().is_some() {
            return;
        }
        let first_pass = self.scanned.get().is_none();
        let mut file = &self.file;
        if let Err(err) = file.rewind() {
            self.fail(err);
            return;
        }
        let mut reader = BufReader::with_capacity(READ_BUFFER, file.take(self.len));
        let mut hasher = FxHasher::default();
        // After `each` says stop, the rest is still read for the hash.
        let mut calling = true;
        let mut buf: Vec<u8> = Vec::new();
        let mut line_start = 0u64;
        let mut invalid: Option<InvalidUtf8> = None;
        let mut surrogates: Option<LoneSurrogates> = None;
        for line_idx in 0usize.. {
            buf.clear();
            let read = match reader.read_until(b'\n', &mut buf) {
                Ok(read) => read,
                Err(err) => {
                    self.fail(err);
                    break;
                }
            };
            if read == 0 {
                break;
            }
            hasher.write(&buf);
            if !calling {
                continue;
            }
            let mut bytes = &buf[..];
            let mut skipped = 0u64;
            if line_idx == 0
                && let Some(rest) = bytes.strip_prefix(crate::line::UTF8_BOM)
            {
                bytes = rest;
                skipped = crate::line::UTF8_BOM.len() as u64;
                if bytes.is_empty() {
                    // The mark alone is no line.
                    continue;
                }
            }
            // As `str::lines`: `\n` or `\r\n` ends a line; a lone `\r` at
            // the end of the file stays.
            let bytes = match bytes.strip_suffix(b"\n") {
                Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
                None => bytes,
            };
            // Valid text (the usual case) is checked by the fast test alone.
            let text = match std::str::from_utf8(bytes) {
                Ok(text) => Cow::Borrowed(text),
                Err(_) => {
                    if first_pass && let Some(found) = InvalidUtf8::scan(bytes) {
                        let total = invalid.get_or_insert(InvalidUtf8 {
                            first_offset: line_start + skipped + found.first_offset,
                            replaced: 0,
                        });
                        total.replaced += found.replaced;
                    }
                    String::from_utf8_lossy(bytes)
                }
            };
            let (text, found) = text::repair_lossy(text);
            if first_pass {
                LoneSurrogates::add(&mut surrogates, line_start + skipped, found);
            }
            line_start += read as u64;
            calling = each(line_idx, &text);
        }
        let hash = hasher.finish();
        if first_pass {
            self.invalid_utf8.set(invalid);
            self.surrogates.set(surrogates);
            self.scanned.set(Some(hash));
        } else if self.scanned.get() != Some(hash) {
            self.fail(changed_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    fn collect(lines: &Lines<'_>) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        lines.each_line(|idx, line| {
            out.push((idx, line.to_owned()));
            true
        });
        out
    }

    #[test]
    fn a_file_splits_into_the_lines_its_text_does() {
        for text in [
            "",
            "a",
            "a\n",
            "a\r\nb\r\n",
            "\u{feff}a\nb",
            "a\n\n\nb\r",
            "a\rb\nc",
            "\u{feff}",
        ] {
            let (_dir, path) = file_with(text);
            let len = text.len() as u64;
            assert_eq!(
                collect(&Lines::file(&path, File::open(&path).expect("open"), len)),
                collect(&Lines::Text(text)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn every_pass_reads_the_length_the_file_had() {
        let (_dir, path) = file_with("{\"a\":1}\n{\"a\":2}\n");
        let lines = Lines::file(&path, File::open(&path).expect("open"), 16);
        assert_eq!(collect(&lines).len(), 2);
        // An agent appends while the import runs: the appended line is not
        // read, and the lines read before are still there.
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").expect("append");
        let mut seen = Vec::new();
        lines.each_object_at(&[0, 1], |idx, obj| seen.push((idx, obj["a"].clone())));
        assert_eq!(seen, [(0, 1.into()), (1, 2.into())]);
        assert!(lines.take_error().is_none());
    }

    #[test]
    fn a_file_rewritten_between_the_passes_fails_the_import() {
        let (_dir, path) = file_with("{\"a\":1}\nnot json\n{\"a\":3}\n");
        let lines = Lines::file(&path, File::open(&path).expect("open"), 26);
        assert_eq!(collect(&lines).len(), 3);
        // Rewritten in place (same file, same length): the wanted line is
        // no longer an object.
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\nnot json\n").expect("rewrite");
        let mut seen = Vec::new();
        lines.each_object_at(&[0, 2], |idx, _| seen.push(idx));
        assert_eq!(seen, [0], "the changed line stops the pass");
        let (at, err) = lines.take_error().expect("the change is an error");
        assert_eq!(at, path);
        assert!(
            err.to_string()
                .starts_with("the file changed while soba was reading it")
        );

        // Rewritten so that the wanted lines still parse: the bytes differ.
        let (_dir, path) = file_with("{\"a\":1}\n{\"a\":2}\n");
        let lines = Lines::file(&path, File::open(&path).expect("open"), 16);
        assert_eq!(collect(&lines).len(), 2);
        std::fs::write(&path, "{\"b\":1}\n{\"b\":2}\n").expect("rewrite");
        lines.each_object_at(&[0, 1], |_, _| {});
        assert!(
            lines.take_error().is_some(),
            "a same-shaped rewrite is found too"
        );

        // Truncated to nothing: the wanted lines are gone.
        std::fs::write(&path, "").expect("truncate");
        let lines = Lines::file(&path, File::open(&path).expect("open"), 26);
        lines.each_object_at(&[0], |_, _| panic!("nothing to read"));
        assert!(lines.take_error().is_some());
    }

    #[test]
    fn a_file_replaced_or_removed_between_the_passes_is_read_as_opened() {
        let (dir, path) = file_with("{\"a\":1}\n{\"a\":2}\n");
        let lines = Lines::file(&path, File::open(&path).expect("open"), 16);
        assert_eq!(collect(&lines).len(), 2);
        // Another version renamed over it (as an editor saves), then removed.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, "{\"b\":9}\n{\"b\":9}\n").expect("write");
        std::fs::rename(&other, &path).expect("rename");
        std::fs::remove_file(&path).expect("remove");
        let mut seen = Vec::new();
        lines.each_object_at(&[0, 1], |idx, obj| seen.push((idx, obj["a"].clone())));
        assert_eq!(seen, [(0, 1.into()), (1, 2.into())]);
        assert!(lines.take_error().is_none());
    }

    #[test]
    fn invalid_utf8_is_located_in_the_file_as_in_its_bytes() {
        let bytes: &[u8] = b"\xef\xbb\xbfok\r\nbad \x80 here\nand \xe2\x82\n";
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, bytes).expect("write");
        let lines = Lines::file(&path, File::open(&path).expect("open"), bytes.len() as u64);
        collect(&lines);
        assert_eq!(lines.invalid_utf8(), InvalidUtf8::scan(bytes));
        assert_eq!(lines.invalid_utf8().map(|found| found.replaced), Some(2));
    }
}
