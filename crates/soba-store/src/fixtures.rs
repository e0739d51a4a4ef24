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

use crate::log::{SessionHeader, SessionId};
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
            narrative: Narrative {
                goal: "keep going".to_owned(),
                ..Narrative::default()
            },
            earlier_narrative: None,
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
