//! A faster exact BPE counter behind [`TokenCounter`](crate::tokens::TokenCounter) (SPEC §16 allows
//! one, checked against tiktoken-rs by a differential test).
//!
//! It gives the same counts as tiktoken-rs's `encode_ordinary(text).len()`
//! for `o200k_base` and `cl100k_base`, faster, by four means:
//! - pre-tokenization of ASCII text by hand: each pattern's alternatives
//!   are tried in its order over byte classes, and a piece whose end
//!   depends on a non-ASCII character goes to the pattern (property tests
//!   hold both to the pattern's cuts);
//! - pre-tokenization of the rest with the `regex` crate's DFA instead of
//!   `fancy-regex`: the one look-ahead of the vocabularies' patterns,
//!   `\s+(?!\S)`, is emulated by giving a whitespace run's last character
//!   back to the next piece when a non-space follows;
//! - counting without materialising token vectors for pieces that are
//!   whole tokens;
//! - merge ranks keyed by a token's bytes packed into one `u128` (all
//!   but the few tokens over 15 bytes), and a per-thread cache of piece →
//!   count keyed the same way, since source code and prose repeat their
//!   words (bounded: cleared when it grows past a limit); longer pieces
//!   are merged each time.
//!
//! The merge ranks are read out of tiktoken-rs's own encoder (by decoding
//! every rank), so the vocabulary is the same bytes embedded once.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
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
/// Pieces this long go to the heap merge ([`FastBpe::merge_count`]).
const LONG_PIECE: usize = 100;

/// One vocabulary: merge ranks and the pre-tokenizer.
pub struct FastBpe {
    ranks: Ranks,
    pattern: Regex,
    encoding: Encoding,
}

/// The merge ranks of a vocabulary. Almost every token is at most 15
/// bytes long: those are keyed by their bytes packed into one `u128`, so a
/// lookup hashes two words and compares one key in the table, without the
/// pointer a `Vec<u8>` key is read through (that chase and the `memcmp`
/// behind it were a fifth of an import's time). The few longer tokens
/// keep byte keys.
#[derive(Default)]
struct Ranks {
    short: FxHashMap<u128, Rank>,
    long: FxHashMap<Box<[u8]>, Rank>,
}

/// The longest token [`Ranks`] keys by [`pack`].
const PACKED_MAX: usize = 15;

/// `bytes` (at most [`PACKED_MAX`]) packed little-endian into a `u128`
/// with the length in the top byte, so no two byte strings share a key.
/// Reads by fixed-size loads (a copy of `bytes.len()` bytes would call
/// `memcpy`): two overlapping words, the second shifted to where its
/// bytes belong, so the overlap ORs equal bytes together.
fn pack(bytes: &[u8]) -> u128 {
    let len = bytes.len();
    let body = match len {
        8.. => {
            let head = u128::from(u64::from_le_bytes(first_bytes(bytes)));
            let tail = u128::from(u64::from_le_bytes(first_bytes(&bytes[len - 8..])));
            head | tail << ((len - 8) * 8)
        }
        4.. => {
            let head = u128::from(u32::from_le_bytes(first_bytes(bytes)));
            let tail = u128::from(u32::from_le_bytes(first_bytes(&bytes[len - 4..])));
            head | tail << ((len - 4) * 8)
        }
        _ => bytes
            .iter()
            .enumerate()
            .fold(0, |word, (at, &byte)| word | u128::from(byte) << (at * 8)),
    };
    body | (len as u128) << 120
}

/// The first `N` bytes of `bytes` (which holds at least `N`).
fn first_bytes<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut word = [0; N];
    word.copy_from_slice(&bytes[..N]);
    word
}

impl Ranks {
    fn insert(&mut self, bytes: Vec<u8>, rank: Rank) {
        if bytes.len() <= PACKED_MAX {
            self.short.insert(pack(&bytes), rank);
        } else {
            self.long.insert(bytes.into_boxed_slice(), rank);
        }
    }

    fn get(&self, bytes: &[u8]) -> Option<Rank> {
        if bytes.len() <= PACKED_MAX {
            self.short.get(&pack(bytes)).copied()
        } else {
            self.long.get(bytes).copied()
        }
    }

    fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    fn shrink_to_fit(&mut self) {
        self.short.shrink_to_fit();
        self.long.shrink_to_fit();
    }
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
    static CACHE: RefCell<[FxHashMap<u128, u32>; 2]> = RefCell::new([FxHashMap::default(), FxHashMap::default()]);
    /// Each thread's search cache of the pre-tokenizer, with the address
    /// of the pattern it belongs to: threads counting at once (an import
    /// counts its messages on every core) would otherwise contend for the
    /// regex's shared pool of caches.
    static SEARCH: RefCell<[Option<(usize, Cache)>; 2]> = const { RefCell::new([None, None]) };
}

impl FastBpe {
    /// Builds the counter from tiktoken-rs's encoder of the same vocabulary
    /// (which it does not keep); `None` when the pattern cannot be built.
    pub fn from_core(core: &CoreBPE, encoding: Encoding) -> Option<FastBpe> {
        let specials: Vec<Vec<u8>> = core
            .special_tokens()
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let mut ranks = Ranks::default();
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
        ranks.shrink_to_fit();
        Some(FastBpe {
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
        if piece.len() == 1 || self.ranks.get(piece).is_some() {
            return 1;
        }
        if piece.len() >= LONG_PIECE {
            // The pairwise merge is quadratic: a 64 KiB run of spaces
            // would take seconds.
            return self.merge_count(piece);
        }
        if piece.len() > PACKED_MAX {
            return self.short_merge_count(piece);
        }
        let slot = match self.encoding {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        };
        CACHE.with(|cache| {
            let mut caches = cache.borrow_mut();
            let cache = &mut caches[slot];
            let key = pack(piece);
            if let Some(&n) = cache.get(&key) {
                return u64::from(n);
            }
            let n = self.short_merge_count(piece);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(key, n as u32);
            n
        })
    }

    /// Returns the number of tokens byte-pair merging makes of `piece` (at
    /// least two bytes, shorter than [`LONG_PIECE`]): the rank of every
    /// adjacent pair of parts is kept, and the lowest (the leftmost of
    /// equal ones) merges until no pair has a rank, as tiktoken merges.
    /// Each merge rescans the pairs, which on pieces this short costs less
    /// than [`FastBpe::merge_count`]'s heap.
    fn short_merge_count(&self, piece: &[u8]) -> u64 {
        // `starts[i]` is where part `i` begins; `pair[i]` is the rank of
        // parts `i` and `i + 1` together (`Rank::MAX`: no such token).
        let mut starts: Vec<usize> = (0..=piece.len()).collect();
        let pair_rank = |starts: &[usize], i: usize| -> Rank {
            match starts.get(i + 2) {
                Some(&end) => self.ranks.get(&piece[starts[i]..end]).unwrap_or(Rank::MAX),
                None => Rank::MAX,
            }
        };
        let mut pair: Vec<Rank> = (0..piece.len()).map(|i| pair_rank(&starts, i)).collect();
        while let Some((at, _)) = pair
            .iter()
            .enumerate()
            .filter(|&(_, &rank)| rank != Rank::MAX)
            .min_by_key(|&(i, &rank)| (rank, i))
        {
            starts.remove(at + 1);
            pair.remove(at + 1);
            pair[at] = pair_rank(&starts, at);
            if at > 0 {
                pair[at - 1] = pair_rank(&starts, at - 1);
            }
        }
        (starts.len() - 1) as u64
    }

    /// Returns the number of tokens byte-pair merging makes of `piece`, as
    /// tiktoken's merge does (the lowest-ranked adjacent pair first, the
    /// leftmost of equal ones, until no pair has a rank), in O(n log n):
    /// every pair that forms goes on a heap by (rank, start), and a popped
    /// pair no longer adjacent is skipped.
    fn merge_count(&self, piece: &[u8]) -> u64 {
        let len = piece.len();
        if len < 2 {
            return len as u64;
        }
        let rank = |start: usize, end: usize| self.ranks.get(&piece[start..end]);
        // The parts, by the offset they start at: the next part's start
        // (`len` after the last), the previous one's (`None` before the
        // first), and whether the offset still starts a part.
        let mut next: Vec<usize> = (1..=len).collect();
        let mut prev: Vec<Option<usize>> = (0..len).map(|at| at.checked_sub(1)).collect();
        let mut starts = vec![true; len];
        let mut heap: BinaryHeap<Reverse<(Rank, usize, usize)>> = (0..len - 1)
            .filter_map(|start| rank(start, start + 2).map(|r| Reverse((r, start, start + 2))))
            .collect();
        let mut parts = len as u64;
        while let Some(Reverse((_, start, end))) = heap.pop() {
            // Still the pair of the part at `start` and the one after it?
            let second = next[start];
            if !starts[start] || second >= len || next[second] != end {
                continue;
            }
            starts[second] = false;
            next[start] = end;
            if end < len {
                prev[end] = Some(start);
            }
            parts -= 1;
            if let Some(before) = prev[start]
                && let Some(r) = rank(before, end)
            {
                heap.push(Reverse((r, before, end)));
            }
            if end < len {
                let after = next[end];
                if let Some(r) = rank(start, after) {
                    heap.push(Reverse((r, start, after)));
                }
            }
        }
        parts
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
            let end = match self.encoding {
                Encoding::O200kBase => o200k_ascii_piece(text.as_bytes(), pos),
                Encoding::Cl100kBase => cl100k_ascii_piece(text.as_bytes(), pos),
            };
            let end = end.unwrap_or_else(|| self.regex_piece(cache, text, pos));
            total += self.count_piece(&text.as_bytes()[pos..end]);
            pos = end;
        }
        total
    }

    /// Returns the end of the piece that starts at `start` (a character
    /// boundary before the end of `text`), found by the pattern.
    fn regex_piece(&self, cache: &mut Cache, text: &str, start: usize) -> usize {
        // Every position starts a piece (the patterns cover all text), so
        // an anchored half search finds its end without the reverse scan a
        // full `find` needs.
        let input = Input::new(text).range(start..).anchored(Anchored::Yes);
        let Some(half) = self.pattern.search_half_with(cache, &input) else {
            // Unreachable with these patterns; count the rest by bytes
            // rather than lose it.
            return text.len();
        };
        let mut end = half.offset();
        if end == start {
            // An empty match cannot occur either; step one character.
            end = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        let piece = &text[start..end];
        // Emulate `\s+(?!\S)`: a whitespace run without line breaks that a
        // non-space follows gives its last character to the next piece
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
        end
    }
}

/// What the vocabularies' patterns tell apart among ASCII bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ascii {
    Upper,
    Lower,
    Digit,
    /// `\r` or `\n`.
    LineBreak,
    /// The other whitespace: space, tab, vertical tab, form feed.
    Space,
    /// Anything else: punctuation, symbols, control characters.
    Symbol,
    /// The end of the text.
    End,
}

/// Classifies the byte at `at`; `None` for a byte of a non-ASCII
/// character, which only the pattern itself can classify.
fn ascii_class(bytes: &[u8], at: usize) -> Option<Ascii> {
    let Some(&byte) = bytes.get(at) else {
        return Some(Ascii::End);
    };
    Some(match byte {
        b'A'..=b'Z' => Ascii::Upper,
        b'a'..=b'z' => Ascii::Lower,
        b'0'..=b'9' => Ascii::Digit,
        b'\r' | b'\n' => Ascii::LineBreak,
        // Unicode's White_Space in ASCII, which `\s` is: vertical tab
        // included (unlike `u8::is_ascii_whitespace`).
        b' ' | b'\t' | 0x0b | 0x0c => Ascii::Space,
        0x80.. => return None,
        _ => Ascii::Symbol,
    })
}

/// Returns the end of the o200k piece that starts at `start`, found
/// without the regex while the piece and what decides its end are ASCII;
/// `None` hands the piece to the pattern. The alternatives, tried in the
/// pattern's order (leftmost-first, greedy):
///
/// 1. `[^\r\n\p{L}\p{N}]?[\p{Lu}…]*[\p{Ll}…]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
/// 2. `[^\r\n\p{L}\p{N}]?[\p{Lu}…]+[\p{Ll}…]*(?i:'s|…)?`
/// 3. `\p{N}{1,3}`
/// 4. ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
/// 5. `\s*[\r\n]+`
/// 6. `\s+(?!\S)|\s+`
fn o200k_ascii_piece(bytes: &[u8], start: usize) -> Option<usize> {
    let class = |at| ascii_class(bytes, at);
    let first = class(start)?;
    match first {
        Ascii::Upper | Ascii::Lower => ascii_word(bytes, start),
        Ascii::Digit => digits(bytes, start),
        Ascii::LineBreak => Some(line_break_run(bytes, start, space_run(bytes, start)?)),
        Ascii::Space | Ascii::Symbol => {
            let next = class(start + 1)?;
            if matches!(next, Ascii::Upper | Ascii::Lower) {
                // 1 or 2, with the optional leading character.
                return ascii_word(bytes, start + 1);
            }
            if let Some(end) = symbol_run(bytes, start, first, next, b"\r\n/") {
                return end;
            }
            // 5 and 6: a whitespace run.
            let run_end = space_run(bytes, start)?;
            let end = line_break_run(bytes, start, run_end);
            if end > start {
                return Some(end);
            }
            Some(trailing_space_left(bytes, start, run_end))
        }
        Ascii::End => None,
    }
}

/// `\p{N}{1,3}` from the digit at `start`.
fn digits(bytes: &[u8], start: usize) -> Option<usize> {
    let mut end = start + 1;
    while end < start + 3 && ascii_class(bytes, end)? == Ascii::Digit {
        end += 1;
    }
    Some(end)
}

/// ` ?[^\s\p{L}\p{N}]+[tail]*` from `start` (whose class is `first`, the
/// next one's `next`): `None` when it does not match there, else the end
/// (`Some(None)` when a non-ASCII character ends the symbols).
fn symbol_run(
    bytes: &[u8],
    start: usize,
    first: Ascii,
    next: Ascii,
    tail: &[u8],
) -> Option<Option<usize>> {
    let from = match (first, next) {
        (Ascii::Symbol, _) => start,
        (_, Ascii::Symbol) if bytes[start] == b' ' => start + 1,
        _ => return None,
    };
    let mut end = from;
    loop {
        match ascii_class(bytes, end) {
            Some(Ascii::Symbol) => end += 1,
            Some(_) => break,
            None => return Some(None),
        }
    }
    while bytes.get(end).is_some_and(|byte| tail.contains(byte)) {
        end += 1;
    }
    Some(Some(end))
}

/// `\s+(?!\S)|\s+` over the whitespace run `start..run_end` (no line
/// break in it): a longer run leaves its last space to the word after it;
/// a single space, or a run at the end, is whole.
fn trailing_space_left(bytes: &[u8], start: usize, run_end: usize) -> usize {
    if run_end < bytes.len() && run_end - start > 1 {
        run_end - 1
    } else {
        run_end
    }
}

/// Returns the end of the cl100k piece that starts at `start`, as
/// [`o200k_ascii_piece`] does for o200k. The alternatives:
///
/// 1. `'(?i:[sdmt]|ll|ve|re)`
/// 2. `[^\r\n\p{L}\p{N}]?\p{L}+`
/// 3. `\p{N}{1,3}`
/// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`
/// 5. `\s+$`
/// 6. `\s*[\r\n]`
/// 7. `\s+(?!\S)|\s+`
fn cl100k_ascii_piece(bytes: &[u8], start: usize) -> Option<usize> {
    let class = |at| ascii_class(bytes, at);
    let letters = |from: usize| -> Option<usize> {
        let mut end = from;
        while matches!(class(end)?, Ascii::Upper | Ascii::Lower) {
            end += 1;
        }
        Some(end)
    };
    let first = class(start)?;
    match first {
        Ascii::Upper | Ascii::Lower => letters(start),
        Ascii::Digit => digits(bytes, start),
        Ascii::LineBreak | Ascii::Space | Ascii::Symbol => {
            if bytes[start] == b'\'' {
                let contraction = contraction(bytes, start)?;
                if contraction > 0 {
                    return Some(start + contraction);
                }
            }
            let next = class(start + 1)?;
            if first != Ascii::LineBreak && matches!(next, Ascii::Upper | Ascii::Lower) {
                return letters(start + 1);
            }
            if let Some(end) = symbol_run(bytes, start, first, next, b"\r\n") {
                return end;
            }
            let run_end = space_run(bytes, start)?;
            if run_end == bytes.len() {
                return Some(run_end);
            }
            let end = line_break_run(bytes, start, run_end);
            if end > start {
                return Some(end);
            }
            Some(trailing_space_left(bytes, start, run_end))
        }
        Ascii::End => None,
    }
}

/// Alternatives 1 and 2 from a letter at `start`: an upper-case run and a
/// lower-case run (1 when the lower-case run is not empty, else 2), then
/// an optional contraction.
fn ascii_word(bytes: &[u8], start: usize) -> Option<usize> {
    let class = |at| ascii_class(bytes, at);
    let mut end = start;
    while class(end)? == Ascii::Upper {
        end += 1;
    }
    while class(end)? == Ascii::Lower {
        end += 1;
    }
    Some(end + contraction(bytes, end)?)
}

/// The length of the case-insensitive `'s|'t|'re|'ve|'m|'ll|'d` at `at`
/// (0 when there is none); `None` when a non-ASCII character after the
/// apostrophe could be one case-insensitively (ſ is s).
fn contraction(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'\'') {
        return Some(0);
    }
    let lower = |at: usize| -> Option<u8> {
        match bytes.get(at) {
            Some(byte) if !byte.is_ascii() => None,
            Some(byte) => Some(byte.to_ascii_lowercase()),
            None => Some(0),
        }
    };
    Some(match lower(at + 1)? {
        b's' | b't' | b'm' | b'd' => 2,
        b'r' | b'v' if lower(at + 2)? == b'e' => 3,
        b'l' if lower(at + 2)? == b'l' => 3,
        _ => 0,
    })
}

/// The end of the whitespace run from `start`; `None` when a non-ASCII
/// character (perhaps a space) ends it.
fn space_run(bytes: &[u8], start: usize) -> Option<usize> {
    let mut end = start;
    loop {
        match ascii_class(bytes, end)? {
            Ascii::Space | Ascii::LineBreak => end += 1,
            _ => return Some(end),
        }
    }
}

/// Alternative 5 over the whitespace run `start..run_end`: up to and
/// including its last line break, or `start` when it has none.
fn line_break_run(bytes: &[u8], start: usize, run_end: usize) -> usize {
    bytes[start..run_end]
        .iter()
        .rposition(|&byte| matches!(byte, b'\r' | b'\n'))
        .map_or(start, |last| start + last + 1)
}

/// Returns the process-wide fast counter of a vocabulary, built on first
/// use from tiktoken-rs's encoder, which is then dropped (it holds the
/// vocabulary twice more); `None` when it cannot be built (the caller
/// falls back to tiktoken-rs).
pub fn fast(encoding: Encoding) -> Option<&'static FastBpe> {
    static O200K: OnceLock<Option<FastBpe>> = OnceLock::new();
    static CL100K: OnceLock<Option<FastBpe>> = OnceLock::new();
    let cell = match encoding {
        Encoding::O200kBase => &O200K,
        Encoding::Cl100kBase => &CL100K,
    };
    cell.get_or_init(|| {
        let core = match encoding {
            Encoding::O200kBase => tiktoken_rs::o200k_base(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
        };
        FastBpe::from_core(&core.ok()?, encoding)
    })
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

    proptest::proptest! {
        /// Any text at all: every ASCII byte (controls included) beside
        /// any Unicode scalar value, so both the hand-written ASCII path
        /// and the pattern meet every neighbour.
        #[test]
        fn any_text_counts_equal_tiktoken(
            chars in proptest::collection::vec(
                proptest::prop_oneof![
                    3 => proptest::strategy::Strategy::prop_map(0u8..=127, char::from),
                    1 => proptest::char::any(),
                ],
                0..300,
            )
        ) {
            let text: String = chars.into_iter().collect();
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                proptest::prop_assert_eq!(
                    fast_of(encoding).count(&text),
                    core_of(encoding).encode_ordinary(&text).len() as u64,
                    "{:?} on {:?}", encoding, text
                );
            }
        }
    }

    /// The piece ends of `text` found by the pattern alone, and as the
    /// counter finds them (the ASCII path first).
    fn piece_ends(encoding: Encoding, text: &str) -> (Vec<usize>, Vec<usize>) {
        let fast = fast_of(encoding);
        let mut cache = fast.pattern.create_cache();
        let mut by_pattern = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            pos = fast.regex_piece(&mut cache, text, pos);
            by_pattern.push(pos);
        }
        let mut by_counter = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            let ascii = match encoding {
                Encoding::O200kBase => o200k_ascii_piece(text.as_bytes(), pos),
                Encoding::Cl100kBase => cl100k_ascii_piece(text.as_bytes(), pos),
            };
            pos = ascii.unwrap_or_else(|| fast.regex_piece(&mut cache, text, pos));
            by_counter.push(pos);
        }
        (by_pattern, by_counter)
    }

    #[test]
    fn the_ascii_path_cuts_where_the_pattern_cuts() {
        let mut samples: Vec<String> = SAMPLES.iter().map(|s| (*s).to_owned()).collect();
        samples.extend(
            [
                "ABC's DEF'RE Ghi'Ll jkl'VE x'd y'M z'T 'tis O'Neil",
                "don'\u{17f}t it'\u{212a} K\u{301}x abc\u{301}d",
                "x\u{b}\u{c}\u{1c}\u{1d}\u{1e}\u{1f}\u{7f}\u{0}y",
                "12345 1\u{661}2 \u{661}\u{662}3 4\u{2160}",
                "a\u{85}b \u{85}\n  \n\t\n x",
                "//comment\n/*x*/\n\r\n/path// \n/",
                " . ,, ;; 'quoted' \"dq\" $var @at #hash",
                "CamelCaseWord HTTPServer getHTTPResponse iOS",
                "\t\tindented\n    more\n\n\n",
                "end with spaces  ",
                "trailing line break \n  ",
                "'s 'sa 'LL 'Ve 're' '' 'x ''t",
                "—dash –en ‘curly’ “quotes”",
            ]
            .map(str::to_owned),
        );
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for sample in &samples {
                let (by_pattern, by_counter) = piece_ends(encoding, sample);
                assert_eq!(by_counter, by_pattern, "{encoding:?} on {sample:?}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn random_text_is_cut_where_the_pattern_cuts(
            text in "([ \t\r\n\u{b}\u{c}\u{1c}\u{0}\u{a0}\u{85}\u{2003}]|[a-zA-Z]{1,4}|[0-9]{1,4}|'[sStTrRvVlLdDmMeE]{0,2}|[./\\\"{}();:,_-]|[é\u{17f}\u{212a}\u{301}\u{661}中🎉—])*"
        ) {
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let (by_pattern, by_counter) = piece_ends(encoding, &text);
                proptest::prop_assert_eq!(by_counter, by_pattern);
            }
        }
    }

    proptest::proptest! {
        /// Both merges against tiktoken-rs's own, on pieces of every
        /// length (the heap serves only the long ones, the pairwise merge
        /// only the short ones).
        #[test]
        fn the_merges_count_as_tiktoken_merges(
            piece in "([a-z]{1,12}|[A-Z]{1,3}|[0-9]|[ =_.\\-]{1,3}|é|中|\u{1F389}|[\u{0}-\u{7f}])*"
        ) {
            // Pieces are never empty, and one byte is one token.
            proptest::prop_assume!(piece.len() >= 2);
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let fast = fast_of(encoding);
                let bytes = piece.as_bytes();
                let expected =
                    tiktoken_rs::byte_pair_split(bytes, reference_ranks(encoding)).len() as u64;
                proptest::prop_assert_eq!(fast.merge_count(bytes), expected);
                proptest::prop_assert_eq!(fast.short_merge_count(bytes), expected);
            }
        }

        #[test]
        fn long_pieces_count_as_tiktoken_counts_them(
            text in "[a-z]{100,700}|[A-Z][a-z]{99,300}|[ ]{100,3000}|[=]{100,900}|[-=#*]{100,400}|中{34,200}|[a-zé]{60,300}"
        ) {
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                proptest::prop_assert_eq!(
                    fast_of(encoding).count(&text),
                    core_of(encoding).encode_ordinary(&text).len() as u64
                );
            }
        }
    }

    #[test]
    fn a_long_run_of_spaces_is_counted_quickly_and_exactly() {
        let spaces = " ".repeat(64 * 1024);
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            assert_eq!(
                fast_of(encoding).count(&spaces),
                core_of(encoding).encode_ordinary(&spaces).len() as u64
            );
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
        fast(encoding).unwrap()
    }

    /// The fast counter's ranks as tiktoken-rs keys them, for its merge.
    fn reference_ranks(encoding: Encoding) -> &'static FxHashMap<Vec<u8>, Rank> {
        static O200K: OnceLock<FxHashMap<Vec<u8>, Rank>> = OnceLock::new();
        static CL100K: OnceLock<FxHashMap<Vec<u8>, Rank>> = OnceLock::new();
        let cell = match encoding {
            Encoding::O200kBase => &O200K,
            Encoding::Cl100kBase => &CL100K,
        };
        cell.get_or_init(|| {
            let ranks = &fast_of(encoding).ranks;
            let short = ranks.short.iter().map(|(&key, &rank)| {
                let word = key.to_le_bytes();
                (word[..usize::from(word[15])].to_vec(), rank)
            });
            let long = ranks.long.iter().map(|(key, &rank)| (key.to_vec(), rank));
            short.chain(long).collect()
        })
    }

    proptest::proptest! {
        #[test]
        fn packing_keeps_every_byte_and_the_length(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..=PACKED_MAX)) {
            let word = pack(&bytes).to_le_bytes();
            proptest::prop_assert_eq!(usize::from(word[15]), bytes.len());
            proptest::prop_assert_eq!(&word[..bytes.len()], &bytes[..]);
            proptest::prop_assert!(word[bytes.len()..15].iter().all(|&byte| byte == 0));
        }
    }

    #[test]
    fn every_token_is_found_under_its_own_bytes_and_keys_do_not_collide() {
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let core = core_of(encoding);
            let fast = fast_of(encoding);
            let ranks = reference_ranks(encoding);
            // One key per token: packing lost none to a collision.
            assert_eq!(ranks.len(), fast.vocabulary_size());
            let mut long = 0;
            for (bytes, &rank) in ranks {
                assert_eq!(fast.ranks.get(bytes), Some(rank));
                assert_eq!(core.decode_bytes(&[rank]).unwrap(), *bytes);
                long += usize::from(bytes.len() > PACKED_MAX);
            }
            assert!(
                long > 0,
                "{encoding:?}: no token is longer than a packed key"
            );
            // A prefix or an extension of a token is its own key.
            assert_eq!(fast.ranks.get(b" the\0"), None);
            assert_eq!(fast.ranks.get(b""), None);
        }
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
