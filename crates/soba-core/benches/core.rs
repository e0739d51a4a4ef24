//! Benchmarks of the model input and the planner (SPEC §16):
//!
//! - a preflight with nothing to do on a 200,000-token session (target
//!   ≤ 20 µs): append one entry, bring the input up to date, measure, check
//!   hygiene and the limits — against re-counting the session from scratch;
//! - the shared decision ([`soba_core::preflight::decide`], as the engine's
//!   barrier and the replay call it) on the same session, with the derived
//!   state kept up to date entry by entry: below softGate, where it has
//!   nothing to do (target ≤ 20 µs), and above it, where the soft triggers
//!   are candidates and it plans;
//! - plan + deterministic capsule over 1,000,000 tokens of history (target
//!   ≤ 100 ms), with the plan alone beside it.
//!
//! Counts are real BPE (`o200k_base`), stored on the entries as the session
//! log stores them at append. Run with `cargo bench -p soba-core --bench
//! core`.

use std::collections::HashSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use soba_core::budget::Budget;
use soba_core::builder::{BuildOptions, build_deterministic};
use soba_core::calibration::Factor;
use soba_core::capsule::{Quality, Trigger};
use soba_core::config::CompactionConfig;
use soba_core::derived::DerivedState;
use soba_core::entry::{Entry, EntryBody, MessageEntry, StoredTokens};
use soba_core::facts::{FactsConfig, FactsInput, extract};
use soba_core::hygiene;
use soba_core::id::{EntryId, IdKind};
use soba_core::input::{InputConfig, InputSetup, LiveInput};
use soba_core::message::{Block, Message, Role, ToolInput, ToolUse};
use soba_core::plan::{PlanRequest, plan};
use soba_core::preflight::{self, Decision};
use soba_core::tokens::{self, BpeCounter, Encoding, TokenCount, TokenCounter};
use soba_core::trigger::TurnState;

/// Builds sessions with the counts a session log stores.
struct Builder {
    counter: BpeCounter,
    entries: Vec<Entry>,
    next: u128,
    tokens: u64,
    store_counts: bool,
}

impl Builder {
    fn new(store_counts: bool) -> Self {
        Builder {
            counter: BpeCounter::new(Encoding::O200kBase),
            entries: Vec::new(),
            next: 0,
            tokens: 0,
            store_counts,
        }
    }

    fn push(&mut self, message: Message) {
        self.next += 1;
        let counted = tokens::count_message(&self.counter, &message, TokenCount::new(1_100));
        self.tokens += counted.n.get();
        let stored = self.store_counts.then_some(StoredTokens {
            encoding: Encoding::O200kBase,
            n: counted.n,
            estimated: counted.estimated,
        });
        self.entries.push(Entry {
            id: EntryId::from_uuid(IdKind::Entry, self.next),
            parent_id: self.entries.last().map(|entry| entry.id.clone()),
            timestamp: String::new(),
            body: EntryBody::Message(MessageEntry {
                message,
                tokens: stored,
            }),
        });
    }
}

/// Code-like text of about `lines` lines that varies with `seed`.
fn code(seed: usize, lines: usize) -> String {
    (0..lines)
        .map(|line| {
            let n = seed.wrapping_mul(31).wrapping_add(line * 17) % 997;
            format!(
                "    let value_{n} = compute_{}(&input[{line}], {n}); // step {line} of {seed}\n",
                n % 13
            )
        })
        .collect()
}

/// A session of turns, each a user message and five tool batches (a read,
/// an edit, a test run, a search, a listing) with ~1 KB results, and a
/// closing assistant message, until `target` tokens.
fn session(target: u64, store_counts: bool) -> Vec<Entry> {
    let mut builder = Builder::new(store_counts);
    let mut turn = 0usize;
    while builder.tokens < target {
        builder.push(Message::user(format!(
            "Turn {turn}: continue with module {turn}; keep the tests green."
        )));
        for step in 0..5 {
            let call_id = format!("call_{turn}_{step}");
            let (name, input) = match step {
                0 => ("read_file", json!({"path": format!("src/m{turn}/lib.rs")})),
                1 => (
                    "edit_file",
                    json!({"path": format!("src/m{turn}/lib.rs"), "old": "a", "new": "b"}),
                ),
                2 => ("bash", json!({"command": format!("cargo test -p m{turn}")})),
                3 => ("search", json!({"pattern": format!("fn compute_{step}")})),
                _ => ("list_files", json!({"path": format!("src/m{turn}")})),
            };
            builder.push(Message::new(
                Role::Assistant,
                vec![
                    Block::Text(format!("Step {step} of turn {turn}.")),
                    Block::ToolUse(ToolUse {
                        id: call_id.clone(),
                        name: name.into(),
                        input: ToolInput::from_value(input),
                    }),
                ],
            ));
            builder.push(Message::tool_result(
                call_id,
                code(turn * 5 + step, 14),
                false,
            ));
        }
        builder.push(Message::assistant(format!(
            "Module {turn} is done; {}",
            code(turn, 2)
        )));
        turn += 1;
    }
    builder.entries
}

fn setup(budget: &Budget, config: &CompactionConfig) -> InputSetup {
    InputSetup::new(Arc::new(BpeCounter::new(Encoding::O200kBase)), InputConfig::new(budget, config))
        .with_system_prompt("You are SOBA, a local-first coding agent. ".repeat(40))
        .with_tool_schemas(vec![
            json!({"name": "read_file", "parameters": {"path": "string", "offset": "integer", "limit": "integer"}}),
            json!({"name": "bash", "parameters": {"command": "string", "timeoutMs": "integer"}}),
        ])
}

fn preflight(c: &mut Criterion) {
    // A 1M-token window without a working-set cap: 200k tokens is below
    // every limit, so the preflight has nothing to do.
    let config = CompactionConfig {
        max_working_set_tokens: None,
        ..CompactionConfig::default()
    };
    let budget = Budget::compute(TokenCount::new(1_000_000), TokenCount::new(64_000), &config)
        .expect("valid budget");
    let base = session(200_000, true);
    let live = LiveInput::build(setup(&budget, &config), &base);
    let next = |n: usize| {
        let mut message = Message::tool_result(format!("late_{n}"), "ok", false);
        message.role = Role::User;
        message.content = vec![Block::Text(format!("and now step {n}"))];
        let counted = tokens::count_message(
            &BpeCounter::new(Encoding::O200kBase),
            &message,
            TokenCount::new(1_100),
        );
        Entry {
            id: EntryId::from_uuid(IdKind::Entry, 1_000_000 + n as u128),
            parent_id: None,
            timestamp: String::new(),
            body: EntryBody::Message(MessageEntry {
                message,
                tokens: Some(StoredTokens {
                    encoding: Encoding::O200kBase,
                    n: counted.n,
                    estimated: false,
                }),
            }),
        }
    };
    let appended: Vec<Entry> = (0..1_000).map(next).collect();

    let mut group = c.benchmark_group("preflight_200k");
    group.sample_size(20);
    group.bench_function("nothing_to_do_incremental", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut path = base.clone();
            let mut live = live.clone();
            for iter in 0..iters as usize {
                let n = iter % appended.len();
                if n == 0 && iter > 0 {
                    // Back to 200k tokens, outside the timing.
                    path.truncate(base.len());
                    live = LiveInput::build(live.setup().clone(), &path);
                }
                path.push(appended[n].clone());
                let start = Instant::now();
                live.extend(&path);
                let effective = Factor::ONE.apply(live.total_tokens());
                let hygiene_due = hygiene::is_due(effective, budget.hygiene_limit(), false);
                let fires = effective > budget.hard_limit() || effective >= budget.auto_limit();
                black_box((hygiene_due, fires));
                total += start.elapsed();
                assert!(
                    !hygiene_due && !fires,
                    "the preflight must have nothing to do"
                );
            }
            total
        });
    });
    // The shared decision: softGate above the session (nothing to do),
    // then the default softGate (read_cost plans at every preflight).
    let counter = BpeCounter::new(Encoding::O200kBase);
    for (name, soft_floor, quiet) in [
        ("decide_nothing_to_do_incremental", 400_000, true),
        ("decide_above_soft_gate_incremental", 32_000, false),
    ] {
        let config = CompactionConfig {
            min_tokens_for_auto_compact: TokenCount::new(soft_floor),
            ..config.clone()
        };
        let budget = Budget::compute(TokenCount::new(1_000_000), TokenCount::new(64_000), &config)
            .expect("valid budget");
        let live = LiveInput::build(setup(&budget, &config), &base);
        let derived = DerivedState::from_path(&base);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut path = base.clone();
                let mut live = live.clone();
                let mut derived = derived.clone();
                let mut turn = TurnState::new();
                let mut hygiene_considered = None;
                for iter in 0..iters as usize {
                    let n = iter % appended.len();
                    if n == 0 && iter > 0 {
                        path.truncate(base.len());
                        live = LiveInput::build(live.setup().clone(), &path);
                        derived = DerivedState::from_path(&path);
                    }
                    path.push(appended[n].clone());
                    let start = Instant::now();
                    live.extend(&path);
                    derived.apply(&appended[n]);
                    let decided = preflight::decide(
                        &preflight::Input {
                            live: &live,
                            path: &path,
                            derived: &derived,
                            budget: &budget,
                            config: &config,
                            effective: Factor::ONE.apply(live.total_tokens()),
                            factor: Factor::ONE,
                            counter: &counter,
                            cwd: None,
                            model: "bench",
                            idle_ms: None,
                            cache_ttl_ms: None,
                            forced: None,
                            files: None,
                        },
                        &mut turn,
                        &mut hygiene_considered,
                    );
                    total += start.elapsed();
                    assert!(
                        !quiet || matches!(decided.decision, Decision::Proceed),
                        "{name}: below softGate the preflight goes on to inference"
                    );
                    black_box(decided);
                }
                total
            });
        });
    }

    let unstored = session(200_000, false);
    group.sample_size(10);
    group.bench_function("recount_from_scratch", |b| {
        b.iter(|| {
            let live = LiveInput::build(setup(&budget, &config), black_box(&unstored));
            black_box(live.total_tokens())
        });
    });
    group.finish();
}

fn plan_and_capsule(c: &mut Criterion) {
    let config = CompactionConfig::default();
    let budget = Budget::compute(TokenCount::new(1_000_000), TokenCount::new(64_000), &config)
        .expect("valid budget");
    let path = session(1_000_000, true);
    let live = LiveInput::build(setup(&budget, &config), &path);
    let counter = BpeCounter::new(Encoding::O200kBase);
    let request = PlanRequest {
        trigger: Trigger::HardLimit,
        effective: live.total_tokens(),
        budget: &budget,
        summarizer_max_output_tokens: config.summarizer.max_output_tokens,
        facts_tokens: TokenCount::new(4_000),
        rehydrate_tokens: soba_core::TokenCount::ZERO,
        factor: Factor::ONE,
    };
    eprintln!(
        "history: {} entries, {} tokens",
        path.len(),
        live.total_tokens()
    );

    let mut group = c.benchmark_group("plan_1m");
    group.sample_size(10);
    group.bench_function("plan", |b| {
        b.iter(|| black_box(plan(&live, &request).expect("plan")))
    });
    group.bench_function("plan_and_deterministic_capsule", |b| {
        b.iter(|| {
            let planned = plan(&live, &request).expect("plan");
            let boundary = planned
                .first_kept_entry_id
                .as_ref()
                .and_then(|id| path.iter().position(|entry| &entry.id == id))
                .unwrap_or(path.len());
            // A cut straddler is given to the extractor whole.
            let span_end = if planned.boundary_truncation.is_some() {
                boundary + 1
            } else {
                boundary
            };
            let retained: HashSet<EntryId> = path[span_end..]
                .iter()
                .map(|entry| entry.id.clone())
                .collect();
            let facts = extract(
                &FactsInput {
                    tail: &[],
                    span: &path[..span_end],
                    previous: None,
                    retained: &retained,
                    cwd: None,
                },
                &FactsConfig::default(),
                &counter,
            );
            let options = BuildOptions {
                auto_limit: budget.auto_limit(),
                trigger: planned.trigger,
                quality: Quality::Full,
                instructions: None,
            };
            black_box(build_deterministic(&facts, None, &options, &counter))
        });
    });
    group.finish();
    let _ = counter.encoding();
}

criterion_group!(benches, preflight, plan_and_capsule);
criterion_main!(benches);
