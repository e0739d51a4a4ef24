//! Barrier overhead per inference when nothing happens (issue "engine"):
//! a preflight on a 200,000-token session whose limits are far away, next
//! to the baseline of rebuilding and re-counting the model input from
//! scratch. Run with `cargo bench -p soba-engine --bench barrier`.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::tokens::BpeCounter;
use soba_core::{Encoding, Message, TokenCount};
use soba_engine::barrier::{BarrierContext, Preflight};
use soba_engine::session::{ModelSpec, SessionConfig, SessionCore};
use soba_store::log::{Durability, SessionHeader, SystemMinter, WriterOptions};
use tokio_util::sync::CancellationToken;

fn session(dir: &std::path::Path) -> SessionCore {
    let model = ModelSpec {
        id: "bench/model".into(),
        context_window: TokenCount::new(1_000_000),
        max_output_tokens: TokenCount::new(64_000),
        encoding: Encoding::O200kBase,
        seed: Factor::new(1.0),
    };
    // No working-set cap, no turn_complete intent and no read_cost: a 200,000-token
    // session is far below every limit, so the preflight has nothing to do.
    let compaction = CompactionConfig {
        max_working_set_tokens: None,
        compact_on_turn_complete: false,
        compact_on_read_cost: false,
        ..CompactionConfig::default()
    };
    let config = SessionConfig {
        model,
        compaction,
        system_prompt: "You are a coding agent.".into(),
        tool_schemas: Vec::new(),
        counter: None,
    };
    let mut minter = SystemMinter;
    let header = SessionHeader::new(&mut minter, "/bench");
    let options = WriterOptions {
        durability: Durability::Flush,
        ..WriterOptions::default()
    };
    let mut core = SessionCore::create(&dir.join("bench.jsonl"), header, config, options)
        .expect("create session");
    let paragraph =
        "fn main() { println!(\"hello, world\"); } // a line of code with some words in it\n"
            .repeat(20);
    let mut idx = 0;
    while core.live().total_tokens().get() < 200_000 {
        let message = if idx % 2 == 0 {
            Message::user(format!("step {idx}: {paragraph}"))
        } else {
            Message::assistant(format!("answer {idx}: {paragraph}"))
        };
        core.append_message(message).expect("append");
        idx += 1;
    }
    core.append_message(Message::user("and now?"))
        .expect("append");
    core
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let core = session(dir.path());
    let path = core.path().to_vec();
    let core = Arc::new(tokio::sync::Mutex::new(core));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let barrier = BarrierContext {
        core: core.clone(),
        events: Arc::new(|_| {}),
        summarizer: None,
        operation_ids: Arc::new(|| "op".to_owned()),
        clock: Arc::new(|| "2026-11-30T00:00:00Z".to_owned()),
    };
    let cancel = CancellationToken::new();
    let mut group = c.benchmark_group("barrier");
    group.sample_size(30);
    group.bench_function("preflight_nothing_to_do_200k", |b| {
        b.iter(|| {
            let outcome = runtime
                .block_on(barrier.preflight(None, &cancel))
                .expect("preflight");
            assert!(matches!(outcome, Preflight::Proceed));
        })
    });
    group.bench_function("baseline_rebuild_and_recount_200k", |b| {
        let counter = BpeCounter::new(Encoding::O200kBase);
        b.iter(|| {
            let total: u64 = path
                .iter()
                .filter_map(|entry| match &entry.body {
                    soba_core::EntryBody::Message(m) => Some(
                        soba_core::tokens::count_message(
                            &counter,
                            &m.message,
                            TokenCount::new(1_100),
                        )
                        .n
                        .get(),
                    ),
                    _ => None,
                })
                .sum();
            std::hint::black_box(total)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
