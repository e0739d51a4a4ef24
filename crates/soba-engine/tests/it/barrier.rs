//! End-to-end tests of the preflight barrier and the agent loop against
//! the fake provider server (SPEC §6–§7, issue "engine").

use std::sync::Arc;

use soba_core::summarize::{FakeReply, FakeSummarizer};
use soba_core::summarize::{
    SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse,
};
use soba_core::{EntryBody, EntryId, Quality, TokenCount, Trigger};
use soba_engine::event::{EngineEvent, Outcome, TurnEnd};
use soba_engine::session::SessionCore;
use soba_provider::fake::Script;
use soba_store::log::WriterOptions;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::harness::{Harness, Options, assert_paired, capsule_triggers};

const HARD_LIMIT: u64 = 13_000;
const AUTO_LIMIT: u64 = 10_400;
const ROI_FLOOR: u64 = 500;

/// A summary that passes every guard.
fn valid_summary() -> String {
    [
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
    .map(|heading| {
        format!("## {heading}\nReading the data files one by one to audit their contents.\n")
    })
    .collect::<Vec<_>>()
    .join("\n")
}

/// Options with an LLM summarizer and hygiene kept out of the way.
fn llm_options(summarizer: Arc<dyn Summarizer>) -> Options {
    let mut compaction = crate::harness::small_config();
    compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
    Options {
        compaction,
        summarizer: Some(summarizer),
        ..Options::default()
    }
}

fn files_read(n: usize) -> Vec<String> {
    (0..n)
        .map(|idx| format!("data/file{:02}.txt", idx % 40))
        .collect()
}

#[tokio::test]
async fn budget_of_the_test_model_is_the_documented_one() {
    let h = Harness::start(Options::default()).await;
    let core = h.core.lock().await;
    let budget = core.budget();
    assert_eq!(budget.hard_limit().get(), HARD_LIMIT);
    assert_eq!(budget.auto_limit().get(), AUTO_LIMIT);
    assert_eq!(budget.hygiene_limit().get(), 6_500);
    assert_eq!(budget.keep_recent().get(), 1_000);
    assert_eq!(budget.soft_gate().get(), 2_000);
    assert_eq!(budget.roi_floor().get(), ROI_FLOOR);
}

#[tokio::test]
async fn a_long_turn_prunes_once_then_compacts_at_auto_limit_and_rearms() {
    let h = Harness::start(Options::default()).await;
    for path in files_read(26) {
        h.push_read(&path);
    }
    h.push_text("audit done");
    assert_eq!(h.turn("read every data file").await, TurnEnd::Completed);

    // Hygiene: once in the turn, persisted.
    assert_eq!(h.hygiene_events(), 1);
    assert_eq!(h.count_logged("hygiene"), 1);

    // auto_threshold at the first preflight at or above autoLimit, then a
    // second soft compaction in the same turn only under the re-arm rule.
    let ends = h.compaction_ends();
    let completed: Vec<_> = ends
        .iter()
        .filter(|end| end.outcome == Outcome::Completed)
        .collect();
    assert!(completed.len() >= 2, "{ends:#?}");
    assert!(
        completed
            .iter()
            .all(|end| end.trigger == Trigger::AutoThreshold)
    );
    assert!(completed[0].tokens_before.get() >= AUTO_LIMIT);
    assert!(
        completed[0].tokens_before.get() < AUTO_LIMIT + 1_300,
        "fired late: {completed:#?}"
    );
    for pair in completed.windows(2) {
        let rearm = AUTO_LIMIT.max(pair[0].tokens_after.get() + ROI_FLOOR);
        assert!(pair[1].tokens_before.get() >= rearm, "{pair:#?}");
    }
    assert!(
        completed
            .iter()
            .all(|end| end.tokens_after.get() <= HARD_LIMIT)
    );
    assert_eq!(capsule_triggers(&h.logged_entries()).len(), completed.len());
    assert_paired(&h.server);
}

#[tokio::test]
async fn a_failed_soft_attempt_caps_the_turn_but_hard_limit_still_fires() {
    let summarizer = Arc::new(FakeSummarizer::new([
        FakeReply::Text("Generating…".into()),
        FakeReply::Text(valid_summary()),
    ]));
    let options = llm_options(summarizer.clone());
    let h = Harness::start(options).await;
    for path in files_read(14) {
        h.push_read(&path);
    }
    h.push_text("done");
    assert_eq!(h.turn("read them all").await, TurnEnd::Completed);

    let ends = h.compaction_ends();
    assert_eq!(ends.len(), 2, "{ends:#?}");
    assert_eq!(
        (ends[0].trigger, ends[0].outcome),
        (Trigger::AutoThreshold, Outcome::Failed)
    );
    assert!(
        ends[0]
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("placeholder"),
        "{:?}",
        ends[0].reason
    );
    assert_eq!(
        (ends[1].trigger, ends[1].outcome),
        (Trigger::HardLimit, Outcome::Completed)
    );
    assert!(ends[1].tokens_before.get() > HARD_LIMIT);
    assert_eq!(ends[1].quality, Some(Quality::Full));
    // Exactly two summarizer calls: no second soft attempt in the turn.
    assert_eq!(summarizer.requests().len(), 2);
    assert_eq!(capsule_triggers(&h.logged_entries()), vec!["hard_limit"]);

    // After the failed soft attempt the full history was replayed: the
    // request that followed carried every tool result so far.
    let requests = h.server.requests();
    let results_in = |idx: usize| {
        requests[idx].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count()
    };
    let grew = (1..requests.len())
        .take_while(|&idx| results_in(idx) == idx)
        .count();
    assert!(grew >= 10, "history replayed in full for {grew} requests");
    assert_paired(&h.server);
}

#[tokio::test]
async fn a_summarizer_timeout_gives_a_degraded_capsule() {
    let summarizer = Arc::new(FakeSummarizer::new([FakeReply::Stall]));
    let options = llm_options(summarizer);
    let h = Harness::start(options).await;
    for path in files_read(10) {
        h.push_read(&path);
    }
    h.push_text("done");
    assert_eq!(h.turn("read").await, TurnEnd::Completed);
    let ends = h.compaction_ends();
    assert_eq!(ends.len(), 1, "{ends:#?}");
    assert_eq!(ends[0].outcome, Outcome::Completed);
    assert_eq!(ends[0].quality, Some(Quality::Degraded));
    assert!(
        ends[0]
            .result_line(|id| id.short_with(4))
            .ends_with("fallback used")
    );
    let entries = h.logged_entries();
    let capsule = entries
        .iter()
        .find_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => Some(capsule.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(capsule.quality, Quality::Degraded);
    assert_eq!(capsule.summarizer, "deterministic");
}

/// A summarizer that does something to the session while it "generates",
/// then answers with a valid summary.
struct Interfering {
    action: Box<dyn Fn() -> futures_like::Pinned + Send + Sync>,
}

mod futures_like {
    pub type Pinned = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

impl Summarizer for Interfering {
    fn model(&self) -> &str {
        "interfering"
    }

    fn window_tokens(&self) -> TokenCount {
        TokenCount::new(200_000)
    }

    fn summarize<'a>(&'a self, _request: &'a SummaryRequest) -> SummaryFuture<'a> {
        let action = (self.action)();
        Box::pin(async move {
            action.await;
            Ok::<_, SummarizeError>(SummaryResponse {
                text: valid_summary(),
                model: "interfering".into(),
                usage: None,
            })
        })
    }
}

#[tokio::test]
async fn a_cancel_during_generation_appends_nothing_even_if_the_summary_arrives() {
    let cancel = CancellationToken::new();
    let fire = cancel.clone();
    let summarizer = Arc::new(Interfering {
        action: Box::new(move || {
            let fire = fire.clone();
            Box::pin(async move { fire.cancel() })
        }),
    });
    let options = llm_options(summarizer);
    let h = Harness::start(options).await;
    for path in files_read(12) {
        h.push_read(&path);
    }
    let end = h.agent.run_turn("read", &cancel).await.unwrap();
    assert_eq!(end, TurnEnd::Cancelled);
    let ends = h.compaction_ends();
    assert_eq!(ends.last().map(|end| end.outcome), Some(Outcome::Cancelled));
    assert_eq!(h.count_logged("capsule"), 0);
    // No request was sent after the cancel.
    let sent = h.server.requests().len();
    assert_eq!(
        sent,
        h.count_logged("message") / 2,
        "one request per assistant message"
    );
}

#[tokio::test]
async fn a_rewind_during_generation_makes_the_barrier_stale() {
    let core_slot: Arc<std::sync::Mutex<Option<Arc<Mutex<SessionCore>>>>> =
        Arc::new(std::sync::Mutex::new(None));
    let slot = core_slot.clone();
    let summarizer = Arc::new(Interfering {
        action: Box::new(move || {
            let core = slot.lock().unwrap().clone().unwrap();
            Box::pin(async move {
                let mut core = core.lock().await;
                let first: EntryId = core.path()[0].id.clone();
                core.rewind(first).unwrap();
            })
        }),
    });
    let options = llm_options(summarizer);
    let h = Harness::start(options).await;
    *core_slot.lock().unwrap() = Some(h.core.clone());
    for path in files_read(12) {
        h.push_read(&path);
    }
    assert_eq!(h.turn("read").await, TurnEnd::Stale);
    assert_eq!(
        h.compaction_ends().last().map(|end| end.outcome),
        Some(Outcome::Stale)
    );
    assert_eq!(h.count_logged("capsule"), 0);
    assert_eq!(h.count_logged("leaf"), 1);
}

#[tokio::test]
async fn an_overflow_gets_one_recovery_compaction_and_one_retry() {
    let h = Harness::start(Options::default()).await;
    for path in files_read(6) {
        h.push_read(&path);
    }
    h.push_text("first turn done");
    assert_eq!(h.turn("read six files").await, TurnEnd::Completed);
    let before = h.server.requests().len();

    h.server.push(Script::overflow("openai").unwrap());
    h.push_text("second turn done");
    assert_eq!(h.turn("go on").await, TurnEnd::Completed);
    assert_eq!(
        h.server.requests().len(),
        before + 2,
        "the failed request and one retry"
    );
    let entries = h.logged_entries();
    let overflow = entries.iter().rev().find_map(|entry| match &entry.body {
        EntryBody::Capsule(capsule) if capsule.trigger == Trigger::ContextOverflow => {
            Some(capsule.clone())
        }
        _ => None,
    });
    let capsule = overflow.expect("a context_overflow capsule");
    assert!(capsule.overflow.is_some());

    // A second overflow in the same turn fails it, with no third request.
    let before = h.server.requests().len();
    h.server.push(Script::overflow("openai").unwrap());
    h.server.push(Script::overflow("openai").unwrap());
    match h.turn("and again").await {
        TurnEnd::Failed(reason) => assert!(reason.contains("context overflow again"), "{reason}"),
        other => panic!("expected a failed turn, got {other:?}"),
    }
    assert_eq!(h.server.requests().len(), before + 2);
    assert_paired(&h.server);
}

/// A server started with a smaller window than SOBA was told (llama.cpp
/// `-c 8000` behind a configured 16,000) states its window in the
/// overflow error: the recovery plans for that window, so the retry fits,
/// and a warning names the setting to fix. Found by the real-model check:
/// planning for the configured window rebuilt a request the server
/// refused again.
#[tokio::test]
async fn an_overflow_that_states_a_smaller_window_recovers_for_that_window() {
    let h = Harness::start(Options::default()).await;
    for path in files_read(6) {
        h.push_read(&path);
    }
    h.push_text("first turn done");
    assert_eq!(h.turn("read six files").await, TurnEnd::Completed);
    assert_eq!(h.count_logged("capsule"), 0);

    h.server.push(Script::error(
        400,
        r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8000 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8000}}"#,
    ));
    h.push_text("second turn done");
    assert_eq!(h.turn("go on").await, TurnEnd::Completed);
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
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "the server's context window is 8,000 tokens, not the 16,000 soba was told"
        ) && w.contains("models.\"fake/model\".contextWindow to 8000")),
        "{warnings:?}"
    );
    let capsule = h
        .logged_entries()
        .into_iter()
        .find_map(|entry| match entry.body {
            EntryBody::Capsule(capsule) if capsule.trigger == Trigger::ContextOverflow => {
                Some(capsule)
            }
            _ => None,
        })
        .expect("a context_overflow capsule");
    // 8,000 − 2,000 output − 1,000 reserve = 5,000; autoLimit 0.8 × it.
    assert!(
        capsule.tokens_after <= TokenCount::new(4_000),
        "{} after, planned for the stated window's autoLimit 4,000",
        capsule.tokens_after
    );
    let retry = *h.sent.lock().unwrap().last().unwrap();
    assert!(
        retry.0 <= 5_000,
        "the retry's local count {} fits 8,000 − 2,000 − 1,000",
        retry.0
    );
    assert_paired(&h.server);
}

/// A forced compaction with nothing new since the previous capsule (an
/// overflow right after a compaction) asks the summarizer nothing, and its
/// capsule is not labelled an LLM summary: with no chunk to summarize, the
/// previous state came back as if the model had written it (SmolLM2 run).
#[tokio::test]
async fn a_forced_compaction_with_nothing_new_is_not_an_llm_summary() {
    let summarizer = Arc::new(FakeSummarizer::new([
        FakeReply::Text(valid_summary()),
        FakeReply::Text(valid_summary()),
    ]));
    let h = Harness::start(llm_options(summarizer.clone())).await;
    for path in files_read(6) {
        h.push_read(&path);
    }
    h.push_text("done");
    assert_eq!(h.turn("read six").await, TurnEnd::Completed);
    let cancel = CancellationToken::new();
    let first = h
        .agent
        .barrier
        .preflight(
            Some(soba_engine::barrier::Forced::User { instructions: None }),
            &cancel,
        )
        .await
        .unwrap();
    assert!(
        matches!(first, soba_engine::barrier::Preflight::Compacted(_)),
        "{first:?}"
    );
    assert_eq!(summarizer.requests().len(), 1);
    let again = h
        .agent
        .barrier
        .preflight(
            Some(soba_engine::barrier::Forced::ContextOverflow {
                stated_prompt: None,
                request_tokens_local: 9_000,
                stated_limit: None,
            }),
            &cancel,
        )
        .await
        .unwrap();
    assert!(
        matches!(again, soba_engine::barrier::Preflight::Compacted(_)),
        "{again:?}"
    );
    assert_eq!(
        summarizer.requests().len(),
        1,
        "no chunk, no summarizer call"
    );
    let capsules: Vec<_> = h
        .logged_entries()
        .into_iter()
        .filter_map(|entry| match entry.body {
            EntryBody::Capsule(capsule) => Some(capsule),
            _ => None,
        })
        .collect();
    assert_eq!(capsules.len(), 2);
    assert_eq!(capsules[0].summarizer, summarizer.model());
    assert_eq!(capsules[1].summarizer, "deterministic");
    // The first capsule's narrative (a model wrote it) is carried once,
    // under Earlier narrative; the goal itself comes from the log.
    let earlier = capsules[1].earlier_narrative.as_deref().unwrap_or_default();
    assert!(earlier.contains(&capsules[0].narrative.goal), "{earlier}");
}

#[tokio::test]
async fn resuming_gives_the_same_next_request_as_the_live_session() {
    let h = Harness::start(Options::default()).await;
    for path in files_read(20) {
        h.push_read(&path);
    }
    h.push_text("done");
    assert_eq!(h.turn("read twenty").await, TurnEnd::Completed);
    h.push_read("data/file01.txt");
    h.push_text("done again");
    assert_eq!(h.turn("one more").await, TurnEnd::Completed);
    assert!(h.count_logged("capsule") >= 1);
    let live = h.next_request().await;
    let live_effective = h.effective().await;
    let crate::harness::Harness {
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
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let tools = soba_engine::tool::ToolRegistry::builtin();
    let again = soba_engine::agent::build_request(&resumed, "model", &tools);
    assert_eq!(live, again);
    assert_eq!(resumed.measure().tokens, live_effective);
    drop(dir);
}

#[tokio::test]
async fn the_idle_gap_runs_from_the_last_request_or_the_newest_answer() {
    let h = Harness::start(Options::default()).await;
    h.push_read("data/file01.txt");
    h.push_text("done");
    assert_eq!(h.turn("read one").await, TurnEnd::Completed);
    let crate::harness::Harness {
        dir,
        agent,
        core,
        log_path,
        config,
        ..
    } = h;
    drop(agent);
    drop(core);
    // Resumed: no request in this process, so the newest assistant
    // message's time is the previous request's.
    let (mut resumed, _) = SessionCore::open(&log_path, config, WriterOptions::default()).unwrap();
    let answered = resumed
        .path()
        .iter()
        .rev()
        .find(|entry| {
            matches!(&entry.body, EntryBody::Message(m) if m.message.role == soba_core::Role::Assistant)
        })
        .map(|entry| entry.timestamp.parse::<jiff::Timestamp>().unwrap())
        .unwrap();
    let later = |seconds: i64| (answered + jiff::SignedDuration::from_secs(seconds)).to_string();
    assert_eq!(resumed.idle_ms(&later(301)), Some(301_000));
    // A request prepared in this process is the reference from then on.
    resumed.last_request_at = Some(later(1_000));
    assert_eq!(resumed.idle_ms(&later(1_010)), Some(10_000));
    // Times that do not parse give no gap (the trigger does not fire).
    assert_eq!(resumed.idle_ms("yesterday"), None);
    drop(dir);
}

/// The capsule's "Latest user instructions" are bounded by the configured
/// `userMessageBudgetTokens`, as the planner assumed: with the budget
/// hard-coded at 4,000 in the capsule but configured lower for the plan, an
/// 8k model's capsule outgrew hardLimit and every later turn failed (found
/// by the real-model check).
#[tokio::test]
async fn the_capsule_bounds_user_messages_by_the_configured_budget() {
    let options = Options {
        compaction: soba_core::config::CompactionConfig {
            user_message_budget_tokens: TokenCount::new(300),
            ..crate::harness::small_config()
        },
        ..Options::default()
    };
    let h = Harness::start(options).await;
    for turn in 0..9 {
        h.push_text(&format!("Noted {turn}."));
        let pasted = crate::harness::file_text(turn, 6_000);
        assert_eq!(
            h.turn(&format!("Turn {turn}: keep these notes.\n{pasted}"))
                .await,
            TurnEnd::Completed
        );
    }
    let capsules: Vec<_> = h
        .logged_entries()
        .into_iter()
        .filter_map(|entry| match entry.body {
            EntryBody::Capsule(capsule) => Some(capsule),
            _ => None,
        })
        .collect();
    assert!(!capsules.is_empty(), "the turns outgrow autoLimit");
    let counter = soba_core::tokens::BpeCounter::new(soba_core::Encoding::O200kBase);
    for capsule in &capsules {
        let used: u64 = capsule
            .local
            .latest_instructions
            .iter()
            .map(|text| soba_core::TokenCounter::count_text(&counter, text).n.get())
            .sum();
        // A message cut to fit carries its omission marker (a few tokens);
        // the bug kept 4,000.
        assert!(
            used <= 300 + 64,
            "latest instructions {used} tokens > the 300 configured"
        );
        assert!(used > 0, "the instructions are kept within the budget");
    }
}

#[tokio::test]
async fn past_auto_limit_a_compaction_that_would_not_pay_says_why_once_a_turn() {
    let mut compaction = crate::harness::small_config();
    compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
    // A compaction must free the whole context: none ever pays.
    compaction.min_savings_ratio = soba_core::config::Ratio::ONE;
    let h = Harness::start(Options {
        compaction,
        ..Options::default()
    })
    .await;
    for path in files_read(READS_PAST_AUTO) {
        h.push_read(&path);
    }
    h.push_text("read");
    assert_eq!(h.turn("read the data files").await, TurnEnd::Completed);
    h.push_text("still here");
    assert_eq!(h.turn("and now?").await, TurnEnd::Completed);

    let ends = h.compaction_ends();
    let told: Vec<_> = ends
        .iter()
        .map(|end| {
            (
                end.trigger,
                end.outcome,
                end.tokens_before,
                end.reason.clone().unwrap_or_default(),
            )
        })
        .collect();
    // One line in each turn that went past autoLimit, none completed.
    assert_eq!(told.len(), 2, "{told:#?}");
    for (end, (trigger, outcome, _, reason)) in ends.iter().zip(&told) {
        assert!(trigger.is_soft(), "{told:#?}");
        assert_eq!(*outcome, Outcome::Skipped);
        assert!(end.tokens_before.get() >= AUTO_LIMIT, "{end:#?}");
        let expected = format!(
            "{} tokens is past autoLimit 10,400, but it would free ",
            end.tokens_before
        );
        assert!(reason.starts_with(&expected), "{reason}");
        assert!(
            reason.ends_with(&format!(
                "under the {} a compaction must free to pay for itself \
                 (compaction.roiFloor, compaction.minSavingsRatio); the request is sent whole, \
                 /compact forces one",
                end.tokens_before
            )),
            "{reason}"
        );
    }
    assert!(capsule_triggers(&h.logged_entries()).is_empty());
    // More requests than lines went out past autoLimit: once a turn.
    let past = h
        .sent
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, effective, _)| effective.get() >= AUTO_LIMIT)
        .count();
    assert!(past > 2, "{past} requests past autoLimit");
}

/// Reads that take the test model's context past autoLimit (10,400) and
/// not past hardLimit (13,000).
const READS_PAST_AUTO: usize = 9;
