//! What the process benchmarks share: the `cat` baseline, wall time and
//! peak RSS of one run of a command.
// Each benchmark uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A mebibyte.
pub const MB: u64 = 1 << 20;

/// `cat FILE > /dev/null`: the floor any reader of the file pays.
pub fn cat(path: &Path) -> Command {
    let mut command = Command::new("cat");
    command.arg(path).stdout(Stdio::null());
    command
}

/// Runs `command` to completion and returns its wall time.
pub fn timed(mut command: Command) -> Duration {
    let started = Instant::now();
    let status = command.status().expect("spawn a benchmarked command");
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?} failed: {status}");
    elapsed
}

/// Runs `command` once and returns its peak resident set in KiB, read from
/// `wait4`'s resource usage of exactly that child.
#[allow(unsafe_code)]
pub fn peak_rss_kib(mut command: Command) -> i64 {
    let child = command.spawn().expect("spawn a measured command");
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let mut status = 0;
    // SAFETY: `rusage` is plain data wait4 fills in; `pid` is our own child,
    // not yet reaped (the `Child` is forgotten so std never waits on it).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    std::mem::forget(child);
    assert_eq!(reaped, pid, "wait4 on {command:?}");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{command:?} failed"
    );
    usage.ru_maxrss
}
