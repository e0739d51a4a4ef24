//! SOBA's planner on the real traces (issue "compaction core"): at the
//! default limits of a 200,000-token model, planning succeeds at every
//! inference point of every shared trace, and each deterministic capsule
//! names every file the trace modified before its boundary (ground truth:
//! the replay's §15.3 edit-tool rule, not the capsule extractor). Prints a
//! table: per trace, compactions planned and mean tokens before → after.
//! Skips, saying why, when `../shared/traces` is absent.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use soba_core::budget::Budget;
use soba_core::builder::{self, BuildOptions, CapsuleFrame};
use soba_core::calibration::Factor;
use soba_core::config::CompactionConfig;
use soba_core::facts::{self, FactsConfig, FactsInput};
use soba_core::input::{InputConfig, InputSetup, LiveInput};
use soba_core::plan::{self, PlanRequest};
use soba_core::render::{self, CapsuleView};
use soba_core::tokens::BpeCounter;
use soba_core::{
    Capsule, Encoding, Entry, EntryBody, EntryId, IdKind, MessageOrigin, Quality, TokenCount,
    TokenCounter, Trigger,
};
use soba_replay::probe::edited_files;

struct TraceResult {
    name: String,
    points: usize,
    compactions: usize,
    before: Vec<u64>,
    after: Vec<u64>,
    failures: Vec<String>,
    missing_files: Vec<String>,
}

fn normalize(path: &str, cwd: Option<&str>) -> String {
    let mut path = path.trim().to_owned();
    if let Some(cwd) = cwd {
        let prefix = format!("{}/", cwd.trim_end_matches('/'));
        if let Some(rest) = path.strip_prefix(&prefix) {
            path = rest.to_owned();
        }
    }
    path.trim_start_matches("./").to_owned()
}

fn names(capsule: &Capsule, truth: &str) -> bool {
    capsule.local.files_modified.iter().any(|listed| {
        let listed = listed.trim_start_matches("./");
        listed == truth
            || truth.ends_with(&format!("/{listed}"))
            || listed.ends_with(&format!("/{truth}"))
    })
}

fn replay_session(name: String, session: &soba_store::import::ImportedSession) -> TraceResult {
    let config = CompactionConfig::default();
    let budget =
        Budget::compute(TokenCount::new(200_000), TokenCount::new(32_000), &config).unwrap();
    let counter: Arc<dyn TokenCounter> = Arc::new(BpeCounter::new(Encoding::O200kBase));
    let setup = InputSetup::new(counter.clone(), InputConfig::new(&budget, &config))
        .with_system_prompt(session.system_prompt.clone().unwrap_or_default())
        .with_tool_schemas(session.tool_schemas.clone())
        .with_renderer(Arc::new(|capsule| {
            render::capsule_input(&CapsuleView::from(capsule))
        }));
    let cwd = session.cwd.as_deref();
    let starts: HashSet<usize> = session
        .inferences
        .iter()
        .map(|inference| inference.first_entry)
        .collect();
    let mut result = TraceResult {
        name,
        points: 0,
        compactions: 0,
        before: Vec::new(),
        after: Vec::new(),
        failures: Vec::new(),
        missing_files: Vec::new(),
    };
    let mut path: Vec<Entry> = Vec::new();
    let mut live = LiveInput::new(setup.clone());
    let mut capped_turn: Option<usize> = None;
    let mut turn = 0;
    let mut modified: Vec<(usize, String)> = Vec::new(); // (path index, file)
    let mut open_file = None;
    for (idx, entry) in session.entries.iter().enumerate() {
        // Recorded compactions are ignored: replay starts from full history.
        let imported = match &entry.body {
            EntryBody::Capsule(_) => true,
            EntryBody::Message(m) => m.message.origin == MessageOrigin::Summary,
            _ => false,
        };
        if imported {
            continue;
        }
        if starts.contains(&idx) {
            result.points += 1;
            live.extend(&path);
            let effective = live.total_tokens();
            let trigger = if effective > budget.hard_limit() {
                Some(Trigger::HardLimit)
            } else if effective >= budget.auto_limit() && capped_turn != Some(turn) {
                Some(Trigger::AutoThreshold)
            } else {
                None
            };
            if let Some(trigger) = trigger {
                let previous = path.iter().rev().find_map(|e| match &e.body {
                    EntryBody::Capsule(c) => Some((**c).clone()),
                    _ => None,
                });
                let region = &path[live.region_start()..];
                let all = facts::extract(
                    &FactsInput {
                        tail: &[],
                        span: region,
                        previous: previous.as_ref(),
                        retained: &HashSet::new(),
                        cwd,
                    },
                    &FactsConfig::default(),
                    counter.as_ref(),
                );
                let facts_tokens = counter
                    .count_text(&render::local_markdown(
                        &builder::bounded_local(&all, counter.as_ref()),
                        None,
                    ))
                    .n;
                let request = PlanRequest {
                    trigger,
                    effective,
                    budget: &budget,
                    summarizer_max_output_tokens: TokenCount::new(2_000),
                    facts_tokens,
                    rehydrate_tokens: soba_core::TokenCount::ZERO,
                    factor: Factor::new(1.0),
                };
                match plan::plan(&live, &request) {
                    Err(err) => result.failures.push(format!("entry {idx}: {err}")),
                    Ok(planned) if planned.should_generate() => {
                        let span_ids: HashSet<&EntryId> = planned.span_entry_ids.iter().collect();
                        let span: Vec<Entry> = path
                            .iter()
                            .filter(|e| span_ids.contains(&e.id))
                            .cloned()
                            .collect();
                        let retained: HashSet<EntryId> =
                            planned.retained_entry_ids.iter().cloned().collect();
                        let facts = facts::extract(
                            &FactsInput {
                                tail: &[],
                                span: &span,
                                previous: previous.as_ref(),
                                retained: &retained,
                                cwd,
                            },
                            &FactsConfig::default(),
                            counter.as_ref(),
                        );
                        let options = BuildOptions {
                            auto_limit: budget.auto_limit(),
                            trigger,
                            quality: Quality::Full,
                            instructions: None,
                        };
                        let content = builder::build_deterministic(
                            &facts,
                            previous.as_ref(),
                            &options,
                            counter.as_ref(),
                        );
                        let mut capsule = content.into_capsule(CapsuleFrame {
                            first_kept_entry_id: planned.first_kept_entry_id.clone(),
                            boundary_truncation: planned.boundary_truncation.clone(),
                            tokens_before: effective,
                            ..CapsuleFrame::default()
                        });
                        let mut candidate = path.clone();
                        candidate.push(Entry {
                            id: EntryId::from_uuid(
                                IdKind::Capsule,
                                (result.compactions + 1) as u128,
                            ),
                            parent_id: path.last().map(|e| e.id.clone()),
                            timestamp: String::new(),
                            body: EntryBody::Capsule(Box::new(capsule.clone())),
                        });
                        let after = LiveInput::build(setup.clone(), &candidate).total_tokens();
                        let post = plan::post_roi(trigger, effective, after, &budget);
                        if !post.ok {
                            capped_turn = Some(turn);
                        } else {
                            if after > budget.hard_limit() {
                                result
                                    .failures
                                    .push(format!("entry {idx}: {after} tokens after > hardLimit"));
                            }
                            // Every file modified before the boundary is named.
                            let boundary = planned
                                .first_kept_entry_id
                                .as_ref()
                                .and_then(|id| path.iter().position(|e| &e.id == id))
                                .unwrap_or(path.len());
                            for (at, file) in &modified {
                                if *at < boundary && !names(&capsule, file) {
                                    result.missing_files.push(format!("entry {idx}: {file}"));
                                }
                            }
                            capsule.tokens_after = after;
                            let last = candidate.len() - 1;
                            candidate[last].body = EntryBody::Capsule(Box::new(capsule));
                            path = candidate;
                            live.extend(&path);
                            result.compactions += 1;
                            result.before.push(effective.get());
                            result.after.push(after.get());
                        }
                    }
                    Ok(_) => {}
                }
            }
        }
        if let EntryBody::Message(m) = &entry.body {
            if m.message.is_real_user() {
                turn += 1;
            }
            for call in m.message.tool_uses() {
                for file in edited_files(call, &mut open_file) {
                    let file = normalize(&file, cwd);
                    if !modified.iter().any(|(_, known)| known == &file) {
                        modified.push((path.len(), file));
                    }
                }
            }
        }
        path.push(entry.clone());
    }
    result
}

fn mean(values: &[u64]) -> u64 {
    if values.is_empty() {
        0
    } else {
        values.iter().sum::<u64>() / values.len() as u64
    }
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn planning_succeeds_on_every_trace_and_capsules_name_every_modified_file() {
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/raw");
    if !raw.is_dir() {
        eprintln!("skipped: ../shared/traces not found beside the repository");
        return;
    }
    let mut files = Vec::new();
    let mut stack = vec![raw.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path)
            } else {
                files.push(path)
            }
        }
    }
    files.sort();
    let mut results = Vec::new();
    for file in &files {
        let sessions = soba_store::import::import_path(file).unwrap();
        for (n, session) in sessions.iter().enumerate() {
            let name = format!(
                "{}{}",
                file.strip_prefix(&raw).unwrap().display(),
                if sessions.len() > 1 {
                    format!("#{}", n + 1)
                } else {
                    String::new()
                }
            );
            results.push(replay_session(name, session));
        }
    }
    println!("| trace | inference points | compactions planned | mean tokens before → after |");
    println!("|---|---|---|---|");
    for result in &results {
        println!(
            "| {} | {} | {} | {} → {} |",
            result.name,
            result.points,
            result.compactions,
            mean(&result.before),
            mean(&result.after)
        );
    }
    for result in &results {
        assert!(
            result.failures.is_empty(),
            "{}: {:?}",
            result.name,
            result.failures
        );
        assert!(
            result.missing_files.is_empty(),
            "{}: {:?}",
            result.name,
            result.missing_files
        );
    }
    assert!(results.iter().map(|r| r.compactions).sum::<usize>() > 0);
}
