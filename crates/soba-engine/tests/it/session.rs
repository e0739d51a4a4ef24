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

/// Everything a preflight reads of a core, for comparing a live core with
/// one resumed from its log.
fn state_of(core: &SessionCore) -> impl std::fmt::Debug {
    let derived = core.derived();
    (
        core.path().iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        core.model_id().to_owned(),
        core.factor(),
        core.measure(),
        derived.pending_checkpoints,
        derived.turn_complete,
        derived.auto_compact,
        core.live().total_tokens(),
    )
}

/// The core keeps only the live stretch (SPEC §3.3): after compactions its
/// path starts at the latest capsule's retained tail, a session reopened
/// from its log derives the same state and next request, an
/// `/auto-compact off` made before the capsule survives the resume, and a
/// rewind to before the stretch reads the file and rebuilds it.
#[tokio::test]
async fn the_core_keeps_the_live_stretch_and_resumes_to_the_same_state() {
    let h = Harness::start(Options::default()).await;
    h.agent
        .barrier
        .core
        .lock()
        .await
        .append(EntryBody::ConfigChange {
            auto_compact: Some(false),
            approvals: None,
        })
        .unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut file = 0;
    for turn in 0..12 {
        for _ in 0..3 {
            read(&h, file);
            file += 1;
        }
        h.push_text(&format!("turn {turn} answered"));
        assert_eq!(
            h.turn(&format!("instruction for turn {turn}")).await,
            TurnEnd::Completed
        );
        if turn % 4 == 3 {
            let outcome = h
                .agent
                .barrier
                .preflight(
                    Some(soba_engine::barrier::Forced::User { instructions: None }),
                    &cancel,
                )
                .await
                .unwrap();
            assert!(
                matches!(outcome, soba_engine::barrier::Preflight::Compacted(_)),
                "{outcome:?}"
            );
        }
    }
    let entries = h.logged_entries();
    let log = soba_store::reader::read_log(&h.log_path).unwrap();
    let full_path: Vec<EntryId> = log.path().iter().map(|l| l.entry.id.clone()).collect();
    let stretch: Vec<EntryId> = log
        .live_stretch()
        .iter()
        .map(|l| l.entry.id.clone())
        .collect();
    let (live_state, live_request, n_path, short) = {
        let core = h.core.lock().await;
        let path: Vec<EntryId> = core.path().iter().map(|e| e.id.clone()).collect();
        // Only the live stretch is in memory, and it is the file's.
        assert_eq!(path, stretch);
        assert!(
            path.len() * 2 < full_path.len(),
            "{} of {}",
            path.len(),
            full_path.len()
        );
        assert!(!core.derived().auto_compact_or(true));
        assert_eq!(
            core.short_id_len(),
            soba_core::id::shortest_unique_len(entries.iter().map(|e| &e.id))
        );
        let tools = soba_engine::tool::ToolRegistry::builtin();
        (
            format!("{:?}", state_of(&core)),
            soba_engine::agent::build_request(&core, "model", &tools),
            path.len(),
            core.short_id_len(),
        )
    };
    assert!(short >= 4);

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
    let (mut resumed, diagnostics) =
        SessionCore::open(&log_path, config.clone(), WriterOptions::default()).unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(resumed.path().len(), n_path);
    assert_eq!(format!("{:?}", state_of(&resumed)), live_state);
    // The `/auto-compact off` before the capsule comes from its state.
    assert!(!resumed.derived().auto_compact_or(true));
    let tools = soba_engine::tool::ToolRegistry::builtin();
    assert_eq!(
        soba_engine::agent::build_request(&resumed, "model", &tools),
        live_request
    );

    // Rewind to the second real user message, long before the stretch.
    let target = entries
        .iter()
        .filter(|entry| matches!(&entry.body, EntryBody::Message(m) if m.message.is_real_user()))
        .nth(1)
        .unwrap()
        .id
        .clone();
    assert!(resumed.entry(&target).is_none());
    resumed.rewind(target.clone()).unwrap();
    assert_eq!(resumed.leaf(), Some(&target));
    let reread = soba_store::reader::read_log(&log_path).unwrap();
    let stretch: Vec<EntryId> = reread
        .live_stretch()
        .iter()
        .map(|l| l.entry.id.clone())
        .collect();
    assert_eq!(
        resumed
            .path()
            .iter()
            .map(|e| e.id.clone())
            .collect::<Vec<_>>(),
        stretch
    );
    // No capsule before it: the whole path is live again, and the request
    // is the one a fresh open builds.
    assert_eq!(stretch.first(), reread.path().first().map(|l| &l.entry.id));
    let rewound_request = soba_engine::agent::build_request(&resumed, "model", &tools);
    drop(resumed);
    let (reopened, _) =
        SessionCore::open(&log_path, config.clone(), WriterOptions::default()).unwrap();
    assert_eq!(
        soba_engine::agent::build_request(&reopened, "model", &tools),
        rewound_request
    );
    // An id that is not in the session is refused, and nothing is written.
    let before = std::fs::metadata(&log_path).unwrap().len();
    drop(reopened);
    let (mut again, _) = SessionCore::open(&log_path, config, WriterOptions::default()).unwrap();
    let missing = EntryId::parse("e_01943b300000700080000000000000ff").unwrap();
    assert!(again.rewind(missing).is_err());
    assert_eq!(std::fs::metadata(&log_path).unwrap().len(), before);
    drop(dir);
}

/// Settings are the user's, not the conversation's: a rewind to before an
/// `/auto-compact off` appends the setting again after its `leaf` entry,
/// and a rewind that keeps the setting appends the `leaf` entry alone.
#[tokio::test]
async fn a_rewind_keeps_the_auto_compact_setting() {
    let h = Harness::start(Options::default()).await;
    h.push_text("first answer");
    assert_eq!(h.turn("first").await, TurnEnd::Completed);
    let first_answer = h.core.lock().await.leaf().cloned().unwrap();
    h.core
        .lock()
        .await
        .append(EntryBody::ConfigChange {
            auto_compact: Some(false),
            approvals: None,
        })
        .unwrap();
    h.push_text("second answer");
    assert_eq!(h.turn("second").await, TurnEnd::Completed);
    let mut core = h.core.lock().await;
    core.rewind(first_answer.clone()).unwrap();
    assert!(!core.derived().auto_compact_or(true));
    let parent_of_setting = core.path().last().and_then(|e| e.parent_id.clone());
    let setting = core.leaf().cloned().unwrap();
    drop(core);
    let types: Vec<String> = h
        .logged_entries()
        .iter()
        .map(|entry| entry.body.type_name().to_owned())
        .collect();
    assert_eq!(
        types[types.len() - 2..],
        ["leaf", "config_change"],
        "{types:?}"
    );
    assert_eq!(parent_of_setting, Some(first_answer.clone()));
    // A rewind whose target path holds the same setting appends the leaf
    // alone.
    let n_before = types.len();
    h.core.lock().await.rewind(setting).unwrap();
    let types: Vec<String> = h
        .logged_entries()
        .iter()
        .map(|entry| entry.body.type_name().to_owned())
        .collect();
    assert_eq!(types.len(), n_before + 1);
    assert_eq!(types.last().map(String::as_str), Some("leaf"));
    assert!(!h.core.lock().await.derived().auto_compact_or(true));
}

/// A byte counter that tallies the text it is asked to tokenize.
#[derive(Debug, Default)]
struct Tally {
    bytes: std::sync::atomic::AtomicUsize,
}

impl Tally {
    fn bytes(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl soba_core::TokenCounter for Tally {
    fn encoding(&self) -> soba_core::Encoding {
        soba_core::tokens::ByteCounter.encoding()
    }

    fn count_text(&self, text: &str) -> soba_core::tokens::Counted {
        self.bytes
            .fetch_add(text.len(), std::sync::atomic::Ordering::Relaxed);
        soba_core::tokens::ByteCounter.count_text(text)
    }
}

/// Opens `log` with a [`Tally`] as its counter; returns the bytes it
/// tokenized, the next request and the measurement.
fn open_tallied(
    log: &std::path::Path,
    config: &soba_engine::session::SessionConfig,
) -> (usize, soba_provider::request::ChatRequest, String) {
    let tally = std::sync::Arc::new(Tally::default());
    let mut config = config.clone();
    config.counter = Some(tally.clone());
    let (core, diagnostics) = SessionCore::open(log, config, WriterOptions::default()).unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let tools = soba_engine::tool::ToolRegistry::builtin();
    let request = soba_engine::agent::build_request(&core, "model", &tools);
    let measured = format!("{:?}", core.measure());
    (tally.bytes(), request, measured)
}

/// Counts are stored, not recomputed (issue 18): a resumed session whose
/// messages carry counts in the counter's vocabulary tokenizes none of
/// them — what it tokenizes (system prompt, tool schemas) is the same for
/// 4 turns as for 24. A log written before counts were stored still
/// resumes, recounting, to the same next request and measurement.
#[tokio::test]
async fn a_resume_reads_stored_counts_and_an_old_log_recounts_to_the_same_request() {
    // Small files, so 24 turns stay under hardLimit: no capsule.
    let h = Harness::start(Options {
        files: (0..40)
            .map(|idx| (format!("data/file{idx:02}.txt"), 300))
            .collect(),
        ..no_hygiene()
    })
    .await;
    h.agent
        .barrier
        .core
        .lock()
        .await
        .append(EntryBody::ConfigChange {
            auto_compact: Some(false),
            approvals: None,
        })
        .unwrap();
    let mut sizes = Vec::new();
    for turn in 0..24 {
        read(&h, turn);
        h.push_text(&format!("turn {turn} answered"));
        assert_eq!(
            h.turn(&format!("read file {turn}")).await,
            TurnEnd::Completed
        );
        if turn == 3 || turn == 23 {
            sizes.push(std::fs::read(&h.log_path).unwrap());
        }
    }
    assert_eq!(
        h.count_logged("capsule"),
        0,
        "the whole log is the live stretch"
    );
    let Harness {
        dir,
        agent,
        core,
        config,
        ..
    } = h;
    drop(agent);
    drop(core);

    let short = dir.path().join("short.jsonl");
    let long = dir.path().join("long.jsonl");
    std::fs::write(&short, &sizes[0]).unwrap();
    std::fs::write(&long, &sizes[1]).unwrap();
    let (short_bytes, _, _) = open_tallied(&short, &config);
    let (long_bytes, long_request, long_measured) = open_tallied(&long, &config);
    assert!(short_bytes > 0, "the system prompt and tools are counted");
    assert_eq!(
        long_bytes, short_bytes,
        "no stored entry was tokenized again"
    );

    // The same log as an older SOBA wrote it: no `tokens` on any message.
    let text = String::from_utf8(sizes[1].clone()).unwrap();
    let mut stripped = String::new();
    let mut n_stripped = 0;
    for line in text.lines() {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(object) = value.as_object_mut()
            && object.remove("tokens").is_some()
        {
            n_stripped += 1;
        }
        stripped.push_str(&value.to_string());
        stripped.push('\n');
    }
    assert!(n_stripped >= 24 * 3, "{n_stripped} messages had counts");
    let old = dir.path().join("old.jsonl");
    std::fs::write(&old, stripped).unwrap();
    let (old_bytes, old_request, old_measured) = open_tallied(&old, &config);
    // Recounting adds every message's text to the fixed texts (system
    // prompt and tool schemas, about 11,000 bytes here).
    assert!(
        old_bytes > long_bytes + long_bytes / 2,
        "{old_bytes} vs {long_bytes}: it recounted"
    );
    assert_eq!(old_request, long_request);
    assert_eq!(old_measured, long_measured);
    drop(dir);
}

/// Two calls sharing an id in one response, and a later call reusing an id
/// from the path, each run once and keep their own result in the next
/// request (issue 33): the duplicates are renamed `<id>_2`, `<id>_3` in the
/// log and on the wire, with a warning each.
#[tokio::test]
async fn calls_sharing_an_id_each_keep_their_own_result() {
    use soba_provider::fake::{Dialect, Reply, Script};
    let h = Harness::start(no_hygiene()).await;
    let twice = Reply::text("")
        .with_tool_call("dup", "read_file", json!({ "path": "data/file00.txt" }))
        .with_tool_call("dup", "read_file", json!({ "path": "data/file01.txt" }));
    h.server.push(Script::stream(Dialect::Chat, &twice));
    let again =
        Reply::text("").with_tool_call("dup", "read_file", json!({ "path": "data/file02.txt" }));
    h.server.push(Script::stream(Dialect::Chat, &again));
    h.push_text("done");
    assert_eq!(h.turn("read three files").await, TurnEnd::Completed);
    assert_paired(&h.server);
    let last = h.server.requests().pop().unwrap();
    let messages = last.body["messages"].as_array().unwrap();
    let calls: Vec<&str> = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .map(|call| call["id"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ["dup", "dup_2", "dup_3"]);
    let results: Vec<(&str, bool)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let id = m["tool_call_id"].as_str().unwrap();
            let file = match id {
                "dup" => "file 0:",
                "dup_2" => "file 1:",
                _ => "file 2:",
            };
            (id, m["content"].as_str().unwrap().contains(file))
        })
        .collect();
    assert_eq!(
        results,
        [("dup", true), ("dup_2", true), ("dup_3", true)],
        "each result answers its own call"
    );
    // The log holds the renamed ids, so a resume sends the same thing.
    let logged: Vec<String> = h
        .logged_entries()
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message(logged) => Some(logged.message.clone()),
            _ => None,
        })
        .flat_map(|message| {
            message
                .tool_uses()
                .map(|call| call.id.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(logged, ["dup", "dup_2", "dup_3"]);
    let warnings: Vec<String> = h
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            EngineEvent::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        warnings,
        [
            "the model gave tool-call id \"dup\" to more than one call; this call is \"dup_2\", so each call is paired with its own result",
            "the model gave tool-call id \"dup\" to more than one call; this call is \"dup_3\", so each call is paired with its own result",
        ]
    );
}
