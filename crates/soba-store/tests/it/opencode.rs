//! opencode sessions: the `opencode export` document and the pre-1.2 JSON
//! storage layout of the same synthetic session (`tests/fixtures/opencode`),
//! which holds each pattern the real exports show: parallel calls with an
//! error result, two requests in one assistant message, an aborted message
//! with no parts, a call left running, injected (synthetic) user text, an
//! image, and a compaction.

use std::path::{Path, PathBuf};

use serde_json::json;
use soba_core::{Block, EntryBody, MessageOrigin, Role, Usage};
use soba_store::import::{Detected, Format, ImportedSession, detect_format, import_path};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/opencode")
        .join(rel)
}

const STORAGE_SESSION: &str = "storage/session/prj0001/ses_fixture01.json";

fn import_one(path: &Path) -> ImportedSession {
    let mut sessions = import_path(path).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(sessions.len(), 1);
    sessions.remove(0)
}

/// Each entry as (kind, origin, text, tool calls, tool results).
fn shape(s: &ImportedSession) -> Vec<String> {
    s.entries
        .iter()
        .map(|entry| match &entry.body {
            EntryBody::Message(m) => {
                let m = &m.message;
                let blocks: Vec<String> = m
                    .content
                    .iter()
                    .map(|block| match block {
                        Block::Text(text) => format!("text:{text}"),
                        Block::Thinking { text, .. } => format!("thinking:{text}"),
                        Block::ToolUse(call) => format!("call:{}:{}", call.id, call.name),
                        Block::ToolResult(result) => format!(
                            "result:{}:{}{}",
                            result.tool_use_id,
                            if result.is_error { "error:" } else { "" },
                            result.text()
                        ),
                        Block::Image(_) => "image".to_owned(),
                    })
                    .collect();
                format!(
                    "{}/{} {}",
                    m.role.as_str(),
                    m.origin.as_str(),
                    blocks.join(" | ")
                )
            }
            EntryBody::Capsule(capsule) => format!("capsule {}", capsule.markdown),
            _ => "other".to_owned(),
        })
        .collect()
}

fn check_session(s: &ImportedSession, format: Format) {
    assert_eq!(s.format, format);
    assert_eq!(s.original_id, "ses_fixture01");
    assert_eq!(s.cwd.as_deref(), Some("/w/app"));
    assert_eq!(s.created_at.as_deref(), Some("2025-12-31T23:59:59.9Z"));
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(
        shape(s),
        [
            "user/typed text:Fix the failing test in app.py | text:Called the Read tool with {\"filePath\":\"app.py\"}",
            "assistant/typed thinking:Look at the test first. | text:Reading the files. | call:call_1:read | call:call_2:bash",
            "tool/typed result:call_1:def f():\n    return 1\n",
            "tool/typed result:call_2:error:Error: exit code 1",
            "assistant/typed call:call_3:edit",
            "tool/typed result:call_3:Edit applied.",
            "assistant/typed text:Fixed: f now returns 2.",
            "user/typed text:Also run the linter",
            "user/injected text:<system-reminder>plan mode</system-reminder>",
            "user/typed text:What is in this screenshot? | image",
            "assistant/typed text:Running the linter. | call:call_4:bash",
            "capsule Summary: fixed f in app.py; linter not run.",
            "user/typed text:Thanks, done.",
            "assistant/typed text:You're welcome.",
        ]
    );
    let stats = &s.stats;
    assert_eq!(stats.messages, 12);
    assert_eq!(stats.records.get("user"), Some(&6));
    assert_eq!(stats.records.get("assistant"), Some(&6));
    assert_eq!(stats.records.get("compaction"), Some(&1));
    assert_eq!(stats.entries, 13);
    assert_eq!(stats.tool_calls, 4);
    assert_eq!(stats.tool_results, 3);
    assert_eq!(stats.unpaired_tool_calls, 1);
    assert_eq!(stats.orphan_tool_results, 0);
    assert_eq!(stats.compactions, 1);
    // One inference per request: the summary's is the capsule's.
    let usages: Vec<Option<Usage>> = s.inferences.iter().map(|i| i.usage).collect();
    let usage = |input, output, reasoning, cache_read, cache_write| {
        Some(Usage {
            input,
            output,
            reasoning,
            cache_read,
            cache_write,
        })
    };
    assert_eq!(
        usages,
        [
            usage(10, 60, 20, 0, 1200),
            usage(5, 30, 0, 1200, 300),
            usage(3, 25, 0, 1500, 50),
            None,
            usage(8, 12, 0, 2100, 0),
        ]
    );
    assert_eq!(
        s.inferences
            .iter()
            .map(|i| i.response_id.as_deref().unwrap_or(""))
            .collect::<Vec<_>>(),
        ["msg_a002", "msg_a003", "msg_a003", "msg_a008", "msg_a012"]
    );
    // opencode's own sums, the summary request's among them; the cost
    // summed request by request, in file order.
    let cost = 0.0123 + 0.002 + 0.001 + 0.0075 + 0.0009;
    assert_eq!(
        stats.usage_raw,
        json!({"counting": "per-request", "input": 2026, "output": 257, "reasoning": 20,
               "cacheRead": 4800, "cacheWrite": 1550, "cost": cost})
    );
    let aborted: Vec<&String> = stats
        .diagnostics
        .iter()
        .filter(|d| d.contains("no content"))
        .collect();
    assert_eq!(aborted.len(), 1, "{:?}", stats.diagnostics);
    assert!(
        aborted[0].ends_with("skipped: an assistant message with no content (MessageAbortedError)"),
        "{}",
        aborted[0]
    );
    let first_user = s.entries.iter().find_map(|entry| match &entry.body {
        EntryBody::Message(m) if m.message.role == Role::User => Some(m.message.origin),
        _ => None,
    });
    assert_eq!(first_user, Some(MessageOrigin::Typed));
}

#[test]
fn an_opencode_export_imports_every_request_call_and_result() {
    let path = fixture("export.json");
    assert_eq!(
        detect_format(&path).expect("detected"),
        Detected::Foreign(Format::OpenCode)
    );
    let s = import_one(&path);
    check_session(&s, Format::OpenCode);
    assert!(s.stats.diagnostics[0].starts_with("messages[4]: "));
}

#[test]
fn an_opencode_storage_session_imports_as_its_export_does() {
    let path = fixture(STORAGE_SESSION);
    assert_eq!(
        detect_format(&path).expect("detected"),
        Detected::Foreign(Format::OpenCodeStorage)
    );
    let s = import_one(&path);
    check_session(&s, Format::OpenCodeStorage);
    assert!(s.stats.diagnostics[0].starts_with("message msg_a005: "));
    let export = import_one(&fixture("export.json"));
    assert_eq!(shape(&s), shape(&export));
}

#[test]
fn an_opencode_session_file_outside_its_storage_folder_says_what_to_import() {
    let dir = tempfile::tempdir().expect("a folder");
    let path = dir.path().join("ses_fixture01.json");
    std::fs::copy(fixture(STORAGE_SESSION), &path).expect("copied");
    let err = import_path(&path).expect_err("refused");
    assert!(
        err.to_string().contains(
            "the session file is not inside opencode's storage folder (…/storage/session/<project>/ses_fixture01.json), so its messages cannot be found; import the document `opencode export ses_fixture01` writes instead"
        ),
        "{err}"
    );
}

#[test]
fn an_opencode_storage_file_that_is_damaged_is_named_and_the_rest_kept() {
    let dir = tempfile::tempdir().expect("a folder");
    let storage = dir.path().join("storage");
    copy_dir(&fixture("storage"), &storage);
    let part = storage.join("part/msg_a012/prt_a01201.json");
    std::fs::write(&part, "{not json").expect("damaged");
    let s = import_one(&storage.join("session/prj0001/ses_fixture01.json"));
    let named: Vec<&String> = s
        .stats
        .diagnostics
        .iter()
        .filter(|d| d.contains("prt_a01201.json: skipped: invalid JSON"))
        .collect();
    assert_eq!(named.len(), 1, "{:?}", s.stats.diagnostics);
    // The last answer lost its text part; its request is still there.
    assert_eq!(s.inferences.len(), 5);
    assert_eq!(s.stats.tool_calls, 4);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a folder");
    for entry in std::fs::read_dir(from).expect("readable") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copied");
        }
    }
}

#[test]
fn an_opencode_message_without_steps_carries_its_own_usage_unless_it_is_all_zeros() {
    let doc = json!({
        "info": {"id": "ses_x", "projectID": "p", "directory": "/w", "time": {"created": 1767225600000u64}},
        "messages": [
            {"info": {"id": "msg_1", "role": "user", "time": {"created": 1767225600000u64}},
             "parts": [{"type": "text", "text": "hi"}]},
            {"info": {"id": "msg_2", "role": "assistant", "modelID": "m", "time": {"created": 1767225601000u64},
                      "tokens": {"input": 7, "output": 3, "reasoning": 1, "cache": {"read": 2, "write": 0}}},
             "parts": [{"type": "text", "text": "hello"}]},
            {"info": {"id": "msg_3", "role": "assistant", "modelID": "m", "time": {"created": 1767225602000u64},
                      "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}},
             "parts": [{"type": "text", "text": "cut"}]},
        ]
    });
    let sessions = soba_store::import::import_bytes(
        doc.to_string().as_bytes(),
        Path::new("export.json"),
        &soba_store::import::ImportOptions::with_fallback_ms(0),
    )
    .expect("imports");
    let usages: Vec<Option<Usage>> = sessions[0].inferences.iter().map(|i| i.usage).collect();
    assert_eq!(
        usages,
        [
            Some(Usage {
                input: 7,
                output: 4,
                reasoning: 1,
                cache_read: 2,
                cache_write: 0,
            }),
            None,
        ]
    );
}
