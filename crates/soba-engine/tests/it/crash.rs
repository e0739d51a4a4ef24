//! The crash campaign (SPEC §17): a child process runs the real agent loop
//! (reads, checkpoints, rewinds, `/compact`, automatic compactions with a
//! summarizer that takes a few milliseconds) and is SIGKILLed at random
//! points — anywhere, during a capsule's generation, or right after it was
//! generated and before its append. After every kill:
//!
//! - the bytes before the round are unchanged and the session opens: the
//!   full reader reports nothing but at most one torn last line (and the
//!   earlier rounds' torn lines, now ended by later appends);
//! - every entry the child acknowledged (printed after its append
//!   returned) is in the log;
//! - no partial capsule is visible: every capsule's parent, kept entry and
//!   previous capsule are on its own path;
//! - `SessionCore::open` resumes it, and the next request has no unpaired
//!   tool block.
//!
//! A session is continued by the next child for a few rounds (resume after a
//! crash), then a fresh one starts. `SOBA_CRASH_ROUNDS` sets the number of
//! kills (20 by default; the full local run uses 200+).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::json;
use soba_core::{EntryBody, EntryId};
use soba_engine::EngineError;
use soba_engine::barrier::Forced;
use soba_engine::event::EngineEvent;
use soba_engine::session::SessionCore;
use soba_store::StoreError;
use soba_store::log::{Durability, SequentialMinter, WriterOptions};
use soba_store::reader::{DiagnosticKind, SessionLog};
use tokio_util::sync::CancellationToken;

use crate::harness::small_config;
use crate::rig::{
    Pause, PausingSummarizer, Rig, RigOptions, Rng, Step, env_count, log_path_in,
    unpaired_tool_block,
};

const TEST_NAME: &str = "crash::a_killed_agent_loses_nothing_acknowledged";

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The child: runs turns until killed (or for 30 s at most), printing
/// `ACK <id>` for every entry once its append returned, `START`/`GEN`/`END`
/// around compactions.
fn run_child(root: &Path, seed: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let mut rng = Rng::new(seed);
        let events = Arc::new(move |event: EngineEvent| match &event {
            EngineEvent::CompactionStart { operation_id, .. } => {
                say(&format!("START {operation_id}"));
            }
            EngineEvent::AssistantMessage { tool_calls, .. }
                if tool_calls.iter().any(|name| name == "bash") =>
            {
                say("BASH");
            }
            EngineEvent::CompactionEnd(end) => say(&format!(
                "END {} {}",
                end.operation_id,
                end.outcome.as_str()
            )),
            _ => {}
        });
        let pause_ms = 1 + rng.below(6);
        let summarizer = Arc::new(PausingSummarizer::new(
            Pause::Sleep(
                Duration::from_millis(pause_ms),
                Arc::new(|request: &soba_core::summarize::SummaryRequest| {
                    if request.chunk_index + 1 == request.chunk_count {
                        say("GEN");
                    }
                }),
            ),
            if rng.below(2) == 0 { 200_000 } else { 8_000 },
        ));
        let mut compaction = small_config();
        compaction.min_hygiene_tokens =
            soba_core::TokenCount::new(if rng.below(2) == 0 { 1_500 } else { 1_000_000 });
        compaction.timeout_ms = 5_000;
        let rig = Rig::open(
            root,
            RigOptions {
                compaction,
                summarizer: Some(summarizer),
                durability: Durability::Fsync,
                sequential_ids: false,
                events,
                ..RigOptions::default()
            },
        );
        // Acknowledge every entry once its append returned.
        rig.core
            .lock()
            .await
            .set_append_observer(Some(Arc::new(|entry: &soba_core::Entry| {
                say(&format!("ACK {}", entry.id))
            })));
        say("READY");
        let started = Instant::now();
        let cancel = CancellationToken::new();
        let mut turn = 0u64;
        while started.elapsed() < Duration::from_secs(30) {
            turn += 1;
            let mut steps = Vec::new();
            for _ in 0..2 + rng.below(9) {
                match rng.below(12) {
                    0 => steps.push(Step::call(
                        "checkpoint",
                        json!({"kind": "milestone", "note": format!("turn {turn}")}),
                    )),
                    1 => steps.push(Step::call("bash", json!({"command": "echo ok"}))),
                    // About 1 MiB kept in the log: appends a kill can tear.
                    2 => steps.push(Step::call(
                        "bash",
                        json!({"command": "yes 0123456789abcdef | head -c 3000000"}),
                    )),
                    _ => steps.push(Step::read(&format!("data/file{:02}.txt", rng.below(40)))),
                }
            }
            steps.push(Step::text(&format!("turn {turn} done")));
            rig.client.push(steps);
            rig.agent
                .run_turn(&format!("turn {turn}: read some files"), &cancel)
                .await
                .unwrap();
            match rng.below(8) {
                0 => {
                    // Rewind to an earlier user message.
                    let mut core = rig.core.lock().await;
                    let users: Vec<EntryId> = core
                        .path()
                        .iter()
                        .filter(|entry| match &entry.body {
                            EntryBody::Message(m) => m.message.role == soba_core::Role::User,
                            _ => false,
                        })
                        .map(|entry| entry.id.clone())
                        .collect();
                    if users.len() > 1 {
                        let target = users[rng.below(users.len() as u64 - 1) as usize].clone();
                        core.rewind(target).unwrap();
                    }
                }
                1 => {
                    rig.agent
                        .barrier
                        .preflight(Some(Forced::User { instructions: None }), &cancel)
                        .await
                        .unwrap();
                }
                _ => {}
            }
            say(&format!("TURN {turn}"));
        }
    });
}

/// Starts this test binary again as the child. `/proc/self/exe` still
/// runs it when a parallel build has meanwhile replaced the file (the target
/// directory is shared).
fn spawn_self(configure: impl Fn(&mut Command)) -> std::process::Child {
    let mut command = Command::new("/proc/self/exe");
    command
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    configure(&mut command);
    command.spawn().unwrap()
}

/// Where the child was when it was killed, from the lines it printed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Phase {
    /// Outside a compaction: appends, tools, planning.
    #[default]
    Outside,
    /// A compaction started and its summary was not ready.
    Generating,
    /// The summary was ready and the compaction had not ended (the
    /// capsule's measure, guards and append).
    BeforeAppend,
}

/// How the parent picks the moment to kill.
#[derive(Debug, Clone, Copy)]
enum Strategy {
    /// After a random delay.
    Anywhere(Duration),
    /// A random delay after the n-th compaction start.
    DuringGeneration(usize, Duration),
    /// As soon as the n-th summary is ready.
    AfterGeneration(usize),
    /// A random delay after the model called `bash` (whose output may be
    /// about 1 MiB: a kill can tear its append).
    DuringBash(Duration),
}

/// What the parent learned from one child.
#[derive(Debug, Default)]
struct Round {
    acked: Vec<EntryId>,
    phase: Phase,
    n_turns: u64,
    n_capsules_ended: u64,
}

fn kill_one(root: &Path, seed: u64, strategy: Strategy) -> Round {
    let mut child = spawn_self(|command| {
        command
            .env("SOBA_CRASH_CHILD", root)
            .env("SOBA_CRASH_SEED", seed.to_string());
    });
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout);
        let mut line = String::new();
        // Only whole lines count: a line cut by the kill was not printed.
        while lines.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if line.ends_with('\n') && sender.send(line.trim_end().to_owned()).is_err() {
                break;
            }
            line.clear();
        }
    });
    let mut round = Round::default();
    let mut n_started = 0;
    let mut n_generated = 0;
    let mut deadline: Option<Instant> = None;
    let mut ready = false;
    let give_up = Instant::now() + Duration::from_secs(20);
    let handle = |line: &str, round: &mut Round, ready: &mut bool| -> (bool, bool) {
        // Returns (a compaction started, a summary is ready).
        let mut started = false;
        let mut generated = false;
        if let Some(id) = line.strip_prefix("ACK ") {
            round.acked.push(EntryId::parse(id).unwrap());
        } else if line.starts_with("START ") {
            round.phase = Phase::Generating;
            started = true;
        } else if line == "GEN" {
            round.phase = Phase::BeforeAppend;
            generated = true;
        } else if line.starts_with("END ") {
            round.phase = Phase::Outside;
            round.n_capsules_ended += 1;
        } else if line.starts_with("TURN ") {
            round.n_turns += 1;
        } else if line.contains("READY") {
            *ready = true;
        }
        (started, generated)
    };
    loop {
        if Instant::now() > give_up {
            break;
        }
        let timeout = deadline
            .map(|at| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(50));
        match receiver.recv_timeout(timeout) {
            Ok(line) => {
                let (started, generated) = handle(&line, &mut round, &mut ready);
                n_started += usize::from(started);
                n_generated += usize::from(generated);
                if ready && deadline.is_none() {
                    match strategy {
                        Strategy::Anywhere(delay) => deadline = Some(Instant::now() + delay),
                        Strategy::DuringGeneration(n, delay) if n_started >= n => {
                            deadline = Some(Instant::now() + delay)
                        }
                        Strategy::AfterGeneration(n) if n_generated >= n => break,
                        Strategy::DuringBash(delay) if line == "BASH" => {
                            deadline = Some(Instant::now() + delay)
                        }
                        _ => {}
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if deadline.is_some_and(|at| Instant::now() >= at) {
            break;
        }
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    // Lines printed before the kill are still in the pipe.
    while let Ok(line) = receiver.try_recv() {
        handle(&line, &mut round, &mut ready);
    }
    if status.code().is_some() {
        let mut stderr = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
        panic!("the child ended by itself ({status}) instead of being killed: {stderr}");
    }
    round
}

/// Checks the log after a kill; returns the offset of a torn last line.
fn check_after_kill(
    root: &Path,
    round_idx: u64,
    before: &[u8],
    acknowledged: &[EntryId],
    ended_torn: &HashSet<u64>,
    stats: &mut Stats,
) -> Option<u64> {
    let path = log_path_in(root);
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.starts_with(before),
        "round {round_idx}: the bytes before the round changed"
    );
    let log = SessionLog::from_bytes(&bytes);
    assert!(log.header().is_some(), "round {round_idx}: no header");
    let mut torn_at = None;
    for diagnostic in log.diagnostics() {
        match diagnostic.kind {
            DiagnosticKind::TornLine { .. } => {
                let last_start = bytes[..bytes.len() - 1]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |nl| nl as u64 + 1);
                assert_eq!(diagnostic.location.offset, last_start, "round {round_idx}");
                torn_at = Some(diagnostic.location.offset);
                stats.torn += 1;
                if bytes[last_start as usize..].starts_with(br#"{"type":"capsule""#) {
                    stats.torn_capsules += 1;
                }
            }
            DiagnosticKind::InvalidJson { .. }
                if ended_torn.contains(&diagnostic.location.offset) => {}
            _ => panic!("round {round_idx}: unexpected damage: {diagnostic}"),
        }
    }
    for id in acknowledged {
        assert!(
            log.entry(id).is_some(),
            "round {round_idx}: acknowledged {id} is lost"
        );
    }
    // No half capsule: every capsule sits on a consistent path.
    for logged in log.entries() {
        let EntryBody::Capsule(capsule) = &logged.entry.body else {
            continue;
        };
        stats.capsules_seen.insert(logged.entry.id.clone());
        let path = log.path_to(&logged.entry.id);
        assert_eq!(
            path.last().map(|l| &l.entry.id),
            Some(&logged.entry.id),
            "round {round_idx}"
        );
        let parent = logged
            .entry
            .parent_id
            .as_ref()
            .expect("a capsule has a parent");
        assert!(
            log.entry(parent).is_some(),
            "round {round_idx}: capsule parent missing"
        );
        if let Some(first_kept) = &capsule.first_kept_entry_id {
            assert!(
                path.iter().any(|l| &l.entry.id == first_kept),
                "round {round_idx}: firstKeptEntryId {first_kept} is not on the capsule's path"
            );
        }
        let previous = path[..path.len() - 1]
            .iter()
            .rev()
            .find(|l| matches!(l.entry.body, EntryBody::Capsule(_)))
            .map(|l| l.entry.id.clone());
        assert_eq!(
            capsule.previous_capsule_id, previous,
            "round {round_idx}: previousCapsuleId is not the previous capsule on the path"
        );
    }

    // Resume: SessionCore opens it (the lock died with the child) and the
    // next request pairs every tool block.
    let tools = soba_engine::tool::ToolRegistry::builtin();
    let config = crate::rig::rig_config(small_config(), &tools);
    // A tool process the child was starting when it died holds a copy of
    // the session's file descriptor until its `exec` closes it: the lock
    // can outlive the child by a moment.
    let waiting = Instant::now();
    let mut n_retries = 0;
    let (core, diagnostics) = loop {
        let options = WriterOptions {
            durability: Durability::Flush,
            minter: Box::new(SequentialMinter::default()),
        };
        match SessionCore::open(&path, config.clone(), options) {
            Ok(opened) => break opened,
            Err(EngineError::Store(StoreError::Locked { .. }))
                if waiting.elapsed() < Duration::from_secs(5) =>
            {
                n_retries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => panic!("round {round_idx}: the session does not resume: {err:?}"),
        }
    };
    if n_retries > 0 {
        stats.lock_waits += 1;
    }
    // The backward resume reads only the live stretch (from the latest
    // capsule's retained tail on), so a line torn by an earlier kill that a
    // later capsule put behind it is the full reader's to report, not the
    // resume's: the resume reports no more than the full reader.
    assert!(
        diagnostics.len() <= log.diagnostics().len(),
        "round {round_idx}: resume reported {diagnostics:?}, the full reader {:?}",
        log.diagnostics()
    );
    let request = soba_engine::agent::build_request(&core, "model", &tools);
    if let Some(problem) = unpaired_tool_block(&request) {
        panic!("round {round_idx}: the resumed request has {problem}");
    }
    assert_eq!(
        core.leaf(),
        log.leaf(),
        "round {round_idx}: resume found another leaf"
    );
    drop(core);
    torn_at
}

#[derive(Debug, Default)]
struct Stats {
    torn: u64,
    torn_capsules: u64,
    capsules_seen: HashSet<EntryId>,
    phases: HashMap<Phase, u64>,
    turns: u64,
    compactions_ended: u64,
    lock_waits: u64,
}

/// SPEC §17: kill the process at any point of an append or a compaction:
/// the log opens, nothing acknowledged is lost, no half capsule is visible,
/// and resuming gives a valid next request.
#[test]
fn a_killed_agent_loses_nothing_acknowledged() {
    if let Ok(root) = std::env::var("SOBA_CRASH_CHILD") {
        let seed = env_count("SOBA_CRASH_SEED", 1);
        run_child(Path::new(&root), seed);
        return;
    }
    let rounds = env_count("SOBA_CRASH_ROUNDS", 20);
    let seed = env_count("SOBA_CRASH_SEED", 0x5eed);
    let mut rng = Rng::new(seed);
    let base = tempfile::tempdir().unwrap();
    let mut stats = Stats::default();
    let mut session_idx = 0;
    let mut root = base.path().join("s0");
    let mut acknowledged: Vec<EntryId> = Vec::new();
    let mut ended_torn: HashSet<u64> = HashSet::new();
    let mut pending_torn: Option<u64> = None;
    let started = Instant::now();
    for round_idx in 0..rounds {
        // Continue the session for a few rounds, then start a fresh one.
        if round_idx > 0 && rng.below(4) == 0 {
            session_idx += 1;
            root = base.path().join(format!("s{session_idx}"));
            acknowledged.clear();
            ended_torn.clear();
            pending_torn = None;
        }
        // A torn line left by the previous kill is ended by this child's
        // first append: from then on it reads as a corrupt middle line.
        ended_torn.extend(pending_torn.take());
        let before = std::fs::read(log_path_in(&root)).unwrap_or_default();
        let strategy = match rng.below(4) {
            3 => Strategy::DuringBash(Duration::from_micros(rng.below(25_000))),
            0 => Strategy::Anywhere(Duration::from_millis(5 + rng.below(150))),
            1 => Strategy::DuringGeneration(
                1 + rng.below(3) as usize,
                Duration::from_micros(rng.below(6_000)),
            ),
            _ => Strategy::AfterGeneration(1 + rng.below(3) as usize),
        };
        let round = kill_one(&root, rng.next(), strategy);
        *stats.phases.entry(round.phase).or_default() += 1;
        stats.turns += round.n_turns;
        stats.compactions_ended += round.n_capsules_ended;
        acknowledged.extend(round.acked);
        pending_torn = check_after_kill(
            &root,
            round_idx,
            &before,
            &acknowledged,
            &ended_torn,
            &mut stats,
        );
    }
    let outside = stats.phases.get(&Phase::Outside).copied().unwrap_or(0);
    let generating = stats.phases.get(&Phase::Generating).copied().unwrap_or(0);
    let before_append = stats.phases.get(&Phase::BeforeAppend).copied().unwrap_or(0);
    println!(
        "crash campaign: {rounds} kills survived in {:.1} s over {} sessions (seed {seed}): \
         {outside} outside a compaction, {generating} during generation, {before_append} between \
         generation and append; {} torn last lines ({} of them capsules); {} turns and {} \
         compactions completed by the children; {} capsules checked; {} resumes waited for \
         the lock copy of a tool process the child was starting",
        started.elapsed().as_secs_f64(),
        session_idx + 1,
        stats.torn,
        stats.torn_capsules,
        stats.turns,
        stats.compactions_ended,
        stats.capsules_seen.len(),
        stats.lock_waits
    );
    assert!(
        generating + before_append > 0 || rounds < 6,
        "no kill landed inside a compaction"
    );
}

/// Resume of a hand-edited log whose parents form a cycle (`a` ← `b` ← `a`):
/// the engine's path walk stops at the first repeated entry, as the store's
/// reader does (path `a`, `b`), so no message is sent twice.
#[test]
fn a_parent_cycle_stops_the_engines_path_at_the_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path_in(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let corpus =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad-input/log/parent-cycle.jsonl");
    std::fs::copy(corpus, &path).unwrap();
    let log = soba_store::reader::read_log(&path).unwrap();
    assert_eq!(log.path().len(), 2);
    let tools = soba_engine::tool::ToolRegistry::builtin();
    let config = crate::rig::rig_config(small_config(), &tools);
    let options = WriterOptions {
        durability: Durability::Flush,
        minter: Box::new(SequentialMinter::default()),
    };
    let (core, diagnostics) = SessionCore::open(&path, config, options).unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let ids: Vec<&str> = core.path().iter().map(|entry| entry.id.as_str()).collect();
    let reader_ids: Vec<&str> = log
        .path()
        .iter()
        .map(|logged| logged.entry.id.as_str())
        .collect();
    assert_eq!(ids, reader_ids);
    let request = soba_engine::agent::build_request(&core, "model", &tools);
    assert_eq!(request.messages.len(), 2);
}
