//! `soba replay` of a folder as a user's home holds one: 200 generated pi
//! sessions of 1.5 to 3.5 MB (about 520 MB in all), replayed by the real
//! binary on 1 thread and on 2 in the same run, then each run's peak RSS
//! next to that of the largest session replayed alone.
//!
//! ```text
//! cargo bench -p soba-cli --bench replay_folder
//! ```
//!
//! Fixtures are generated once under `target/replay-bench/`
//! (`REPLAY_BENCH_DIR` puts them elsewhere). Each session has 24 kB tool
//! results (about 200 requests per session); the policies are `none`,
//! `soba` and `claude-code`, so one sample takes seconds, not minutes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_macros)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{MB, peak_rss_kib, timed};
use criterion::{Criterion, criterion_group};
use soba_store::fixtures::{PiShape, write_pi_session_shaped};

mod common;

/// Sessions in the folder.
const SESSIONS: u64 = 200;
/// The policies replayed.
const POLICIES: &str = "none,soba,claude-code";

/// The size of session `n`: 1.5 to 3.5 MB, spread evenly.
fn session_bytes(n: u64) -> u64 {
    1_500_000 + (n * 2_000_000) / (SESSIONS - 1)
}

struct Fixtures {
    root: PathBuf,
}

impl Fixtures {
    fn prepare() -> Fixtures {
        let root = std::env::var_os("REPLAY_BENCH_DIR").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/replay-bench"),
            PathBuf::from,
        );
        let fixtures = Fixtures { root };
        for dir in ["home", "ws", "folder"] {
            fs::create_dir_all(fixtures.root.join(dir)).expect("create a fixture folder");
        }
        fs::write(fixtures.root.join("home/config.json"), "{}\n").expect("write the config");
        for n in 0..SESSIONS {
            let path = fixtures.session(n);
            if path.metadata().is_ok_and(|meta| meta.len() > 0) {
                continue;
            }
            let shape = PiShape {
                result_bytes: 24_000,
                seed: n + 1,
            };
            write_pi_session_shaped(&path, session_bytes(n), &shape).expect("write a session");
        }
        fixtures
    }

    fn session(&self, n: u64) -> PathBuf {
        self.root
            .join("folder")
            .join(format!("session-{n:03}.jsonl"))
    }

    fn folder_bytes(&self) -> u64 {
        (0..SESSIONS)
            .map(|n| self.session(n).metadata().map_or(0, |meta| meta.len()))
            .sum()
    }

    /// `soba replay PATH --policy … -j N --json` with this bench's home.
    fn replay(&self, path: &Path, threads: usize) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_soba"));
        command
            .current_dir(self.root.join("ws"))
            .env("SOBA_HOME", self.root.join("home"))
            .arg("replay")
            .arg(path)
            .args(["--policy", POLICIES, "--json", "-j", &threads.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }
}

fn benches(c: &mut Criterion) {
    let fixtures = Fixtures::prepare();
    let folder = fixtures.root.join("folder");
    let largest = fixtures.session(SESSIONS - 1);
    eprintln!(
        "{SESSIONS} sessions, {} MB in all, the largest {} MB",
        fixtures.folder_bytes() / 1_000_000,
        largest.metadata().map_or(0, |meta| meta.len()) as f64 / 1e6
    );
    let mut group = c.benchmark_group("replay_folder");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("largest session alone", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| timed(fixtures.replay(&largest, 1)))
                .sum()
        })
    });
    for threads in [1, 2] {
        group.bench_function(format!("folder -j {threads}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| timed(fixtures.replay(&folder, threads)))
                    .sum()
            })
        });
    }
    group.finish();

    eprintln!("peak RSS (one run each, wait4):");
    let alone = peak_rss_kib(fixtures.replay(&largest, 1));
    eprintln!("  largest session alone  {alone:>8} KiB");
    for threads in [1, 2] {
        let rss = peak_rss_kib(fixtures.replay(&folder, threads));
        eprintln!(
            "  folder -j {threads}            {rss:>8} KiB   ({:.2}x the largest alone; folder {} MiB)",
            rss as f64 / alone as f64,
            fixtures.folder_bytes() / MB
        );
    }
}

criterion_group!(replay_folder, benches);

fn main() {
    replay_folder();
    Criterion::default().configure_from_args().final_summary();
}
