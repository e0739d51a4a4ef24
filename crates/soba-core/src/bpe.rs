//! A faster exact BPE counter behind [`TokenCounter`](crate::tokens::TokenCounter) (SPEC §16 allows
//! one, checked against tiktoken-rs by a differential test).
//!
//! It gives the same counts as tiktoken-rs's `encode_ordinary(text).len()`
//! for `o200k_base` and `cl100k_base`, faster, by three means:
//! - pre-tokenization with the `regex` crate's DFA instead of
//!   `fancy-regex`: the one look-ahead of the vocabularies' patterns,
//!   `\s+(?!\S)`, is emulated by giving a whitespace run's last character
//!   back to the next piece when a non-space follows;
//! - counting without materialising token vectors for pieces that are
//!   whole tokens;
//! - a per-thread cache of piece → count, since source code and prose
//!   repeat their words (bounded: cleared when it grows past a limit).
//!
//! The merge ranks are read out of tiktoken-rs's own encoder (by decoding
//! every rank), so the vocabulary is the same bytes embedded once.

use std::cell::RefCell;
use std::sync::OnceLock;

use regex_automata::meta::{Cache, Regex};
use regex_automata::{Anchored, Input};
use rustc_hash::FxHashMap;
use tiktoken_rs::{CoreBPE, Rank};

use crate::tokens::Encoding;

/// The o200k pattern with `\s+(?!\S)|\s+` folded into `\s+` (emulated).
const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+",
);

/// The cl100k pattern without possessive quantifiers (equivalent here: no
/// alternative could succeed by backtracking into them) and with
/// `\s+(?!\S)|\s` folded into `\s+` (emulated).
const CL100K_PATTERN: &str = concat!(
    r"'(?i:[sdmt]|ll|ve|re)",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s+$",
    r"|\s*[\r\n]",
    r"|\s+",
);

/// Per-thread cache entries before it is cleared.
const CACHE_LIMIT: usize = 1 << 18;
/// Pieces this long go to tiktoken-rs's own (heap-based) merge.
const LONG_PIECE: usize = 100;
/// Pieces longer than this are not cached (rare, and costly to hash twice).
const CACHE_PIECE_MAX: usize = 64;

/// One vocabulary: merge ranks and the pre-tokenizer.
pub struct FastBpe {
    core: &'static CoreBPE,
    ranks: FxHashMap<Vec<u8>, Rank>,
    pattern: Regex,
    encoding: Encoding,
}

impl std::fmt::Debug for FastBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastBpe")
            .field("encoding", &self.encoding)
            .field("ranks", &self.ranks.len())
            .finish()
    }
}

thread_local! {
    static CACHE: RefCell<[FxHashMap<Box<[u8]>, u32>; 2]> = RefCell::new([FxHashMap::default(), FxHashMap::default()]);
    /// Each thread's search cache of the pre-tokenizer, with the address
    /// of the pattern it belongs to: threads counting at once (an import
    /// counts its messages on every core) would otherwise contend for the
    /// regex's shared pool of caches.
    static SEARCH: RefCell<[Option<(usize, Cache)>; 2]> = const { RefCell::new([None, None]) };
}

impl FastBpe {
    /// Builds the counter from tiktoken-rs's encoder of the same vocabulary;
    /// `None` when the encoder or the pattern cannot be built.
    pub fn from_core(core: &'static CoreBPE, encoding: Encoding) -> Option<FastBpe> {
        let specials: Vec<Vec<u8>> = core
            .special_tokens()
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let mut ranks = FxHashMap::default();
        let mut misses = 0;
        let mut rank: Rank = 0;
        // Ranks are dense apart from the special tokens at the end; stop
        // after a run of ranks that decode to nothing.
        while misses < 1_000 {
            match core.decode_bytes(&[rank]) {
                Ok(bytes) if !specials.contains(&bytes) => {
                    ranks.insert(bytes, rank);
                    misses = 0;
                }
                _ => misses += 1,
            }
            rank = rank.checked_add(1)?;
        }
        let pattern = match encoding {
            Encoding::O200kBase => O200K_PATTERN,
            Encoding::Cl100kBase => CL100K_PATTERN,
        };
        // A larger lazy-DFA cache: the Unicode classes make many states, and
        // a thrashing cache falls back to slower engines.
        let pattern = Regex::new(pattern).ok()?;
        Some(FastBpe {
            core,
            ranks,
            pattern,
            encoding,
        })
    }

    /// Returns the number of ranks (ordinary tokens) in the vocabulary.
    pub fn vocabulary_size(&self) -> usize {
        self.ranks.len()
    }

    fn count_piece(&self, piece: &[u8]) -> u64 {
        if piece.len() == 1 || self.ranks.contains_key(piece) {
            return 1;
        }
        if piece.len() >= LONG_PIECE {
            // tiktoken-rs's heap-based merge for long pieces (a 64 KiB run
            // of spaces); the quadratic one behind `byte_pair_split` would
            // take seconds. A piece is a whole match, so encoding it alone
            // gives the same tokens.
            return std::str::from_utf8(piece)
                .map(|text| self.core.encode_ordinary(text).len() as u64)
                .unwrap_or_else(|_| tiktoken_rs::byte_pair_split(piece, &self.ranks).len() as u64);
        }
        if piece.len() > CACHE_PIECE_MAX {
            return tiktoken_rs::byte_pair_split(piece, &self.ranks).len() as u64;
        }
        let slot = match self.encoding {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        };
        CACHE.with(|cache| {
            let mut caches = cache.borrow_mut();
            let cache = &mut caches[slot];
            if let Some(&n) = cache.get(piece) {
                return u64::from(n);
            }
            let n = tiktoken_rs::byte_pair_split(piece, &self.ranks).len();
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(piece.into(), n as u32);
            n as u64
        })
    }

    /// Counts the tokens of `text` exactly as tiktoken-rs's
    /// `encode_ordinary(text).len()` does.
    pub fn count(&self, text: &str) -> u64 {
        let slot = match self.encoding {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        };
        let owner = std::ptr::from_ref(&self.pattern) as usize;
        SEARCH.with(|search| {
            let mut search = search.borrow_mut();
            let cache = match &mut search[slot] {
                Some((at, cache)) if *at == owner => cache,
                other => &mut other.insert((owner, self.pattern.create_cache())).1,
            };
            self.count_with(cache, text)
        })
    }

    fn count_with(&self, cache: &mut Cache, text: &str) -> u64 {
        let mut total = 0;
        let mut pos = 0;
        while pos < text.len() {
            // Every position starts a piece (the patterns cover all text),
            // so an anchored half search finds its end without the reverse
            // scan a full `find` needs.
            let start = pos;
            let input = Input::new(text).range(start..).anchored(Anchored::Yes);
            let Some(half) = self.pattern.search_half_with(cache, &input) else {
                // Unreachable with these patterns; count the rest by bytes
                // rather than lose it.
                total += text[start..].len() as u64;
                break;
            };
            let mut end = half.offset();
            if end == start {
                // An empty match cannot occur either; step one character.
                end = start + text[start..].chars().next().map_or(1, char::len_utf8);
            }
            let piece = &text[start..end];
            // Emulate `\s+(?!\S)`: a whitespace run without line breaks that
            // a non-space follows gives its last character to the next piece
            // (unless it is a single character, which `\s+` / `\s` keeps).
            if end < text.len()
                && piece.chars().all(char::is_whitespace)
                && !piece.contains(['\r', '\n'])
                && text[end..]
                    .chars()
                    .next()
                    .is_some_and(|next| !next.is_whitespace())
                && let Some((last_idx, _)) = piece.char_indices().last()
                && last_idx > 0
            {
                end = start + last_idx;
            }
            total += self.count_piece(&text.as_bytes()[start..end]);
            pos = end;
        }
        total
    }
}

/// Returns the process-wide fast counter of a vocabulary, built on first
/// use; `None` when it cannot be built (the caller falls back).
pub fn fast(encoding: Encoding, core: Option<&'static CoreBPE>) -> Option<&'static FastBpe> {
    static O200K: OnceLock<Option<FastBpe>> = OnceLock::new();
    static CL100K: OnceLock<Option<FastBpe>> = OnceLock::new();
    let cell = match encoding {
        Encoding::O200kBase => &O200K,
        Encoding::Cl100kBase => &CL100K,
    };
    cell.get_or_init(|| core.and_then(|core| FastBpe::from_core(core, encoding)))
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn differential(encoding: Encoding, samples: &[&str]) {
        let core = core_of(encoding);
        let fast = fast_of(encoding);
        for sample in samples {
            assert_eq!(
                fast.count(sample),
                core.encode_ordinary(sample).len() as u64,
                "{encoding:?} on {sample:?}"
            );
        }
    }

    const SAMPLES: &[&str] = &[
        "",
        "hello world",
        "fn main() {\n    println!(\"hi\");\n}\n",
        "  leading and   inner   spaces  ",
        "tabs\t\tand\u{a0}non-breaking\u{3000}ideographic spaces",
        "line\r\nbreaks\n\n\n  indented\n\t\n",
        "I'll say it's THEY'RE we've you'd I'M",
        "{\"role\":\"tool\",\"content\":\"Process exited with code 1\"}",
        "上下文压缩不应悄悄丢失工作。日本語のテキストも。",
        "emoji 🎉🎉 and flags 🇫🇷 and ZWJ 👩‍💻",
        "numbers 1234567 3.14159 -42 0x1F",
        "mixed   \n   whitespace \t \n end   ",
        "trailing spaces   ",
        "a  b   c    d",
        "   ",
        "\n",
        " \n ",
        "x\u{2003}\u{2003}y",
        "path/to/file.rs:12:5 → error[E0308]: mismatched types",
        "ÀÉÎÕÜ àéîõü ß Straße ǅungla",
    ];

    proptest::proptest! {
        #[test]
        fn random_text_counts_equal_tiktoken(text in "[ \t\r\n\u{a0}\u{3000}a-zA-Z0-9'.,;:(){}<>/\\\"_é中🎉-]{0,200}") {
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let core = core_of(encoding);
                let fast = fast_of(encoding);
                proptest::prop_assert_eq!(fast.count(&text), core.encode_ordinary(&text).len() as u64);
            }
        }
    }

    fn core_of(encoding: Encoding) -> &'static CoreBPE {
        static O200K: OnceLock<CoreBPE> = OnceLock::new();
        static CL100K: OnceLock<CoreBPE> = OnceLock::new();
        match encoding {
            Encoding::O200kBase => O200K.get_or_init(|| tiktoken_rs::o200k_base().unwrap()),
            Encoding::Cl100kBase => CL100K.get_or_init(|| tiktoken_rs::cl100k_base().unwrap()),
        }
    }

    fn fast_of(encoding: Encoding) -> &'static FastBpe {
        fast(encoding, Some(core_of(encoding))).unwrap()
    }

    #[test]
    fn number_lists_count_equal_tiktoken() {
        let numbers: String = (1..=3000).map(|n| format!("{n}\n")).collect();
        let numbered: String = (1..=300).map(|n| format!("{n:>6}\t{n}\n")).collect();
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in [&numbers, &numbered] {
                assert_eq!(
                    fast_of(encoding).count(text),
                    core_of(encoding).encode_ordinary(text).len() as u64
                );
            }
        }
    }

    #[test]
    fn o200k_counts_equal_tiktoken() {
        differential(Encoding::O200kBase, SAMPLES);
    }

    #[test]
    fn cl100k_counts_equal_tiktoken() {
        differential(Encoding::Cl100kBase, SAMPLES);
    }
}
