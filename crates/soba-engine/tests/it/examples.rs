//! Runs both examples' `run` and checks what their printouts claim. Their
//! source is included here, so no cargo process is spawned and the examples
//! are compiled against the public API exactly as `cargo run --example`
//! builds them.

// `main` and the printing of each example belong to its binary.
#[allow(dead_code)]
#[path = "../../examples/minimal_agent.rs"]
mod minimal_agent;

#[allow(dead_code)]
#[path = "../../examples/own_summarizer.rs"]
mod own_summarizer;

use soba_core::Quality;

#[tokio::test]
async fn minimal_agent_shows_hygiene_a_capsule_and_an_exact_resume() {
    let dir = tempfile::tempdir().unwrap();
    let report = minimal_agent::run(dir.path()).await.unwrap();
    assert_eq!(report.turns, 11);
    // Every turn is one tool call and one answer.
    assert_eq!(report.requests, 22);
    assert_eq!(report.hard_limit, 13_000);
    assert!(
        report.largest_request <= report.hard_limit,
        "{} > {}",
        report.largest_request,
        report.hard_limit
    );
    let hygiene: Vec<&String> = report
        .barrier_lines
        .iter()
        .filter(|line| line.contains("hygiene:"))
        .collect();
    assert_eq!(hygiene.len(), 1, "{:#?}", report.barrier_lines);
    let compacted: Vec<&String> = report
        .barrier_lines
        .iter()
        .filter(|line| line.contains("Compacted ("))
        .collect();
    assert_eq!(compacted.len(), report.capsules);
    assert_eq!(report.capsules, 4, "{:#?}", report.barrier_lines);
    assert!(compacted.iter().all(|line| line.contains("· ck_")));
    assert!(report.resume_matches);
    assert_eq!(
        report.capsule_head.first().map(String::as_str),
        Some("## Goal")
    );
    // The original task survives every capsule verbatim.
    assert_eq!(
        report.capsule_head.get(1).map(String::as_str),
        Some("Read part 1 of the design notes and tell me what it decides.")
    );
    let printed = report.to_string();
    assert!(printed.contains("resume: the reopened session's next request equals the live one's"));
    assert!(report.log_path.exists());
}

#[tokio::test]
async fn own_summarizer_writes_every_capsule_and_carries_decisions_forward() {
    let dir = tempfile::tempdir().unwrap();
    let report = own_summarizer::run(dir.path()).await.unwrap();
    assert_eq!(report.turns, 8);
    assert_eq!(report.summarizer_calls, report.capsules.len());
    assert_eq!(report.capsules.len(), 4, "{:#?}", report.result_lines);
    assert!(
        report
            .capsules
            .iter()
            .all(|(summarizer, quality)| summarizer == "host/decision-log"
                && *quality == Quality::Full),
        "{:?}",
        report.capsules
    );
    // Services 1–7 were compacted away; their decisions are carried from
    // capsule to capsule. Service 8's answer is still in the verbatim tail.
    let expected: Vec<String> = (1..=7)
        .map(|service| {
            format!(
                "- service {service} keeps its retry budget at {} requests",
                3 + service % 4
            )
        })
        .collect();
    assert_eq!(report.decisions, expected);
    assert_eq!(
        report.instructions_seen,
        vec!["keep every retry-budget decision".to_owned()]
    );
    assert_eq!(report.result_lines.len(), 4);
    assert!(
        report.result_lines[..3]
            .iter()
            .all(|line| line.starts_with("Compacted (turn_complete): "))
    );
    assert!(report.result_lines[3].starts_with("Compacted (user): "));
}
