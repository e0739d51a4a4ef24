//! The store side of the crash campaign (SPEC §3.2, §17): a child process
//! appends what a compacting session appends — messages, capsules of up to
//! 2 MB (so a kill can tear one), `leaf` entries and flight records — and is
//! SIGKILLed at a random moment. After every kill the session and its
//! flight file open, every acknowledged entry and record is there, no torn
//! capsule is ever read as an entry, and resume agrees with the full reader.
//! (`log::a_killed_writer_loses_nothing_acknowledged` covers plain message
//! appends; the engine's crash campaign covers the agent loop.)
//!
//! `SOBA_CRASH_ROUNDS` sets the number of kills (20 by default).

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use soba_core::tokens::{ByteCounter, DEFAULT_IMAGE_TOKENS};
use soba_core::{EntryBody, EntryId, Message, Quality, TokenCount, Trigger};
use soba_store::flight::{
    FlightAppender, FlightLevel, FlightLimits, FlightOutcome, FlightRecord, flight_path,
    read_flight_records,
};
use soba_store::{
    DiagnosticKind, Durability, SessionId, SessionLog, SessionWriter, SystemMinter, WriterOptions,
    resume,
};

use crate::strategy;
use crate::support::{create, entries_of};

const TEST_NAME: &str = "crash::killed_compactions_never_leave_half_a_capsule";

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

fn flight_record(operation_id: &str, checkpoint: Option<EntryId>) -> FlightRecord {
    FlightRecord {
        operation_id: operation_id.to_owned(),
        timestamp: "2026-11-30T00:00:00Z".to_owned(),
        level: FlightLevel::Compaction,
        trigger: Some(Trigger::AutoThreshold),
        limits: FlightLimits {
            hard_limit: TokenCount::new(159_808),
            soft_limit: TokenCount::new(127_846),
            auto_limit: TokenCount::new(80_000),
            hygiene_limit: TokenCount::new(50_000),
        },
        tokens_before: TokenCount::new(81_000),
        tokens_after: TokenCount::new(21_000),
        reclaimed: TokenCount::new(60_000),
        outcome: FlightOutcome::Completed,
        reason: None,
        duration_ms: 12,
        checkpoint_id: checkpoint,
        quality: Some(Quality::Full),
        summarizer: None,
        expected_cache_write: Some(TokenCount::new(21_000)),
    }
}

/// The child: appends until killed, printing `ACK <id>` after each durable
/// append and `FLIGHT <op>` after each flight record.
fn append_until_killed(path: &str, seed: u64) {
    let options = WriterOptions {
        durability: Durability::Fsync,
        minter: Box::new(SystemMinter),
    };
    let mut writer = SessionWriter::open(path, options).expect("the child opens the session");
    let session = writer.session_id().clone();
    let dir = std::path::Path::new(path).parent().expect("a folder");
    let mut flight = FlightAppender::open(flight_path(dir, &session), Durability::Fsync)
        .expect("the flight file opens");
    let mut rng = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
    let mut ids: Vec<EntryId> = writer.leaf().cloned().into_iter().collect();
    let mut op = 0u64;
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    // A quarter of the children start with a 16 MB capsule: copying it
    // into the file takes long enough for a kill to land inside the write.
    let mut giant = next(&mut rng).is_multiple_of(4);
    loop {
        if giant {
            giant = false;
            let mut capsule = strategy::sample_capsule(ids.last().cloned());
            capsule.markdown = "c".repeat(16 << 20);
            capsule.previous_capsule_id = None;
            say("GIANT".to_owned());
            let started = std::time::Instant::now();
            let entry = writer
                .append(EntryBody::Capsule(Box::new(capsule)))
                .expect("an append");
            say(format!("ACK {}", entry.id));
            say(format!("GIANT_US {}", started.elapsed().as_micros()));
            ids.push(entry.id);
            continue;
        }
        let entry = match next(&mut rng) % 6 {
            0 | 1 => {
                let size = (next(&mut rng) % 4_000) as usize;
                writer.append_message(
                    Message::user("m".repeat(size)),
                    &ByteCounter,
                    DEFAULT_IMAGE_TOKENS,
                )
            }
            2 | 3 => {
                // A capsule from 10 KB to 2 MB of markdown: a kill can tear it.
                let mut capsule = strategy::sample_capsule(ids.last().cloned());
                let size = if next(&mut rng).is_multiple_of(2) {
                    10_000
                } else {
                    (next(&mut rng) % (2 << 20)) as usize
                };
                capsule.markdown = "c".repeat(size);
                capsule.previous_capsule_id = None;
                writer.append(EntryBody::Capsule(Box::new(capsule)))
            }
            4 if ids.len() > 1 => {
                let target = ids[(next(&mut rng) % ids.len() as u64) as usize].clone();
                writer.rewind(target)
            }
            _ => writer.append(EntryBody::ModelChange {
                model: format!("m/{}", next(&mut rng) % 100),
            }),
        };
        let entry = entry.expect("an append");
        say(format!("ACK {}", entry.id));
        if let EntryBody::Capsule(_) = entry.body {
            op += 1;
            let operation_id = format!("op_{seed}_{op}");
            flight
                .append(&flight_record(&operation_id, Some(entry.id.clone())))
                .expect("a flight record");
            say(format!("FLIGHT {operation_id}"));
        }
        if !matches!(entry.body, EntryBody::Leaf { .. }) {
            ids.push(entry.id);
        }
    }
}

/// SPEC §17: kill the process at any point of a compaction's appends: the
/// log and the flight file open, nothing acknowledged is lost, and no half
/// capsule is visible.
#[test]
fn killed_compactions_never_leave_half_a_capsule() {
    if let Ok(path) = std::env::var("SOBA_STORE_CRASH_CHILD") {
        let seed = std::env::var("SOBA_STORE_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        append_until_killed(&path, seed);
        return;
    }
    let rounds: u64 = std::env::var("SOBA_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    drop(create(&path));
    let flight = flight_path(dir.path(), &SessionId::parse("s1").expect("an id"));
    let mut acknowledged: Vec<EntryId> = Vec::new();
    let mut flights: Vec<String> = Vec::new();
    let mut ended_torn: HashSet<u64> = HashSet::new();
    let mut pending_torn: Option<u64> = None;
    let mut before = std::fs::read(&path).expect("readable");
    let mut rng: u64 = 0xc0ff_ee00_1234_5679;
    let mut giant_us: u64 = 400_000;
    let (mut n_torn, mut n_torn_capsules, mut n_capsules, mut n_torn_flights) = (0, 0, 0, 0);
    for round in 0..rounds {
        ended_torn.extend(pending_torn.take());
        // `/proc/self/exe` still runs this binary when a parallel build has
        // replaced the file meanwhile (the target directory is shared).
        let mut child = Command::new("/proc/self/exe")
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env("SOBA_STORE_CRASH_CHILD", &path)
            .env("SOBA_STORE_CRASH_SEED", (round + 1).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the child starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (giant_sender, giant_seen) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout);
            let mut line = String::new();
            let mut seen = Vec::new();
            // Only whole lines count: a line cut by the kill was not printed.
            while lines.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line.ends_with('\n') {
                    if line.contains("GIANT") {
                        let _ = giant_sender.send(());
                    }
                    seen.push(line.trim_end().to_owned());
                }
                line.clear();
            }
            seen
        });
        // Kill a random moment into the giant append when there is one,
        // else a random moment into the run.
        // The window is how long the last giant append took (encoding,
        // write and fsync), learnt from the children that finished one.
        let delay = Duration::from_millis(next(&mut rng) % 60);
        match giant_seen.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => {
                std::thread::sleep(Duration::from_micros(next(&mut rng) % giant_us.max(1_000)))
            }
            Err(_) => std::thread::sleep(delay),
        }
        child.kill().expect("SIGKILL delivered");
        let status = child.wait().expect("the child is reaped");
        let seen = reader.join().expect("the reader thread");
        assert!(
            status.code().is_none(),
            "round {round}: the child ended by itself: {status}"
        );
        for line in seen {
            let line = match line
                .find("ACK ")
                .or_else(|| line.find("FLIGHT "))
                .or_else(|| line.find("GIANT_US "))
            {
                Some(at) => line[at..].to_owned(),
                None => continue,
            };
            if let Some(micros) = line.strip_prefix("GIANT_US ") {
                giant_us = micros.parse().expect("a duration");
                continue;
            }
            if let Some(id) = line.strip_prefix("ACK ") {
                acknowledged.push(EntryId::parse(id).expect("a printed id"));
            } else if let Some(op) = line.strip_prefix("FLIGHT ") {
                flights.push(op.to_owned());
            }
        }

        let after = std::fs::read(&path).expect("readable");
        assert!(
            after.starts_with(&before),
            "round {round}: the prefix changed"
        );
        let log = SessionLog::from_bytes(&after);
        assert!(log.header().is_some(), "round {round}");
        for diagnostic in log.diagnostics() {
            match diagnostic.kind {
                DiagnosticKind::TornLine { .. } => {
                    n_torn += 1;
                    let at = diagnostic.location.offset as usize;
                    if after[at..].starts_with(br#"{"type":"capsule""#) {
                        n_torn_capsules += 1;
                    }
                    pending_torn = Some(diagnostic.location.offset);
                }
                DiagnosticKind::InvalidJson { .. }
                    if ended_torn.contains(&diagnostic.location.offset) => {}
                _ => panic!("round {round}: unexpected damage: {diagnostic}"),
            }
        }
        for id in &acknowledged {
            assert!(
                log.entry(id).is_some(),
                "round {round}: acknowledged {id} lost"
            );
        }
        // Every capsule read is whole: its markdown is all there.
        n_capsules = 0;
        for logged in log.entries() {
            if let EntryBody::Capsule(capsule) = &logged.entry.body {
                n_capsules += 1;
                assert!(
                    capsule.markdown.bytes().all(|b| b == b'c'),
                    "round {round}: a capsule changed"
                );
            }
        }
        let resumed = resume(&path).expect("resumes");
        assert_eq!(resumed.leaf.as_ref(), log.leaf(), "round {round}");
        assert_eq!(
            entries_of(&resumed.stretch),
            entries_of(log.live_stretch()),
            "round {round}"
        );
        let (records, diagnostics) = read_flight_records(&flight).expect("the flight file reads");
        let ops: HashSet<&str> = records.iter().map(|r| r.operation_id.as_str()).collect();
        for op in &flights {
            assert!(ops.contains(op.as_str()), "round {round}: flight {op} lost");
        }
        for record in &records {
            assert!(
                log.entry(record.checkpoint_id.as_ref().expect("a capsule id"))
                    .is_some(),
                "round {round}: a flight record names a capsule that is not in the log"
            );
        }
        n_torn_flights = diagnostics.len();
        before = after;
    }
    println!(
        "store crash campaign: {rounds} kills, {} acknowledged entries, {} flight records, \
         {n_capsules} whole capsules; {n_torn} torn last lines ({n_torn_capsules} of them \
         capsules, never read as entries); {n_torn_flights} damaged flight lines at the end (torn appends, skipped); \
         a 16 MB capsule append took {giant_us} µs",
        acknowledged.len(),
        flights.len()
    );
}
