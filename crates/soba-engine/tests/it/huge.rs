//! Issue 18 item 3: the first compaction of a huge imported history is
//! bounded. A 20 M-token pi session, imported with stored counts, resumed
//! on the rig's small model (hardLimit 13,000): the summarizer reads only
//! the newest part, in at most `compaction.summarizer.maxChunks` calls,
//! the capsule says so, and no request exceeds hardLimit.

use std::sync::{Arc, Mutex as StdMutex};

use soba_core::summarize::{FakeReply, FakeSummarizer, Summarizer};
use soba_core::tokens::ByteCounter;
use soba_core::{EntryBody, Quality, Role, TokenCount, Trigger};
use soba_engine::event::EngineEvent;
use soba_store::check::problems;
use soba_store::fixtures::write_pi_session;
use soba_store::import::import_path;
use soba_store::log::{SessionHeader, SessionId, write_new_session};
use soba_store::reader::read_log;
use tokio_util::sync::CancellationToken;

use crate::harness::small_config;
use crate::rig::{Rig, RigOptions, Step, log_path_in, valid_summary};

const MAX_CHUNKS: usize = 4;
const HARD_LIMIT: u64 = 13_000;

#[test]
fn resuming_a_20m_token_imported_history_stays_within_the_chunk_cap_and_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("pi-session.jsonl");
    // The byte counter gives a token per 4 bytes.
    write_pi_session(&source, 92 << 20).unwrap();
    let mut sessions = import_path(&source).unwrap();
    assert_eq!(sessions.len(), 1);
    let mut session = sessions.remove(0);
    let stored = session.store_counts(&ByteCounter, TokenCount::new(1_100));
    assert!(stored.get() >= 20_000_000, "{stored} tokens imported");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let log_path = log_path_in(dir.path());
    std::fs::create_dir_all(log_path.parent().unwrap()).unwrap();
    let header = SessionHeader {
        id: SessionId::parse("rig").unwrap(),
        created_at: "2026-11-30T00:00:00Z".into(),
        cwd: workspace.display().to_string(),
        os: "linux".into(),
        memory: Vec::new(),
        imported_from: None,
    };
    write_new_session(&log_path, &header, &session.entries).unwrap();
    drop(session);

    let summarizer = Arc::new(
        FakeSummarizer::new(std::iter::repeat_n(
            FakeReply::Text(valid_summary()),
            MAX_CHUNKS + 2,
        ))
        .with_window(TokenCount::new(8_000)),
    );
    let mut compaction = small_config();
    compaction.summarizer.max_chunks = MAX_CHUNKS;
    let events: Arc<StdMutex<Vec<EngineEvent>>> = Arc::default();
    let sink = events.clone();
    let rig = Rig::open(
        dir.path(),
        RigOptions {
            compaction,
            summarizer: Some(summarizer.clone()),
            events: Arc::new(move |event| sink.lock().unwrap().push(event)),
            n_files: 0,
            ..RigOptions::default()
        },
    );
    rig.client
        .push([Step::text("carrying on from the capsule")]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(rig.agent.run_turn("carry on", &CancellationToken::new()))
        .unwrap();

    // At most the configured number of calls; the first says the
    // conversation begins in the middle.
    let requests = summarizer.requests();
    assert!(
        (1..=MAX_CHUNKS).contains(&requests.len()),
        "{} summarizer calls",
        requests.len()
    );
    assert!(requests.iter().all(|request| request.earlier_omitted));
    assert!(requests[0].prompt().contains("begins in the middle"));

    // The estimate came before the first call.
    let (tokens_before, estimate) = events
        .lock()
        .unwrap()
        .iter()
        .find_map(|event| match event {
            EngineEvent::CompactionStart {
                tokens_before,
                estimate,
                ..
            } => estimate.clone().map(|estimate| (*tokens_before, estimate)),
            _ => None,
        })
        .expect("a compaction_start with an estimate");
    assert_eq!(estimate.calls, requests.len());
    assert_eq!(estimate.max_calls, MAX_CHUNKS);
    // Hygiene stubbed the old tool results first; what is left is still
    // millions of tokens, nearly all of them kept as facts only.
    assert!(tokens_before.get() > 1_000_000, "{tokens_before}");
    assert!(
        estimate.facts_only_tokens.get() > tokens_before.get() / 10 * 9,
        "{} of {tokens_before}",
        estimate.facts_only_tokens
    );
    assert!(estimate.line().contains("kept as local facts only"));

    // One capsule, the LLM's, accepted by the guards, saying what it read.
    let log = read_log(&log_path).unwrap();
    let capsules: Vec<_> = log
        .entries()
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) => Some(capsule.as_ref().clone()),
            _ => None,
        })
        .collect();
    assert_eq!(capsules.len(), 1);
    let capsule = &capsules[0];
    assert_eq!(capsule.trigger, Trigger::HardLimit);
    assert_eq!(capsule.quality, Quality::Full);
    assert_eq!(capsule.summarizer, summarizer.model());
    let scope = capsule
        .scope
        .as_ref()
        .expect("the capsule records its scope");
    assert_eq!(scope.chunks, requests.len() as u64);
    assert_eq!(scope.facts_only_tokens, estimate.facts_only_tokens);
    assert!(capsule.tokens_after.get() <= HARD_LIMIT);
    // The older part is carried by the local sections: the original task.
    assert!(!capsule.local.original_task.is_empty());
    // `soba show --check` finds nothing wrong.
    assert_eq!(problems(&log), Vec::<String>::new());

    // Every request the model received was within hardLimit: the rig's
    // client reports the session's local count at the request as usage.
    let inputs: Vec<u64> = log
        .entries()
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            EntryBody::Message(message)
                if message.message.role == Role::Assistant
                    && message.message.model.as_deref() == Some("fake/model") =>
            {
                message.message.usage.map(|usage| usage.input)
            }
            _ => None,
        })
        .collect();
    assert_eq!(inputs.len(), 1);
    assert!(
        inputs.iter().all(|&input| input <= HARD_LIMIT),
        "{inputs:?}"
    );
}
