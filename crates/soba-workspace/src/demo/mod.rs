//! What `soba demo` needs beyond the engine's generated session
//! (`soba_engine::demo`): the folder it runs in, and what its session
//! shows afterwards (the newest capsule and what it kept, the compactions
//! that appended none); [`timeline`] words what it shows.

pub mod timeline;

use std::path::{Path, PathBuf};

use soba_core::entry::CheckpointKind;
use soba_core::plan::SkipReason as PlanSkip;
use soba_core::{Capsule, EntryBody};
use soba_store::flight::{FlightLevel, FlightOutcome, flight_path, read_flight_records};
use soba_store::log::SessionId;

use crate::error::{Result, WorkspaceError};

/// One line of what a capsule kept: its sections with their counts.
pub fn kept_line(capsule: &Capsule) -> String {
    let local = &capsule.local;
    let mut parts: Vec<String> = Vec::new();
    if !local.original_task.is_empty() {
        parts.push("the original task".to_owned());
    }
    let mut count = |n: usize, one: &str, many: &str| {
        if n > 0 {
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
        }
    };
    count(
        local.latest_instructions.len(),
        "latest instruction",
        "latest instructions",
    );
    count(
        local.files_read.len() + usize::try_from(local.files_read_more).unwrap_or(0),
        "file read",
        "files read",
    );
    count(
        local.files_modified.len(),
        "file modified",
        "files modified",
    );
    count(
        local.verification.len(),
        "verification command",
        "verification commands",
    );
    count(
        local.unresolved_errors.len(),
        "unresolved error",
        "unresolved errors",
    );
    count(local.answers.len(), "answer", "answers");
    // Milestones are listed under Checkpoints, plan pivots under
    // Decisions: "9 checkpoints" over a list of 8 read as one lost.
    let milestones = local
        .checkpoints
        .iter()
        .filter(|(kind, _)| *kind == CheckpointKind::Milestone)
        .count();
    count(milestones, "milestone", "milestones");
    count(
        local.checkpoints.len() - milestones,
        "plan pivot",
        "plan pivots",
    );
    count(local.plan.len(), "plan step", "plan steps");
    count(
        local.constraints.len() + usize::try_from(local.constraints_more).unwrap_or(0),
        "constraint",
        "constraints",
    );
    let narrative = capsule
        .narrative
        .sections()
        .iter()
        .filter(|(_, text)| !text.trim().is_empty())
        .count();
    if narrative > 0 {
        parts.push(format!("{narrative} of 8 narrative sections"));
    }
    if parts.is_empty() {
        "kept: nothing but the recent tail".to_owned()
    } else {
        format!("kept: {}", parts.join(" · "))
    }
}

/// The compactions of the demo session that appended no capsule, from its
/// flight records: what `soba stats` counts in its skipped, failed,
/// cancelled and stale columns on the kept session.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FlightOutcomes {
    /// Skipped before generation because the estimate missed an ROI gate.
    pub skipped_roi: usize,
    /// Skipped for another reason: a trigger below softGate, not re-armed
    /// after a soft capsule, another trigger chosen first.
    pub skipped_not_due: usize,
    /// Failed, cancelled or stale.
    pub other: usize,
}

/// Counts the compaction outcomes in the flight records beside `log`.
pub fn flight_outcomes(log: &std::path::Path) -> FlightOutcomes {
    let mut outcomes = FlightOutcomes::default();
    let (Some(dir), Some(id)) = (
        log.parent(),
        log.file_stem()
            .and_then(|stem| SessionId::parse(&stem.to_string_lossy()).ok()),
    ) else {
        return outcomes;
    };
    let Ok((records, _)) = read_flight_records(flight_path(dir, &id)) else {
        return outcomes;
    };
    for record in records
        .iter()
        .filter(|record| record.level == FlightLevel::Compaction)
    {
        match record.outcome {
            FlightOutcome::Completed => {}
            FlightOutcome::Skipped
                if record.reason.as_deref() == Some(PlanSkip::PreRoi.as_str()) =>
            {
                outcomes.skipped_roi += 1;
            }
            FlightOutcome::Skipped => outcomes.skipped_not_due += 1,
            _ => outcomes.other += 1,
        }
    }
    outcomes
}

/// Reads the session log: the newest capsule with its id at the length
/// that is unique among the log's ids now.
pub fn newest_capsule(log: &std::path::Path) -> Option<(String, String)> {
    let log = soba_store::reader::read_log(log).ok()?;
    let short = soba_core::id::shortest_unique_len(log.entries().iter().map(|l| &l.entry.id));
    log.entries()
        .iter()
        .rev()
        .find_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) => {
                Some((logged.entry.id.short_with(short), kept_line(capsule)))
            }
            _ => None,
        })
}

/// Returns the folder the demo runs in: `keep` (`--keep DIR`, created,
/// and refused unless empty), else a new temporary one, removed when the
/// returned handle is dropped.
pub fn prepare_dir(keep: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    match keep {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|err| {
                WorkspaceError::user(format!("cannot create {}", dir.display())).caused_by(err)
            })?;
            let non_empty = std::fs::read_dir(dir)
                .map_err(|err| {
                    WorkspaceError::user(format!("cannot read {}", dir.display())).caused_by(err)
                })?
                .next()
                .is_some();
            if non_empty {
                return Err(
                    WorkspaceError::user(format!("{} is not empty", dir.display()))
                        .hint("give --keep a new or empty directory"),
                );
            }
            Ok((dir.to_path_buf(), None))
        }
        None => {
            let temp = demo_tempdir().map_err(|err| {
                WorkspaceError::internal("cannot create a temporary directory").caused_by(err)
            })?;
            Ok((temp.path().to_path_buf(), Some(temp)))
        }
    }
}

/// Creates the demo's temporary directory, `soba-demo-` and six digits.
/// The path reaches the model input (tool results name files in it), so
/// its token count must not vary between runs: `o200k_base` splits a run of
/// digits into groups of three whatever the digits are, while random
/// letters tokenize differently each time.
pub fn demo_tempdir() -> std::io::Result<tempfile::TempDir> {
    let start = std::process::id() % 1_000_000;
    let mut last = None;
    for step in 0..100 {
        let name = format!("soba-demo-{:06}", (start + step * 7_919) % 1_000_000);
        match tempfile::Builder::new()
            .prefix(&name)
            .rand_bytes(0)
            .tempdir()
        {
            Ok(dir) => return Ok(dir),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// Returns the folder the demo's session is written to: inside `dir` when
/// it is `temporary` (removed at exit with it); for a kept demo, where the
/// commands run in its workspace (`cd DIR/workspace && soba show`) look,
/// under `--session-dir` when given.
pub fn sessions_dir(dir: &Path, temporary: bool, session_dir: Option<&Path>) -> Result<PathBuf> {
    if temporary {
        return Ok(dir.join("sessions"));
    }
    let workspace_dir = dir.join("workspace");
    std::fs::create_dir_all(&workspace_dir).map_err(|err| {
        WorkspaceError::user(format!("cannot create {}", workspace_dir.display())).caused_by(err)
    })?;
    let workspace = crate::paths::Workspace::at(&workspace_dir)?;
    Ok(crate::paths::Locations::resolve(
        &crate::paths::Env::from_process(),
        &workspace,
        session_dir,
    )?
    .sessions_dir)
}
