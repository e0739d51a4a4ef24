//! Resume as the engine does it (SPEC §16: "open + rebuild model input"):
//! `SessionCore::open` of a 100 MB linear log with 50 capsules next to a
//! 1 MB one with the same live tail (target ≤ 50 ms and ≤ 2×), and, as the
//! baseline of the same run, reading the whole 100 MB log with the full
//! reader (what the engine did before it kept only the live stretch). Run
//! with `cargo bench -p soba-engine --bench open`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::{Encoding, TokenCount};
use soba_engine::session::{ModelSpec, SessionConfig, SessionCore};
use soba_store::fixtures::write_linear_log;
use soba_store::log::{Durability, WriterOptions};

fn config() -> SessionConfig {
    SessionConfig {
        model: ModelSpec {
            id: "openai/gpt-5".into(),
            context_window: TokenCount::new(400_000),
            max_output_tokens: TokenCount::new(128_000),
            encoding: Encoding::O200kBase,
            seed: Factor::new(1.0),
        },
        compaction: CompactionConfig::default(),
        system_prompt: "You are a coding agent.".into(),
        tool_schemas: Vec::new(),
        counter: None,
    }
}

fn options() -> WriterOptions {
    WriterOptions {
        durability: Durability::Flush,
        ..WriterOptions::default()
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut group = c.benchmark_group("open");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    for (name, target) in [
        ("session_core_1mb_50_capsules", 1 << 20),
        ("session_core_100mb_50_capsules", 100 << 20),
    ] {
        let path = dir.path().join(format!("{name}.jsonl"));
        write_linear_log(&path, target).expect("writes the log");
        let (core, diagnostics) = SessionCore::open(&path, config(), options()).expect("opens");
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        eprintln!(
            "{name}: {} bytes, {} entries in memory, {} input tokens",
            std::fs::metadata(&path).expect("exists").len(),
            core.path().len(),
            core.live().total_tokens()
        );
        drop(core);
        group.bench_function(name, |b| {
            b.iter(|| {
                // Dropping the core releases the lock for the next round.
                let (core, _) =
                    SessionCore::open(black_box(&path), config(), options()).expect("opens");
                black_box(core.live().total_tokens())
            })
        });
        if target == 100 << 20 {
            group.bench_function("baseline_full_read_100mb", |b| {
                b.iter(|| soba_store::reader::read_log(black_box(&path)).expect("reads"))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
