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

/// The tables of today's `opencode.db` that soba reads (opencode's
/// `session.sql.ts`, less its indexes and foreign keys), and one it does not.
const OPENCODE_SCHEMA: &str = "
CREATE TABLE project (id TEXT PRIMARY KEY, worktree TEXT NOT NULL);
CREATE TABLE session (
    id TEXT PRIMARY KEY, project_id TEXT NOT NULL, workspace_id TEXT, parent_id TEXT,
    slug TEXT NOT NULL, directory TEXT NOT NULL, path TEXT, title TEXT NOT NULL,
    version TEXT NOT NULL, share_url TEXT, cost REAL NOT NULL DEFAULT 0,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL,
    time_compacting INTEGER, time_archived INTEGER);
CREATE TABLE message (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE part (
    id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX part_message_id_id_idx ON part (message_id, id);
";

/// Inserts the session of an `opencode export` document as opencode 1.2+
/// stores it: each message's and part's object, less its ids, in `data`.
fn insert_export(conn: &rusqlite::Connection, doc: &serde_json::Value) {
    let info = &doc["info"];
    let id = info["id"].as_str().expect("an id");
    conn.execute(
        "INSERT INTO session (id, project_id, slug, directory, title, version, time_created, time_updated)
         VALUES (?1, 'prj', 's', ?2, 't', '1.2.0', ?3, ?3)",
        rusqlite::params![id, info["directory"].as_str(), info["time"]["created"].as_i64()],
    )
    .expect("a session row");
    for message in doc["messages"].as_array().expect("messages") {
        let mut data = message["info"].as_object().expect("an info").clone();
        let message_id = data.remove("id").expect("a message id");
        data.remove("sessionID");
        let created = data["time"]["created"].as_i64();
        conn.execute(
            "INSERT INTO message VALUES (?1, ?2, ?3, ?3, ?4)",
            rusqlite::params![
                message_id.as_str(),
                id,
                created,
                serde_json::Value::Object(data).to_string()
            ],
        )
        .expect("a message row");
        for part in message["parts"].as_array().expect("parts") {
            let mut data = part.as_object().expect("a part").clone();
            let part_id = data.remove("id").expect("a part id");
            data.remove("sessionID");
            data.remove("messageID");
            conn.execute(
                "INSERT INTO part VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
                rusqlite::params![
                    part_id.as_str(),
                    message_id.as_str(),
                    id,
                    created,
                    serde_json::Value::Object(data).to_string()
                ],
            )
            .expect("a part row");
        }
    }
}

/// The fixture's export document, and a second session: its first two
/// messages under other ids, 87 000 s later.
fn two_sessions() -> (serde_json::Value, serde_json::Value) {
    let text = std::fs::read_to_string(fixture("export.json")).expect("the fixture");
    let first: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let renamed = text
        .replace("ses_fixture01", "ses_fixture02")
        .replace("msg_a", "msg_b")
        .replace("prt_a", "prt_b")
        .replace("1767225", "1767312");
    let mut second: serde_json::Value = serde_json::from_str(&renamed).expect("JSON");
    second["messages"]
        .as_array_mut()
        .expect("messages")
        .truncate(2);
    (first, second)
}

/// Writes an `opencode.db` holding `docs` in `dir`, the newest session
/// inserted first.
fn write_db(dir: &Path, docs: &[&serde_json::Value]) -> PathBuf {
    let path = dir.join("opencode.db");
    let conn = rusqlite::Connection::open(&path).expect("a database");
    conn.execute_batch(OPENCODE_SCHEMA).expect("the schema");
    for doc in docs.iter().rev() {
        insert_export(&conn, doc);
    }
    path
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("a folder")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

#[test]
fn an_opencode_database_imports_every_session_as_its_export_does() {
    let dir = tempfile::tempdir().expect("a folder");
    let (first, second) = two_sessions();
    let path = write_db(dir.path(), &[&first, &second]);
    assert_eq!(
        detect_format(&path).expect("detected"),
        Detected::Foreign(Format::OpenCodeDb)
    );
    let sessions = import_path(&path).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(sessions.len(), 2);
    // Oldest first, whatever the order of the rows.
    check_session(&sessions[0], Format::OpenCodeDb);
    assert!(sessions[0].stats.diagnostics[0].starts_with("message msg_a005: "));
    let export = import_one(&fixture("export.json"));
    assert_eq!(shape(&sessions[0]), shape(&export));
    assert_eq!(sessions[0].stats, {
        let mut stats = export.stats.clone();
        stats.diagnostics = sessions[0].stats.diagnostics.clone();
        stats
    });
    let s = &sessions[1];
    assert_eq!(s.original_id, "ses_fixture02");
    assert_eq!(s.source, path);
    assert_eq!(s.created_at.as_deref(), Some("2026-01-02T00:09:59.9Z"));
    assert_eq!(
        shape(s)[..2],
        shape(&export)[..2],
        "the same first messages"
    );
    assert_eq!(s.inferences.len(), 1);
    // Ids are the session's own: the same on a second import.
    let again = import_path(&path).expect("imports again");
    assert_eq!(again[1].entries[0].id, s.entries[0].id);
    assert_ne!(sessions[0].entries[0].id, s.entries[0].id);
    // Read-only and immutable: nothing was written beside it.
    assert_eq!(names_in(dir.path()), ["opencode.db"]);
}

#[test]
fn an_opencode_database_being_written_is_read_as_it_is_on_disk_and_says_what_it_missed() {
    let dir = tempfile::tempdir().expect("a folder");
    let (first, second) = two_sessions();
    let path = write_db(dir.path(), &[&first]);
    // opencode keeps a write-ahead log, and holds a write lock while it
    // writes: the second session is only in the log.
    let writer = rusqlite::Connection::open(&path).expect("opened");
    writer
        .pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    writer
        .pragma_update(None, "wal_autocheckpoint", 0)
        .expect("no checkpoint");
    insert_export(&writer, &second);
    writer.execute_batch("BEGIN IMMEDIATE").expect("locked");
    let before = names_in(dir.path());
    assert_eq!(
        before,
        ["opencode.db", "opencode.db-shm", "opencode.db-wal"]
    );
    let sessions = import_path(&path).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(sessions.len(), 1);
    check_session(&sessions[0], Format::OpenCodeDb);
    let note = format!(
        "{}-wal: not read: it holds the changes opencode has not yet written into the database (opencode is running, or did not close), so the latest messages may be missing; close opencode and import again",
        path.display()
    );
    assert_eq!(sessions[0].stats.diagnostics[0], note);
    assert_eq!(names_in(dir.path()), before);
    writer.execute_batch("COMMIT").expect("committed");
    drop(writer);
    // Closed, opencode folds its log into the file: both sessions are read.
    assert_eq!(names_in(dir.path()), ["opencode.db"]);
    assert_eq!(import_path(&path).expect("imports").len(), 2);
}

fn db_error(path: &Path) -> String {
    let err = import_path(path).expect_err("refused");
    assert!(
        matches!(err, soba_store::import::ImportError::Database { .. }),
        "{err:?}"
    );
    err.to_string()
}

#[test]
fn an_opencode_database_cut_short_is_refused_saying_to_copy_it_again() {
    let dir = tempfile::tempdir().expect("a folder");
    let (first, _) = two_sessions();
    let path = write_db(dir.path(), &[&first]);
    let bytes = std::fs::read(&path).expect("read");
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("written");
    assert_eq!(
        db_error(&cut),
        format!(
            "cannot read {} as opencode's session database: it ends at byte {} but its header says {} bytes: it was cut short (copied while opencode wrote it?); copy it again, or close opencode and retry, or write one session with `opencode export <session-id> > session.json` and import that file",
            cut.display(),
            bytes.len() / 2,
            bytes.len()
        )
    );
    std::fs::write(&cut, &bytes[..50]).expect("written");
    assert!(
        db_error(&cut).contains(": it ends at byte 50, inside the 100-byte SQLite header: it was cut short; copy it again, or close opencode and retry"),
    );
    // Damaged pages: the header is intact, the tables are not.
    let mut damaged = bytes.clone();
    for byte in &mut damaged[4096..] {
        *byte = 0xA5;
    }
    std::fs::write(&cut, &damaged).expect("written");
    let err = db_error(&cut);
    assert!(err.contains(": SQLite found it damaged (database disk image is malformed): it was cut short, or opencode was writing it while soba read it; close opencode and retry"), "{err}");
    assert_eq!(names_in(dir.path()), ["cut.db", "opencode.db"]);
}

#[test]
fn an_sqlite_database_that_is_not_opencodes_names_what_it_lacks() {
    let dir = tempfile::tempdir().expect("a folder");
    let path = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&path).expect("a database");
    conn.execute_batch(
        "CREATE TABLE session (id TEXT, directory TEXT, time_created INTEGER);
         CREATE TABLE message (id TEXT, session_id TEXT, time_created INTEGER, body TEXT);
         CREATE TABLE notes (x);",
    )
    .expect("tables");
    drop(conn);
    assert_eq!(
        db_error(&path),
        format!(
            "cannot read {} as opencode's session database: it has no column `message.data`, no table `part`: it is another program's SQLite database, or an opencode version soba does not know; write the sessions with `opencode export <session-id> > session.json` and import those files",
            path.display()
        )
    );
    // A file that is not SQLite at all is no transcript.
    let junk = dir.path().join("opencode.db");
    std::fs::write(&junk, b"SQLite format 2\0 and then nothing").expect("written");
    let err = import_path(&junk).expect_err("refused").to_string();
    assert!(
        err.starts_with(&format!(
            "{} is not a transcript soba can import; supported formats: ",
            junk.display()
        )),
        "{err}"
    );
    assert!(err.ends_with(", opencode-db"), "{err}");
}

#[test]
fn an_opencode_database_of_views_or_of_no_session_is_refused_saying_why() {
    let dir = tempfile::tempdir().expect("a folder");
    // A view named like opencode's table, over an endless recursive query:
    // running it would never return, so it is never run.
    let path = dir.path().join("views.db");
    let conn = rusqlite::Connection::open(&path).expect("a database");
    conn.execute_batch(
        "CREATE TABLE message (id TEXT, session_id TEXT, time_created INTEGER, data TEXT);
         CREATE TABLE part (id TEXT, message_id TEXT, data TEXT);
         CREATE VIEW session AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
           SELECT i AS id, '' AS directory, i AS time_created FROM n ORDER BY i DESC;",
    )
    .expect("tables");
    drop(conn);
    assert_eq!(
        db_error(&path),
        format!(
            "cannot read {} as opencode's session database: its `session` is a view, not a table as opencode writes it: it is not opencode's database, and soba does not run the queries of views; write the sessions with `opencode export <session-id> > session.json` and import those files",
            path.display()
        )
    );
    // opencode's tables and no session yet: refused, not "0 of 0 written".
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("a folder");
    let path = write_db(&empty, &[]);
    assert_eq!(
        db_error(&path),
        format!(
            "cannot read {} as opencode's session database: it holds no session (its `session` table is empty): import it after opencode has recorded one",
            path.display()
        )
    );
    // The sessions only in the write-ahead log: the refusal says where.
    let writer = rusqlite::Connection::open(&path).expect("opened");
    writer
        .pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    writer
        .pragma_update(None, "wal_autocheckpoint", 0)
        .expect("no checkpoint");
    let (first, _) = two_sessions();
    insert_export(&writer, &first);
    writer.execute_batch("BEGIN IMMEDIATE").expect("locked");
    let err = db_error(&path);
    assert!(
        err.contains("it holds no session (its `session` table is empty): import it after opencode has recorded one; also, ")
            && err.ends_with("-wal: not read: it holds the changes opencode has not yet written into the database (opencode is running, or did not close), so the latest messages may be missing; close opencode and import again"),
        "{err}"
    );
    writer.execute_batch("COMMIT").expect("committed");
}

#[test]
fn an_opencode_part_cut_inside_an_emoji_is_kept_with_the_repair_named() {
    let dir = tempfile::tempdir().expect("a folder");
    let (first, _) = two_sessions();
    let path = write_db(dir.path(), &[&first]);
    let conn = rusqlite::Connection::open(&path).expect("opened");
    // What JavaScript writes for a string cut between the two halves of a
    // surrogate pair: a lone `\ud83d` escape, which serde_json refuses.
    let changed = conn
        .execute(
            "UPDATE part SET data = replace(data, '\"text\":\"', '\"text\":\"\\ud83d') WHERE id = 'prt_a00100'",
            [],
        )
        .expect("changed");
    assert_eq!(changed, 1);
    drop(conn);
    let sessions = import_path(&path).unwrap_or_else(|err| panic!("{err}"));
    let diagnostics = &sessions[0].stats.diagnostics;
    assert!(
        diagnostics.iter().any(|d| d.starts_with(
            "part prt_a00100 of message msg_a001: 1 unpaired UTF-16 surrogate escape"
        )),
        "{diagnostics:?}"
    );
    assert!(
        !diagnostics
            .iter()
            .any(|d| d.starts_with("part prt_a00100") && d.contains("skipped")),
        "{diagnostics:?}"
    );
}

#[test]
fn an_opencode_row_that_is_not_json_or_too_large_is_named_and_the_rest_kept() {
    let dir = tempfile::tempdir().expect("a folder");
    let (first, _) = two_sessions();
    let path = write_db(dir.path(), &[&first]);
    let conn = rusqlite::Connection::open(&path).expect("opened");
    conn.execute(
        "UPDATE part SET data = '{not json' WHERE id = 'prt_a01201'",
        [],
    )
    .expect("damaged");
    conn.execute("UPDATE part SET data = '[1]' WHERE id = 'prt_a00100'", [])
        .expect("not an object");
    // A TEXT column keeps the number as its text.
    conn.execute("UPDATE part SET data = 7 WHERE id = 'prt_a00101'", [])
        .expect("a number");
    // One part of 65 MiB, more than a row soba reads.
    conn.execute(
        "UPDATE part SET data = hex(zeroblob(34078720)) WHERE id = 'prt_a00600'",
        [],
    )
    .expect("huge");
    drop(conn);
    let sessions = import_path(&path).unwrap_or_else(|err| panic!("{err}"));
    let s = &sessions[0];
    let named: Vec<&String> = s
        .stats
        .diagnostics
        .iter()
        .filter(|d| d.starts_with("part "))
        .collect();
    assert_eq!(
        named,
        [
            "part prt_a00100 of message msg_a001: skipped: its data is not a JSON object",
            "part prt_a00101 of message msg_a001: skipped: its data is not a JSON object",
            "part prt_a00600 of message msg_a006: skipped: its data is 68157440 bytes, more than the 64 MiB soba reads",
            "part prt_a01201 of message msg_a012: skipped: its data is not JSON: key must be a string at line 1 column 2",
        ]
    );
    // The first user message lost both parts; the requests are all there.
    assert_eq!(s.inferences.len(), 5);
    assert_eq!(s.stats.tool_calls, 4);
}

#[test]
fn an_opencode_database_that_is_a_fifo_or_a_link_to_a_device_is_refused_unopened() {
    let dir = tempfile::tempdir().expect("a folder");
    let fifo = dir.path().join("opencode.db");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let err = import_path(&fifo).expect_err("refused").to_string();
    assert!(err.contains("FIFO"), "{err}");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink("/dev/zero", &link).expect("a link");
    let err = import_path(&link).expect_err("refused").to_string();
    assert!(err.contains("device"), "{err}");
    // A link to a database elsewhere is read where it points.
    let elsewhere = tempfile::tempdir().expect("a folder");
    let (first, _) = two_sessions();
    let db = write_db(elsewhere.path(), &[&first]);
    let linked = dir.path().join("linked.db");
    std::os::unix::fs::symlink(&db, &linked).expect("a link");
    assert_eq!(import_path(&linked).expect("imports").len(), 1);
    assert_eq!(names_in(elsewhere.path()), ["opencode.db"]);
}
