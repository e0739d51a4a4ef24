//! A capsule with rehydration for a 200k-token session (issue 32: ≤ 50 ms):
//! facts, the deterministic capsule, then the files modified before it read
//! from memory, chosen, cut and counted; the same without rehydration as
//! the baseline, in the same run.

use std::collections::{HashMap, HashSet};
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use soba_core::builder::{BuildOptions, build_deterministic};
use soba_core::capsule::{Quality, Trigger};
use soba_core::config::RehydrateConfig;
use soba_core::entry::{Entry, EntryBody, MessageEntry};
use soba_core::facts::{FactsConfig, FactsInput, extract};
use soba_core::id::{EntryId, IdKind};
use soba_core::message::{Block, Message, Role, ToolInput, ToolUse};
use soba_core::rehydrate::{self, FileContent, FileProbe, FileSource};
use soba_core::tokens::{BpeCounter, Encoding, TokenCount, TokenCounter};

fn entry(n: &mut u128, message: Message) -> Entry {
    *n += 1;
    Entry {
        id: EntryId::from_uuid(IdKind::Entry, *n),
        parent_id: None,
        timestamp: String::new(),
        body: EntryBody::Message(MessageEntry {
            message,
            tokens: None,
        }),
    }
}

/// 20 turns of 20 tool calls (reads, edits, test runs) with ~2 KB results:
/// ~200k tokens, 100 files edited.
fn session() -> Vec<Entry> {
    let mut n = 0;
    let mut entries = Vec::new();
    let body: String = (0..40)
        .map(|i| format!("    let value_{i} = compute(&input, {i}); // step {i}\n"))
        .collect();
    for turn in 0..20 {
        entries.push(entry(
            &mut n,
            Message::user(format!("Turn {turn}: please continue with module {turn}.")),
        ));
        for step in 0..20 {
            let id = format!("call_{turn}_{step}");
            let (name, input) = match step % 4 {
                0 => (
                    "read_file",
                    json!({"path": format!("src/m{turn}/f{step}.rs")}),
                ),
                1 => (
                    "edit_file",
                    json!({"path": format!("src/m{turn}/f{step}.rs"), "oldString": "a", "newString": "b"}),
                ),
                2 => ("bash", json!({"command": format!("cargo test -p m{turn}")})),
                _ => (
                    "bash",
                    json!({"command": format!("cat src/m{turn}/g{step}.rs | head -n 80")}),
                ),
            };
            let call = ToolUse {
                id: id.clone(),
                name: name.into(),
                input: ToolInput::from_value(input),
            };
            entries.push(entry(
                &mut n,
                Message::new(
                    Role::Assistant,
                    vec![Block::Text("Next step.".into()), Block::ToolUse(call)],
                ),
            ));
            entries.push(entry(
                &mut n,
                Message::tool_result(id, body.clone(), step % 7 == 3),
            ));
        }
    }
    entries
}

/// Every edited file in memory: ~40 KB of code each (~9,000 tokens), so
/// each shown file is cut to its 5,000-token budget — the costliest case.
struct Files(HashMap<String, String>);

impl FileSource for Files {
    fn read(&self, path: &str) -> FileContent {
        match self.0.get(path) {
            Some(text) => FileContent::Text(text.clone()),
            None => FileContent::Gone,
        }
    }

    fn probe(&self, path: &str) -> FileProbe {
        match self.0.get(path) {
            Some(text) => FileProbe::Bytes(text.len() as u64),
            None => FileProbe::Gone,
        }
    }
}

fn files() -> Files {
    let mut map = HashMap::new();
    for turn in 0..20 {
        for step in (1..20).step_by(4) {
            let text: String = (0..800)
                .map(|i| format!("fn f_{turn}_{step}_{i}(x: u64) -> u64 {{ x + {i} }}\n"))
                .collect();
            map.insert(format!("src/m{turn}/f{step}.rs"), text);
        }
    }
    Files(map)
}

fn bench(c: &mut Criterion) {
    let counter = BpeCounter::new(Encoding::O200kBase);
    let span = session();
    let total: u64 = span
        .iter()
        .map(|e| match &e.body {
            EntryBody::Message(m) => {
                counter.count_text(&m.message.text()).n.get()
                    + m.message
                        .tool_results()
                        .map(|r| counter.count_text(&r.text()).n.get())
                        .sum::<u64>()
            }
            _ => 0,
        })
        .sum();
    let files = files();
    let retained = HashSet::new();
    let options = BuildOptions {
        auto_limit: TokenCount::new(152_000),
        trigger: Trigger::AutoThreshold,
        quality: Quality::Full,
        instructions: None,
    };
    let config = RehydrateConfig::default();
    let input = FactsInput {
        tail: &[],
        span: &span,
        previous: None,
        retained: &retained,
        cwd: Some("/work/repo"),
    };
    let capsule = || {
        let facts = extract(&input, &FactsConfig::default(), &counter);
        build_deterministic(&facts, None, &options, &counter)
    };
    let rehydration = || {
        let candidates = rehydrate::candidates(&span, None, Some("/work/repo"));
        rehydrate::select(&candidates, &files, &[], &config, &counter)
    };
    let shown = rehydration();
    eprintln!(
        "session: {} entries, {total} tokens; capsule {} tokens; rehydrated {} files ({} cut) + {} paths, {} tokens",
        span.len(),
        capsule().tokens,
        shown.files.len(),
        shown.files.iter().filter(|file| file.is_cut()).count(),
        shown.paths_only.len(),
        rehydrate::tokens(&shown, &counter)
    );
    c.bench_function("capsule without rehydration, 200k tokens", |b| {
        b.iter(|| black_box(capsule()))
    });
    c.bench_function("capsule with rehydration, 200k tokens", |b| {
        b.iter(|| {
            let built = capsule();
            let shown = rehydration();
            black_box((built, rehydrate::tokens(&shown, &counter)))
        })
    });
    c.bench_function("rehydration estimate for the planner, 200k tokens", |b| {
        b.iter(|| {
            let candidates = rehydrate::candidates(&span, None, Some("/work/repo"));
            black_box(rehydrate::estimate(&candidates, &files, &config, &counter))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
