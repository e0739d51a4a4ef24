//! A session's identity and header: `SessionId` (the file stem), the
//! header's fields (`SessionHeader`, imported-from and memory records),
//! the durability setting, the leaf an entry sets and the name a recovery
//! file carries. Every reader and the writer share these.

use std::fmt;

use serde_json::{Map, Value};
use soba_core::{Entry, EntryBody, EntryId};

use crate::error::StoreError;

/// The longest session id accepted.
const MAX_SESSION_ID_LEN: usize = 128;

/// A session's id: the stem of its file name, `<id>.jsonl`.
///
/// Minted as a hyphenated uuid v7; any id of letters, digits, `-` and `_`
/// (at most 128) is accepted, so that it is always a safe file name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// Checks and wraps an id.
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let is_safe = !text.is_empty()
            && text.len() <= MAX_SESSION_ID_LEN
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if is_safe {
            Ok(SessionId(text.to_owned()))
        } else {
            Err(StoreError::InvalidSessionId {
                id: text.to_owned(),
            })
        }
    }

    /// Builds the id of a uuid (v7 in practice), hyphenated.
    pub fn from_uuid(uuid: u128) -> Self {
        SessionId(uuid::Uuid::from_u128(uuid).hyphenated().to_string())
    }

    /// Returns the id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One Project Memory capsule as the header snapshots it (SPEC §12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryItem {
    /// The capsule's checkpoint id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its creation time, RFC 3339.
    pub created_at: String,
    /// Its path, workspace-relative.
    pub path: String,
}

/// Where an imported session came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedFrom {
    /// The source format (`pi`, `claude-code`, `codex`, …).
    pub format: String,
    /// The source file.
    pub path: String,
    /// The source's own session id.
    pub original_id: Option<String>,
    /// Anything else the importer keeps, written as further fields.
    pub extra: Map<String, Value>,
}

/// Line 1 of a session log, as the domain sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionHeader {
    /// The session id.
    pub id: SessionId,
    /// RFC 3339 UTC creation time.
    pub created_at: String,
    /// The workspace root.
    pub cwd: String,
    /// The operating system.
    pub os: String,
    /// The Project Memory index at creation.
    pub memory: Vec<MemoryItem>,
    /// Set on imported sessions.
    pub imported_from: Option<ImportedFrom>,
}

impl SessionHeader {
    /// Builds the header of a new session in `cwd`, minting its id and
    /// creation time, on this operating system, with no memory.
    pub fn new(minter: &mut dyn Minter, cwd: impl Into<String>) -> Self {
        SessionHeader {
            id: SessionId::from_uuid(minter.uuid_v7()),
            created_at: minter.timestamp(),
            cwd: cwd.into(),
            os: std::env::consts::OS.to_owned(),
            memory: Vec::new(),
            imported_from: None,
        }
    }
}

/// How hard an append pushes its bytes to disk (`session.durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `write` then `fsync` (data only): an acknowledged entry survives a
    /// power loss.
    #[default]
    Fsync,
    /// `write` only: it survives a crash of the process, not of the machine.
    Flush,
}

impl Durability {
    /// Returns the config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Flush => "flush",
        }
    }

    /// Parses a config name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "fsync" => Some(Durability::Fsync),
            "flush" => Some(Durability::Flush),
            _ => None,
        }
    }
}

/// Returns the position `entry` sets in file order (SPEC §3.1): its target
/// for a `leaf` entry, else its own id. A target that is itself a `leaf`
/// entry is settled further by the readers and the writer.
pub fn leaf_after(entry: &Entry) -> EntryId {
    match &entry.body {
        EntryBody::Leaf { target } => target.clone(),
        _ => entry.id.clone(),
    }
}

/// What names a recovery file: `<id>.recovered-<time>.jsonl`.
pub const RECOVERED_INFIX: &str = ".recovered-";

/// Supplies timestamps and uuids to the writer, so tests can fix them.
pub trait Minter: Send {
    /// Returns the current time, RFC 3339 UTC.
    fn timestamp(&mut self) -> String;
    /// Returns a fresh uuid v7 as 128 bits.
    fn uuid_v7(&mut self) -> u128;
}

/// The real clock (millisecond precision) and random uuid v7s.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemMinter;

impl Minter for SystemMinter {
    fn timestamp(&mut self) -> String {
        format!("{:.3}", jiff::Timestamp::now())
    }

    fn uuid_v7(&mut self) -> u128 {
        uuid::Uuid::now_v7().as_u128()
    }
}

/// A deterministic minter for tests and generated sessions: the n-th call
/// is `start + n` seconds, and uuids carry that time and bits derived from
/// `n` (distinct in their leading random digits).
#[derive(Debug, Clone)]
pub struct SequentialMinter {
    start_seconds: i64,
    n_time: i64,
    n_uuid: u64,
}

impl SequentialMinter {
    /// Starts at the given Unix time in seconds.
    pub fn new(start_seconds: i64) -> Self {
        SequentialMinter {
            start_seconds,
            n_time: 0,
            n_uuid: 0,
        }
    }
}

impl Default for SequentialMinter {
    /// Starts at 2025-01-01T00:00:00Z.
    fn default() -> Self {
        SequentialMinter::new(1_735_689_600)
    }
}

impl Minter for SequentialMinter {
    fn timestamp(&mut self) -> String {
        let seconds = self.start_seconds.saturating_add(self.n_time);
        self.n_time += 1;
        match jiff::Timestamp::from_second(seconds) {
            Ok(time) => time.to_string(),
            Err(_) => jiff::Timestamp::UNIX_EPOCH.to_string(),
        }
    }

    fn uuid_v7(&mut self) -> u128 {
        let n = self.n_uuid;
        self.n_uuid += 1;
        // SplitMix64 spreads consecutive counters over the random bits.
        let mut mixed = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^= mixed >> 31;
        let mut random = [0u8; 10];
        random[..8].copy_from_slice(&mixed.to_be_bytes());
        random[8..].copy_from_slice(&(n as u16).to_be_bytes());
        let millis = (self.start_seconds.max(0) as u64)
            .saturating_mul(1000)
            .saturating_add(n);
        uuid::Builder::from_unix_timestamp_millis(millis, &random)
            .into_uuid()
            .as_u128()
    }
}
