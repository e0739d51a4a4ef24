//! The embedding API, used as a host would: only `pub` items, a scripted
//! model the host calls itself, tools the host runs itself. Counting uses
//! the deterministic byte counter (`ceil(bytes / 4)`).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use serde_json::json;
use soba_core::calibration::{Factor, MeasurementSource};
use soba_core::config::CompactionConfig;
use soba_core::tokens::{ByteCounter, count_message, count_tool_schemas};
use soba_core::{
    Block, CheckpointKind, Encoding, EntryBody, Message, Role, TokenCount, TokenCounter, ToolInput,
    ToolUse, Trigger, Usage,
};
use soba_engine::embed::{EmbedError, Engine, EngineConfig, Prepared, TokenCancellation};
use soba_engine::event::{EngineEvent, Outcome};
use soba_engine::session::ModelSpec;
use soba_provider::client::{Api, BoxFuture, Cancellation, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::request::{ChatRequest, ChatResponse, StopReason, StreamEvent, ToolSchema};
use soba_store::log::Durability;
use tokio_util::sync::CancellationToken;

/// Window 16,000, max output 2,000: with [`compaction`] hardLimit 13,000,
/// autoLimit 10,400, hygieneLimit 6,500, keepRecent 1,000, roiFloor 500.
fn model() -> ModelSpec {
    ModelSpec {
        id: "host/model".into(),
        context_window: TokenCount::new(16_000),
        max_output_tokens: TokenCount::new(2_000),
        encoding: Encoding::O200kBase,
        seed: Factor::new(1.0),
    }
}

fn compaction() -> CompactionConfig {
    CompactionConfig {
        safety_reserve_tokens: TokenCount::new(1_000),
        min_tokens_for_auto_compact: TokenCount::new(2_000),
        keep_recent_tokens: TokenCount::new(1_000),
        min_reclaimable_tokens: TokenCount::new(500),
        min_hygiene_tokens: TokenCount::new(1_500),
        hygiene_keep_messages: 4,
        timeout_ms: 200,
        ..CompactionConfig::default()
    }
}

fn tool() -> ToolSchema {
    ToolSchema {
        name: "fetch".into(),
        description: "Fetches a document by number.".into(),
        input_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
    }
}

fn config() -> EngineConfig {
    EngineConfig::new(model(), "You are the host's agent.")
        .with_tools(vec![tool()])
        .with_compaction(compaction())
        .with_counter(Arc::new(ByteCounter))
        .with_workspace_root("/work/host")
        .with_durability(Durability::Flush)
}

/// SplitMix64: varied, reproducible sizes.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn text_of(seed: u64, n_bytes: usize) -> String {
    let mut text = String::with_capacity(n_bytes + 80);
    let mut line = 0;
    while text.len() < n_bytes {
        text.push_str(&format!(
            "doc {seed} line {line}: measured value {}\n",
            mix(seed ^ line) % 10_000
        ));
        line += 1;
    }
    text.truncate(n_bytes);
    text
}

/// Counts a request as a provider that counts like SOBA would.
fn prompt_of(request: &ChatRequest) -> u64 {
    let counter = ByteCounter;
    let schemas: Vec<serde_json::Value> = request
        .tools
        .iter()
        .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}))
        .collect();
    let system = counter.count_text(&request.system).n.get() + 4;
    let tools = count_tool_schemas(&counter, &schemas).n.get();
    let messages: u64 = request
        .messages
        .iter()
        .map(|message| {
            count_message(&counter, message, TokenCount::new(1_100))
                .n
                .get()
        })
        .sum();
    system + tools + messages
}

/// The scripted model: by step number, one or two tool calls (turns of
/// up to three tool rounds) or a final answer.
fn answer(step: u64, request: &ChatRequest, rounds_done: u64) -> Message {
    let roll = mix(step);
    let rounds_wanted = 1 + roll % 3;
    let mut content = vec![Block::Text(text_of(step, 200 + (roll % 1_200) as usize))];
    if rounds_done < rounds_wanted {
        for idx in 0..(1 + (roll >> 8) % 2) {
            content.push(Block::ToolUse(ToolUse {
                id: format!("call_{step}_{idx}"),
                name: "fetch".into(),
                input: ToolInput::from_value(json!({ "n": step * 10 + idx })),
            }));
        }
    }
    let mut message = Message::new(Role::Assistant, content);
    message.usage = Some(Usage {
        input: prompt_of(request),
        output: 50,
        ..Usage::default()
    });
    message
}

/// The host's tool: mostly a few hundred to a few thousand tokens, now and
/// then 12,000 (above the model-input cap of 3,250, below nothing).
fn fetch(n: u64) -> String {
    let roll = mix(n ^ 0xF00D);
    let n_bytes = if roll.is_multiple_of(17) {
        48_000
    } else {
        800 + (roll % 9_000) as usize
    };
    text_of(n, n_bytes)
}

/// What the host loop saw.
#[derive(Default)]
struct Seen {
    steps: usize,
    largest_prompt: u64,
    compactions: Vec<(Trigger, Outcome)>,
    overflow_again: usize,
    resumes_checked: usize,
}

/// Asserts a prepared request is within every limit, independently of the
/// engine's own measurement.
fn check_fits(prepared: &Prepared, hard_limit: TokenCount, seen: &mut Seen) -> u64 {
    assert!(
        prepared.effective <= hard_limit,
        "effective {} > hardLimit {hard_limit}",
        prepared.effective
    );
    let prompt = prompt_of(&prepared.request);
    assert!(
        prompt <= hard_limit.get(),
        "the provider would see {prompt} tokens > hardLimit {hard_limit}"
    );
    seen.largest_prompt = seen.largest_prompt.max(prompt);
    if let Some(end) = &prepared.compaction {
        seen.compactions.push((end.trigger, end.outcome));
    }
    prompt
}

/// Resume check: a copy of the live log, opened as a second engine, sends
/// the same next request as the live engine after the same user message.
async fn check_resume(
    live: &Engine,
    copy_dir: &Path,
    idx: usize,
    user: &str,
    seen: &mut Seen,
) -> Prepared {
    let copy = copy_dir.join(format!("copy-{idx}.jsonl"));
    std::fs::copy(live.log_path(), &copy).unwrap();
    let resumed = Engine::open(&copy, config()).unwrap();
    assert!(
        resumed.diagnostics().is_empty(),
        "{:?}",
        resumed.diagnostics()
    );
    assert_eq!(
        resumed.current_request().await,
        live.current_request().await
    );
    live.append_user(user).await.unwrap();
    resumed.append_user(user).await.unwrap();
    let cancel = CancellationToken::new();
    let from_live = live.prepare(&cancel).await.unwrap();
    let from_resumed = resumed.prepare(&cancel).await.unwrap();
    assert_eq!(from_resumed.request, from_live.request, "resume {idx}");
    assert_eq!(from_resumed.effective, from_live.effective);
    assert_eq!(
        from_resumed
            .compaction
            .as_ref()
            .map(|end| (end.trigger, end.outcome, end.tokens_after)),
        from_live
            .compaction
            .as_ref()
            .map(|end| (end.trigger, end.outcome, end.tokens_after)),
    );
    seen.resumes_checked += 1;
    from_live
}

#[tokio::test]
async fn two_hundred_steps_stay_under_hard_limit_and_resume_gives_the_same_request() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sessions").join("host.jsonl");
    let copies = dir.path().join("copies");
    std::fs::create_dir_all(&copies).unwrap();
    let callback_ends = Arc::new(AtomicUsize::new(0));
    let counted = callback_ends.clone();
    let engine = Engine::create(
        &log,
        config().on_event(move |event| {
            if matches!(event, EngineEvent::CompactionEnd(_)) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }),
    )
    .unwrap();
    let hard_limit = engine.budget().hard_limit();
    assert_eq!(hard_limit, TokenCount::new(13_000));
    let mut receiver = engine.subscribe();
    let mut received_ends = 0;
    let cancel = CancellationToken::new();
    let mut seen = Seen::default();
    let mut step: u64 = 0;
    let mut turn: u64 = 0;
    while seen.steps < 200 {
        turn += 1;
        let user = format!(
            "Task {turn}: {}",
            text_of(turn + 1_000, 100 + (mix(turn) % 2_000) as usize)
        );
        let mut prepared = if turn.is_multiple_of(20) {
            // A turn boundary: the resumed copy must agree with the live run.
            Some(check_resume(&engine, &copies, turn as usize, &user, &mut seen).await)
        } else {
            engine.append_user(&user).await.unwrap();
            None
        };
        let mut rounds_done = 0;
        loop {
            let mut current = match prepared.take() {
                Some(current) => current,
                None => match engine.prepare(&cancel).await {
                    Ok(current) => current,
                    Err(err) => panic!("turn {turn}: {err}"),
                },
            };
            let prompt = check_fits(&current, hard_limit, &mut seen);
            seen.steps += 1;
            step += 1;
            // Now and then the provider refuses the request as too long:
            // once in turns ≡ 7 (mod 25), twice in a row in turns ≡ 13.
            if rounds_done == 0 && (turn % 25 == 7 || turn % 25 == 13) {
                if let Err(err) = engine.report_overflow(Some(prompt + 2_000)).await {
                    panic!("turn {turn}: the first overflow must be recovered: {err}");
                }
                let recovery = engine.prepare(&cancel).await.unwrap();
                let end = recovery
                    .compaction
                    .clone()
                    .expect("a forced compaction runs");
                assert_eq!(end.trigger, Trigger::ContextOverflow);
                let retried = check_fits(&recovery, hard_limit, &mut seen);
                seen.steps += 1;
                if turn % 25 == 13 {
                    // The retry overflows too: the turn fails, unretried.
                    let again = engine.report_overflow(Some(retried + 2_500)).await;
                    assert!(
                        matches!(again, Err(EmbedError::OverflowAgain { .. })),
                        "{again:?}"
                    );
                    seen.overflow_again += 1;
                    break;
                }
                current = recovery;
            }
            while let Ok(event) = receiver.try_recv() {
                if matches!(event, EngineEvent::CompactionEnd(_)) {
                    received_ends += 1;
                }
            }
            let reply = answer(step, &current.request, rounds_done);
            let calls: Vec<ToolUse> = reply.tool_uses().cloned().collect();
            engine.append_assistant(reply).await.unwrap();
            if calls.is_empty() {
                break;
            }
            for call in calls {
                let n = call
                    .input
                    .object()
                    .get("n")
                    .and_then(|v| v.as_u64())
                    .unwrap();
                engine
                    .append_tool_result(&call.id, fetch(n), false)
                    .await
                    .unwrap();
            }
            if step.is_multiple_of(9) {
                engine
                    .checkpoint(CheckpointKind::Milestone, format!("step {step} done"))
                    .await
                    .unwrap();
            }
            rounds_done += 1;
        }
    }
    while let Ok(event) = receiver.try_recv() {
        if matches!(event, EngineEvent::CompactionEnd(_)) {
            received_ends += 1;
        }
    }
    assert!(seen.steps >= 200);
    assert!(seen.resumes_checked >= 2, "{}", seen.resumes_checked);
    assert!(seen.overflow_again >= 1);
    assert!(seen.largest_prompt <= hard_limit.get());
    // Events reach both the callback and the subscriber, one per end.
    assert_eq!(callback_ends.load(Ordering::SeqCst), received_ends);
    assert!(received_ends >= seen.compactions.len());
    let completed = |trigger: Trigger| {
        seen.compactions
            .iter()
            .filter(|(t, outcome)| *t == trigger && *outcome == Outcome::Completed)
            .count()
    };
    assert!(
        completed(Trigger::ContextOverflow) >= 2,
        "{:?}",
        seen.compactions
    );
    assert!(
        completed(Trigger::AutoThreshold)
            + completed(Trigger::TurnComplete)
            + completed(Trigger::Milestone)
            >= 5,
        "{:?}",
        seen.compactions
    );
    drop(engine);

    // The log itself: every line valid, every capsule fits, the overflow
    // capsules carry their correction.
    let log = soba_store::reader::read_log(&log).unwrap();
    assert!(log.diagnostics().is_empty(), "{:?}", log.diagnostics());
    let mut overflow_capsules = 0;
    let mut hygiene = 0;
    for logged in log.entries() {
        match &logged.entry.body {
            EntryBody::Capsule(capsule) => {
                assert!(capsule.tokens_after <= hard_limit);
                if capsule.trigger == Trigger::ContextOverflow {
                    let overflow = capsule.overflow.expect("an overflow capsule records it");
                    assert!(overflow.stated_prompt.is_some());
                    overflow_capsules += 1;
                }
            }
            EntryBody::Hygiene { .. } => hygiene += 1,
            _ => {}
        }
    }
    assert!(overflow_capsules >= 2);
    assert!(hygiene >= 1);
}

/// A client that overflows a scripted number of times, then answers.
struct OverflowingClient {
    overflows_left: AtomicUsize,
    requests: StdMutex<Vec<u64>>,
}

impl ModelClient for OverflowingClient {
    fn api(&self) -> Api {
        Api::OpenAiChat
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            assert!(!cancel.is_cancelled());
            let prompt = prompt_of(request);
            self.requests.lock().unwrap().push(prompt);
            if self
                .overflows_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(ProviderError::ContextOverflow {
                    status: 400,
                    stated_prompt: Some(prompt + 3_000),
                    stated_limit: None,
                    body: "prompt is too long".into(),
                });
            }
            on_event(StreamEvent::TextDelta("done".into()));
            let mut message = Message::assistant("done");
            message.usage = Some(Usage {
                input: prompt,
                output: 1,
                ..Usage::default()
            });
            Ok(ChatResponse {
                message,
                stop_reason: StopReason::EndTurn,
            })
        })
    }
}

/// Fills a session with a few turns of large tool output.
async fn grown_engine(dir: &Path) -> Engine {
    // No turn_complete intent: the sessions below compact only when told.
    let quiet = CompactionConfig {
        compact_on_turn_complete: false,
        ..compaction()
    };
    let engine = Engine::create(&dir.join("s.jsonl"), config().with_compaction(quiet)).unwrap();
    for idx in 0..3u64 {
        engine.append_user(format!("fetch {idx}")).await.unwrap();
        let mut call = Message::new(
            Role::Assistant,
            vec![Block::ToolUse(ToolUse {
                id: format!("c{idx}"),
                name: "fetch".into(),
                input: ToolInput::from_value(json!({"n": idx})),
            })],
        );
        call.usage = None;
        engine.append_assistant(call).await.unwrap();
        engine
            .append_tool_result(format!("c{idx}"), text_of(idx, 5_000), false)
            .await
            .unwrap();
        engine
            .append_assistant(Message::assistant(text_of(idx + 50, 2_000)))
            .await
            .unwrap();
    }
    engine
}

#[tokio::test]
async fn step_recovers_one_overflow_per_turn_and_fails_on_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let engine = grown_engine(dir.path()).await;
    let client = OverflowingClient {
        overflows_left: AtomicUsize::new(1),
        requests: StdMutex::new(Vec::new()),
    };
    let cancel = CancellationToken::new();
    let mut streamed = Vec::new();
    let mut on_event = |event: StreamEvent| {
        if let StreamEvent::TextDelta(text) = event {
            streamed.push(text);
        }
    };
    engine.append_user("go on").await.unwrap();
    let step = engine.step(&client, &cancel, &mut on_event).await.unwrap();
    assert_eq!(step.message.text(), "done");
    assert_eq!(step.message.model.as_deref(), Some("host/model"));
    assert!(step.message.request_tokens_local.is_some());
    let triggers: Vec<Trigger> = step.compactions.iter().map(|end| end.trigger).collect();
    assert_eq!(triggers.last(), Some(&Trigger::ContextOverflow));
    assert_eq!(step.compactions.last().unwrap().outcome, Outcome::Completed);
    let sent = client.requests.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    assert!(sent[1] < sent[0], "the retry is smaller: {sent:?}");
    assert_eq!(streamed, vec!["done".to_owned()]);

    // Two overflows in one turn: the second is not retried.
    client.overflows_left.store(2, Ordering::SeqCst);
    engine.append_user("and again").await.unwrap();
    let failed = engine.step(&client, &cancel, &mut |_| {}).await;
    assert!(
        matches!(failed, Err(EmbedError::OverflowAgain { .. })),
        "{failed:?}"
    );
    assert_eq!(client.requests.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn compact_runs_a_user_capsule_and_cancel_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = grown_engine(dir.path()).await;
    let cancel = CancellationToken::new();
    let before = engine.measure().await;
    assert_eq!(before.source, MeasurementSource::Estimated);
    let end = engine
        .compact(Some("keep the measured values".into()), &cancel)
        .await
        .unwrap();
    assert_eq!(end.trigger, Trigger::User);
    assert_eq!(end.outcome, Outcome::Completed);
    assert_eq!(end.tokens_before, before.tokens);
    assert!(end.tokens_after < end.tokens_before);
    let capsule_request = engine.current_request().await;
    assert!(
        capsule_request.messages[0]
            .text()
            .starts_with("[Context capsule · user]")
    );
    assert_eq!(capsule_request.cache_breakpoints, vec![0]);

    let entries_before = std::fs::read_to_string(engine.log_path()).unwrap();
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    engine.append_user("one more").await.unwrap();
    let with_user = std::fs::read_to_string(engine.log_path()).unwrap();
    assert!(with_user.starts_with(&entries_before));
    assert!(matches!(
        engine.prepare(&cancelled).await,
        Err(EmbedError::Cancelled { .. })
    ));
    assert!(matches!(
        engine.compact(None, &cancelled).await,
        Err(EmbedError::Cancelled { .. })
    ));
    assert_eq!(
        std::fs::read_to_string(engine.log_path()).unwrap(),
        with_user
    );
}

#[tokio::test]
async fn a_second_writer_is_refused_and_rewind_rebuilds_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let engine = grown_engine(dir.path()).await;
    let err = Engine::open(engine.log_path(), config()).unwrap_err();
    assert!(matches!(err, EmbedError::Engine(_)), "{err:?}");
    let first = engine.current_request().await;
    let user = engine.append_user("a detour").await.unwrap();
    assert_ne!(engine.current_request().await, first);
    let core_parent = {
        let core = engine.core().lock().await;
        core.entry(&user)
            .and_then(|entry| entry.parent_id.clone())
            .unwrap()
    };
    engine.rewind(core_parent).await.unwrap();
    assert_eq!(engine.current_request().await, first);
}

#[test]
fn token_cancellation_follows_the_token() {
    let token = CancellationToken::new();
    let adapter = TokenCancellation(&token);
    assert!(!adapter.is_cancelled());
    token.cancel();
    assert!(adapter.is_cancelled());
}

/// An entry of a type this version does not know stays on the path
/// (docs/session-log-format.md, "Unknown types"): the live engine keeps
/// the history behind it.
#[tokio::test]
async fn an_unknown_entry_type_on_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let engine = Engine::create(&path, config()).unwrap();
    engine.append_user("first").await.unwrap();
    let leaf = engine
        .append_assistant(Message::assistant("one"))
        .await
        .unwrap();
    let before = engine.current_request().await;
    drop(engine);
    // Another writer (a newer version) appended an entry of a new type.
    let line = format!(
        r#"{{"type":"bookmark","id":"e_01943b300000700080000000000000f1","parentId":"{}","timestamp":"2025-01-01T00:00:00Z","label":"x"}}"#,
        leaf.as_str()
    );
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&line);
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let engine = Engine::open(&path, config()).unwrap();
    assert!(engine.diagnostics().is_empty());
    assert_eq!(engine.current_request().await, before);
    engine.append_user("second").await.unwrap();
    assert_eq!(engine.current_request().await.messages.len(), 3);
    drop(engine);
    let engine = Engine::open(&path, config()).unwrap();
    // Resume keeps the unknown entry on the path, so the history behind it
    // is there, as live.
    assert_eq!(engine.current_request().await.messages.len(), 3);
}

/// Returns (calls, results) of a request's messages: each call's id, and
/// each result's id with its text.
fn calls_and_results(request: &ChatRequest) -> (Vec<String>, Vec<(String, String)>) {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for message in &request.messages {
        for block in &message.content {
            match block {
                Block::ToolUse(call) => calls.push(call.id.clone()),
                Block::ToolResult(result) => results.push((
                    result.tool_use_id.clone(),
                    match result.content.first() {
                        Some(soba_core::ResultPart::Text(text)) => text.clone(),
                        _ => String::new(),
                    },
                )),
                _ => {}
            }
        }
    }
    (calls, results)
}

#[tokio::test]
async fn calls_sharing_an_id_are_renamed_and_keep_their_own_results() {
    let dir = tempfile::tempdir().unwrap();
    let warnings = Arc::new(StdMutex::new(Vec::new()));
    let sink = warnings.clone();
    let config = config().on_event(move |event| {
        if let EngineEvent::Warning { message } = event {
            sink.lock().unwrap().push(message.clone());
        }
    });
    let engine = Engine::create(&dir.path().join("s.jsonl"), config).unwrap();
    let fetch_call = |id: &str, n: u64| {
        Block::ToolUse(ToolUse {
            id: id.into(),
            name: "fetch".into(),
            input: ToolInput::from_value(json!({ "n": n })),
        })
    };
    engine.append_user("fetch 1 and 2").await.unwrap();
    let twice = Message::new(
        Role::Assistant,
        vec![fetch_call("dup", 1), fetch_call("dup", 2)],
    );
    engine.append_assistant(twice).await.unwrap();
    // The host answers under the id the model gave, in order.
    engine
        .append_tool_result("dup", "doc 1", false)
        .await
        .unwrap();
    engine
        .append_tool_result("dup", "doc 2", false)
        .await
        .unwrap();
    // A later step reuses an id already on the path.
    let again = Message::new(Role::Assistant, vec![fetch_call("dup", 3)]);
    engine.append_assistant(again).await.unwrap();
    engine
        .append_tool_result("dup", "doc 3", false)
        .await
        .unwrap();
    let prepared = engine.prepare(&CancellationToken::new()).await.unwrap();
    let (calls, results) = calls_and_results(&prepared.request);
    assert_eq!(calls, ["dup", "dup_2", "dup_3"]);
    assert_eq!(
        results,
        [
            ("dup".to_owned(), "doc 1".to_owned()),
            ("dup_2".to_owned(), "doc 2".to_owned()),
            ("dup_3".to_owned(), "doc 3".to_owned()),
        ]
    );
    assert_eq!(
        *warnings.lock().unwrap(),
        [
            "the model gave tool-call id \"dup\" to more than one call; this call is \"dup_2\", so each call is paired with its own result",
            "the model gave tool-call id \"dup\" to more than one call; this call is \"dup_3\", so each call is paired with its own result",
        ]
    );
}
