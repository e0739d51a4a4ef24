//! Process-level benchmarks: the real `soba` binary on big session logs,
//! each paired in the same run with reading the same file (`cat` to
//! `/dev/null`), since the machines are noisy.
//!
//! ```text
//! cargo bench -p soba-cli --bench process
//! ```
//!
//! Fixtures are generated once under `target/process-bench/` (about 1.4 GB;
//! `PROCESS_BENCH_DIR` puts them elsewhere):
//!
//! - (a) a 100 MB SOBA log with 50 capsules and a 40-message live tail;
//! - (b) a 100 MB pi session imported with `soba import` (no capsule: the
//!   whole history is the live stretch);
//! - (c) a 1 GB SOBA log with 50 capsules;
//! - a 1 MB log with the same live tail, the small-session reference;
//! - 100 MB pi and Claude Code sessions for `soba import`.
//!
//! Wall times come from criterion; after it, each command runs once more
//! under `wait4` and its peak RSS is printed. The time to the TUI's first
//! real frame is measured in tmux (polling the screen for the newest
//! message) when tmux is installed. The paths printed are the bench's own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_macros)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{MB, cat, peak_rss_kib, timed};
use criterion::{Criterion, criterion_group};
use soba_store::fixtures::{write_claude_code_session, write_linear_log, write_pi_session};

mod common;

fn soba() -> &'static str {
    env!("CARGO_BIN_EXE_soba")
}

/// The generated fixtures and the folders the commands run in.
struct Fixtures {
    root: PathBuf,
}

impl Fixtures {
    fn prepare() -> Fixtures {
        let root = std::env::var_os("PROCESS_BENCH_DIR").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/process-bench"),
            PathBuf::from,
        );
        let fixtures = Fixtures { root };
        for dir in ["home", "ws", "a", "b", "c", "small", "sources"] {
            fs::create_dir_all(fixtures.root.join(dir)).expect("create a fixture folder");
        }
        fs::write(fixtures.root.join("home/config.json"), "{}\n").expect("write the config");
        let made = |path: &Path| path.metadata().is_ok_and(|m| m.len() > 0);
        for (dir, bytes) in [("a", 100 * MB), ("c", 1024 * MB), ("small", MB)] {
            let path = fixtures.root.join(dir).join("bench.jsonl");
            if !made(&path) {
                eprintln!("writing {}", path.display());
                write_linear_log(&path, bytes as usize).expect("write a linear log");
            }
        }
        let pi = fixtures.pi();
        if !made(&pi) {
            eprintln!("writing {}", pi.display());
            write_pi_session(&pi, 100 * MB).expect("write a pi session");
        }
        let claude = fixtures.claude_code();
        if !made(&claude) {
            eprintln!("writing {}", claude.display());
            write_claude_code_session(&claude, 100 * MB).expect("write a Claude Code session");
        }
        if fixtures.imported_log().is_none() {
            eprintln!(
                "importing {} into {}",
                pi.display(),
                fixtures.root.join("b").display()
            );
            let status = fixtures
                .command()
                .arg("import")
                .arg(&pi)
                .arg("--out")
                .arg(fixtures.root.join("b"))
                .stdout(Stdio::null())
                .status()
                .expect("run soba import");
            assert!(status.success(), "soba import of the pi fixture failed");
        }
        fixtures
    }

    fn pi(&self) -> PathBuf {
        self.root.join("sources/pi-100mb.jsonl")
    }

    fn claude_code(&self) -> PathBuf {
        self.root.join("sources/claude-code-100mb.jsonl")
    }

    /// The one log in `b/`, once imported.
    fn imported_log(&self) -> Option<PathBuf> {
        fs::read_dir(self.root.join("b"))
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
    }

    /// The session a scenario resumes: its folder and the log in it.
    fn session(&self, scenario: &str) -> (PathBuf, PathBuf) {
        let dir = self.root.join(scenario);
        let log = if scenario == "b" {
            self.imported_log().expect("the imported fixture")
        } else {
            dir.join("bench.jsonl")
        };
        (dir, log)
    }

    /// `soba` with this bench's home and workspace; no network, no keys.
    fn command(&self) -> Command {
        let mut command = Command::new(soba());
        command
            .current_dir(self.root.join("ws"))
            .env("SOBA_HOME", self.root.join("home"))
            .env("OPENAI_API_KEY", "bench-key-never-sent")
            .env("ANTHROPIC_API_KEY", "bench-key-never-sent")
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// `soba --session-dir DIR budget --session ID` on a scenario.
    fn budget(&self, scenario: &str) -> Command {
        let (dir, log) = self.session(scenario);
        let id = log
            .file_stem()
            .and_then(|stem| stem.to_str())
            .expect("a session file name")
            .to_owned();
        let mut command = self.command();
        command
            .arg("--session-dir")
            .arg(dir)
            .args(["budget", "--session", &id])
            .stdout(Stdio::null());
        command
    }

    /// `soba import SOURCE --out OUT`.
    fn import(&self, source: &Path, out: &Path) -> Command {
        let mut command = self.command();
        command
            .arg("import")
            .arg(source)
            .arg("--out")
            .arg(out)
            .stdout(Stdio::null());
        command
    }
}

/// The time from starting `soba -r ID` in a detached tmux window to the
/// first screen showing the conversation (`marker`), then quits.
fn tui_first_frame(fixtures: &Fixtures, scenario: &str, marker: &str) -> Duration {
    let (dir, log) = fixtures.session(scenario);
    let id = log
        .file_stem()
        .and_then(|stem| stem.to_str())
        .expect("a session file name");
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("soba-bench-{}-{run}", std::process::id());
    // `exec`: the pane's process is soba itself, so its pid is the one to
    // wait for after the window is killed (it holds the session's lock).
    let shell = format!(
        "cd {ws} && SOBA_HOME={home} OPENAI_API_KEY=bench-key-never-sent exec {soba} --session-dir {dir} -r {id}",
        ws = fixtures.root.join("ws").display(),
        home = fixtures.root.join("home").display(),
        soba = soba(),
        dir = dir.display(),
    );
    let started = Instant::now();
    let output = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-P",
            "-F",
            "#{pane_pid}",
            "-x",
            "160",
            "-y",
            "48",
        ])
        .args(["-s", &name, &shell])
        .output()
        .expect("start tmux");
    assert!(output.status.success(), "tmux new-session failed");
    let pid = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let elapsed = loop {
        let screen = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &name])
            .output()
            .expect("capture the tmux pane");
        assert!(
            screen.status.success(),
            "the TUI exited before showing {marker:?} (soba -r {id} in {})",
            dir.display()
        );
        if String::from_utf8_lossy(&screen.stdout).contains(marker) {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the TUI showed no {marker:?} within 120 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &name])
        .status();
    // The next run opens the same session: wait until this one let go.
    let proc_dir = Path::new("/proc").join(&pid);
    let waited = Instant::now();
    while proc_dir.exists() && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    elapsed
}

fn has_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn benches(c: &mut Criterion) {
    let fixtures = Fixtures::prepare();
    let mut group = c.benchmark_group("process");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    for scenario in ["small", "a", "b", "c"] {
        let (_, log) = fixtures.session(scenario);
        group.bench_function(format!("cat {scenario}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| timed(cat(&log))).sum())
        });
        group.bench_function(format!("budget --session {scenario}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| timed(fixtures.budget(scenario))).sum())
        });
    }
    for (name, source) in [
        ("pi", fixtures.pi()),
        ("claude-code", fixtures.claude_code()),
    ] {
        group.bench_function(format!("cat {name} source"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| timed(cat(&source))).sum())
        });
        group.bench_function(format!("import {name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let out = tempfile::tempdir_in(&fixtures.root).expect("an output folder");
                        timed(fixtures.import(&source, out.path()))
                    })
                    .sum()
            })
        });
    }
    if has_tmux() {
        for scenario in ["small", "a", "c"] {
            group.bench_function(format!("tui first frame {scenario}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| tui_first_frame(&fixtures, scenario, "lorem ipsum"))
                        .sum()
                })
            });
        }
    } else {
        eprintln!("tui first frame: skipped (tmux is not installed)");
    }
    group.finish();

    eprintln!("\npeak RSS (one run each, wait4):");
    for scenario in ["small", "a", "b", "c"] {
        let (_, log) = fixtures.session(scenario);
        let size = log.metadata().map_or(0, |m| m.len());
        eprintln!(
            "  budget --session {scenario:<5}  {:>8} KiB   (log {} MiB)",
            peak_rss_kib(fixtures.budget(scenario)),
            size / MB
        );
    }
    for (name, source) in [
        ("pi", fixtures.pi()),
        ("claude-code", fixtures.claude_code()),
    ] {
        let out = tempfile::tempdir_in(&fixtures.root).expect("an output folder");
        eprintln!(
            "  import {name:<12}  {:>8} KiB   (source {} MiB)",
            peak_rss_kib(fixtures.import(&source, out.path())),
            source.metadata().map_or(0, |m| m.len()) / MB
        );
    }
}

criterion_group!(process, benches);

fn main() {
    process();
    Criterion::default().configure_from_args().final_summary();
}
