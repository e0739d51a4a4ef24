//! The tolerant reader on golden fixtures (with snapshots of their
//! diagnostics) and on hostile input: garbage, a 100 MB single line,
//! invalid UTF-8, wrong-shape JSON, an empty file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use soba_core::EntryBody;
use soba_store::reader::OUTLINE_CHARS;
use soba_store::{
    DiagnosticKind, ResumeOptions, SessionLog, read_log, read_log_outline, resume, resume_with,
};

use crate::support::entries_of;

/// Every fixture, declared: `(directory, file)`. A file in the fixture
/// directories that is not listed here fails [`fixtures_are_all_declared`].
const FIXTURES: &[(&str, &str)] = &[
    ("valid", "all-entry-types.jsonl"),
    ("valid", "imported-capsule.jsonl"),
    ("valid", "header-only.jsonl"),
    ("valid", "blank-lines-and-crlf.jsonl"),
    ("invalid", "corrupt-middle-line.jsonl"),
    ("invalid", "dangling-leaf.jsonl"),
    ("invalid", "dangling-parent.jsonl"),
    ("invalid", "duplicate-id.jsonl"),
    ("invalid", "empty.jsonl"),
    ("invalid", "future-schema.jsonl"),
    ("invalid", "garbage.jsonl"),
    ("invalid", "invalid-utf8.jsonl"),
    ("invalid", "no-header.jsonl"),
    ("invalid", "pi-header.jsonl"),
    ("invalid", "torn-last-line.jsonl"),
    ("invalid", "wrong-shape.jsonl"),
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sessions")
}

/// Renders what a reader made of a log, for snapshots.
fn render(path: &Path) -> String {
    let log = read_log(path).expect("reads");
    let resumed = resume(path).expect("resumes");
    let mut out = String::new();
    let header = log.header().map_or("none".to_owned(), |h| h.id.to_string());
    let _ = writeln!(out, "header: {header}");
    let _ = writeln!(out, "entries: {}", log.entries().len());
    let types: Vec<&str> = log
        .entries()
        .iter()
        .map(|l| l.entry.body.type_name())
        .collect();
    let _ = writeln!(out, "types: {}", types.join(" "));
    let _ = writeln!(
        out,
        "leaf: {}",
        log.leaf().map_or("none".to_owned(), |id| id.to_string())
    );
    let _ = writeln!(out, "path: {}", log.path().len());
    let _ = writeln!(out, "live stretch: {}", log.live_stretch().len());
    let _ = writeln!(out, "diagnostics:");
    for diagnostic in log.diagnostics() {
        let _ = writeln!(out, "  {diagnostic}");
    }
    let _ = writeln!(out, "resume (full scan: {}):", resumed.full_scan);
    for diagnostic in &resumed.diagnostics {
        let _ = writeln!(out, "  {diagnostic}");
    }
    out
}

#[test]
fn fixtures_are_all_declared() {
    for dir in ["valid", "invalid"] {
        let mut on_disk: Vec<String> = std::fs::read_dir(fixtures_dir().join(dir))
            .expect("the fixture directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        on_disk.sort();
        let mut declared: Vec<String> = FIXTURES
            .iter()
            .filter(|(d, _)| *d == dir)
            .map(|(_, f)| (*f).to_owned())
            .collect();
        declared.sort();
        assert_eq!(
            on_disk, declared,
            "fixtures in {dir}/ must be declared in FIXTURES"
        );
    }
}

#[test]
fn fixtures_match_their_snapshots() {
    for (dir, file) in FIXTURES {
        let path = fixtures_dir().join(dir).join(file);
        let log = read_log(&path).expect("reads");
        if *dir == "valid" {
            assert!(log.is_clean(), "{file}: {:?}", log.diagnostics());
            assert!(log.header().is_some(), "{file}");
        } else {
            assert!(!log.is_clean(), "{file} should have diagnostics");
        }
        // Resume agrees with the full reader on every fixture and block size.
        for block_size in [1, 5, 64, 1 << 20] {
            let resumed = resume_with(&path, ResumeOptions { block_size }).expect("resumes");
            assert_eq!(resumed.leaf.as_ref(), log.leaf(), "{file}");
            assert_eq!(
                entries_of(&resumed.stretch),
                entries_of(log.live_stretch()),
                "{file}"
            );
        }
        let name = format!("{dir}__{}", file.trim_end_matches(".jsonl"));
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(name, render(&path));
        });
    }
}

/// The outline `soba show` reads keeps every entry, link, diagnostic and
/// count of the whole log and cuts the texts.
#[test]
fn the_outline_keeps_the_structure_of_every_fixture_and_cuts_texts() {
    use soba_core::message::{Block, ResultPart};
    for (dir, file) in FIXTURES {
        let path = fixtures_dir().join(dir).join(file);
        let (whole, outline) = (
            read_log(&path).expect("reads"),
            read_log_outline(&path).expect("reads"),
        );
        let shape = |log: &SessionLog| {
            let entries: Vec<_> = log
                .entries()
                .iter()
                .map(|l| {
                    let calls = match &l.entry.body {
                        EntryBody::Message(m) => m
                            .message
                            .content
                            .iter()
                            .filter_map(|block| match block {
                                Block::ToolUse(call) => Some(format!("{}:{}", call.id, call.name)),
                                Block::ToolResult(result) => {
                                    Some(format!("{}:{}", result.tool_use_id, result.is_error))
                                }
                                _ => None,
                            })
                            .collect::<Vec<_>>(),
                        _ => Vec::new(),
                    };
                    (
                        l.entry.id.clone(),
                        l.entry.parent_id.clone(),
                        l.entry.body.type_name().to_owned(),
                        l.location,
                        calls,
                    )
                })
                .collect();
            let path: Vec<_> = log.path().iter().map(|l| l.entry.id.clone()).collect();
            let diagnostics: Vec<String> =
                log.diagnostics().iter().map(|d| format!("{d:?}")).collect();
            (
                entries,
                path,
                log.leaf().cloned(),
                log.live_stretch().len(),
                diagnostics,
            )
        };
        assert_eq!(shape(&outline), shape(&whole), "{dir}/{file}");
        assert_eq!(
            soba_store::check::problems(&outline),
            soba_store::check::problems(&whole),
            "{dir}/{file}"
        );
        for logged in outline.entries() {
            if let EntryBody::Message(m) = &logged.entry.body {
                for block in &m.message.content {
                    let text = match block {
                        Block::Text(text) => text.clone(),
                        Block::ToolResult(result) => result
                            .content
                            .iter()
                            .map(|part| match part {
                                ResultPart::Text(text) => text.clone(),
                                ResultPart::Image(_) => panic!("an image kept in {dir}/{file}"),
                            })
                            .collect(),
                        _ => String::new(),
                    };
                    assert!(
                        text.chars().count() <= OUTLINE_CHARS,
                        "{dir}/{file}: {text:?}"
                    );
                }
            }
        }
    }
    // A long text is cut to its first characters.
    let bytes = {
        let mut log = std::fs::read_to_string(fixtures_dir().join("valid/all-entry-types.jsonl"))
            .expect("reads");
        log = log.replacen("\"text\":\"", &format!("\"text\":\"{}", "é".repeat(500)), 1);
        log
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let long = dir.path().join("long.jsonl");
    std::fs::write(&long, bytes).expect("writes");
    let outline = read_log_outline(&long).expect("reads");
    let cut = outline
        .entries()
        .iter()
        .find_map(|l| match &l.entry.body {
            EntryBody::Message(m) => m.message.content.iter().find_map(|block| match block {
                Block::Text(text) if text.starts_with('é') => Some(text.clone()),
                _ => None,
            }),
            _ => None,
        })
        .expect("the long text");
    assert_eq!(cut, "é".repeat(OUTLINE_CHARS));
}

#[test]
fn the_all_types_fixture_reads_every_type() {
    let log = read_log(fixtures_dir().join("valid/all-entry-types.jsonl")).expect("reads");
    let unknown = log
        .entries()
        .iter()
        .find(|l| matches!(l.entry.body, EntryBody::Unknown { .. }))
        .expect("the unknown entry");
    assert_eq!(unknown.entry.body.type_name(), "bookmark");
    assert!(
        unknown
            .raw
            .as_deref()
            .is_some_and(|raw| raw.contains("\"label\":\"a future entry type\""))
    );
    // The rewind took the capsule off the path: no capsule, whole path live.
    assert!(log.latest_capsule().is_none());
    assert_eq!(log.live_stretch().len(), 5);
    let imported = read_log(fixtures_dir().join("valid/imported-capsule.jsonl")).expect("reads");
    let capsule = imported.latest_capsule().expect("a capsule on the path");
    let EntryBody::Capsule(capsule) = &capsule.entry.body else {
        panic!("a capsule")
    };
    assert_eq!(
        capsule.imported.as_ref().map(|i| i.agent.as_str()),
        Some("claude-code")
    );
    assert_eq!(
        capsule.overflow.map(|o| o.request_tokens_local),
        Some(201_000)
    );
    let header = imported.header().expect("a header");
    let from = header.imported_from.as_ref().expect("importedFrom");
    assert_eq!(from.original_id.as_deref(), Some("5d1c-original"));
    assert_eq!(from.extra.get("entries"), Some(&serde_json::Value::from(3)));
    // Nothing is kept: the stretch starts at the capsule.
    assert_eq!(imported.live_stretch().len(), 2);
}

/// Checks that `bytes` read without panicking, give `n_entries` entries and
/// report the expected kinds of damage, in order.
fn check(bytes: &[u8], n_entries: usize, expected: &[fn(&DiagnosticKind) -> bool]) {
    let log = SessionLog::from_bytes(bytes);
    assert_eq!(log.entries().len(), n_entries);
    assert_eq!(
        log.diagnostics().len(),
        expected.len(),
        "{:?}",
        log.diagnostics()
    );
    for (diagnostic, matches) in log.diagnostics().iter().zip(expected) {
        assert!(matches(&diagnostic.kind), "unexpected {diagnostic}");
    }
    let file = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(file.path(), bytes).expect("written");
    let resumed = resume(file.path()).expect("resumes");
    assert_eq!(resumed.leaf.as_ref(), log.leaf());
}

const HEADER: &str =
    r#"{"type":"session","schemaVersion":1,"id":"s1","createdAt":"t","cwd":"/","os":"linux"}"#;

#[test]
fn hostile_input_gives_diagnostics_not_panics() {
    let torn = |k: &DiagnosticKind| matches!(k, DiagnosticKind::TornLine { .. });
    let missing = |k: &DiagnosticKind| matches!(k, DiagnosticKind::MissingHeader { .. });
    let json = |k: &DiagnosticKind| matches!(k, DiagnosticKind::InvalidJson { .. });
    let shape = |k: &DiagnosticKind| matches!(k, DiagnosticKind::WrongShape { .. });
    let utf8 = |k: &DiagnosticKind| matches!(k, DiagnosticKind::InvalidUtf8 { .. });
    let empty = |k: &DiagnosticKind| matches!(k, DiagnosticKind::EmptyFile);

    check(b"", 0, &[empty]);
    check(b"\xff\xfe\x00garbage", 0, &[missing, torn]);
    check(b"\xff\xfe\x00garbage\n", 0, &[missing, utf8]);
    check(
        format!("{HEADER}\n[1]\n42\n{{}}\nnull\n").as_bytes(),
        0,
        &[shape, shape, shape, shape],
    );
    check(format!("{HEADER}\n{{\"type\":\n").as_bytes(), 0, &[json]);
    check(format!("{HEADER}\n\u{0}\u{1}\n").as_bytes(), 0, &[json]);
}

#[test]
fn a_100_mb_single_line_is_handled() {
    let size = 100 << 20;
    // Garbage: one huge invalid line.
    let mut garbage = format!("{HEADER}\n").into_bytes();
    garbage.resize(garbage.len() + size, b'a');
    garbage.push(b'\n');
    let log = SessionLog::from_bytes(&garbage);
    assert_eq!(log.entries().len(), 0);
    assert_eq!(log.diagnostics().len(), 1);
    assert!(matches!(
        log.diagnostics()[0].kind,
        DiagnosticKind::InvalidJson { .. }
    ));
    assert!(
        log.diagnostics()[0].to_string().len() < 200,
        "diagnostics never echo the line"
    );
    drop(garbage);

    // A valid 100 MB message, read from a file by both readers.
    let file = tempfile::NamedTempFile::new().expect("a temp file");
    let prefix = format!(
        "{HEADER}\n{{\"type\":\"message\",\"id\":\"e_00000000000000000000000000000001\",\"parentId\":null,\"timestamp\":\"t\",\"role\":\"tool\",\"content\":[{{\"type\":\"tool_result\",\"toolUseId\":\"c\",\"content\":[{{\"type\":\"text\",\"text\":\""
    );
    let mut bytes = prefix.into_bytes();
    bytes.resize(bytes.len() + size, b'x');
    bytes.extend_from_slice(b"\"}],\"isError\":false}]}\n");
    std::fs::write(file.path(), &bytes).expect("written");
    drop(bytes);
    let log = read_log(file.path()).expect("reads");
    assert!(log.is_clean(), "{:?}", log.diagnostics());
    let EntryBody::Message(message) = &log.entries()[0].entry.body else {
        panic!("a message")
    };
    assert_eq!(
        message
            .message
            .tool_results()
            .next()
            .map(|r| r.text().len()),
        Some(size)
    );
    let resumed = resume(file.path()).expect("resumes");
    assert_eq!(entries_of(&resumed.stretch), entries_of(log.entries()));
}

/// `entry_ids` reads the ids of every entry line, as the full reader does,
/// line by line: the header and lines without a valid id are skipped.
#[test]
fn entry_ids_match_the_full_reader_on_every_fixture() {
    for (dir, file) in FIXTURES {
        let path = fixtures_dir().join(dir).join(file);
        let Ok(log) = read_log(&path) else {
            continue;
        };
        let full: Vec<_> = log.entries().iter().map(|l| l.entry.id.clone()).collect();
        let ids = soba_store::reader::entry_ids(&path).unwrap();
        // Every id the full reader kept is listed, in file order (a
        // damaged line may still carry a readable id: it is listed too).
        let mut rest = ids.iter();
        for id in &full {
            assert!(
                rest.any(|candidate| candidate == id),
                "{dir}/{file}: {id} missing"
            );
        }
        if log.diagnostics().is_empty() {
            assert_eq!(ids, full, "{dir}/{file}");
        }
    }
}

#[test]
fn a_byte_order_mark_mid_file_is_named_and_the_line_read_without_it() {
    const HEADER: &str = r#"{"type":"session","schemaVersion":1,"id":"s1","createdAt":"2025-01-01T00:00:00.000Z","cwd":"/w","os":"linux","memory":[]}"#;
    let first = r#"{"type":"model_change","id":"e_0194c2d0e4c070018000000000000001","parentId":null,"timestamp":"2025-01-01T00:00:00Z","model":"a"}"#;
    let second = r#"{"type":"model_change","id":"e_0194c2d0e4c070028000000000000001","parentId":"e_0194c2d0e4c070018000000000000001","timestamp":"2025-01-01T00:00:00Z","model":"b"}"#;
    let text = format!("{HEADER}\n{first}\n\u{feff}{second}\n");
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    std::fs::write(&path, &text).expect("writes");
    let offset = HEADER.len() + first.len() + 2;
    let said = "the line starts with a byte order mark (U+FEFF), as where files joined with `cat` begin; it is read without the mark";
    let expected = format!("line 3 (byte {offset}): {said}");
    let log = read_log(&path).expect("reads");
    let shown: Vec<String> = log.diagnostics().iter().map(ToString::to_string).collect();
    assert_eq!(shown, [expected]);
    assert_eq!(log.entries().len(), 2);
    assert_eq!(log.path().len(), 2);
    // Resume, reading backwards, says the same at the byte (it counts no
    // lines).
    let resumed = resume(&path).expect("resumes");
    let shown: Vec<String> = resumed
        .diagnostics
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(shown, [format!("byte {offset}: {said}")]);
    assert_eq!(resumed.stretch.len(), 2);
}
