//! Token counting throughput on one core (SPEC §16: ≥ 25 MB/s over the
//! shared trace corpus concatenated). Reads `../shared/traces/raw/` when it
//! is present beside the repository, else a generated mixed corpus (code,
//! JSON, prose, CJK). Run with `cargo bench -p soba-core --bench tokens`;
//! throughput is printed by criterion as MiB/s.

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use soba_core::Encoding;
use soba_core::tokens::{BpeCounter, ByteCounter, TokenCounter};

fn corpus() -> (String, &'static str) {
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/raw");
    let mut files = Vec::new();
    let mut stack = vec![raw];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in read.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut text = String::new();
    for file in &files {
        if let Ok(bytes) = std::fs::read(file) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    if !text.is_empty() {
        return (text, "shared trace corpus");
    }
    eprintln!("../shared/traces not found: benchmarking a generated corpus instead");
    let unit = "fn main() { let x = vec![1, 2, 3]; println!(\"{:?}\", x); }\n\
                {\"role\":\"tool\",\"content\":\"Process exited with code 1\\nOutput:\\nerror[E0308]\"}\n\
                The quick brown fox jumps over the lazy dog while the compiler complains.\n\
                上下文压缩不应悄悄丢失工作。\n";
    (unit.repeat(120_000), "generated corpus")
}

fn bench(c: &mut Criterion) {
    let (text, name) = corpus();
    eprintln!("{name}: {} bytes", text.len());
    let mut group = c.benchmark_group("tokens");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    // Blocks of about 256 KiB, as messages arrive: the corpus as one text
    // would be above the 8 MiB estimate threshold and never reach the BPE.
    let mut blocks: Vec<&str> = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(256 * 1024);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (block, tail) = rest.split_at(cut);
        blocks.push(block);
        rest = tail;
    }
    let bpe = BpeCounter::new(Encoding::O200kBase);
    bpe.count_text("warm up the encoder");
    let count_all = |counter: &dyn TokenCounter| {
        blocks
            .iter()
            .map(|block| counter.count_text(block).n.get())
            .sum::<u64>()
    };
    eprintln!("o200k tokens: {}", count_all(&bpe));
    group.bench_function("o200k_count", |b| {
        b.iter(|| std::hint::black_box(count_all(&bpe)))
    });
    // The baseline in the same run: tiktoken-rs's own encoder on the same
    // 64 KiB pieces.
    let tiktoken = tiktoken_rs::o200k_base().expect("o200k_base loads");
    let tiktoken_pieces: Vec<&str> = blocks
        .iter()
        .flat_map(|block| soba_core::tokens::pieces(block))
        .collect();
    group.bench_function("tiktoken_encode_ordinary", |b| {
        b.iter(|| {
            let n: usize = tiktoken_pieces
                .iter()
                .map(|piece| tiktoken.encode_ordinary(piece).len())
                .sum();
            std::hint::black_box(n)
        })
    });
    group.bench_function("byte_estimate_baseline", |b| {
        b.iter(|| std::hint::black_box(count_all(&ByteCounter)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
