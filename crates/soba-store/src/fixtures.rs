//! Fixtures shared by the benchmarks and tests of the crates that read
//! session logs (feature `testing`): deterministic logs of a given size.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use soba_core::capsule::{LocalSections, Narrative};
use soba_core::entry::StoredTokens;
use soba_core::{
    Capsule, CapsuleState, Encoding, Entry, EntryBody, EntryId, IdKind, Message, MessageEntry,
    Quality, TokenCount, Trigger,
};

use crate::session::{SessionHeader, SessionId};
use crate::wire::{encode_entry, encode_header};

/// The header of every fixture log (session id `bench`).
pub fn header() -> SessionHeader {
    SessionHeader {
        id: SessionId::parse("bench").expect("a valid id"),
        created_at: "2025-01-01T00:00:00Z".to_owned(),
        cwd: "/work/project".to_owned(),
        os: "linux".to_owned(),
        memory: Vec::new(),
        imported_from: None,
    }
}

/// A user message of `n_bytes` of text, with its stored token count.
pub fn message_body(n_bytes: usize) -> EntryBody {
    let text: String = "lorem ipsum dolor sit amet "
        .chars()
        .cycle()
        .take(n_bytes)
        .collect();
    EntryBody::Message(MessageEntry {
        message: Message::user(text),
        tokens: Some(StoredTokens {
            encoding: Encoding::O200kBase,
            n: TokenCount::new(n_bytes as u64 / 4 + 4),
            estimated: false,
        }),
    })
}

/// Writes a linear log of about `target_bytes`: 50 segments of messages
/// each closed by a capsule keeping its last 4 messages, then the same live
/// tail of 40 messages whatever the size (SPEC §16's resume target).
pub fn write_linear_log(path: &Path, target_bytes: usize) -> io::Result<()> {
    const N_CAPSULES: usize = 50;
    const MESSAGE_BYTES: usize = 2_000;
    const TAIL_MESSAGES: usize = 40;
    const KEPT: usize = 4;
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let encoded = |result: Result<String, crate::StoreError>| {
        result.map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))
    };
    writeln!(out, "{}", encoded(encode_header(&header()))?)?;
    let mut n = 0u128;
    let mut parent: Option<EntryId> = None;
    let mut push =
        |out: &mut BufWriter<File>, kind: IdKind, body: EntryBody| -> io::Result<EntryId> {
            n += 1;
            let id = EntryId::from_uuid(kind, 0x0194_1f29_7c00_7000_8000_0000_0000_0000 + n);
            let entry = Entry {
                id: id.clone(),
                parent_id: parent.replace(id.clone()),
                timestamp: "2025-01-01T00:00:00Z".to_owned(),
                body,
            };
            writeln!(out, "{}", encoded(encode_entry(&entry))?)?;
            Ok(id)
        };
    let tail_bytes = (TAIL_MESSAGES + KEPT) * MESSAGE_BYTES;
    let per_segment = (target_bytes.saturating_sub(tail_bytes)
        / (N_CAPSULES * (MESSAGE_BYTES + 300)))
        .max(KEPT + 1);
    let message = message_body(MESSAGE_BYTES);
    let mut previous_capsule = None;
    for _ in 0..N_CAPSULES {
        let ids = (0..per_segment)
            .map(|_| push(&mut out, IdKind::Entry, message.clone()))
            .collect::<io::Result<Vec<EntryId>>>()?;
        let capsule = Capsule {
            trigger: Trigger::AutoThreshold,
            quality: Quality::Full,
            first_kept_entry_id: Some(ids[ids.len() - KEPT].clone()),
            boundary_truncation: None,
            tokens_before: TokenCount::new(80_000),
            tokens_after: TokenCount::new(20_000),
            summarizer: "deterministic".to_owned(),
            previous_capsule_id: previous_capsule.clone(),
            state: CapsuleState {
                model: "openai/gpt-5".to_owned(),
                ..CapsuleState::default()
            },
            instructions: None,
            native: None,
            overflow: None,
            imported: None,
            scope: None,
            narrative: Narrative {
                goal: "keep going".to_owned(),
                ..Narrative::default()
            },
            earlier_narrative: None,
            rehydrated: Default::default(),
            local: LocalSections::default(),
            markdown: "## Goal\nkeep going\n".repeat(50),
        };
        previous_capsule = Some(push(
            &mut out,
            IdKind::Capsule,
            EntryBody::Capsule(Box::new(capsule)),
        )?);
    }
    for _ in 0..TAIL_MESSAGES {
        push(&mut out, IdKind::Entry, message.clone())?;
    }
    out.flush()
}

/// A deterministic source of varied text: code-like lines and prose drawn
/// from a small vocabulary by a xorshift generator, so a tokenizer meets
/// many distinct pieces (one repeated phrase would be answered from a
/// piece cache and flatter every count).
pub struct TextSource {
    state: u64,
}

impl TextSource {
    const WORDS: [&'static str; 48] = [
        "parser", "token", "session", "compact", "buffer", "render", "state", "config", "error",
        "result", "value", "index", "window", "budget", "capsule", "entry", "reader", "writer",
        "stream", "chunk", "model", "input", "output", "limit", "the", "a", "of", "to", "and",
        "when", "returns", "fn", "let", "mut", "match", "Some", "None", "Ok", "Err", "self", "if",
        "else", "for", "in", "while", "struct", "impl", "pub",
    ];

    /// A source seeded with `seed` (0 is replaced: xorshift needs a bit).
    pub fn new(seed: u64) -> Self {
        TextSource { state: seed.max(1) }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }

    /// About `n_bytes` of text in lines of 4–15 words, some with numbers
    /// and punctuation.
    pub fn text(&mut self, n_bytes: usize) -> String {
        let mut out = String::with_capacity(n_bytes + 64);
        while out.len() < n_bytes {
            let words = 4 + self.next() % 12;
            for k in 0..words {
                if k > 0 {
                    out.push(' ');
                }
                let pick = self.next();
                out.push_str(Self::WORDS[(pick % Self::WORDS.len() as u64) as usize]);
                match (pick >> 8) % 9 {
                    0 => out.push_str(&format!("_{}", (pick >> 16) % 1000)),
                    1 => out.push_str("();"),
                    2 => out.push(','),
                    _ => {}
                }
            }
            out.push('\n');
        }
        out
    }
}

/// How big each turn of a generated foreign session is: a user request,
/// an assistant reply that reads a file, the file's text as the tool
/// result, and a closing assistant answer.
const TURN_RESULT_BYTES: usize = 6_000;

/// Writes a pi (v1, linear) session of about `target_bytes` at `path`,
/// for import benchmarks: turns of a request, a `read` tool call, its
/// result and an answer, each assistant message with usage. Returns the
/// number of turns.
pub fn write_pi_session(path: &Path, target_bytes: u64) -> io::Result<u64> {
    write_pi_session_shaped(
        path,
        target_bytes,
        &PiShape {
            result_bytes: TURN_RESULT_BYTES,
            seed: 0,
        },
    )
}

/// How [`write_pi_session_shaped`] varies a pi session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiShape {
    /// The bytes of each turn's tool result (6,000 in [`write_pi_session`]):
    /// larger results mean fewer requests per megabyte.
    pub result_bytes: usize,
    /// Varies the text and the session id (0 in [`write_pi_session`]).
    pub seed: u64,
}

/// Writes a pi session as [`write_pi_session`] does, with each turn's
/// result size and the text chosen by `shape`. Returns the number of
/// turns.
pub fn write_pi_session_shaped(path: &Path, target_bytes: u64, shape: &PiShape) -> io::Result<u64> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut text = TextSource::new(0x5eed_0001 ^ shape.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let id = match shape.seed {
        0 => "bench-pi".to_owned(),
        seed => format!("bench-pi-{seed}"),
    };
    let header = serde_json::json!({
        "type": "session", "id": id, "timestamp": "2025-11-20T23:33:50.805Z",
        "cwd": "/work/project", "provider": "anthropic", "modelId": "claude-sonnet-4-5",
        "thinkingLevel": "off",
    });
    let mut written = json_line(&mut out, &header)?;
    let mut turns = 0u64;
    let usage = |k: u64| {
        serde_json::json!({"input": 3, "output": 120, "cacheRead": 1_000 + k * 1_700,
            "cacheWrite": 1_700, "cost": {"input": 0, "output": 0, "cacheRead": 0,
            "cacheWrite": 0, "total": 0}})
    };
    while written < target_bytes {
        let ms = 1_763_681_630_791 + turns * 4_000;
        let stamp = format_ms(ms);
        let call = format!("toolu_bench{turns:08}");
        let lines = [
            serde_json::json!({"type": "message", "timestamp": stamp, "message": {
                "role": "user", "content": [{"type": "text", "text": text.text(200)}],
                "timestamp": ms}}),
            serde_json::json!({"type": "message", "timestamp": stamp, "message": {
                "role": "assistant", "content": [
                    {"type": "text", "text": text.text(150)},
                    {"type": "toolCall", "id": call, "name": "read",
                     "arguments": {"path": format!("src/module_{}.rs", turns % 400)}}],
                "api": "anthropic-messages", "provider": "anthropic",
                "model": "claude-sonnet-4-5", "usage": usage(2 * turns),
                "stopReason": "toolUse", "timestamp": ms + 1}}),
            serde_json::json!({"type": "message", "timestamp": stamp, "message": {
                "role": "toolResult", "toolCallId": call, "toolName": "read",
                "content": [{"type": "text", "text": text.text(shape.result_bytes)}],
                "isError": false, "timestamp": ms + 2}}),
            serde_json::json!({"type": "message", "timestamp": stamp, "message": {
                "role": "assistant", "content": [{"type": "text", "text": text.text(400)}],
                "api": "anthropic-messages", "provider": "anthropic",
                "model": "claude-sonnet-4-5", "usage": usage(2 * turns + 1),
                "stopReason": "stop", "timestamp": ms + 3}}),
        ];
        for line in &lines {
            written += json_line(&mut out, line)?;
        }
        turns += 1;
    }
    out.flush()?;
    Ok(turns)
}

/// Writes a Claude Code (native JSONL) session of about `target_bytes` at
/// `path`, for import benchmarks: the same turns as
/// [`write_pi_session`], chained by `parentUuid`, the file read with
/// `Read`. Returns the number of turns.
pub fn write_claude_code_session(path: &Path, target_bytes: u64) -> io::Result<u64> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut text = TextSource::new(0x5eed_0002);
    let mut written = 0u64;
    let mut turns = 0u64;
    let mut n = 0u64;
    let mut parent: Option<String> = None;
    let mut line = |out: &mut BufWriter<File>,
                    kind: &str,
                    message: serde_json::Value,
                    ms: u64|
     -> io::Result<u64> {
        n += 1;
        let uuid = format!("00000000-0000-4000-8000-{n:012}");
        let value = serde_json::json!({
            "type": kind, "uuid": uuid, "parentUuid": parent.replace(uuid.clone()),
            "sessionId": "bench-claude-code", "cwd": "/work/project", "version": "2.0.0",
            "timestamp": format_ms(ms), "message": message,
        });
        json_line(out, &value)
    };
    while written < target_bytes {
        let ms = 1_763_681_630_791 + turns * 4_000;
        let call = format!("toolu_bench{turns:08}");
        let usage = serde_json::json!({"input_tokens": 3, "output_tokens": 120,
            "cache_read_input_tokens": 1_000 + turns * 3_400,
            "cache_creation_input_tokens": 1_700});
        written += line(
            &mut out,
            "user",
            serde_json::json!({"role": "user", "content": text.text(200)}),
            ms,
        )?;
        written += line(
            &mut out,
            "assistant",
            serde_json::json!({"id": format!("msg_a{turns}"), "type": "message",
                "role": "assistant", "model": "claude-sonnet-4-5", "content": [
                    {"type": "text", "text": text.text(150)},
                    {"type": "tool_use", "id": call, "name": "Read",
                     "input": {"file_path": format!("/work/project/src/module_{}.rs", turns % 400)}}],
                "stop_reason": "tool_use", "usage": usage}),
            ms + 1,
        )?;
        written += line(
            &mut out,
            "user",
            serde_json::json!({"role": "user", "content": [{"type": "tool_result",
                "tool_use_id": call, "content": text.text(TURN_RESULT_BYTES)}]}),
            ms + 2,
        )?;
        written += line(
            &mut out,
            "assistant",
            serde_json::json!({"id": format!("msg_b{turns}"), "type": "message",
                "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": text.text(400)}],
                "stop_reason": "end_turn", "usage": usage}),
            ms + 3,
        )?;
        turns += 1;
    }
    out.flush()?;
    Ok(turns)
}

/// Writes `value` as one line; returns the bytes written.
fn json_line(out: &mut impl Write, value: &serde_json::Value) -> io::Result<u64> {
    let text = serde_json::to_string(value)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
    writeln!(out, "{text}")?;
    Ok(text.len() as u64 + 1)
}

/// Milliseconds since the epoch as an RFC 3339 UTC timestamp.
fn format_ms(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .map(|stamp| stamp.to_string())
        .unwrap_or_else(|_| "2025-01-01T00:00:00Z".to_owned())
}
