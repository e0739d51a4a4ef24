//! One line of a session log: reading line 1 with positioned reads and
//! classifying a line (blank, the header, an entry with its repairs, or
//! damage), the same way for the forward reader, the backward resume and
//! the writer's checks.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use soba_core::{Entry, EntryBody};

use crate::diagnostic::DiagnosticKind;
use crate::session::SessionHeader;
use crate::wire::{self, DecodeError, HEADER_TYPE};

/// The UTF-8 byte order mark.
pub(crate) const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// What one line turned out to be.
#[derive(Debug)]
pub(crate) enum LineOutcome {
    /// A whitespace-only line: ignored without a diagnostic.
    Blank,
    /// The session header.
    Header(SessionHeader),
    /// An entry: its raw text if of unknown type or damaged, and what did
    /// not fit (one diagnostic per repaired field, or the reason it is a
    /// placeholder).
    Entry {
        /// The entry.
        entry: Entry,
        /// Its line, for an unknown or damaged entry.
        raw: Option<String>,
        /// [`DiagnosticKind::RepairedField`]s or one
        /// [`DiagnosticKind::DamagedEntry`].
        damage: Vec<DiagnosticKind>,
    },
    /// Damage.
    Damaged(DiagnosticKind),
}

/// Returns whether a line after the first starts with a byte order mark,
/// which [`classify_line`] reads past and the caller names
/// ([`DiagnosticKind::ByteOrderMark`]).
pub(crate) fn starts_with_bom(bytes: &[u8], is_first: bool) -> bool {
    !is_first && bytes.starts_with(UTF8_BOM)
}

/// Classifies one complete line (without its newline). Line 1 is tried as a
/// header first; `missing_header` receives why it is not one.
pub(crate) fn classify_line(
    bytes: &[u8],
    is_first: bool,
    missing_header: &mut Option<String>,
) -> LineOutcome {
    // An editor may have saved the file with a byte order mark: line 1 is
    // still the header (import detection strips it too). Further down, a
    // mark is where a file joined with `cat` began: the line is read
    // without it, and the caller names it ([`starts_with_bom`]).
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if is_first {
            *missing_header = Some("line 1 is blank".to_owned());
        }
        return LineOutcome::Blank;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            if is_first {
                *missing_header = Some("line 1 is not UTF-8".to_owned());
            }
            return LineOutcome::Damaged(DiagnosticKind::InvalidUtf8 {
                valid_up_to: err.valid_up_to() as u64,
            });
        }
    };
    if is_first {
        match wire::peek_type(text) {
            Ok(Some(type_name)) if type_name == HEADER_TYPE => {
                return match wire::decode_header(text) {
                    Ok(header) => LineOutcome::Header(header),
                    Err(err) => {
                        *missing_header = Some(err.to_string());
                        LineOutcome::Blank
                    }
                };
            }
            Ok(Some(type_name)) => {
                *missing_header = Some(format!("line 1 is a {type_name:?} entry"))
            }
            Ok(None) => *missing_header = Some("line 1 has no `type`".to_owned()),
            Err(err) => *missing_header = Some(err.to_string()),
        }
    }
    match wire::decode_entry(text) {
        Ok(wire::DecodedEntry { entry, issues }) => {
            let damaged = matches!(entry.body, EntryBody::Damaged { .. });
            let raw = (damaged || matches!(entry.body, EntryBody::Unknown { .. }))
                .then(|| text.to_owned());
            let type_name = entry.body.type_name().to_owned();
            let damage = issues
                .into_iter()
                .map(|issue| {
                    let (id, type_name) = (entry.id.clone(), type_name.clone());
                    let (field, problem) = (issue.field, issue.problem);
                    if damaged {
                        DiagnosticKind::DamagedEntry {
                            id,
                            type_name,
                            field,
                            problem,
                        }
                    } else {
                        DiagnosticKind::RepairedField {
                            id,
                            type_name,
                            field,
                            problem,
                        }
                    }
                })
                .collect();
            LineOutcome::Entry { entry, raw, damage }
        }
        Err(DecodeError::Syntax(message)) => {
            LineOutcome::Damaged(DiagnosticKind::InvalidJson { message })
        }
        Err(DecodeError::Shape(message)) => {
            LineOutcome::Damaged(DiagnosticKind::WrongShape { message })
        }
    }
}

/// Line 1 of a file, read forwards in blocks.
#[derive(Debug)]
pub(crate) struct FirstLine {
    /// Its bytes, without the newline.
    pub bytes: Vec<u8>,
    /// Whether a newline ends it.
    pub terminated: bool,
    /// The offset just after it (and its newline).
    pub end: u64,
}

/// Reads line 1 of a file with positioned reads.
pub(crate) fn read_first_line(file: &File) -> io::Result<FirstLine> {
    let mut bytes = Vec::new();
    let mut block = vec![0u8; 64 * 1024];
    let mut offset = 0u64;
    loop {
        let n_read = read_some_at(file, &mut block, offset)?;
        if n_read == 0 {
            return Ok(FirstLine {
                end: offset,
                bytes,
                terminated: false,
            });
        }
        if let Some(nl) = block[..n_read].iter().position(|&b| b == b'\n') {
            bytes.extend_from_slice(&block[..nl]);
            return Ok(FirstLine {
                bytes,
                terminated: true,
                end: offset + nl as u64 + 1,
            });
        }
        bytes.extend_from_slice(&block[..n_read]);
        offset += n_read as u64;
    }
}

fn read_some_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}
