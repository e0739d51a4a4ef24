//! The invariants SOBA's parsers must keep on any input (SPEC §17): one
//! function per fuzz target, each panicking on a broken invariant.
//!
//! The cargo-fuzz targets in `fuzz_targets/` call these functions, and the
//! workspace's property tests include this same file
//! (`crates/soba-store/tests/it/bad_input.rs`, `#[path]`), so CI checks the
//! same laws on every run that the fuzzer checks for hours.
//!
//! - [`check_log`]: the tolerant JSONL reader (`SessionLog`), the wire
//!   round trip of every entry it accepts, and the torn-tail rule.
//! - [`check_import`]: every importer, chosen by the first input byte.
//! - [`check_capsule_file`]: the `.capsule.md` parser, its size checks, the
//!   untrusted-data delimiters of a loaded capsule, and redaction.
//! - [`check_guard`]: the summary normaliser and the guards.

use std::io::Cursor;
use std::path::Path;

use soba_core::capsule::NARRATIVE_HEADINGS;
use soba_core::tokens::ByteCounter;
use soba_core::{EntryBody, TokenCount, TokenCounter};
use soba_store::import::{Format, ImportOptions, import_as, import_bytes};
use soba_store::{SessionLog, wire};

/// Checks the session-log reader on `data`.
///
/// - reading from memory and from a reader give the same log;
/// - a torn last line (no `\n`) contributes no entry and no header;
/// - the path chains parent ids and never holds a `leaf` entry; the live
///   stretch is a suffix of the path;
/// - every accepted entry survives encode → decode unchanged;
/// - every diagnostic renders.
pub fn check_log(data: &[u8]) {
    let log = SessionLog::from_bytes(data);
    let streamed = match SessionLog::from_reader(Cursor::new(data)) {
        Ok(log) => log,
        Err(err) => panic!("reading from memory cannot fail: {err}"),
    };
    assert_eq!(log.header(), streamed.header(), "header differs by reader");
    assert_eq!(
        log.entries(),
        streamed.entries(),
        "entries differ by reader"
    );
    assert_eq!(
        log.diagnostics(),
        streamed.diagnostics(),
        "diagnostics differ by reader"
    );
    assert_eq!(log.leaf(), streamed.leaf(), "leaf differs by reader");

    if data.last().is_some_and(|&b| b != b'\n') {
        let complete = data
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(&data[..0], |nl| &data[..=nl]);
        let without_tail = SessionLog::from_bytes(complete);
        assert_eq!(
            log.entries(),
            without_tail.entries(),
            "a torn last line changed the entries"
        );
        assert_eq!(
            log.header(),
            without_tail.header(),
            "a torn last line changed the header"
        );
    }

    for logged in log.entries() {
        let found = log.entry(&logged.entry.id).map(|found| &found.entry.id);
        assert_eq!(found, Some(&logged.entry.id), "the index lost an entry");
    }
    let path = log.path();
    assert!(path.len() <= log.entries().len(), "the path loops");
    for pair in path.windows(2) {
        assert_eq!(
            pair[1].entry.parent_id.as_ref(),
            Some(&pair[0].entry.id),
            "the path does not chain parents"
        );
    }
    assert!(
        path.iter()
            .all(|logged| !matches!(logged.entry.body, EntryBody::Leaf { .. })),
        "a leaf entry is on the path"
    );
    let stretch = log.live_stretch();
    assert!(
        stretch.len() <= path.len(),
        "the live stretch outgrew the path"
    );
    let suffix = &path[path.len() - stretch.len()..];
    assert!(
        stretch
            .iter()
            .zip(suffix)
            .all(|(a, b)| a.entry.id == b.entry.id),
        "the live stretch is not a suffix of the path"
    );

    if let Some(header) = log.header() {
        let line = match wire::encode_header(header) {
            Ok(line) => line,
            Err(err) => panic!("an accepted header does not encode: {err}"),
        };
        match wire::decode_header(&line) {
            Ok(again) => assert_eq!(&again, header, "the header does not round-trip"),
            Err(err) => panic!("an encoded header does not decode: {err}\n{line}"),
        }
    }
    for logged in log.entries() {
        if logged.raw.is_some() {
            continue; // unknown types are kept verbatim, never re-encoded
        }
        round_trip(&logged.entry);
    }
    for diagnostic in log.diagnostics() {
        assert!(!diagnostic.to_string().is_empty());
    }
}

/// Asserts that an entry encodes and decodes back to itself.
fn round_trip(entry: &soba_core::Entry) {
    let line = match wire::encode_entry(entry) {
        Ok(line) => line,
        Err(err) => panic!("an accepted entry does not encode: {err}"),
    };
    assert!(!line.contains('\n'), "an encoded entry spans lines");
    match wire::decode_entry(&line) {
        Ok(again) => assert_eq!(
            &again.entry, entry,
            "the entry does not round-trip:\n{line}"
        ),
        Err(err) => panic!("an encoded entry does not decode: {err}\n{line}"),
    }
}

/// The importer the first byte of a fuzz input selects: detection, or one
/// format forced.
pub fn import_choice(selector: u8) -> Option<Format> {
    let choice = usize::from(selector) % (Format::ALL.len() + 1);
    choice.checked_sub(1).map(|idx| Format::ALL[idx])
}

/// Checks the importers on `data`: the first byte picks detection or one
/// format; the rest is the file.
///
/// - an import either fails with a message or gives sessions whose entries
///   chain (each the parent of the next) and survive the wire round trip;
/// - recorded inferences point at assistant entries inside the session.
pub fn check_import(data: &[u8]) {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let source = Path::new("fuzz-input.jsonl");
    let options = ImportOptions::with_fallback_ms(1_735_689_600_000);
    let result = match import_choice(selector) {
        None => import_bytes(bytes, source, &options),
        Some(format) => import_as(bytes, format, source, &options),
    };
    let sessions = match result {
        Ok(sessions) => sessions,
        Err(err) => {
            assert!(!err.to_string().is_empty(), "an empty import error");
            return;
        }
    };
    for session in &sessions {
        for (idx, entry) in session.entries.iter().enumerate() {
            let expected_parent = idx.checked_sub(1).map(|prev| &session.entries[prev].id);
            assert_eq!(
                entry.parent_id.as_ref(),
                expected_parent,
                "imported entry {idx} does not follow the previous one"
            );
            if !matches!(entry.body, EntryBody::Unknown { .. }) {
                round_trip(entry);
            }
        }
        for inference in &session.inferences {
            assert!(
                inference.first_entry <= inference.last_entry
                    && inference.last_entry < session.entries.len(),
                "an inference points outside the session: {inference:?}"
            );
        }
        for diagnostic in &session.stats.diagnostics {
            assert!(!diagnostic.is_empty(), "an empty import diagnostic");
        }
    }
}

/// Checks the `.capsule.md` parser and the loaded-capsule rendering on
/// `data` (read as lossy UTF-8).
///
/// - parsing either fails with a message or finds schemaVersion 1;
/// - `check_loadable` agrees with the parser whenever the size checks pass;
/// - a loaded capsule keeps the text verbatim between its delimiters, and
///   the text cannot close the block itself;
/// - redaction leaves nothing a second pass would redact, and a file that
///   parsed parses after redaction with the same sections.
pub fn check_capsule_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = soba_core::render::parse_capsule_file(&text);
    match &parsed {
        Ok(file) => assert_eq!(file.front.schema_version, 1),
        Err(err) => assert!(!err.to_string().is_empty(), "an empty capsule error"),
    }
    let auto_limit = TokenCount::new(80_000);
    let checked = soba_core::render::check_loadable(&text, auto_limit, &ByteCounter);
    let within_limits = text.len() <= 1 << 20
        && ByteCounter.count_text(&text).n <= soba_core::render::load_token_limit(auto_limit);
    if within_limits {
        assert_eq!(checked, parsed, "check_loadable disagrees with the parser");
    } else {
        assert!(checked.is_err(), "an oversized capsule file was accepted");
    }

    assert_delimited(&text);

    let redacted = soba_core::redact::redact(&text);
    let again = soba_core::redact::redact(&redacted.text);
    assert_eq!(
        again.count, 0,
        "redacted text still holds secrets: {:?}",
        again.by_kind
    );
    assert_eq!(
        redacted.count,
        redacted.by_kind.iter().map(|(_, n)| n).sum::<usize>(),
        "redaction counts do not add up"
    );
    // Redaction replaces only secret spans, so a file that parsed still
    // parses, with the same sections.
    if let Ok(file) = &parsed {
        let headings = |sections: &[soba_core::render::Section]| {
            sections
                .iter()
                .map(|section| section.heading.clone())
                .collect::<Vec<_>>()
        };
        match soba_core::render::parse_capsule_file(&redacted.text) {
            Ok(after) => assert_eq!(
                headings(&after.sections),
                headings(&file.sections),
                "redaction changed the sections"
            ),
            Err(err) => panic!("a capsule file no longer parses once redacted: {err}"),
        }
    }
}

/// Asserts that a loaded capsule renders its file name line and `text`
/// verbatim inside delimiters the text cannot forge, and returns the
/// rendering.
pub fn assert_delimited(text: &str) -> String {
    let rendered = soba_core::render::loaded_capsule(".soba/capsules/fuzz.capsule.md", text);
    let file_line = "File: .soba/capsules/fuzz.capsule.md\n\n";
    let Some(end_line) = rendered.lines().last() else {
        panic!("a loaded capsule rendered empty");
    };
    let tag = end_line
        .strip_prefix("<<<END CAPSULE DATA ")
        .and_then(|rest| rest.strip_suffix(">>>"));
    let Some(tag) = tag else {
        panic!("the loaded capsule does not end with its END line: {end_line:?}");
    };
    assert!(
        !tag.is_empty() && !text.contains(tag),
        "the text holds its own tag"
    );
    let open = format!("<<<CAPSULE DATA {tag}>>>\n");
    let close = format!("\n<<<END CAPSULE DATA {tag}>>>");
    assert_eq!(rendered.matches(&open).count(), 1, "one opening delimiter");
    assert_eq!(rendered.matches(&close).count(), 1, "one closing delimiter");
    let start = rendered.find(&open).map(|idx| idx + open.len());
    let end = rendered.rfind(&close);
    match (start, end) {
        (Some(start), Some(end)) if start <= end => {
            let body = &rendered[start..end];
            let Some(body) = body.strip_prefix(file_line) else {
                panic!("the block does not start with the file name: {body:?}");
            };
            assert_eq!(body, text.trim_end(), "the text changed")
        }
        // Empty text: the two delimiters share the newline between them.
        (Some(start), Some(end)) if start == end + 1 => assert_eq!(text.trim_end(), ""),
        _ => panic!("the delimiters are out of order"),
    }
    rendered
}

/// Checks the summary normaliser and guards on `data`: the first two bytes
/// give the span size in tokens, the rest is the model's output.
///
/// - normalising is idempotent and leaves no surrounding whitespace;
/// - an accepted summary is smaller than its span and names all eight
///   headings; a rejection names its guard.
pub fn check_guard(data: &[u8]) {
    let (span, raw) = match data {
        [high, low, rest @ ..] => (u64::from(u16::from_be_bytes([*high, *low])), rest),
        _ => (0, data),
    };
    let raw = String::from_utf8_lossy(raw);
    let normalized = soba_core::guard::normalize(&raw);
    assert_eq!(
        soba_core::guard::normalize(&normalized),
        normalized,
        "normalize is not idempotent"
    );
    assert_eq!(normalized.trim(), normalized, "normalize left whitespace");
    let _ = soba_core::guard::is_placeholder(&raw);
    let _ = soba_core::guard::parse_narrative(&normalized);
    let span = TokenCount::new(span);
    match soba_core::guard::check_summary(&raw, span, &ByteCounter) {
        Ok(_) => {
            assert!(
                ByteCounter.count_text(&normalized).n < span,
                "an accepted summary is not smaller than its span"
            );
            assert!(
                !soba_core::guard::is_placeholder(&normalized),
                "a placeholder was accepted"
            );
            let headings: Vec<&str> = soba_core::render::split_sections(&normalized)
                .iter()
                .filter_map(|section| {
                    section
                        .heading
                        .as_deref()
                        .and_then(soba_core::guard::narrative_heading)
                })
                .collect();
            for heading in NARRATIVE_HEADINGS {
                assert!(
                    headings.contains(&heading),
                    "accepted without `## {heading}`"
                );
            }
        }
        Err(rejection) => assert!(!rejection.name().is_empty(), "a nameless rejection"),
    }
}
