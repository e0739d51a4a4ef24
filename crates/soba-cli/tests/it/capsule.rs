//! `soba compact` and `soba capsule list|export|load|create` (SPEC §12) on
//! imported sessions: export/load round trips, redaction with a count,
//! malformed files, handoff files that append nothing, Project Memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use soba_core::render::parse_capsule_file;
use soba_core::{ContextSource, EntryBody, Quality, Trigger};
use soba_provider::fake::{Dialect, FakeServer, RecordedRequest, Reply, Script};
use soba_store::reader::read_log;

use crate::support::{Sandbox, last_line, long_pi_session, text};

const MODEL: &str = "anthropic/claude-sonnet-4-5";
const ANTHROPIC_SECRET: &str = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123";
const PASSWORD: &str = "password=correcthorsebatterystaple";

/// Imports a long synthetic session and returns its id.
fn session_with(sandbox: &Sandbox, secret: &str) -> String {
    let file = sandbox.write("trace.jsonl", &long_pi_session(6, 600, secret));
    let output = sandbox.run_ok(&["import", file.to_str().unwrap(), "--json"]);
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    reports[0]["sessionId"].as_str().unwrap().to_owned()
}

/// Runs `soba compact` and returns its stdout.
fn compact(sandbox: &Sandbox, id: &str, extra: &[&str]) -> String {
    let args = [
        &[
            "compact",
            "--session",
            id,
            "--model",
            MODEL,
            "--set",
            "compaction.keepRecentTokens=256",
        ][..],
        extra,
    ]
    .concat();
    text(&sandbox.run_ok(&args).stdout)
}

/// Returns the `ck_…` short id at the end of a result line.
fn short_ck(result_line: &str) -> String {
    result_line
        .split(" · ")
        .find(|part| part.starts_with("ck_"))
        .unwrap_or_else(|| panic!("no checkpoint id in {result_line:?}"))
        .trim()
        .to_owned()
}

/// Returns the redaction note at the end of an output line, e.g.
/// `2 secrets redacted (anthropic_key 1, secret 1)`.
fn redaction_note(line: &str) -> String {
    let line = line.trim_end();
    let start = line.rfind("; ").expect("a redaction note") + 2;
    line[start..line.len() - 1].to_owned()
}

fn session_file(sandbox: &Sandbox) -> PathBuf {
    sandbox.session_files().remove(0)
}

#[test]
fn export_then_load_gives_the_same_sections() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let result = compact(&sandbox, &id, &[]);
    assert!(result.starts_with("Compacted (user): "), "{result}");
    let ck = short_ck(result.lines().next().unwrap());

    let list = text(
        &sandbox
            .run_ok(&["capsule", "list", "--session", &id])
            .stdout,
    );
    assert!(list.contains(&format!("* {ck}  user")), "{list}");

    let exported = sandbox.run_ok(&[
        "capsule",
        "export",
        &ck,
        "out/a.capsule.md",
        "--session",
        &id,
    ]);
    let target = sandbox.ws.join("out/a.capsule.md");
    let stdout = text(&exported.stdout);
    assert!(
        stdout.starts_with(&format!("exported {ck} to {} (", target.display())),
        "{stdout}"
    );
    assert!(stdout.ends_with("tokens; no secrets found)\n"), "{stdout}");
    let file_text = std::fs::read_to_string(&target).unwrap();
    let parsed = parse_capsule_file(&file_text).unwrap();
    assert_eq!(parsed.front.schema_version, 1);
    assert_eq!(parsed.front.quality, Some(Quality::Full));
    assert_eq!(parsed.front.trigger, Some(Trigger::User));
    assert_eq!(parsed.front.source_session.as_deref(), Some(id.as_str()));

    // The exported sections are the capsule's own.
    let log = read_log(session_file(&sandbox)).unwrap();
    let capsule = log
        .entries()
        .iter()
        .find_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) => Some((logged.entry.id.clone(), capsule.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(parsed.front.id.as_deref(), Some(capsule.0.as_str()));
    for ((heading, exported), (_, original)) in parsed
        .narrative
        .sections()
        .iter()
        .zip(capsule.1.narrative.sections().iter())
    {
        assert_eq!(exported.trim(), original.trim(), "## {heading}");
    }
    assert!(!capsule.1.narrative.goal.trim().is_empty());

    // Loading appends the file as untrusted capsule_file context.
    let size_before = std::fs::metadata(session_file(&sandbox)).unwrap().len();
    let loaded = sandbox.run_ok(&["capsule", "load", "out/a.capsule.md", "--session", &id]);
    let stdout = text(&loaded.stdout);
    assert!(
        stdout.starts_with(&format!("loaded out/a.capsule.md into session {id} as e_")),
        "{stdout}"
    );
    let log = read_log(session_file(&sandbox)).unwrap();
    assert!(log.is_clean());
    let last = log.entries().last().unwrap();
    assert!(
        last.location.offset >= size_before,
        "the load rewrote the log"
    );
    let EntryBody::Context(context) = &last.entry.body else {
        panic!("expected a context entry, got {:?}", last.entry.body);
    };
    assert_eq!(context.source, ContextSource::CapsuleFile);
    assert_eq!(context.path, "out/a.capsule.md");
    assert_eq!(context.text, file_text);
    let digest: String = <sha2::Sha256 as sha2::Digest>::digest(file_text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(context.sha256, digest);
    assert_eq!(
        parse_capsule_file(&context.text).unwrap().narrative,
        parsed.narrative
    );
}

#[test]
fn a_secret_in_a_loaded_file_name_is_neither_shown_nor_recorded() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let ck = short_ck(compact(&sandbox, &id, &[]).lines().next().unwrap());
    let name = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123.capsule.md";
    sandbox.run_ok(&["capsule", "export", &ck, name, "--session", &id]);
    let loaded = sandbox.run_ok(&["capsule", "load", name, "--session", &id]);
    let stdout = text(&loaded.stdout);
    assert!(
        stdout.starts_with(&format!(
            "loaded [REDACTED:anthropic_key].capsule.md into session {id} as e_"
        )),
        "{stdout}"
    );
    let log = read_log(session_file(&sandbox)).unwrap();
    let EntryBody::Context(context) = &log.entries().last().unwrap().entry.body else {
        panic!("expected a context entry");
    };
    assert_eq!(context.path, "[REDACTED:anthropic_key].capsule.md");
    let raw = std::fs::read_to_string(session_file(&sandbox)).unwrap();
    assert!(!raw.contains("abcdefghijklmnopqrstuvwxyz0123"));
}

#[test]
fn export_never_overwrites_and_stays_in_the_workspace() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let ck = short_ck(compact(&sandbox, &id, &[]).lines().next().unwrap());
    let export = |path: &str, force: bool| {
        let mut args = vec![
            "capsule",
            "export",
            ck.as_str(),
            path,
            "--session",
            id.as_str(),
        ];
        if force {
            args.push("--force");
        }
        sandbox.run(&args)
    };
    assert_eq!(export("a.capsule.md", false).status.code(), Some(0));
    let again = export("a.capsule.md", false);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        text(&again.stderr),
        format!(
            "error: {} already exists\nhint: pass --force to overwrite it, or choose another path\n",
            sandbox.ws.join("a.capsule.md").display()
        )
    );
    assert_eq!(export("a.capsule.md", true).status.code(), Some(0));
    let outside = export("../outside.capsule.md", false);
    assert_eq!(outside.status.code(), Some(1));
    assert!(
        text(&outside.stderr).starts_with(&format!(
            "error: ../outside.capsule.md is outside the workspace {}",
            sandbox.ws.display()
        )),
        "{}",
        text(&outside.stderr)
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let absolute = elsewhere.path().join("abs.capsule.md");
    assert_eq!(
        export(absolute.to_str().unwrap(), false).status.code(),
        Some(0)
    );
    assert!(absolute.is_file());
    let unknown = sandbox.run(&["capsule", "export", "ck_ffff", "x.md", "--session", &id]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        text(&unknown.stderr).starts_with("error: no capsule ck_ffff in this session\n"),
        "{}",
        text(&unknown.stderr)
    );
}

#[test]
fn secrets_are_redacted_with_a_count() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, &format!("{ANTHROPIC_SECRET} and {PASSWORD}"));
    let result = compact(&sandbox, &id, &["--save"]);
    let lines: Vec<&str> = result.lines().collect();
    let ck = short_ck(lines[0]);
    assert!(
        lines[1].starts_with("saved to Project Memory: .soba/memory/ck_"),
        "{result}"
    );
    let memory_note = redaction_note(lines[1]);
    let exported = sandbox.run_ok(&["capsule", "export", &ck, "s.capsule.md", "--session", &id]);
    let export_note = redaction_note(&text(&exported.stdout));
    // The same capsule, so the same secrets.
    assert_eq!(memory_note, export_note);
    let memory_file = std::fs::read_dir(sandbox.ws.join(".soba/memory"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for file in [sandbox.ws.join("s.capsule.md"), memory_file] {
        let written = std::fs::read_to_string(&file).unwrap();
        assert!(!written.contains(ANTHROPIC_SECRET), "{}", file.display());
        assert!(
            !written.contains("correcthorsebatterystaple"),
            "{}",
            file.display()
        );
        // The count said is the number of secrets replaced, per kind: every
        // marker, the title's once (it is written twice, in the front
        // matter and as the `# ` heading).
        let counted: String = written
            .lines()
            .filter(|line| !line.starts_with("# "))
            .collect::<Vec<_>>()
            .join("\n");
        let anthropic = counted.matches("[REDACTED:anthropic_key]").count();
        let secret = counted.matches("password=[REDACTED:secret]").count();
        assert!(anthropic >= 1 && secret >= 1, "{}", file.display());
        assert_eq!(
            memory_note,
            format!(
                "{} secrets redacted (anthropic_key {anthropic}, secret {secret})",
                anthropic + secret
            )
        );
    }
    // The session log itself is never rewritten: the secret stays there.
    let log = std::fs::read_to_string(session_file(&sandbox)).unwrap();
    assert!(log.contains(ANTHROPIC_SECRET));
}

fn capsule_text(front: &str, headings: &[&str], body_words: usize) -> String {
    let mut text = format!("---\n{front}\n---\n\n# Handoff\n\n");
    for heading in headings {
        text.push_str(&format!("## {heading}\n"));
        let words: Vec<String> = (0..body_words).map(|i| format!("{heading}{i}")).collect();
        text.push_str(&words.join(" "));
        text.push_str("\n\n");
    }
    text
}

const HEADINGS: [&str; 8] = [
    "Goal",
    "Constraints",
    "Done",
    "In progress",
    "Pending",
    "Decisions",
    "Blockers",
    "Next steps",
];

#[test]
fn malformed_capsule_files_get_clear_errors() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let log_before = std::fs::read(session_file(&sandbox)).unwrap();
    let load = |rel: &str, content: &[u8]| {
        let path = sandbox.ws.join(rel);
        std::fs::write(&path, content).unwrap();
        let output = sandbox.run(&["capsule", "load", rel, "--session", &id]);
        assert_eq!(output.status.code(), Some(1), "{rel}");
        let stderr = text(&output.stderr);
        let prefix = format!("error: cannot load {}: ", path.display());
        assert!(stderr.starts_with(&prefix), "{stderr}");
        stderr[prefix.len()..].trim_end().to_owned()
    };
    assert_eq!(
        load("a.md", b"## Goal\nx\n"),
        "capsule file has no front matter: start it with a `---` block holding `schemaVersion: 1`"
    );
    assert_eq!(
        load(
            "b.md",
            capsule_text("schemaVersion: 2", &HEADINGS, 3).as_bytes()
        ),
        "capsule file has schemaVersion 2; this version of soba reads schemaVersion 1 only"
    );
    let seven: Vec<&str> = HEADINGS
        .iter()
        .copied()
        .filter(|h| *h != "Blockers")
        .collect();
    assert_eq!(
        load(
            "c.md",
            capsule_text("schemaVersion: 1", &seven, 3).as_bytes()
        ),
        "capsule file has no `## Blockers` section: every capsule needs the eight narrative headings"
    );
    assert_eq!(
        load("d.md", b"---\nschemaVersion: 1\n"),
        "capsule file front matter is not closed: add a `---` line after it"
    );
    let huge = capsule_text("schemaVersion: 1", &HEADINGS, 20_000);
    assert!(huge.len() > 1024 * 1024);
    assert_eq!(
        load("e.md", huge.as_bytes()),
        format!(
            "capsule file is {} bytes, over the 1048576-byte limit: shorten it",
            huge.len()
        )
    );
    // Under 1 MiB but over min(32,000, floor(0.25 × 80,000)) = 20,000 tokens.
    let long = capsule_text("schemaVersion: 1", &HEADINGS, 3_000);
    assert!(long.len() < 1024 * 1024);
    let message = load("f.md", long.as_bytes());
    assert!(message.starts_with("capsule file has "), "{message}");
    assert!(
        message.ends_with(" tokens, over the 20,000-token limit for this model: shorten it"),
        "{message}"
    );
    assert!(load("g.md", b"---\nschemaVersion: 1\n---\n\xff\xfe").starts_with("not UTF-8 text"));
    // Nothing was appended.
    assert_eq!(std::fs::read(session_file(&sandbox)).unwrap(), log_before);
    // A valid hand-written file loads.
    sandbox.write(
        "ok.capsule.md",
        &capsule_text("schemaVersion: 1\ntitle: \"Hand written\"", &HEADINGS, 5),
    );
    let ok = sandbox.run_ok(&["capsule", "load", "ok.capsule.md", "--session", &id]);
    assert!(
        text(&ok.stdout).contains("\"Hand written\""),
        "{}",
        text(&ok.stdout)
    );
}

#[test]
fn create_writes_a_handoff_file_and_appends_nothing() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, ANTHROPIC_SECRET);
    let log_before = std::fs::read(session_file(&sandbox)).unwrap();
    let created = sandbox.run_ok(&[
        "capsule",
        "create",
        "Parser handoff: phase 2",
        "--session",
        &id,
        "--model",
        MODEL,
    ]);
    let stdout = text(&created.stdout);
    let dir = sandbox.ws.join(".soba/capsules");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.ends_with("-parser-handoff-phase-2.capsule.md"),
        "{name}"
    );
    assert!(name.as_bytes()[4] == b'-' && name.as_bytes()[7] == b'-' && name.len() > 10);
    assert!(
        stdout.starts_with(&format!("wrote .soba/capsules/{name} (")),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&files[0]).unwrap();
    let markers = written.matches("[REDACTED:anthropic_key]").count();
    assert!(markers >= 1 && !written.contains(ANTHROPIC_SECRET));
    assert!(
        stdout.ends_with(&format!(
            "full; {markers} secret{} redacted (anthropic_key {markers})); load it into a session with `soba capsule load .soba/capsules/{name}` (in soba: /capsule load)\n",
            if markers == 1 { "" } else { "s" }
        )),
        "{stdout}"
    );
    let parsed = parse_capsule_file(&written).unwrap();
    assert_eq!(
        parsed.front.title.as_deref(),
        Some("Parser handoff: phase 2")
    );
    assert_eq!(parsed.front.quality, Some(Quality::Full));
    assert!(parsed.narrative.goal.contains("Build the parser."));
    // The log is byte-for-byte unchanged; one flight record says what happened.
    assert_eq!(std::fs::read(session_file(&sandbox)).unwrap(), log_before);
    let flight = sandbox.sessions_dir().join(format!("{id}.flight.jsonl"));
    let records: Vec<Value> = std::fs::read_to_string(&flight)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["level"], json!("capsule_create"));
    assert_eq!(records[0]["outcome"], json!("completed"));
    assert_eq!(records[0]["quality"], json!("full"));
    // No overwrite without --force.
    let again = sandbox.run(&[
        "capsule",
        "create",
        "Parser handoff: phase 2",
        "--session",
        &id,
        "--model",
        MODEL,
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert!(last_line(&text(&again.stderr)).starts_with("hint: pass --force"));
    sandbox.run_ok(&[
        "capsule",
        "create",
        "Parser handoff: phase 2",
        "--session",
        &id,
        "--model",
        MODEL,
        "--force",
    ]);
}

#[test]
fn compact_with_nothing_to_compact_is_skipped_and_not_saved() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let output = sandbox.run_ok(&["compact", "--session", &id, "--model", MODEL, "--save"]);
    let stdout = text(&output.stdout);
    assert_eq!(
        stdout,
        "Compaction skipped (user): nothing to compact before the keep window\n\
         not saved to Project Memory: no capsule was made (nothing to compact before the keep window); \
         to save the state as it is, write a handoff: soba capsule create \"title\"\n"
    );
    assert!(!sandbox.ws.join(".soba/memory").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_capsule_is_not_saved_to_project_memory() {
    let server = FakeServer::start().await.unwrap();
    // The summarizer answers with a placeholder; the guard rejects it and
    // the user compaction falls back to the deterministic capsule.
    let placeholder = Script::Compute(Arc::new(|_: &RecordedRequest| {
        Script::stream(Dialect::Chat, &Reply::text("Generating…"))
    }));
    server.push(placeholder.clone());
    server.push(placeholder);
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "providers": {"fake": {"api": "openai-chat", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}},
        "models": {"fake/summ": {"contextWindow": 64000, "maxOutputTokens": 2000}},
        "compaction": {"summarizer": {"model": "fake/summ"}, "keepRecentTokens": 256},
    }));
    sandbox.env = vec![("FAKE_KEY".into(), "k".into())];
    let id = session_with(&sandbox, "none");
    let mut command = tokio::process::Command::from(sandbox.command(&[
        "compact",
        "--session",
        &id,
        "--model",
        MODEL,
        "--save",
    ]));
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("Compacted (user): "), "{stdout}");
    assert!(lines[0].ends_with(" · fallback used"), "{stdout}");
    assert!(
        lines[1].starts_with("not saved to Project Memory: the capsule is degraded (fallback used"),
        "{stdout}"
    );
    assert!(!sandbox.ws.join(".soba/memory").exists());
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.requests()[0].body["model"], json!("summ"));

    // A handoff falls back the same way and says so.
    let mut command = tokio::process::Command::from(sandbox.command(&[
        "capsule",
        "create",
        "handoff",
        "--session",
        &id,
        "--model",
        MODEL,
    ]));
    let output = command.output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains(" tokens, degraded; "),
        "{}",
        text(&output.stdout)
    );
    assert!(
        last_line(&text(&output.stderr)).starts_with("fallback used: summary rejected by guard "),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(server.requests().len(), 2);
}

/// A summary that passes every guard: the eight headings, the end marker.
fn good_summary() -> String {
    let mut summary = String::new();
    for heading in HEADINGS {
        summary.push_str(&format!(
            "## {heading}\nThe parser work, section {heading}.\n\n"
        ));
    }
    summary + "END-OF-SUMMARY"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_summary_that_passes_the_guards_is_full_and_saved() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(Dialect::Chat, &Reply::text(good_summary())));
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "providers": {"fake": {"api": "openai-chat", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}},
        "models": {"fake/summ": {"contextWindow": 64000, "maxOutputTokens": 2000}},
        "compaction": {"summarizer": {"model": "fake/summ"}, "keepRecentTokens": 256},
    }));
    sandbox.env = vec![("FAKE_KEY".into(), "k".into())];
    let id = session_with(&sandbox, "none");
    let mut command = tokio::process::Command::from(sandbox.command(&[
        "compact",
        "--session",
        &id,
        "--model",
        MODEL,
        "--save",
        "keep",
        "the",
        "parser",
    ]));
    let output = command.output().await.unwrap();
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(!stdout.contains("fallback"), "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("saved to Project Memory: "),
        "{stdout}"
    );
    // The /compact instructions went into the summarizer's prompt.
    assert!(
        server.requests()[0]
            .body
            .to_string()
            .contains("keep the parser")
    );
    let log = read_log(session_file(&sandbox)).unwrap();
    let capsule = log
        .entries()
        .iter()
        .find_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) => Some(capsule.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(capsule.summarizer, "fake/summ");
    assert_eq!(capsule.quality, Quality::Full);
    assert_eq!(capsule.instructions.as_deref(), Some("keep the parser"));
    assert!(capsule.narrative.goal.contains("section Goal"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_continues_natively_on_openai_responses_and_survives_its_failure() {
    let server = FakeServer::start().await.unwrap();
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "providers": {"fake": {"api": "openai-responses", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}},
        "models": {"fake/codex": {"contextWindow": 64000, "maxOutputTokens": 4000}},
        "compaction": {"native": "auto", "summarizer": {"model": "deterministic"}, "keepRecentTokens": 256},
    }));
    sandbox.env = vec![("FAKE_KEY".into(), "k".into())];
    let id = session_with(&sandbox, "none");
    let natives = |sandbox: &Sandbox| -> Vec<Option<String>> {
        read_log(session_file(sandbox))
            .unwrap()
            .entries()
            .iter()
            .filter_map(|logged| match &logged.entry.body {
                EntryBody::Capsule(capsule) => {
                    Some(capsule.native.as_ref().map(|n| n.item.clone()))
                }
                _ => None,
            })
            .collect()
    };
    let compact_now = || async {
        let mut command = tokio::process::Command::from(sandbox.command(&[
            "compact",
            "--session",
            &id,
            "--model",
            "fake/codex",
        ]));
        let output = command.output().await.unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        text(&output.stdout)
    };
    server.push_for("/responses/compact", Script::compaction("gAAAA-compact"));
    let stdout = compact_now().await;
    assert!(stdout.starts_with("Compacted (user): "), "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/responses/compact");
    assert_eq!(requests[0].body["model"], json!("codex"));
    assert_eq!(
        natives(&sandbox),
        [Some(
            r#"{"type":"compaction","encrypted_content":"gAAAA-compact"}"#.to_owned()
        )]
    );

    // A native failure changes nothing else: the portable capsule is
    // appended as always, without an item.
    server.push_for(
        "/responses/compact",
        Script::error(400, r#"{"error":{"message":"compaction unavailable"}}"#),
    );
    // Only what followed the capsule is compacted again: add to the span.
    let mut writer = soba_store::log::SessionWriter::open(
        session_file(&sandbox),
        soba_store::log::WriterOptions::default(),
    )
    .unwrap();
    for turn in 0..4 {
        let words: String = (0..600).map(|i| format!("more{turn}x{i} ")).collect();
        writer
            .append(EntryBody::Message(soba_core::MessageEntry {
                message: soba_core::Message::user(words),
                tokens: None,
            }))
            .unwrap();
    }
    drop(writer);
    let stdout = compact_now().await;
    assert!(stdout.starts_with("Compacted (user): "), "{stdout}");
    assert!(!stdout.contains("fallback"), "{stdout}");
    assert_eq!(server.requests().len(), 2);
    let natives = natives(&sandbox);
    assert_eq!(natives.len(), 2);
    assert_eq!(natives[1], None);
}

/// A base64 line of a key, 64 characters, numbered so no two are alike.
fn key_line(n: usize) -> String {
    format!("MIIEow{n:04}IBAAKCAQEAx9Zt0Q+/abcdefghijklmnopqrstuvwxyzABCDEFGHIJ")[..64].to_owned()
}

/// A session whose first user message pastes a long private key that the
/// capsule cuts (its original task is kept to 1,000 tokens), and whose
/// later failing command prints a whole one.
fn session_with_cut_and_whole_keys(sandbox: &Sandbox) -> String {
    let pasted: Vec<String> = (0..60).map(key_line).collect();
    let prose: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    let task = format!(
        "Deploy with this key:\n-----BEGIN RSA PRIVATE KEY-----\n{}\n(the rest is on the wiki) {}",
        pasted.join("\n"),
        prose.join(" ")
    );
    let whole_key = format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n{}\nAAAA==\n-----END OPENSSH PRIVATE KEY-----",
        key_line(900),
        key_line(901)
    );
    let mut lines = vec![
        json!({"type":"session","id":"pi-keys","timestamp":"2025-02-01T10:00:00.000Z","cwd":"/work/app","provider":"anthropic","modelId":"claude-sonnet-4-5","thinkingLevel":"off"}),
    ];
    let usage = json!({"input":10,"output":5,"cacheRead":0,"cacheWrite":0});
    lines.push(json!({"type":"message","timestamp":"2025-02-01T10:00:01.000Z","message":{"role":"user","content":task,"timestamp":1}}));
    lines.push(json!({"type":"message","timestamp":"2025-02-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"toolu_1","name":"bash","arguments":{"command":"ssh-add deploy/id_ed25519"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":usage,"stopReason":"toolUse","timestamp":2}}));
    lines.push(json!({"type":"message","timestamp":"2025-02-01T10:00:03.000Z","message":{"role":"toolResult","toolCallId":"toolu_1","toolName":"bash","content":[{"type":"text","text":format!("bad permissions on key:\n{whole_key}\nexit 1")}],"isError":true,"timestamp":3}}));
    for turn in 1..6 {
        let body: Vec<String> = (0..600).map(|i| format!("w{turn}x{i}")).collect();
        lines.push(json!({"type":"message","timestamp":format!("2025-02-01T10:{turn:02}:01.000Z"),"message":{"role":"user","content":format!("Turn {turn}: {}", body.join(" ")),"timestamp":1}}));
        lines.push(json!({"type":"message","timestamp":format!("2025-02-01T10:{turn:02}:02.000Z"),"message":{"role":"assistant","content":[{"type":"text","text":format!("Done with turn {turn}.")}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":usage,"stopReason":"stop","timestamp":2}}));
    }
    let trace: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let file = sandbox.write("keys.jsonl", &trace);
    let output = sandbox.run_ok(&["import", file.to_str().unwrap(), "--json"]);
    let reports: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    reports[0]["sessionId"].as_str().unwrap().to_owned()
}

/// Issue 13 class 1: a key cut before its END line and a later whole key are
/// two redactions; every section between them is exported byte for byte,
/// and the export loads.
#[test]
fn a_cut_key_before_a_whole_key_exports_a_capsule_that_loads() {
    let sandbox = Sandbox::new();
    let id = session_with_cut_and_whole_keys(&sandbox);
    let ck = short_ck(compact(&sandbox, &id, &[]).lines().next().unwrap());
    let exported = sandbox.run_ok(&["capsule", "export", &ck, "k.capsule.md", "--session", &id]);
    let note = redaction_note(&text(&exported.stdout));
    let written = std::fs::read_to_string(sandbox.ws.join("k.capsule.md")).unwrap();
    assert!(!written.contains("MIIEow"), "{written}");
    let markers = written.matches("[REDACTED:private_key]").count();
    assert!(markers >= 2, "{written}");
    assert_eq!(
        note,
        format!("{markers} secrets redacted (private_key {markers})")
    );
    // The prose after the cut key and the command of the later error stay.
    assert!(
        written.contains("(the rest is on the wiki)") || written.contains("characters omitted")
    );
    assert!(written.contains("ssh-add deploy/id_ed25519"), "{written}");

    // Section by section: the exported file holds the capsule's own
    // sections, those without a key unchanged.
    let log = read_log(session_file(&sandbox)).unwrap();
    let capsule = log
        .entries()
        .iter()
        .find_map(|logged| match &logged.entry.body {
            EntryBody::Capsule(capsule) => Some(capsule.clone()),
            _ => None,
        })
        .unwrap();
    let original = soba_core::render::split_sections(&soba_core::render::sections_markdown(
        &soba_core::render::CapsuleView::from(&*capsule),
    ));
    let parsed = parse_capsule_file(&written).unwrap();
    let exported_sections: Vec<_> = parsed
        .sections
        .iter()
        .filter(|section| section.heading.is_some())
        .collect();
    let original_sections: Vec<_> = original
        .iter()
        .filter(|section| section.heading.is_some())
        .collect();
    assert_eq!(
        exported_sections
            .iter()
            .map(|s| s.heading.clone())
            .collect::<Vec<_>>(),
        original_sections
            .iter()
            .map(|s| s.heading.clone())
            .collect::<Vec<_>>()
    );
    let mut with_keys = 0;
    for (exported, original) in exported_sections.iter().zip(&original_sections) {
        if original.body.contains("PRIVATE KEY-----") {
            with_keys += 1;
            assert!(exported.body.contains("[REDACTED:private_key]"));
        } else {
            assert_eq!(
                exported.body.trim_end(),
                original.body.trim_end(),
                "{:?}",
                original.heading
            );
        }
    }
    assert!(with_keys >= 2, "keys in {with_keys} sections");
    assert!(
        original_sections.len() - with_keys >= 4,
        "sections between the keys"
    );

    let loaded = sandbox.run_ok(&["capsule", "load", "k.capsule.md", "--session", &id]);
    assert!(
        text(&loaded.stdout).starts_with(&format!("loaded k.capsule.md into session {id} as e_")),
        "{}",
        text(&loaded.stdout)
    );
}

/// Issue 36 item 12: an imported session whose model is recorded without
/// a provider (`gpt-5.4`, as Codex writes it) compacts offline with the
/// deterministic summarizer and the built-in window: no configuration, no
/// `--model`, no key.
#[test]
fn an_imported_session_compacts_offline_without_configuration() {
    let sandbox = Sandbox::new();
    let mut lines = vec![serde_json::json!({"type":"session","id":"pi-x","timestamp":"2025-02-01T10:00:00.000Z","cwd":"/work/app","provider":"","modelId":"gpt-5.4","thinkingLevel":"off"}).to_string()];
    for turn in 0..6 {
        let words: Vec<String> = (0..800).map(|i| format!("w{turn}x{i}")).collect();
        lines.push(serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:01.000Z","message":{"role":"user","content":format!("Turn {turn}: {}", words.join(" ")),"timestamp":1}}).to_string());
        lines.push(serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":format!("Done {turn}.")}],"api":"openai-responses","provider":"","model":"gpt-5.4","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0},"stopReason":"stop","timestamp":2}}).to_string());
    }
    let file = sandbox.write("t/codex.jsonl", &(lines.join("\n") + "\n"));
    sandbox.run_ok(&["import", file.to_str().unwrap()]);
    let output = sandbox.run_ok(&[
        "compact",
        "--set",
        "compaction.summarizer.model=deterministic",
        "--set",
        "compaction.keepRecentTokens=500",
    ]);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("Compacted (user): "), "{stdout}");
    let budget = text(&sandbox.run_ok(&["budget"]).stdout);
    assert!(budget.contains("openai/gpt-5.4"), "{budget}");
    assert!(budget.contains("the built-in registry"), "{budget}");
}

/// Issue 36 item 12: when an imported session's live context is all
/// within the keep window (it ends just after its own compaction, as the
/// Codex traces do), `soba compact` with no configuration says the one
/// command that shows what SOBA would keep, and that command works
/// offline.
#[test]
fn compacting_a_short_imported_session_says_what_to_type() {
    let sandbox = Sandbox::new();
    let mut lines = vec![serde_json::json!({"type":"session","id":"pi-y","timestamp":"2025-02-01T10:00:00.000Z","cwd":"/work/app","provider":"","modelId":"gpt-5.4","thinkingLevel":"off"}).to_string()];
    lines.push(serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:01.000Z","message":{"role":"user","content":"Add a --json flag to the report command.","timestamp":1}}).to_string());
    lines.push(serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Added."}],"api":"openai-responses","provider":"","model":"gpt-5.4","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0},"stopReason":"stop","timestamp":2}}).to_string());
    let file = sandbox.write("t/short.jsonl", &(lines.join("\n") + "\n"));
    sandbox.run_ok(&["import", file.to_str().unwrap()]);
    let stdout = text(&sandbox.run_ok(&["compact"]).stdout);
    assert_eq!(
        stdout,
        "Compaction skipped (user): nothing to compact before the keep window\n\
         to read what SOBA would keep of this session as it is, write a handoff capsule: soba capsule create \"title\"\n"
    );
    let created = text(&sandbox.run_ok(&["capsule", "create", "title"]).stdout);
    assert!(created.starts_with("wrote .soba/capsules/"), "{created}");
}

/// The random hex digits of the short id in `shown` (`e_…` or `ck_…`).
fn short_digits(shown: &str) -> usize {
    shown.len() - shown.find('_').unwrap() - 1
}

/// The session's unique short-id length now, with `extra` ids counted.
fn unique_len(sandbox: &Sandbox, extra: &[soba_core::EntryId]) -> usize {
    let log = read_log(session_file(sandbox)).unwrap();
    soba_core::id::shortest_unique_len(
        log.entries()
            .iter()
            .map(|logged| &logged.entry.id)
            .chain(extra.iter()),
    )
}

/// Issue 36 item 1: every capsule command spells ids at the session's
/// unique length (here 7 digits or more), never at a fixed 4 that can
/// name two entries.
#[test]
fn capsule_commands_print_ids_at_the_sessions_unique_length() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    crate::support::crowd_entry_ids(&session_file(&sandbox));
    let ck = short_ck(compact(&sandbox, &id, &[]).lines().next().unwrap());
    let len = unique_len(&sandbox, &[]);
    assert!(len >= 7, "{len}");
    assert_eq!(short_digits(&ck), len, "{ck}");
    sandbox.run_ok(&[
        "capsule",
        "export",
        &ck,
        "out/a.capsule.md",
        "--session",
        &id,
    ]);

    let loaded = text(
        &sandbox
            .run_ok(&["capsule", "load", "out/a.capsule.md", "--session", &id])
            .stdout,
    );
    let shown = loaded
        .split(" as ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    assert_eq!(short_digits(shown), unique_len(&sandbox, &[]), "{loaded}");
    let log = read_log(session_file(&sandbox)).unwrap();
    assert!(log.entries().last().unwrap().entry.id.matches_short(shown));

    let created = text(
        &sandbox
            .run_ok(&[
                "capsule",
                "create",
                "Handoff",
                "--session",
                &id,
                "--model",
                MODEL,
            ])
            .stdout,
    );
    // A handoff file's capsule id is in no session, so no command takes
    // it: the line names the file and how to load it, not the id (a walk
    // tried `capsule export` with the id printed here).
    let file = std::fs::read_dir(sandbox.ws.join(".soba/capsules"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let front = parse_capsule_file(&std::fs::read_to_string(&file).unwrap())
        .unwrap()
        .front;
    assert!(front.id.is_some());
    assert!(!created.contains("ck_"), "{created}");
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(
        created.trim_end().ends_with(&format!(
            "; load it into a session with `soba capsule load .soba/capsules/{name}` (in soba: /capsule load)"
        )),
        "{created}"
    );
}

/// A walk exported a capsule of the session before the most recent one
/// and got "no capsule in this session", with no word of which session
/// was searched. Without --session, export finds the one session of the
/// folder that holds it and says so; an id in none names what it searched.
#[test]
fn export_finds_a_capsule_of_another_session_and_says_where() {
    let sandbox = Sandbox::new();
    let first = session_with(&sandbox, "none");
    let ck = short_ck(compact(&sandbox, &first, &[]).lines().last().unwrap());
    // A newer session becomes the workspace's most recent.
    let file = sandbox.write("newer.jsonl", &long_pi_session(3, 50, "none"));
    sandbox.run_ok(&["import", file.to_str().unwrap()]);

    let output = sandbox.run_ok(&["capsule", "export", &ck, "found.capsule.md"]);
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!("{ck} is in session {}", &first[..8])),
        "{stderr}"
    );
    assert!(stderr.contains("not in the most recent one ("), "{stderr}");
    assert!(sandbox.ws.join("found.capsule.md").is_file());

    let unknown = sandbox.run(&["capsule", "export", "ck_ffff", "x.md"]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = text(&unknown.stderr);
    assert!(
        stderr.starts_with("error: no capsule ck_ffff in session ")
            && stderr.contains("(the workspace's most recent) or any other session of its folder"),
        "{stderr}"
    );
}

/// The walk: `capsule export ID -` wrote a file named `-`. `-` is standard
/// output; the line about the export goes to stderr.
#[test]
fn export_to_a_dash_writes_standard_output() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let ck = short_ck(compact(&sandbox, &id, &[]).lines().last().unwrap());
    let output = sandbox.run_ok(&["capsule", "export", &ck, "-"]);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("---\n"), "{stdout}");
    assert!(stdout.contains("\n## Goal\n"), "{stdout}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!("exported {ck} to standard output (")),
        "{stderr}"
    );
    assert!(!sandbox.ws.join("-").exists());
    // What went to stdout loads like a file would.
    let file = sandbox.write("piped.capsule.md", &stdout);
    sandbox.run_ok(&["capsule", "load", file.to_str().unwrap(), "--session", &id]);
}

/// The walk: the hint for an unknown id showed `ck_7f3a` next to 11-digit
/// ids. It now names the session's newest capsule at the session's length.
#[test]
fn an_unknown_capsule_id_is_answered_with_a_real_one() {
    let sandbox = Sandbox::new();
    let id = session_with(&sandbox, "none");
    let ck = short_ck(compact(&sandbox, &id, &[]).lines().last().unwrap());
    let output = sandbox.run(&["capsule", "export", "ck_ffff", "x.md", "--session", &id]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.ends_with(&format!(
            "hint: list the capsules with `soba capsule list` (in soba: /capsule); the newest is {ck}\n"
        )),
        "{stderr}"
    );
}
