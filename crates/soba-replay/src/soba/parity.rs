//! Parity of the two preflight drivers: one recorded session through the
//! engine (the embedding API, the deterministic capsule builder) and
//! through the replay's `soba` policy must reach the same decision at
//! every request — both call `soba_core::preflight`.

use std::sync::{Arc, Mutex};

use soba_core::budget::Budget;
use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::{EntryBody, Role, TokenCount};
use soba_engine::embed::{EmbedError, Engine, EngineConfig};
use soba_engine::event::{EngineEvent, Outcome};
use soba_engine::session::ModelSpec;
use soba_store::flight::{FlightLevel, FlightOutcome, flight_path, read_flight_records};
use soba_store::log::Durability;
use tokio_util::sync::CancellationToken;

use super::super::cost::{CacheMode, CostModel};
use super::super::probe::ProbeIndex;
use super::super::run::{Ctx, Message0, Runner};
use super::super::testing::Script;
use super::super::trace::Trace;
use super::SobaRunner;

/// Two turns of 2,000-token reads on a 100,000-token window (hardLimit
/// 81,808, autoLimit 65,446, hygieneLimit 40,904, softGate 32,000): the
/// first ends above the soft gate (`turn_complete` at the next turn), the
/// second reads on through hygiene and `read_cost`; a turn of larger reads
/// reaches autoLimit between two `read_cost` checks and completes above the
/// soft gate, and the last turn's one read is over hardLimit alone
/// (`hard_limit` fails closed).
fn session() -> Trace {
    let mut script = Script::new();
    script.user("task", 1_000);
    for i in 0..19 {
        script.read(&format!("src/f{}.rs", i % 8), 2_000);
    }
    script.answer("done");
    script.user("next", 100);
    for i in 0..60 {
        script.read(&format!("src/g{}.rs", i % 8), 2_000);
    }
    script.answer("ok");
    script.user("last", 100);
    for i in 0..6 {
        script.read(&format!("src/h{i}.rs"), 15_000);
    }
    script.answer("bye");
    script.user("huge", 100);
    script.read("src/huge.rs", 85_000);
    script.answer("too much");
    script.trace(100_000, 10_000)
}

fn config() -> CompactionConfig {
    let mut config = CompactionConfig::default();
    config
        .set_key("maxToolResultTokens", &serde_json::json!(1_000_000))
        .expect("a valid key");
    // A short tail, so the session reaches every trigger it was written
    // for (the default of 25 results keeps it under autoLimit).
    config
        .set_key("keepRecentResults", &serde_json::json!(5))
        .expect("a valid key");
    config
}

/// The replay's decisions: (step, what) for every step that decided more
/// than to proceed.
fn replayed(trace: &Trace, config: &CompactionConfig) -> Vec<(usize, String)> {
    let budget = Budget::compute(
        TokenCount::new(trace.window),
        TokenCount::new(trace.max_output),
        config,
    )
    .expect("a valid budget");
    let index = ProbeIndex::build(trace);
    let cost = CostModel {
        mode: CacheMode::Anthropic,
        openai_read: 0.1,
        ttl_ms: 300_000,
        summarizer_price: 0.33,
    };
    let ctx = Ctx::new(trace, &index, cost, config, budget.auto_limit());
    let mut runner = SobaRunner::new(&ctx, config.clone(), budget);
    let message0 = Message0 {
        key: 0,
        local: trace.fixed_local,
    };
    let mut appended = 0;
    for (step_idx, step) in trace.steps.iter().enumerate() {
        for idx in appended..step.response.start.max(appended) {
            runner.append(&ctx, idx);
        }
        appended = appended.max(step.response.start);
        runner.preflight(&ctx, step_idx, message0);
        for idx in appended..step.response.end.max(appended) {
            runner.append(&ctx, idx);
        }
        appended = appended.max(step.response.end);
    }
    runner.decided
}

/// The engine's decisions on the same entries, read from its events and
/// (for a soft plan that failed, which only a flight record shows) its
/// flight records.
fn engined(trace: &Trace, config: &CompactionConfig) -> Vec<(usize, String)> {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let events: Arc<Mutex<Vec<EngineEvent>>> = Arc::default();
    let sink = events.clone();
    let model = ModelSpec {
        id: trace.model.clone(),
        context_window: TokenCount::new(trace.window),
        max_output_tokens: TokenCount::new(trace.max_output),
        encoding: soba_core::Encoding::O200kBase,
        seed: Factor::new(1.0),
    };
    let engine_config = EngineConfig::new(model, trace.system_prompt.clone())
        .with_counter(trace.counter.clone())
        .with_compaction(config.clone())
        .with_workspace_root(trace.cwd.clone().expect("the script records a cwd"))
        .with_durability(Durability::Flush)
        .on_event(move |event| {
            sink.lock()
                .expect("no test thread panics")
                .push(event.clone())
        });
    let log = dir.path().join("parity.jsonl");
    let engine = Engine::create(&log, engine_config).expect("the engine starts");
    let flights = flight_path(dir.path(), engine.session_id());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let cancel = CancellationToken::new();
    let mut decided = Vec::new();
    let mut n_flights = 0;
    runtime.block_on(async {
        let append = |idx: usize| {
            let EntryBody::Message(message) = &trace.entries[idx].body else {
                panic!("the script holds messages only");
            };
            let message = message.message.clone();
            let engine = &engine;
            async move {
                match message.role {
                    Role::Assistant => engine.append_assistant(message).await,
                    _ => engine.append_message(message).await,
                }
                .expect("the entry appends");
            }
        };
        let mut appended = 0;
        for (step_idx, step) in trace.steps.iter().enumerate() {
            for idx in appended..step.response.start.max(appended) {
                append(idx).await;
            }
            appended = appended.max(step.response.start);
            events.lock().expect("no test thread panics").clear();
            match engine.prepare(&cancel).await {
                Ok(_) => {}
                // The request is not sent; the replay counts it unsent.
                Err(EmbedError::CompactionFailed { .. }) => {}
                Err(err) => panic!("the preflight at step {step_idx} failed: {err}"),
            }
            let mut started = false;
            for event in events.lock().expect("no test thread panics").iter() {
                match event {
                    EngineEvent::Hygiene { .. } => decided.push((step_idx, "hygiene".to_owned())),
                    EngineEvent::CompactionStart { .. } => started = true,
                    EngineEvent::CompactionEnd(end) if started => {
                        let outcome = match end.outcome {
                            Outcome::Completed => "completed",
                            Outcome::Skipped => "skipped",
                            _ => "failed",
                        };
                        decided.push((
                            step_idx,
                            format!("compact {} {outcome}", end.trigger.as_str()),
                        ));
                    }
                    _ => {}
                }
            }
            let (records, _) = read_flight_records(&flights).expect("flight records read");
            for record in &records[n_flights..] {
                if !started
                    && record.level == FlightLevel::Compaction
                    && record.outcome == FlightOutcome::Failed
                    && let Some(trigger) = record.trigger
                {
                    decided.push((step_idx, format!("failed {}", trigger.as_str())));
                }
            }
            n_flights = records.len();
            for idx in appended..step.response.end.max(appended) {
                append(idx).await;
            }
            appended = appended.max(step.response.end);
        }
    });
    decided
}

#[test]
fn the_engine_and_the_replay_decide_alike_at_every_request() {
    let trace = session();
    let config = config();
    let replay = replayed(&trace, &config);
    let engine = engined(&trace, &config);
    assert_eq!(engine, replay);
    // The session reaches what it was written for.
    let n_steps = trace.steps.len();
    assert_eq!(
        replay,
        vec![
            (20, "compact turn_complete completed".to_owned()),
            (35, "hygiene".to_owned()),
            (45, "compact read_cost completed".to_owned()),
            (61, "compact read_cost completed".to_owned()),
            (77, "compact read_cost completed".to_owned()),
            (85, "compact auto_threshold completed".to_owned()),
            (88, "compact turn_complete completed".to_owned()),
            (n_steps - 1, "failed hard_limit".to_owned()),
        ]
    );
}
