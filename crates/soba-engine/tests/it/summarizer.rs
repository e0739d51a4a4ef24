//! The LLM summarizer of soba-provider inside the barrier, end to end
//! against two fake servers (the conversation and the summarizer): guard
//! rejections (SPEC §9.3), chunked summarization oldest first carrying the
//! state, overflow halving, and progress from the streamed tokens (§9.2).
//! The recorded summarizer request bodies are compared exactly with what
//! soba-core's chunker and prompt give for the span.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use soba_core::plan::{self, PlanRequest};
use soba_core::summarize::{self, Summarizer, SummaryRequest};
use soba_core::tokens::ByteCounter;
use soba_core::{Capsule, Entry, EntryBody, Quality, TokenCount, TokenCounter, Trigger};
use soba_engine::barrier::{Forced, Preflight};
use soba_engine::event::{EngineEvent, Outcome, TurnEnd};
use soba_provider::client::{Endpoint, ModelClient};
use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
use soba_provider::registry::{ModelOverride, ModelRegistry};
use soba_provider::summarizer::LlmSummarizer;
use soba_provider::transport::{HttpConfig, OpenAiChatClient, RetryPolicy};
use tokio_util::sync::CancellationToken;

use crate::harness::{Harness, Options, assert_paired, capsule_triggers, small_config};

const HARD_LIMIT: u64 = 13_000;
/// `summarizer.maxOutputTokens` in the chunking tests: small, so that a
/// window a quarter of the span still leaves room for span text.
const MAX_OUT: u32 = 100;

/// A summary with the eight headings, `note` under each.
fn summary(note: &str) -> String {
    let mut text = [
        "Goal",
        "Constraints",
        "Done",
        "In progress",
        "Pending",
        "Decisions",
        "Blockers",
        "Next steps",
    ]
    .iter()
    .map(|heading| format!("## {heading}\n{note}\n"))
    .collect::<Vec<_>>()
    .join("\n");
    text.push_str("END-OF-SUMMARY");
    text
}

fn http() -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        stream_timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        },
    }
}

/// Returns the LLM summarizer for `openai/gpt-5-mini` on `server` (Chat
/// Completions), with the window `window` when given, counting streamed
/// text like the harness (`ceil(bytes / 4)`).
fn llm(server: &FakeServer, window: Option<u64>) -> Arc<LlmSummarizer> {
    let mut registry = ModelRegistry::new();
    if let Some(window) = window {
        registry.set_override(
            "openai/gpt-5-mini",
            ModelOverride {
                context_window: Some(window),
                ..ModelOverride::default()
            },
        );
    }
    let info = registry.resolve("openai/gpt-5-mini").unwrap();
    let endpoint = Endpoint::new(server.url()).with_api_key("sk-summarizer");
    let client: Arc<dyn ModelClient> = Arc::new(OpenAiChatClient::new(endpoint, http()).unwrap());
    Arc::new(LlmSummarizer::new(client, &info).with_counter(Arc::new(ByteCounter)))
}

/// Queues a Chat answer with `text`, streamed in large pieces.
fn push_summary(server: &FakeServer, text: &str) {
    let mut reply = Reply::text(text);
    reply.chunk_chars = 4_096;
    server.push(Script::stream(Dialect::Chat, &reply));
}

/// The recorded `<conversation>` of a summarizer request.
fn prompt_of(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap().to_owned()
}

fn expected_body(request: &SummaryRequest) -> Value {
    json!({
        "model": "gpt-5-mini",
        "messages": [{"role": "user", "content": request.prompt()}],
        "max_tokens": request.max_output_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

fn capsules(entries: &[Entry]) -> Vec<Capsule> {
    entries
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => Some((**capsule).clone()),
            _ => None,
        })
        .collect()
}

/// Runs the guard scenario: a soft attempt at autoLimit gets `bad`
/// (nothing appended), then hard_limit gets `bad` again (a degraded
/// deterministic capsule).
async fn check_guard(bad: &str, guard: &str) {
    check_guard_after(bad, guard, |_| {}).await;
}

/// [`check_guard`] with `setup` queueing model replies before the reads.
async fn check_guard_after(bad: &str, guard: &str, setup: impl Fn(&Harness)) {
    let summary_server = FakeServer::start().await.unwrap();
    let mut compaction = small_config();
    compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
    compaction.timeout_ms = 400;
    let h = Harness::start(Options {
        compaction,
        summarizer: Some(llm(&summary_server, None)),
        ..Options::default()
    })
    .await;
    push_summary(&summary_server, bad);
    push_summary(&summary_server, bad);
    setup(&h);
    for idx in 0..14 {
        h.push_read(&format!("data/file{idx:02}.txt"));
    }
    h.push_text("done");
    assert_eq!(h.turn("read them all").await, TurnEnd::Completed, "{guard}");

    let ends = h.compaction_ends();
    assert_eq!(ends.len(), 2, "{guard}: {ends:#?}");
    assert_eq!(
        (ends[0].trigger, ends[0].outcome),
        (Trigger::AutoThreshold, Outcome::Failed),
        "{guard}"
    );
    assert_eq!(
        ends[0].reason.as_deref(),
        Some(format!("summary rejected by guard {guard}").as_str())
    );
    assert_eq!(ends[0].checkpoint_id, None);
    assert_eq!(
        (ends[1].trigger, ends[1].outcome, ends[1].quality),
        (
            Trigger::HardLimit,
            Outcome::Completed,
            Some(Quality::Degraded)
        ),
        "{guard}"
    );
    assert!(ends[1].tokens_before.get() > HARD_LIMIT);
    // The forced capsule says why the summary was not used.
    assert_eq!(
        ends[1].reason.as_deref(),
        Some(
            format!("fallback used: deterministic capsule (summary rejected by guard {guard})")
                .as_str()
        )
    );
    // Only the forced capsule was appended, and it is the deterministic one.
    let entries = h.logged_entries();
    assert_eq!(capsule_triggers(&entries), vec!["hard_limit"], "{guard}");
    let capsule = &capsules(&entries)[0];
    assert_eq!(
        (capsule.quality, capsule.summarizer.as_str()),
        (Quality::Degraded, "deterministic")
    );
    assert_eq!(summary_server.requests().len(), 2, "{guard}");
    assert_paired(&h.server);
}

#[tokio::test]
async fn a_placeholder_summary_appends_nothing_soft_and_degrades_forced() {
    check_guard("Generating…", "placeholder").await;
}

#[tokio::test]
async fn a_too_short_summary_appends_nothing_soft_and_degrades_forced() {
    check_guard("## Goal\nparse\nEND-OF-SUMMARY", "too_short").await;
}

#[tokio::test]
async fn a_summary_not_smaller_than_its_span_appends_nothing_soft_and_degrades_forced() {
    // 30,000 tokens under the byte counter: more than either span (the soft
    // one is below autoLimit 10,400, the forced one about hardLimit 13,000).
    let bloated = summary(&"the data files hold the quick brown fox. ".repeat(360));
    assert!(ByteCounter.count_text(&bloated).n.get() > 14_000);
    check_guard(&bloated, "not_smaller").await;
}

#[tokio::test]
async fn a_summary_missing_a_heading_appends_nothing_soft_and_degrades_forced() {
    let text = summary("Reading the data files one by one to audit their contents.")
        .replace("## Next steps\n", "## Then\n");
    check_guard(&text, "missing_heading:next_steps").await;
}

/// Queues the model's `update_plan` call marking the audit done and the
/// report pending.
fn push_audit_plan(h: &Harness) {
    h.push_call(
        "update_plan",
        json!({"plan": [
            {"step": "Audit the data files", "status": "completed"},
            {"step": "Write the audit report", "status": "pending"},
        ]}),
    );
}

/// A summary whose open-work sections hold `in_progress`, `pending` and
/// `next_steps`, the other sections a plain note.
fn summary_with(in_progress: &str, pending: &str, next_steps: &str) -> String {
    summary("Reading the data files one by one to audit their contents.")
        .replacen(
            "## In progress\nReading the data files one by one to audit their contents.",
            &format!("## In progress\n{in_progress}"),
            1,
        )
        .replacen(
            "## Pending\nReading the data files one by one to audit their contents.",
            &format!("## Pending\n{pending}"),
            1,
        )
        .replacen(
            "## Next steps\nReading the data files one by one to audit their contents.",
            &format!("## Next steps\n{next_steps}"),
            1,
        )
}

#[tokio::test]
async fn a_summary_the_log_contradicts_three_times_appends_nothing_soft_and_degrades_forced() {
    let text = summary_with(
        "- Auditing the data files",
        "- Audit the data files",
        "- Audit the data files again",
    );
    check_guard_after(&text, "contradicts_log", push_audit_plan).await;
}

#[tokio::test]
async fn a_summary_item_the_plan_marks_done_is_removed_and_the_flight_record_says_why() {
    let summary_server = FakeServer::start().await.unwrap();
    let mut compaction = small_config();
    compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
    compaction.timeout_ms = 400;
    let h = Harness::start(Options {
        compaction,
        summarizer: Some(llm(&summary_server, None)),
        ..Options::default()
    })
    .await;
    let text = summary_with(
        "- Auditing the data files",
        "- Write the audit report",
        "- Write the audit report",
    )
    .replacen(
        "## Blockers\nReading the data files one by one to audit their contents.",
        "## Blockers\nThe auditor's key is missing",
        1,
    );
    push_summary(&summary_server, &text);
    push_audit_plan(&h);
    for idx in 0..14 {
        h.push_read(&format!("data/file{idx:02}.txt"));
    }
    h.push_text("done");
    assert_eq!(h.turn("audit them all").await, TurnEnd::Completed);

    let ends = h.compaction_ends();
    assert_eq!(
        (ends[0].trigger, ends[0].outcome, ends[0].quality),
        (
            Trigger::AutoThreshold,
            Outcome::Completed,
            Some(Quality::Full)
        ),
        "{ends:#?}"
    );
    assert_eq!(
        ends[0].reason.as_deref(),
        Some(
            "consistency guard removed 1 summary item the log contradicts: In progress item \
             \"- Auditing the data files\": the plan marks \"Audit the data files\" completed"
        )
    );
    let entries = h.logged_entries();
    let capsule = &capsules(&entries)[0];
    assert_eq!(capsule.quality, Quality::Full);
    // The model's blocker stays; the open work is the plan's.
    assert!(
        capsule.markdown.contains("The auditor's key is missing"),
        "{}",
        capsule.markdown
    );
    assert!(
        !capsule.markdown.contains("Auditing the data files"),
        "{}",
        capsule.markdown
    );
}

/// A harness whose conversation read `n_reads` files of 1,900 bytes (each
/// whole in the summarizer's input, under its 2,000-character cap), with
/// `summarizer.maxOutputTokens` = [`MAX_OUT`], no compaction so far.
async fn read_files(n_reads: usize) -> Harness {
    read_files_with(n_reads, MAX_OUT).await
}

/// [`read_files`] with `summarizer.maxOutputTokens` = `max_out`.
async fn read_files_with(n_reads: usize, max_out: u32) -> Harness {
    read_files_capped(n_reads, max_out, 64).await
}

/// [`read_files_with`] with `summarizer.maxChunks` = `max_chunks`.
async fn read_files_capped(n_reads: usize, max_out: u32, max_chunks: usize) -> Harness {
    let mut compaction = small_config();
    compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
    compaction.summarizer.max_output_tokens = TokenCount::new(u64::from(max_out));
    compaction.compact_on_turn_complete = false;
    // Most of these tests check the chunking of a whole span (11 chunks at
    // most); the cap on chunks has tests of its own (`huge.rs`).
    compaction.summarizer.max_chunks = max_chunks;
    let h = Harness::start(Options {
        compaction,
        summarizer: None,
        files: (0..n_reads)
            .map(|idx| (format!("notes/n{idx:02}.txt"), 1_900))
            .collect(),
    })
    .await;
    for idx in 0..n_reads {
        h.push_read(&format!("notes/n{idx:02}.txt"));
    }
    h.push_text("all notes read");
    assert_eq!(h.turn("read the notes").await, TurnEnd::Completed);
    assert!(h.compaction_ends().is_empty(), "{:#?}", h.compaction_ends());
    h
}

/// The summarizer's items of the span a `/compact` would summarize now.
async fn user_span_items(h: &Harness) -> Vec<String> {
    let core = h.core.lock().await;
    let request = PlanRequest {
        trigger: Trigger::User,
        effective: core.measure().tokens,
        budget: core.budget(),
        summarizer_max_output_tokens: TokenCount::new(u64::from(MAX_OUT)),
        facts_tokens: TokenCount::ZERO,
        rehydrate_tokens: soba_core::TokenCount::ZERO,
        factor: core.factor(),
    };
    let planned = plan::plan(core.live(), &request).unwrap();
    assert_eq!(planned.skip, None);
    let span: Vec<Entry> = core
        .path()
        .iter()
        .filter(|entry| planned.span_entry_ids.contains(&entry.id))
        .cloned()
        .collect();
    summarize::span_items(&span)
}

/// The prompt's own size: what `chunk_tokens` takes from any window
/// besides the state and the output.
fn prompt_overhead() -> u64 {
    let wide = TokenCount::new(100_000);
    wide.get() - summarize::chunk_tokens(wide, MAX_OUT, None, None, &ByteCounter).get()
}

async fn compact_now(h: &Harness) -> Preflight {
    h.agent
        .barrier
        .preflight(
            Some(Forced::User { instructions: None }),
            &CancellationToken::new(),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_span_four_times_the_window_is_summarized_in_chunks_oldest_first() {
    let mut h = read_files(12).await;
    let items = user_span_items(&h).await;
    let span_tokens = ByteCounter.count_text(&items.join("\n\n")).n.get();
    let window = span_tokens / 4;
    assert!(window > prompt_overhead() + 2 * u64::from(MAX_OUT) + 200);
    let summary_server = FakeServer::start().await.unwrap();
    let summarizer = llm(&summary_server, Some(window));
    assert_eq!(summarizer.window_tokens().get(), window);
    h.agent.barrier.summarizer = Some(summarizer.clone());

    let budget = summarize::chunk_tokens(
        summarizer.window_tokens(),
        MAX_OUT,
        None,
        None,
        &ByteCounter,
    );
    let chunks = summarize::chunk_span(&items, budget, &ByteCounter);
    assert!(chunks.len() >= 5, "{} chunks", chunks.len());
    let replies: Vec<String> = (0..chunks.len())
        .map(|idx| summary(&format!("state after part {}", idx + 1)))
        .collect();
    for reply in &replies {
        push_summary(&summary_server, reply);
    }

    let end = match compact_now(&h).await {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Full))
    );

    // One request per chunk, oldest first, each carrying the state the
    // previous one returned; the bodies are exactly what the prompt gives.
    let requests = summary_server.requests();
    assert_eq!(requests.len(), chunks.len());
    for (idx, recorded) in requests.iter().enumerate() {
        assert_eq!(recorded.path, "/chat/completions");
        let expected = SummaryRequest {
            previous_state: idx.checked_sub(1).map(|prev| replies[prev].clone()),
            span_text: chunks[idx].clone(),
            chunk_index: idx,
            chunk_count: chunks.len(),
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: MAX_OUT,
        };
        assert_eq!(recorded.body, expected_body(&expected), "request {idx}");
    }
    // The chunks cover the span in order.
    let first = prompt_of(&requests[0].body);
    assert!(first.contains("<conversation>\n[user]\nread the notes"));
    assert!(!first.contains("<previous-state>"));
    let last = prompt_of(&requests[chunks.len() - 1].body);
    assert!(last.contains("<previous-state>\n## Goal\nstate after part"));

    // The capsule holds the last state's narrative.
    let capsule = capsules(&h.logged_entries()).pop().unwrap();
    assert_eq!(capsule.summarizer, "openai/gpt-5-mini");
    assert_eq!(
        capsule.narrative.next_steps.trim(),
        format!("state after part {}", chunks.len())
    );

    // Progress only goes up, below 100 %.
    let progress: Vec<u8> = h
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            EngineEvent::CompactionProgress { percent, .. } => Some(*percent),
            _ => None,
        })
        .collect();
    assert!(progress.len() >= chunks.len() - 1, "{progress:?}");
    assert!(
        progress.windows(2).all(|pair| pair[0] < pair[1]),
        "{progress:?}"
    );
    assert!(progress.iter().all(|percent| *percent <= 99));
}

/// Returns a window whose chunk budget is the span plus 50 tokens: the span
/// fits one chunk, but not half of one.
fn one_chunk_window(items: &[String]) -> u64 {
    let span_tokens = ByteCounter.count_text(&items.join("\n\n")).n.get();
    span_tokens + 50 + prompt_overhead() + 2 * u64::from(MAX_OUT)
}

#[tokio::test]
async fn a_summarizer_overflow_halves_the_chunk_and_retries_once() {
    let mut h = read_files(6).await;
    let items = user_span_items(&h).await;
    let summary_server = FakeServer::start().await.unwrap();
    let summarizer = llm(&summary_server, Some(one_chunk_window(&items)));
    h.agent.barrier.summarizer = Some(summarizer.clone());
    let budget = summarize::chunk_tokens(
        summarizer.window_tokens(),
        MAX_OUT,
        None,
        None,
        &ByteCounter,
    );
    let whole = summarize::chunk_span(&items, budget, &ByteCounter);
    assert_eq!(whole.len(), 1);
    let halves = summarize::chunk_span(&whole, TokenCount::new(budget.get() / 2), &ByteCounter);
    // A single oversized chunk is cut at line ends, so halving can give
    // more than two pieces; each fits half the budget.
    assert!(halves.len() >= 2, "{} pieces", halves.len());
    summary_server.push(Script::overflow("openai").unwrap());
    let replies: Vec<String> = (0..halves.len())
        .map(|idx| summary(&format!("piece {} read", idx + 1)))
        .collect();
    for reply in &replies {
        push_summary(&summary_server, reply);
    }

    let end = match compact_now(&h).await {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Full))
    );
    let requests = summary_server.requests();
    assert_eq!(requests.len(), 1 + halves.len());
    let request = |previous: Option<&String>, span: &str, index: usize, count: usize| {
        expected_body(&SummaryRequest {
            previous_state: previous.cloned(),
            span_text: span.to_owned(),
            chunk_index: index,
            chunk_count: count,
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: MAX_OUT,
        })
    };
    // The whole span once, then the halved pieces, each after the state of
    // the one before.
    assert_eq!(requests[0].body, request(None, &whole[0], 0, 1));
    for (idx, piece) in halves.iter().enumerate() {
        assert_eq!(
            requests[1 + idx].body,
            request(
                idx.checked_sub(1).map(|prev| &replies[prev]),
                piece,
                idx,
                halves.len()
            ),
            "piece {idx}"
        );
    }
    let capsule = capsules(&h.logged_entries()).pop().unwrap();
    assert_eq!(
        capsule.narrative.goal.trim(),
        format!("piece {} read", halves.len())
    );
}

/// The cap bounds every summarizer call, the overflowing one included:
/// halved chunks that would need more calls than `maxChunks` allows fall
/// back to the deterministic capsule without another call.
#[tokio::test]
async fn an_overflow_whose_halves_exceed_the_chunk_cap_degrades_without_retrying() {
    let probe = read_files(6).await;
    let items = user_span_items(&probe).await;
    let window = one_chunk_window(&items);
    drop(probe);
    let budget =
        summarize::chunk_tokens(TokenCount::new(window), MAX_OUT, None, None, &ByteCounter);
    let whole = summarize::chunk_span(&items, budget, &ByteCounter);
    let halves = summarize::chunk_span(&whole, TokenCount::new(budget.get() / 2), &ByteCounter);
    assert!(halves.len() >= 2, "{} pieces", halves.len());
    // The overflowing call plus the halves need 1 + halves calls.
    let mut h = read_files_capped(6, MAX_OUT, halves.len()).await;
    let summary_server = FakeServer::start().await.unwrap();
    let summarizer = llm(&summary_server, Some(window));
    h.agent.barrier.summarizer = Some(summarizer.clone());
    summary_server.push(Script::overflow("openai").unwrap());
    for idx in 0..halves.len() {
        push_summary(
            &summary_server,
            &summary(&format!("piece {} read", idx + 1)),
        );
    }
    let end = match compact_now(&h).await {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Degraded))
    );
    assert_eq!(summary_server.requests().len(), 1);
    assert!(
        end.reason
            .as_deref()
            .is_some_and(|reason| reason.contains("more than compaction.summarizer.maxChunks")),
        "{:?}",
        end.reason
    );
}

#[tokio::test]
async fn a_second_overflow_is_not_retried_and_a_forced_compaction_degrades() {
    let mut h = read_files(6).await;
    let items = user_span_items(&h).await;
    let summary_server = FakeServer::start().await.unwrap();
    h.agent.barrier.summarizer = Some(llm(&summary_server, Some(one_chunk_window(&items))));
    summary_server.push(Script::overflow("openai").unwrap());
    summary_server.push(Script::overflow("openai").unwrap());
    summary_server.push(Script::stream(
        Dialect::Chat,
        &Reply::text(summary("never asked")),
    ));

    let end = match compact_now(&h).await {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (end.trigger, end.outcome, end.quality),
        (Trigger::User, Outcome::Completed, Some(Quality::Degraded))
    );
    assert_eq!(summary_server.requests().len(), 2);
    let capsule = capsules(&h.logged_entries()).pop().unwrap();
    assert_eq!(capsule.summarizer, "deterministic");
}

/// A summary of exactly `bytes` ASCII bytes (`bytes / 4` tokens under the
/// byte counter): the eight headings, then filler under the last one.
fn summary_of_len(note: &str, bytes: usize) -> String {
    let head = summary(note);
    let head = head.strip_suffix("END-OF-SUMMARY").unwrap();
    let filler = bytes - head.len() - "\nEND-OF-SUMMARY".len();
    let text = format!("{head}{}\nEND-OF-SUMMARY", "z".repeat(filler));
    assert_eq!(text.len(), bytes);
    text
}

/// Queues a Chat answer with `text`, streamed in deltas of `delta_chars`.
fn push_streamed(server: &FakeServer, text: &str, delta_chars: usize) {
    let mut reply = Reply::text(text);
    reply.chunk_chars = delta_chars;
    server.push(Script::stream(Dialect::Chat, &reply));
}

/// The progress percentages of the one compaction in `h`'s events, after
/// checking they belong to it and all come before its end.
fn progress_of_one_compaction(h: &Harness) -> Vec<u8> {
    let events = h.events.lock().unwrap();
    let starts: Vec<&String> = events
        .iter()
        .filter_map(|event| match event {
            EngineEvent::CompactionStart { operation_id, .. } => Some(operation_id),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 1, "{events:#?}");
    let end_at = events
        .iter()
        .position(|event| matches!(event, EngineEvent::CompactionEnd(end) if &end.operation_id == starts[0]))
        .unwrap();
    let mut progress = Vec::new();
    for (idx, event) in events.iter().enumerate() {
        if let EngineEvent::CompactionProgress {
            operation_id,
            percent,
        } = event
        {
            assert_eq!(operation_id, starts[0]);
            assert!(idx < end_at, "progress after the end: {events:#?}");
            progress.push(*percent);
        }
    }
    progress
}

#[tokio::test]
async fn progress_counts_the_streamed_tokens_of_a_single_chunk_over_1200() {
    // maxOutputTokens 2,000: the divisor is min(2,000, 1,200) = 1,200.
    let mut h = read_files_with(12, 2_000).await;
    let summary_server = FakeServer::start().await.unwrap();
    h.agent.barrier.summarizer = Some(llm(&summary_server, None));
    // 1,200 tokens, streamed 120 at a time.
    let text = summary_of_len("read the notes", 4_800);
    push_streamed(&summary_server, &text, 480);

    let end = match compact_now(&h).await {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Full))
    );
    assert_eq!(summary_server.requests().len(), 1);
    assert_eq!(
        summary_server.requests()[0].body["max_tokens"],
        json!(2_000)
    );
    // 120 tokens of 1,200 per step: 10 % each, 600 tokens at 50 %; the
    // whole chunk is held at 99 % until the append ends the operation.
    assert_eq!(
        progress_of_one_compaction(&h),
        [10, 20, 30, 40, 50, 60, 70, 80, 90, 99]
    );
}

#[tokio::test]
async fn progress_over_two_chunks_caps_each_chunk_and_holds_at_99() {
    let mut h = read_files(6).await;
    let items = user_span_items(&h).await;
    let span_tokens = ByteCounter.count_text(&items.join("\n\n")).n.get();
    // A chunk budget of 60 % of the span: two chunks.
    let window = span_tokens * 3 / 5 + prompt_overhead() + 2 * u64::from(MAX_OUT);
    let summary_server = FakeServer::start().await.unwrap();
    let summarizer = llm(&summary_server, Some(window));
    h.agent.barrier.summarizer = Some(summarizer.clone());
    let budget = summarize::chunk_tokens(
        summarizer.window_tokens(),
        MAX_OUT,
        None,
        None,
        &ByteCounter,
    );
    assert_eq!(summarize::chunk_span(&items, budget, &ByteCounter).len(), 2);
    // maxOutputTokens 100 is the divisor. The first reply streams 150
    // tokens, 50 at a time; the second 100 tokens, 25 at a time.
    push_streamed(&summary_server, &summary_of_len("first half", 600), 200);
    push_streamed(&summary_server, &summary_of_len("second half", 400), 100);

    let end = match compact_now(&h).await {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Full))
    );
    assert_eq!(summary_server.requests().len(), 2);
    // First chunk: 50/100 → 25 %, 100/100 → 50 %, 150 counts as 100 (no
    // event), and its end is 50 % again (no event). Second chunk: (1 +
    // 25/100) / 2 → 62 %, 75 %, 87 %, then 99 % (not 100) for the whole
    // span until the append.
    assert_eq!(progress_of_one_compaction(&h), [25, 50, 62, 75, 87, 99]);
}
