//! Budget math (SPEC §4.3), calibration (§4.1, §6.3) and the effective-token
//! measurement (§4.2), through the public API, with the spec's figures.

use soba_core::budget::Budget;
use soba_core::calibration::{
    CalibrationInput, Factor, MeasureInput, Measurement, MeasurementSource, ModelFamily, calibrate,
    measure,
};
use soba_core::capsule::{
    Capsule, CapsuleState, LocalSections, Narrative, OverflowRecord, Quality, Trigger,
};
use soba_core::config::{CompactionConfig, Ratio};
use soba_core::entry::{Entry, EntryBody, MessageEntry};
use soba_core::id::{EntryId, IdKind};
use soba_core::input::InputMessageTokens;
use soba_core::message::{Message, Usage};
use soba_core::tokens::TokenCount;

/// The figures of both §4.3 tables plus the rest of the budget.
#[derive(Debug, PartialEq, Eq)]
struct Limits {
    hard: u64,
    soft: u64,
    auto: u64,
    base: u64,
    hygiene: u64,
    keep_recent: u64,
    soft_gate: u64,
    roi_floor: u64,
    max_tool_result: u64,
}

fn limits(budget: &Budget) -> Limits {
    Limits {
        hard: budget.hard_limit().get(),
        soft: budget.soft_limit().get(),
        auto: budget.auto_limit().get(),
        base: budget.base().get(),
        hygiene: budget.hygiene_limit().get(),
        keep_recent: budget.keep_recent().get(),
        soft_gate: budget.soft_gate().get(),
        roi_floor: budget.roi_floor().get(),
        max_tool_result: budget.max_tool_result_tokens().get(),
    }
}

/// Checks the budget of a model under the default configuration: either its
/// limits or the error message.
fn check(context_window: u64, max_output: u64, expected: Result<Limits, &str>) {
    let got = Budget::compute(
        TokenCount::new(context_window),
        TokenCount::new(max_output),
        &CompactionConfig::default(),
    );
    match (got, expected) {
        (Ok(budget), Ok(expected)) => {
            assert_eq!(limits(&budget), expected, "{context_window}/{max_output}")
        }
        (Err(err), Err(expected)) => {
            assert_eq!(err.to_string(), expected, "{context_window}/{max_output}")
        }
        (got, expected) => {
            panic!("{context_window}/{max_output}: got {got:?}, expected {expected:?}")
        }
    }
}

#[test]
fn both_tables_of_section_4_3() {
    #[rustfmt::skip]
    let cases = [
        (65_000, 8_000, Limits { hard: 48_808, soft: 39_046, auto: 39_046, base: 48_808, hygiene: 24_404, keep_recent: 20_000, soft_gate: 32_000, roi_floor: 9_761, max_tool_result: 12_202 }),
        (200_000, 32_000, Limits { hard: 159_808, soft: 127_846, auto: 80_000, base: 100_000, hygiene: 50_000, keep_recent: 20_000, soft_gate: 32_000, roi_floor: 12_000, max_tool_result: 16_000 }),
        (1_000_000, 64_000, Limits { hard: 927_808, soft: 742_246, auto: 80_000, base: 100_000, hygiene: 50_000, keep_recent: 20_000, soft_gate: 32_000, roi_floor: 12_000, max_tool_result: 16_000 }),
        (32_768, 8_192, Limits { hard: 16_384, soft: 16_383, auto: 16_383, base: 16_384, hygiene: 8_192, keep_recent: 12_287, soft_gate: 16_383, roi_floor: 4_095, max_tool_result: 4_096 }),
    ];
    for (window, max_output, expected) in cases {
        check(window, max_output, Ok(expected));
    }
    check(
        8_192,
        2_048,
        Err("hardLimit \u{2212}2,048 ≤ 0 (safetyReserveTokens too large for this model)"),
    );
}

#[test]
fn seed_example_and_exact_ratios() {
    // Seed 000: 65,000 / 8,000 / 8,192 → hardLimit 48,808, softLimit 39,046.
    let seed = Budget::compute(
        TokenCount::new(65_000),
        TokenCount::new(8_000),
        &CompactionConfig::default(),
    )
    .unwrap();
    assert_eq!(
        (seed.hard_limit().get(), seed.soft_limit().get()),
        (48_808, 39_046)
    );

    // floor(80000 / 0.8) = 100,000 is the base of every large model.
    let large = Budget::compute(
        TokenCount::new(400_000),
        TokenCount::new(32_000),
        &CompactionConfig::default(),
    )
    .unwrap();
    assert_eq!(large.base().get(), 100_000);

    // floor(90000 × 0.7) = 63,000 where f64 gives 62,999.
    let config = CompactionConfig {
        auto_compact_threshold_ratio: Ratio::parse_decimal("0.7").unwrap(),
        min_tokens_for_auto_compact: TokenCount::new(1_000),
        max_working_set_tokens: None,
        ..CompactionConfig::default()
    };
    let budget =
        Budget::compute(TokenCount::new(100_000), TokenCount::new(1_808), &config).unwrap();
    assert_eq!(
        (budget.hard_limit().get(), budget.soft_limit().get()),
        (90_000, 63_000)
    );
    // Without a working-set ceiling base is hardLimit and autoLimit softLimit.
    assert_eq!(
        (budget.auto_limit().get(), budget.base().get()),
        (63_000, 90_000)
    );
}

#[test]
fn warning_names_the_threshold() {
    let budget = Budget::compute(
        TokenCount::new(32_768),
        TokenCount::new(8_192),
        &CompactionConfig::default(),
    )
    .unwrap();
    let warnings: Vec<String> = budget.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "soft compaction fires only one token below the hard limit for this model; \
          set compaction.minTokensForAutoCompact below 13,107 to compact earlier"
        ]
    );
    // With the defaults the warning holds exactly while hardLimit ≤ 32,001.
    let at = |hard: u64| {
        Budget::compute(
            TokenCount::new(hard + 8_192),
            TokenCount::new(0),
            &CompactionConfig::default(),
        )
        .unwrap()
        .warnings()
        .len()
    };
    assert_eq!((at(32_001), at(32_002)), (1, 0));
}

#[test]
fn configuration_errors() {
    let window = TokenCount::new(200_000);
    let out = TokenCount::new(32_000);
    let error = |config: CompactionConfig| {
        Budget::compute(window, out, &config)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error(CompactionConfig {
            auto_compact_threshold_ratio: Ratio::from_ppm(0),
            ..CompactionConfig::default()
        }),
        "compaction.autoCompactThresholdRatio 0 is outside (0, 1]"
    );
    assert_eq!(
        error(CompactionConfig {
            keep_recent_tokens: TokenCount::new(100),
            ..CompactionConfig::default()
        }),
        "compaction.keepRecentTokens 100 < 256; raise it to at least 256"
    );
    assert_eq!(
        error(CompactionConfig {
            max_working_set_tokens: Some(TokenCount::new(500)),
            ..CompactionConfig::default()
        }),
        "compaction.maxWorkingSetTokens 500 < 1,000; raise it or set it to null"
    );
    assert_eq!(
        error(CompactionConfig {
            safety_reserve_tokens: TokenCount::new(170_000),
            ..CompactionConfig::default()
        }),
        "hardLimit \u{2212}2,000 ≤ 0 (safetyReserveTokens too large for this model)"
    );
}

const CLAUDE: &str = "anthropic/claude-sonnet-4-5";

fn id(n: u128) -> EntryId {
    EntryId::from_uuid(IdKind::Entry, n)
}

fn entry(n: u128, body: EntryBody) -> Entry {
    Entry {
        id: id(n),
        parent_id: n.checked_sub(1).map(id),
        timestamp: "2025-01-01T00:00:00Z".into(),
        body,
    }
}

fn user(n: u128, text: &str) -> Entry {
    entry(
        n,
        EntryBody::Message(MessageEntry {
            message: Message::user(text),
            tokens: None,
        }),
    )
}

/// An assistant reply of `model` whose request reported `prompt` tokens
/// (split over input and cache, as normalised usage is) for `local` counted.
fn reply(n: u128, model: &str, prompt: u64, local: u64) -> Entry {
    let mut message = Message::assistant("ok");
    message.model = Some(model.to_owned());
    message.usage = Some(Usage {
        input: prompt / 4,
        cache_read: prompt - prompt / 4,
        output: 900,
        ..Usage::default()
    });
    message.request_tokens_local = Some(local);
    entry(
        n,
        EntryBody::Message(MessageEntry {
            message,
            tokens: None,
        }),
    )
}

fn overflow_capsule(n: u128, stated_prompt: Option<u64>, request_tokens_local: u64) -> Entry {
    let capsule = Capsule {
        trigger: Trigger::ContextOverflow,
        quality: Quality::Degraded,
        first_kept_entry_id: None,
        boundary_truncation: None,
        tokens_before: TokenCount::new(130_000),
        tokens_after: TokenCount::new(30_000),
        summarizer: "deterministic".into(),
        previous_capsule_id: None,
        state: CapsuleState {
            model: CLAUDE.into(),
            ..CapsuleState::default()
        },
        instructions: None,
        native: None,
        overflow: Some(OverflowRecord {
            stated_prompt,
            request_tokens_local,
        }),
        imported: None,
        scope: None,
        narrative: Narrative::default(),
        earlier_narrative: None,
        rehydrated: Default::default(),
        local: LocalSections::default(),
        markdown: String::new(),
    };
    entry(n, EntryBody::Capsule(Box::new(capsule)))
}

fn claude_factor(path: &[Entry]) -> f64 {
    let input = CalibrationInput {
        model: CLAUDE,
        seed: ModelFamily::Claude.seed(),
        context_window: None,
    };
    calibrate(path, &input).factor.get()
}

fn assert_close(got: f64, expected: f64) {
    assert!(
        (got - expected).abs() < 1e-12,
        "got {got}, expected {expected}"
    );
}

#[test]
fn calibration_ema_clamp_and_seed() {
    assert_close(claude_factor(&[]), 1.25);
    // Samples 1.3 then 1.2: 0.3×1.3 + 0.7×1.25 = 1.265; 0.3×1.2 + 0.7×1.265 = 1.2455.
    let path = [
        user(1, "go"),
        reply(2, CLAUDE, 26_000, 20_000),
        reply(3, CLAUDE, 24_000, 20_000),
    ];
    assert_close(claude_factor(&path), 1.2455);
    // Other models' replies do not count.
    let path = [
        reply(1, "openai/gpt-5", 60_000, 20_000),
        reply(2, CLAUDE, 26_000, 20_000),
    ];
    assert_close(claude_factor(&path), 1.265);
    // Clamped at 2.0: 0.3×6 + 0.7×1.25 = 2.675.
    assert_close(claude_factor(&[reply(1, CLAUDE, 120_000, 20_000)]), 2.0);
}

#[test]
fn calibration_overflow_step_and_truncation() {
    // "resulted in 130,567 tokens" for a request counted 100,000 locally.
    assert_close(
        claude_factor(&[overflow_capsule(1, Some(130_567), 100_000)]),
        1.30567,
    );
    // No stated size: 1.25 × 1.15 = 1.4375; twice: 1.653125.
    assert_close(claude_factor(&[overflow_capsule(1, None, 100_000)]), 1.4375);
    let twice = [
        overflow_capsule(1, None, 100_000),
        overflow_capsule(2, None, 100_000),
    ];
    assert_close(claude_factor(&twice), 1.653125);
    // Truncation: estimate 20,000 × 1.25 = 25,000; below 20,000 reported is
    // left out, and the response is listed for the warning.
    let path = [
        reply(1, CLAUDE, 19_999, 20_000),
        reply(2, CLAUDE, 20_000, 20_000),
    ];
    let input = CalibrationInput {
        model: CLAUDE,
        seed: ModelFamily::Claude.seed(),
        context_window: None,
    };
    let calibration = calibrate(&path, &input);
    assert_close(calibration.factor.get(), 0.3 + 0.7 * 1.25);
    assert_eq!(calibration.samples, 1);
    assert_eq!(calibration.truncations.len(), 1);
    assert_eq!(
        (
            calibration.truncations[0].entry_id.clone(),
            calibration.truncations[0].reported_prompt
        ),
        (id(1), 19_999)
    );
}

fn counted(n: u128, tokens: u64) -> InputMessageTokens {
    InputMessageTokens {
        entry_id: Some(id(n)),
        tokens: TokenCount::new(tokens),
    }
}

#[test]
fn measurement_source() {
    // Capsule message (synthetic), user, reply, tool-free user follow-up.
    let path = [
        user(1, "go"),
        reply(2, CLAUDE, 50_000, 40_000),
        user(3, "and now?"),
    ];
    let messages = [
        InputMessageTokens {
            entry_id: None,
            tokens: TokenCount::new(2_000),
        },
        counted(1, 36_000),
        counted(2, 1_201),
        counted(3, 99),
    ];
    let input = MeasureInput {
        path: &path,
        fixed_tokens: TokenCount::new(4_000),
        messages: &messages,
        model: CLAUDE,
        factor: Factor::new(1.25),
        tool_set_unchanged: true,
    };
    // 50,000 + ceil(1.25 × (1,201 + 99)) = 51,625.
    assert_eq!(
        measure(&input),
        Measurement {
            tokens: TokenCount::new(51_625),
            source: MeasurementSource::ProviderUsage
        }
    );
    assert_eq!(MeasurementSource::ProviderUsage.as_str(), "provider_usage");

    // A skill activation after the reply: ceil(1.25 × 43,300) = 54,125.
    let skill = entry(
        4,
        EntryBody::Skill(soba_core::entry::SkillEntry {
            name: "review".into(),
            action: soba_core::entry::SkillAction::Activate,
            sha256: String::new(),
            text: "review carefully".into(),
        }),
    );
    let with_skill = [path[0].clone(), path[1].clone(), path[2].clone(), skill];
    let input = MeasureInput {
        path: &with_skill,
        ..input
    };
    assert_eq!(
        measure(&input),
        Measurement {
            tokens: TokenCount::new(54_125),
            source: MeasurementSource::Estimated
        }
    );
    assert_eq!(MeasurementSource::Estimated.as_str(), "estimated");

    // A changed tool set: the same estimate.
    let input = MeasureInput {
        path: &path,
        tool_set_unchanged: false,
        ..input
    };
    assert_eq!(measure(&input).source, MeasurementSource::Estimated);
}

proptest::proptest! {
    /// With the defaults, every budget with hardLimit ≥ 3 exists and its
    /// limits nest: the tail and the ROI floor fit in autoLimit together,
    /// so a soft compaction can always reach its floor.
    #[test]
    fn limits_nest(context_window in 0u64..2_000_000, max_output in 0u64..200_000) {
        let config = CompactionConfig::default();
        let hard = i128::from(context_window) - i128::from(max_output) - 8_192;
        let got = Budget::compute(TokenCount::new(context_window), TokenCount::new(max_output), &config);
        proptest::prop_assert_eq!(got.is_ok(), hard >= 3);
        if let Ok(budget) = got {
            let l = limits(&budget);
            proptest::prop_assert_eq!(i128::from(l.hard), hard);
            proptest::prop_assert!(l.hygiene < l.auto && l.auto <= l.soft && l.soft < l.hard);
            proptest::prop_assert!(l.base <= l.hard && l.auto <= 80_000);
            proptest::prop_assert!(l.keep_recent <= 20_000 && l.keep_recent + l.roi_floor <= l.auto);
            proptest::prop_assert!(l.soft_gate <= l.auto && l.roi_floor <= 12_000);
            proptest::prop_assert_eq!(l.max_tool_result, (l.hard / 4).min(16_000));
            proptest::prop_assert_eq!(budget.warnings().is_empty(), l.soft + 1 != l.hard);
        }
    }
}
