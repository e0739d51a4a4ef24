//! Fact extraction plus the deterministic capsule over about one million
//! tokens of history (SPEC §16: plan + deterministic capsule ≤ 100 ms).

use std::collections::HashSet;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use soba_core::builder::{BuildOptions, build_deterministic};
use soba_core::capsule::{Quality, Trigger};
use soba_core::entry::{Entry, EntryBody, MessageEntry};
use soba_core::facts::{FactsConfig, FactsInput, extract};
use soba_core::id::{EntryId, IdKind};
use soba_core::message::{Block, Message, Role, ToolInput, ToolUse};
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

/// A session of 100 turns, each with 20 tool calls (reads, edits and test
/// runs) whose results are ~2 KB of code-like text: ~1 M tokens.
fn session() -> Vec<Entry> {
    let mut n = 0;
    let mut entries = Vec::new();
    let body: String = (0..40)
        .map(|i| format!("    let value_{i} = compute(&input, {i}); // step {i}\n"))
        .collect();
    for turn in 0..100 {
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

fn bench(c: &mut Criterion) {
    let counter = BpeCounter::new(Encoding::O200kBase);
    let span = session();
    let text_bytes: usize = span
        .iter()
        .map(|e| match &e.body {
            EntryBody::Message(m) => {
                m.message.text().len()
                    + m.message
                        .tool_results()
                        .map(|r| r.text().len())
                        .sum::<usize>()
            }
            _ => 0,
        })
        .sum();
    // Load the encoder before measuring.
    black_box(counter.count_text("warm up"));
    eprintln!("span: {} entries, {text_bytes} bytes of text", span.len());
    let retained = HashSet::new();
    let options = BuildOptions {
        auto_limit: TokenCount::new(152_000),
        trigger: Trigger::HardLimit,
        quality: Quality::Degraded,
        instructions: None,
    };
    c.bench_function("extract only, ~1M tokens", |b| {
        b.iter(|| {
            let input = FactsInput {
                tail: &[],
                span: &span,
                previous: None,
                retained: &retained,
                cwd: Some("/work/repo"),
            };
            black_box(extract(&input, &FactsConfig::default(), &counter))
        })
    });
    let input = FactsInput {
        tail: &[],
        span: &span,
        previous: None,
        retained: &retained,
        cwd: Some("/work/repo"),
    };
    let facts = extract(&input, &FactsConfig::default(), &counter);
    let built = build_deterministic(&facts, None, &options, &counter);
    eprintln!("capsule: {} tokens, bound {}", built.tokens, built.bound);
    c.bench_function("deterministic capsule only, ~1M tokens", |b| {
        b.iter(|| black_box(build_deterministic(&facts, None, &options, &counter)))
    });
    c.bench_function("extract + deterministic capsule, ~1M tokens", |b| {
        b.iter(|| {
            let input = FactsInput {
                tail: &[],
                span: &span,
                previous: None,
                retained: &retained,
                cwd: Some("/work/repo"),
            };
            let facts = extract(&input, &FactsConfig::default(), &counter);
            black_box(build_deterministic(&facts, None, &options, &counter))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
