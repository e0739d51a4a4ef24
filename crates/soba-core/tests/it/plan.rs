//! The planner and hygiene with exact figures (SPEC §7.2, §8.1–§8.3),
//! counted with `ByteCounter`: a text of `4n` ASCII characters is `n`
//! tokens, and every message adds 4.

use std::sync::Arc;

use serde_json::json;
use soba_core::budget::Budget;
use soba_core::calibration::Factor;
use soba_core::capsule::Trigger;
use soba_core::config::CompactionConfig;
use soba_core::hygiene::{self, HygieneConfig, HygieneDecision};
use soba_core::input::{InputConfig, InputSetup, LiveInput, stub_text};
use soba_core::plan::{self, Plan, PlanError, PlanRequest, SkipReason, post_roi};
use soba_core::tokens::{ByteCounter, TokenCount};
use soba_core::truncate::straddler_marker;

use crate::props::{Session, budget};

/// A setup with no system prompt and no tools, so `fixed` is 0.
fn bare_setup(budget: &Budget, protected: &[&str]) -> InputSetup {
    InputSetup::new(
        Arc::new(ByteCounter),
        InputConfig {
            max_tool_result_tokens: budget.max_tool_result_tokens(),
            image_tokens: TokenCount::new(1_100),
            protected_tools: protected.iter().map(|tool| (*tool).to_owned()).collect(),
        },
    )
}

fn tokens(n: u64) -> TokenCount {
    TokenCount::new(n)
}

/// `n` tokens of ASCII text under `ByteCounter` (message overhead aside).
fn text_of(n_tokens: usize) -> String {
    "x".repeat(n_tokens * 4)
}

fn request(
    trigger: Trigger,
    effective: TokenCount,
    budget: &Budget,
    facts: u64,
    max_output: u64,
) -> PlanRequest<'_> {
    PlanRequest {
        trigger,
        effective,
        budget,
        summarizer_max_output_tokens: tokens(max_output),
        facts_tokens: tokens(facts),
        rehydrate_tokens: soba_core::TokenCount::ZERO,
        factor: Factor::ONE,
    }
}

// ---------------------------------------------------------------------------
// Hygiene
// ---------------------------------------------------------------------------

/// A session of `batches` bash calls, each with a 2,000-token result (2,004
/// with overhead), then a user message. `tool_of(n)` and `command_of(n)`
/// pick batch n's tool and command; `errors` lists failing batches.
fn hygiene_session(
    batches: usize,
    tool_of: impl Fn(usize) -> &'static str,
    errors: &[usize],
) -> Session {
    let mut session = Session::default();
    session.user("go");
    for n in 1..=batches {
        let call_id = format!("c{n}");
        let command = if n == batches && errors.contains(&0) {
            "cmd 2".to_owned()
        } else {
            format!("cmd {n}")
        };
        session.calls(&[(&call_id, tool_of(n), json!({ "command": command }))]);
        session.result(&call_id, text_of(2_000), errors.contains(&n));
    }
    session.user("next");
    session
}

/// What a hygiene pass should decide: below the gate with this much, or
/// apply through an entry, reclaiming this much with this many stubs.
enum Expect {
    Below(u64),
    Apply {
        through: usize,
        reclaimed: u64,
        stubs: usize,
    },
}

fn check_hygiene(session: &Session, protected: &[&str], expected: Expect) -> LiveInput {
    let config = CompactionConfig::default();
    let budget = budget(200_000, 32_000, &config);
    let live = LiveInput::build(bare_setup(&budget, protected), &session.path);
    let hygiene_config = HygieneConfig::new(&budget, &config);
    assert_eq!(hygiene_config.hygiene_limit, tokens(50_000));
    // Effective is at the limit: hygiene is due.
    let decision = hygiene::plan_hygiene(&live, tokens(50_000), &hygiene_config);
    match (decision, expected) {
        (
            HygieneDecision::Apply(got),
            Expect::Apply {
                through,
                reclaimed,
                stubs,
            },
        ) => {
            assert_eq!(got.pruned_through_entry_id, session.path[through].id);
            assert_eq!(got.reclaimed_tokens, tokens(reclaimed));
            assert_eq!(got.stubbed.len(), stubs);
            assert!(
                got.stubbed
                    .iter()
                    .all(|stub| stub.tokens == tokens(2_000) && stub.stub_tokens == tokens(16))
            );
        }
        (decision, Expect::Below(reclaimable)) => assert_eq!(
            decision,
            HygieneDecision::BelowGate {
                reclaimable: tokens(reclaimable),
                min_tokens: tokens(20_000)
            }
        ),
        (decision, _) => panic!("unexpected {decision}"),
    }
    live
}

#[test]
fn hygiene_is_not_due_below_its_limit() {
    let config = CompactionConfig::default();
    let budget = budget(200_000, 32_000, &config);
    let session = hygiene_session(16, |_| "bash", &[]);
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let decision =
        hygiene::plan_hygiene(&live, tokens(49_999), &HygieneConfig::new(&budget, &config));
    assert_eq!(
        decision,
        HygieneDecision::NotDue {
            effective: tokens(49_999),
            hygiene_limit: tokens(50_000)
        }
    );
    assert_eq!(
        decision.to_string(),
        "hygiene not due: effective 49,999 < hygieneLimit 50,000"
    );
}

#[test]
fn hygiene_gate_counts_stubs_outside_the_newest_ten_messages() {
    // The stub "[tool output pruned: bash 2000 tokens; run it again if
    // needed]" is 62 characters, 16 tokens: each pruned result saves 1,984.
    assert_eq!(stub_text("bash", tokens(2_000)).len(), 62);

    // 26 messages: the newest 10 are "next" and batches 8–12 (the 10th,
    // batch 8's result, pulls its call in): results 1–7 are pruned,
    // 7 × 1,984 = 13,888 < 20,000.
    let session = hygiene_session(12, |_| "bash", &[]);
    check_hygiene(&session, &[], Expect::Below(13_888));

    // 16 batches: results 1–11, 11 × 1,984 = 21,824 ≥ 20,000.
    let session = hygiene_session(16, |_| "bash", &[]);
    // Batch 11's result is entry 22.
    let live = check_hygiene(
        &session,
        &[],
        Expect::Apply {
            through: 22,
            reclaimed: 21_824,
            stubs: 11,
        },
    );
    // Persisted and rebuilt, the input shrinks by exactly that much.
    let before = live.total_tokens();
    // "go" (5), 16 batches of a call (10: `bash` 1 + `{"command":"cmd N"}`
    // 5 + 4) and a result (2,004), "next" (5).
    assert_eq!(before, tokens(5 + 16 * (10 + 2_004) + 5));
    let HygieneDecision::Apply(pass) = hygiene::plan_hygiene(
        &live,
        tokens(50_000),
        &HygieneConfig::new(
            &budget(200_000, 32_000, &CompactionConfig::default()),
            &CompactionConfig::default(),
        ),
    ) else {
        panic!("hygiene applies");
    };
    let mut session = session;
    session.push(pass.entry_body());
    let after = LiveInput::build(live.setup().clone(), &session.path);
    assert_eq!(after.total_tokens(), tokens(before.get() - 21_824));
    let view = after.view();
    let first_result = view.messages[2]
        .message
        .tool_results()
        .next()
        .unwrap()
        .text();
    assert_eq!(
        first_result,
        "[tool output pruned: bash 2000 tokens; run it again if needed]"
    );
    let twelfth = view.messages[2 * 12]
        .message
        .tool_results()
        .next()
        .unwrap()
        .text();
    assert_eq!(
        twelfth.len(),
        8_000,
        "results inside the window keep their bodies"
    );
}

#[test]
fn hygiene_never_prunes_protected_tools() {
    // Batch 1 runs the protected tool: 10 results remain, 19,840 < 20,000.
    let session = hygiene_session(16, |n| if n == 1 { "keep" } else { "bash" }, &[]);
    check_hygiene(&session, &["keep"], Expect::Below(19_840));
}

#[test]
fn hygiene_keeps_unresolved_errors_until_a_success_resolves_them() {
    // Batch 2 failed and nothing ran `cmd 2` again: it stays, 19,840.
    let session = hygiene_session(16, |_| "bash", &[2]);
    check_hygiene(&session, &[], Expect::Below(19_840));
    // Batch 16 runs `cmd 2` successfully: batch 2's error is resolved.
    let session = hygiene_session(16, |_| "bash", &[2, 0]);
    let live = check_hygiene(
        &session,
        &[],
        Expect::Apply {
            through: 22,
            reclaimed: 21_824,
            stubs: 11,
        },
    );
    let view = live.view();
    assert_eq!(view.messages[4].results[0].call_id, "c2");
}

#[test]
fn a_hygiene_entry_judges_errors_as_of_its_own_position() {
    let config = CompactionConfig::default();
    let budget = budget(200_000, 32_000, &config);
    let hygiene_config = HygieneConfig {
        min_tokens: tokens(1),
        ..HygieneConfig::new(&budget, &config)
    };
    let mut session = hygiene_session(12, |_| "bash", &[2]);
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let HygieneDecision::Apply(pass) =
        hygiene::plan_hygiene(&live, tokens(50_000), &hygiene_config)
    else {
        panic!("hygiene applies with a gate of 1");
    };
    assert_eq!(
        pass.reclaimed_tokens,
        tokens(6 * 1_984),
        "results 1 and 3–7; the error of batch 2 stays"
    );
    session.push(pass.entry_body());
    // A later success of `cmd 2` does not stub the error retroactively: the
    // prefix sent to the provider stays as it was.
    session.calls(&[("late", "bash", json!({"command": "cmd 2"}))]);
    session.result("late", "ok", false);
    let rebuilt = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let view = rebuilt.view();
    let error = view.messages[4].message.tool_results().next().unwrap();
    assert!(error.is_error);
    assert_eq!(error.text().len(), 8_000);
}

// ---------------------------------------------------------------------------
// Retention: the straddler and the newest unit
// ---------------------------------------------------------------------------

/// The 200k model with `keepRecentTokens` set.
fn budget_keeping(keep_recent: u64) -> (Budget, CompactionConfig) {
    let config = CompactionConfig {
        keep_recent_tokens: tokens(keep_recent),
        ..CompactionConfig::default()
    };
    (budget(200_000, 32_000, &config), config)
}

fn plan_of(session: &Session, budget: &Budget, trigger: Trigger) -> Result<Plan, PlanError> {
    let live = LiveInput::build(bare_setup(budget, &[]), &session.path);
    plan::plan(
        &live,
        &request(trigger, live.total_tokens(), budget, 500, 2_000),
    )
}

#[test]
fn a_text_straddler_keeps_at_least_256_tokens() {
    let (budget, _) = budget_keeping(1_000);
    assert_eq!(budget.keep_recent(), tokens(1_000));
    let mut session = Session::default();
    let straddler = session.user(text_of(2_000)); // 2,004 tokens
    session.assistant(text_of(896)); // 900 tokens: 100 remain
    let plan = plan_of(&session, &budget, Trigger::User).unwrap();
    // min(2,004, max(100, 256)) = 256 tokens: 252 of text, at most 1,008
    // bytes, the marker's 78 (its ellipses are 3 bytes each) and up to 930
    // characters. The search stops at the first cut of exactly 256 tokens:
    // 927 characters (1,005 bytes), head 464 and tail 463, 7,073 omitted.
    assert_eq!(straddler_marker(7_073).len(), 78);
    let cut = plan
        .boundary_truncation
        .clone()
        .expect("the straddler is cut");
    assert_eq!(cut.entry_id, straddler);
    assert_eq!(
        (cut.head_chars, cut.tail_chars, cut.omitted_chars),
        (464, 463, 7_073)
    );
    assert_eq!(cut.kept_tokens, tokens(256));
    assert_eq!(plan.first_kept_entry_id, Some(straddler.clone()));
    assert_eq!(plan.span_entry_ids, vec![straddler]);
    assert_eq!(
        plan.retained_entry_ids,
        vec![session.path[1].id.clone()],
        "a cut straddler is not retained"
    );
    assert_eq!(plan.span_tokens, tokens(2_004 - 256));
    assert_eq!(plan.tail_tokens, tokens(900 + 256));
    assert_eq!(plan.skip, None);

    // More room: the straddler keeps what remains, 1,500 − 900 = 600.
    let (budget, _) = budget_keeping(1_500);
    let plan = plan_of(&session, &budget, Trigger::User).unwrap();
    assert_eq!(plan.boundary_truncation.unwrap().kept_tokens, tokens(600));

    // A straddler under 256 tokens is kept whole.
    let mut small = Session::default();
    small.user(text_of(246)); // 250 tokens
    small.assistant(text_of(996)); // 1,000 tokens: nothing remains
    let plan = plan_of(&small, &budget_keeping(1_000).0, Trigger::User).unwrap();
    assert_eq!(plan.boundary_truncation, None);
    assert_eq!(plan.skip, Some(SkipReason::NothingToCompact));
}

#[test]
fn tool_batches_are_never_cut_and_the_newest_unit_is_kept_whole() {
    let (budget, _) = budget_keeping(1_000);
    let mut session = Session::default();
    session.user("start");
    let call = session.calls(&[("c1", "bash", json!({"command": "make"}))]);
    session.result("c1", text_of(2_000), false);
    let newest = session.user(text_of(1_500)); // over keepRecent on its own
    let plan = plan_of(&session, &budget, Trigger::User).unwrap();
    assert_eq!(plan.first_kept_entry_id, Some(newest));
    assert_eq!(plan.boundary_truncation, None);
    assert_eq!(plan.tail_tokens, tokens(1_504));
    assert_eq!(plan.span_entry_ids.len(), 3); // start, the call and its result
    assert_eq!(plan.retained_entry_ids, vec![session.path[3].id.clone()]);
    assert!(plan.span_entry_ids.contains(&call));
}

#[test]
fn the_boundary_moves_later_until_the_result_fits() {
    // hardLimit 17,000 (20,000 − 2,000 − 1,000); keepRecent 12,749; the
    // capsule budget is 1,000 + 5,000, so the tail gets 11,000.
    let config = CompactionConfig {
        safety_reserve_tokens: tokens(1_000),
        ..CompactionConfig::default()
    };
    let budget = budget(20_000, 2_000, &config);
    assert_eq!(
        (budget.hard_limit(), budget.keep_recent()),
        (tokens(17_000), tokens(12_749))
    );
    let mut session = Session::default();
    for _ in 0..8 {
        session.assistant(text_of(2_000)); // 2,004 each
    }
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let plan = plan::plan(
        &live,
        &request(
            Trigger::HardLimit,
            live.total_tokens(),
            &budget,
            1_000,
            5_000,
        ),
    )
    .unwrap();
    // keepRecent alone keeps six units and cuts the seventh to 725; the fit
    // drops that cut and cuts the next unit to 11,000 − 5 × 2,004 = 980.
    assert!(plan.moved_for_fit);
    assert_eq!(plan.first_kept_entry_id, Some(session.path[2].id.clone()));
    assert_eq!(
        plan.boundary_truncation.as_ref().map(|cut| cut.kept_tokens),
        Some(tokens(980))
    );
    assert_eq!(plan.tail_tokens, tokens(11_000));
    assert_eq!(
        plan.fixed_tokens + plan.capsule_budget + plan.tail_tokens,
        tokens(17_000)
    );
    assert_eq!(plan.span_tokens, tokens(2 * 2_004 + 2_004 - 980));
}

#[test]
fn fail_closed_names_the_newest_unit() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    session.user("start");
    session.user(text_of(171_200)); // 171,204 tokens
    let err = plan_of(&session, &budget, Trigger::HardLimit).unwrap_err();
    assert_eq!(
        err.to_string(),
        "newest unit 171,204 tokens > hardLimit 159,808; split the work into smaller steps or use a model with a \
         larger context window"
    );

    // It fits the limit, but not beside the capsule budget (500 + 2,000).
    let mut session = Session::default();
    session.user("start");
    session.user(text_of(159_000)); // 159,004 tokens
    let err = plan_of(&session, &budget, Trigger::HardLimit).unwrap_err();
    assert_eq!(
        err,
        PlanError::NoRoomForNewestUnit {
            unit_tokens: tokens(159_004),
            fixed_tokens: TokenCount::ZERO,
            capsule_budget: tokens(2_500),
            limit_name: "hardLimit",
            limit: tokens(159_808),
        }
    );
}

// ---------------------------------------------------------------------------
// ROI
// ---------------------------------------------------------------------------

/// Twenty 2,004-token assistant messages, then "next" (5 tokens): 40,085.
fn roi_session() -> Session {
    let mut session = Session::default();
    for _ in 0..20 {
        session.assistant(text_of(2_000));
    }
    session.user("next");
    session
}

#[test]
fn pre_roi_estimates_the_capsule_from_facts_and_narrative() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let session = roi_session();
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    assert_eq!(live.total_tokens(), tokens(40_085));
    let plan = plan::plan(
        &live,
        &request(Trigger::AutoThreshold, tokens(40_085), &budget, 500, 2_000),
    )
    .unwrap();
    // Kept: "next" and 9 units (18,041); the 11th is cut to 1,959.
    assert_eq!(plan.tail_tokens, tokens(20_000));
    assert_eq!(plan.span_tokens, tokens(10 * 2_004 + 45));
    assert_eq!(plan.narrative_estimate, tokens(1_500));
    assert_eq!(plan.capsule_estimate, tokens(2_000));
    assert_eq!(plan.reclaimable, 18_085);
    assert_eq!(plan.savings_ppm, 451_166); // 18,085 / 40,085
    assert!(plan.pre_roi_ok);
    assert_eq!(plan.skip, None);

    // Facts of 7,000 tokens leave 11,585 < roiFloor 12,000: skipped.
    let plan = plan::plan(
        &live,
        &request(
            Trigger::AutoThreshold,
            tokens(40_085),
            &budget,
            7_000,
            2_000,
        ),
    )
    .unwrap();
    assert_eq!(plan.reclaimable, 11_585);
    assert!(!plan.pre_roi_ok);
    assert_eq!(plan.skip, Some(SkipReason::PreRoi));
    // The same plan for `/compact` skips no gate.
    let plan = plan::plan(
        &live,
        &request(Trigger::User, tokens(40_085), &budget, 7_000, 2_000),
    )
    .unwrap();
    assert!(plan.pre_roi_ok);
    assert_eq!(plan.skip, None);
    // Measured against a larger effective, 18,085 < 25 %: skipped.
    let plan = plan::plan(
        &live,
        &request(Trigger::AutoThreshold, tokens(80_000), &budget, 500, 2_000),
    )
    .unwrap();
    assert_eq!(plan.savings_ppm, 226_062);
    assert_eq!(plan.skip, Some(SkipReason::PreRoi));
}

#[test]
fn calibrated_plans_keep_a_calibrated_tail_and_estimate() {
    // The same session at factor 1.25: keepRecent 20,000 is calibrated, so
    // the walk keeps 16,000 local tokens (7 units + "next", the 9th cut to
    // 1,927), not 20,000 local = 25,000 calibrated.
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let session = roi_session();
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let request = PlanRequest {
        factor: Factor::new(1.25),
        ..request(Trigger::AutoThreshold, tokens(50_107), &budget, 500, 2_000)
    };
    let plan = plan::plan(&live, &request).unwrap();
    assert_eq!(plan.tail_tokens, tokens(20_000));
    assert_eq!(plan.span_tokens, tokens(30_107));
    // The estimate subtracted from the calibrated span is calibrated too:
    // (500 + 1,500) × 1.25.
    assert_eq!(plan.capsule_estimate, tokens(2_500));
    assert_eq!(plan.reclaimable, 30_107 - 2_500);
}

#[test]
fn automatic_compactions_keep_the_newest_results_not_the_whole_tail() {
    // Eight batches of one 1,004-token result: keepRecentResults 5 stops
    // the walk after the newest five, under keepRecent 20,000; `/compact`
    // keeps the whole tail.
    let config = CompactionConfig {
        keep_recent_results: 5,
        ..CompactionConfig::default()
    };
    let budget = budget(200_000, 32_000, &config);
    let mut session = Session::default();
    session.user("go");
    for n in 0..8 {
        let id = format!("c{n}");
        session.calls(&[(&id, "read", json!({ "path": format!("f{n}") }))]);
        session.result(&id, text_of(1_000), false);
    }
    let auto = plan_of(&session, &budget, Trigger::AutoThreshold).unwrap();
    let user = plan_of(&session, &budget, Trigger::User).unwrap();
    assert_eq!(auto.tail_units, 5);
    assert_eq!(user.tail_units, 9);
}

#[test]
fn read_cost_pays_off_by_the_square_root_rule() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let session = roi_session();
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let plan = plan::plan(
        &live,
        &request(Trigger::ReadCost, tokens(40_085), &budget, 500, 2_000),
    )
    .unwrap();
    // cost = 1.25 × (2,000 + 20,000) + 0.33 × (20,085 + 5 × 1,500)
    //      = 27,500 + 9,103.05 = 36,603.05; reclaimable 18,085.
    // √(2 × g × cost / 0.1) ≤ 18,085 ⟺ g ≤ 446.
    assert!(plan::pays_off(&plan, tokens(446)));
    assert!(!plan::pays_off(&plan, tokens(447)));
}

#[test]
fn post_roi_gates_soft_capsules_only() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let ok = post_roi(
        Trigger::AutoThreshold,
        tokens(48_000),
        tokens(36_000),
        &budget,
    );
    assert_eq!((ok.reclaimed, ok.ratio_ppm, ok.ok), (12_000, 250_000, true));
    let short = post_roi(
        Trigger::AutoThreshold,
        tokens(48_000),
        tokens(36_001),
        &budget,
    );
    assert_eq!((short.reclaimed, short.ok), (11_999, false));
    let thin = post_roi(Trigger::Milestone, tokens(100_000), tokens(76_000), &budget);
    assert_eq!(
        (thin.reclaimed, thin.ratio_ppm, thin.ok),
        (24_000, 240_000, false)
    );
    let user = post_roi(Trigger::User, tokens(30_000), tokens(31_000), &budget);
    assert_eq!((user.reclaimed, user.ok), (-1_000, true));
    assert!(post_roi(Trigger::HardLimit, tokens(1), tokens(1), &budget).ok);
}

#[test]
fn compact_with_nothing_before_the_window_is_skipped() {
    let budget = budget(200_000, 32_000, &CompactionConfig::default());
    let mut session = Session::default();
    session.user("hello");
    session.assistant("hi");
    let plan = plan_of(&session, &budget, Trigger::User).unwrap();
    assert_eq!(plan.skip, Some(SkipReason::NothingToCompact));
    assert_eq!(plan.first_kept_entry_id, Some(session.path[0].id.clone()));
    assert!(plan.span_entry_ids.is_empty());
    assert_eq!(plan.span_tokens, TokenCount::ZERO);
}

// ---------------------------------------------------------------------------
// Explanation
// ---------------------------------------------------------------------------

#[test]
fn a_plan_explains_itself() {
    let config = CompactionConfig {
        safety_reserve_tokens: tokens(1_000),
        ..CompactionConfig::default()
    };
    let budget = budget(20_000, 2_000, &config);
    let mut session = Session::default();
    for _ in 0..8 {
        session.assistant(text_of(2_000));
    }
    let live = LiveInput::build(bare_setup(&budget, &[]), &session.path);
    let plan = plan::plan(
        &live,
        &request(
            Trigger::HardLimit,
            live.total_tokens(),
            &budget,
            1_000,
            5_000,
        ),
    )
    .unwrap();
    insta::assert_snapshot!(plan.explain(), @r"
    compaction plan: hard_limit (forced)
      effective        16,032 tokens (calibration × 1.00)
      limits           hardLimit 17,000 · autoLimit 16,999 · keepRecent 12,749 · roiFloor 4,249 · minSavingsRatio 0.25
      boundary         e_00000000000000000000000000000003
      truncation       head 1,913 + tail 1,912 characters kept, 4,175 omitted, 980 tokens
      span             3 entries = 5,032 tokens
      fit              fixed 0 + capsule budget 6,000 + tail 11,000 (6 units) = 17,000 ≤ hardLimit 17,000 (boundary moved later to fit)
      capsule estimate 2,500 = (facts 1,000 + narrative 1,500) × 1.00
      reclaimable      2,532 tokens (15.7 % of effective)
      pre-ROI          not checked (only soft triggers are)
      outcome          generate the capsule
      expected leaf    e_00000000000000000000000000000008
    ");
}
