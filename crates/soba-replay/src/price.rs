//! Dollars: API list prices (US dollars per million tokens, standard
//! tier, no batch discount) from LiteLLM's table shipped with
//! `soba-provider` ([`soba_provider::catalog`], dated [`PRICES_AS_OF`]),
//! overridable per model, and the two figures priced with them:
//!
//! - **recorded**: what the transcript's own usage cost, each request at
//!   its own model's price: uncached input, cache reads, cache writes
//!   (Anthropic's 5-minute write, and the 1-hour write price for the
//!   writes Claude Code records in `cache_creation`; the others bill a
//!   write as input) and
//!   output;
//! - **replayed**: what a policy's requests would have cost, its
//!   billed-equivalent input tokens (already weighted by the cache model:
//!   reads × 0.1, writes × 1.25 for Anthropic) at the trace model's input
//!   price, plus the recorded output at its output price (every policy
//!   replays the same answers).
//!
//! A price is looked up in the config's overrides, then in the shipped
//! table (by the name as written, then by its canonical name: the
//! vendor's own entry), then in the short hand list below for models the
//! table lacks. Where the table lists no cache price, a cache read or
//! write is billed as input. Tiered prices (Gemini 2.5 Pro above 200k
//! prompt tokens, GPT-5.4 and 5.5 above 272k) use the base tier;
//! [`PriceTable::tier`] gives the other.

use std::collections::BTreeMap;

use soba_core::Usage;
use soba_provider::catalog::{CatalogEntry, catalog};
use soba_provider::registry::canonical_name;

/// The day of the shipped table's LiteLLM release
/// (`scripts/refresh-prices` refreshes it).
pub const PRICES_AS_OF: &str = soba_provider::catalog::TABLE_DATE;

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

/// Prices of models the shipped table lacks (none today: every model of
/// the registry's hand list is in LiteLLM's table); kept so that a model
/// LiteLLM drops keeps a price until the list is updated.
const BUILTIN: &[(&str, Price)] = &[];

/// Returns the table's price of a model, `None` without input and output
/// prices; a cache price it lacks is the input price.
fn table_price(entry: &CatalogEntry) -> Option<Price> {
    let input = entry.input?;
    let output = entry.output?;
    Some(Price::new(
        input,
        output,
        entry.cache_read.unwrap_or(input),
        entry.cache_write.unwrap_or(input),
    ))
}

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

    /// Returns the price of `model`, `None` when neither the overrides, the
    /// shipped table nor the hand list know it.
    pub fn get(&self, model: &str) -> Option<Price> {
        // OpenRouter's `:free` variants cost nothing, whatever the model.
        if model.trim().to_ascii_lowercase().ends_with(":free") {
            return Some(Price::new(0.0, 0.0, 0.0, 0.0));
        }
        let name = canonical_name(model);
        self.overrides
            .get(&name)
            .copied()
            .or_else(|| {
                catalog()
                    .lookup(model)
                    .and_then(|hit| table_price(hit.entry))
            })
            .or_else(|| {
                BUILTIN
                    .iter()
                    .find(|(known, _)| canonical_name(known) == name)
                    .map(|(_, price)| *price)
            })
    }

    /// Returns the price of a token written to Anthropic's 1-hour cache:
    /// the table's, else twice the input price (Anthropic's rule); `None`
    /// when the model has no price.
    pub fn one_hour_write(&self, model: &str) -> Option<f64> {
        let price = self.get(model)?;
        let listed = if self.overrides.contains_key(&canonical_name(model)) {
            None
        } else {
            catalog()
                .lookup(model)
                .and_then(|hit| hit.entry.cache_write_1h)
        };
        Some(listed.unwrap_or(2.0 * price.input))
    }

    /// Returns a model's long-prompt tier from the shipped table: the
    /// prompt size above which it applies and its prices (a price it does
    /// not list is the base one). `None` for a model without a tier or
    /// whose price the config sets.
    pub fn tier(&self, model: &str) -> Option<(u64, Price)> {
        if self.overrides.contains_key(&canonical_name(model)) {
            return None;
        }
        let base = self.get(model)?;
        let tier = catalog().lookup(model)?.entry.tier?;
        Some((
            tier.above,
            Price::new(
                tier.input.unwrap_or(base.input),
                tier.output.unwrap_or(base.output),
                tier.cache_read.unwrap_or(base.cache_read),
                tier.cache_write.unwrap_or(base.cache_write),
            ),
        ))
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
    fn todays_models_are_priced_from_the_shipped_table() {
        // Figures of LiteLLM 1.110.2 (data/litellm-models.json).
        let mut table = PriceTable::new();
        let opus = Price::new(5.0, 25.0, 0.5, 6.25);
        for name in [
            "claude-opus-4-7",
            "claude-opus-4-7-thinking",
            "anthropic/claude-opus-4-7",
            "claude-opus-4-6",
            "claude-opus-4-6-thinking",
            "vertex_ai/claude-opus-4-6@20260205",
        ] {
            assert_eq!(table.get(name), Some(opus), "{name}");
        }
        // A reseller's own spelling gets its own price (Bedrock's US
        // regional uplift).
        assert_eq!(
            table.get("us.anthropic.claude-opus-4-7"),
            Some(Price::new(5.5, 27.5, 0.55, 6.875))
        );
        // No cache write price listed: a write is billed as input.
        assert_eq!(table.get("gpt-5.5"), Some(Price::new(5.0, 30.0, 0.5, 5.0)));
        assert_eq!(
            table.get("gpt-5.4-2026-03-05"),
            Some(Price::new(2.5, 15.0, 0.25, 2.5))
        );
        assert_eq!(
            table.get("openai/gpt-5.3-codex"),
            Some(Price::new(1.75, 14.0, 0.175, 1.75))
        );
        assert_eq!(table.get("kimi-k2.5"), Some(Price::new(0.6, 3.0, 0.1, 0.6)));
        assert_eq!(table.one_hour_write("claude-opus-4-7"), Some(10.0));
        assert_eq!(table.one_hour_write("gpt-5.5"), Some(10.0));
        assert_eq!(
            table.tier("gpt-5.4"),
            Some((272_000, Price::new(5.0, 22.5, 0.5, 2.5)))
        );
        assert_eq!(table.tier("claude-opus-4-7"), None);
        assert_eq!(PRICES_AS_OF, "2026-11-20");
        // The config comes first, under either spelling.
        table.set("anthropic/claude-opus-4-7", Price::new(1.0, 2.0, 0.1, 1.25));
        assert_eq!(
            table.get("claude-opus-4-7-thinking"),
            Some(Price::new(1.0, 2.0, 0.1, 1.25))
        );
        assert_eq!(table.one_hour_write("claude-opus-4-7"), Some(2.0));
        table.set("gpt-5.4", Price::new(1.0, 2.0, 0.1, 1.0));
        assert_eq!(table.tier("openai/gpt-5.4"), None);
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
