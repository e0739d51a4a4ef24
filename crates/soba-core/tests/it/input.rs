//! The model-input rebuild (SPEC §5) with exact figures under
//! `ByteCounter`: pinned parts, the capsule and its retained tail, the
//! orphan sweep, the tool-output cap and incremental counting.

use std::sync::Arc;

use serde_json::json;
use soba_core::capsule::{BoundaryTruncation, Capsule, NativeContinuation};
use soba_core::config::CompactionConfig;
use soba_core::entry::{EntryBody, MessageEntry, SkillAction, SkillEntry, StoredTokens};
use soba_core::input::{INTERRUPTED_RESULT, InputOrigin, LiveInput, SystemPartKind};
use soba_core::message::{Message, Role};
use soba_core::plan::{self, PlanRequest};
use soba_core::tokens::{Encoding, TokenCount};

use crate::props::{Session, assert_paired, budget, setup};

fn tokens(n: u64) -> TokenCount {
    TokenCount::new(n)
}

/// The rendered input as `role: text` lines, results as `result(id): text`.
fn lines(live: &LiveInput) -> Vec<String> {
    let view = live.view();
    let mut out: Vec<String> = view
        .system
        .iter()
        .map(|part| format!("system: {}", part.text))
        .collect();
    if let Some(capsule) = view.capsule {
        out.push(format!(
            "capsule: {}",
            capsule.rendered.map(Message::text).unwrap_or_default()
        ));
    }
    for message in &view.messages {
        let results: Vec<String> = message
            .message
            .tool_results()
            .map(|result| format!("result({}): {}", result.tool_use_id, result.text()))
            .collect();
        let calls: Vec<String> = message
            .message
            .tool_uses()
            .map(|call| format!("call({})", call.id))
            .collect();
        let body = [vec![message.message.text()], calls, results]
            .concat()
            .join(" ")
            .trim()
            .to_owned();
        out.push(format!("{}: {body}", message.message.role.as_str()));
    }
    out
}

#[test]
fn the_rebuild_orders_pinned_parts_capsule_tail_and_later_entries() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    session.message(Message::new(
        Role::System,
        vec![soba_core::Block::Text("pinned rule".into())],
    ));
    session.push(EntryBody::Skill(SkillEntry {
        name: "rust".into(),
        action: SkillAction::Activate,
        sha256: "s".into(),
        text: "skill text".into(),
    }));
    session.user("first task");
    session.assistant("working");
    let kept = session.user("second task");
    session.calls(&[("c1", "bash", json!({"command": "ls"}))]);
    session.result("c1", "a.rs", false);
    // Compact with everything from "second task" kept.
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let mut plan = plan::plan(
        &live,
        &PlanRequest {
            trigger: soba_core::Trigger::User,
            effective: live.total_tokens(),
            budget: &budget,
            summarizer_max_output_tokens: tokens(2_000),
            facts_tokens: tokens(0),
            rehydrate_tokens: soba_core::TokenCount::ZERO,
            factor: soba_core::calibration::Factor::ONE,
        },
    )
    .unwrap();
    plan.first_kept_entry_id = Some(kept);
    session.apply(&live, &plan, 10);
    session.user("third task");
    session.push(EntryBody::Checkpoint {
        kind: soba_core::CheckpointKind::Milestone,
        note: "m".into(),
    });

    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    assert_eq!(
        lines(&live),
        vec![
            "system: You are SOBA, a coding agent.",
            "system: skill text",
            "system: pinned rule",
            "capsule: cccccccccccccccccccccccc",
            "user: second task",
            "assistant: call(c1)",
            "tool: result(c1): a.rs",
            "user: third task",
        ]
    );
    let view = live.view();
    assert!(matches!(view.system[1].kind, SystemPartKind::Skill { .. }));
    // Fixed: prompt 29 chars (8 + 4), schemas 51 chars (13), skill 10
    // chars (3 + 4), rule 11 chars (3 + 4).
    assert_eq!(view.fixed_tokens(), tokens(12 + 13 + 7 + 7));
    assert_eq!(view.capsule.map(|capsule| capsule.tokens), Some(tokens(10)));
    assert_eq!(live.total_tokens(), view.total_tokens());
}

#[test]
fn calls_without_results_get_a_synthetic_error_result() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    session.user("run both");
    session.calls(&[
        ("a", "bash", json!({"command": "x"})),
        ("b", "bash", json!({"command": "y"})),
    ]);
    session.result("a", "done", false);
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let view = live.view();
    assert_paired(&view.messages).unwrap();
    let synthetic = view.messages.last().unwrap();
    assert_eq!(synthetic.origin, InputOrigin::SyntheticResult);
    assert_eq!(synthetic.source, &session.path[1].id);
    let result = synthetic.message.tool_results().next().unwrap();
    assert_eq!((result.tool_use_id.as_str(), result.is_error), ("b", true));
    assert_eq!(result.text(), INTERRUPTED_RESULT);
    // 31 characters: 8 tokens + 4.
    assert_eq!(synthetic.tokens, tokens(12));

    // The result arrives: the synthetic one is gone, incrementally.
    let mut live = live;
    session.result("b", "late", false);
    live.extend(&session.path);
    let view = live.view();
    assert!(
        view.messages
            .iter()
            .all(|message| message.origin != InputOrigin::SyntheticResult)
    );
    assert_eq!(
        live.total_tokens(),
        LiveInput::build(setup(&budget, &[]), &session.path).total_tokens()
    );
}

#[test]
fn unchanged_messages_keep_their_stored_counts() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    let stored = |n| {
        Some(StoredTokens {
            encoding: Encoding::O200kBase,
            n: tokens(n),
            estimated: false,
        })
    };
    session.push(EntryBody::Message(MessageEntry {
        message: Message::user("hello"),
        tokens: stored(1_000),
    }));
    // A count in another vocabulary is not used.
    session.push(EntryBody::Message(MessageEntry {
        message: Message::assistant("hi"),
        tokens: Some(StoredTokens {
            encoding: Encoding::Cl100kBase,
            n: tokens(1_000),
            estimated: false,
        }),
    }));
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let view = live.view();
    assert_eq!(view.messages[0].tokens, tokens(1_000));
    assert_eq!(view.messages[1].tokens, tokens(5));
}

#[test]
fn tool_output_is_capped_in_the_input_only() {
    // hardLimit 48,808: maxToolResultTokens = min(16,000, 12,202).
    let budget = budget(65_000, 8_000, &CompactionConfig::default());
    assert_eq!(budget.max_tool_result_tokens(), tokens(12_202));
    let mut session = Session::default();
    session.calls(&[("c", "bash", json!({"command": "cat big"}))]);
    let body = format!("BEGIN{}END", "0123456789".repeat(8_000)); // 80,008 chars, 20,002 tokens
    session.result("c", body.clone(), false);
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let view = live.view();
    let capped = &view.messages[1];
    assert!(capped.rewrites.capped);
    assert!(capped.tokens <= tokens(12_202 + 4));
    assert!(capped.tokens >= tokens(12_190));
    let text = capped.message.tool_results().next().unwrap().text();
    assert!(text.starts_with("BEGIN0123") && text.ends_with("789END"));
    assert!(text.contains("tool output truncated"));
    // The log keeps the result as returned.
    let EntryBody::Message(logged) = &session.path[1].body else {
        unreachable!()
    };
    assert_eq!(logged.message.tool_results().next().unwrap().text(), body);
}

#[test]
fn the_native_item_replaces_the_rendered_capsule_when_it_matches() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    let first = session.user("task");
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let mut plan = plan::plan(
        &live,
        &PlanRequest {
            trigger: soba_core::Trigger::User,
            effective: live.total_tokens(),
            budget: &budget,
            summarizer_max_output_tokens: tokens(2_000),
            facts_tokens: tokens(0),
            rehydrate_tokens: soba_core::TokenCount::ZERO,
            factor: soba_core::calibration::Factor::ONE,
        },
    )
    .unwrap();
    plan.first_kept_entry_id = Some(first);
    session.apply(&live, &plan, 100);
    let EntryBody::Capsule(capsule) = &mut session.path.last_mut().unwrap().body else {
        unreachable!()
    };
    capsule.native = Some(NativeContinuation {
        provider: "openai".into(),
        model: "gpt-5".into(),
        endpoint_fingerprint: "fp".into(),
        item: json!({"type": "compaction", "encrypted_content": "A".repeat(4_000)}).to_string(),
    });
    let matching =
        setup(&budget, &[]).with_native_match(Arc::new(|native: &NativeContinuation| {
            native.model == "gpt-5"
        }));
    let live = LiveInput::build(matching, &session.path);
    let capsule = live.view().capsule.unwrap();
    assert!(capsule.rendered.is_none());
    assert_eq!(capsule.tokens, tokens(750)); // ceil(4,000 × 3/4 / 4)
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    assert_eq!(live.view().capsule.unwrap().tokens, tokens(100));
}

#[test]
fn a_recorded_truncation_is_applied_without_recounting() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    let straddler = session.user(format!("HEAD{}TAIL", "m".repeat(10_000)));
    session.assistant("ok");
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let mut plan = plan::plan(
        &live,
        &PlanRequest {
            trigger: soba_core::Trigger::User,
            effective: live.total_tokens(),
            budget: &budget,
            summarizer_max_output_tokens: tokens(2_000),
            facts_tokens: tokens(0),
            rehydrate_tokens: soba_core::TokenCount::ZERO,
            factor: soba_core::calibration::Factor::ONE,
        },
    )
    .unwrap();
    plan.first_kept_entry_id = Some(straddler.clone());
    plan.boundary_truncation = Some(BoundaryTruncation {
        entry_id: straddler,
        head_chars: 4,
        tail_chars: 4,
        omitted_chars: 10_000,
        kept_tokens: tokens(77),
    });
    session.apply(&live, &plan, 10);
    let live = LiveInput::build(setup(&budget, &[]), &session.path);
    let view = live.view();
    let first = &view.messages[0];
    assert_eq!(first.tokens, tokens(77), "keptTokens is taken as recorded");
    assert_eq!(
        first.message.text(),
        "HEAD\n\n[… 10000 characters omitted here; they are summarized in the capsule …]\n\nTAIL"
    );
    assert_eq!(
        first.original.map(|message| message.text().len()),
        Some(10_008)
    );
    let _: Option<&Capsule> = view.capsule.map(|capsule| capsule.capsule);
}
