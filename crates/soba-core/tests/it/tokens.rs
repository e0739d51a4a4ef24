//! The fast BPE counter against tiktoken-rs on the shared trace corpus
//! (SPEC §16: a faster backend behind `TokenCounter` is checked by a
//! differential test). Skips, saying why, when `../shared/traces` is absent.

use std::path::Path;

use soba_core::Encoding;
use soba_core::bpe::fast;
use soba_core::tokens::pieces;

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn fast_counter_equals_tiktoken_on_the_shared_corpus() {
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/raw");
    if !raw.is_dir() {
        eprintln!("skipped: ../shared/traces not found beside the repository");
        return;
    }
    let mut files = Vec::new();
    let mut stack = vec![raw];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path)
            } else {
                files.push(path)
            }
        }
    }
    files.sort();
    let encodings = [
        (Encoding::O200kBase, tiktoken_rs::o200k_base().unwrap()),
        (Encoding::Cl100kBase, tiktoken_rs::cl100k_base().unwrap()),
    ];
    for (encoding, core) in &encodings {
        let fast = fast(*encoding).unwrap();
        let (mut n_pieces, mut n_tokens) = (0usize, 0u64);
        for file in &files {
            let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
            for piece in pieces(&text) {
                let expected = core.encode_ordinary(piece).len() as u64;
                assert_eq!(
                    fast.count(piece),
                    expected,
                    "{encoding:?} differs in {}",
                    file.display()
                );
                n_pieces += 1;
                n_tokens += expected;
            }
        }
        eprintln!("{encoding:?}: {n_pieces} pieces, {n_tokens} tokens, identical");
    }
}
