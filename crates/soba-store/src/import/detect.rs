//! Format detection (SPEC §3.4): SOBA first (a header with
//! `schemaVersion`), then pi (`type: "session"` without it), then the shapes
//! of `traces/FORMATS.md` §2–7 and Gemini CLI's JSONL header line.

use std::fmt;
use std::path::Path;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::builder::{count_field, obj_field, str_field};
use super::{Format, ImportError};

/// How many leading lines of a JSONL file are looked at.
const SNIFF_LINES: usize = 64;

/// What a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// A SOBA session log; nothing to import.
    Soba {
        /// The header's `schemaVersion`.
        schema_version: u64,
    },
    /// A foreign transcript.
    Foreign(Format),
}

impl Detected {
    /// Returns the format name: `soba` or the foreign format's.
    pub fn as_str(self) -> &'static str {
        match self {
            Detected::Soba { .. } => "soba",
            Detected::Foreign(format) => format.as_str(),
        }
    }
}

/// Detects the format of the file at `path`.
pub fn detect_format(path: &Path) -> Result<Detected, ImportError> {
    if let Ok((file, _)) = crate::untrusted::open_untrusted(path)
        && is_sqlite(&file)
    {
        return Ok(Detected::Foreign(Format::OpenCodeDb));
    }
    let bytes = super::read_import(path)?;
    detect_bytes(&bytes).ok_or_else(|| super::unknown_or_truncated(&bytes, path))
}

/// The first bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Returns whether `file` begins as an SQLite 3 database does (the only
/// SQLite files soba imports are opencode's `opencode.db`).
pub(crate) fn is_sqlite(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut magic = [0u8; 16];
    file.read_exact_at(&mut magic, 0).is_ok() && &magic == SQLITE_MAGIC
}

/// The most bytes [`read_head`] reads.
const HEAD_LIMIT: u64 = 16 << 20;

/// The beginning of a file: the lines detection looks at.
#[derive(Debug)]
pub(crate) struct Head {
    bytes: Vec<u8>,
    /// Whether `bytes` holds the first [`SNIFF_LINES`] non-blank lines
    /// and the file goes on after them.
    more: bool,
}

/// Reads the first [`SNIFF_LINES`] non-blank lines of `file`, at most
/// [`HEAD_LIMIT`] bytes.
pub(crate) fn read_head(file: &std::fs::File) -> std::io::Result<Head> {
    use std::io::{BufRead, Read};
    let mut reader = std::io::BufReader::new(file.take(HEAD_LIMIT));
    let mut bytes = Vec::new();
    let mut non_blank = 0usize;
    loop {
        let start = bytes.len();
        if reader.read_until(b'\n', &mut bytes)? == 0 {
            return Ok(Head { bytes, more: false });
        }
        let line = super::text::decode(&bytes[start..]);
        let line = if start == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            &line
        };
        if !line.trim().is_empty() {
            non_blank += 1;
        }
        if non_blank == SNIFF_LINES {
            let more = bytes.ends_with(b"\n") && !reader.fill_buf()?.is_empty();
            return Ok(Head { bytes, more });
        }
    }
}

impl Head {
    /// The bytes read.
    pub(crate) fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether the file cannot be JSON text, whatever follows: its first
    /// byte after a byte order mark and whitespace is neither `{` nor `[`
    /// (a binary file, a run of zeros, a kernel file). Every supported
    /// format is a JSON document or JSON lines, so such a file is told
    /// apart without reading the rest of it.
    pub(crate) fn cannot_be_json(&self) -> bool {
        let bytes = self
            .bytes
            .strip_prefix(b"\xef\xbb\xbf")
            .unwrap_or(&self.bytes);
        match bytes.iter().find(|byte| !byte.is_ascii_whitespace()) {
            Some(first) => !matches!(first, b'{' | b'['),
            // A head of nothing but whitespace as long as a head is read
            // (16 MiB) is no transcript either.
            None => self.len() >= HEAD_LIMIT,
        }
    }

    /// What a file that can be streamed is: its head holds
    /// [`SNIFF_LINES`] lines, the first a JSON object on its own (so the
    /// file is not one JSON document and detection needs only these
    /// lines: [`detect_bytes`] of the head is that of the whole file), and
    /// they are a SOBA log or pi, Claude Code, Codex rollout, OpenHands or
    /// Gemini CLI JSONL lines. `None` when the file must be read whole to
    /// be detected.
    pub(crate) fn streamable(&self) -> Option<Detected> {
        if !self.more {
            return None;
        }
        let text = super::text::decode(&self.bytes);
        let first = text
            .trim_start_matches('\u{feff}')
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())?;
        if !matches!(serde_json::from_str::<Value>(first), Ok(Value::Object(_))) {
            return None;
        }
        match detect_bytes(&self.bytes)? {
            found @ Detected::Foreign(
                Format::PiV1
                | Format::PiV3
                | Format::ClaudeCode
                | Format::CodexRollout
                | Format::OpenHands
                | Format::GeminiCliJsonl,
            ) => Some(found),
            soba @ Detected::Soba { .. } => Some(soba),
            Detected::Foreign(_) => None,
        }
    }
}

/// Detects the format of a transcript's bytes; `None` when it is none of
/// the supported formats.
pub fn detect_bytes(bytes: &[u8]) -> Option<Detected> {
    let text = super::text::decode(bytes);
    let text = text.trim_start_matches('\u{feff}');
    let lines: Vec<Map<String, Value>> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .take(SNIFF_LINES)
        .filter_map(|line| match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(obj)) => Some(obj),
            _ => None,
        })
        .collect();

    // SOBA and pi: the first object line is a `session` header.
    if let Some(first) = lines.first()
        && str_field(first, "type") == Some("session")
    {
        if first.contains_key("schemaVersion") {
            return Some(Detected::Soba {
                schema_version: count_field(first, "schemaVersion"),
            });
        }
        let tree = count_field(first, "version") >= 2
            || lines
                .iter()
                .skip(1)
                .any(|line| line.contains_key("id") && line.contains_key("parentId"));
        return Some(Detected::Foreign(if tree {
            Format::PiV3
        } else {
            Format::PiV1
        }));
    }

    // Whole-document JSON (§2, §4, §5, §6; also a one-line §3 file).
    if let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(text)
        && let Some(format) = classify_document(&doc)
    {
        return Some(Detected::Foreign(format));
    }

    // Gemini CLI JSONL: the first line is the session header. After the
    // whole-document test, so a one-line JSON recording stays JSON.
    if lines.first().is_some_and(is_gemini_header) {
        return Some(Detected::Foreign(Format::GeminiCliJsonl));
    }

    // JSONL shapes (§3, §7a, §7b).
    lines.iter().find_map(classify_line).map(Detected::Foreign)
}

/// Whether `line` is the header of a Gemini CLI JSONL chat recording: a
/// string `sessionId` and `projectHash` (what Gemini CLI's reader requires
/// of it), and neither the `type` every Claude Code, pi and Codex line has
/// nor the `id` of a message record.
fn is_gemini_header(line: &Map<String, Value>) -> bool {
    str_field(line, "sessionId").is_some()
        && str_field(line, "projectHash").is_some()
        && !line.contains_key("type")
        && !line.contains_key("id")
}

/// A whole-document JSON transcript that ends early: its beginning looks
/// like a known format but the JSON stops before the document closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// What the beginning looks like, e.g. "a SWE-agent trajectory".
    pub looks_like: &'static str,
    /// The byte where the document ends: the file's length.
    pub ends_at: u64,
}

/// The most top-level keys [`detect_truncated`] records.
const MAX_TOP_LEVEL_KEYS: usize = 64;

/// Recognises a damaged whole-document transcript (SWE-agent `.traj`,
/// OpenHands instance, Gemini CLI recording, openai-chat export, Codex
/// `{messages, meta}`): a JSON object that ends early (the parser hits the
/// end of input) whose top-level keys so far, or the `.traj` extension of
/// `source`, match a format. `None` for anything else.
pub fn detect_truncated(bytes: &[u8], source: &Path) -> Option<Truncated> {
    let text = super::text::decode(bytes);
    let text = text.trim_start_matches('\u{feff}');
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let mut top = TopLevel::default();
    let mut de = serde_json::Deserializer::from_str(text);
    match (&mut top).deserialize(&mut de) {
        Err(err) if err.is_eof() => {}
        _ => return None,
    }
    let is_traj = source
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("traj"));
    top.looks_like(is_traj).map(|looks_like| Truncated {
        looks_like,
        ends_at: bytes.len() as u64,
    })
}

/// The top-level keys of a JSON object read so far, and its `format`
/// string; filled while parsing, so a document cut short keeps them.
#[derive(Debug, Default)]
struct TopLevel {
    keys: Vec<String>,
    format: Option<String>,
}

impl TopLevel {
    fn has(&self, key: &str) -> bool {
        self.keys.iter().any(|seen| seen == key)
    }

    /// Says which format the keys point to, as in [`classify_document`].
    fn looks_like(&self, is_traj: bool) -> Option<&'static str> {
        if self.has("instance_id") {
            return Some("an OpenHands instance");
        }
        if self.format.as_deref() == Some("openai-chat") {
            return Some("a Claude Code openai-chat export");
        }
        let claude_line = self.has("uuid") || self.has("parentUuid") || self.has("type");
        if self.has("projectHash") || (self.has("sessionId") && !claude_line) {
            return Some("a Gemini CLI chat recording");
        }
        if is_traj || self.has("trajectory") || self.has("history") {
            return Some("a SWE-agent trajectory");
        }
        if self.has("meta") {
            return Some("a Codex {messages, meta} transcript");
        }
        if self.has("messages") {
            return Some("a JSON transcript (a top-level messages list)");
        }
        None
    }
}

impl<'de> DeserializeSeed<'de> for &mut TopLevel {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for &mut TopLevel {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let is_format = key == "format";
            if self.keys.len() < MAX_TOP_LEVEL_KEYS {
                self.keys.push(key);
            }
            if is_format {
                if let Value::String(format) = map.next_value::<Value>()? {
                    self.format = Some(format);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Classifies a whole-document JSON object.
fn classify_document(doc: &Map<String, Value>) -> Option<Format> {
    if let Some(history) = doc.get("history").and_then(Value::as_array)
        && !doc.contains_key("instance_id")
        && (doc.contains_key("trajectory")
            || doc.contains_key("info")
            || doc.contains_key("environment"))
    {
        let modern = history.iter().filter_map(Value::as_object).any(|entry| {
            entry.contains_key("tool_calls")
                || entry.contains_key("tool_call_ids")
                || entry.contains_key("message_type")
        });
        return Some(if modern {
            Format::SweAgent1
        } else {
            Format::SweAgent0
        });
    }
    if doc.contains_key("instance_id") && doc.get("history").is_some_and(Value::is_array) {
        return Some(Format::OpenHands);
    }
    if let Some(format) = classify_opencode(doc) {
        return Some(format);
    }
    if let Some(messages) = doc.get("messages").and_then(Value::as_array) {
        let gemini_types = messages.iter().filter_map(Value::as_object).any(|m| {
            matches!(
                str_field(m, "type"),
                Some("gemini" | "user" | "info" | "error" | "warning")
            )
        });
        if doc.contains_key("sessionId") && (gemini_types || doc.contains_key("projectHash")) {
            return Some(Format::GeminiCli);
        }
        if str_field(doc, "format") == Some("openai-chat") {
            return Some(Format::ClaudeCodeOpenAiChat);
        }
        if let Some(meta) = obj_field(doc, "meta")
            && (meta.contains_key("session_meta") || meta.contains_key("token_counts"))
        {
            return Some(Format::CodexMessagesMeta);
        }
    }
    classify_line(doc)
}

/// Classifies an opencode document: an export (`info` is a session, each
/// message an `{info, parts}` pair) or a session file of the storage
/// layout (a session object: `id` `ses_…`, `projectID`, `time`, no
/// messages).
fn classify_opencode(doc: &Map<String, Value>) -> Option<Format> {
    let is_session = |obj: &Map<String, Value>| {
        str_field(obj, "id").is_some_and(|id| id.starts_with("ses"))
            && str_field(obj, "projectID").is_some()
            && obj.get("time").is_some_and(Value::is_object)
    };
    if let Some(info) = obj_field(doc, "info")
        && is_session(info)
        && let Some(messages) = doc.get("messages").and_then(Value::as_array)
        && messages
            .iter()
            .filter_map(Value::as_object)
            .all(|message| message.contains_key("info") && message.contains_key("parts"))
    {
        return Some(Format::OpenCode);
    }
    (is_session(doc) && !doc.contains_key("messages")).then_some(Format::OpenCodeStorage)
}

/// Classifies one JSONL line.
fn classify_line(line: &Map<String, Value>) -> Option<Format> {
    if line.contains_key("instance_id") && line.get("history").is_some_and(Value::is_array) {
        return Some(Format::OpenHands);
    }
    let kind = str_field(line, "type");
    // Claude Code native lines, and the stream-json variant.
    let claude = (line.contains_key("sessionId") && line.contains_key("uuid"))
        || (kind == Some("summary") && line.contains_key("leafUuid"))
        || kind == Some("file-history-snapshot")
        || (line.contains_key("session_id")
            && matches!(kind, Some("system" | "assistant" | "user" | "result"))
            && (line.contains_key("message") || line.contains_key("subtype")));
    if claude {
        return Some(Format::ClaudeCode);
    }
    if line.contains_key("payload")
        && line.contains_key("timestamp")
        && matches!(
            kind,
            Some("session_meta" | "response_item" | "turn_context" | "event_msg" | "compacted")
        )
    {
        return Some(Format::CodexRollout);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(text: &str) -> Head {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t");
        std::fs::write(&path, text).expect("write");
        read_head(&std::fs::File::open(&path).expect("open")).expect("read")
    }

    #[test]
    fn only_a_long_file_of_object_lines_is_streamed() {
        let pi_line = "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
        let header = "{\"type\":\"session\",\"id\":\"s\"}\n";
        let long_pi = format!("{header}{}", pi_line.repeat(80));
        assert_eq!(
            head_of(&long_pi).streamable(),
            Some(Detected::Foreign(Format::PiV1))
        );
        assert_eq!(
            head_of(&format!("\u{feff}{long_pi}")).streamable(),
            Some(Detected::Foreign(Format::PiV1))
        );
        // Exactly the lines detection reads, and nothing after: read whole.
        let short = format!("{header}{}", pi_line.repeat(SNIFF_LINES - 1));
        assert_eq!(head_of(&short).streamable(), None);
        assert!(head_of(&format!("{short}{pi_line}")).streamable().is_some());
        // Blank lines do not count towards the head.
        let blanks = format!("{header}{}{}", "\n \n".repeat(100), pi_line.repeat(10));
        assert_eq!(head_of(&blanks).streamable(), None);
        // A pretty-printed document: its first line is no object.
        let doc = format!(
            "{{\n  \"history\": [\n{}  ]\n}}\n",
            "    {\"role\": \"user\"},\n".repeat(80)
        );
        assert_eq!(head_of(&doc).streamable(), None);
        // A SOBA log is known from its head.
        let soba = format!(
            "{{\"type\":\"session\",\"schemaVersion\":1}}\n{}",
            pi_line.repeat(80)
        );
        assert_eq!(
            head_of(&soba).streamable(),
            Some(Detected::Soba { schema_version: 1 })
        );
    }

    fn check(input: &str, expected: Option<&str>) {
        assert_eq!(
            detect_bytes(input.as_bytes()).map(Detected::as_str),
            expected,
            "input: {input}"
        );
    }

    #[test]
    fn detects_every_shape() {
        check(
            r#"{"type":"session","schemaVersion":1,"id":"x"}"#,
            Some("soba"),
        );
        check(
            "{\"type\":\"session\",\"id\":\"a\",\"cwd\":\"/\"}\n{\"type\":\"message\"}",
            Some("pi-v1"),
        );
        check(
            "{\"type\":\"session\",\"version\":3,\"id\":\"a\"}\n",
            Some("pi-v3"),
        );
        check(
            r#"{"history":[{"role":"system","content":"s"}],"info":{}}"#,
            Some("swe-agent-0"),
        );
        check(
            r#"{"history":[{"role":"tool","tool_call_ids":["a"]}],"trajectory":[]}"#,
            Some("swe-agent-1"),
        );
        check(r#"{"instance_id":"i","history":[]}"#, Some("openhands"));
        check(
            r#"{"sessionId":"s","messages":[{"type":"user","content":"hi"}]}"#,
            Some("gemini-cli"),
        );
        check(
            "{\"sessionId\":\"s\",\"projectHash\":\"h\",\"startTime\":\"2026-01-30T06:08:50.429Z\"}\n{\"id\":\"u\",\"type\":\"user\",\"content\":\"hi\"}\n",
            Some("gemini-cli-jsonl"),
        );
        check(
            r#"{"format":"openai-chat","messages":[]}"#,
            Some("claude-code-openai-chat"),
        );
        check(
            r#"{"messages":[],"meta":{"session_meta":{}}}"#,
            Some("codex-messages-meta"),
        );
        check(
            "{\"type\":\"summary\",\"summary\":\"t\",\"leafUuid\":\"u\"}\n{\"type\":\"user\",\"sessionId\":\"s\",\"uuid\":\"u\"}",
            Some("claude-code"),
        );
        check(
            r#"{"type":"system","subtype":"init","session_id":"s","tools":[]}"#,
            Some("claude-code"),
        );
        check(
            r#"{"timestamp":"2025-01-01T00:00:00Z","type":"session_meta","payload":{"id":"x"}}"#,
            Some("codex-rollout"),
        );
    }

    #[test]
    fn gemini_jsonl_is_known_by_its_header_on_the_first_line_only() {
        let header = r#"{"sessionId":"s","projectHash":"h","startTime":"2026-01-30T06:08:50.429Z","lastUpdated":"2026-01-30T06:08:50.429Z","kind":"main"}"#;
        let message = r#"{"id":"u","timestamp":"2026-01-30T06:08:51.000Z","type":"user","content":[{"text":"hi"}]}"#;
        // A header alone, with messages, after a byte-order mark and blank
        // lines, with control records.
        check(header, Some("gemini-cli-jsonl"));
        check(&format!("{header}\n{message}\n"), Some("gemini-cli-jsonl"));
        check(
            &format!("\u{feff}\n\n{header}\r\n{message}\r\n"),
            Some("gemini-cli-jsonl"),
        );
        check(
            &format!(
                "{header}\n{message}\n{{\"$rewindTo\":\"u\"}}\n{{\"$set\":{{\"summary\":\"x\"}}}}\n"
            ),
            Some("gemini-cli-jsonl"),
        );
        // The whole-document form on one line stays JSON.
        check(
            &format!("{{\"sessionId\":\"s\",\"projectHash\":\"h\",\"messages\":[{message}]}}"),
            Some("gemini-cli"),
        );
        // Not a header: a message first, a `type`, an `id`, a `sessionId`
        // that is not text, no `projectHash`.
        check(&format!("{message}\n{header}\n"), None);
        for line in [
            r#"{"sessionId":"s","projectHash":"h","type":"x"}"#,
            r#"{"sessionId":"s","projectHash":"h","id":"m"}"#,
            r#"{"sessionId":7,"projectHash":"h"}"#,
            r#"{"sessionId":"s","startTime":"2026-01-30T06:08:50.429Z"}"#,
        ] {
            check(&format!("{line}\n{message}\n"), None);
        }
        // Claude Code (even with a `projectHash`), pi and Codex lines keep
        // their formats.
        check(
            "{\"type\":\"user\",\"sessionId\":\"s\",\"uuid\":\"u\",\"projectHash\":\"h\"}\n",
            Some("claude-code"),
        );
        check(
            &format!("{{\"type\":\"session\",\"id\":\"a\"}}\n{header}\n"),
            Some("pi-v1"),
        );
        check(
            &format!(
                "{{\"timestamp\":\"2025-01-01T00:00:00Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"x\"}}}}\n{header}\n"
            ),
            Some("codex-rollout"),
        );
        // A long recording is streamed.
        let messages = format!("{message}\n").repeat(80);
        let long = format!("{header}\n{messages}");
        assert_eq!(
            head_of(&long).streamable(),
            Some(Detected::Foreign(Format::GeminiCliJsonl))
        );
    }

    #[test]
    fn rejects_garbage() {
        check("", None);
        check("not json at all", None);
        check("\u{0}\u{1}\u{2}", None);
        check("[1,2,3]", None);
        check(r#"{"hello":"world"}"#, None);
        check("{\"type\":\"message\"}\n{\"type\":\"message\"}", None);
    }

    fn truncated(input: &str, name: &str) -> Option<&'static str> {
        detect_truncated(input.as_bytes(), Path::new(name)).map(|found| {
            assert_eq!(found.ends_at, input.len() as u64);
            found.looks_like
        })
    }

    #[test]
    fn documents_cut_short_are_recognised_by_their_first_keys() {
        let swe = "{\"environment\":\"swe_main\",\"trajectory\":[{\"action\":\"ls\",\"obs";
        assert_eq!(detect_bytes(swe.as_bytes()), None);
        assert_eq!(truncated(swe, "a.json"), Some("a SWE-agent trajectory"));
        // Cut before any key: the extension says what it is.
        assert_eq!(
            truncated("{\n  \"envir", "run.traj"),
            Some("a SWE-agent trajectory")
        );
        assert_eq!(truncated("{\n  \"envir", "run.json"), None);
        assert_eq!(
            truncated("{\"instance_id\":\"x\",\"history\":[{", "o.jsonl"),
            Some("an OpenHands instance")
        );
        assert_eq!(
            truncated(
                "\u{feff}{\"sessionId\":\"s\",\"projectHash\":\"h\",\"messages\":[",
                "g.json"
            ),
            Some("a Gemini CLI chat recording")
        );
        assert_eq!(
            truncated(
                "{\"format\": \"openai-chat\", \"messages\": [{\"role",
                "e.json"
            ),
            Some("a Claude Code openai-chat export")
        );
        assert_eq!(
            truncated("{\"messages\":[],\"meta\":{\"session_meta\":{", "c.json"),
            Some("a Codex {messages, meta} transcript")
        );
        assert_eq!(
            truncated("{\"messages\":[{\"role\":\"developer\"", "c.json"),
            Some("a JSON transcript (a top-level messages list)")
        );
        // A Claude Code JSONL line cut short is not a Gemini recording.
        assert_eq!(
            truncated("{\"parentUuid\":null,\"sessionId\":\"s\",\"ty", "c.jsonl"),
            None
        );
    }

    #[test]
    fn complete_or_otherwise_broken_documents_are_not_truncated() {
        // Complete, an array, trailing garbage, a syntax error, too deep.
        assert_eq!(truncated(r#"{"history":[],"info":{}}"#, "a.traj"), None);
        assert_eq!(truncated("[{\"history\":[", "a.traj"), None);
        assert_eq!(truncated(r#"{"history":[]} x"#, "a.traj"), None);
        assert_eq!(truncated(r#"{"history":[}"#, "a.traj"), None);
        // Complete but deeper than the parser's limit: not cut short.
        let deep = format!(
            "{{\"history\":{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(detect_bytes(deep.as_bytes()), None);
        assert_eq!(truncated(&deep, "a.traj"), None);
        assert_eq!(truncated("", "a.traj"), None);
        assert_eq!(truncated("not json", "a.traj"), None);
    }

    #[test]
    fn first_session_line_wins_even_after_blank_lines() {
        check(
            "\n\n{\"type\":\"session\",\"schemaVersion\":2}\n",
            Some("soba"),
        );
        check("\u{feff}{\"type\":\"session\",\"id\":\"x\"}", Some("pi-v1"));
    }
}
