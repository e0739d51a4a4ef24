//! Token counting (SPEC §4.1): the embedded BPE vocabularies behind the
//! [`TokenCounter`] trait, chunked so that huge or hostile text is counted
//! fast and never panics.

use std::collections::HashMap;
use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::message::{Block, Message, ResultPart};

/// A number of tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenCount(u64);

impl TokenCount {
    /// Zero tokens.
    pub const ZERO: TokenCount = TokenCount(0);

    /// Wraps a raw count.
    pub const fn new(n: u64) -> Self {
        TokenCount(n)
    }

    /// Returns the raw count.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Returns `self − other`, or zero when `other` is larger.
    pub fn saturating_sub(self, other: TokenCount) -> TokenCount {
        TokenCount(self.0.saturating_sub(other.0))
    }
}

impl Add for TokenCount {
    type Output = TokenCount;
    fn add(self, rhs: TokenCount) -> TokenCount {
        TokenCount(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for TokenCount {
    fn add_assign(&mut self, rhs: TokenCount) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Sum for TokenCount {
    fn sum<I: Iterator<Item = TokenCount>>(iter: I) -> TokenCount {
        iter.fold(TokenCount::ZERO, Add::add)
    }
}

impl fmt::Display for TokenCount {
    /// Writes the count with thousands separators, e.g. `41,210`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&group_thousands(self.0))
    }
}

/// Formats an integer with comma thousands separators.
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (idx, ch) in digits.chars().enumerate() {
        if idx > 0 && (digits.len() - idx).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A BPE vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Encoding {
    /// OpenAI's `o200k_base` (the default).
    #[default]
    O200kBase,
    /// OpenAI's `cl100k_base`.
    Cl100kBase,
}

impl Encoding {
    /// Returns the vocabulary's name as written in logs and config.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// Parses a vocabulary name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "o200k_base" => Some(Encoding::O200kBase),
            "cl100k_base" => Some(Encoding::Cl100kBase),
            _ => None,
        }
    }
}

/// A token count that may be an estimate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// The count.
    pub n: TokenCount,
    /// Whether any part was counted by size instead of by BPE.
    pub estimated: bool,
}

impl Add for Counted {
    type Output = Counted;
    fn add(self, rhs: Counted) -> Counted {
        Counted {
            n: self.n + rhs.n,
            estimated: self.estimated || rhs.estimated,
        }
    }
}

impl AddAssign for Counted {
    fn add_assign(&mut self, rhs: Counted) {
        *self = *self + rhs;
    }
}

/// Counts tokens of text. Implementations never panic.
pub trait TokenCounter: Send + Sync {
    /// Returns the vocabulary counts are in.
    fn encoding(&self) -> Encoding;

    /// Counts the tokens of one text block.
    fn count_text(&self, text: &str) -> Counted;
}

/// Text pieces are counted independently at most this long (SPEC §4.1).
pub const PIECE_BYTES: usize = 64 * 1024;
/// Text above this many bytes is counted as `ceil(bytes / 4)`.
pub const ESTIMATE_ABOVE_BYTES: usize = 8 * 1024 * 1024;
/// Every message adds this many tokens of framing.
pub const MESSAGE_OVERHEAD: TokenCount = TokenCount(4);
/// The flat cost of one image, unless configured otherwise.
pub const DEFAULT_IMAGE_TOKENS: TokenCount = TokenCount(1_100);

/// Returns the size estimate `ceil(bytes / 4)`.
pub fn estimate_by_size(text: &str) -> TokenCount {
    TokenCount(text.len().div_ceil(4) as u64)
}

/// Splits text into pieces of at most [`PIECE_BYTES`], cutting on a
/// character boundary and preferring the last whitespace in a piece.
pub fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= PIECE_BYTES {
            let piece = rest;
            rest = "";
            return Some(piece);
        }
        let mut cut = PIECE_BYTES;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        // Prefer to cut after whitespace in the last quarter of the piece,
        // so words and numbers are not split.
        let window_start = cut - cut / 4;
        if let Some(ws) = rest.as_bytes()[window_start..cut]
            .iter()
            .rposition(|b| b.is_ascii_whitespace())
        {
            cut = window_start + ws + 1;
        }
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece)
    })
}

fn bpe(encoding: Encoding) -> Option<&'static tiktoken_rs::CoreBPE> {
    static O200K: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
    static CL100K: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
    match encoding {
        Encoding::O200kBase => O200K
            .get_or_init(|| tiktoken_rs::o200k_base().ok())
            .as_ref(),
        Encoding::Cl100kBase => CL100K
            .get_or_init(|| tiktoken_rs::cl100k_base().ok())
            .as_ref(),
    }
}

/// The key a [`MemoCounter`] remembers a text by: the sha256 of the
/// vocabulary's name, a zero byte and the text.
pub type MemoKey = [u8; 32];

/// A counter that remembers what it counted, by each text's sha256, and
/// starts from counts remembered before. A process that only measures a
/// session whose messages carry stored counts (`soba budget --session`)
/// then counts nothing itself: the few texts it counts every run (system
/// prompt, tool schemas, the capsule, the interrupted-call result) are
/// remembered, and the vocabulary (about 200 ms to load) is never loaded.
/// The caller loads and saves the table.
pub struct MemoCounter {
    inner: Arc<dyn TokenCounter>,
    memo: Mutex<HashMap<MemoKey, Counted>>,
    added: AtomicBool,
    /// The keys counted by this one, in order.
    fresh: Mutex<Vec<MemoKey>>,
}

impl MemoCounter {
    /// Wraps `inner`, remembering `known` counts (in `inner`'s vocabulary).
    pub fn new(
        inner: Arc<dyn TokenCounter>,
        known: impl IntoIterator<Item = (MemoKey, Counted)>,
    ) -> Self {
        MemoCounter {
            inner,
            memo: Mutex::new(known.into_iter().collect()),
            added: AtomicBool::new(false),
            fresh: Mutex::new(Vec::new()),
        }
    }

    /// Returns the key of `text` in `encoding`.
    pub fn key(encoding: Encoding, text: &str) -> MemoKey {
        let mut hasher = Sha256::new();
        hasher.update(encoding.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(text.as_bytes());
        hasher.finalize().into()
    }

    /// Whether a count was added since construction (the table is worth
    /// saving).
    pub fn added(&self) -> bool {
        self.added.load(Ordering::Relaxed)
    }

    /// Returns every count remembered, those this counter counted first
    /// (newest first), so a caller that keeps only some keeps them.
    pub fn entries(&self) -> Vec<(MemoKey, Counted)> {
        let memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = self.fresh.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(MemoKey, Counted)> = fresh
            .iter()
            .rev()
            .filter_map(|key| memo.get(key).map(|counted| (*key, *counted)))
            .collect();
        out.extend(
            memo.iter()
                .filter(|(key, _)| !fresh.contains(key))
                .map(|(key, counted)| (*key, *counted)),
        );
        out
    }
}

impl TokenCounter for MemoCounter {
    fn encoding(&self) -> Encoding {
        self.inner.encoding()
    }

    fn count_text(&self, text: &str) -> Counted {
        let key = MemoCounter::key(self.encoding(), text);
        if let Some(counted) = self
            .memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return *counted;
        }
        let counted = self.inner.count_text(text);
        self.memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, counted);
        self.fresh
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(key);
        self.added.store(true, Ordering::Relaxed);
        counted
    }
}

/// The real BPE counter over an embedded vocabulary, one process-wide
/// encoder per vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpeCounter {
    encoding: Encoding,
}

impl BpeCounter {
    /// Returns a counter for the vocabulary; the encoder loads on first use.
    pub fn new(encoding: Encoding) -> Self {
        BpeCounter { encoding }
    }
}

impl TokenCounter for BpeCounter {
    fn encoding(&self) -> Encoding {
        self.encoding
    }

    fn count_text(&self, text: &str) -> Counted {
        if text.len() > ESTIMATE_ABOVE_BYTES {
            return Counted {
                n: estimate_by_size(text),
                estimated: true,
            };
        }
        // The fast exact counter (the same counts, checked by a differential
        // test against tiktoken-rs), else tiktoken-rs itself.
        let by_fast;
        let by_tiktoken;
        let count_piece: &dyn Fn(&str) -> u64 = if let Some(fast) = crate::bpe::fast(self.encoding)
        {
            by_fast = move |piece: &str| fast.count(piece);
            &by_fast
        } else if let Some(encoder) = bpe(self.encoding) {
            by_tiktoken = move |piece: &str| encoder.encode_ordinary(piece).len() as u64;
            &by_tiktoken
        } else {
            return Counted {
                n: estimate_by_size(text),
                estimated: true,
            };
        };
        let mut total = Counted::default();
        for piece in pieces(text) {
            let counted = catch_unwind(AssertUnwindSafe(|| count_piece(piece)));
            total += match counted {
                Ok(n) => Counted {
                    n: TokenCount(n),
                    estimated: false,
                },
                Err(_) => Counted {
                    n: estimate_by_size(piece),
                    estimated: true,
                },
            };
        }
        total
    }
}

/// A deterministic fast counter, `ceil(bytes / 4)`, for property tests and
/// for sizes where only an estimate is wanted. Its counts are not marked
/// estimated: under it, the estimate is the truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteCounter;

impl TokenCounter for ByteCounter {
    fn encoding(&self) -> Encoding {
        Encoding::O200kBase
    }

    fn count_text(&self, text: &str) -> Counted {
        Counted {
            n: estimate_by_size(text),
            estimated: false,
        }
    }
}

/// Counts one content block; images cost `image_tokens` each.
pub fn count_block(counter: &dyn TokenCounter, block: &Block, image_tokens: TokenCount) -> Counted {
    match block {
        Block::Text(text) => counter.count_text(text),
        Block::Thinking { text, .. } => counter.count_text(text),
        Block::ToolUse(call) => {
            counter.count_text(&call.name) + counter.count_text(&call.input.to_json_text())
        }
        Block::ToolResult(result) => result
            .content
            .iter()
            .map(|part| match part {
                ResultPart::Text(text) => counter.count_text(text),
                ResultPart::Image(_) => Counted {
                    n: image_tokens,
                    estimated: false,
                },
            })
            .fold(Counted::default(), Add::add),
        Block::Image(_) => Counted {
            n: image_tokens,
            estimated: false,
        },
    }
}

/// Counts a message: its blocks plus [`MESSAGE_OVERHEAD`].
pub fn count_message(
    counter: &dyn TokenCounter,
    message: &Message,
    image_tokens: TokenCount,
) -> Counted {
    message
        .content
        .iter()
        .map(|block| count_block(counter, block, image_tokens))
        .fold(
            Counted {
                n: MESSAGE_OVERHEAD,
                estimated: false,
            },
            Add::add,
        )
}

/// Counts tool schemas as their serialized JSON, once per request.
pub fn count_tool_schemas(counter: &dyn TokenCounter, schemas: &[Value]) -> Counted {
    if schemas.is_empty() {
        return Counted::default();
    }
    counter.count_text(&Value::Array(schemas.to_vec()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts by size and counts its calls.
    struct Calls(std::sync::atomic::AtomicUsize);

    impl TokenCounter for Calls {
        fn encoding(&self) -> Encoding {
            Encoding::Cl100kBase
        }

        fn count_text(&self, text: &str) -> Counted {
            self.0.fetch_add(1, Ordering::Relaxed);
            ByteCounter.count_text(text)
        }
    }

    #[test]
    fn a_memo_counts_each_text_once_and_a_loaded_one_not_at_all() {
        let inner = Arc::new(Calls(Default::default()));
        let memo = MemoCounter::new(inner.clone(), []);
        assert!(!memo.added());
        assert_eq!(memo.count_text("system prompt").n, TokenCount::new(4));
        assert_eq!(memo.count_text("system prompt").n, TokenCount::new(4));
        assert_eq!(inner.0.load(Ordering::Relaxed), 1);
        assert!(memo.added());
        assert_eq!(memo.encoding(), Encoding::Cl100kBase);

        let again = MemoCounter::new(inner.clone(), memo.entries());
        assert_eq!(again.count_text("system prompt").n, TokenCount::new(4));
        assert_eq!(
            inner.0.load(Ordering::Relaxed),
            1,
            "remembered, not counted"
        );
        assert!(!again.added());
        // What a counter counted comes first, so a bounded save keeps it.
        again.count_text("tool schemas");
        assert_eq!(
            again.entries()[0].0,
            MemoCounter::key(Encoding::Cl100kBase, "tool schemas")
        );
        // The key names the vocabulary: the same text in another is new.
        assert_ne!(
            MemoCounter::key(Encoding::O200kBase, "system prompt"),
            MemoCounter::key(Encoding::Cl100kBase, "system prompt")
        );
    }

    fn o200k(text: &str) -> u64 {
        BpeCounter::new(Encoding::O200kBase)
            .count_text(text)
            .n
            .get()
    }

    fn cl100k(text: &str) -> u64 {
        BpeCounter::new(Encoding::Cl100kBase)
            .count_text(text)
            .n
            .get()
    }

    #[test]
    fn groups_thousands() {
        assert_eq!(TokenCount::new(41_210).to_string(), "41,210");
        assert_eq!(TokenCount::new(999).to_string(), "999");
        assert_eq!(TokenCount::new(1_000_000).to_string(), "1,000,000");
    }

    #[test]
    fn pieces_cut_on_char_boundaries_and_cover_the_text() {
        let text = "é".repeat(PIECE_BYTES); // 2 bytes each
        let parts: Vec<&str> = pieces(&text).collect();
        assert!(parts.iter().all(|p| p.len() <= PIECE_BYTES));
        assert_eq!(parts.concat(), text);
        let words = "word ".repeat(40_000);
        let parts: Vec<&str> = pieces(&words).collect();
        assert!(parts[..parts.len() - 1].iter().all(|p| p.ends_with(' ')));
    }

    #[test]
    fn reference_counts_match_both_vocabularies() {
        // Reference counts from OpenAI's tiktoken for the same strings.
        assert_eq!(o200k("hello world"), 2);
        assert_eq!(cl100k("hello world"), 2);
        assert_eq!(o200k(""), 0);
    }

    #[test]
    fn a_million_spaces_count_quickly_and_exactly() {
        let spaces = " ".repeat(1_000_000);
        let started = std::time::Instant::now();
        let counted = BpeCounter::new(Encoding::O200kBase).count_text(&spaces);
        assert!(!counted.estimated);
        // Each 64 KiB piece is one whitespace run, counted exactly; the cuts
        // add at most one token each.
        let reference = tiktoken_rs::o200k_base().unwrap();
        let exact: u64 = pieces(&spaces)
            .map(|piece| reference.encode_ordinary(piece).len() as u64)
            .sum();
        assert_eq!(counted.n.get(), exact);
        eprintln!(
            "1,000,000 spaces: {} tokens in {:?}",
            counted.n,
            started.elapsed()
        );
    }

    #[test]
    fn huge_blocks_are_estimated_without_panicking() {
        let big = "a".repeat(ESTIMATE_ABOVE_BYTES + 4);
        let counted = BpeCounter::new(Encoding::O200kBase).count_text(&big);
        assert!(counted.estimated);
        assert_eq!(counted.n.get(), (ESTIMATE_ABOVE_BYTES as u64 + 4) / 4);
    }

    #[test]
    fn messages_add_overhead_and_flat_images() {
        let message = Message::new(
            crate::Role::User,
            vec![
                Block::Text("hello world".into()),
                Block::Image(crate::Image {
                    media_type: "image/png".into(),
                    source: crate::ImageSource::Data("AAAA".into()),
                }),
            ],
        );
        let counted = count_message(
            &BpeCounter::new(Encoding::O200kBase),
            &message,
            DEFAULT_IMAGE_TOKENS,
        );
        assert_eq!(counted.n.get(), 4 + 2 + 1_100);
    }
}
