//! The race campaign (SPEC §7.1, §17): a cancel, a rewind or another
//! append is injected at a seeded moment of a barrier (or of a whole turn)
//! while a summarizer yields a seeded number of times per chunk. Everything
//! runs on tokio's current-thread runtime (no timeout can fire), so a seed
//! replays the same interleaving.
//!
//! After every run the log is read back from disk and must show:
//!
//! - no append after a cancel or a leaf change that the interferer made
//!   under the session lock (the barrier decides its outcome when it takes
//!   that lock, so anything it appends must come before);
//! - at most one new capsule, whose parent is the leaf the plan expected;
//! - an outcome that matches the log: `completed` with its capsule,
//!   `cancelled`/`stale` with none, and a flight record saying the same
//!   without any summary text.
//!
//! `SOBA_RACE_RUNS` sets the number of runs (300 by default; thousands
//! locally), `SOBA_RACE_SEED` the base seed.

use std::sync::{Arc, Mutex as StdMutex};

use serde_json::json;
use soba_core::summarize::Summarizer;
use soba_core::{
    Block, EntryBody, EntryId, Message, ResultPart, Role, TokenCount, ToolInput, ToolResult,
    ToolUse,
};
use soba_engine::barrier::{Forced, Preflight};
use soba_engine::event::{EngineEvent, Outcome, TurnEnd};
use soba_store::flight::{FlightLevel, FlightOutcome, flight_path, read_flight_records};
use soba_store::log::SessionId;
use soba_store::reader::read_log;
use tokio_util::sync::CancellationToken;

use crate::harness::{file_text, small_config};
use crate::rig::{Pause, PausingSummarizer, Rig, RigOptions, Rng, Step, env_count};

/// What the interferer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Interference {
    /// Cancels while holding the session lock (the strictest moment).
    CancelLocked,
    /// Cancels without the lock, like Ctrl-C.
    Cancel,
    /// Rewinds to an earlier entry (a leaf change).
    Rewind,
    /// Appends another message (a leaf change).
    Append,
    /// Does nothing: the barrier runs alone.
    Nothing,
}

const INTERFERENCES: [Interference; 5] = [
    Interference::CancelLocked,
    Interference::Cancel,
    Interference::Rewind,
    Interference::Append,
    Interference::Nothing,
];

/// Where the barrier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `preflight` alone, forced by `/compact` or by the auto threshold.
    Barrier { forced: bool },
    /// A whole turn through the agent loop (a preflight before each of its
    /// three steps).
    Turn,
}

/// What the interferer saw when it acted under the lock: the log's entry
/// count and the compaction in flight, if any.
type Observed = Option<(usize, Option<String>)>;

/// What one run saw.
#[derive(Debug, Default)]
struct RunReport {
    outcomes: Vec<Outcome>,
    interfered: bool,
    /// The interference hit a compaction between its plan and its decision.
    in_flight: bool,
    /// A hygiene entry was appended after a cancel (the FIXME below).
    hygiene_after_cancel: bool,
}

/// Appends a user message and `n_reads` answered `read_file` calls of 4,000
/// bytes each (about 1,000 tokens each with the byte counter).
/// Returns the number of entries in the log the core writes (the core
/// keeps only the live stretch in memory).
fn n_entries(core: &soba_engine::session::SessionCore) -> usize {
    read_log(core.log_path()).unwrap().entries().len()
}

fn fill(core: &mut soba_engine::session::SessionCore, n_reads: usize) {
    core.append_message(Message::user("audit the data files"))
        .unwrap();
    for idx in 0..n_reads {
        let id = format!("fill_{idx}");
        let call = Message::new(
            Role::Assistant,
            vec![Block::ToolUse(ToolUse {
                id: id.clone(),
                name: "read_file".into(),
                input: ToolInput::from_value(json!({"path": format!("data/file{idx:02}.txt")})),
            })],
        );
        core.append_message(call).unwrap();
        let result = Message::new(
            Role::Tool,
            vec![Block::ToolResult(ToolResult {
                tool_use_id: id,
                content: vec![ResultPart::Text(file_text(idx, 4_000))],
                is_error: false,
            })],
        );
        core.append_message(result).unwrap();
    }
}

/// Runs one seeded race and checks the log; returns what happened.
fn race(seed: u64) -> RunReport {
    let mut rng = Rng::new(seed);
    let interference = INTERFERENCES[rng.below(INTERFERENCES.len() as u64) as usize];
    let mode = match rng.below(3) {
        0 => Mode::Barrier { forced: true },
        1 => Mode::Barrier { forced: false },
        _ => Mode::Turn,
    };
    let plan: Vec<u32> = (0..1 + rng.below(4))
        .map(|_| rng.below(60) as u32)
        .collect();
    let window = if rng.below(2) == 0 { 200_000 } else { 8_000 };
    // Mostly inside the summarizer's yields (one chunk with the large
    // window, about three with the small one), sometimes after them.
    let n_chunks = if window == 200_000 { 1 } else { 3 };
    let yields: u64 = (0..n_chunks)
        .map(|idx| u64::from(plan[idx % plan.len()]))
        .sum();
    let delay = rng.below(yields + yields / 4 + 4);
    let hygiene = rng.below(4) == 0;
    let n_reads = 8 + rng.below(4) as usize;
    let rewind_pick = rng.next();
    let hold = rng.below(4);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async move {
        let summarizer: Arc<dyn Summarizer> = Arc::new(PausingSummarizer::new(
            Pause::Yields(Arc::new(plan)),
            window,
        ));
        let mut compaction = small_config();
        compaction.timeout_ms = 600_000;
        if !hygiene {
            compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
        }
        let events: Arc<StdMutex<Vec<EngineEvent>>> = Arc::default();
        let sink = events.clone();
        let rig = Rig::open(
            dir.path(),
            RigOptions {
                compaction,
                summarizer: Some(summarizer),
                events: Arc::new(move |event| sink.lock().unwrap().push(event)),
                n_files: 12,
                ..RigOptions::default()
            },
        );
        let session = SessionId::parse("rig").unwrap();
        let (n_before, expected_leaf) = {
            let mut core = rig.core.lock().await;
            fill(&mut core, n_reads);
            (n_entries(&core), core.leaf().cloned())
        };
        if mode == Mode::Turn {
            // Tools without I/O keep the interleaving a function of the seed
            // (file tools wait on tokio's blocking pool).
            let checkpoint = Step::call(
                "checkpoint",
                json!({"kind": "milestone", "note": "halfway through the audit"}),
            );
            rig.client
                .push([checkpoint.clone(), checkpoint, Step::text("done")]);
        }

        let cancel = CancellationToken::new();
        // The interferer: after `delay` yields, act under the session lock
        // (except a plain cancel), recording how many entries the log had
        // then and which compaction was in flight (started, not ended: it
        // cannot be deciding while the lock is held here).
        let observed: Arc<StdMutex<Observed>> = Arc::default();
        let interferer = {
            let core = rig.core.clone();
            let cancel = cancel.clone();
            let observed = observed.clone();
            let events = events.clone();
            tokio::spawn(async move {
                for _ in 0..delay {
                    tokio::task::yield_now().await;
                }
                let in_flight = |events: &[EngineEvent]| {
                    let mut open = None;
                    for event in events {
                        match event {
                            EngineEvent::CompactionStart { operation_id, .. } => {
                                open = Some(operation_id.clone())
                            }
                            EngineEvent::CompactionEnd(end)
                                if Some(&end.operation_id) == open.as_ref() =>
                            {
                                open = None
                            }
                            _ => {}
                        }
                    }
                    open
                };
                let mut core = core.lock().await;
                let acted = match interference {
                    Interference::CancelLocked => {
                        // Hold the lock a while first, as a UI reading the
                        // session would: whoever waits for it must see the
                        // cancel once it gets it.
                        for _ in 0..hold {
                            tokio::task::yield_now().await;
                        }
                        cancel.cancel();
                        true
                    }
                    Interference::Cancel => {
                        drop(core);
                        cancel.cancel();
                        return;
                    }
                    Interference::Rewind => {
                        let path: Vec<EntryId> =
                            core.path().iter().map(|entry| entry.id.clone()).collect();
                        if path.len() > 1 {
                            let target =
                                path[(rewind_pick % (path.len() as u64 - 1)) as usize].clone();
                            core.rewind(target).unwrap();
                            true
                        } else {
                            false
                        }
                    }
                    Interference::Append => {
                        core.append_message(Message::user("one more thing"))
                            .unwrap();
                        true
                    }
                    Interference::Nothing => false,
                };
                if acted {
                    let open = in_flight(&events.lock().unwrap());
                    *observed.lock().unwrap() = Some((n_entries(&core), open));
                }
            })
        };
        let barrier = rig.agent.barrier.clone();
        let agent = rig.agent.clone();
        let token = cancel.clone();
        let runner = tokio::spawn(async move {
            match mode {
                Mode::Barrier { forced } => {
                    let forced = forced.then_some(Forced::User { instructions: None });
                    let result = barrier.preflight(forced, &token).await.unwrap();
                    (Some(result), None)
                }
                Mode::Turn => {
                    let end = agent.run_turn("read the data files", &token).await.unwrap();
                    (None, Some(end))
                }
            }
        });
        let (preflight, turn_end) = runner.await.unwrap();
        interferer.await.unwrap();

        // The log, from disk.
        let log = read_log(&rig.log_path).unwrap();
        assert!(log.is_clean(), "seed {seed}: {:?}", log.diagnostics());
        let entries: Vec<_> = log.entries().iter().map(|l| l.entry.clone()).collect();
        let observed = observed.lock().unwrap().clone();
        let new_capsules: Vec<(usize, &soba_core::Entry)> = entries
            .iter()
            .enumerate()
            .skip(n_before)
            .filter(|(_, entry)| matches!(entry.body, EntryBody::Capsule(_)))
            .collect();
        let mut hygiene_after_cancel = false;
        if let Some((n_seen, in_flight)) = &observed
            && interference == Interference::CancelLocked
        {
            for (idx, entry) in entries.iter().enumerate().skip(*n_seen) {
                // A barrier that takes the session lock after a cancel
                // appends nothing, hygiene included; counted, and the
                // campaign asserts the count is zero.
                if matches!(entry.body, EntryBody::Hygiene { .. }) && in_flight.is_none() {
                    hygiene_after_cancel = true;
                    continue;
                }
                let is_barrier_append = matches!(
                    entry.body,
                    EntryBody::Capsule(_) | EntryBody::Hygiene { .. }
                );
                let is_answer = matches!(&entry.body, EntryBody::Message(m)
                    if m.message.role == Role::Assistant);
                assert!(
                    !is_barrier_append && !is_answer,
                    "seed {seed} ({mode:?}): entry {idx} ({}) appended after the cancel was \
                     observed at {n_seen}",
                    entry.body.type_name(),
                );
            }
        }
        let ends: Vec<_> = events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                EngineEvent::CompactionEnd(end) => Some(end.clone()),
                _ => None,
            })
            .collect();
        let completed: Vec<_> = ends
            .iter()
            .filter(|end| end.outcome == Outcome::Completed)
            .collect();
        assert_eq!(
            completed.len(),
            new_capsules.len(),
            "seed {seed}: {ends:#?}"
        );
        for (end, (_, capsule)) in completed.iter().zip(&new_capsules) {
            assert_eq!(end.checkpoint_id.as_ref(), Some(&capsule.id), "seed {seed}");
        }
        if mode != Mode::Turn {
            assert!(new_capsules.len() <= 1, "seed {seed}");
            if let Some((capsule_idx, capsule)) = new_capsules.first() {
                // The plan expected the leaf before the run, or the leaf the
                // interference left when it came before the plan, or the
                // hygiene entry the barrier appended on top of either.
                let mut expected: Vec<Option<EntryId>> = vec![expected_leaf.clone()];
                if let Some((n_seen, None)) = &observed
                    && n_seen <= capsule_idx
                {
                    expected.push(log.entries()[n_seen - 1].entry.id.clone().into());
                    if let EntryBody::Leaf { target } = &entries[n_seen - 1].body {
                        expected.push(Some(target.clone()));
                    }
                }
                let hygiene = entries[n_before..*capsule_idx]
                    .iter()
                    .rev()
                    .find(|entry| matches!(entry.body, EntryBody::Hygiene { .. }));
                if let Some(hygiene) = hygiene {
                    assert!(
                        expected.contains(&hygiene.parent_id),
                        "seed {seed}: hygiene under an unexpected leaf"
                    );
                    expected = vec![Some(hygiene.id.clone())];
                }
                assert!(
                    expected.contains(&capsule.parent_id),
                    "seed {seed} ({interference:?}, {mode:?}): the capsule's parent {:?} is not \
                     the expected leaf {expected:?}",
                    capsule.parent_id
                );
            }
            match &preflight {
                Some(Preflight::EndTurn(end)) => {
                    assert!(
                        matches!(
                            end.outcome,
                            Outcome::Cancelled | Outcome::Stale | Outcome::Failed
                        ),
                        "seed {seed}: {end:?}"
                    );
                    assert!(new_capsules.is_empty(), "seed {seed}");
                }
                Some(Preflight::Compacted(end)) if end.outcome == Outcome::Completed => {
                    assert_eq!(new_capsules.len(), 1, "seed {seed}");
                }
                _ => {}
            }
        } else if let (Some(end), Some((n_seen, _))) = (&turn_end, &observed)
            && interference == Interference::CancelLocked
        {
            // The turn completed only if its final answer came before the
            // cancel; otherwise it ends cancelled.
            let answered_at = entries.iter().rposition(|entry| {
                matches!(&entry.body, EntryBody::Message(m)
                    if m.message.role == Role::Assistant && m.message.tool_uses().next().is_none())
            });
            let expected = match answered_at {
                Some(idx) if idx < *n_seen => TurnEnd::Completed,
                _ => TurnEnd::Cancelled,
            };
            assert_eq!(end, &expected, "seed {seed}");
        }
        for end in &ends {
            if matches!(end.outcome, Outcome::Cancelled | Outcome::Stale) {
                assert!(end.checkpoint_id.is_none(), "seed {seed}");
            }
        }
        // The compaction in flight when the cancel or leaf change happened
        // must not complete.
        if let Some((_, Some(op))) = &observed {
            let end = ends
                .iter()
                .find(|end| &end.operation_id == op)
                .unwrap_or_else(|| panic!("seed {seed}: {op} never ended"));
            let expected = if interference == Interference::CancelLocked {
                Outcome::Cancelled
            } else {
                Outcome::Stale
            };
            assert_eq!(
                end.outcome,
                expected,
                "seed {seed} ({interference:?}, {mode:?}): {op} was in flight at the {} and ended \
                 {:?}",
                if expected == Outcome::Cancelled {
                    "cancel"
                } else {
                    "leaf change"
                },
                end
            );
        }
        // Flight records agree and hold no summary text.
        let flight = flight_path(dir.path().join("sessions"), &session);
        let text = std::fs::read_to_string(&flight).unwrap_or_default();
        assert!(
            !text.contains("Reading the data files one by one"),
            "seed {seed}: summary text in a flight record"
        );
        let (records, diagnostics) = read_flight_records(&flight).unwrap();
        assert!(diagnostics.is_empty(), "seed {seed}");
        let compactions: Vec<_> = records
            .iter()
            .filter(|record| record.level == FlightLevel::Compaction)
            .filter(|record| record.outcome != FlightOutcome::Skipped || record.reason.is_some())
            .collect();
        let completed_rows = compactions
            .iter()
            .filter(|record| record.outcome == FlightOutcome::Completed)
            .count();
        assert_eq!(completed_rows, completed.len(), "seed {seed}: {records:#?}");
        RunReport {
            outcomes: ends.iter().map(|end| end.outcome).collect(),
            interfered: observed.is_some() || interference == Interference::Cancel,
            in_flight: matches!(observed, Some((_, Some(_)))),
            hygiene_after_cancel,
        }
    })
}

#[test]
fn cancel_and_rewind_at_any_moment_never_append_late() {
    let runs = env_count("SOBA_RACE_RUNS", 300);
    let base = env_count("SOBA_RACE_SEED", 0x7ace);
    let mut by_outcome: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut n_interfered = 0;
    let mut n_in_flight = 0;
    let mut n_hygiene_after_cancel = 0;
    let started = std::time::Instant::now();
    for run in 0..runs {
        let report = race(base.wrapping_add(run));
        n_interfered += u64::from(report.interfered);
        n_in_flight += u64::from(report.in_flight);
        n_hygiene_after_cancel += u64::from(report.hygiene_after_cancel);
        for outcome in report.outcomes {
            *by_outcome.entry(outcome.as_str()).or_default() += 1;
        }
    }
    println!(
        "race campaign: {runs} seeded runs (base seed {base}) in {:.1} s, {n_interfered} with a \
         cancel or leaf change, {n_in_flight} of them while a compaction was in flight; barrier \
         outcomes {by_outcome:?}; {n_hygiene_after_cancel} hygiene entries after a cancel",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        n_hygiene_after_cancel, 0,
        "a barrier appended hygiene after a cancel"
    );
    for outcome in ["completed", "cancelled", "stale"] {
        assert!(
            runs < 50 || by_outcome.get(outcome).copied().unwrap_or(0) > 0,
            "no run ended {outcome}: {by_outcome:?}"
        );
    }
}

/// Two runs of one seed interleave identically.
#[test]
fn a_race_seed_replays_the_same_interleaving() {
    let first = race(0xd00d);
    let second = race(0xd00d);
    assert_eq!(first.outcomes, second.outcomes);
}

/// SPEC §7 ("cancelled: nothing appended, ever") and §7.1: a cancel seen
/// before the barrier plans ends it before hygiene (step 2) appends
/// anything, even when the cancel arrived while the barrier waited for the
/// session lock.
#[test]
fn a_cancel_seen_before_the_plan_appends_nothing_not_even_hygiene() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let events: Arc<StdMutex<Vec<EngineEvent>>> = Arc::default();
        let sink = events.clone();
        let rig = Rig::open(
            dir.path(),
            RigOptions {
                summarizer: Some(Arc::new(PausingSummarizer::new(
                    Pause::Yields(Arc::new(vec![1])),
                    200_000,
                ))),
                events: Arc::new(move |event| sink.lock().unwrap().push(event)),
                n_files: 12,
                ..RigOptions::default()
            },
        );
        let n_before = {
            let mut core = rig.core.lock().await;
            fill(&mut core, 9);
            n_entries(&core)
        };
        let cancel = CancellationToken::new();
        cancel.cancel();
        let result = rig
            .agent
            .barrier
            .preflight(Some(Forced::User { instructions: None }), &cancel)
            .await
            .unwrap();
        let Preflight::EndTurn(end) = result else {
            panic!("a cancelled barrier ends the turn: {result:?}")
        };
        assert_eq!(end.outcome, Outcome::Cancelled);
        let log = read_log(&rig.log_path).unwrap();
        let appended: Vec<&str> = log.entries()[n_before..]
            .iter()
            .map(|logged| logged.entry.body.type_name())
            .collect();
        assert!(appended.is_empty(), "{appended:?}");
        assert!(
            !events
                .lock()
                .unwrap()
                .iter()
                .any(|event| matches!(event, EngineEvent::Hygiene { .. }))
        );
    });
}

/// SPEC §9.2: spans are summarized in chunks that fit the summarizer's
/// window. When the window leaves no useful room for the span (window −
/// prompt − previous state − maxOutputTokens below 128 tokens, e.g. a
/// small local summarizer with `summarizer.maxOutputTokens` 2,000 and a
/// 3,000-token window), `chunk_span` alone would cut the span into
/// one-token chunks; the barrier refuses such a layout and falls back: a
/// `/compact` gets the deterministic capsule, degraded, and the summarizer
/// is never called.
#[test]
fn a_summarizer_window_without_room_falls_back_without_calling_it() {
    use soba_core::summarize::{chunk_span, chunk_tokens};
    use soba_core::tokens::ByteCounter;
    let budget = chunk_tokens(TokenCount::new(3_000), 2_000, None, None, &ByteCounter);
    assert_eq!(budget, TokenCount::ZERO);
    let items = vec![file_text(0, 4_000)];
    assert!(chunk_span(&items, budget, &ByteCounter).len() >= 900);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let summarizer = Arc::new(PausingSummarizer::new(
            Pause::Yields(Arc::new(vec![1])),
            3_000,
        ));
        let rig = Rig::open(
            dir.path(),
            RigOptions {
                summarizer: Some(summarizer.clone()),
                n_files: 12,
                ..RigOptions::default()
            },
        );
        fill(&mut *rig.core.lock().await, 9);
        let cancel = CancellationToken::new();
        let result = rig
            .agent
            .barrier
            .preflight(Some(Forced::User { instructions: None }), &cancel)
            .await
            .unwrap();
        let Preflight::Compacted(end) = result else {
            panic!("a /compact completes: {result:?}")
        };
        assert_eq!(end.outcome, Outcome::Completed);
        assert_eq!(end.quality, Some(soba_core::Quality::Degraded));
        assert_eq!(
            summarizer.chunks.load(std::sync::atomic::Ordering::SeqCst),
            0
        );
    });
}
