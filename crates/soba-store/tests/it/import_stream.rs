//! Streamed import: a long line-oriented transcript read from its file,
//! line by line, imports exactly as its bytes do in memory — with damage,
//! odd line endings, a byte-order mark and invalid UTF-8 — and a file
//! that is not line-oriented falls back to the whole read.

use std::path::Path;

use serde_json::json;
use soba_store::fixtures::{write_claude_code_session, write_pi_session};
use soba_store::import::{Format, ImportError, ImportOptions, import_bytes, import_path};

/// Imports `path` streamed (`import_path`) and from its bytes in memory,
/// with the same fallback time, and checks the two agree; returns the
/// formats imported.
fn assert_streamed_as_bytes(path: &Path) -> Vec<Format> {
    let bytes = std::fs::read(path).expect("read");
    let mtime_ms = std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let from_bytes = import_bytes(&bytes, path, &ImportOptions::with_fallback_ms(mtime_ms))
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let streamed = import_path(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    assert_eq!(streamed.len(), from_bytes.len(), "{}", path.display());
    for (a, b) in streamed.iter().zip(&from_bytes) {
        assert_eq!(a.stats, b.stats, "{}", path.display());
        assert_eq!(a.entries, b.entries, "{}", path.display());
        assert_eq!(a, b, "{}", path.display());
    }
    streamed.iter().map(|session| session.format).collect()
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn generated_pi_and_claude_code_sessions_stream_as_their_bytes_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pi = dir.path().join("pi.jsonl");
    write_pi_session(&pi, 300_000).expect("write pi");
    let claude = dir.path().join("claude.jsonl");
    write_claude_code_session(&claude, 300_000).expect("write claude");
    assert_eq!(assert_streamed_as_bytes(&pi), [Format::PiV1]);
    assert_eq!(assert_streamed_as_bytes(&claude), [Format::ClaudeCode]);
}

/// A long file damaged every way a line can be: a byte-order mark, CRLF
/// and lone CR endings, blank lines, a line that is not JSON, one that is
/// not an object, a NUL, invalid UTF-8 (a lone continuation byte and a cut
/// sequence) — each in the middle of the file, past the lines detection
/// reads.
#[test]
fn damage_in_a_streamed_file_is_read_as_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pi = dir.path().join("pi.jsonl");
    write_pi_session(&pi, 400_000).expect("write pi");
    let claude = dir.path().join("claude.jsonl");
    write_claude_code_session(&claude, 400_000).expect("write claude");
    for source in [pi, claude] {
        let lines = lines_of(&source);
        assert!(lines.len() > 140, "{} lines: too few", lines.len());
        let mut bytes: Vec<u8> = b"\xef\xbb\xbf".to_vec();
        for (idx, line) in lines.iter().enumerate() {
            match idx {
                100 => bytes.extend(b"{\"type\":\"message\", cut here\n"),
                110 => bytes.extend(b"[1, 2, 3]\n\n   \n"),
                120 => {
                    let damaged = line.replacen("a", "a\u{0}", 1);
                    bytes.extend(damaged.as_bytes());
                    bytes.extend(b"\r\n");
                    continue;
                }
                130 => {
                    // A lone continuation byte and a cut 3-byte sequence
                    // inside a string.
                    let at = line.rfind('"').unwrap_or(0);
                    bytes.extend(&line.as_bytes()[..at]);
                    bytes.extend(b"\x80 and \xe2\x82");
                    bytes.extend(&line.as_bytes()[at..]);
                    bytes.extend(b"\r\n");
                    continue;
                }
                _ => {}
            }
            bytes.extend(line.as_bytes());
            bytes.extend(if idx % 7 == 0 { &b"\r\n"[..] } else { b"\n" });
        }
        let damaged = source.with_extension("damaged.jsonl");
        std::fs::write(&damaged, &bytes).expect("write");
        assert_streamed_as_bytes(&damaged);
        let sessions = import_path(&damaged).expect("imports");
        let stats = &sessions[0].stats;
        let invalid = stats.invalid_utf8.expect("the invalid bytes are reported");
        assert_eq!(invalid.replaced, 2, "{}", damaged.display());
        assert_eq!(
            bytes[invalid.first_offset as usize], 0x80,
            "the offset is the lone byte's, counted from the file's start (the mark included)"
        );
        assert!(
            stats
                .diagnostics
                .iter()
                .any(|line| line.starts_with("line 101: skipped malformed JSON")),
            "{:?}",
            &stats.diagnostics[..stats.diagnostics.len().min(5)]
        );
    }
}

#[test]
fn codex_rollouts_and_openhands_files_stream_as_their_bytes_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rollout = dir.path().join("rollout.jsonl");
    let mut lines = vec![
        json!({"timestamp":"2025-02-01T10:00:00.000Z","type":"session_meta","payload":{"id":"cx-1","cwd":"/w"}}),
        json!({"timestamp":"2025-02-01T10:00:00.000Z","type":"turn_context","payload":{"model":"gpt-5-codex"}}),
    ];
    for turn in 0..80 {
        lines.push(json!({"timestamp":"2025-02-01T10:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":format!("question {turn}")}]}}));
        lines.push(json!({"timestamp":"2025-02-01T10:00:02.000Z","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":format!("call_{turn}")}}));
        lines.push(json!({"timestamp":"2025-02-01T10:00:03.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":format!("call_{turn}"),"output":"a b c"}}));
        lines.push(json!({"timestamp":"2025-02-01T10:00:04.000Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":1000 * (turn + 1),"cached_input_tokens":0,"output_tokens":10 * (turn + 1),"reasoning_output_tokens":0,"total_tokens":1010 * (turn + 1)},"last_token_usage":{"input_tokens":1000,"cached_input_tokens":0,"output_tokens":10,"reasoning_output_tokens":0,"total_tokens":1010},"model_context_window":272000}}}));
    }
    let text: Vec<String> = lines.iter().map(|line| line.to_string()).collect();
    std::fs::write(&rollout, text.join("\n") + "\n").expect("write");
    assert_eq!(assert_streamed_as_bytes(&rollout), [Format::CodexRollout]);

    let openhands = dir.path().join("output.jsonl");
    let mut instances = Vec::new();
    for n in 0..70 {
        instances.push(json!({"instance_id": format!("i-{n}"), "instruction": "fix", "history": [
            {"id": 1, "action": "message", "source": "user", "message": "fix the bug", "args": {"content": "fix the bug"}}
        ]}).to_string());
        if n == 30 {
            instances.push("{\"instance_id\": \"cut\", \"history\": [".to_owned());
        }
    }
    std::fs::write(&openhands, instances.join("\n")).expect("write");
    assert_eq!(assert_streamed_as_bytes(&openhands).len(), 70);
}

/// A long Gemini CLI JSONL recording, with messages written again as they
/// complete, metadata updates, a torn line and a rewind, streams as its
/// bytes import.
#[test]
fn a_long_gemini_jsonl_recording_streams_as_its_bytes_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("session-2026-01-30T06-08-7befeae5.jsonl");
    let mut lines = vec![json!({"sessionId": "7befeae5-0000", "projectHash": "h", "startTime": "2026-01-30T06:08:50.429Z", "lastUpdated": "2026-01-30T06:08:50.429Z", "kind": "main"}).to_string()];
    for turn in 0..40 {
        lines.push(json!({"id": format!("u{turn}"), "timestamp": "2026-01-30T06:09:00.000Z", "type": "user", "content": [{"text": format!("question {turn}")}]}).to_string());
        let running = json!({"id": format!("g{turn}"), "timestamp": "2026-01-30T06:09:01.000Z", "type": "gemini", "content": "", "model": "gemini-3",
                             "toolCalls": [{"id": format!("c{turn}"), "name": "ls", "args": {}, "status": "executing"}]});
        lines.push(running.to_string());
        let mut done = running;
        done["toolCalls"][0]["status"] = json!("success");
        done["toolCalls"][0]["result"] = json!([{"functionResponse": {"id": format!("c{turn}"), "name": "ls", "response": {"output": "a b"}}}]);
        done["tokens"] = json!({"input": 1000, "output": 10, "cached": 0, "thoughts": 0, "tool": 0, "total": 1010});
        lines.push(done.to_string());
        lines.push(json!({"$set": {"lastUpdated": "2026-01-30T06:09:02.000Z"}}).to_string());
        if turn == 20 {
            lines.push("{\"id\":\"torn".to_owned());
            lines.push(json!({"$rewindTo": "u19"}).to_string());
        }
    }
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    assert_eq!(assert_streamed_as_bytes(&path), [Format::GeminiCliJsonl]);
    let session = import_path(&path).expect("imports").remove(0);
    // Turns 19 and 20 are rewound: 38 turns of a question, an answer and
    // its tool result.
    assert_eq!(session.original_id, "7befeae5-0000");
    assert_eq!(session.entries.len(), 38 * 3);
    assert_eq!(session.inference_count(), 38);
    assert_eq!(session.stats.tool_results, 38);
    assert_eq!(session.stats.usage.input, 38 * 1000);
    assert_eq!(
        session.stats.diagnostics.len(),
        1,
        "{:?}",
        session.stats.diagnostics
    );
    assert!(session.stats.diagnostics[0].starts_with("line 86: skipped malformed JSON: "));
}

/// Files that must be read whole to be detected take the old path: a
/// pretty-printed document, a one-line document, a file whose first line
/// is longer than the head detection reads.
#[test]
fn documents_and_huge_first_lines_are_read_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let traj = dir.path().join("run.traj");
    let steps: Vec<_> = (0..100)
        .map(|n| json!({"role": "assistant", "content": format!("step {n}")}))
        .collect();
    let doc = json!({"trajectory": [], "history": steps, "info": {}});
    std::fs::write(&traj, serde_json::to_string_pretty(&doc).expect("json")).expect("write");
    assert_eq!(assert_streamed_as_bytes(&traj).len(), 1);

    let pi = dir.path().join("pi.jsonl");
    write_pi_session(&pi, 100_000).expect("write pi");
    let mut lines = lines_of(&pi);
    // A first message line of 17 MiB: over the head detection reads.
    let mut huge: serde_json::Value = serde_json::from_str(&lines[1]).expect("json");
    huge["message"]["content"] = json!("x".repeat(17 << 20));
    lines[1] = huge.to_string();
    let long = dir.path().join("long-first.jsonl");
    std::fs::write(&long, lines.join("\n")).expect("write");
    assert_eq!(assert_streamed_as_bytes(&long), [Format::PiV1]);
}

#[test]
fn a_long_soba_log_is_refused_from_its_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log.jsonl");
    soba_store::fixtures::write_linear_log(&log, 200_000).expect("write log");
    match import_path(&log) {
        Err(ImportError::AlreadySoba { schema_version, .. }) => assert!(schema_version >= 1),
        other => panic!("expected AlreadySoba, got {other:?}"),
    }
}

/// A file of many damaged lines keeps the first thousand notes and counts
/// the rest, streamed or in memory, in every line-oriented format that
/// reports lines: memory follows the session, not the damage.
#[test]
fn a_million_damaged_lines_cost_a_thousand_notes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let heads = [
        (
            "pi.jsonl",
            vec![
                json!({"type": "session", "version": 3, "id": "s1", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/w"}),
                json!({"type": "message", "id": "a", "parentId": null, "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}}),
            ],
        ),
        (
            "claude.jsonl",
            vec![
                json!({"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "S", "cwd": "/w", "timestamp": "2025-01-01T00:00:00Z", "message": {"role": "user", "content": "hi"}}),
            ],
        ),
    ];
    let damaged = 1_000_000;
    for (name, head) in heads {
        let path = dir.path().join(name);
        let mut text: String = head.iter().map(|line| format!("{line}\n")).collect();
        text.push_str(&"x\n".repeat(damaged));
        std::fs::write(&path, &text).expect("write");
        for session in [
            import_path(&path).expect("imports").remove(0),
            import_bytes(text.as_bytes(), &path, &ImportOptions::with_fallback_ms(0))
                .expect("imports")
                .remove(0),
        ] {
            let stats = &session.stats;
            assert_eq!(stats.diagnostics.len(), 1_000, "{name}");
            assert_eq!(stats.diagnostics_total(), damaged as u64, "{name}");
            assert_eq!(
                stats.diagnostics[0],
                format!(
                    "line {}: skipped malformed JSON: expected value at line 1 column 1",
                    head.len() + 1
                )
            );
            assert_eq!(session.entries.len(), 1, "{name}");
        }
    }
}
