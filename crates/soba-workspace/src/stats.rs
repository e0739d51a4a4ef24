//! The flight records of a workspace's compactions summed up (SPEC §13,
//! `soba stats`): counts per trigger and outcome, tokens reclaimed, the
//! degraded share and p50/p95 barrier durations, as JSON or text;
//! `gather` reads them for the workspace or one session.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use soba_core::Quality;
use soba_core::tokens::group_thousands;
use soba_store::flight::{
    FlightLevel, FlightOutcome, FlightRecord, flight_path, read_flight_records,
};
use soba_store::log::SessionId;

use crate::context::Context;
use crate::error::Result;

/// The outcomes, in column order.
const OUTCOMES: [FlightOutcome; 5] = [
    FlightOutcome::Completed,
    FlightOutcome::Skipped,
    FlightOutcome::Failed,
    FlightOutcome::Cancelled,
    FlightOutcome::Stale,
];

/// Flight records summed up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Records read.
    pub records: usize,
    /// Flight files read.
    pub files: usize,
    /// Damaged lines skipped.
    pub damaged_lines: usize,
    /// Flight files that could not be read (each warned about).
    pub skipped_files: usize,
    /// Compactions per trigger and outcome.
    pub by_trigger: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// Hygiene passes per outcome.
    pub hygiene: BTreeMap<&'static str, u64>,
    /// `/capsule create` handoffs per outcome.
    pub capsule_create: BTreeMap<&'static str, u64>,
    /// Tokens reclaimed by completed compactions.
    pub reclaimed_compaction: u64,
    /// Tokens reclaimed by hygiene.
    pub reclaimed_hygiene: u64,
    /// Completed capsules (compactions and handoffs).
    pub capsules: u64,
    /// Of which degraded.
    pub degraded: u64,
    /// Durations of barriers that ran (not mere skipped triggers), ms.
    pub durations_ms: Vec<u64>,
}

impl Stats {
    /// Adds one record.
    pub fn add(&mut self, record: &FlightRecord) {
        self.records += 1;
        let outcome = record.outcome.as_str();
        let completed = record.outcome == FlightOutcome::Completed;
        match record.level {
            FlightLevel::Hygiene => {
                *self.hygiene.entry(outcome).or_default() += 1;
                if completed {
                    self.reclaimed_hygiene += record.reclaimed.get();
                }
                return;
            }
            FlightLevel::Compaction => {
                let trigger = record
                    .trigger
                    .map_or("unknown", |trigger| trigger.as_str())
                    .to_owned();
                *self
                    .by_trigger
                    .entry(trigger)
                    .or_default()
                    .entry(outcome)
                    .or_default() += 1;
                if completed {
                    self.reclaimed_compaction += record.reclaimed.get();
                }
            }
            FlightLevel::CapsuleCreate => {
                *self.capsule_create.entry(outcome).or_default() += 1;
            }
        }
        if completed {
            self.capsules += 1;
            if record.quality == Some(Quality::Degraded) {
                self.degraded += 1;
            }
        }
        // A trigger not chosen or a pre-ROI skip ran no barrier: it has no
        // summarizer and no duration.
        let ran = record.outcome != FlightOutcome::Skipped
            || record.summarizer.is_some()
            || record.duration_ms > 0;
        if ran {
            self.durations_ms.push(record.duration_ms);
        }
    }

    /// Returns the nearest-rank percentile `p` (0–100) of the durations.
    pub fn percentile(&self, p: u64) -> Option<u64> {
        let mut sorted = self.durations_ms.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return None;
        }
        let rank = (p * sorted.len() as u64).div_ceil(100).max(1);
        sorted.get(rank as usize - 1).copied()
    }

    /// Returns the degraded share of completed capsules, in percent.
    pub fn degraded_percent(&self) -> Option<f64> {
        (self.capsules > 0).then(|| self.degraded as f64 * 100.0 / self.capsules as f64)
    }

    /// Returns the summary as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "records": self.records,
            "files": self.files,
            "damagedLines": self.damaged_lines,
            "skippedFiles": self.skipped_files,
            "byTrigger": self.by_trigger,
            "hygiene": self.hygiene,
            "capsuleCreate": self.capsule_create,
            "reclaimed": {
                "total": self.reclaimed_compaction + self.reclaimed_hygiene,
                "compaction": self.reclaimed_compaction,
                "hygiene": self.reclaimed_hygiene,
            },
            "degraded": {
                "count": self.degraded,
                "of": self.capsules,
                "percent": self.degraded_percent(),
            },
            "durationMs": {
                "p50": self.percentile(50),
                "p95": self.percentile(95),
                "n": self.durations_ms.len(),
            },
        })
    }

    /// Returns the summary as text.
    pub fn to_text(&self) -> String {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let mut out = format!(
            "{} flight record{} in {} session{}{}\n",
            self.records,
            plural(self.records),
            self.files,
            plural(self.files),
            match (self.damaged_lines, self.skipped_files) {
                (0, 0) => String::new(),
                (lines, 0) => format!(" ({lines} damaged lines skipped)"),
                (0, files) => format!(" ({files} unreadable file{} skipped)", plural(files)),
                (lines, files) => format!(
                    " ({lines} damaged lines and {files} unreadable file{} skipped)",
                    plural(files)
                ),
            }
        );
        if !self.by_trigger.is_empty() {
            let width = self
                .by_trigger
                .keys()
                .map(String::len)
                .max()
                .unwrap_or(0)
                .max("trigger".len());
            out.push_str(&format!("\n{:<width$}", "trigger"));
            for outcome in OUTCOMES {
                out.push_str(&format!("  {:>9}", outcome.as_str()));
            }
            out.push('\n');
            for (trigger, counts) in &self.by_trigger {
                out.push_str(&format!("{trigger:<width$}"));
                for outcome in OUTCOMES {
                    let n = counts.get(outcome.as_str()).copied().unwrap_or(0);
                    out.push_str(&format!("  {n:>9}"));
                }
                out.push('\n');
            }
            out.push('\n');
        }
        let counts = |map: &BTreeMap<&str, u64>| {
            OUTCOMES
                .iter()
                .filter_map(|outcome| {
                    map.get(outcome.as_str())
                        .map(|n| format!("{} {n}", outcome.as_str()))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.hygiene.is_empty() {
            out.push_str(&format!("hygiene: {}\n", counts(&self.hygiene)));
        }
        if !self.capsule_create.is_empty() {
            out.push_str(&format!(
                "capsule files created: {}\n",
                counts(&self.capsule_create)
            ));
        }
        out.push_str(&format!(
            "tokens reclaimed: {} (compaction {} · hygiene {})\n",
            group_thousands(self.reclaimed_compaction + self.reclaimed_hygiene),
            group_thousands(self.reclaimed_compaction),
            group_thousands(self.reclaimed_hygiene)
        ));
        match self.degraded_percent() {
            Some(percent) => out.push_str(&format!(
                "degraded: {} of {} capsules ({percent:.1}%)\n",
                self.degraded, self.capsules
            )),
            None => out.push_str("degraded: no capsules yet\n"),
        }
        match (self.percentile(50), self.percentile(95)) {
            (Some(p50), Some(p95)) => out.push_str(&format!(
                "duration: p50 {} ms · p95 {} ms over {} barrier{}\n",
                group_thousands(p50),
                group_thousands(p95),
                self.durations_ms.len(),
                plural(self.durations_ms.len())
            )),
            _ => out.push_str("duration: no barrier ran yet\n"),
        }
        out
    }
}

/// Lists `*.flight.jsonl` in `dir`, sorted; a missing folder has none.
pub fn flight_files(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let read_dir = match std::fs::read_dir(dir) {
        Ok(read_dir) => read_dir,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    let mut files: Vec<PathBuf> = read_dir
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.ends_with(".flight.jsonl"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Sums the flight records of the session `wanted` names, or of every
/// session in the workspace's sessions folder; `warn` receives each
/// damaged line (`FILE: diagnostic`). A file with no record is not
/// counted.
pub fn gather(ctx: &Context, wanted: Option<&str>, warn: &mut dyn FnMut(String)) -> Result<Stats> {
    let dir = &ctx.locations.sessions_dir;
    let files: Vec<PathBuf> = match wanted {
        Some(wanted) => {
            let summary = ctx.select_session(Some(wanted))?;
            let id = SessionId::parse(&summary.id)?;
            let dir = summary
                .path
                .parent()
                .map_or_else(|| dir.clone(), PathBuf::from);
            vec![flight_path(dir, &id)]
        }
        None => flight_files(dir)?,
    };
    let mut stats = Stats::default();
    let asked_for_one = wanted.is_some();
    for file in &files {
        let (records, diagnostics) = match read_flight_records(file) {
            Ok(read) => read,
            // One unreadable file (a FIFO, a link, no permission) is
            // skipped with a warning when summing them all.
            Err(err) if !asked_for_one => {
                warn(format!("warning: skipped {}: {err}", file.display()));
                stats.skipped_files += 1;
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        if records.is_empty() && diagnostics.is_empty() {
            continue;
        }
        stats.files += 1;
        stats.damaged_lines += diagnostics.len();
        for diagnostic in &diagnostics {
            warn(format!("{}: {diagnostic}", file.display()));
        }
        for record in &records {
            stats.add(record);
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::{TokenCount, Trigger};
    use soba_store::flight::{FlightLimits, FlightSummarizer};

    fn record(
        level: FlightLevel,
        trigger: Option<Trigger>,
        outcome: FlightOutcome,
        reclaimed: u64,
        duration_ms: u64,
        quality: Option<Quality>,
    ) -> FlightRecord {
        FlightRecord {
            operation_id: "op".into(),
            timestamp: "2025-01-01T00:00:00Z".into(),
            level,
            trigger,
            limits: FlightLimits::default(),
            tokens_before: TokenCount::new(1000),
            tokens_after: TokenCount::new(1000 - reclaimed),
            reclaimed: TokenCount::new(reclaimed),
            outcome,
            reason: None,
            duration_ms,
            checkpoint_id: None,
            quality,
            summarizer: (duration_ms > 0).then(|| FlightSummarizer {
                model: "deterministic".into(),
                usage: None,
            }),
            expected_cache_write: None,
        }
    }

    #[test]
    fn aggregates_counts_reclaimed_degraded_and_percentiles() {
        let mut stats = Stats::default();
        let compaction = Some(Trigger::AutoThreshold);
        stats.add(&record(
            FlightLevel::Compaction,
            compaction,
            FlightOutcome::Completed,
            400,
            100,
            Some(Quality::Full),
        ));
        stats.add(&record(
            FlightLevel::Compaction,
            compaction,
            FlightOutcome::Completed,
            300,
            300,
            Some(Quality::Degraded),
        ));
        stats.add(&record(
            FlightLevel::Compaction,
            Some(Trigger::HardLimit),
            FlightOutcome::Completed,
            200,
            200,
            Some(Quality::Full),
        ));
        stats.add(&record(
            FlightLevel::Compaction,
            Some(Trigger::User),
            FlightOutcome::Completed,
            100,
            1000,
            Some(Quality::Full),
        ));
        // A trigger not chosen: no barrier, no duration.
        stats.add(&record(
            FlightLevel::Compaction,
            compaction,
            FlightOutcome::Skipped,
            0,
            0,
            None,
        ));
        stats.add(&record(
            FlightLevel::Hygiene,
            None,
            FlightOutcome::Completed,
            50,
            0,
            None,
        ));
        assert_eq!(stats.records, 6);
        assert_eq!(stats.by_trigger["auto_threshold"]["completed"], 2);
        assert_eq!(stats.by_trigger["auto_threshold"]["skipped"], 1);
        assert_eq!(stats.reclaimed_compaction, 1000);
        assert_eq!(stats.reclaimed_hygiene, 50);
        assert_eq!((stats.degraded, stats.capsules), (1, 4));
        assert_eq!(stats.degraded_percent(), Some(25.0));
        // Durations 100, 200, 300, 1000: nearest rank p50 = 2nd, p95 = 4th.
        assert_eq!(stats.percentile(50), Some(200));
        assert_eq!(stats.percentile(95), Some(1000));
        let text = stats.to_text();
        assert!(
            text.contains("tokens reclaimed: 1,050 (compaction 1,000 · hygiene 50)"),
            "{text}"
        );
        assert!(text.contains("degraded: 1 of 4 capsules (25.0%)"), "{text}");
        assert!(
            text.contains("duration: p50 200 ms · p95 1,000 ms over 4 barriers"),
            "{text}"
        );
    }
}
