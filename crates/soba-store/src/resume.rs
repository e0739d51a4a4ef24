//! Resume (SPEC §3.3): reads a session log backwards from the end in
//! blocks, with positioned reads, until it has the current leaf and the
//! live stretch of the path; the header is read separately from line 1.
//! Its cost grows with the live tail, not with the history.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::Path;

use soba_core::{EntryBody, EntryId};

use crate::diagnostic::{Diagnostic, DiagnosticKind, Location};
use crate::error::StoreError;
use crate::line::{LineOutcome, classify_line, read_first_line, starts_with_bom};
use crate::reader::{LoggedEntry, StretchChase};
use crate::session::{SessionHeader, leaf_after};

/// Resume reads this many bytes per positioned read.
pub const BLOCK_SIZE: usize = 1 << 20;

/// How resume reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeOptions {
    /// Bytes per backward read; [`BLOCK_SIZE`] by default (tests use tiny
    /// blocks to exercise lines that straddle them).
    pub block_size: usize,
}

impl Default for ResumeOptions {
    fn default() -> Self {
        ResumeOptions {
            block_size: BLOCK_SIZE,
        }
    }
}

/// What resume found: everything the model input depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The header, if line 1 was a valid one.
    pub header: Option<SessionHeader>,
    /// The current leaf. When the entry read last is a `leaf` entry whose
    /// target is itself a `leaf` entry, the targets are followed to the
    /// first entry that is not one, as the full reader does.
    pub leaf: Option<EntryId>,
    /// The live stretch of the path, root-most first: from the latest
    /// capsule's `firstKeptEntryId` (or the capsule when nothing is kept)
    /// to the leaf, or the whole path when it has no capsule. It holds the
    /// hygiene, skill, model and config entries of that stretch.
    pub stretch: Vec<LoggedEntry>,
    /// Diagnostics of the lines parsed, by byte offset; with line numbers
    /// when resume had to fall back to a full scan.
    pub diagnostics: Vec<Diagnostic>,
    /// Bytes read from the file.
    pub bytes_read: u64,
    /// Whether the path could not be completed backwards (a missing parent,
    /// a dangling leaf, a chain of `leaf` entries that loops or points
    /// forwards) and the whole file was read instead.
    pub full_scan: bool,
}

impl Resumed {
    /// Returns the latest capsule on the path, the stretch's newest capsule.
    pub fn latest_capsule(&self) -> Option<&LoggedEntry> {
        self.stretch
            .iter()
            .rev()
            .find(|logged| matches!(logged.entry.body, EntryBody::Capsule(_)))
    }
}

/// Resumes a session with the default block size.
pub fn resume(path: impl AsRef<Path>) -> Result<Resumed, StoreError> {
    resume_with(path, ResumeOptions::default())
}

/// Resumes a session: header from line 1, then backwards from the end.
pub fn resume_with(path: impl AsRef<Path>, options: ResumeOptions) -> Result<Resumed, StoreError> {
    let path = path.as_ref();
    let (file, metadata) = crate::untrusted::open_untrusted(path).map_err(StoreError::open)?;
    let read_error = |err| StoreError::io("read", path, err);
    let len = metadata.len();
    let mut resumed = Resumed {
        header: None,
        leaf: None,
        stretch: Vec::new(),
        diagnostics: Vec::new(),
        bytes_read: 0,
        full_scan: false,
    };
    let line_one = Location {
        offset: 0,
        line: Some(1),
    };
    if len == 0 {
        resumed.diagnostics.push(Diagnostic {
            location: line_one,
            kind: DiagnosticKind::EmptyFile,
        });
        return Ok(resumed);
    }

    let first = read_first_line(&file).map_err(read_error)?;
    resumed.bytes_read += first.bytes.len() as u64;
    let mut missing_header = None;
    if first.terminated {
        if let LineOutcome::Header(header) = classify_line(&first.bytes, true, &mut missing_header)
        {
            resumed.header = Some(header);
        }
    } else {
        missing_header = Some("line 1 is torn".to_owned());
    }
    // Without a header, line 1 may be an entry: scan it too.
    let region_start = if resumed.header.is_some() {
        first.end
    } else {
        0
    };
    let mut backward_diagnostics = Vec::new();
    if resumed.header.is_none() {
        let reason = missing_header.unwrap_or_else(|| "no line 1".to_owned());
        resumed.diagnostics.push(Diagnostic {
            location: line_one,
            kind: DiagnosticKind::MissingHeader { reason },
        });
    }

    let mut lines = BackwardLines::new(&file, region_start, len, options.block_size.max(1));
    let mut cursor: Option<EntryId> = None;
    let mut chase = StretchChase::default();
    let mut done = false;
    // Until the cursor reaches an entry that is not a `leaf` entry, the
    // position is still being settled: a `leaf` entry met there passes it
    // on to its target (SPEC §3.1, as the full reader does). The walk only
    // moves backwards, so a chain that loops or points forwards ends in the
    // full scan below, which decides.
    let mut settling = true;
    // The entry read last (the last good one in the file) and its line.
    let mut last: Option<(EntryId, Location)> = None;
    // Whether the position moved on from a `leaf` entry while settling.
    let mut followed = false;
    let mut path_diagnostics = Vec::new();
    let mut ignored = None;
    while let Some(line) = lines.next_line().map_err(read_error)? {
        let location = Location {
            offset: line.offset,
            line: (line.offset == 0).then_some(1),
        };
        if !line.terminated {
            if !line.bytes.iter().all(u8::is_ascii_whitespace) {
                let kind = DiagnosticKind::TornLine {
                    bytes: line.bytes.len() as u64,
                };
                backward_diagnostics.push(Diagnostic { location, kind });
            }
            continue;
        }
        // Collected backwards: a line's own diagnostics in reverse, the
        // byte order mark (named first when read forwards) last.
        let bom = starts_with_bom(&line.bytes, line.offset == 0).then_some(Diagnostic {
            location,
            kind: DiagnosticKind::ByteOrderMark,
        });
        let (entry, raw) = match classify_line(&line.bytes, line.offset == 0, &mut ignored) {
            LineOutcome::Entry { entry, raw, damage } => {
                backward_diagnostics.extend(
                    damage
                        .into_iter()
                        .rev()
                        .map(|kind| Diagnostic { location, kind }),
                );
                backward_diagnostics.extend(bom);
                (entry, raw)
            }
            LineOutcome::Damaged(kind) => {
                backward_diagnostics.push(Diagnostic { location, kind });
                backward_diagnostics.extend(bom);
                continue;
            }
            LineOutcome::Blank | LineOutcome::Header(_) => {
                backward_diagnostics.extend(bom);
                continue;
            }
        };
        if resumed.leaf.is_none() {
            let leaf = leaf_after(&entry);
            cursor = Some(leaf.clone());
            resumed.leaf = Some(leaf);
            last = Some((entry.id.clone(), location));
        }
        if cursor.as_ref() != Some(&entry.id) {
            continue;
        }
        if let EntryBody::Leaf { target } = &entry.body {
            if settling {
                // The position is on a `leaf` entry: follow its target.
                followed = true;
                cursor = Some(target.clone());
                continue;
            }
            // A leaf entry is never on a path: the path ends here, as in the full reader.
            done = true;
            break;
        }
        if settling {
            settling = false;
            if followed {
                // The entry read last targets a `leaf` entry: the position
                // falls back to where the chain leads, with the full
                // reader's diagnostic.
                let target = resumed.leaf.replace(entry.id.clone());
                if let (Some((id, location)), Some(target)) = (last.take(), target) {
                    path_diagnostics.push(Diagnostic {
                        location,
                        kind: DiagnosticKind::LeafTargetsLeaf {
                            id,
                            target,
                            falls_back_to: Some(entry.id.clone()),
                        },
                    });
                }
            }
        }
        let is_last = chase.feed(&entry);
        cursor = entry.parent_id.clone();
        resumed.stretch.push(LoggedEntry {
            entry,
            location,
            raw,
        });
        if is_last || cursor.is_none() {
            done = true;
            break;
        }
    }
    resumed.bytes_read += lines.bytes_read;

    if !done && cursor.is_some() {
        // The path runs out of the file backwards: a missing parent or
        // target, or an out-of-order log. Read everything, once.
        let log = crate::reader::read_log(path)?;
        resumed.bytes_read += len;
        resumed.full_scan = true;
        resumed.leaf = log.leaf().cloned();
        resumed.stretch = log.live_stretch().into_iter().cloned().collect();
        resumed.diagnostics = log.diagnostics().to_vec();
        return Ok(resumed);
    }
    resumed.stretch.reverse();
    backward_diagnostics.reverse();
    resumed.diagnostics.extend(backward_diagnostics);
    resumed.diagnostics.extend(path_diagnostics);
    Ok(resumed)
}

/// Returns the entries of the path from `from` back towards the root:
/// `from`, its parent, that one's parent, up to the first entry `stop`
/// holds for (included), root-most first. What a front door shows above a
/// live stretch that starts mid-turn (the stretch starts where the latest
/// capsule keeps from): its turn's start, read backwards from the end of
/// the file, decoding only the lines that hold the id looked for, so the
/// cost is the bytes after the entry `stop` accepts. Reading ends, with
/// what was found, at the root, where the path leaves the file, or once
/// `max_bytes` were read (the caller's bound on what a screen waits for).
pub fn ancestors(
    path: impl AsRef<Path>,
    from: &EntryId,
    max_bytes: u64,
    mut stop: impl FnMut(&soba_core::Entry) -> bool,
) -> Result<Vec<soba_core::Entry>, StoreError> {
    let path = path.as_ref();
    let (file, metadata) = crate::untrusted::open_untrusted(path).map_err(StoreError::open)?;
    let mut lines = BackwardLines::new(&file, 0, metadata.len(), BLOCK_SIZE);
    let mut cursor = from.clone();
    let mut found = Vec::new();
    while lines.bytes_read <= max_bytes {
        let Some(line) = lines
            .next_line()
            .map_err(|err| StoreError::io("read", path, err))?
        else {
            break;
        };
        if !line.terminated {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&line.bytes) else {
            continue;
        };
        // A child names its parent too: the id decides.
        if !text.contains(cursor.as_str()) {
            continue;
        }
        let Ok(crate::wire::DecodedEntry { entry, .. }) = crate::wire::decode_entry(text) else {
            continue;
        };
        if entry.id != cursor {
            continue;
        }
        if let EntryBody::Leaf { target } = &entry.body {
            // Never on a path; a hand-edited log may point at one.
            cursor = target.clone();
            continue;
        }
        let done = stop(&entry);
        let parent = entry.parent_id.clone();
        found.push(entry);
        match parent {
            Some(parent) if !done => cursor = parent,
            _ => break,
        }
    }
    found.reverse();
    Ok(found)
}

/// Settles a position that a `leaf` entry sets to `target`, reading on
/// backwards from where `lines` stands: follows the targets of `leaf`
/// entries to the first entry that is not one and returns its id; `None`
/// when the lines run out first (a missing entry, a loop, a target later in
/// the file), where only a full read decides. Only lines that contain the
/// id looked for are decoded, so skipping a long history stays cheap.
pub(crate) fn settle_backwards(
    lines: &mut BackwardLines<'_>,
    target: EntryId,
) -> io::Result<Option<EntryId>> {
    let mut cursor = target;
    while let Some(line) = lines.next_line()? {
        if !line.terminated {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&line.bytes) else {
            continue;
        };
        if !text.contains(cursor.as_str()) {
            continue;
        }
        let Ok(crate::wire::DecodedEntry { entry, .. }) = crate::wire::decode_entry(text) else {
            continue;
        };
        if entry.id != cursor {
            continue;
        }
        match entry.body {
            EntryBody::Leaf { target } => cursor = target,
            _ => return Ok(Some(entry.id)),
        }
    }
    Ok(None)
}

/// One line found reading backwards.
#[derive(Debug)]
pub(crate) struct RawLine {
    /// Offset of its first byte.
    pub offset: u64,
    /// Its bytes, without the newline.
    pub bytes: Vec<u8>,
    /// Whether a newline ends it (only the file's last line may lack one).
    pub terminated: bool,
}

/// Yields the lines of `[start, end)` of a file from the last to the first,
/// reading blocks backwards with positioned reads.
pub(crate) struct BackwardLines<'f> {
    file: &'f File,
    start: u64,
    pos: u64,
    block: Vec<u8>,
    ready: VecDeque<RawLine>,
    /// Pieces of the line that straddles the blocks read so far, each piece
    /// earlier in the file than the one before it.
    pending: Vec<Vec<u8>>,
    /// Whether the segment after the file's last newline was dealt with.
    seen_tail: bool,
    /// Bytes read so far.
    pub bytes_read: u64,
}

impl<'f> BackwardLines<'f> {
    /// Reads `[start, end)` backwards in blocks of `block_size` bytes.
    pub(crate) fn new(file: &'f File, start: u64, end: u64, block_size: usize) -> Self {
        BackwardLines {
            file,
            start,
            pos: end.max(start),
            block: vec![0u8; block_size.max(1)],
            ready: VecDeque::new(),
            pending: Vec::new(),
            seen_tail: false,
            bytes_read: 0,
        }
    }

    /// Returns the next line towards the start, `None` when all are read.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<RawLine>> {
        while self.ready.is_empty() && self.pos > self.start {
            self.read_block()?;
        }
        Ok(self.ready.pop_front())
    }

    fn read_block(&mut self) -> io::Result<()> {
        let block_start = self
            .pos
            .saturating_sub(self.block.len() as u64)
            .max(self.start);
        let n_bytes = (self.pos - block_start) as usize;
        // The block buffer is taken out so lines can be emitted while it is borrowed.
        let mut block = std::mem::take(&mut self.block);
        let read = std::os::unix::fs::FileExt::read_exact_at(
            self.file,
            &mut block[..n_bytes],
            block_start,
        );
        if let Err(err) = read {
            self.block = block;
            return Err(err);
        }
        self.bytes_read += n_bytes as u64;
        let buf = &block[..n_bytes];
        let mut end = n_bytes;
        for nl in memrchr_all(buf) {
            let mut bytes =
                Vec::with_capacity(end - nl - 1 + self.pending.iter().map(Vec::len).sum::<usize>());
            bytes.extend_from_slice(&buf[nl + 1..end]);
            for piece in self.pending.drain(..).rev() {
                bytes.extend_from_slice(&piece);
            }
            self.emit(block_start + nl as u64 + 1, bytes);
            end = nl;
        }
        if end > 0 {
            self.pending.push(buf[..end].to_vec());
        }
        self.block = block;
        self.pos = block_start;
        if self.pos == self.start {
            let mut bytes = Vec::with_capacity(self.pending.iter().map(Vec::len).sum());
            for piece in self.pending.drain(..).rev() {
                bytes.extend_from_slice(&piece);
            }
            self.emit(self.start, bytes);
        }
        Ok(())
    }

    fn emit(&mut self, offset: u64, bytes: Vec<u8>) {
        let terminated = self.seen_tail;
        self.seen_tail = true;
        if !terminated && bytes.is_empty() {
            // The file ends with a newline: nothing follows it.
            return;
        }
        self.ready.push_back(RawLine {
            offset,
            bytes,
            terminated,
        });
    }
}

/// Returns the positions of every `\n` in `buf`, last first.
fn memrchr_all(buf: &[u8]) -> impl Iterator<Item = usize> + '_ {
    memchr::memrchr_iter(b'\n', buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines_backwards(content: &[u8], start: u64, block: usize) -> Vec<(u64, String, bool)> {
        let mut file = tempfile::tempfile().expect("a temp file");
        file.write_all(content).expect("written");
        let mut lines = BackwardLines::new(&file, start, content.len() as u64, block);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().expect("readable") {
            out.push((
                line.offset,
                String::from_utf8_lossy(&line.bytes).into_owned(),
                line.terminated,
            ));
        }
        out
    }

    #[test]
    fn splits_lines_across_any_block_size() {
        let content = b"h\nab\n\ncdef\ng";
        for block in 1..=content.len() + 1 {
            assert_eq!(
                lines_backwards(content, 2, block),
                vec![
                    (11, "g".to_owned(), false),
                    (6, "cdef".to_owned(), true),
                    (5, String::new(), true),
                    (2, "ab".to_owned(), true),
                ],
                "block size {block}"
            );
        }
        assert_eq!(
            lines_backwards(b"a\nb\n", 0, 3),
            vec![(2, "b".to_owned(), true), (0, "a".to_owned(), true)]
        );
        assert_eq!(lines_backwards(b"", 0, 3), vec![]);
        assert_eq!(
            lines_backwards(b"abc", 0, 2),
            vec![(0, "abc".to_owned(), false)]
        );
    }

    #[test]
    fn first_line_is_read_forwards() {
        let mut file = tempfile::tempfile().expect("a temp file");
        let long = "x".repeat(200_000);
        write!(file, "{long}\nsecond\n").expect("written");
        let first = read_first_line(&file).expect("readable");
        assert_eq!(first.bytes.len(), 200_000);
        assert!(first.terminated);
        assert_eq!(first.end, 200_001);
    }
}
