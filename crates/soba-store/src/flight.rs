//! Flight records (SPEC §13): `<sessions-dir>/<id>.flight.jsonl`, one JSON
//! line per compaction or hygiene operation, per trigger not chosen or
//! pre-ROI skip, and per `/capsule create`. They hold figures and names,
//! never summary text.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use soba_core::{EntryId, Quality, TokenCount, Trigger, Usage};

use crate::diagnostic::{Diagnostic, DiagnosticKind, Location};
use crate::error::StoreError;
use crate::session::{Durability, SessionId};
use crate::wire::{DecodeError, UsageRecord};

/// Which rung of the ladder an operation was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlightLevel {
    /// Level 1: hygiene, free (SPEC §8.1).
    Hygiene,
    /// Level 2: a compaction into a capsule.
    Compaction,
    /// An explicit `/capsule create` handoff (appends nothing to the log).
    CapsuleCreate,
}

impl FlightLevel {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FlightLevel::Hygiene => "hygiene",
            FlightLevel::Compaction => "compaction",
            FlightLevel::CapsuleCreate => "capsule_create",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "hygiene" => Some(FlightLevel::Hygiene),
            "compaction" => Some(FlightLevel::Compaction),
            "capsule_create" => Some(FlightLevel::CapsuleCreate),
            _ => None,
        }
    }
}

/// How an operation ended (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlightOutcome {
    /// The capsule or hygiene entry was appended (or the file written).
    Completed,
    /// Not chosen, pre- or post-ROI miss, or nothing to do.
    Skipped,
    /// Cancelled from outside; nothing appended.
    Cancelled,
    /// The leaf moved during the barrier; nothing appended.
    Stale,
    /// An error; nothing appended.
    Failed,
}

impl FlightOutcome {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FlightOutcome::Completed => "completed",
            FlightOutcome::Skipped => "skipped",
            FlightOutcome::Cancelled => "cancelled",
            FlightOutcome::Stale => "stale",
            FlightOutcome::Failed => "failed",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "completed" => FlightOutcome::Completed,
            "skipped" => FlightOutcome::Skipped,
            "cancelled" => FlightOutcome::Cancelled,
            "stale" => FlightOutcome::Stale,
            "failed" => FlightOutcome::Failed,
            _ => return None,
        })
    }
}

/// The limits in force for an operation (SPEC §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlightLimits {
    /// hardLimit.
    pub hard_limit: TokenCount,
    /// softLimit.
    pub soft_limit: TokenCount,
    /// autoLimit.
    pub auto_limit: TokenCount,
    /// hygieneLimit.
    pub hygiene_limit: TokenCount,
}

/// The summarizer that ran, with its usage; never its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlightSummarizer {
    /// The model id, or `deterministic`.
    pub model: String,
    /// Its normalised usage, when it made a request.
    pub usage: Option<Usage>,
}

/// One flight record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlightRecord {
    /// The operation id (shared with the `compaction_*` events).
    pub operation_id: String,
    /// When the operation ended, RFC 3339 UTC.
    pub timestamp: String,
    /// Hygiene, compaction or capsule creation.
    pub level: FlightLevel,
    /// What started it; `None` for hygiene.
    pub trigger: Option<Trigger>,
    /// The limits in force.
    pub limits: FlightLimits,
    /// Effective tokens before.
    pub tokens_before: TokenCount,
    /// Effective tokens after (equal to before unless completed).
    pub tokens_after: TokenCount,
    /// Tokens reclaimed (zero unless completed).
    pub reclaimed: TokenCount,
    /// How it ended.
    pub outcome: FlightOutcome,
    /// Why, for any outcome but a plain completion.
    pub reason: Option<String>,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// The capsule appended (`ck_…`).
    pub checkpoint_id: Option<EntryId>,
    /// The capsule's quality.
    pub quality: Option<Quality>,
    /// The summarizer and its usage.
    pub summarizer: Option<FlightSummarizer>,
    /// Tokens expected to be written to the provider cache again because
    /// the prompt prefix moved.
    pub expected_cache_write: Option<TokenCount>,
}

/// The wire shape of a flight record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FlightLine {
    operation_id: String,
    timestamp: String,
    level: String,
    #[serde(default)]
    trigger: Option<String>,
    limits: LimitsLine,
    tokens_before: u64,
    tokens_after: u64,
    reclaimed: u64,
    outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    duration_ms: u64,
    #[serde(default)]
    checkpoint_id: Option<String>,
    #[serde(default)]
    quality: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    summarizer: Option<SummarizerLine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expected_cache_write: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LimitsLine {
    hard_limit: u64,
    soft_limit: u64,
    auto_limit: u64,
    hygiene_limit: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SummarizerLine {
    model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<UsageRecord>,
}

impl FlightRecord {
    /// Encodes the record as one JSON line (without the newline).
    pub fn to_line(&self) -> String {
        let line = FlightLine {
            operation_id: self.operation_id.clone(),
            timestamp: self.timestamp.clone(),
            level: self.level.as_str().to_owned(),
            trigger: self.trigger.map(|trigger| trigger.as_str().to_owned()),
            limits: LimitsLine {
                hard_limit: self.limits.hard_limit.get(),
                soft_limit: self.limits.soft_limit.get(),
                auto_limit: self.limits.auto_limit.get(),
                hygiene_limit: self.limits.hygiene_limit.get(),
            },
            tokens_before: self.tokens_before.get(),
            tokens_after: self.tokens_after.get(),
            reclaimed: self.reclaimed.get(),
            outcome: self.outcome.as_str().to_owned(),
            reason: self.reason.clone(),
            duration_ms: self.duration_ms,
            checkpoint_id: self.checkpoint_id.as_ref().map(|id| id.as_str().to_owned()),
            quality: self.quality.map(|quality| quality.as_str().to_owned()),
            summarizer: self.summarizer.as_ref().map(|summarizer| SummarizerLine {
                model: summarizer.model.clone(),
                usage: summarizer.usage.map(|usage| UsageRecord {
                    input: usage.input,
                    cache_read: usage.cache_read,
                    cache_write: usage.cache_write,
                    output: usage.output,
                    reasoning: usage.reasoning,
                }),
            }),
            expected_cache_write: self.expected_cache_write.map(TokenCount::get),
        };
        // Only strings and integers: serialization cannot fail.
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// Decodes one line; the error says what is wrong with it.
    pub fn from_line(text: &str) -> Result<Self, DecodeError> {
        let line: FlightLine =
            serde_json::from_str(text).map_err(|err| DecodeError::from_json_line(&err, text))?;
        let unknown = |field: &str, value: &str| {
            DecodeError::Shape(format!("unknown `{field}` value {value:?}"))
        };
        Ok(FlightRecord {
            operation_id: line.operation_id,
            timestamp: line.timestamp,
            level: FlightLevel::parse(&line.level).ok_or_else(|| unknown("level", &line.level))?,
            trigger: match line.trigger {
                Some(name) => Some(Trigger::parse(&name).ok_or_else(|| unknown("trigger", &name))?),
                None => None,
            },
            limits: FlightLimits {
                hard_limit: TokenCount::new(line.limits.hard_limit),
                soft_limit: TokenCount::new(line.limits.soft_limit),
                auto_limit: TokenCount::new(line.limits.auto_limit),
                hygiene_limit: TokenCount::new(line.limits.hygiene_limit),
            },
            tokens_before: TokenCount::new(line.tokens_before),
            tokens_after: TokenCount::new(line.tokens_after),
            reclaimed: TokenCount::new(line.reclaimed),
            outcome: FlightOutcome::parse(&line.outcome)
                .ok_or_else(|| unknown("outcome", &line.outcome))?,
            reason: line.reason,
            duration_ms: line.duration_ms,
            checkpoint_id: match line.checkpoint_id {
                Some(id) => {
                    Some(EntryId::parse(&id).map_err(|err| DecodeError::Shape(err.to_string()))?)
                }
                None => None,
            },
            quality: match line.quality {
                Some(name) => Some(Quality::parse(&name).ok_or_else(|| unknown("quality", &name))?),
                None => None,
            },
            summarizer: line.summarizer.map(|summarizer| FlightSummarizer {
                model: summarizer.model,
                usage: summarizer.usage.map(|usage| Usage {
                    input: usage.input,
                    cache_read: usage.cache_read,
                    cache_write: usage.cache_write,
                    output: usage.output,
                    reasoning: usage.reasoning,
                }),
            }),
            expected_cache_write: line.expected_cache_write.map(TokenCount::new),
        })
    }
}

/// Returns the flight-record file of session `id` in `dir`.
pub fn flight_path(dir: impl AsRef<Path>, id: &SessionId) -> PathBuf {
    dir.as_ref().join(format!("{id}.flight.jsonl"))
}

/// Appends flight records to one file, one line per `write`. It takes no
/// lock: the session's writer lock already makes its owner the only one.
pub struct FlightAppender {
    file: File,
    path: PathBuf,
    durability: Durability,
    torn_tail: bool,
}

impl fmt::Debug for FlightAppender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlightAppender")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FlightAppender {
    /// Opens (creating) a flight-record file for appending.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let file = crate::private::open(
            OpenOptions::new().read(true).append(true).create(true),
            &path,
        )
        .map_err(|err| StoreError::io("open", &path, err))?;
        let len = file
            .metadata()
            .map_err(|err| StoreError::io("read", &path, err))?
            .len();
        let mut torn_tail = false;
        if len > 0 {
            let mut last = [0u8; 1];
            crate::line::read_exact_at(&file, &mut last, len - 1)
                .map_err(|err| StoreError::io("read", &path, err))?;
            torn_tail = last[0] != b'\n';
        }
        Ok(FlightAppender {
            file,
            path,
            durability,
            torn_tail,
        })
    }

    /// Appends one record.
    pub fn append(&mut self, record: &FlightRecord) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        if self.torn_tail {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(record.to_line().as_bytes());
        bytes.push(b'\n');
        if let Err(err) = self.file.write_all(&bytes) {
            self.torn_tail = true;
            return Err(StoreError::io("append to", &self.path, err));
        }
        self.torn_tail = false;
        if self.durability == Durability::Fsync {
            self.file
                .sync_data()
                .map_err(|err| StoreError::io("fsync", &self.path, err))?;
        }
        Ok(())
    }
}

/// Reads every flight record of a file, skipping damaged lines with a
/// diagnostic. A missing file has no records.
pub fn read_flight_records(
    path: impl AsRef<Path>,
) -> Result<(Vec<FlightRecord>, Vec<Diagnostic>), StoreError> {
    let path = path.as_ref();
    // A FIFO or device planted there is refused, not waited on.
    let file = match crate::untrusted::open_untrusted(path) {
        Ok((file, _)) => file,
        Err(crate::untrusted::UntrustedReadError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok((Vec::new(), Vec::new()));
        }
        Err(err) => return Err(StoreError::open(err)),
    };
    let mut reader = BufReader::new(file);
    let mut records = Vec::new();
    let mut diagnostics = Vec::new();
    let mut line = Vec::new();
    let (mut offset, mut n_line) = (0u64, 0u64);
    loop {
        line.clear();
        let n_read = reader
            .read_until(b'\n', &mut line)
            .map_err(|err| StoreError::io("read", path, err))?;
        if n_read == 0 {
            break;
        }
        n_line += 1;
        let location = Location {
            offset,
            line: Some(n_line),
        };
        offset += n_read as u64;
        let terminated = line.last() == Some(&b'\n');
        let body = if terminated {
            &line[..n_read - 1]
        } else {
            &line[..]
        };
        if body.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let kind = if !terminated {
            DiagnosticKind::TornLine {
                bytes: body.len() as u64,
            }
        } else {
            match std::str::from_utf8(body) {
                Err(err) => DiagnosticKind::InvalidUtf8 {
                    valid_up_to: err.valid_up_to() as u64,
                },
                Ok(text) => match FlightRecord::from_line(text) {
                    Ok(record) => {
                        records.push(record);
                        continue;
                    }
                    Err(DecodeError::Syntax(message)) => DiagnosticKind::InvalidJson { message },
                    Err(DecodeError::Shape(message)) => DiagnosticKind::WrongShape { message },
                },
            }
        };
        diagnostics.push(Diagnostic { location, kind });
    }
    Ok((records, diagnostics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::IdKind;

    fn sample() -> FlightRecord {
        FlightRecord {
            operation_id: "op_1".to_owned(),
            timestamp: "2025-01-01T00:00:00Z".to_owned(),
            level: FlightLevel::Compaction,
            trigger: Some(Trigger::AutoThreshold),
            limits: FlightLimits {
                hard_limit: TokenCount::new(159_808),
                soft_limit: TokenCount::new(127_846),
                auto_limit: TokenCount::new(80_000),
                hygiene_limit: TokenCount::new(50_000),
            },
            tokens_before: TokenCount::new(82_000),
            tokens_after: TokenCount::new(30_000),
            reclaimed: TokenCount::new(52_000),
            outcome: FlightOutcome::Completed,
            reason: None,
            duration_ms: 1_234,
            checkpoint_id: Some(EntryId::from_uuid(IdKind::Capsule, 7)),
            quality: Some(Quality::Full),
            summarizer: Some(FlightSummarizer {
                model: "anthropic/claude-haiku-4.5".to_owned(),
                usage: Some(Usage {
                    input: 60_000,
                    cache_read: 0,
                    cache_write: 0,
                    output: 1_500,
                    reasoning: 0,
                }),
            }),
            expected_cache_write: Some(TokenCount::new(30_000)),
        }
    }

    #[test]
    fn records_round_trip_and_use_camel_case() {
        let record = sample();
        let line = record.to_line();
        assert!(line.contains(r#""operationId":"op_1""#), "{line}");
        assert!(line.contains(r#""limits":{"hardLimit":159808,"softLimit":127846,"autoLimit":80000,"hygieneLimit":50000}"#));
        assert!(line.contains(r#""expectedCacheWrite":30000"#));
        assert_eq!(FlightRecord::from_line(&line), Ok(record));
        let mut skipped = sample();
        skipped.outcome = FlightOutcome::Skipped;
        skipped.reason = Some("soft cap reached".to_owned());
        skipped.summarizer = None;
        skipped.checkpoint_id = None;
        skipped.quality = None;
        assert_eq!(FlightRecord::from_line(&skipped.to_line()), Ok(skipped));
    }

    #[test]
    fn appender_ends_a_torn_tail_and_reader_reports_it() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let id = SessionId::parse("s1").expect("valid id");
        let path = flight_path(dir.path(), &id);
        assert!(path.ends_with("s1.flight.jsonl"));
        std::fs::write(&path, "{\"operationId\":").expect("written");
        let mut appender = FlightAppender::open(&path, Durability::Flush).expect("opens");
        appender.append(&sample()).expect("appends");
        let (records, diagnostics) = read_flight_records(&path).expect("reads");
        assert_eq!(records, vec![sample()]);
        assert_eq!(diagnostics.len(), 1);
        assert!(matches!(
            diagnostics[0].kind,
            DiagnosticKind::InvalidJson { .. }
        ));
        assert_eq!(diagnostics[0].location.line, Some(1));
    }
}
