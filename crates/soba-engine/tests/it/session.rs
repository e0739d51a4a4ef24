//! A scripted 40-turn session against the fake provider server, checking
//! the engine's laws on everything it sent and wrote, and the order in
//! which pending intents are chosen and consumed (SPEC §6, §7).

use serde_json::json;
use soba_core::derived::DerivedState;
use soba_core::{EntryBody, EntryId, Trigger};
use soba_engine::event::{EngineEvent, TurnEnd};
use soba_engine::session::SessionCore;
use soba_store::log::WriterOptions;

use crate::harness::{Harness, Options, assert_paired, capsule_triggers};

/// Options with hygiene gated off, so intents meet an unpruned input.
fn no_hygiene() -> Options {
    let mut compaction = crate::harness::small_config();
    compaction.min_hygiene_tokens = soba_core::TokenCount::new(1_000_000);
    Options {
        compaction,
        ..Options::default()
    }
}

fn read(h: &Harness, idx: usize) {
    h.push_read(&format!("data/file{:02}.txt", idx % 40));
}

#[tokio::test]
async fn forty_turns_keep_every_law() {
    let h = Harness::start(Options::default()).await;
    let mut file = 0;
    for turn in 0..40 {
        match turn % 5 {
            0 => {
                for _ in 0..3 {
                    read(&h, file);
                    file += 1;
                }
                h.push_call(
                    "bash",
                    json!({ "command": "sh -c 'echo failing check; exit 1'" }),
                );
            }
            1 => {
                for _ in 0..2 {
                    read(&h, file);
                    file += 1;
                }
                h.push_call("bash", json!({ "command": "true" }));
                h.push_call(
                    "checkpoint",
                    json!({ "kind": "milestone", "note": format!("turn {turn} done") }),
                );
            }
            2 => {
                read(&h, file);
                file += 1;
            }
            3 => {
                for _ in 0..4 {
                    read(&h, file);
                    file += 1;
                }
            }
            _ => {
                h.push_call(
                    "checkpoint",
                    json!({ "kind": "plan_pivot", "note": format!("pivot at turn {turn}") }),
                );
                read(&h, file);
                file += 1;
            }
        }
        h.push_text(&format!("turn {turn} answered"));
        assert_eq!(
            h.turn(&format!("instruction for turn {turn}")).await,
            TurnEnd::Completed,
            "turn {turn}"
        );
    }

    // No request over hardLimit; none with an unpaired tool block.
    let sent = h.sent.lock().unwrap().clone();
    assert!(sent.len() > 100, "{} requests", sent.len());
    for (idx, (_, effective, hard_limit)) in sent.iter().enumerate() {
        assert!(
            effective <= hard_limit,
            "request {idx}: {effective} > {hard_limit}"
        );
    }
    assert_paired(&h.server);

    // Hygiene at most once per turn, at most one compaction per preflight.
    let events = h.events.lock().unwrap().clone();
    let mut hygiene_in_turn = 0;
    let mut starts_in_step = 0;
    for event in &events {
        match event {
            EngineEvent::TurnStarted { .. } => {
                hygiene_in_turn = 0;
                starts_in_step = 0;
            }
            EngineEvent::Hygiene { .. } => {
                hygiene_in_turn += 1;
                assert!(hygiene_in_turn <= 1, "two hygiene passes in one turn");
            }
            EngineEvent::CompactionStart { .. } => {
                starts_in_step += 1;
                assert!(starts_in_step <= 1, "two compactions before one request");
            }
            EngineEvent::AssistantMessage { .. } => starts_in_step = 0,
            _ => {}
        }
    }
    assert!(h.hygiene_events() >= 1);
    let entries = h.logged_entries();
    let triggers = capsule_triggers(&entries);
    assert!(triggers.len() >= 3, "{triggers:?}");

    // firstKeptEntryId never moves backwards (no rewinds here, so file order
    // is path order).
    let position = |id: &EntryId| entries.iter().position(|entry| &entry.id == id).unwrap();
    let firsts: Vec<usize> = entries
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => capsule.first_kept_entry_id.as_ref().map(position),
            _ => None,
        })
        .collect();
    assert!(
        firsts.windows(2).all(|pair| pair[0] <= pair[1]),
        "{firsts:?}"
    );

    // Resume gives the same next request as the live session.
    let live = h.next_request().await;
    let Harness {
        dir,
        agent,
        core,
        log_path,
        config,
        ..
    } = h;
    drop(agent);
    drop(core);
    let (resumed, diagnostics) =
        SessionCore::open(&log_path, config, WriterOptions::default()).unwrap();
    assert!(diagnostics.is_empty());
    let tools = soba_engine::tool::ToolRegistry::builtin();
    assert_eq!(
        soba_engine::agent::build_request(&resumed, "model", &tools),
        live
    );
    drop(dir);
}

#[tokio::test]
async fn pending_intents_are_chosen_in_order_and_consumed_together() {
    let h = Harness::start(no_hygiene()).await;
    for idx in 0..5 {
        read(&h, idx);
    }
    h.push_call(
        "checkpoint",
        json!({ "kind": "milestone", "note": "parser done" }),
    );
    h.push_call(
        "checkpoint",
        json!({ "kind": "plan_pivot", "note": "switch to streaming" }),
    );
    h.push_text("done");
    assert_eq!(
        h.turn("read five files, then checkpoint").await,
        TurnEnd::Completed
    );

    // The milestone was pending alone first: it fired at the next preflight.
    // Its capsule consumed it; the plan pivot, pending next, could not re-arm
    // in the same turn and was consumed by the final answer.
    let triggers = capsule_triggers(&h.logged_entries());
    assert_eq!(triggers, vec!["milestone"]);
    let core = h.core.lock().await;
    let derived = DerivedState::from_path(core.path());
    assert!(
        derived.pending_checkpoints.is_empty(),
        "{:?}",
        derived.pending_checkpoints
    );
    assert!(derived.turn_complete.is_some());
    drop(core);

    // Both kinds pending at one preflight: the newest (plan_pivot) is chosen,
    // the milestone is recorded as superseded, one capsule consumes both.
    let h = Harness::start(no_hygiene()).await;
    for idx in 0..5 {
        read(&h, idx);
    }
    let id_m = "call_m";
    let id_p = "call_p";
    let reply = soba_provider::fake::Reply::text("")
        .with_tool_call(
            id_m,
            "checkpoint",
            json!({ "kind": "milestone", "note": "parser done" }),
        )
        .with_tool_call(
            id_p,
            "checkpoint",
            json!({ "kind": "plan_pivot", "note": "switch to streaming" }),
        );
    h.server.push(soba_provider::fake::Script::stream(
        soba_provider::fake::Dialect::Chat,
        &reply,
    ));
    h.push_text("done");
    assert_eq!(
        h.turn("read five files, then checkpoint twice").await,
        TurnEnd::Completed
    );
    let entries = h.logged_entries();
    assert_eq!(capsule_triggers(&entries), vec!["plan_pivot"]);
    let flight = std::fs::read_to_string(h.log_path.with_extension("flight.jsonl")).unwrap();
    let superseded = flight
        .lines()
        .filter(|line| {
            line.contains("\"trigger\":\"milestone\"") && line.contains("plan_pivot chosen first")
        })
        .count();
    assert_eq!(superseded, 1, "{flight}");
    let core = h.core.lock().await;
    assert!(
        DerivedState::from_path(core.path())
            .pending_checkpoints
            .is_empty()
    );
    let capsule_trigger = entries.iter().find_map(|entry| match &entry.body {
        EntryBody::Capsule(capsule) => Some(capsule.trigger),
        _ => None,
    });
    assert_eq!(capsule_trigger, Some(Trigger::PlanPivot));
}
