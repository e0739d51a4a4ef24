//! Bad input (SPEC §17): the committed corpus in `tests/bad-input/`
//! (`log/`, `import/`, `capsule/`) run through the store and core parsers,
//! huge inputs generated at test time (100 MB lines and tool outputs, 20 MB
//! images, oversized capsule files), a session locked by another process,
//! and property tests over the fuzz targets' invariants.
//!
//! Each corpus case `<dir>/<name>.<ext>` has its expected description in
//! `<dir>/<name>.expected`; `SOBA_BLESS=1` rewrites the expectations (review
//! the diff like code).

#[path = "../../../../fuzz/src/lib.rs"]
mod fuzz_checks;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proptest::collection::vec;
use proptest::prelude::*;
use soba_core::tokens::{BpeCounter, ByteCounter, DEFAULT_IMAGE_TOKENS};
use soba_core::{
    Block, Encoding, EntryBody, Image, ImageSource, Message, ResultPart, Role, TokenCount,
    TokenCounter, ToolResult,
};
use soba_store::import::{ImportOptions, import_bytes};
use soba_store::{
    DiagnosticKind, ImportedFrom, SessionId, SessionWriter, StoreError, read_log, resume, wire,
};

use crate::strategy;
use crate::support::{entries_of, header, options};

/// Returns `tests/bad-input/<kind>` at the workspace root.
fn corpus_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/bad-input")
        .join(kind)
}

/// Returns the cases of a corpus folder, sorted: every file but the
/// `.expected` ones.
fn cases(kind: &str) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir(kind))
        .expect("the corpus folder exists")
        .map(|entry| entry.expect("a readable folder entry").path())
        .filter(|path| path.extension().is_none_or(|ext| ext != "expected"))
        .collect();
    cases.sort();
    cases
}

/// Returns a case's name: its file name up to the first dot.
fn case_name(path: &Path) -> String {
    let file = path.file_name().expect("a file name").to_string_lossy();
    file.split('.').next().unwrap_or_default().to_owned()
}

/// Describes every case of `kind` with `describe` and compares with the
/// `.expected` files, reporting every mismatch at once.
fn check_corpus(kind: &str, describe: impl Fn(&Path, &[u8]) -> String) -> usize {
    let bless = std::env::var_os("SOBA_BLESS").is_some();
    let mut mismatches = Vec::new();
    let cases = cases(kind);
    assert!(!cases.is_empty(), "no cases in tests/bad-input/{kind}");
    for case in &cases {
        let bytes = std::fs::read(case).expect("a readable case");
        let actual = describe(case, &bytes);
        let expected_path = case.with_file_name(format!("{}.expected", case_name(case)));
        if bless {
            std::fs::write(&expected_path, &actual).expect("the expectation is written");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
            panic!(
                "{} has no expectation; run with SOBA_BLESS=1",
                case.display()
            )
        });
        if expected != actual {
            mismatches.push(format!(
                "{}:\n--- expected\n{expected}--- actual\n{actual}",
                case.display()
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    cases.len()
}

/// Replaces a temporary directory in an error message by `<dir>`.
fn scrub(text: &str, dir: &Path) -> String {
    text.replace(&dir.display().to_string(), "<dir>")
}

fn short(id: Option<&soba_core::EntryId>) -> String {
    id.map_or("none".to_owned(), |id| id.as_str().to_owned())
}

/// Reads, resumes and appends to one damaged log, checking that resume
/// agrees with the full reader and that an append keeps every byte before
/// it and every entry read before it.
fn describe_log(case: &Path, bytes: &[u8]) -> String {
    fuzz_checks::check_log(bytes);
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join(case.file_name().expect("a file name"));
    std::fs::write(&path, bytes).expect("the case is copied");
    let mut out = String::new();

    let log = read_log(&path).expect("a readable file");
    out.push_str(&format!(
        "read: {} entries, path of {}, leaf {}, {} diagnostics\n",
        log.entries().len(),
        log.path().len(),
        short(log.leaf()),
        log.diagnostics().len()
    ));
    for diagnostic in log.diagnostics() {
        out.push_str(&format!("  {diagnostic}\n"));
    }

    let resumed = resume(&path).expect("resume reads any file");
    assert_eq!(
        resumed.leaf.as_ref(),
        log.leaf(),
        "resume finds another leaf"
    );
    assert_eq!(
        entries_of(&resumed.stretch),
        entries_of(log.live_stretch()),
        "resume finds another live stretch"
    );
    out.push_str(&format!(
        "resume: live stretch of {}, {} diagnostics{}\n",
        resumed.stretch.len(),
        resumed.diagnostics.len(),
        if resumed.full_scan { ", full scan" } else { "" }
    ));

    match SessionWriter::open(&path, options(1)) {
        Ok(mut writer) => {
            let leaf = writer.leaf().cloned();
            assert_eq!(leaf.as_ref(), log.leaf(), "the writer finds another leaf");
            let appended = writer
                .append(EntryBody::ModelChange {
                    model: "after/damage".into(),
                })
                .expect("an append after damage");
            drop(writer);
            let after = std::fs::read(&path).expect("readable");
            assert!(after.starts_with(bytes), "the append rewrote the file");
            let reread = read_log(&path).expect("readable");
            let before_ids: Vec<_> = log.entries().iter().map(|l| &l.entry.id).collect();
            let after_ids: Vec<_> = reread.entries().iter().map(|l| &l.entry.id).collect();
            assert!(
                after_ids.starts_with(&before_ids),
                "an entry read before the append was lost"
            );
            assert_eq!(reread.leaf(), Some(&appended.id));
            out.push_str(&format!(
                "append: under {}, then {} diagnostics\n",
                short(leaf.as_ref()),
                reread.diagnostics().len()
            ));
        }
        Err(err) => out.push_str(&format!(
            "append: error: {}\n",
            scrub(&err.to_string(), dir.path())
        )),
    }
    out
}

/// Imports one damaged transcript as detected, and then as every format
/// (no panic, the fuzz invariants); imported sessions are written as SOBA
/// logs and read back unchanged.
fn describe_import(case: &Path, bytes: &[u8]) -> String {
    for selector in 0..=u8::try_from(soba_store::import::Format::ALL.len()).expect("few formats") {
        let mut input = vec![selector];
        input.extend_from_slice(bytes);
        fuzz_checks::check_import(&input);
    }
    let name = case.file_name().expect("a file name");
    let options = ImportOptions::with_fallback_ms(1_735_689_600_000);
    let sessions = match import_bytes(bytes, Path::new(name), &options) {
        Ok(sessions) => sessions,
        Err(err) => return format!("error: {err}\n"),
    };
    let mut out = format!("{} sessions\n", sessions.len());
    let dir = tempfile::tempdir().expect("a temp dir");
    for (idx, session) in sessions.iter().enumerate() {
        let stats = &session.stats;
        out.push_str(&format!(
            "{} {:?}: {} entries, {} inferences, {} tool calls, {} results, {} unpaired, {} orphan results, {} results before calls, {} moved, {} diagnostics\n",
            session.format,
            session.original_id,
            session.entries.len(),
            session.inference_count(),
            stats.tool_calls,
            stats.tool_results,
            stats.unpaired_tool_calls,
            stats.orphan_tool_results,
            stats.results_before_calls,
            stats.reordered_tool_results,
            stats.diagnostics.len()
        ));
        for diagnostic in &stats.diagnostics {
            out.push_str(&format!("  {diagnostic}\n"));
        }
        let mut header = header(&format!("imported-{idx}"));
        header.imported_from = Some(ImportedFrom {
            format: session.format.as_str().to_owned(),
            path: name.to_string_lossy().into_owned(),
            original_id: Some(session.original_id.clone()),
            extra: serde_json::Map::new(),
        });
        let path = dir.path().join(format!("imported-{idx}.jsonl"));
        let mut writer = SessionWriter::create(&path, &header, options_for_import())
            .expect("a new session file");
        for entry in &session.entries {
            writer
                .append_entry(entry)
                .expect("an imported entry is written");
        }
        drop(writer);
        let log = read_log(&path).expect("readable");
        assert!(log.is_clean(), "{:?}", log.diagnostics());
        // What `soba show --check` says of the imported session.
        for problem in soba_store::check::problems(&log) {
            out.push_str(&format!("  check: {problem}\n"));
        }
        assert_eq!(
            entries_of(log.entries()),
            session.entries,
            "an imported entry changed on disk"
        );
    }
    out
}

fn options_for_import() -> soba_store::WriterOptions {
    options(2)
}

/// Parses one capsule file as `/capsule load` does, renders it as a loaded
/// capsule when it parses, and redacts it as an export would.
fn describe_capsule(_case: &Path, bytes: &[u8]) -> String {
    fuzz_checks::check_capsule_file(bytes);
    let mut out = String::new();
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(err) => {
            out.push_str(&format!(
                "utf-8: invalid after {} bytes; read lossily\n",
                err.valid_up_to()
            ));
            String::from_utf8_lossy(bytes).into_owned()
        }
    };
    let parsed = soba_core::render::check_loadable(
        &text,
        TokenCount::new(80_000),
        &BpeCounter::new(Encoding::O200kBase),
    );
    match parsed {
        Err(err) => out.push_str(&format!("load: error: {err}\n")),
        Ok(file) => {
            out.push_str(&format!(
                "load: ok, title {:?}, {} sections\n",
                file.front.title.as_deref().unwrap_or(""),
                file.sections.len()
            ));
            let rendered = fuzz_checks::assert_delimited(&text);
            let block_start = rendered.find("<<<CAPSULE DATA ").expect("an opening line");
            let outside = &rendered[..block_start];
            for hostile in [
                "IGNORE ALL",
                "SYSTEM:",
                "<|im_start|>",
                "you are root",
                "sk-ant-",
            ] {
                assert!(
                    !outside.contains(hostile),
                    "{hostile:?} leaked before the untrusted block"
                );
            }
            out.push_str(&format!(
                "loaded: {} lines inside the untrusted block\n",
                text.trim_end().lines().count()
            ));
        }
    }
    let redacted = soba_core::redact::redact(&text);
    let kinds: Vec<String> = redacted
        .by_kind
        .iter()
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect();
    out.push_str(&format!(
        "redact: {} ({})\n",
        redacted.count,
        if kinds.is_empty() {
            "none".to_owned()
        } else {
            kinds.join(", ")
        }
    ));
    out
}

#[test]
fn the_log_corpus_opens_with_diagnostics_and_accepts_appends() {
    let n = check_corpus("log", describe_log);
    assert!(n >= 20, "{n} log cases");
}

#[test]
fn the_import_corpus_gives_sessions_or_clear_errors() {
    let n = check_corpus("import", describe_import);
    assert!(n >= 15, "{n} import cases");
}

#[test]
fn the_capsule_corpus_gives_clear_errors_and_keeps_hostile_text_delimited() {
    let n = check_corpus("capsule", describe_capsule);
    assert!(n >= 15, "{n} capsule cases");
}

const MB: usize = 1 << 20;

/// Returns `n` bytes of varied text with no newline (a minified file, a
/// base64 blob, a long log line).
fn one_line(n: usize) -> String {
    let pattern = "abc/DEF+123=ghi jkl_MNO-456 \u{e9}\u{4e2d}\t";
    let mut text = pattern.repeat(n / pattern.len() + 1);
    let mut cut = n;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

/// SPEC §17: a 100 MB tool output and a 100 MB line of garbage are read,
/// resumed and counted; neither loses the entries around it.
#[test]
fn hundred_megabyte_lines_are_read_resumed_and_counted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = SessionWriter::create(&path, &header("s1"), options(0)).expect("creates");
    let before = writer
        .append_message(
            Message::user("run the generator"),
            &ByteCounter,
            DEFAULT_IMAGE_TOKENS,
        )
        .expect("appends");
    let output = one_line(100 * MB);
    let result = Message::new(
        Role::Tool,
        vec![Block::ToolResult(ToolResult {
            tool_use_id: "call_1".into(),
            content: vec![ResultPart::Text(output.clone())],
            is_error: false,
        })],
    );
    let big = writer
        .append_message(result, &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("a 100 MB tool output is appended");
    let EntryBody::Message(stored) = &big.body else {
        panic!("a message entry")
    };
    let stored_tokens = stored.tokens.expect("a stored count").n;
    // ceil(100 MiB / 4) plus 4 tokens of message overhead.
    assert_eq!(stored_tokens, TokenCount::new(26_214_400 + 4));
    drop(writer);
    // A 100 MB line of garbage in the middle, then one more good entry.
    {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("opens");
        let mut garbage = one_line(100 * MB).into_bytes();
        garbage.push(b'\n');
        file.write_all(&garbage).expect("written");
    }
    let mut writer = SessionWriter::open(&path, options(1)).expect("reopens");
    assert_eq!(writer.leaf(), Some(&big.id));
    let after = writer
        .append(EntryBody::ModelChange { model: "m".into() })
        .expect("appends");
    drop(writer);

    let log = read_log(&path).expect("reads");
    assert_eq!(
        log.entries()
            .iter()
            .map(|l| l.entry.id.clone())
            .collect::<Vec<_>>(),
        vec![before.id.clone(), big.id.clone(), after.id.clone()]
    );
    assert_eq!(log.diagnostics().len(), 1, "{:?}", log.diagnostics());
    assert!(matches!(
        log.diagnostics()[0].kind,
        DiagnosticKind::InvalidJson { .. }
    ));
    assert_eq!(log.diagnostics()[0].location.line, Some(4));
    let EntryBody::Message(read_back) = &log.entry(&big.id).expect("kept").entry.body else {
        panic!("a message entry")
    };
    assert_eq!(read_back.message.content, big_content(&big));
    drop(log);

    let resumed = resume(&path).expect("resumes");
    assert_eq!(resumed.leaf.as_ref(), Some(&after.id));
    assert_eq!(resumed.stretch.len(), 3);
    assert!(
        resumed.diagnostics.len() == 1 && !resumed.full_scan,
        "{:?}",
        resumed.diagnostics
    );

    // The real BPE counts 100 MB on one line without panicking, in chunks.
    let counted = BpeCounter::new(Encoding::O200kBase).count_text(&output);
    assert!(
        counted.n.get() > 10 * MB as u64 && counted.n.get() < 100 * MB as u64,
        "{counted:?}"
    );
    let spaces = " ".repeat(100 * MB);
    let counted = BpeCounter::new(Encoding::O200kBase).count_text(&spaces);
    assert!(
        counted.n.get() > 0 && counted.n.get() <= 100 * MB as u64,
        "{counted:?}"
    );
}

fn big_content(entry: &soba_core::Entry) -> Vec<Block> {
    match &entry.body {
        EntryBody::Message(stored) => stored.message.content.clone(),
        _ => Vec::new(),
    }
}

/// SPEC §17: a 20 MB base64 image costs image tokens, not its bytes, and
/// survives the log byte for byte.
#[test]
fn a_twenty_megabyte_base64_image_costs_image_tokens() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s1.jsonl");
    let mut writer = SessionWriter::create(&path, &header("s1"), options(0)).expect("creates");
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let data: String = (0..20 * MB)
        .map(|idx| alphabet[(idx * 7 + idx / 64) % 64] as char)
        .collect();
    let message = Message::new(
        Role::User,
        vec![
            Block::Text("what is on this screenshot?".into()),
            Block::Image(Image {
                media_type: "image/png".into(),
                source: ImageSource::Data(data.clone()),
            }),
        ],
    );
    for counter in [
        &ByteCounter as &dyn TokenCounter,
        &BpeCounter::new(Encoding::O200kBase),
    ] {
        let counted = soba_core::tokens::count_message(counter, &message, DEFAULT_IMAGE_TOKENS);
        assert!(
            counted.n.get() < DEFAULT_IMAGE_TOKENS.get() + 20,
            "the image was counted by its bytes: {counted:?}"
        );
    }
    let entry = writer
        .append_message(message, &ByteCounter, DEFAULT_IMAGE_TOKENS)
        .expect("appends");
    drop(writer);
    let log = read_log(&path).expect("reads");
    assert!(log.is_clean(), "{:?}", log.diagnostics());
    assert_eq!(entries_of(log.entries()), vec![entry]);
    let resumed = resume(&path).expect("resumes");
    let EntryBody::Message(stored) = &resumed.stretch[0].entry.body else {
        panic!("a message")
    };
    assert!(matches!(
        &stored.message.content[1],
        Block::Image(Image { source: ImageSource::Data(read), .. }) if *read == data
    ));
}

/// SPEC §12: `/capsule load` refuses files over 1 MiB and over
/// min(32,000, floor(0.25 × autoLimit)) tokens, naming the numbers.
#[test]
fn oversized_capsule_files_are_refused_with_their_size() {
    let valid = std::fs::read_to_string(corpus_dir("capsule").join("bom-and-crlf.capsule.md"))
        .expect("the valid corpus capsule");
    let auto_limit = TokenCount::new(80_000);
    let huge = format!("{valid}\n{}", "word ".repeat(220_000));
    let err =
        soba_core::render::check_loadable(&huge, auto_limit, &ByteCounter).expect_err("over 1 MiB");
    assert_eq!(
        err.to_string(),
        format!(
            "capsule file is {} bytes, over the 1048576-byte limit: shorten it",
            huge.len()
        )
    );
    let long = format!("{valid}\n{}", "word ".repeat(20_000));
    let err = soba_core::render::check_loadable(&long, auto_limit, &ByteCounter)
        .expect_err("over the token limit");
    let tokens = ByteCounter.count_text(&long).n;
    assert_eq!(
        err.to_string(),
        format!(
            "capsule file has {tokens} tokens, over the 20,000-token limit for this model: shorten it"
        )
    );
}

/// The child side of the lock test: holds the session open for writing
/// until killed.
fn hold_the_lock(path: &str) {
    let writer = SessionWriter::open(path, options(3)).expect("the child opens the session");
    println!("LOCKED {}", writer.session_id());
    let _ = std::io::stdout().flush();
    std::thread::sleep(std::time::Duration::from_secs(60));
}

/// SPEC §3.2: a session held by another process gives a clear error naming
/// it; readers need no lock; the lock goes with the process, even a killed
/// one.
#[test]
fn a_session_locked_by_another_process_gives_a_clear_error() {
    if let Ok(path) = std::env::var("SOBA_LOCK_CHILD") {
        hold_the_lock(&path);
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir
        .path()
        .join("0194c2d0-e4c0-7000-8000-00000000beef.jsonl");
    let session = SessionId::parse("0194c2d0-e4c0-7000-8000-00000000beef").expect("an id");
    let mut header = header("s1");
    header.id = session.clone();
    let mut writer = SessionWriter::create(&path, &header, options(0)).expect("creates");
    let entry = writer
        .append(EntryBody::ModelChange { model: "m".into() })
        .expect("appends");
    drop(writer);

    // `/proc/self/exe` still runs this binary when a parallel build has
    // replaced the file meanwhile (the target directory is shared).
    let mut child = Command::new("/proc/self/exe")
        .args([
            "--exact",
            "bad_input::a_session_locked_by_another_process_gives_a_clear_error",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SOBA_LOCK_CHILD", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = std::io::BufReader::new(stdout).lines();
    // The test harness prints `test … ... ` before the child's own line.
    let locked = lines
        .find_map(|line| {
            let line = line.ok()?;
            line.find("LOCKED ").map(|at| line[at..].to_owned())
        })
        .expect("the child reports the lock");
    assert_eq!(locked, format!("LOCKED {session}"));

    let err = SessionWriter::open(&path, options(4)).expect_err("locked by the child");
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    // The holder is named (Linux): the child's pid, then its command name.
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "session {session} is already open for writing by another process (pid {}, ",
            child.id()
        )),
        "{message}"
    );
    assert!(
        message.ends_with(&format!(
            ") ({}); close it there or resume another session",
            path.display()
        )),
        "{message}"
    );
    let log = read_log(&path).expect("readers need no lock");
    assert_eq!(log.leaf(), Some(&entry.id));
    assert_eq!(resume(&path).expect("resumes").leaf, Some(entry.id.clone()));

    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let mut writer = SessionWriter::open(&path, options(5)).expect("the lock died with the child");
    assert_eq!(writer.leaf(), Some(&entry.id));
    writer
        .append(EntryBody::ModelChange { model: "n".into() })
        .expect("appends");
}

// ---------------------------------------------------------------------------
// Property tests over the fuzz targets' invariants (CI runs them at
// PROPTEST_CASES=256; the fuzzer runs the same checks for hours).

/// One edit of a seed input.
#[derive(Debug, Clone)]
enum Edit {
    /// Set the byte at a position (modulo the length).
    Flip(usize, u8),
    /// Insert bytes at a position.
    Insert(usize, Vec<u8>),
    /// Delete up to `len` bytes from a position.
    Delete(usize, usize),
    /// Cut the input at a position.
    Truncate(usize),
    /// Repeat the line holding a position.
    DuplicateLine(usize),
    /// Insert one of the nasty snippets at a position.
    Snippet(usize, usize),
}

const SNIPPETS: [&str; 16] = [
    "\n",
    "\r\n",
    "\u{feff}",
    "\"",
    "\\u0000",
    "\\ud800",
    "null",
    "{}",
    "[[[[[[[[",
    "1e999",
    "-0",
    "18446744073709551616",
    "\n---\n",
    "\n## Goal\n",
    "END-OF-SUMMARY",
    "\n```\n",
];

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Edit::Flip(at, byte)),
        (any::<usize>(), vec(any::<u8>(), 1..12)).prop_map(|(at, bytes)| Edit::Insert(at, bytes)),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Edit::Delete(at, len)),
        any::<usize>().prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), 0..SNIPPETS.len()).prop_map(|(at, idx)| Edit::Snippet(at, idx)),
    ]
}

/// Applies edits to a seed; positions wrap around its current length.
fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let at = |pos: usize, len: usize| if len == 0 { 0 } else { pos % (len + 1) };
        match edit {
            Edit::Flip(pos, byte) if !bytes.is_empty() => {
                let idx = pos % bytes.len();
                bytes[idx] = *byte;
            }
            Edit::Flip(..) => {}
            Edit::Insert(pos, inserted) => {
                let idx = at(*pos, bytes.len());
                bytes.splice(idx..idx, inserted.iter().copied());
            }
            Edit::Delete(pos, len) => {
                let idx = at(*pos, bytes.len());
                let end = (idx + len).min(bytes.len());
                bytes.drain(idx..end);
            }
            Edit::Truncate(pos) => bytes.truncate(at(*pos, bytes.len())),
            Edit::DuplicateLine(pos) if !bytes.is_empty() => {
                let idx = pos % bytes.len();
                let start = bytes[..idx]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |nl| nl + 1);
                let end = bytes[idx..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |nl| idx + nl + 1);
                let line = bytes[start..end].to_vec();
                bytes.splice(end..end, line);
            }
            Edit::DuplicateLine(_) => {}
            Edit::Snippet(pos, snippet) => {
                let idx = at(*pos, bytes.len());
                bytes.splice(idx..idx, SNIPPETS[*snippet].bytes());
            }
        }
    }
    bytes
}

/// A valid log of random entries, as bytes.
fn log_bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(strategy::entry(), 0..6).prop_map(|entries| {
        let mut text = wire::encode_header(&header("s1")).expect("encodes");
        text.push('\n');
        for entry in &entries {
            if matches!(entry.body, EntryBody::Unknown { .. }) {
                continue;
            }
            text.push_str(&wire::encode_entry(entry).expect("encodes"));
            text.push('\n');
        }
        text.into_bytes()
    })
}

/// The import corpus plus the committed SOBA fixtures, as seeds.
fn import_seeds() -> Vec<Vec<u8>> {
    cases("import")
        .iter()
        .map(|path| std::fs::read(path).expect("readable"))
        .filter(|bytes| bytes.len() < 64 * 1024)
        .collect()
}

fn capsule_seeds() -> Vec<Vec<u8>> {
    cases("capsule")
        .iter()
        .map(|path| std::fs::read(path).expect("readable"))
        .collect()
}

/// Summaries built from the eight headings, fences, markers and noise.
fn summary() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        proptest::sample::select(soba_core::capsule::NARRATIVE_HEADINGS.to_vec())
            .prop_map(|heading| format!("## {heading}\n")),
        "[a-zA-Z0-9 .,:/`*_#-]{0,40}\n",
        Just("```\n".to_owned()),
        Just("```markdown\n".to_owned()),
        Just("END-OF-SUMMARY\n".to_owned()),
        Just("**END-OF-SUMMARY**".to_owned()),
        Just("Generating…".to_owned()),
        Just("   \n".to_owned()),
        Just("~~~\n".to_owned()),
    ];
    (any::<u16>(), vec(piece, 0..40)).prop_map(|(span, pieces)| {
        let mut bytes = span.to_be_bytes().to_vec();
        bytes.extend(pieces.concat().into_bytes());
        bytes
    })
}

proptest! {
    /// The log reader's laws on valid logs and damaged ones.
    #[test]
    fn the_log_reader_keeps_its_laws(seed in log_bytes(), edits in vec(edit(), 0..6)) {
        fuzz_checks::check_log(&seed);
        fuzz_checks::check_log(&apply(seed, &edits));
    }

    /// The importers' laws on damaged corpus files, under every format.
    #[test]
    fn the_importers_keep_their_laws(
        seed in proptest::sample::select(import_seeds()),
        selector in any::<u8>(),
        edits in vec(edit(), 0..6),
    ) {
        let mut input = vec![selector];
        input.extend(apply(seed, &edits));
        fuzz_checks::check_import(&input);
    }

    /// The capsule parser's and the loaded capsule's laws on damaged files.
    #[test]
    fn the_capsule_parser_keeps_its_laws(
        seed in proptest::sample::select(capsule_seeds()),
        edits in vec(edit(), 0..6),
    ) {
        fuzz_checks::check_capsule_file(&apply(seed, &edits));
    }

    /// The guards' laws on built and damaged summaries.
    #[test]
    fn the_guards_keep_their_laws(seed in summary(), edits in vec(edit(), 0..4)) {
        fuzz_checks::check_guard(&seed);
        fuzz_checks::check_guard(&apply(seed, &edits));
    }
}

/// Inputs that once broke a fuzz invariant (`fuzz/regressions/`, named
/// `<target>-<what>`), each checked by its target's function.
#[test]
fn fuzz_regressions_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let mut n_checked = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions exists") {
        let path = entry.expect("a folder entry").path();
        let bytes = std::fs::read(&path).expect("readable");
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        match name.split('-').next() {
            Some("log_reader") => fuzz_checks::check_log(&bytes),
            Some("importers") => fuzz_checks::check_import(&bytes),
            Some("capsule_file") => fuzz_checks::check_capsule_file(&bytes),
            Some("guard") => fuzz_checks::check_guard(&bytes),
            _ => panic!("{name}: regression files start with their target's name"),
        }
        n_checked += 1;
    }
    assert!(n_checked >= 1, "no regression inputs in {}", dir.display());
}
