//! Billed-equivalent tokens (SPEC §15.4): the cached prefix of each request
//! at message granularity, the cache lifetime from recorded timestamps, the
//! three pricing formulas and the summarizer attempts.

use std::fmt;

use soba_provider::registry::canonical_name;

/// How cached prompt tokens are priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// Anthropic: prefix × 0.1 + rest × 1.25 (cache reads and writes).
    Anthropic,
    /// OpenAI: prefix × r + rest, r by model family.
    OpenAi,
    /// No cache: every prompt token at × 1.
    None,
}

impl CacheMode {
    /// Returns the name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Anthropic => "anthropic",
            CacheMode::OpenAi => "openai",
            CacheMode::None => "none",
        }
    }

    /// Parses `anthropic`, `openai` or `none`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Some(CacheMode::Anthropic),
            "openai" => Some(CacheMode::OpenAi),
            "none" => Some(CacheMode::None),
            _ => None,
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Anthropic's price of a cache read, relative to an uncached token.
pub const ANTHROPIC_READ: f64 = 0.1;
/// Anthropic's price of a cache write, relative to an uncached token.
pub const ANTHROPIC_WRITE: f64 = 1.25;
/// OpenAI's cached-token price for the gpt-5 family.
pub const OPENAI_READ_GPT5: f64 = 0.1;
/// OpenAI's cached-token price for gpt-4.1, o3, o4-mini and unknown models.
pub const OPENAI_READ_OTHER: f64 = 0.25;
/// The weight of a summarizer output token against an input token.
pub const SUMMARIZER_OUTPUT_WEIGHT: f64 = 5.0;

/// Returns OpenAI's cached-token price `r` for a model.
pub fn openai_read_price(model: &str) -> f64 {
    if canonical_name(model).starts_with("gpt-5") {
        OPENAI_READ_GPT5
    } else {
        OPENAI_READ_OTHER
    }
}

/// The pricing of one trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// The cache formula.
    pub mode: CacheMode,
    /// OpenAI's `r` for the trace's model.
    pub openai_read: f64,
    /// `--cache-ttl` in milliseconds; 0 ignores the cache lifetime.
    pub ttl_ms: i64,
    /// `--summarizer-price`.
    pub summarizer_price: f64,
}

impl CostModel {
    /// Returns the billed-equivalent tokens of one request of `prompt`
    /// tokens whose first `prefix` tokens are cached.
    pub fn request(&self, prompt: u64, prefix: u64) -> f64 {
        let prefix = prefix.min(prompt) as f64;
        let rest = prompt as f64 - prefix;
        match self.mode {
            CacheMode::Anthropic => prefix * ANTHROPIC_READ + rest * ANTHROPIC_WRITE,
            CacheMode::OpenAi => prefix * self.openai_read + rest,
            CacheMode::None => prompt as f64,
        }
    }

    /// Returns the billed-equivalent tokens of one summarizer attempt.
    pub fn summarizer(&self, input: u64, output: u64) -> f64 {
        (input as f64 + SUMMARIZER_OUTPUT_WEIGHT * output as f64) * self.summarizer_price
    }

    /// Returns whether the cache expired between two recorded requests.
    pub fn expired(&self, previous_ms: Option<i64>, now_ms: Option<i64>) -> bool {
        match (previous_ms, now_ms) {
            (Some(previous), Some(now)) if self.ttl_ms > 0 => now - previous > self.ttl_ms,
            _ => false,
        }
    }
}

/// One message of a request as the prefix comparison sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixMessage {
    /// Equal keys are the same message with the same content.
    pub key: u64,
    /// Its local token count.
    pub tokens: u64,
}

/// Returns the local tokens of the longest common prefix of two requests at
/// message granularity, message 0 (`first_*`: system prompt and tools)
/// included; 0 when message 0 differs.
pub fn common_prefix_local(
    previous: (u64, u64, &[PrefixMessage]),
    current: (u64, u64, &[PrefixMessage]),
) -> u64 {
    let (previous_key, _, previous_items) = previous;
    let (current_key, current_first, current_items) = current;
    if previous_key != current_key {
        return 0;
    }
    current_first
        + previous_items
            .iter()
            .zip(current_items)
            .take_while(|(a, b)| a.key == b.key)
            .map(|(_, b)| b.tokens)
            .sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(mode: CacheMode) -> CostModel {
        CostModel {
            mode,
            openai_read: 0.1,
            ttl_ms: 300_000,
            summarizer_price: 0.33,
        }
    }

    fn messages(keys: &[(u64, u64)]) -> Vec<PrefixMessage> {
        keys.iter()
            .map(|&(key, tokens)| PrefixMessage { key, tokens })
            .collect()
    }

    #[test]
    fn prefix_counts_common_messages_exactly() {
        let first = messages(&[(1, 100), (2, 50), (3, 70)]);
        let second = messages(&[(1, 100), (2, 50), (4, 10), (5, 20)]);
        assert_eq!(
            common_prefix_local((0, 1_000, &first), (0, 1_000, &second)),
            1_150
        );
        // A changed message 0 (system part) breaks the whole prefix.
        assert_eq!(
            common_prefix_local((0, 1_000, &first), (9, 1_000, &second)),
            0
        );
        // A request that diverges at its first message reuses message 0 only.
        let third = messages(&[(7, 100)]);
        assert_eq!(
            common_prefix_local((0, 1_000, &second), (0, 1_000, &third)),
            1_000
        );
    }

    #[test]
    fn formulas_per_cache_mode() {
        assert_eq!(
            model(CacheMode::Anthropic).request(1_000, 800),
            80.0 + 250.0
        );
        assert_eq!(model(CacheMode::OpenAi).request(1_000, 800), 80.0 + 200.0);
        assert_eq!(model(CacheMode::None).request(1_000, 800), 1_000.0);
        let mut gpt41 = model(CacheMode::OpenAi);
        gpt41.openai_read = openai_read_price("gpt-4.1");
        assert_eq!(gpt41.request(1_000, 800), 200.0 + 200.0);
        assert_eq!(openai_read_price("openai/gpt-5.3-codex"), 0.1);
        assert_eq!(openai_read_price("o3"), 0.25);
        assert_eq!(openai_read_price("mystery"), 0.25);
    }

    #[test]
    fn summarizer_attempts_weigh_output_five_times() {
        let cost = model(CacheMode::Anthropic).summarizer(10_000, 1_000);
        assert!((cost - 15_000.0 * 0.33).abs() < 1e-9);
    }

    #[test]
    fn ttl_expires_only_beyond_the_lifetime() {
        let cost = model(CacheMode::Anthropic);
        assert!(!cost.expired(Some(0), Some(300_000)));
        assert!(cost.expired(Some(0), Some(300_001)));
        assert!(!cost.expired(None, Some(900_000)));
        let no_expiry = CostModel { ttl_ms: 0, ..cost };
        assert!(!no_expiry.expired(Some(0), Some(10_000_000)));
    }

    #[test]
    fn cache_modes_parse() {
        for mode in [CacheMode::Anthropic, CacheMode::OpenAi, CacheMode::None] {
            assert_eq!(CacheMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(CacheMode::parse("redis"), None);
    }
}
