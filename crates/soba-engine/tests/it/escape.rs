//! Escapes and secrets end to end (SPEC §11.1, §12, §13, §17): a model
//! driving the real agent loop tries every way out of the workspace and gets
//! errors, outside files stay untouched and unread; a 100 MB tool output is
//! capped before it reaches the log; exported capsules carry no secret and
//! say how many they removed; flight records carry no summary text; the
//! provider key is never stored. (The tool tests cover each escape at the
//! tool level; these go through the loop, the log and the next request.)

use std::os::unix::fs::symlink;
use std::sync::Arc;

use serde_json::json;
use soba_core::render::{CapsuleFileHeader, CapsuleView, capsule_file, parse_capsule_file};
use soba_core::tokens::ByteCounter;
use soba_core::{Block, EntryBody, Role};
use soba_engine::barrier::{Forced, Preflight};
use soba_engine::event::{Outcome, TurnEnd};
use soba_store::flight::flight_path;
use soba_store::log::SessionId;
use soba_store::reader::read_log;
use tokio_util::sync::CancellationToken;

use crate::harness::{Harness, Options, small_config};
use crate::rig::{Pause, PausingSummarizer, Rig, RigOptions, Step, unpaired_tool_block};

const OUTSIDE_SECRET: &str = "TOP-SECRET-OUTSIDE-THE-WORKSPACE";

/// Returns every tool result in the log, in order: (text, is_error).
fn tool_results(log_path: &std::path::Path) -> Vec<(String, bool)> {
    let log = read_log(log_path).unwrap();
    assert!(log.is_clean(), "{:?}", log.diagnostics());
    log.entries()
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            EntryBody::Message(m) if m.message.role == Role::Tool => Some(&m.message),
            _ => None,
        })
        .flat_map(|message| message.content.iter())
        .filter_map(|block| match block {
            Block::ToolResult(result) => Some((result.text(), result.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_agent_loop_cannot_leave_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::open(
        dir.path(),
        RigOptions {
            record_requests: true,
            ..RigOptions::default()
        },
    );
    let ws = rig.agent.tool_context.workspace().root().to_path_buf();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("secret.txt");
    std::fs::write(&secret, format!("{OUTSIDE_SECRET}\n")).unwrap();
    let target = outside.join("hard-target.txt");
    std::fs::write(&target, "outside, hard-linked\n").unwrap();
    symlink(&outside, ws.join("link-dir")).unwrap();
    symlink(&secret, ws.join("link-file")).unwrap();
    symlink(outside.join("not-yet.txt"), ws.join("dangling")).unwrap();
    std::fs::hard_link(&target, ws.join("hard.txt")).unwrap();
    let absolute = secret.display().to_string();

    let attempts = vec![
        Step::read("../outside/secret.txt"),
        Step::read(&absolute),
        Step::read("link-file"),
        Step::read("link-dir/secret.txt"),
        Step::read("data/../../outside/secret.txt"),
        Step::call(
            "write_file",
            json!({"path": "../outside/new.txt", "content": "x"}),
        ),
        Step::call(
            "write_file",
            json!({"path": "link-dir/new.txt", "content": "x"}),
        ),
        Step::call("write_file", json!({"path": "dangling", "content": "x"})),
        Step::call(
            "write_file",
            json!({"path": "hard.txt", "content": "overwritten"}),
        ),
        Step::call(
            "edit_file",
            json!({"path": "link-file", "oldString": "TOP", "newString": "PWNED"}),
        ),
        Step::call(
            "edit_file",
            json!({"path": "hard.txt", "oldString": "outside", "newString": "PWNED"}),
        ),
        Step::call("list_files", json!({"path": "link-dir"})),
        Step::call("list_files", json!({"path": ".."})),
        Step::call(
            "search",
            json!({"pattern": "TOP-SECRET", "path": "link-dir"}),
        ),
        Step::call("search", json!({"pattern": "TOP-SECRET", "path": "/"})),
    ];
    let n_attempts = attempts.len();
    rig.client.push(attempts);
    rig.client.push([Step::text("I could not get out.")]);
    let end = rig
        .agent
        .run_turn(
            "read the secret outside the workspace",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(end, TurnEnd::Completed);

    let results = tool_results(&rig.log_path);
    assert_eq!(results.len(), n_attempts);
    for (idx, (text, is_error)) in results.iter().enumerate() {
        assert!(is_error, "attempt {idx} succeeded: {text}");
        assert!(
            !text.contains(OUTSIDE_SECRET),
            "attempt {idx} leaked the secret"
        );
    }
    assert!(
        results[0].0.contains("is outside the workspace root"),
        "{}",
        results[0].0
    );
    // Nothing outside changed or appeared.
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        format!("{OUTSIDE_SECRET}\n")
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "outside, hard-linked\n"
    );
    let mut names: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["hard-target.txt", "secret.txt"]);
    // The secret reached neither the log nor any request.
    let log_text = std::fs::read_to_string(&rig.log_path).unwrap();
    assert!(!log_text.contains(OUTSIDE_SECRET));
    for request in rig.client.requests.lock().unwrap().iter() {
        let text = format!("{request:?}");
        assert!(!text.contains(OUTSIDE_SECRET));
        assert!(unpaired_tool_block(request).is_none());
    }
}

/// SPEC §11.1 and §17: a 100 MB tool output keeps its first and last 512
/// KiB in the log, with a marker naming the dropped bytes, and the next
/// request stays under hardLimit.
#[tokio::test]
async fn a_hundred_megabyte_tool_output_is_capped_before_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::open(dir.path(), RigOptions::default());
    rig.client.push([
        Step::call(
            "bash",
            json!({"command": "head -c 104857600 /dev/zero | tr '\\0' x; echo; echo THE-END"}),
        ),
        Step::text("that was long"),
    ]);
    let end = rig
        .agent
        .run_turn("run the generator", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(end, TurnEnd::Completed);
    let results = tool_results(&rig.log_path);
    assert_eq!(results.len(), 1);
    let (text, is_error) = &results[0];
    assert!(!is_error, "{}", &text[..200.min(text.len())]);
    assert!(text.len() <= (1 << 20) + 512, "{} bytes kept", text.len());
    assert!(text.len() >= 1 << 20, "{} bytes kept", text.len());
    assert!(
        text.trim_end().ends_with("THE-END\nexit code 0"),
        "{:?}",
        &text[text.len().saturating_sub(300)..]
    );
    // 104,857,600 + 1 + 8 bytes of output, 2 × 512 KiB kept.
    assert!(
        text.contains("\n[… 103809033 bytes of output dropped …]\n"),
        "no marker"
    );
    let core = rig.core.lock().await;
    assert!(core.measure().tokens <= core.budget().hard_limit());
    assert!(std::fs::metadata(&rig.log_path).unwrap().len() < 2 << 20);
}

/// The secrets planted in the session: each a pattern SPEC §12 names.
fn secrets() -> Vec<(&'static str, String)> {
    vec![
        (
            "anthropic_key",
            format!("sk-ant-api03-{}", "A1b2C3d4E5f6G7h8".repeat(3)),
        ),
        ("openai_key", format!("sk-proj-{}", "Z9y8X7w6V5u4".repeat(3))),
        ("github_token", format!("ghp_{}", "abcdefghij0123456789".repeat(2))),
        ("slack_token", "xoxb-123456789012-abcdefghijkl".to_owned()),
        ("aws_access_key", "AKIAIOSFODNN7EXAMPLE".to_owned()),
        (
            "jwt",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
                .to_owned(),
        ),
        ("secret", "password = hunter2hunter2hunter2".to_owned()),
    ]
}

/// SPEC §12: an exported capsule of a session full of secrets holds none
/// of them, counts its redactions, and still loads.
#[tokio::test]
async fn exported_capsules_hold_no_secrets_and_count_them() {
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::open(dir.path(), RigOptions::default());
    let planted = secrets();
    let all = planted
        .iter()
        .map(|(_, text)| text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let ws = rig.agent.tool_context.workspace().root().to_path_buf();
    std::fs::write(ws.join(".env"), format!("{all}\n")).unwrap();
    // The secrets reach the capsule's facts through the user's instructions
    // (kept verbatim) and a failing command's output (unresolved errors).
    rig.client.push([
        Step::read(".env"),
        Step::call("bash", json!({"command": "cat .env; exit 3"})),
        Step::text("the credentials are in .env"),
    ]);
    let end = rig
        .agent
        .run_turn(
            &format!("deploy with these credentials:\n{all}"),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(end, TurnEnd::Completed);
    for idx in 0..12 {
        rig.client.push([
            Step::read(&format!("data/file{idx:02}.txt")),
            Step::text("read"),
        ]);
        rig.agent
            .run_turn(&format!("read file {idx}"), &CancellationToken::new())
            .await
            .unwrap();
    }
    let result = rig
        .agent
        .barrier
        .preflight(
            Some(Forced::User {
                instructions: Some(format!("keep the token {}", planted[0].1)),
            }),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let Preflight::Compacted(end) = result else {
        panic!("a /compact runs: {result:?}")
    };
    assert_eq!(end.outcome, Outcome::Completed, "{end:?}");
    let core = rig.core.lock().await;
    let capsule_entry = core
        .path()
        .iter()
        .rev()
        .find(|entry| matches!(entry.body, EntryBody::Capsule(_)))
        .unwrap();
    let EntryBody::Capsule(capsule) = &capsule_entry.body else {
        unreachable!()
    };
    let in_capsule = planted
        .iter()
        .filter(|(_, text)| {
            soba_core::render::sections_markdown(&CapsuleView::from(&**capsule))
                .contains(text.as_str())
        })
        .count();
    assert!(
        in_capsule >= 3,
        "only {in_capsule} secrets reached the capsule"
    );
    let header = CapsuleFileHeader {
        id: capsule_entry.id.as_str(),
        title: &format!("handoff {}", planted[2].1),
        created_at: "2026-11-30T00:00:00Z",
        source_session: "rig",
        source_leaf: capsule_entry.id.as_str(),
    };
    let file = capsule_file(&header, &CapsuleView::from(&**capsule), &ByteCounter);
    for (kind, text) in &planted {
        assert!(
            !file.text.contains(text.as_str()),
            "{kind} leaked into the export"
        );
    }
    assert!(
        file.redactions > in_capsule,
        "{} redactions for {in_capsule} secrets and the title",
        file.redactions
    );
    assert_eq!(
        file.redactions,
        file.redactions_by_kind
            .iter()
            .map(|(_, n)| n)
            .sum::<usize>()
    );
    let parsed = parse_capsule_file(&file.text).expect("the export loads back");
    assert!(
        parsed
            .front
            .title
            .unwrap()
            .contains("[REDACTED:github_token]")
    );
    // The session log itself keeps what was said (append-only, local).
    let log_text = std::fs::read_to_string(&rig.log_path).unwrap();
    assert!(log_text.contains(planted[0].1.as_str()));
}

/// SPEC §13: flight records hold figures, never summary content.
#[tokio::test]
async fn flight_records_hold_no_summary_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut summarizer = PausingSummarizer::new(Pause::Yields(Arc::new(vec![0])), 200_000);
    summarizer.text = soba_core::capsule::NARRATIVE_HEADINGS
        .iter()
        .map(|heading| format!("## {heading}\nZEBRA-NARRATIVE about {heading} of the audit.\n"))
        .collect::<Vec<_>>()
        .join("\n");
    let rig = Rig::open(
        dir.path(),
        RigOptions {
            summarizer: Some(Arc::new(summarizer)),
            ..RigOptions::default()
        },
    );
    for idx in 0..14 {
        rig.client
            .push([Step::read(&format!("data/file{idx:02}.txt"))]);
    }
    rig.client.push([Step::text("audit done")]);
    rig.agent
        .run_turn("audit the data files", &CancellationToken::new())
        .await
        .unwrap();
    let log_text = std::fs::read_to_string(&rig.log_path).unwrap();
    assert!(
        log_text.contains("ZEBRA-NARRATIVE"),
        "the capsule in the log carries the summary"
    );
    let flight = flight_path(
        dir.path().join("sessions"),
        &SessionId::parse("rig").unwrap(),
    );
    let flight_text = std::fs::read_to_string(&flight).unwrap();
    assert!(
        flight_text.contains("\"outcome\":\"completed\""),
        "{flight_text}"
    );
    assert!(
        !flight_text.contains("ZEBRA"),
        "summary text in a flight record"
    );
    assert!(!flight_text.contains("audit the data files"));
    assert!(!flight_text.contains("line 0 of file"));
}

/// SPEC §17: the provider key is sent, never logged or stored.
#[tokio::test]
async fn the_provider_key_is_never_stored() {
    let h = Harness::start(Options {
        compaction: small_config(),
        ..Options::default()
    })
    .await;
    h.push_read("data/file01.txt");
    h.push_text("done");
    assert_eq!(h.turn("read one file").await, TurnEnd::Completed);
    let requests = h.server.requests();
    // The fake server redacts the key it receives; the header was there.
    assert!(
        requests
            .iter()
            .all(|request| request.header("authorization").is_some()),
        "the key was sent"
    );
    for entry in std::fs::read_dir(h.log_path.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("test-key"),
            "{} stores the key",
            path.display()
        );
    }
}
