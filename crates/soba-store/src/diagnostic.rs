//! What a reader reports about a damaged log: `Diagnostic`, its
//! `DiagnosticKind` and `Location`, and the messages they print (what
//! was wrong, what it means for the session, what to do).

use std::fmt;

use soba_core::EntryId;

/// Where a line is: its byte offset, and its 1-based line number when the
/// reader counted lines (the backward reader does not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// 1-based line number, when known.
    pub line: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line} (byte {})", self.offset),
            None => write!(f, "byte {}", self.offset),
        }
    }
}

/// Something wrong with a log that reading survived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where.
    pub location: Location,
    /// What.
    pub kind: DiagnosticKind,
}

/// The kinds of damage a reader reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiagnosticKind {
    /// The file has no bytes at all.
    EmptyFile,
    /// Line 1 is not a usable session header; the other lines are still read.
    MissingHeader {
        /// Why line 1 was rejected.
        reason: String,
    },
    /// The last line has no newline: an append was cut short. It is ignored
    /// (never acknowledged) and stays in the file.
    TornLine {
        /// Its length in bytes.
        bytes: u64,
    },
    /// The line is not valid UTF-8; skipped.
    InvalidUtf8 {
        /// Bytes before the first invalid sequence.
        valid_up_to: u64,
    },
    /// The line is not JSON; skipped.
    InvalidJson {
        /// The parser's message.
        message: String,
    },
    /// The line is JSON but its place in the tree cannot be read (not an
    /// object, a second header, no valid `id` or `parentId`); skipped.
    WrongShape {
        /// What is wrong.
        message: String,
    },
    /// A field of an entry did not fit its type, and the entry is kept
    /// with that field repaired: an out-of-range figure clamped, an unknown
    /// enum value (from a newer writer) read as forward-compatible data, an
    /// unknown content block left out, a missing timestamp read as none.
    RepairedField {
        /// The entry.
        id: EntryId,
        /// Its `type`.
        type_name: String,
        /// The field, a path into the line; empty for the line as a whole.
        field: String,
        /// What was wrong and what was read instead.
        problem: String,
    },
    /// An entry's body does not fit its type. The entry keeps its place in
    /// the tree as an [`EntryBody::Damaged`](soba_core::EntryBody::Damaged) placeholder, so the path
    /// through it stays connected; the placeholder is left out of the
    /// model input (a damaged capsule is no capsule: the entries before it
    /// stay in the model input).
    DamagedEntry {
        /// The entry.
        id: EntryId,
        /// Its `type` as read (empty when it had none).
        type_name: String,
        /// The field that does not fit, a path into the line; empty for the
        /// line as a whole.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The line repeats an earlier entry's id; it shadows the earlier one
    /// (resume, reading backwards, meets it first).
    DuplicateId {
        /// The repeated id.
        id: EntryId,
    },
    /// The line starts with a byte order mark (U+FEFF), as files joined with
    /// `cat` leave where the second one began; the line is read without it
    /// (a mark is never part of JSON, so nothing of the line is lost).
    ByteOrderMark,
    /// An entry on the current path names a parent that is not in the log;
    /// the path stops there.
    DanglingParent {
        /// The entry.
        id: EntryId,
        /// Its missing parent.
        parent: EntryId,
    },
    /// The current leaf (from a `leaf` entry) is not in the log; the path is empty.
    DanglingLeaf {
        /// The missing target.
        target: EntryId,
    },
    /// The `leaf` entry that sets the current position targets another
    /// `leaf` entry, which is never on a path (SPEC §3.1). The chain of
    /// targets is followed to the first entry that is not a `leaf` entry,
    /// which becomes the current position (the reader, resume and the
    /// writer agree); when the chain loops or reaches a missing entry, the
    /// position stays on `target` and the path is empty.
    LeafTargetsLeaf {
        /// The `leaf` entry read last.
        id: EntryId,
        /// The `leaf` entry it targets.
        target: EntryId,
        /// Where the chain of targets from `target` leads: the current
        /// position; `None` when that chain loops or reaches a missing entry.
        falls_back_to: Option<EntryId>,
    },
    /// An entry on the current path names a `leaf` entry as its parent
    /// (an append after a position was left on a `leaf` entry); the path
    /// stops there.
    ParentIsLeaf {
        /// The entry.
        id: EntryId,
        /// Its parent, a `leaf` entry.
        parent: EntryId,
        /// Where that `leaf` entry leads through the targets of any further
        /// `leaf` entries: the entry to rewind to; `None` when that chain
        /// loops or reaches a missing entry.
        rewind_to: Option<EntryId>,
    },
}

/// Says what to do after a position left on a `leaf` entry.
fn rewind_hint(f: &mut fmt::Formatter<'_>, leaf: &EntryId, to: Option<&EntryId>) -> fmt::Result {
    match to {
        Some(to) => write!(
            f,
            "/rewind {to} (where {leaf} points) to continue from there"
        ),
        None => write!(
            f,
            "{leaf} leads nowhere (a missing or looping target); list the entries with soba show --entries, then /rewind <id> to one of them"
        ),
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.location;
        match &self.kind {
            DiagnosticKind::EmptyFile => write!(f, "the file is empty: no session header"),
            DiagnosticKind::MissingHeader { reason } => {
                write!(f, "{at}: no session header ({reason})")
            }
            DiagnosticKind::TornLine { bytes } => {
                write!(
                    f,
                    "{at}: torn last line ({bytes} bytes, no newline) ignored; the next append ends it"
                )
            }
            DiagnosticKind::InvalidUtf8 { valid_up_to } => {
                write!(
                    f,
                    "{at}: invalid UTF-8 after {valid_up_to} bytes; line skipped"
                )
            }
            DiagnosticKind::InvalidJson { message } => {
                write!(f, "{at}: invalid JSON ({message}); line skipped")
            }
            DiagnosticKind::WrongShape { message } => {
                write!(f, "{at}: not a valid entry ({message}); line skipped")
            }
            DiagnosticKind::RepairedField {
                id,
                type_name,
                field,
                problem,
            } => {
                write!(f, "{at}: {type_name} entry {id}: ")?;
                if !field.is_empty() {
                    write!(f, "`{field}` ")?;
                }
                write!(f, "{problem}; the entry is kept")
            }
            DiagnosticKind::DamagedEntry {
                id,
                type_name,
                field,
                problem,
            } => {
                if type_name.is_empty() {
                    write!(f, "{at}: entry {id} has no usable type (")?;
                } else {
                    write!(f, "{at}: {type_name} entry {id} is damaged (")?;
                }
                if !field.is_empty() {
                    write!(f, "`{field}`: ")?;
                }
                write!(f, "{problem}); ")?;
                write!(f, "{}", damaged_effect(type_name))
            }
            DiagnosticKind::DuplicateId { id } => {
                write!(
                    f,
                    "{at}: duplicate entry id {id}; this line replaces the earlier one"
                )
            }
            DiagnosticKind::ByteOrderMark => {
                write!(
                    f,
                    "{at}: the line starts with a byte order mark (U+FEFF), as where files joined with `cat` begin; it is read without the mark"
                )
            }
            DiagnosticKind::DanglingParent { id, parent } => {
                write!(
                    f,
                    "{at}: entry {id} names parent {parent}, which is not in the log; the path stops there"
                )
            }
            DiagnosticKind::DanglingLeaf { target } => {
                write!(
                    f,
                    "{at}: the current leaf {target} is not in the log; the path is empty"
                )
            }
            DiagnosticKind::LeafTargetsLeaf {
                id,
                target,
                falls_back_to: Some(position),
            } => {
                write!(
                    f,
                    "{at}: leaf entry {id} targets leaf entry {target}, which is never on a path; the current position falls back to {position}, where the targets of the leaf entries lead (/rewind to another entry listed by soba show --entries if that is not the place)"
                )
            }
            DiagnosticKind::LeafTargetsLeaf {
                id,
                target,
                falls_back_to: None,
            } => {
                write!(
                    f,
                    "{at}: leaf entry {id} targets leaf entry {target}, which is never on a path, and the targets of the leaf entries from {target} loop or reach a missing entry; the current position stays on {target}, so the path is empty: list the entries with soba show --entries, then /rewind <id> to one of them"
                )
            }
            DiagnosticKind::ParentIsLeaf {
                id,
                parent,
                rewind_to,
            } => {
                write!(
                    f,
                    "{at}: entry {id} names parent {parent}, a leaf entry, which is never on a path; the path stops there: "
                )?;
                rewind_hint(f, parent, rewind_to.as_ref())
            }
        }
    }
}

/// Says what reading does with a damaged entry of `type_name`.
fn damaged_effect(type_name: &str) -> &'static str {
    match type_name {
        "capsule" => {
            "kept in the tree as a placeholder and not used as a capsule: on a path through it, the entries before it stay in the model input"
        }
        "leaf" => {
            "kept as a placeholder: the rewind it records is not applied, the path goes on through it from its parent"
        }
        "message" => {
            "kept in the tree as a placeholder, so the entries after it stay connected; its content is left out of the model input"
        }
        _ => {
            "kept in the tree as a placeholder, so the entries after it stay connected; it is left out of the model input"
        }
    }
}
