//! What `soba demo` shows: the header (what it runs, its folder, the
//! model's limits and the legend), one line per hygiene pass, barrier and
//! warning as the engine reports them ([`Timeline`]), and the closing
//! lines (the tally, the newest capsule, where its session is and how to
//! look at it).

use std::path::Path;

use soba_core::budget::Budget;
use soba_engine::demo::DemoSummary;
use soba_engine::event::{EngineEvent, Outcome};
use soba_engine::session::ModelSpec;

use super::{flight_outcomes, newest_capsule};

/// What the demo shows, printed before it runs.
const INTRO: &str = "\
It runs a scripted coding agent (a scripted model, SOBA's real tools) through a session
that outgrows its context, and prints each time SOBA prunes old tool output (hygiene) or
compacts the conversation into a capsule, and what the capsule kept.";

/// The legend, printed once after the header.
fn legend(soft_gate: &str) -> String {
    format!(
        "\
legend:
  effective       tokens the next request sends (system prompt, tools, live conversation)
  hygiene         old tool outputs replaced by stubs above hygieneLimit; nothing summarized
  capsule (ck_…)  the summary that replaces the older conversation; the recent tail stays verbatim
  softGate {soft_gate:<6} soft compactions may fire from here on, well below autoLimit, when they pay:
    turn_complete   a turn ended: a natural pause to compact
    read_cost       re-reading what a compaction would reclaim now costs more than compacting
    milestone       the agent recorded a checkpoint
    auto_threshold  effective reached autoLimit"
    )
}

/// Returns the lines printed before the demo runs, in `dir` (`temporary`
/// when it is removed at exit), with `model` under `budget`.
pub fn header_lines(
    dir: &Path,
    temporary: bool,
    model: &ModelSpec,
    budget: &Budget,
) -> Vec<String> {
    vec![
        "soba demo: the compaction engine, offline, on a generated coding session".to_owned(),
        INTRO.to_owned(),
        format!(
            "directory: {}{}",
            dir.display(),
            if temporary {
                " (removed at exit; --keep DIR keeps it)"
            } else {
                ""
            }
        ),
        format!(
            "model {}: window {} · maxOutput {} · hardLimit {} · autoLimit {} · hygieneLimit {} · keepRecent {} · softGate {}",
            model.id,
            model.context_window,
            model.max_output_tokens,
            budget.hard_limit(),
            budget.auto_limit(),
            budget.hygiene_limit(),
            budget.keep_recent(),
            budget.soft_gate()
        ),
        legend(&budget.soft_gate().to_string()),
        String::new(),
    ]
}

/// The demo's timeline: the turn it is in, and the counters its closing
/// lines give.
#[derive(Debug, Default)]
pub struct Timeline {
    turn: usize,
    hygiene: usize,
    /// The triggers of the capsules appended, in order.
    completed: Vec<String>,
    /// The newest capsule's id as shown, and what it kept.
    newest: Option<(String, String)>,
}

impl Timeline {
    /// Returns the lines `event` adds to the timeline (none for most
    /// events). `log` is the demo session's log, once it exists: a
    /// capsule is in it before its end is reported, so its id is shown at
    /// the session's unique length with what it kept.
    pub fn lines(&mut self, event: &EngineEvent, log: Option<&Path>) -> Vec<String> {
        let turn = self.turn;
        match event {
            EngineEvent::TurnStarted { .. } => {
                self.turn += 1;
                Vec::new()
            }
            EngineEvent::Hygiene {
                reclaimed,
                stubbed,
                tokens_before,
                ..
            } => {
                self.hygiene += 1;
                vec![format!(
                    "turn {turn:>2}  hygiene: {stubbed} tool outputs pruned, {reclaimed} tokens reclaimed (effective was {tokens_before})"
                )]
            }
            EngineEvent::CompactionStart {
                trigger,
                tokens_before,
                ..
            } => vec![format!(
                "turn {turn:>2}  Compacting context before response ({}, {} tokens)",
                trigger.as_str(),
                tokens_before
            )],
            EngineEvent::CompactionEnd(end) => {
                let completed = end.outcome == Outcome::Completed;
                let newest = log.filter(|_| completed).and_then(newest_capsule);
                let line = end.result_line(|id| match &newest {
                    Some((shown, _)) if id.matches_short(shown) => shown.clone(),
                    _ => id.as_str().to_owned(),
                });
                let mut lines = vec![format!("turn {turn:>2}  {line}")];
                if completed {
                    self.completed.push(end.trigger.as_str().to_owned());
                    if let Some((_, kept)) = &newest {
                        lines.push(format!("          {kept}"));
                    }
                    self.newest = newest;
                }
                lines
            }
            EngineEvent::Warning { message } => {
                vec![format!("turn {turn:>2}  warning: {message}")]
            }
            _ => Vec::new(),
        }
    }

    /// Returns the closing lines of a finished demo run in `dir`
    /// (`temporary` when it is removed at exit): the tally of turns,
    /// hygiene passes, capsules by trigger and the barriers that appended
    /// none, the newest capsule, and where the session is and how to look
    /// at it.
    pub fn closing_lines(&self, summary: &DemoSummary, dir: &Path, temporary: bool) -> Vec<String> {
        let mut by_trigger: Vec<(&str, usize)> = Vec::new();
        for trigger in &self.completed {
            match by_trigger
                .iter_mut()
                .find(|(name, _)| *name == trigger.as_str())
            {
                Some((_, n)) => *n += 1,
                None => by_trigger.push((trigger, 1)),
            }
        }
        let triggers = by_trigger
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let outcomes = flight_outcomes(&summary.session_log);
        let mut lines = vec![
            String::new(),
            format!(
                "result: {} turns, {} failed · {} hygiene passes · {} capsules ({}) · {} compactions skipped ({} because they would not pay off, {} not due yet) · {} other barrier outcomes",
                summary.turns,
                summary.failed_turns.len(),
                self.hygiene,
                self.completed.len(),
                if triggers.is_empty() {
                    "none".to_owned()
                } else {
                    triggers
                },
                outcomes.skipped_roi + outcomes.skipped_not_due,
                outcomes.skipped_roi,
                outcomes.skipped_not_due,
                outcomes.other
            ),
        ];
        if let Some((id, kept)) = &self.newest {
            lines.push(format!("newest capsule {id} {kept}"));
        }
        if temporary {
            lines.push(format!(
                "session log: {} (removed with the directory; soba demo --keep DIR keeps it)",
                summary.session_log.display()
            ));
            return lines;
        }
        let session = summary
            .session_log
            .file_stem()
            .map(|stem| stem.to_string_lossy().chars().take(8).collect::<String>())
            .unwrap_or_default();
        lines.push(format!("session log: {}", summary.session_log.display()));
        lines.push(
            "look at it from its workspace, where soba finds the session by itself:".to_owned(),
        );
        lines.push(format!("  cd {}", dir.join("workspace").display()));
        lines.push(format!(
            "  soba sessions · soba show · soba show {session} --entries · soba capsule list · soba budget · soba stats"
        ));
        if let Some((id, _)) = &self.newest {
            lines.push(format!(
                "  soba capsule export {id} newest.capsule.md   (the newest capsule as markdown)"
            ));
        }
        lines
    }
}
