//! Dollars: a dated table of API list prices (US dollars per million
//! tokens, standard tier, no batch discount) for the models the registry
//! knows, overridable per model, and the two figures priced with it:
//!
//! - **recorded**: what the transcript's own usage cost, each request at
//!   its own model's price: uncached input, cache reads, cache writes
//!   (Anthropic's 5-minute write, and twice the input price for the 1-hour
//!   writes Claude Code records in `cache_creation`; the others bill a
//!   write as input) and
//!   output;
//! - **replayed**: what a policy's requests would have cost, its
//!   billed-equivalent input tokens (already weighted by the cache model:
//!   reads × 0.1, writes × 1.25 for Anthropic) at the trace model's input
//!   price, plus the recorded output at its output price (every policy
//!   replays the same answers).
//!
//! Figures are checked against the vendors' pricing pages and LiteLLM's
//! price list as of [`PRICES_AS_OF`]. Tiered prices (Sonnet 4 and 4.5,
//! Gemini 2.5 Pro above 200k prompt tokens) use the base tier; models with
//! no first-party API (qwen3-coder, llama-4-maverick) use OpenRouter's
//! price and no cache prices.

use std::collections::BTreeMap;

use soba_core::Usage;
use soba_provider::registry::canonical_name;

/// When the built-in prices were last checked.
pub const PRICES_AS_OF: &str = "2026-04";

/// A model's prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// An uncached input token.
    pub input: f64,
    /// An output token (reasoning included).
    pub output: f64,
    /// A token read from the cache.
    pub cache_read: f64,
    /// A token written to the cache.
    pub cache_write: f64,
}

impl Price {
    const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Price {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    /// Returns what one recorded request cost.
    pub fn recorded(&self, usage: &Usage) -> f64 {
        (usage.input as f64 * self.input
            + usage.cache_read as f64 * self.cache_read
            + usage.cache_write as f64 * self.cache_write
            + usage.output as f64 * self.output)
            / 1e6
    }

    /// Returns what `billed_equivalent` input-token equivalents and
    /// `output` output tokens cost.
    pub fn replayed(&self, billed_equivalent: f64, output: u64) -> f64 {
        (billed_equivalent * self.input + output as f64 * self.output) / 1e6
    }
}

/// The built-in table, by model name.
const BUILTIN: &[(&str, Price)] = &[
    ("gpt-5", Price::new(1.25, 10.0, 0.125, 1.25)),
    ("gpt-5-mini", Price::new(0.25, 2.0, 0.025, 0.25)),
    ("gpt-5-nano", Price::new(0.05, 0.40, 0.005, 0.05)),
    ("gpt-5-codex", Price::new(1.25, 10.0, 0.125, 1.25)),
    ("gpt-5.1", Price::new(1.25, 10.0, 0.125, 1.25)),
    ("gpt-5.1-codex", Price::new(1.25, 10.0, 0.125, 1.25)),
    // Issue 34's models, from LiteLLM 1.110.2's
    // model_prices_and_context_window.json (base tier; a write billed as
    // input where it lists no write price).
    ("gpt-5.2", Price::new(1.75, 14.0, 0.175, 1.75)),
    ("gpt-5.2-codex", Price::new(1.75, 14.0, 0.175, 1.75)),
    ("gpt-5.3-codex", Price::new(1.75, 14.0, 0.175, 1.75)),
    ("gpt-5.4", Price::new(2.50, 15.0, 0.25, 2.50)),
    ("gpt-5.5", Price::new(5.0, 30.0, 0.50, 5.0)),
    ("claude-opus-4-7", Price::new(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-6", Price::new(5.0, 25.0, 0.50, 6.25)),
    ("kimi-k2.5", Price::new(0.60, 3.0, 0.10, 0.60)),
    ("gpt-4.1", Price::new(2.0, 8.0, 0.50, 2.0)),
    ("gpt-4.1-mini", Price::new(0.40, 1.60, 0.10, 0.40)),
    ("gpt-4.1-nano", Price::new(0.10, 0.40, 0.025, 0.10)),
    ("gpt-4o", Price::new(2.50, 10.0, 1.25, 2.50)),
    ("gpt-4o-mini", Price::new(0.15, 0.60, 0.075, 0.15)),
    ("o3", Price::new(2.0, 8.0, 0.50, 2.0)),
    ("o4-mini", Price::new(1.10, 4.40, 0.275, 1.10)),
    ("claude-opus-4-5", Price::new(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-1", Price::new(15.0, 75.0, 1.50, 18.75)),
    ("claude-sonnet-4-6", Price::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-sonnet-4-5", Price::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-sonnet-4", Price::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-haiku-4-5", Price::new(1.0, 5.0, 0.10, 1.25)),
    ("gemini-3-pro-preview", Price::new(2.0, 12.0, 0.20, 2.0)),
    ("gemini-2.5-pro", Price::new(1.25, 10.0, 0.125, 1.25)),
    ("gemini-2.5-flash", Price::new(0.30, 2.50, 0.03, 0.30)),
    ("gemini-2.5-flash-lite", Price::new(0.10, 0.40, 0.01, 0.10)),
    ("deepseek-chat", Price::new(0.28, 0.42, 0.028, 0.28)),
    ("deepseek-reasoner", Price::new(0.28, 0.42, 0.028, 0.28)),
    ("qwen3-coder", Price::new(0.22, 0.95, 0.22, 0.22)),
    ("llama-4-maverick", Price::new(0.15, 0.60, 0.15, 0.15)),
];

/// The prices replay uses: the built-in table with any overrides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    overrides: BTreeMap<String, Price>,
}

impl PriceTable {
    /// Returns the built-in table.
    pub fn new() -> Self {
        PriceTable::default()
    }

    /// Sets (or replaces) the price of `model` (any spelling the registry
    /// accepts: `anthropic/claude-sonnet-4-5`, a dated snapshot).
    pub fn set(&mut self, model: &str, price: Price) {
        self.overrides.insert(canonical_name(model), price);
    }

    /// Returns the models whose price was set, by canonical name.
    pub fn overridden(&self) -> Vec<String> {
        self.overrides.keys().cloned().collect()
    }

    /// Returns `as of <date>` for the built-in prices, plus how many were
    /// set instead (`; 2 set in your config`).
    pub fn as_of(&self) -> String {
        match self.overrides.len() {
            0 => format!("list prices as of {PRICES_AS_OF}"),
            n => format!("list prices as of {PRICES_AS_OF}; {n} model price(s) from your config"),
        }
    }

    /// Returns the price of `model`, `None` when neither the overrides nor
    /// the built-in table know it.
    pub fn get(&self, model: &str) -> Option<Price> {
        // OpenRouter's `:free` variants cost nothing, whatever the model.
        if model.trim().to_ascii_lowercase().ends_with(":free") {
            return Some(Price::new(0.0, 0.0, 0.0, 0.0));
        }
        let name = canonical_name(model);
        self.overrides.get(&name).copied().or_else(|| {
            BUILTIN
                .iter()
                .find(|(known, _)| canonical_name(known) == name)
                .map(|(_, price)| *price)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_found_by_any_spelling_and_overrides_win() {
        let mut table = PriceTable::new();
        let sonnet = table.get("anthropic/claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(sonnet, Price::new(3.0, 15.0, 0.30, 3.75));
        assert_eq!(table.get("openai/gpt-5").map(|p| p.cache_read), Some(0.125));
        assert_eq!(table.get("acme/unknown-model"), None);
        // OpenRouter's free variant is free.
        assert_eq!(
            table.get("openrouter/openai/gpt-5:free"),
            Some(Price::new(0.0, 0.0, 0.0, 0.0))
        );
        table.set("openai/gpt-5", Price::new(1.0, 2.0, 0.5, 1.0));
        assert_eq!(table.get("gpt-5").map(|p| p.input), Some(1.0));
        table.set("acme/unknown-model", Price::new(1.0, 1.0, 1.0, 1.0));
        assert!(table.get("unknown-model").is_some());
    }

    #[test]
    fn a_request_costs_each_kind_of_token_at_its_price() {
        let sonnet = Price::new(3.0, 15.0, 0.30, 3.75);
        let usage = Usage {
            input: 1_000,
            cache_read: 100_000,
            cache_write: 2_000,
            output: 500,
            reasoning: 0,
        };
        // 1,000 × 3 + 100,000 × 0.30 + 2,000 × 3.75 + 500 × 15, per million.
        let expected = (3_000.0 + 30_000.0 + 7_500.0 + 7_500.0) / 1e6;
        assert!((sonnet.recorded(&usage) - expected).abs() < 1e-12);
        // 50,000 input equivalents and 500 output tokens.
        let replayed = (50_000.0 * 3.0 + 500.0 * 15.0) / 1e6;
        assert!((sonnet.replayed(50_000.0, 500) - replayed).abs() < 1e-12);
    }

    #[test]
    fn every_registry_model_has_a_price() {
        let table = PriceTable::new();
        for model in soba_provider::registry::BUILTIN_MODELS {
            if model.provider == "demo" {
                continue;
            }
            assert!(
                table.get(model.name).is_some(),
                "no price for {}",
                model.name
            );
        }
    }
}
