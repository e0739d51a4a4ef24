//! opencode sessions (sst/opencode, npm `opencode-ai`): the document
//! `opencode export <session>` writes, and the JSON storage layout opencode
//! kept its sessions in before 1.2.0 (`storage/session/<project>/<id>.json`,
//! `storage/message/<session>/<id>.json`, `storage/part/<message>/<id>.json`).
//! Since 1.2.0 opencode keeps them in one SQLite file, `opencode.db`: a
//! `session` table (one row per session: `id`, `directory`,
//! `time_created`), a `message` table (`id`, `session_id`, `time_created`,
//! and `data`, the message's JSON object less its `id` and `sessionID`) and
//! a `part` table (`id`, `message_id`, and `data`, the part's JSON object
//! less its ids). soba opens it read-only and immutable (no lock, no
//! journal, nothing written beside it) and imports every session it holds.
//!
//! All three forms give the same list of messages, each an `info` object
//! (`role`, `time.created` in Unix milliseconds, and on an assistant
//! message `modelID`, `tokens` and `cost`) and its `parts`, in order. An
//! assistant message holds one or more steps, each one model request,
//! opened by a `step-start` part and closed by a `step-finish` part that
//! carries that request's `tokens` and `cost`. Each step becomes one
//! assistant entry (its `reasoning`, `text` and `tool` parts) followed by
//! one `tool` entry per call whose `state` holds an `output` or an
//! `error`; a call still `pending` or `running` is kept unpaired. A step
//! with no `step-finish` (aborted) is an inference without usage.
//!
//! opencode's `tokens.input` excludes cached tokens and `tokens.output`
//! excludes `tokens.reasoning`; SOBA's output includes reasoning.
//!
//! A compaction is an assistant message with `summary: true` answering a
//! user message whose part is `compaction`: it becomes an imported capsule
//! carrying the summary, and the conversation goes on after it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use serde_json::{Map, Value, json};
use soba_core::{Block, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage};

use super::builder::{
    Context, KeptTarget, SessionBuilder, array_field, count_field, image_from_url, message_with,
    obj_field, parse_document, str_field, text_of, timestamp_field, tool_message, usage_figures,
};
use super::{Format, ImportError, ImportOptions, ImportedSession};

/// The largest message or part file of the storage layout soba reads: a
/// part holds one tool output, which opencode caps far below this.
const STORAGE_FILE_LIMIT: u64 = 64 << 20;

/// Imports the document `opencode export` writes: `{info, messages}`.
pub(crate) fn import_export(text: &str, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let doc = parse_document(text)?;
    let info = obj_field(&doc, "info").cloned().unwrap_or_default();
    let mut b = SessionBuilder::new(Format::OpenCode, ctx, 0);
    let messages: Vec<(Map<String, Value>, Vec<Value>, String)> = array_field(&doc, "messages")
        .iter()
        .enumerate()
        .filter_map(|(idx, message)| {
            let at = format!("messages[{idx}]");
            let Some(message) = message.as_object() else {
                b.diag(format!("{at}: skipped: not an object"));
                return None;
            };
            let Some(info) = obj_field(message, "info") else {
                b.diag(format!("{at}: skipped: no `info` object"));
                return None;
            };
            Some((info.clone(), array_field(message, "parts").to_vec(), at))
        })
        .collect();
    convert(&info, messages, &mut b);
    Ok(vec![b.finish()])
}

/// Imports a session file of the storage layout, `text` read from
/// `ctx.source` (`…/storage/session/<project>/<session>.json`): its
/// messages and parts are read from the `message` and `part` folders
/// beside `session`. A message or part file that cannot be read or parsed
/// is skipped with a diagnostic naming it.
pub(crate) fn import_storage(text: &str, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let info = parse_document(text)?;
    let mut b = SessionBuilder::new(Format::OpenCodeStorage, ctx, 0);
    let Some(session_id) = str_field(&info, "id").map(str::to_owned) else {
        return Err("the session file has no string `id`".into());
    };
    let storage = storage_root(&ctx.source).ok_or_else(|| {
        format!(
            "the session file is not inside opencode's storage folder (…/storage/session/<project>/{session_id}.json), so its messages cannot be found; import the document `opencode export {session_id}` writes instead"
        )
    })?;
    let mut messages = Vec::new();
    for (path, message) in read_objects(&storage.join("message").join(&session_id), &mut b) {
        let Some(message_id) = str_field(&message, "id").map(str::to_owned) else {
            b.diag(format!(
                "{}: skipped: a message with no string `id`",
                path.display()
            ));
            continue;
        };
        let parts: Vec<Value> = read_objects(&storage.join("part").join(&message_id), &mut b)
            .into_iter()
            .map(|(_, part)| Value::Object(part))
            .collect();
        messages.push((message, parts, format!("message {message_id}")));
    }
    // opencode's message ids ascend with time; the file names are the ids.
    messages.sort_by(|a, b| {
        let id = |m: &Map<String, Value>| str_field(m, "id").unwrap_or_default().to_owned();
        id(&a.0).cmp(&id(&b.0))
    });
    convert(&info, messages, &mut b);
    Ok(vec![b.finish()])
}

/// Returns the `storage` folder of a session file
/// `<storage>/session/<project>/<session>.json`.
fn storage_root(session_file: &Path) -> Option<PathBuf> {
    let project = session_file.parent()?;
    let sessions = project.parent()?;
    if sessions.file_name()? != "session" {
        return None;
    }
    Some(sessions.parent()?.to_owned())
}

/// Reads every `*.json` file of `dir` as a JSON object, in name order (the
/// names are opencode's ascending ids). A missing folder gives nothing; a
/// file that cannot be read or is not an object is named in a diagnostic.
fn read_objects(dir: &Path, b: &mut SessionBuilder) -> Vec<(PathBuf, Map<String, Value>)> {
    let mut names: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => {
            b.diag(format!("{}: skipped: cannot be read: {err}", dir.display()));
            return Vec::new();
        }
    };
    names.sort();
    let mut objects = Vec::with_capacity(names.len());
    for path in names {
        let bytes = match crate::untrusted::read_untrusted(&path, STORAGE_FILE_LIMIT) {
            Ok(bytes) => bytes,
            Err(err) => {
                b.diag(format!("{}: skipped: {err}", path.display()));
                continue;
            }
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(object)) => objects.push((path, object)),
            Ok(_) => b.diag(format!("{}: skipped: not a JSON object", path.display())),
            Err(err) => b.diag(format!("{}: skipped: invalid JSON: {err}", path.display())),
        }
    }
    objects
}

/// The largest `data` value of a message or part row soba reads from
/// `opencode.db`, as [`STORAGE_FILE_LIMIT`] caps a storage file.
const ROW_LIMIT: u64 = STORAGE_FILE_LIMIT;

/// The columns of `opencode.db` soba reads, per table.
const DB_COLUMNS: [(&str, &[&str]); 3] = [
    ("session", &["id", "directory", "time_created"]),
    ("message", &["id", "session_id", "time_created", "data"]),
    ("part", &["id", "message_id", "data"]),
];

/// What to do when `opencode.db` cannot be read.
const DB_ADVICE: &str = "close opencode and retry, or write one session with `opencode export <session-id> > session.json` and import that file";

/// Imports every session of opencode's SQLite database `path`, already
/// opened as `file` (a regular file beginning with SQLite's magic), oldest
/// first. Each session is read from its rows into the objects of the
/// storage layout and converted as they are. A row that is not a JSON
/// object, or is larger than [`ROW_LIMIT`], is skipped with a diagnostic
/// naming it.
pub(crate) fn import_db(
    path: &Path,
    file: &std::fs::File,
    options: &ImportOptions,
) -> Result<Vec<ImportedSession>, ImportError> {
    let fail = |reason: String| ImportError::Database {
        path: path.to_owned(),
        reason,
    };
    check_length(file).map_err(fail)?;
    let wal = wal_note(path);
    // What soba cannot see while opencode still holds changes in its
    // write-ahead log: said with any refusal, and when no session is left.
    let with_wal = |reason: String| match &wal {
        Some(note) => fail(format!("{reason}; also, {note}")),
        None => fail(reason),
    };
    let conn = open_db(&held_path(path, file)).map_err(|err| with_wal(sqlite_reason(&err)))?;
    check_schema(&conn).map_err(with_wal)?;
    let sessions = read_sessions(&conn).map_err(|err| with_wal(sqlite_reason(&err)))?;
    if sessions.is_empty() {
        return Err(with_wal(
            "it holds no session (its `session` table is empty): import it after opencode has recorded one"
                .to_owned(),
        ));
    }
    let ctx = Context {
        source: path.to_owned(),
        fallback_ms: options.fallback_timestamp_ms,
    };
    let mut imported = Vec::with_capacity(sessions.len());
    for info in sessions {
        let id = str_field(&info, "id").unwrap_or_default().to_owned();
        let mut b = SessionBuilder::new(Format::OpenCodeDb, &ctx, ordinal_of(&id));
        if let Some(note) = &wal {
            b.diag(note.clone());
        }
        let messages =
            read_messages(&conn, &id, &mut b).map_err(|err| fail(sqlite_reason(&err)))?;
        convert(&info, messages, &mut b);
        imported.push(b.finish());
    }
    Ok(imported)
}

/// A stable ordinal for a session's ids: from its opencode id, so a
/// session keeps its ids when others are added to the database.
fn ordinal_of(session_id: &str) -> usize {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(session_id.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes) as usize
}

/// Refuses a database file shorter than its header says: it was cut while
/// being copied or written.
fn check_length(file: &std::fs::File) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; 100];
    let len = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    if file.read_exact_at(&mut header, 0).is_err() {
        return Err(format!(
            "it ends at byte {len}, inside the 100-byte SQLite header: it was cut short; copy it again, or {DB_ADVICE}"
        ));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536,
        size => u64::from(size),
    };
    let pages = u64::from(u32::from_be_bytes([
        header[28], header[29], header[30], header[31],
    ]));
    // The page count is valid only when written by the same change as the
    // "version-valid-for" number (SQLite's file format, §1.3.7).
    let valid = header[92..96] == header[24..28];
    let expected = page_size.saturating_mul(pages);
    if valid && len < expected {
        return Err(format!(
            "it ends at byte {len} but its header says {expected} bytes: it was cut short (copied while opencode wrote it?); copy it again, or {DB_ADVICE}"
        ));
    }
    Ok(())
}

/// The name under which SQLite opens the file soba already holds open and
/// checked (a regular file beginning as a database): `/proc/self/fd/<n>`,
/// so a path swapped after the check (for a FIFO, a device, another file)
/// is never what SQLite reads; the path itself where `/proc` is absent.
fn held_path(path: &Path, file: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    let held = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if held.exists() { held } else { path.to_owned() }
}

/// Opens the database read-only and immutable: SQLite takes no lock,
/// reads no journal or write-ahead log, and creates no file beside it.
fn open_db(path: &Path) -> rusqlite::Result<Connection> {
    let uri = format!("file:{}?mode=ro&immutable=1", uri_path(path));
    let conn = Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // The file is not soba's: its views and triggers run no functions
    // with side effects.
    conn.pragma_update(None, "trusted_schema", false)?;
    Ok(conn)
}

/// Percent-encodes a path for an SQLite `file:` URI (every byte but
/// letters, digits and `/._-~`).
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/._-~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Says what SQLite's error means for the user, and what to do.
fn sqlite_reason(err: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode;
    match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => format!(
            "it begins like an SQLite database but is not one SQLite can read ({err}): it is damaged; copy it again, or {DB_ADVICE}"
        ),
        Some(ErrorCode::DatabaseCorrupt) => format!(
            "SQLite found it damaged ({err}): it was cut short, or opencode was writing it while soba read it; {DB_ADVICE}"
        ),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            format!("it is locked by another program ({err}); {DB_ADVICE}")
        }
        _ => format!("SQLite: {err}; {DB_ADVICE}"),
    }
}

/// Checks that the database has opencode's tables and the columns soba
/// reads, naming what is missing.
fn check_schema(conn: &Connection) -> Result<(), String> {
    // Only ordinary tables are read: a view or a virtual table of the same
    // name runs whatever query its author wrote (an endless recursive one
    // never returns and fills the disk with SQLite's sorter files), while
    // a scan of a table is bounded by the file.
    for (table, _) in DB_COLUMNS {
        let kind: Option<(String, String)> = conn
            .query_row(
                "SELECT type, COALESCE(sql, '') FROM sqlite_schema WHERE name = ?1",
                [table],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map(Some)
            .or_else(|err| match err {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                err => Err(sqlite_reason(&err)),
            })?;
        if let Some((kind, sql)) = kind {
            let virtual_table = sql
                .trim_start()
                .to_ascii_uppercase()
                .starts_with("CREATE VIRTUAL");
            if kind != "table" || virtual_table {
                let what = if virtual_table {
                    "a virtual table".to_owned()
                } else {
                    format!("a {kind}")
                };
                return Err(format!(
                    "its `{table}` is {what}, not a table as opencode writes it: it is not opencode's database, and soba does not run the queries of views; write the sessions with `opencode export <session-id> > session.json` and import those files"
                ));
            }
        }
    }
    let mut missing = Vec::new();
    for (table, columns) in DB_COLUMNS {
        let present: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .and_then(|mut stmt| {
                stmt.query_map([table], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .map_err(|err| sqlite_reason(&err))?;
        if present.is_empty() {
            missing.push(format!("table `{table}`"));
            continue;
        }
        for column in columns.iter().filter(|c| !present.iter().any(|p| p == *c)) {
            missing.push(format!("column `{table}.{column}`"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "it has no {}: it is another program's SQLite database, or an opencode version soba does not know; write the sessions with `opencode export <session-id> > session.json` and import those files",
        missing.join(", no ")
    ))
}

/// Reads every session row as the `info` object of an export, oldest
/// first.
fn read_sessions(conn: &Connection) -> rusqlite::Result<Vec<Map<String, Value>>> {
    let mut stmt =
        conn.prepare("SELECT id, directory, time_created FROM session ORDER BY time_created, id")?;
    let rows = stmt.query_map([], |row| {
        let mut info = Map::new();
        info.insert("id".into(), sql_value(row.get_ref(0)?));
        info.insert("directory".into(), sql_value(row.get_ref(1)?));
        info.insert(
            "time".into(),
            json!({"created": sql_value(row.get_ref(2)?)}),
        );
        Ok(info)
    })?;
    rows.collect()
}

/// A scalar column as JSON (text, a number or null; a blob as null).
fn sql_value(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Integer(n) => Value::from(n),
        ValueRef::Real(x) => Value::from(x),
        ValueRef::Text(text) => Value::String(String::from_utf8_lossy(text).into_owned()),
        ValueRef::Null | ValueRef::Blob(_) => Value::Null,
    }
}

/// The SQL of a row's `data`, unless larger than the limit (`?2`), and its
/// size in bytes.
const DATA: &str = "octet_length(data), CASE WHEN octet_length(data) <= ?2 THEN data END";

/// A session's messages: each one's object, its parts, and how
/// diagnostics name it.
type Messages = Vec<(Map<String, Value>, Vec<Value>, String)>;

/// Reads a session's messages and their parts, in order, as the storage
/// layout's objects.
fn read_messages(
    conn: &Connection,
    session_id: &str,
    b: &mut SessionBuilder,
) -> rusqlite::Result<Messages> {
    let limit = i64::try_from(ROW_LIMIT).unwrap_or(i64::MAX);
    let mut parts: HashMap<String, Vec<Value>> = HashMap::new();
    let mut stmt = conn.prepare(&format!(
        "SELECT id, message_id, {DATA} FROM part \
         WHERE message_id IN (SELECT id FROM message WHERE session_id = ?1) \
         ORDER BY message_id, id"
    ))?;
    let mut rows = stmt.query(rusqlite::params![session_id, limit])?;
    while let Some(row) = rows.next()? {
        let id = text_column(row.get_ref(0)?);
        let message_id = text_column(row.get_ref(1)?);
        let at = format!("part {id} of message {message_id}");
        if let Some(mut part) = row_object(row.get_ref(2)?, row.get_ref(3)?, &at, b) {
            part.insert("id".into(), Value::String(id));
            part.insert("messageID".into(), Value::String(message_id.clone()));
            part.insert("sessionID".into(), Value::String(session_id.to_owned()));
            parts
                .entry(message_id)
                .or_default()
                .push(Value::Object(part));
        }
    }
    let mut messages = Vec::new();
    let mut stmt = conn.prepare(&format!(
        "SELECT id, {DATA} FROM message WHERE session_id = ?1 ORDER BY time_created, id"
    ))?;
    let mut rows = stmt.query(rusqlite::params![session_id, limit])?;
    while let Some(row) = rows.next()? {
        let id = text_column(row.get_ref(0)?);
        let at = format!("message {id}");
        let Some(mut message) = row_object(row.get_ref(1)?, row.get_ref(2)?, &at, b) else {
            continue;
        };
        message.insert("id".into(), Value::String(id.clone()));
        message.insert("sessionID".into(), Value::String(session_id.to_owned()));
        messages.push((message, parts.remove(&id).unwrap_or_default(), at));
    }
    Ok(messages)
}

/// A text column (an id) as a string; another type as its JSON text.
fn text_column(value: ValueRef<'_>) -> String {
    match sql_value(value) {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

/// Parses a row's `data` as a JSON object, or names the row in a
/// diagnostic and gives nothing.
fn row_object(
    size: ValueRef<'_>,
    data: ValueRef<'_>,
    at: &str,
    b: &mut SessionBuilder,
) -> Option<Map<String, Value>> {
    let bytes = match data {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes,
        ValueRef::Null => {
            match size {
                ValueRef::Integer(size) if size > 0 => b.diag(format!(
                    "{at}: skipped: its data is {size} bytes, more than the {} MiB soba reads",
                    ROW_LIMIT >> 20
                )),
                _ => b.diag(format!("{at}: skipped: it has no data")),
            }
            return None;
        }
        ValueRef::Integer(_) | ValueRef::Real(_) => {
            b.diag(format!(
                "{at}: skipped: its data is a number, not a JSON object"
            ));
            return None;
        }
    };
    // The same repair as every other importer's text: invalid UTF-8 and a
    // lone surrogate escape (a string cut inside an emoji) become U+FFFD,
    // so the part is kept instead of refused by serde_json.
    let (text, lone) = super::text::repair_lossy(String::from_utf8_lossy(bytes));
    if let Some(lone) = lone {
        b.diag(format!("{at}: {lone}"));
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(object)) => Some(object),
        Ok(_) => {
            b.diag(format!("{at}: skipped: its data is not a JSON object"));
            None
        }
        Err(err) => {
            b.diag(format!("{at}: skipped: its data is not JSON: {err}"));
            None
        }
    }
}

/// The note of a database whose write-ahead log (`opencode.db-wal`) holds
/// changes not yet in the file: an immutable read does not see them.
fn wal_note(path: &Path) -> Option<String> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let len = std::fs::symlink_metadata(&wal).ok()?.len();
    (len > 0).then(|| {
        format!(
            "{}: not read: it holds the changes opencode has not yet written into the database (opencode is running, or did not close), so the latest messages may be missing; close opencode and import again",
            wal.display()
        )
    })
}

/// Raw sums of the recorded usage, in opencode's names.
#[derive(Debug, Default)]
struct RawUsage {
    input: u64,
    output: u64,
    reasoning: u64,
    cache_read: u64,
    cache_write: u64,
    cost: f64,
}

/// Converts a session: its `info` and its messages (info, parts, and how
/// diagnostics name the message), in order.
fn convert(
    info: &Map<String, Value>,
    messages: Vec<(Map<String, Value>, Vec<Value>, String)>,
    b: &mut SessionBuilder,
) {
    if let Some(id) = str_field(info, "id") {
        id.clone_into(&mut b.original_id);
    }
    b.cwd = str_field(info, "directory").map(str::to_owned);
    b.created_at = obj_field(info, "time").and_then(|time| timestamp_field(time, "created"));
    let mut raw = RawUsage::default();
    for (message, parts, at) in messages {
        b.messages += 1;
        let role = str_field(&message, "role").unwrap_or("");
        b.count_record(role);
        let timestamp =
            obj_field(&message, "time").and_then(|time| timestamp_field(time, "created"));
        match role {
            "user" => convert_user(&parts, timestamp, &at, b),
            "assistant" => convert_assistant(&message, &parts, timestamp, &at, b, &mut raw),
            other => b.diag(format!(
                "{at}: skipped: role {other:?} is not user or assistant"
            )),
        }
    }
    b.usage_raw = json!({
        "counting": "per-request",
        "input": raw.input,
        "output": raw.output,
        "reasoning": raw.reasoning,
        "cacheRead": raw.cache_read,
        "cacheWrite": raw.cache_write,
        "cost": raw.cost,
    });
}

/// Converts a user message: its text and file parts. A message whose text
/// parts are all `synthetic` (file contents and notes opencode adds) is
/// injected context; a `compaction` part asks for a summary and is not
/// model input.
fn convert_user(parts: &[Value], timestamp: Option<String>, at: &str, b: &mut SessionBuilder) {
    let mut blocks = Vec::new();
    let mut typed = false;
    for part in parts.iter().filter_map(Value::as_object) {
        match str_field(part, "type").unwrap_or("") {
            "text" => {
                if part.get("ignored").and_then(Value::as_bool) == Some(true) {
                    continue;
                }
                if part.get("synthetic").and_then(Value::as_bool) != Some(true) {
                    typed = true;
                }
                blocks.push(Block::Text(
                    str_field(part, "text").unwrap_or("").to_owned(),
                ));
            }
            "file" => {
                let mime = str_field(part, "mime").unwrap_or("");
                let url = str_field(part, "url").unwrap_or("");
                if mime.starts_with("image/") && url.starts_with("data:") {
                    blocks.push(Block::Image(image_from_url(url)));
                } else {
                    let name = str_field(part, "filename").unwrap_or(url);
                    blocks.push(Block::Text(format!("[file: {name}]")));
                }
                typed = true;
            }
            "compaction" => b.count_record("compaction"),
            _ => {}
        }
    }
    if blocks.is_empty() {
        if !parts
            .iter()
            .any(|part| part.get("type").and_then(Value::as_str) == Some("compaction"))
        {
            b.diag(format!(
                "{at}: skipped: a user message with no text or file part"
            ));
        }
        return;
    }
    let origin = if typed {
        MessageOrigin::Typed
    } else {
        MessageOrigin::Injected
    };
    b.push_message(message_with(Role::User, blocks, origin), timestamp);
}

/// One step of an assistant message: the parts between two `step-start`s,
/// and the `step-finish` that closed it.
#[derive(Default)]
struct Step<'a> {
    parts: Vec<&'a Map<String, Value>>,
    finish: Option<&'a Map<String, Value>>,
}

/// Converts an assistant message, step by step.
fn convert_assistant(
    message: &Map<String, Value>,
    parts: &[Value],
    timestamp: Option<String>,
    at: &str,
    b: &mut SessionBuilder,
    raw: &mut RawUsage,
) {
    let model = str_field(message, "modelID")
        .or_else(|| obj_field(message, "model").and_then(|model| str_field(model, "modelID")))
        .map(str::to_owned);
    let response_id = str_field(message, "id").map(str::to_owned);
    let mut steps: Vec<Step<'_>> = Vec::new();
    for part in parts.iter().filter_map(Value::as_object) {
        match str_field(part, "type").unwrap_or("") {
            "step-start" => steps.push(Step::default()),
            "step-finish" => {
                if steps.last().is_none_or(|step| step.finish.is_some()) {
                    steps.push(Step::default());
                }
                if let Some(step) = steps.last_mut() {
                    step.finish = Some(part);
                }
            }
            "text" | "reasoning" | "tool" => {
                if steps.last().is_none_or(|step| step.finish.is_some()) {
                    steps.push(Step::default());
                }
                if let Some(step) = steps.last_mut() {
                    step.parts.push(part);
                }
            }
            // Snapshots, patches, retries and agent notes are not model input.
            _ => {}
        }
    }
    steps.retain(|step| !step.parts.is_empty() || step.finish.is_some());
    if steps.is_empty() {
        let why = obj_field(message, "error")
            .and_then(|error| str_field(error, "name"))
            .map(|name| format!(" ({name})"))
            .unwrap_or_default();
        b.diag(format!(
            "{at}: skipped: an assistant message with no content{why}"
        ));
        return;
    }
    let is_summary = message.get("summary").and_then(Value::as_bool) == Some(true);
    // Older versions record usage on the message only: it then stands for
    // its one step. An aborted request records zeros there: no usage.
    let message_tokens = (steps.len() == 1 && steps[0].finish.is_none())
        .then(|| obj_field(message, "tokens"))
        .flatten()
        .filter(|tokens| {
            ["input", "output", "reasoning"]
                .iter()
                .any(|key| count_field(tokens, key) > 0)
                || obj_field(tokens, "cache").is_some_and(|cache| {
                    count_field(cache, "read") > 0 || count_field(cache, "write") > 0
                })
        });
    for (step_idx, step) in steps.iter().enumerate() {
        let step_at = format!("{at} step {}", step_idx + 1);
        let tokens = step
            .finish
            .and_then(|finish| obj_field(finish, "tokens"))
            .or(message_tokens);
        let cost = step
            .finish
            .or(message_tokens.map(|_| message))
            .and_then(|holder| holder.get("cost"))
            .and_then(Value::as_f64)
            .filter(|cost| cost.is_finite() && *cost >= 0.0);
        let usage = tokens.and_then(|tokens| usage_of(tokens, &step_at, b, raw));
        if usage.is_some() {
            raw.cost += cost.unwrap_or(0.0);
        }
        if is_summary {
            let summary: Vec<&str> = step
                .parts
                .iter()
                .filter(|part| str_field(part, "type") == Some("text"))
                .filter_map(|part| str_field(part, "text"))
                .collect();
            let tokens_before = b.last_prompt().unwrap_or(0);
            b.push_capsule(
                summary.join("\n"),
                response_id.clone().unwrap_or_default(),
                tokens_before,
                timestamp.clone(),
                KeptTarget::Nothing,
            );
            continue;
        }
        let (blocks, results) = step_blocks(&step.parts);
        let entry_idx = b.push_message(Message::new(Role::Assistant, blocks), timestamp.clone());
        b.push_inference(
            entry_idx,
            usage,
            timestamp.clone(),
            model.clone(),
            response_id.clone(),
        );
        for (result, result_time) in results {
            b.push_message(result, result_time.or_else(|| timestamp.clone()));
        }
    }
}

/// Reads opencode's `tokens` object as SOBA usage, adding the raw figures
/// to `raw`.
fn usage_of(
    tokens: &Map<String, Value>,
    at: &str,
    b: &mut SessionBuilder,
    raw: &mut RawUsage,
) -> Option<Usage> {
    let [input, output, reasoning, cache_read, cache_write] = usage_figures(
        tokens,
        ["input", "output", "reasoning", "cache.read", "cache.write"],
        at,
        &mut b.diagnostics,
    )?;
    raw.input = raw.input.saturating_add(input);
    raw.output = raw.output.saturating_add(output);
    raw.reasoning = raw.reasoning.saturating_add(reasoning);
    raw.cache_read = raw.cache_read.saturating_add(cache_read);
    raw.cache_write = raw.cache_write.saturating_add(cache_write);
    Some(Usage {
        input,
        cache_read,
        cache_write,
        output: output.saturating_add(reasoning),
        reasoning,
    })
}

/// Builds a step's assistant blocks and the `tool` messages of its calls
/// that have a result, each with the time the call ended.
fn step_blocks(parts: &[&Map<String, Value>]) -> (Vec<Block>, Vec<(Message, Option<String>)>) {
    let mut blocks = Vec::new();
    let mut results = Vec::new();
    for part in parts {
        match str_field(part, "type").unwrap_or("") {
            "reasoning" => blocks.push(Block::Thinking {
                text: str_field(part, "text").unwrap_or("").to_owned(),
                signature: None,
            }),
            "text" => {
                let text = str_field(part, "text").unwrap_or("");
                if !text.is_empty() {
                    blocks.push(Block::Text(text.to_owned()));
                }
            }
            "tool" => {
                let id = str_field(part, "callID").unwrap_or("").to_owned();
                let state = obj_field(part, "state");
                let input = match state.and_then(|state| state.get("input")) {
                    Some(Value::String(text)) => ToolInput::from_json_text(text),
                    Some(Value::Null) | None => ToolInput::empty(),
                    Some(other) => ToolInput::from_value(other.clone()),
                };
                blocks.push(Block::ToolUse(ToolUse {
                    id: id.clone(),
                    name: str_field(part, "tool").unwrap_or("").to_owned(),
                    input,
                }));
                let Some(state) = state else { continue };
                let ended = obj_field(state, "time").and_then(|time| timestamp_field(time, "end"));
                match str_field(state, "status") {
                    Some("completed") => {
                        let output = state.get("output").map(text_of).unwrap_or_default();
                        results.push((
                            tool_message(id, vec![ResultPart::Text(output)], false),
                            ended,
                        ));
                    }
                    Some("error") => {
                        let error = state.get("error").map(text_of).unwrap_or_default();
                        results
                            .push((tool_message(id, vec![ResultPart::Text(error)], true), ended));
                    }
                    // `pending` or `running`: the call never ended.
                    _ => {}
                }
            }
            _ => {}
        }
    }
    (blocks, results)
}
