//! `soba replay` of the largest shared trace (the Codex messages+meta
//! export, ~3.4 MB) under all seven policies: SPEC §16 targets ≤ 3 s.
//! The trace is read from `../shared/traces/raw` beside the repository;
//! without it the benchmark prints why and measures nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_macros)]

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use soba_replay::{self as replay, ReplayOptions};

fn replay_largest_trace(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/raw/codex-converted/trajectory-1.json");
    if !path.is_file() {
        println!("skipped: {} is absent", path.display());
        return;
    }
    let options = ReplayOptions::default();
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.bench_function("codex trajectory-1, all seven policies", |b| {
        b.iter(|| {
            let report = replay::replay_path(&path, &options).expect("the trace replays");
            assert_eq!(report.totals.len(), 7);
            report
        })
    });
    // The issue 14 setting: every peer also at 80,000 (twelve policies),
    // and SOBA without read_cost as the baseline in the same run.
    let peers = ReplayOptions {
        peer_trigger: Some(80_000),
        ..ReplayOptions::default()
    };
    group.bench_function("codex trajectory-1, twelve policies", |b| {
        b.iter(|| replay::replay_path(&path, &peers).expect("the trace replays"))
    });
    let mut baseline = peers.clone();
    baseline.compaction.compact_on_read_cost = false;
    group.bench_function("codex trajectory-1, twelve policies, no read_cost", |b| {
        b.iter(|| replay::replay_path(&path, &baseline).expect("the trace replays"))
    });
    group.finish();
}

criterion_group!(benches, replay_largest_trace);
criterion_main!(benches);
