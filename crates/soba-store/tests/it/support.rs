//! Helpers shared by the log tests: deterministic writers and line maths.

use std::path::Path;

use soba_core::{Entry, EntryBody};
use soba_store::{
    Durability, SequentialMinter, SessionHeader, SessionId, SessionWriter, WriterOptions,
};

/// The header every test session starts with.
pub fn header(id: &str) -> SessionHeader {
    SessionHeader {
        id: SessionId::parse(id).expect("a valid session id"),
        created_at: "2025-01-01T00:00:00Z".to_owned(),
        cwd: "/work/project".to_owned(),
        os: "linux".to_owned(),
        memory: Vec::new(),
        imported_from: None,
    }
}

/// Options with a deterministic minter; `flush` durability keeps property
/// tests fast (the crash test uses fsync).
pub fn options(seed: i64) -> WriterOptions {
    WriterOptions {
        durability: Durability::Flush,
        minter: Box::new(SequentialMinter::new(1_735_689_600 + seed * 100_000)),
    }
}

/// Creates a session `s1` at `path`.
pub fn create(path: &Path) -> SessionWriter {
    SessionWriter::create(path, &header("s1"), options(0)).expect("creates the session")
}

/// Returns whether the writer accepts the body (it refuses unknown types).
pub fn writable(body: &EntryBody) -> bool {
    !matches!(body, EntryBody::Unknown { .. })
}

/// Returns the entries of a slice of logged entries.
pub fn entries_of<'a>(logged: impl IntoIterator<Item = &'a soba_store::LoggedEntry>) -> Vec<Entry> {
    logged.into_iter().map(|l| l.entry.clone()).collect()
}

/// Returns the offset just after each `\n`.
pub fn line_ends(bytes: &[u8]) -> Vec<usize> {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect()
}
