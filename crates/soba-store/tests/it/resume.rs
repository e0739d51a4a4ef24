//! Resume reads backwards and must agree with the full reader on the live
//! stretch, the leaf and the header, for any log and any block size, while
//! reading only the live tail.

use std::io::Write;
use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;
use soba_core::tokens::{ByteCounter, DEFAULT_IMAGE_TOKENS};
use soba_core::{Entry, EntryBody, IdKind, Message};
use soba_store::{DiagnosticKind, ResumeOptions, SessionWriter, read_log, resume, resume_with};

use crate::strategy;
use crate::support::{create, entries_of, options, writable};

#[derive(Debug, Clone)]
enum Op {
    Message(String),
    /// A capsule keeping from the n-th appended entry, or nothing.
    Capsule(Option<usize>),
    Rewind(usize),
    /// A `leaf` entry targeting the n-th appended entry as given, which may
    /// be a `leaf` entry (a hand-edited or imported log).
    RawLeaf(usize),
    Other(EntryBody),
    /// A corrupt line in the middle of the log.
    Junk(Vec<u8>),
    /// An entry of a type this version does not know.
    Unknown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => "[a-z ]{0,30}".prop_map(Op::Message),
        3 => proptest::option::of(any::<usize>()).prop_map(Op::Capsule),
        2 => any::<usize>().prop_map(Op::Rewind),
        2 => any::<usize>().prop_map(Op::RawLeaf),
        2 => strategy::body().prop_filter("writable", writable).prop_map(Op::Other),
        1 => vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..30).prop_map(Op::Junk),
        1 => Just(Op::Unknown),
    ]
}

fn append_raw(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .expect("raw bytes appended");
}

/// Builds a log from the operations; returns the ids appended.
fn build(path: &Path, ops: Vec<Op>, torn_tail: bool) -> Vec<Entry> {
    let mut writer = Some(create(path));
    let mut appended: Vec<Entry> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        let w = writer.as_mut().expect("open");
        match op {
            Op::Message(text) => {
                let entry = w
                    .append_message(Message::user(text), &ByteCounter, DEFAULT_IMAGE_TOKENS)
                    .expect("appends");
                appended.push(entry);
            }
            Op::Capsule(keep) => {
                let first_kept = keep
                    .filter(|_| !appended.is_empty())
                    .map(|n| appended[n % appended.len()].id.clone());
                let capsule = strategy::sample_capsule(first_kept);
                appended.push(
                    w.append(EntryBody::Capsule(Box::new(capsule)))
                        .expect("appends"),
                );
            }
            Op::Rewind(n) if !appended.is_empty() => {
                let target = appended[n % appended.len()].id.clone();
                appended.push(w.rewind(target).expect("rewinds"));
            }
            Op::Rewind(_) => {}
            Op::RawLeaf(n) if !appended.is_empty() => {
                let entry = Entry {
                    id: soba_core::EntryId::from_uuid(IdKind::Entry, 0xfeed_0000 + step as u128),
                    parent_id: w.leaf().cloned(),
                    timestamp: "t".to_owned(),
                    body: EntryBody::Leaf {
                        target: appended[n % appended.len()].id.clone(),
                    },
                };
                w.append_entry(&entry).expect("appends");
                appended.push(entry);
            }
            Op::RawLeaf(_) => {}
            Op::Other(body) => appended.push(w.append(body).expect("appends")),
            Op::Junk(mut bytes) => {
                drop(writer.take());
                bytes.push(b'\n');
                append_raw(path, &bytes);
                writer = Some(SessionWriter::open(path, options(step as i64)).expect("reopens"));
            }
            Op::Unknown => {
                let parent = w
                    .leaf()
                    .map_or("null".to_owned(), |leaf| format!("\"{leaf}\""));
                let id = soba_core::EntryId::from_uuid(IdKind::Entry, 0xabc0_0000 + step as u128);
                drop(writer.take());
                let line = format!(
                    "{{\"type\":\"x_note\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"note\":\"kept\"}}\n"
                );
                append_raw(path, line.as_bytes());
                writer = Some(SessionWriter::open(path, options(step as i64)).expect("reopens"));
            }
        }
    }
    drop(writer);
    if torn_tail {
        append_raw(path, b"{\"type\":\"message\",\"id\":");
    }
    appended
}

fn check_agreement(path: &Path, block_size: usize) -> Result<(), TestCaseError> {
    let log = read_log(path).expect("reads");
    let resumed = resume_with(path, ResumeOptions { block_size }).expect("resumes");
    prop_assert_eq!(resumed.header.as_ref(), log.header());
    prop_assert_eq!(resumed.leaf.as_ref(), log.leaf());
    // The writer continues from the same position (SPEC §3.1).
    let writer = SessionWriter::open(path, options(50)).expect("opens");
    prop_assert_eq!(writer.leaf(), log.leaf());
    drop(writer);
    let full: Vec<_> = log.live_stretch().into_iter().cloned().collect();
    prop_assert_eq!(entries_of(&resumed.stretch), entries_of(&full));
    for (resumed, full) in resumed.stretch.iter().zip(&full) {
        prop_assert_eq!(resumed.location.offset, full.location.offset);
        prop_assert_eq!(&resumed.raw, &full.raw);
    }
    prop_assert_eq!(
        resumed.latest_capsule().map(|l| &l.entry),
        full.iter()
            .rev()
            .find(|l| matches!(l.entry.body, EntryBody::Capsule(_)))
            .map(|l| &l.entry)
    );
    if !resumed.full_scan {
        // Resume reports damage only on the lines it parsed, by offset, and
        // the full reader reports the same damage there.
        for diagnostic in &resumed.diagnostics {
            let matched = log.diagnostics().iter().any(|d| {
                d.location.offset == diagnostic.location.offset && d.kind == diagnostic.kind
            });
            prop_assert!(matched, "{} not in {:?}", diagnostic, log.diagnostics());
        }
    }
    Ok(())
}

proptest! {

    /// SPEC §3.3: resume equals the full reader on the stretch it covers.
    #[test]
    fn resume_agrees_with_the_full_reader(
        ops in vec(op(), 0..30),
        torn_tail in any::<bool>(),
        block_size in prop_oneof![1usize..64, Just(4096), Just(soba_store::resume::BLOCK_SIZE)],
    ) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("s1.jsonl");
        build(&path, ops, torn_tail);
        check_agreement(&path, block_size)?;
    }
}

#[test]
fn resume_reads_only_the_live_tail() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let big = "h".repeat(10_000);
    let mut last = None;
    for _ in 0..400 {
        last = Some(
            writer
                .append_message(
                    Message::user(big.clone()),
                    &ByteCounter,
                    DEFAULT_IMAGE_TOKENS,
                )
                .expect("appends"),
        );
    }
    let kept = writer
        .append_message(Message::user("keep me"), &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    let capsule = strategy::sample_capsule(Some(kept.id.clone()));
    let capsule = writer
        .append(EntryBody::Capsule(Box::new(capsule)))
        .expect("appends");
    let tail = writer
        .append_message(
            Message::assistant("after"),
            &ByteCounter,
            DEFAULT_IMAGE_TOKENS,
        )
        .expect("appends");
    drop(writer);
    let len = std::fs::metadata(&path).expect("exists").len();
    assert!(len > 4_000_000, "{len}");

    let resumed = resume(&path).expect("resumes");
    assert!(!resumed.full_scan);
    assert!(resumed.diagnostics.is_empty(), "{:?}", resumed.diagnostics);
    assert_eq!(
        entries_of(&resumed.stretch),
        vec![kept, capsule.clone(), tail]
    );
    assert_eq!(resumed.latest_capsule().map(|l| &l.entry), Some(&capsule));
    let header_len = std::fs::read(&path)
        .expect("readable")
        .iter()
        .position(|b| *b == b'\n')
        .expect("a header") as u64;
    assert!(
        resumed.bytes_read <= header_len + 1 + soba_store::resume::BLOCK_SIZE as u64,
        "read {} of {len} bytes",
        resumed.bytes_read
    );

    // A rewind before the capsule takes it off the path: resume reads back to the root.
    let mut writer = SessionWriter::open(&path, options(1)).expect("reopens");
    writer.rewind(last.expect("appended").id).expect("rewinds");
    drop(writer);
    let resumed = resume(&path).expect("resumes");
    assert_eq!(resumed.stretch.len(), 400);
    assert!(resumed.bytes_read >= len);
    check_agreement(&path, soba_store::resume::BLOCK_SIZE).expect("agrees");
}

#[test]
fn a_missing_parent_falls_back_to_a_full_scan() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    drop(writer);
    let orphan = "{\"type\":\"model_change\",\"id\":\"e_00000000000000000000000000000002\",\"parentId\":\"e_00000000000000000000000000000009\",\"timestamp\":\"t\",\"model\":\"b\"}\n";
    append_raw(&path, orphan.as_bytes());
    let resumed = resume(&path).expect("resumes");
    assert!(resumed.full_scan);
    assert_eq!(resumed.stretch.len(), 1);
    assert!(matches!(
        resumed.diagnostics.last().map(|d| &d.kind),
        Some(DiagnosticKind::DanglingParent { .. })
    ));
    assert!(
        resumed
            .diagnostics
            .iter()
            .all(|d| d.location.line.is_some())
    );
    check_agreement(&path, 7).expect("agrees");
}

/// A hand-edited `leaf` entry targeting a `leaf` entry: opened as the
/// engine opens a session (the writer, then resume), the position falls
/// back to where the chain leads, resume reads only the live tail, and the
/// next append continues the history (SPEC §3.1).
#[test]
fn a_leaf_entry_targeting_a_leaf_entry_keeps_the_history() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let big = "h".repeat(10_000);
    for _ in 0..400 {
        writer
            .append_message(
                Message::user(big.clone()),
                &ByteCounter,
                DEFAULT_IMAGE_TOKENS,
            )
            .expect("appends");
    }
    let kept = writer
        .append_message(Message::user("keep me"), &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    let capsule = writer
        .append(EntryBody::Capsule(Box::new(strategy::sample_capsule(
            Some(kept.id.clone()),
        ))))
        .expect("appends");
    let answer = writer
        .append_message(Message::assistant("a1"), &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    writer
        .append_message(
            Message::user("abandoned"),
            &ByteCounter,
            DEFAULT_IMAGE_TOKENS,
        )
        .expect("appends");
    let rewind = writer.rewind(answer.id.clone()).expect("rewinds");
    // The damage: a second `leaf` entry targeting the first, as given.
    let damage = Entry {
        id: soba_core::EntryId::from_uuid(IdKind::Entry, 0xdead_0001),
        parent_id: writer.leaf().cloned(),
        timestamp: "2025-01-01T01:00:00Z".to_owned(),
        body: EntryBody::Leaf {
            target: rewind.id.clone(),
        },
    };
    writer.append_entry(&damage).expect("appends");
    assert_eq!(writer.leaf(), Some(&answer.id), "in process");
    drop(writer);
    let len = std::fs::metadata(&path).expect("exists").len();
    check_agreement(&path, 4096).expect("agrees");

    // SessionCore::open: the writer (the lock) first, then resume.
    let mut writer = SessionWriter::open(&path, options(1)).expect("reopens");
    let resumed = resume(&path).expect("resumes");
    assert_eq!(writer.leaf(), Some(&answer.id));
    assert_eq!(resumed.leaf.as_ref(), Some(&answer.id));
    assert!(!resumed.full_scan);
    assert!(
        resumed.bytes_read < 2 * soba_store::resume::BLOCK_SIZE as u64,
        "read {} of {len} bytes",
        resumed.bytes_read
    );
    assert_eq!(
        entries_of(&resumed.stretch),
        vec![kept.clone(), capsule.clone(), answer.clone()]
    );
    assert_eq!(resumed.latest_capsule().map(|l| &l.entry), Some(&capsule));
    let [diagnostic] = resumed.diagnostics.as_slice() else {
        panic!("{:?}", resumed.diagnostics)
    };
    assert_eq!(
        diagnostic.kind,
        DiagnosticKind::LeafTargetsLeaf {
            id: damage.id.clone(),
            target: rewind.id.clone(),
            falls_back_to: Some(answer.id.clone()),
        }
    );
    assert!(
        diagnostic
            .to_string()
            .contains(&format!("the current position falls back to {}", answer.id)),
        "{diagnostic}"
    );

    let next = writer
        .append_message(Message::user("go on"), &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    assert_eq!(next.parent_id.as_ref(), Some(&answer.id));
    drop(writer);
    let log = read_log(&path).expect("reads");
    assert!(log.is_clean(), "{:?}", log.diagnostics());
    assert_eq!(
        entries_of(log.live_stretch()),
        vec![kept, capsule, answer, next]
    );
    assert_eq!(log.path().len(), 404);
    check_agreement(&path, 4096).expect("agrees");
}

/// A chain of `leaf` entries that loops keeps today's position (the first
/// target, an empty path): resume reads the whole file to say so, and the
/// diagnostic says what to do.
#[test]
fn a_looping_chain_of_leaf_entries_leaves_the_path_empty_and_says_what_to_do() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let first = writer
        .append_message(Message::user("x"), &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    let a = soba_core::EntryId::from_uuid(IdKind::Entry, 0xdead_000a);
    let b = soba_core::EntryId::from_uuid(IdKind::Entry, 0xdead_000b);
    for (id, target) in [(&a, &b), (&b, &a)] {
        let entry = Entry {
            id: id.clone(),
            parent_id: Some(first.id.clone()),
            timestamp: "t".to_owned(),
            body: EntryBody::Leaf {
                target: target.clone(),
            },
        };
        writer.append_entry(&entry).expect("appends");
    }
    assert_eq!(writer.leaf(), Some(&a));
    drop(writer);
    let writer = SessionWriter::open(&path, options(1)).expect("reopens");
    assert_eq!(writer.leaf(), Some(&a));
    drop(writer);
    let resumed = resume(&path).expect("resumes");
    assert!(resumed.full_scan);
    assert_eq!(resumed.leaf.as_ref(), Some(&a));
    assert!(resumed.stretch.is_empty());
    let [diagnostic] = resumed.diagnostics.as_slice() else {
        panic!("{:?}", resumed.diagnostics)
    };
    assert_eq!(
        diagnostic.kind,
        DiagnosticKind::LeafTargetsLeaf {
            id: b.clone(),
            target: a.clone(),
            falls_back_to: None,
        }
    );
    assert!(
        diagnostic.to_string().ends_with(
            "list the entries with soba show --entries, then /rewind <id> to one of them"
        ),
        "{diagnostic}"
    );
    check_agreement(&path, 3).expect("agrees");
}

/// Issue 36 (first hour) item 2: what lies above a live stretch that
/// starts mid-turn is read back to the turn's start, and no further.
#[test]
fn ancestors_read_back_to_the_first_entry_asked_for() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let mut append = |message: Message| {
        writer
            .append_message(message, &ByteCounter, DEFAULT_IMAGE_TOKENS)
            .expect("appends")
    };
    let old = append(Message::user("an older turn"));
    append(Message::assistant("its answer"));
    let asked = append(Message::user("the newest turn"));
    let step = append(Message::assistant("a step"));
    let kept = append(Message::assistant("the step the capsule keeps from"));
    drop(writer);
    let is_user = |entry: &Entry| matches!(&entry.body, EntryBody::Message(stored) if stored.message.is_real_user());
    let parent = kept.parent_id.clone().expect("a parent");
    let found = soba_store::resume::ancestors(&path, &parent, u64::MAX, is_user).expect("reads");
    assert_eq!(found, vec![asked.clone(), step.clone()]);
    // Nothing to stop at: up to the root.
    let all = soba_store::resume::ancestors(&path, &parent, u64::MAX, |_| false).expect("reads");
    assert_eq!(all.first(), Some(&old));
    assert_eq!(all.last(), Some(&step));
    // A bound on the bytes read ends it early, with what was found.
    let bounded = soba_store::resume::ancestors(&path, &parent, 0, is_user).expect("reads");
    assert!(bounded.len() < 2, "{bounded:?}");
}
