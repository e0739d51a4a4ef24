//! The soak run (SPEC §16, §17): a long scripted session through the real
//! agent loop (two reads and an answer per turn, a checkpoint every 50
//! turns, an automatic compaction about every ten turns) in a child process,
//! so its peak RSS (`VmHWM`) is its own. The child copies the log at a
//! quarter of the run and at the end; the parent then times resuming both
//! copies, with the store's backward reader and with `SessionCore::open`.
//!
//! Figures are printed; timings are not asserted. `SOBA_SOAK_TURNS` sets the
//! length (200 by default; 2,000 for the full local run).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use soba_engine::event::{EngineEvent, Outcome, TurnEnd};
use soba_engine::session::SessionCore;
use soba_store::log::{Durability, SequentialMinter, WriterOptions};
use tokio_util::sync::CancellationToken;

use crate::harness::small_config;
use crate::rig::{Rig, RigOptions, Step, env_count, log_path_in, peak_rss_kib, rss_kib};

const TEST_NAME: &str = "soak::a_long_session_keeps_memory_bounded_and_resumes_from_its_tail";

/// The child: runs `turns` turns, printing `MEM <turn> <rss> <hwm> <log
/// bytes>` every 100 turns and `SNAP <turn> <dir>` when it copies the log.
fn run_child(root: &Path, turns: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let compactions = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = compactions.clone();
        let rig = Rig::open(
            root,
            RigOptions {
                events: Arc::new(move |event| {
                    if let EngineEvent::CompactionEnd(end) = event
                        && end.outcome == Outcome::Completed
                    {
                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }),
                file_bytes: 1_600,
                durability: Durability::Flush,
                ..RigOptions::default()
            },
        );
        let cancel = CancellationToken::new();
        let snapshot_at = [turns / 4, turns];
        for turn in 1..=turns {
            let mut steps = vec![
                Step::read(&format!("data/file{:02}.txt", turn % 40)),
                Step::read(&format!("data/file{:02}.txt", (turn * 7) % 40)),
            ];
            if turn % 50 == 0 {
                steps.push(Step::call(
                    "checkpoint",
                    json!({"kind": "milestone", "note": format!("turn {turn}")}),
                ));
            }
            steps.push(Step::text(&format!("turn {turn} done")));
            rig.client.push(steps);
            let end = rig
                .agent
                .run_turn(&format!("turn {turn}: check two files"), &cancel)
                .await
                .unwrap();
            assert_eq!(end, TurnEnd::Completed, "turn {turn}");
            if turn % 100 == 0 || snapshot_at.contains(&turn) {
                let bytes = std::fs::metadata(&rig.log_path).unwrap().len();
                println!(
                    "MEM {turn} {} {} {bytes} {}",
                    rss_kib(),
                    peak_rss_kib(),
                    compactions.load(std::sync::atomic::Ordering::SeqCst)
                );
            }
            if snapshot_at.contains(&turn) {
                let copy = root.join(format!("copy-{turn}"));
                std::fs::create_dir_all(copy.join("sessions")).unwrap();
                std::fs::copy(&rig.log_path, log_path_in(&copy)).unwrap();
                println!("SNAP {turn} {}", copy.display());
            }
        }
    });
}

/// Times `soba_store::resume` and `SessionCore::open` on a copied log
/// (median of five), and checks that both find the same leaf.
fn time_resume(copy: &Path) -> (Duration, Duration, u64) {
    let path = log_path_in(copy);
    let tools = soba_engine::tool::ToolRegistry::builtin();
    let config = crate::rig::rig_config(small_config(), &tools);
    let mut store = Vec::new();
    let mut core = Vec::new();
    let mut bytes_read = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let resumed = soba_store::resume(&path).unwrap();
        store.push(started.elapsed());
        bytes_read = resumed.bytes_read;
        assert!(!resumed.full_scan);
        let started = Instant::now();
        let options = WriterOptions {
            durability: Durability::Flush,
            minter: Box::new(SequentialMinter::default()),
        };
        let (opened, diagnostics) = SessionCore::open(&path, config.clone(), options).unwrap();
        core.push(started.elapsed());
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        assert_eq!(opened.leaf(), resumed.leaf.as_ref());
        let request = soba_engine::agent::build_request(&opened, "model", &tools);
        assert!(crate::rig::unpaired_tool_block(&request).is_none());
    }
    store.sort();
    core.sort();
    (store[2], core[2], bytes_read)
}

/// A long session: memory stays flat, the next request stays paired, and
/// resuming reads only the live tail.
#[test]
fn a_long_session_keeps_memory_bounded_and_resumes_from_its_tail() {
    if let Ok(root) = std::env::var("SOBA_SOAK_CHILD") {
        run_child(Path::new(&root), env_count("SOBA_SOAK_TURNS", 200));
        return;
    }
    let turns = env_count("SOBA_SOAK_TURNS", 200);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // `/proc/self/exe` still runs this binary when a parallel build has
    // replaced the file meanwhile (the target directory is shared).
    let child = Command::new("/proc/self/exe")
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env("SOBA_SOAK_CHILD", dir.path())
        .env("SOBA_SOAK_TURNS", turns.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the soak child failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let elapsed = started.elapsed();
    // (turn, rss, hwm, log bytes, compactions)
    let mut memory: Vec<(u64, u64, u64, u64, u64)> = Vec::new();
    let mut snapshots: Vec<(u64, PathBuf)> = Vec::new();
    for line in stdout.lines() {
        // The harness prints `test … ... ` before the child's first line.
        let line = match line.find("MEM ").or_else(|| line.find("SNAP ")) {
            Some(at) => &line[at..],
            None => continue,
        };
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["MEM", turn, rss, hwm, bytes, compactions] => memory.push((
                turn.parse().unwrap(),
                rss.parse().unwrap(),
                hwm.parse().unwrap(),
                bytes.parse().unwrap(),
                compactions.parse().unwrap(),
            )),
            ["SNAP", turn, path] => snapshots.push((turn.parse().unwrap(), PathBuf::from(path))),
            _ => {}
        }
    }
    assert_eq!(snapshots.len(), 2, "{stdout}");
    let quarter = memory.iter().find(|m| m.0 == turns / 4).copied().unwrap();
    let last = *memory.last().unwrap();
    assert_eq!(last.0, turns);
    // Roughly one automatic compaction per ten turns.
    assert!(
        last.4 >= turns / 20,
        "only {} compactions in {turns} turns",
        last.4
    );
    let (store_quarter, core_quarter, read_quarter) = time_resume(&snapshots[0].1);
    let (store_last, core_last, read_last) = time_resume(&snapshots[1].1);
    let grown_kib = last.2.saturating_sub(quarter.2);
    let log_grown_kib = (last.3 - quarter.3) / 1024;
    println!(
        "soak: {turns} turns in {:.1} s, {} compactions; peak RSS {} KiB at turn {} and {} KiB at \
         turn {turns} (RSS {} → {} KiB; log {} → {} KiB); resume (store, backward) {:?} reading \
         {} KiB at turn {} vs {:?} reading {} KiB at turn {turns}; SessionCore::open {:?} vs {:?}",
        elapsed.as_secs_f64(),
        last.4,
        quarter.2,
        quarter.0,
        last.2,
        quarter.1,
        last.1,
        quarter.3 / 1024,
        last.3 / 1024,
        store_quarter,
        read_quarter / 1024,
        quarter.0,
        store_last,
        read_last / 1024,
        core_quarter,
        core_last
    );
    // The backward reader reads the live tail only, however long the
    // history: the same order of bytes at a quarter and at the end.
    assert!(
        read_last <= 4 * read_quarter.max(64 * 1024),
        "resume read {read_last} bytes at the end, {read_quarter} at a quarter"
    );
    // Memory is flat: the core keeps only the live stretch, so from a
    // quarter of the run to its end the peak RSS moves by allocator noise
    // while the log grows by megabytes (2,000 turns: +12 KiB against
    // +12 MiB of log).
    assert!(
        grown_kib <= 4 * 1024,
        "peak RSS grew {grown_kib} KiB while the log grew {log_grown_kib} KiB"
    );
}
