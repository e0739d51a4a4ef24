//! One damaged field never disconnects the path: a log with any one line
//! mutated (a figure out of range, an unknown enum value, a wrong JSON
//! type, at a field chosen at random) keeps every other entry on the path,
//! and the full reader, resume and the writer agree on it.

use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;
use soba_core::{Entry, EntryBody, EntryId, IdKind};
use soba_store::wire::{encode_entry, encode_header};
use soba_store::{DiagnosticKind, SessionWriter, read_log, resume_with};

use crate::strategy;
use crate::support::{entries_of, header, options, writable};

/// The bodies of a linear log: every writable type but `leaf` entries,
/// which move the position instead of extending the path.
fn chain_body() -> impl Strategy<Value = EntryBody> {
    strategy::body().prop_filter("a writable body on the path", |body| {
        writable(body) && !matches!(body, EntryBody::Leaf { .. })
    })
}

/// What replaces the chosen field.
#[derive(Debug, Clone)]
enum Mutation {
    /// A negative figure.
    Negative,
    /// A figure no count holds.
    Huge,
    /// A name no version knows (an unknown enum value, or a wrong type).
    UnknownName,
    /// A value of the wrong JSON type.
    WrongType(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::Negative),
        Just(Mutation::Huge),
        Just(Mutation::UnknownName),
        (0u8..3).prop_map(Mutation::WrongType),
    ]
}

impl Mutation {
    fn value(&self) -> Value {
        match self {
            Mutation::Negative => Value::from(-5000),
            Mutation::Huge => serde_json::json!(1.5e300),
            Mutation::UnknownName => Value::from("zz_from_a_newer_soba"),
            // Not `null`: that is a valid value of every optional field
            // (a `firstKeptEntryId` of `null` rightly keeps nothing).
            Mutation::WrongType(0) => Value::Object(serde_json::Map::new()),
            Mutation::WrongType(1) => Value::Array(Vec::new()),
            Mutation::WrongType(_) => Value::Bool(true),
        }
    }
}

/// Every JSON pointer into `value` below `prefix` (objects and arrays
/// included, so a whole section can be replaced).
fn pointers(value: &Value, prefix: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let pointer = format!("{prefix}/{}", key.replace('~', "~0").replace('/', "~1"));
                out.push(pointer.clone());
                pointers(child, pointer, out);
            }
        }
        Value::Array(items) => {
            for (idx, child) in items.iter().enumerate() {
                let pointer = format!("{prefix}/{idx}");
                out.push(pointer.clone());
                pointers(child, pointer, out);
            }
        }
        _ => {}
    }
}

/// Builds a linear chain of entries with the given bodies.
fn chain(bodies: Vec<EntryBody>) -> Vec<Entry> {
    let mut parent: Option<EntryId> = None;
    bodies
        .into_iter()
        .enumerate()
        .map(|(idx, body)| {
            let kind = if matches!(body, EntryBody::Capsule(_)) {
                IdKind::Capsule
            } else {
                IdKind::Entry
            };
            let id = EntryId::from_uuid(
                kind,
                0x0194_c2d0_e4c0_7000_8000_0000_0000_0000 + idx as u128,
            );
            Entry {
                id: id.clone(),
                parent_id: parent.replace(id),
                timestamp: "2025-01-01T00:00:00Z".to_owned(),
                body,
            }
        })
        .collect()
}

fn write(path: &Path, lines: &[String]) {
    let mut text = encode_header(&header("0194c2d0-e4c0-7000-8000-000000000001")).expect("encodes");
    text.push('\n');
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(path, text).expect("written");
}

fn ids<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<EntryId> {
    entries.into_iter().map(|entry| entry.id.clone()).collect()
}

proptest! {
    #[test]
    fn one_damaged_field_never_disconnects_the_path(
        bodies in vec(chain_body(), 2..7),
        line_pick in any::<Index>(),
        field_pick in any::<Index>(),
        mutation in mutation(),
        block_size in prop_oneof![1usize..64, Just(soba_store::resume::BLOCK_SIZE)],
    ) {
        let entries = chain(bodies);
        let lines: Vec<String> = entries.iter().map(|entry| encode_entry(entry).expect("encodes")).collect();
        let dir = tempfile::tempdir().expect("a temp dir");
        let intact_path = dir.path().join("intact.jsonl");
        write(&intact_path, &lines);
        let intact = read_log(&intact_path).expect("reads");
        prop_assert!(intact.is_clean(), "{:?}", intact.diagnostics());

        // Mutate one field of one line, never its `id` or `parentId`.
        let damaged_idx = line_pick.index(lines.len());
        let mut value: Value = serde_json::from_str(&lines[damaged_idx]).expect("JSON");
        let mut fields = Vec::new();
        pointers(&value, String::new(), &mut fields);
        fields.retain(|pointer| pointer != "/id" && pointer != "/parentId");
        let field = fields[field_pick.index(fields.len())].clone();
        *value.pointer_mut(&field).expect("the field exists") = mutation.value();
        let mut mutated = lines.clone();
        mutated[damaged_idx] = serde_json::to_string(&value).expect("encodes");
        let path = dir.path().join("s.jsonl");
        write(&path, &mutated);

        // The full reader keeps every entry in place on the path.
        let log = read_log(&path).expect("reads");
        let on_path: Vec<Entry> = log.path().into_iter().map(|logged| logged.entry.clone()).collect();
        prop_assert_eq!(ids(&on_path), ids(&entries), "{} set to {:?}", field, mutation);
        for (idx, (read, written)) in on_path.iter().zip(&entries).enumerate() {
            if idx != damaged_idx {
                prop_assert_eq!(read, written);
            }
        }
        // Only the mutated line is reported, as repaired or kept damaged.
        let damaged_line = damaged_idx as u64 + 2;
        for diagnostic in log.diagnostics() {
            prop_assert_eq!(diagnostic.location.line, Some(damaged_line), "{}", diagnostic);
            prop_assert!(
                matches!(
                    diagnostic.kind,
                    DiagnosticKind::RepairedField { .. } | DiagnosticKind::DamagedEntry { .. }
                ),
                "{}",
                diagnostic
            );
        }
        // Resume and the writer agree with it, and the resumed stretch
        // holds every entry the intact log's stretch held.
        let resumed = resume_with(&path, soba_store::ResumeOptions { block_size }).expect("resumes");
        prop_assert_eq!(resumed.leaf.as_ref(), log.leaf());
        prop_assert_eq!(entries_of(&resumed.stretch), entries_of(log.live_stretch()));
        prop_assert!(!resumed.full_scan);
        // That stretch is the intact log's, with the damaged entry in the
        // place of an entry of unknown type when it could not be used (a
        // damaged capsule is no capsule boundary).
        let placeholder = matches!(
            on_path[damaged_idx].body,
            EntryBody::Damaged { .. } | EntryBody::Unknown { .. }
        );
        let mut expected_lines = lines.clone();
        if placeholder {
            let entry = &entries[damaged_idx];
            expected_lines[damaged_idx] = encode_entry(&Entry {
                body: EntryBody::Unknown { type_name: "x_placeholder".into() },
                ..entry.clone()
            }).expect("encodes");
        }
        let expected_path = dir.path().join("expected.jsonl");
        write(&expected_path, &expected_lines);
        let expected = read_log(&expected_path).expect("reads");
        prop_assert_eq!(
            ids(entries_of(&resumed.stretch).iter()),
            ids(entries_of(expected.live_stretch()).iter())
        );
        let writer = SessionWriter::open(&path, options(7)).expect("opens");
        prop_assert_eq!(writer.leaf(), log.leaf());
    }
}
