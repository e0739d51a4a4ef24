//! Summary guards (SPEC §9.3): a corpus of bad summaries, each rejected by
//! the right guard, and valid ones that merely mention placeholder words.

use soba_core::capsule::NARRATIVE_HEADINGS;
use soba_core::guard::{Guard, check_summary, normalize};
use soba_core::tokens::{ByteCounter, TokenCount, TokenCounter};

/// Spans are large unless a test says otherwise.
const BIG_SPAN: u64 = 100_000;

/// Checks one raw summary against a span: `Ok(())` when it passes, else the
/// expected guard name.
fn check(raw: &str, span_tokens: u64, expected: Result<(), &str>) {
    let outcome = check_summary(raw, TokenCount::new(span_tokens), &ByteCounter);
    match (outcome, expected) {
        (Ok(_), Ok(())) => {}
        (Err(rejection), Err(name)) => assert_eq!(rejection.name(), name, "{raw:?}: {rejection}"),
        (outcome, expected) => panic!("{raw:?}: got {outcome:?}, expected {expected:?}"),
    }
}

/// A valid summary whose sections mention "loading" and "generating".
fn valid_summary() -> String {
    "## Goal\nMake the config loading code stop generating duplicate keys.\n\
     ## Constraints\nKeep the public API; no new dependencies.\n\
     ## Done\nFound the bug in loader.rs: keys are generated twice when a file is loading twice.\n\
     ## In progress\nWriting the regression test for loading nested files.\n\
     ## Pending\nDocs.\n\
     ## Decisions\n(none)\n\
     ## Blockers\n(none)\n\
     ## Next steps\nRun cargo test, then update CHANGELOG.md.\n"
        .to_owned()
}

fn without_heading(heading: &str) -> String {
    let summary = valid_summary();
    let start = summary
        .find(&format!("## {heading}\n"))
        .expect("heading present");
    let end = summary[start + 3..]
        .find("## ")
        .map_or(summary.len(), |idx| start + 3 + idx);
    format!("{}{}", &summary[..start], &summary[end..])
}

#[test]
fn placeholders_are_rejected_in_english_and_chinese() {
    let corpus = [
        "Generating…",
        "Generating...",
        "generating summary...",
        "Loading",
        "loading…",
        "LOADING...",
        "Summarizing...",
        "Summarizing the conversation…",
        "Summarising…",
        "Pending",
        "pending.",
        "TBD",
        "N/A",
        "n/a",
        "…",
        "...",
        "Please wait...",
        "Processing…",
        "Summary pending",
        "In progress...",
        "Loading, please wait…",
        "正在生成…",
        "正在生成摘要……",
        "加载中",
        "加载中...",
        "生成中。。。",
        "总结中…",
        "正在总结",
        "处理中",
        "待定",
        "暂无摘要",
        "请稍候…",
        "正在生成摘要，请稍候…",
        "```\nGenerating…\n```",
        "Generating…\nEND-OF-SUMMARY",
        "  **Loading...**  ",
    ];
    assert!(corpus.len() >= 30);
    for raw in corpus {
        check(raw, BIG_SPAN, Err("placeholder"));
    }
}

#[test]
fn short_and_empty_outputs_are_rejected() {
    let exactly_49 = "Fixed the parser; all 13 tests pass; docs remain.";
    assert_eq!(exactly_49.chars().count(), 49);
    for raw in [
        "END-OF-SUMMARY",
        "END-OF-SUMMARY\nEND-OF-SUMMARY",
        "```\nEND-OF-SUMMARY\n```",
        "```markdown\n\nEND-OF-SUMMARY\n```",
        "   \n\t  ",
        "",
        "## Goal\nx",
        exactly_49,
        "摘要：完成了解析器修复，测试全部通过。",
    ] {
        check(raw, BIG_SPAN, Err("too_short"));
    }
    // 50 characters pass the length guard and fail on headings.
    let exactly_50 = "Fixed the parser; all 13 tests pass; docs remain..";
    assert_eq!(exactly_50.chars().count(), 50);
    check(exactly_50, BIG_SPAN, Err("missing_heading:goal"));
}

#[test]
fn a_summary_not_smaller_than_its_span_is_rejected() {
    let summary = valid_summary();
    let n = ByteCounter.count_text(normalize(&summary).as_str()).n.get();
    check(&summary, n, Err("not_smaller"));
    check(&summary, n / 2, Err("not_smaller"));
    check(&summary, n + 1, Ok(()));
}

#[test]
fn each_missing_heading_is_named() {
    for heading in NARRATIVE_HEADINGS {
        let expected = format!(
            "missing_heading:{}",
            heading.to_ascii_lowercase().replace(' ', "_")
        );
        check(&without_heading(heading), BIG_SPAN, Err(expected.as_str()));
    }
    // A heading inside a code block does not count.
    let fenced_goal = valid_summary().replace("## Goal\n", "```\n## Goal\n```\n");
    check(&fenced_goal, BIG_SPAN, Err("missing_heading:goal"));
    // Nor does a bold line.
    check(
        &valid_summary().replace("## Pending", "**Pending**"),
        BIG_SPAN,
        Err("missing_heading:pending"),
    );
}

#[test]
fn valid_summaries_pass_even_when_they_mention_placeholder_words() {
    let summary = valid_summary();
    check(&summary, BIG_SPAN, Ok(()));
    check(&format!("{summary}\nEND-OF-SUMMARY"), BIG_SPAN, Ok(()));
    check(
        &format!("```markdown\n{summary}```\nEND-OF-SUMMARY\n"),
        BIG_SPAN,
        Ok(()),
    );
    check(
        &format!("Here is the summary:\n\n{summary}"),
        BIG_SPAN,
        Ok(()),
    );
    check(&summary.to_uppercase(), BIG_SPAN, Ok(()));
    check(
        &summary.replace("## Next steps", "## next steps:"),
        BIG_SPAN,
        Ok(()),
    );
    let chinese = "## Goal\n修复配置加载中生成重复键的问题。\n## Constraints\n(none)\n## Done\n找到了 loader.rs 中的缺陷。\n## In progress\n正在编写回归测试。\n## Pending\n(none)\n## Decisions\n(none)\n## Blockers\n(none)\n## Next steps\n运行 cargo test。";
    check(chinese, BIG_SPAN, Ok(()));
}

#[test]
fn a_valid_summary_parses_into_the_narrative() {
    let raw = format!(
        "```\nPreamble the model wrote.\n{}END-OF-SUMMARY\n```",
        valid_summary()
    );
    let narrative = check_summary(&raw, TokenCount::new(BIG_SPAN), &ByteCounter).expect("valid");
    assert_eq!(
        narrative.goal,
        "Make the config loading code stop generating duplicate keys."
    );
    assert_eq!(narrative.decisions, "(none)");
    assert_eq!(
        narrative.next_steps,
        "Run cargo test, then update CHANGELOG.md."
    );
    // Extra headings stay inside the section they follow.
    let extra = valid_summary().replace(
        "## Pending\nDocs.\n",
        "## Pending\nDocs.\n## Notes for later\nBenchmarks.\n",
    );
    let narrative = check_summary(&extra, TokenCount::new(BIG_SPAN), &ByteCounter).expect("valid");
    assert_eq!(
        narrative.pending,
        "Docs.\n\n## Notes for later\nBenchmarks."
    );
}

#[test]
fn rejections_carry_their_guard() {
    let rejection = check_summary("Generating…", TokenCount::new(BIG_SPAN), &ByteCounter)
        .expect_err("placeholder");
    assert_eq!(rejection.guard, Guard::Placeholder);
    assert!(
        rejection
            .to_string()
            .starts_with("summary rejected by the placeholder guard")
    );
    let rejection = check_summary(
        &without_heading("In progress"),
        TokenCount::new(BIG_SPAN),
        &ByteCounter,
    )
    .expect_err("missing heading");
    assert_eq!(rejection.guard, Guard::MissingHeading("In progress"));
    assert_eq!(rejection.name(), "missing_heading:in_progress");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Guards judge any output without panicking, and whatever passes has
    /// every heading and at least 50 characters.
    #[test]
    fn guards_never_panic(
        raw in "(```[a-z]*\n)?(## (Goal|Constraints|Done|In progress|Pending|Decisions|Blockers|Next steps|x)\n[^\u{0}]{0,40}\n){0,10}(END-OF-SUMMARY)?(\n```)?",
        noise in "\\PC{0,80}",
        span in 0u64..2_000,
    ) {
        for text in [raw.clone(), format!("{noise}{raw}"), noise.clone()] {
            if let Ok(narrative) = check_summary(&text, TokenCount::new(span), &ByteCounter) {
                let normalized = normalize(&text);
                proptest::prop_assert!(normalized.chars().count() >= 50);
                proptest::prop_assert!(ByteCounter.count_text(&normalized).n < TokenCount::new(span));
                proptest::prop_assert_eq!(narrative.sections().len(), 8);
            }
        }
    }
}
