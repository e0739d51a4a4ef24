//! The writer: appends, leaf tracking, token counts, the lock, torn tails,
//! prefix preservation, truncation at any byte, a kill at any moment, and
//! session discovery.

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use soba_core::tokens::{ByteCounter, DEFAULT_IMAGE_TOKENS};
use soba_core::{
    Block, CheckpointKind, Encoding, EntryBody, EntryId, Image, ImageSource, Message, Role,
    TokenCount,
};
use soba_store::{
    DiagnosticKind, Durability, SessionLog, SessionWriter, StoreError, SystemMinter, WriterOptions,
    find_session, list_sessions, read_log, resume, session_path,
};

use crate::strategy;
use crate::support::{create, entries_of, header, line_ends, options, writable};

#[test]
fn appends_chain_parents_and_track_the_leaf() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    assert_eq!(writer.leaf(), None);
    let first = writer
        .append(EntryBody::ModelChange {
            model: "openai/gpt-5".into(),
        })
        .expect("appends");
    assert_eq!(first.parent_id, None);
    assert_eq!(first.timestamp, "2025-01-01T00:00:00Z");
    assert!(first.id.as_str().starts_with("e_"));
    let second = writer
        .append(EntryBody::Checkpoint {
            kind: CheckpointKind::Milestone,
            note: "m".into(),
        })
        .expect("appends");
    assert_eq!(second.parent_id.as_ref(), Some(&first.id));
    let rewind = writer.rewind(first.id.clone()).expect("rewinds");
    assert_eq!(rewind.parent_id.as_ref(), Some(&second.id));
    assert_eq!(writer.leaf(), Some(&first.id));
    let branch = writer
        .append(EntryBody::ConfigChange {
            auto_compact: Some(true),
            approvals: None,
        })
        .expect("appends");
    assert_eq!(branch.parent_id.as_ref(), Some(&first.id));
    drop(writer);

    let log = read_log(&path).expect("reads");
    assert!(log.is_clean(), "{:?}", log.diagnostics());
    assert_eq!(log.header(), Some(&header("s1")));
    assert_eq!(
        entries_of(log.entries()),
        vec![first.clone(), second.clone(), rewind, branch.clone()]
    );
    assert_eq!(log.leaf(), Some(&branch.id));
    assert_eq!(entries_of(log.path()), vec![first.clone(), branch]);
    // The abandoned branch stays in the file.
    assert!(log.entry(&second.id).is_some());

    let mut reopened = SessionWriter::open(&path, options(1)).expect("reopens");
    assert_eq!(reopened.session_id().as_str(), "s1");
    assert_eq!(reopened.leaf(), log.leaf());
    let next = reopened
        .append(EntryBody::ModelChange { model: "m".into() })
        .expect("appends");
    assert_eq!(next.parent_id.as_ref(), log.leaf());
}

#[test]
fn capsules_get_ck_ids_and_messages_store_their_count() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut writer = create(&dir.path().join("s1.jsonl"));
    let message = Message::new(
        Role::User,
        vec![
            Block::Text("hello world!".into()),
            Block::Image(Image {
                media_type: "image/png".into(),
                source: ImageSource::Data("iVBORw0KGgo=".into()),
            }),
        ],
    );
    let entry = writer
        .append_message(message, &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    let EntryBody::Message(stored) = &entry.body else {
        panic!("a message entry")
    };
    let tokens = stored.tokens.expect("a stored count");
    // 12 bytes → 3 tokens, + 1,100 for the image, + 4 of message overhead.
    assert_eq!(tokens.n, TokenCount::new(1_107));
    assert_eq!(tokens.encoding, Encoding::O200kBase);
    assert!(!tokens.estimated);

    let capsule = strategy::sample_capsule(Some(entry.id.clone()));
    let appended = writer
        .append(EntryBody::Capsule(Box::new(capsule)))
        .expect("appends");
    assert!(appended.id.as_str().starts_with("ck_"), "{}", appended.id);
}

#[test]
fn unknown_bodies_are_never_written() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let before = std::fs::read(&path).expect("readable");
    let err = writer
        .append(EntryBody::Unknown {
            type_name: "bookmark".into(),
        })
        .expect_err("refused");
    assert!(matches!(err, StoreError::Encode { .. }), "{err}");
    assert_eq!(std::fs::read(&path).expect("readable"), before);
}

#[test]
fn a_second_writer_gets_a_clear_error_and_readers_need_no_lock() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let entry = writer
        .append(EntryBody::ModelChange { model: "m".into() })
        .expect("appends");

    let err = SessionWriter::open(&path, options(1)).expect_err("locked");
    assert!(
        matches!(&err, StoreError::Locked { session, .. } if session == "s1"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("session s1 is already open for writing by another process"),
        "{message}"
    );
    assert!(message.contains("s1.jsonl"), "{message}");
    // The holder is named: this process took the lock.
    #[cfg(target_os = "linux")]
    assert!(
        message.starts_with(&format!(
            "session s1 is already open for writing by another process (pid {}, ",
            std::process::id()
        )),
        "{message}"
    );

    let log = read_log(&path).expect("reads while locked");
    assert_eq!(log.leaf(), Some(&entry.id));
    let resumed = resume(&path).expect("resumes while locked");
    assert_eq!(resumed.leaf, Some(entry.id.clone()));

    drop(writer);
    let reopened = SessionWriter::open(&path, options(1)).expect("the lock went with the writer");
    assert_eq!(reopened.leaf(), Some(&entry.id));
}

#[test]
fn create_refuses_an_existing_file_and_open_refuses_non_sessions() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    drop(create(&path));
    let err = SessionWriter::create(&path, &header("s1"), options(0)).expect_err("exists");
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");

    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").expect("written");
    let err = SessionWriter::open(&empty, options(0)).expect_err("not a session");
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a soba session (the file is empty); import it with `soba import` instead",
            empty.display()
        )
    );
    let pi = dir.path().join("pi.jsonl");
    std::fs::write(&pi, "{\"type\":\"session\",\"id\":\"p\",\"cwd\":\"/\"}\n").expect("written");
    assert!(matches!(
        SessionWriter::open(&pi, options(0)),
        Err(StoreError::NotASession { .. })
    ));
}

#[test]
fn a_torn_tail_is_ended_before_the_next_append() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let kept = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    drop(writer);
    let torn = br#"{"type":"model_change","id":"e_0194"#;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(torn))
        .expect("torn line written");
    let before = std::fs::read(&path).expect("readable");

    let log = read_log(&path).expect("reads");
    assert_eq!(entries_of(log.entries()), vec![kept.clone()]);
    assert_eq!(log.diagnostics().len(), 1);
    assert_eq!(
        log.diagnostics()[0].to_string(),
        format!(
            "line 3 (byte {}): torn last line ({} bytes, no newline) ignored; the next append ends it",
            before.len() - torn.len(),
            torn.len()
        )
    );

    let mut writer = SessionWriter::open(&path, options(1)).expect("reopens");
    assert_eq!(writer.leaf(), Some(&kept.id));
    let next = writer
        .append(EntryBody::ModelChange { model: "b".into() })
        .expect("appends");
    let after = std::fs::read(&path).expect("readable");
    assert!(after.starts_with(&before));
    assert_eq!(after[before.len()], b'\n');

    let log = read_log(&path).expect("reads");
    assert_eq!(entries_of(log.entries()), vec![kept.clone(), next.clone()]);
    assert_eq!(next.parent_id, Some(kept.id));
    // The torn line is now a corrupt middle line, skipped with its number.
    assert_eq!(log.diagnostics().len(), 1);
    assert_eq!(log.diagnostics()[0].location.line, Some(3));
    assert!(matches!(
        log.diagnostics()[0].kind,
        DiagnosticKind::InvalidJson { .. }
    ));
}

#[test]
fn system_minter_writes_v7_ids_and_utc_times() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let options = WriterOptions {
        durability: Durability::Fsync,
        minter: Box::new(SystemMinter),
    };
    let mut writer = SessionWriter::create(&path, &header("s1"), options).expect("creates");
    let entry = writer
        .append(EntryBody::ModelChange { model: "m".into() })
        .expect("appends");
    let uuid = uuid_of(&entry.id);
    assert_eq!(uuid.get_version_num(), 7);
    assert!(entry.timestamp.ends_with('Z'));
}

fn uuid_of(id: &EntryId) -> uuid::Uuid {
    uuid::Uuid::parse_str(id.hex()).expect("hex of a uuid")
}

/// One step of a property-test session.
#[derive(Debug, Clone)]
enum Op {
    Append(EntryBody),
    /// Rewind to the n-th appended entry (modulo their number).
    Rewind(usize),
    /// Append, as given, a `leaf` entry targeting the n-th appended entry
    /// (a hand-edited or imported log may target a `leaf` entry).
    RawLeaf(usize),
    /// Drop the writer and open it again.
    Reopen,
    /// Simulate a crash mid-append: write part of a line, then reopen.
    Tear(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => strategy::body().prop_filter("writable", writable).prop_map(Op::Append),
        1 => any::<usize>().prop_map(Op::Rewind),
        1 => any::<usize>().prop_map(Op::RawLeaf),
        1 => Just(Op::Reopen),
        1 => vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 1..40).prop_map(Op::Tear),
    ]
}

/// The current leaf after `entries` (SPEC §3.1): the last entry's id, or
/// for a `leaf` entry its target, followed through targets that are
/// themselves `leaf` entries to the first entry that is not one; a chain
/// that loops or reaches a missing entry leaves it on the first target.
/// With repeated ids, the last entry of an id is the one looked up.
fn expected_leaf(entries: &[soba_core::Entry]) -> Option<EntryId> {
    let last = entries.last()?;
    let EntryBody::Leaf { target } = &last.body else {
        return Some(last.id.clone());
    };
    let by_id: std::collections::HashMap<&EntryId, &soba_core::Entry> =
        entries.iter().map(|entry| (&entry.id, entry)).collect();
    let mut cursor = target;
    for _ in 0..=entries.len() {
        match by_id.get(cursor).map(|entry| &entry.body) {
            Some(EntryBody::Leaf { target }) => cursor = target,
            Some(_) => return Some(cursor.clone()),
            None => break,
        }
    }
    Some(target.clone())
}

proptest! {

    /// SPEC §3.2 and §17: no operation changes the bytes before it, and
    /// every acknowledged entry reads back.
    #[test]
    fn appends_never_change_the_bytes_before_them(ops in vec(op(), 1..24)) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("s1.jsonl");
        let mut writer = Some(create(&path));
        let mut acknowledged = Vec::new();
        // Where in `acknowledged` the rewinds are.
        let mut rewinds = Vec::new();
        let mut before = std::fs::read(&path).expect("readable");
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Append(body) => {
                    let entry = writer.as_mut().expect("open").append(body).expect("appends");
                    acknowledged.push(entry);
                }
                Op::Rewind(n) if !acknowledged.is_empty() => {
                    let target = acknowledged[n % acknowledged.len()].id.clone();
                    let entry = writer.as_mut().expect("open").rewind(target).expect("rewinds");
                    rewinds.push(acknowledged.len());
                    acknowledged.push(entry);
                }
                Op::Rewind(_) => {}
                Op::RawLeaf(n) if !acknowledged.is_empty() => {
                    let w = writer.as_mut().expect("open");
                    let entry = soba_core::Entry {
                        id: EntryId::from_uuid(soba_core::IdKind::Entry, 0xfeed_0000 + step as u128),
                        parent_id: w.leaf().cloned(),
                        timestamp: "2025-01-01T00:00:00Z".to_owned(),
                        body: EntryBody::Leaf { target: acknowledged[n % acknowledged.len()].id.clone() },
                    };
                    w.append_entry(&entry).expect("appends");
                    acknowledged.push(entry);
                }
                Op::RawLeaf(_) => {}
                Op::Reopen => {
                    drop(writer.take());
                    writer = Some(SessionWriter::open(&path, options(step as i64)).expect("reopens"));
                }
                Op::Tear(bytes) => {
                    drop(writer.take());
                    std::fs::OpenOptions::new().append(true).open(&path)
                        .and_then(|mut file| file.write_all(&bytes)).expect("torn bytes written");
                    writer = Some(SessionWriter::open(&path, options(step as i64)).expect("reopens"));
                }
            }
            let after = std::fs::read(&path).expect("readable");
            prop_assert!(after.starts_with(&before), "step {} changed the prefix", step);
            before = after;
            // The writer settles the position as the full reader does.
            let expected = expected_leaf(&acknowledged);
            prop_assert_eq!(writer.as_ref().expect("open").leaf(), expected.as_ref(), "step {}", step);
        }
        let log = read_log(&path).expect("reads");
        prop_assert_eq!(entries_of(log.entries()), acknowledged.clone());
        prop_assert_eq!(log.leaf().cloned(), expected_leaf(&acknowledged));
        for (idx, entry) in acknowledged.iter().enumerate() {
            // Every append's parent is the position settled before it: the
            // first entry that is not a `leaf` entry along a chain of them.
            prop_assert_eq!(entry.parent_id.clone(), expected_leaf(&acknowledged[..idx]), "entry {}", idx);
            if let (true, EntryBody::Leaf { target }) = (rewinds.contains(&idx), &entry.body) {
                // A rewind writes the target where the position settles.
                prop_assert_eq!(Some(target.clone()), expected_leaf(&acknowledged[..=idx]));
            }
        }
        let reopened = SessionWriter::open(&path, options(99));
        drop(writer);
        prop_assert!(matches!(reopened, Err(StoreError::Locked { .. })), "the first writer still holds the lock");
    }

    /// SPEC §17: a log truncated at any byte opens, and loses at most its
    /// last line, which was not acknowledged.
    #[test]
    fn a_log_cut_at_any_byte_loses_at_most_its_last_line(
        bodies in vec(strategy::body().prop_filter("writable, no leaf", |b| {
            writable(b) && !matches!(b, EntryBody::Leaf { .. })
        }), 1..8),
        cut_fraction in 0.0f64..=1.0,
    ) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("s1.jsonl");
        let mut writer = create(&path);
        let appended: Vec<_> = bodies.into_iter().map(|b| writer.append(b).expect("appends")).collect();
        drop(writer);
        let bytes = std::fs::read(&path).expect("readable");
        let ends = line_ends(&bytes);
        let cut = ((bytes.len() as f64) * cut_fraction) as usize;
        let truncated = &bytes[..cut];

        let log = SessionLog::from_bytes(truncated);
        let n_complete_entries = ends.iter().filter(|&&end| end <= cut).count().saturating_sub(1);
        prop_assert_eq!(entries_of(log.entries()), appended[..n_complete_entries].to_vec());
        let kinds: Vec<_> = log.diagnostics().iter().map(|d| d.kind.clone()).collect();
        let at_line_end = cut == 0 || ends.contains(&cut);
        if cut == 0 {
            prop_assert_eq!(kinds, vec![DiagnosticKind::EmptyFile]);
        } else if cut < ends[0] {
            prop_assert_eq!(kinds.len(), 2);
            prop_assert!(matches!(kinds[0], DiagnosticKind::MissingHeader { .. }), "{:?}", kinds);
            prop_assert_eq!(&kinds[1], &DiagnosticKind::TornLine { bytes: cut as u64 });
        } else if at_line_end {
            prop_assert!(kinds.is_empty(), "{:?}", kinds);
        } else {
            prop_assert_eq!(kinds.len(), 1);
            prop_assert!(matches!(kinds[0], DiagnosticKind::TornLine { .. }), "{:?}", kinds);
        }

        // The same from the file, by resume, and a writer carries on after it.
        std::fs::write(&path, truncated).expect("truncated");
        let resumed = resume(&path).expect("resumes");
        prop_assert_eq!(resumed.leaf.as_ref(), log.leaf());
        prop_assert_eq!(entries_of(&resumed.stretch), entries_of(log.live_stretch()));
        if cut >= ends[0] {
            let mut writer = SessionWriter::open(&path, options(7)).expect("reopens");
            prop_assert_eq!(writer.leaf(), log.leaf());
            let next = writer.append(EntryBody::ModelChange { model: "after".into() }).expect("appends");
            drop(writer);
            let after = std::fs::read(&path).expect("readable");
            prop_assert!(after.starts_with(truncated));
            let reread = read_log(&path).expect("reads");
            let mut expected = appended[..n_complete_entries].to_vec();
            if ends.contains(&(cut + 1)) {
                // Only the newline was missing: once the append ends the
                // line, it reads as the entry it always was, on a side
                // branch (the new entry's parent is the leaf before it).
                let resurrected = appended[n_complete_entries].clone();
                prop_assert_eq!(resurrected.parent_id.as_ref(), next.parent_id.as_ref());
                expected.push(resurrected);
            }
            expected.push(next);
            prop_assert_eq!(entries_of(reread.entries()), expected);
        }
    }
}

/// The child side of the kill test: appends forever, printing each
/// acknowledged id, until the parent kills it.
fn append_until_killed(path: &str, seed: u64) {
    let options = WriterOptions {
        durability: Durability::Fsync,
        minter: Box::new(SystemMinter),
    };
    let mut writer = match SessionWriter::open(path, options) {
        Ok(writer) => writer,
        Err(err) => {
            eprintln!("child cannot open {path}: {err}");
            std::process::exit(3);
        }
    };
    let mut rng = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let stdout = std::io::stdout();
    loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Mostly small lines, sometimes large ones that take a while to write.
        let size = if rng.is_multiple_of(8) {
            (rng % (2 << 20)) as usize
        } else {
            (rng % 2_000) as usize
        };
        let message = Message::user("x".repeat(size));
        let entry = match writer.append_message(message, &ByteCounter, DEFAULT_IMAGE_TOKENS) {
            Ok(entry) => entry,
            Err(err) => {
                eprintln!("child append failed: {err}");
                std::process::exit(4);
            }
        };
        let mut out = stdout.lock();
        let _ = writeln!(out, "ACK {}", entry.id);
        let _ = out.flush();
    }
}

/// SPEC §17: kill the writer at any point of an append; the log opens and
/// nothing acknowledged is lost. The test re-executes its own binary as the
/// child (`SOBA_KILL_CHILD`), SIGKILLs it after a random short delay, and
/// checks the log after every round (`SOBA_KILL_ROUNDS`, default 50).
#[test]
fn a_killed_writer_loses_nothing_acknowledged() {
    if let Ok(path) = std::env::var("SOBA_KILL_CHILD") {
        let seed = std::env::var("SOBA_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        append_until_killed(&path, seed);
        return;
    }
    let rounds: u64 = std::env::var("SOBA_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    drop(create(&path));
    let exe = std::env::current_exe().expect("the test binary");
    let mut acknowledged: Vec<EntryId> = Vec::new();
    let mut before = std::fs::read(&path).expect("readable");
    let mut rng: u64 = 0x5eed_1234_abcd_ef01;
    let mut n_torn = 0;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "log::a_killed_writer_loses_nothing_acknowledged",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SOBA_KILL_CHILD", &path)
            .env("SOBA_KILL_SEED", (round + 1).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the child starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (first_ack, first_acked) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut lines = std::io::BufReader::new(stdout);
            let mut line = String::new();
            // Only whole lines count: a line cut by the kill was not printed.
            while lines.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line.ends_with('\n')
                    && let Some(id) = line.trim_end().strip_prefix("ACK ")
                {
                    acked.push(EntryId::parse(id).expect("a printed entry id"));
                    if acked.len() == 1 {
                        let _ = first_ack.send(());
                    }
                }
                line.clear();
            }
            acked
        });
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Kill inside the append loop, not during the child's start-up.
        let _ = first_acked.recv_timeout(Duration::from_secs(30));
        std::thread::sleep(Duration::from_micros(rng % 30_000));
        child.kill().expect("SIGKILL delivered");
        let status = child.wait().expect("the child is reaped");
        let acked = reader.join().expect("the reader thread");
        if acked.is_empty() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .map(|mut e| e.read_to_string(&mut stderr));
            assert!(
                status.code().is_none(),
                "the child failed before being killed: {status} {stderr}"
            );
        }
        acknowledged.extend(acked);

        let after = std::fs::read(&path).expect("readable");
        assert!(
            after.starts_with(&before),
            "round {round}: the prefix changed"
        );
        let log = SessionLog::from_bytes(&after);
        assert!(
            log.header().is_some(),
            "round {round}: the header is intact"
        );
        for id in &acknowledged {
            assert!(
                log.entry(id).is_some(),
                "round {round}: acknowledged {id} is lost"
            );
        }
        for diagnostic in log.diagnostics() {
            match diagnostic.kind {
                DiagnosticKind::TornLine { .. } => n_torn += 1,
                // An earlier round's torn line, ended by a later append.
                DiagnosticKind::InvalidJson { .. } => {}
                _ => panic!("round {round}: unexpected damage: {diagnostic}"),
            }
        }
        let resumed = resume(&path).expect("resumes");
        assert_eq!(resumed.leaf.as_ref(), log.leaf(), "round {round}");
        assert_eq!(
            entries_of(&resumed.stretch),
            entries_of(log.live_stretch()),
            "round {round}"
        );
        before = after;
    }
    assert!(
        !acknowledged.is_empty(),
        "no child ever acknowledged an append"
    );
    eprintln!(
        "{rounds} kills, {} acknowledged entries, {n_torn} rounds ended on a torn line",
        acknowledged.len()
    );
}

#[test]
fn sessions_are_listed_and_found_by_prefix() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let ids = [
        "0194c2d0-aaaa-7000-8000-000000000001",
        "0194c2d0-aaab-7000-8000-000000000002",
        "0194c2d0-bbbb-7000-8000-000000000003",
    ];
    for (n, id) in ids.iter().enumerate() {
        let path = session_path(dir.path(), &header(id).id);
        let mut writer =
            SessionWriter::create(&path, &header(id), options(n as i64)).expect("creates");
        writer
            .append(EntryBody::ModelChange { model: "m".into() })
            .expect("appends");
    }
    std::fs::write(dir.path().join(format!("{}.flight.jsonl", ids[0])), "{}\n").expect("written");
    std::fs::write(dir.path().join("notes.txt"), "x").expect("written");
    std::fs::write(dir.path().join("broken.jsonl"), "garbage\n").expect("written");

    let sessions = list_sessions(dir.path()).expect("lists");
    let mut found: Vec<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    found.sort_unstable();
    assert_eq!(found, vec![ids[0], ids[1], ids[2], "broken"]);
    let first = sessions.iter().find(|s| s.id == ids[0]).expect("listed");
    assert_eq!(first.created_at.as_deref(), Some("2025-01-01T00:00:00Z"));
    assert_eq!(first.cwd.as_deref(), Some("/work/project"));
    assert_eq!(
        first.size,
        std::fs::metadata(&first.path).expect("exists").len()
    );
    assert!(first.modified.is_some());
    assert_eq!(first.problem, None);
    let broken = sessions.iter().find(|s| s.id == "broken").expect("listed");
    assert!(
        broken
            .problem
            .as_deref()
            .is_some_and(|p| p.starts_with("invalid JSON")),
        "{broken:?}"
    );

    assert_eq!(
        find_session(dir.path(), "0194c2d0-b").expect("unique").id,
        ids[2]
    );
    assert_eq!(find_session(dir.path(), ids[0]).expect("exact").id, ids[0]);
    let err = find_session(dir.path(), "0194c2d0-aaa").expect_err("ambiguous");
    assert_eq!(
        err.to_string(),
        format!(
            "\"0194c2d0-aaa\" matches 2 sessions ({}, {}); give a longer prefix",
            ids[0], ids[1]
        )
    );
    assert!(matches!(
        find_session(dir.path(), "ffff"),
        Err(StoreError::SessionNotFound { .. })
    ));
    assert!(
        list_sessions(dir.path().join("missing"))
            .expect("no directory, no sessions")
            .is_empty()
    );
}

#[test]
fn a_rewind_to_a_leaf_entry_targets_where_it_leads() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let first = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    writer
        .append(EntryBody::ModelChange { model: "b".into() })
        .expect("appends");
    let back = writer.rewind(first.id.clone()).expect("rewinds");
    drop(writer);
    // After a reopen the writer knows nothing of `back` but the file.
    let mut writer = SessionWriter::open(&path, options(1)).expect("reopens");
    let again = writer.rewind(back.id.clone()).expect("rewinds");
    assert_eq!(
        again.body,
        EntryBody::Leaf {
            target: first.id.clone()
        }
    );
    assert_eq!(writer.leaf(), Some(&first.id));
    let next = writer
        .append(EntryBody::ModelChange { model: "c".into() })
        .expect("appends");
    assert_eq!(next.parent_id.as_ref(), Some(&first.id));
    // A target that is not in the file is written as given.
    let missing = EntryId::from_uuid(soba_core::IdKind::Entry, 0xdead_0009);
    let dangling = writer.rewind(missing.clone()).expect("rewinds");
    assert_eq!(
        dangling.body,
        EntryBody::Leaf {
            target: missing.clone()
        }
    );
    assert_eq!(writer.leaf(), Some(&missing));
    drop(writer);
    let log = read_log(&path).expect("reads");
    assert_eq!(log.leaf(), Some(&missing));
    assert!(matches!(
        log.diagnostics(),
        [soba_store::Diagnostic {
            kind: DiagnosticKind::DanglingLeaf { .. },
            ..
        }]
    ));
}

/// Returns the names of the files in `dir`, sorted.
fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("a readable dir")
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
fn a_log_replaced_by_rename_refuses_appends_and_keeps_the_missing_lines_in_a_recovery_file() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let kept = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    // An editor reads the log, the writer appends once more, and the
    // editor saves its copy by renaming it over the path.
    let copy = dir.path().join(".s1.jsonl.swp");
    std::fs::copy(&path, &copy).expect("copies");
    let unseen = writer
        .append(EntryBody::ModelChange { model: "b".into() })
        .expect("appends while the file is still at the path");
    std::fs::rename(&copy, &path).expect("renames");
    let on_disk = std::fs::read(&path).expect("readable");

    let err = writer
        .append(EntryBody::ModelChange { model: "c".into() })
        .expect_err("refused");
    let StoreError::LogReplaced {
        how,
        recovery: Some(recovery),
        ..
    } = &err
    else {
        panic!("not a refusal with a recovery file: {err:?}");
    };
    assert_eq!(*how, "replaced");
    assert_eq!(
        std::fs::read(&path).expect("readable"),
        on_disk,
        "nothing written at the path"
    );
    let recovery_name = recovery
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    assert!(
        recovery_name.starts_with("s1.recovered-"),
        "{recovery_name}"
    );
    assert_eq!(
        file_names(dir.path()),
        ["s1.jsonl".to_owned(), recovery_name.clone()]
    );
    let message = err.to_string();
    assert_eq!(
        message,
        format!(
            "the log of session s1 ({path}) was replaced by another program while soba was writing it, \
             so nothing more is written to it; the entries missing from the file now at that path are in {recovery}: \
             look at them with `cat {recovery}`, and append them to the log (`cat {recovery} >> {path}`) if it should keep them",
            path = path.display(),
            recovery = recovery.display()
        )
    );
    // The recovery file holds the entry the new file lacks and the refused
    // one, not the one it has.
    let recovered = std::fs::read_to_string(recovery).expect("readable");
    let ids: Vec<String> = recovered
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).expect("json")["id"].to_string()
        })
        .collect();
    assert_eq!(ids.len(), 2, "{recovered}");
    assert_eq!(ids[0], format!("\"{}\"", unseen.id.as_str()));
    assert_ne!(ids[1], format!("\"{}\"", kept.id.as_str()));
    assert!(recovered.contains("\"model\":\"c\""), "{recovered}");
    // A later append goes to the same recovery file, and the sessions list
    // holds the log only.
    let again = writer
        .append(EntryBody::ModelChange { model: "d".into() })
        .expect_err("refused");
    assert!(
        matches!(&again, StoreError::LogReplaced { recovery: Some(same), .. } if same == recovery)
    );
    assert_eq!(
        std::fs::read_to_string(recovery)
            .expect("readable")
            .lines()
            .count(),
        3
    );
    assert_eq!(list_sessions(dir.path()).expect("lists").len(), 1);
    // Closing never removes the file another program put there.
    assert!(!writer.close_removing_if_unused().expect("closes"));
    assert_eq!(std::fs::read(&path).expect("readable"), on_disk);
}

#[test]
fn a_removed_log_refuses_appends() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    std::fs::remove_file(&path).expect("removes");
    let err = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect_err("refused");
    assert!(
        matches!(
            &err,
            StoreError::LogReplaced {
                how: "removed",
                recovery: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!path.exists());
}

#[test]
fn two_files_with_one_header_id_are_named_instead_of_one_opened() {
    let dir = tempfile::tempdir().expect("a temp dir");
    // Both headers say `s1`.
    let id = "s1";
    let log = dir.path().join("s1.jsonl");
    drop(create(&log));
    let copy = dir.path().join("s1-copy.jsonl");
    std::fs::copy(&log, &copy).expect("copies");
    for wanted in [id, "s"] {
        let err = find_session(dir.path(), wanted).expect_err("two files");
        assert_eq!(
            err.to_string(),
            format!(
                "session {id} is in 2 files ({}, {}); pass the one meant by its path, or move the other out of the sessions folder",
                copy.display(),
                log.display()
            )
        );
    }
}

/// Returns the ids of the entry lines in `text`, in order.
fn line_ids(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).expect("json")["id"]
                .as_str()
                .expect("an id")
                .to_owned()
        })
        .collect()
}

#[test]
fn garbage_appended_without_a_newline_is_ended_before_the_next_entry() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    // Another program appends a line it never ends, mid-reply.
    let mut other = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("opens");
    other.write_all(b"{\"half\": ").expect("writes");
    drop(other);
    let after = writer
        .append(EntryBody::ModelChange { model: "b".into() })
        .expect("appends on a line of its own");
    let text = std::fs::read_to_string(&path).expect("readable");
    assert!(
        text.contains("{\"half\": \n{\"type\":\"model_change\""),
        "{text}"
    );
    let log = read_log(&path).expect("reads");
    assert_eq!(log.leaf(), Some(&after.id));
    assert!(log.entry(&after.id).is_some(), "the reply parses");
}

#[test]
fn a_log_truncated_under_the_writer_refuses_appends_and_keeps_its_lines() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let first = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    let second = writer
        .append(EntryBody::ModelChange { model: "b".into() })
        .expect("appends");
    // Another program empties the file in place (same inode).
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("opens")
        .set_len(0)
        .expect("truncates");
    let err = writer
        .append(EntryBody::ModelChange { model: "c".into() })
        .expect_err("refused");
    let StoreError::LogReplaced {
        how,
        recovery: Some(recovery),
        ..
    } = &err
    else {
        panic!("not a refusal with a recovery file: {err:?}");
    };
    assert_eq!(*how, "truncated");
    assert!(
        err.to_string().starts_with(&format!(
            "the log of session s1 ({}) was truncated by another program while soba was writing it",
            path.display()
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).expect("readable"),
        b"",
        "nothing written"
    );
    let ids = line_ids(&std::fs::read_to_string(recovery).expect("readable"));
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[0], first.id.as_str());
    assert_eq!(ids[1], second.id.as_str());
}

#[test]
fn a_log_whose_folder_is_renamed_keeps_the_lines_in_the_folder_above() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let project = dir.path().join("project");
    let path = project.join("s1.jsonl");
    let mut writer = create(&path);
    std::fs::rename(&project, dir.path().join("renamed")).expect("renames");
    let err = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect_err("refused");
    let StoreError::LogReplaced {
        how,
        recovery: Some(recovery),
        ..
    } = &err
    else {
        panic!("not a refusal with a recovery file: {err:?}");
    };
    assert_eq!(*how, "moved away with its folder");
    assert_eq!(recovery.parent(), Some(dir.path()));
    let ids = line_ids(&std::fs::read_to_string(recovery).expect("readable"));
    assert_eq!(ids.len(), 1);
    assert!(
        err.to_string().contains(&recovery.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_log_replaced_by_a_huge_sparse_file_is_not_read() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = create(&path);
    let first = writer
        .append(EntryBody::ModelChange { model: "a".into() })
        .expect("appends");
    // 64 GiB of holes, no newline: read whole it would exhaust memory.
    let sparse = dir.path().join("sparse");
    std::fs::File::create(&sparse)
        .expect("creates")
        .set_len(64 << 30)
        .expect("a sparse file");
    std::fs::rename(&sparse, &path).expect("renames");
    let err = writer
        .append(EntryBody::ModelChange { model: "b".into() })
        .expect_err("refused");
    let StoreError::LogReplaced {
        how: "replaced",
        recovery: Some(recovery),
        ..
    } = &err
    else {
        panic!("not a refusal with a recovery file: {err:?}");
    };
    let ids = line_ids(&std::fs::read_to_string(recovery).expect("readable"));
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], first.id.as_str());
}

/// The walk: session logs and their folders were world-readable (0644 in
/// 0755 folders) while the TUI's input history was 0600. A log holds every
/// prompt and output: owner-only, as the history.
#[cfg(unix)]
#[test]
fn session_files_and_the_folders_made_for_them_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("sessions/slug/s1.jsonl");
    drop(create(&path));
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("sessions/slug")), 0o700);
    assert_eq!(mode(&dir.path().join("sessions")), 0o700);
    let flight = dir.path().join("sessions/slug/s1.flight.jsonl");
    drop(soba_store::flight::FlightAppender::open(&flight, Durability::Flush).expect("opens"));
    assert_eq!(mode(&flight), 0o600);
}
