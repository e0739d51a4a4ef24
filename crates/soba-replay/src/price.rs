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

    /// Returns what one billed response cost: [`Price::recorded`], with
    /// the 1-hour cache writes among its writes at twice the input price
    /// (Anthropic's rate for them) instead of the 5-minute write price.
    pub fn billed(&self, usage: &Usage, cache_write_1h: u64) -> f64 {
        let long = cache_write_1h.min(usage.cache_write) as f64;
        self.recorded(usage) + long * (2.0 * self.input - self.cache_write) / 1e6
    }

    /// Returns what `billed_equivalent` input-token equivalents and
    /// `output` output tokens cost.
    pub fn replayed(&self, billed_equivalent: f64, output: u64) -> f64 {
        (billed_equivalent * self.input + output as f64 * self.output) / 1e6
    }
}

/// What a set of billed responses used and cost: the token columns of
/// the recorded cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BillLine {
    /// Responses billed.
    pub responses: u64,
    /// Uncached input tokens.
    pub input: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Input tokens read from the cache.
    pub cache_read: u64,
    /// Input tokens written to the cache.
    pub cache_write: u64,
    /// Of `cache_write`, those written with the 1-hour lifetime.
    pub cache_write_1h: u64,
    /// What they cost in US dollars; `None` when a response's model has no
    /// price.
    pub dollars: Option<f64>,
    /// Responses whose model has no price.
    pub unpriced: u64,
}

impl BillLine {
    /// Adds one response, priced at `price` (`None`: its model has none).
    pub fn add_response(&mut self, usage: &Usage, cache_write_1h: u64, price: Option<Price>) {
        let first = self.responses == 0;
        self.responses += 1;
        self.input += usage.input;
        self.output += usage.output;
        self.cache_read += usage.cache_read;
        self.cache_write += usage.cache_write;
        self.cache_write_1h += cache_write_1h.min(usage.cache_write);
        match price {
            Some(price) if first || self.dollars.is_some() => {
                self.dollars =
                    Some(self.dollars.unwrap_or(0.0) + price.billed(usage, cache_write_1h));
            }
            Some(_) => {}
            None => {
                self.unpriced += 1;
                self.dollars = None;
            }
        }
    }

    /// Adds another line (a session's to a group's): dollars stay known
    /// only while both are.
    pub fn merge(&mut self, other: &BillLine) {
        let dollars = match (self.responses, other.responses) {
            (0, _) => other.dollars,
            (_, 0) => self.dollars,
            _ => self.dollars.zip(other.dollars).map(|(a, b)| a + b),
        };
        self.responses += other.responses;
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.cache_write_1h += other.cache_write_1h;
        self.unpriced += other.unpriced;
        self.dollars = dollars;
    }
}

/// The recorded cost of a session (or several): every billed response,
/// in all and per model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bill {
    /// Every response.
    pub total: BillLine,
    /// Per model, by the name the transcript spells (`unknown` when it
    /// names none).
    pub models: BTreeMap<String, BillLine>,
}

impl Bill {
    /// Prices every billed response at its own model's price; a response
    /// that names no model is `fallback_model`'s.
    pub fn of(
        responses: &[soba_store::import::BilledResponse],
        fallback_model: &str,
        prices: &PriceTable,
    ) -> Bill {
        let mut bill = Bill::default();
        for response in responses {
            let model = response.model.as_deref().unwrap_or(fallback_model);
            let price = prices.get(model);
            bill.total
                .add_response(&response.usage, response.cache_write_1h, price);
            bill.models
                .entry(model.to_owned())
                .or_default()
                .add_response(&response.usage, response.cache_write_1h, price);
        }
        bill
    }

    /// Adds another bill.
    pub fn merge(&mut self, other: &Bill) {
        self.total.merge(&other.total);
        for (model, line) in &other.models {
            self.models.entry(model.clone()).or_default().merge(line);
        }
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

    /// Returns where the prices of `models` (as the transcripts spell
    /// them) came from: `list prices as of <date>`, `prices from your
    /// config` when every priced one was set there, or both with the count
    /// set there; models without a price are not counted. (A walk read
    /// "1 model price(s) from your config" on a bill whose one price was
    /// the config's, and on one the config did not touch.)
    pub fn source_for<'a>(&self, models: impl IntoIterator<Item = &'a str>) -> String {
        let mut from_config = std::collections::BTreeSet::new();
        let mut from_list = std::collections::BTreeSet::new();
        for model in models {
            let name = canonical_name(model);
            if self.overrides.contains_key(&name) {
                from_config.insert(name);
            } else if self.get(model).is_some() {
                from_list.insert(name);
            }
        }
        match (from_config.len(), from_list.len()) {
            (0, _) => format!("list prices as of {PRICES_AS_OF}"),
            (_, 0) => "prices from your config".to_owned(),
            (n, _) => {
                format!("list prices as of {PRICES_AS_OF}; {n} model price(s) from your config")
            }
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
    fn the_source_names_where_the_used_prices_came_from() {
        let mut table = PriceTable::new();
        table.set("acme/walker", Price::new(3.0, 15.0, 3.0, 3.0));
        let list = format!("list prices as of {PRICES_AS_OF}");
        // A config price for a model the bill does not use is not named.
        assert_eq!(table.source_for(["claude-sonnet-4-5"]), list);
        assert_eq!(table.source_for(["acme/walker"]), "prices from your config");
        assert_eq!(
            table.source_for(["acme/walker", "claude-sonnet-4-5", "acme/walker"]),
            format!("{list}; 1 model price(s) from your config")
        );
        // Models without a price count for neither.
        assert_eq!(table.source_for(["acme/unknown"]), list);
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

    /// Issue 34 finding 5: the recorded cost is every billed response at
    /// its own model's price, 1-hour cache writes at twice the input.
    #[test]
    fn a_bill_prices_each_response_at_its_own_model_with_1h_writes() {
        use soba_store::import::BilledResponse;
        let response = |model: Option<&str>, input, read, write, long, output| BilledResponse {
            model: model.map(str::to_owned),
            usage: Usage {
                input,
                cache_read: read,
                cache_write: write,
                output,
                reasoning: 0,
            },
            cache_write_1h: long,
            timestamp: None,
        };
        let responses = [
            // Opus 4.7 at 5 / 25 / 0.50 / 6.25: 3 × 5 + 1,000 × 0.5 + 20 ×
            // 6.25 + 80 × 10 + 40 × 25 = 2,440 micro-dollars.
            response(Some("claude-opus-4-7"), 3, 1_000, 100, 80, 40),
            // Haiku 4.5 at 1 / 5: 50 + 50 = 100.
            response(Some("claude-haiku-4-5"), 50, 0, 0, 0, 10),
            // No model named: the session's (Opus 4.7): 7 × 5 + 2,000 × 0.5
            // + 9 × 25 = 1,260.
            response(None, 7, 2_000, 0, 0, 9),
        ];
        let bill = Bill::of(&responses, "claude-opus-4-7", &PriceTable::new());
        let total = bill.total;
        assert_eq!(
            (
                total.responses,
                total.input,
                total.output,
                total.cache_read,
                total.cache_write,
                total.cache_write_1h,
                total.unpriced
            ),
            (3, 60, 59, 3_000, 100, 80, 0)
        );
        let dollars = total.dollars.expect("every model has a price");
        assert!((dollars - 3_800e-6).abs() < 1e-12, "{dollars}");
        let models: Vec<(&str, u64, Option<f64>)> = bill
            .models
            .iter()
            .map(|(model, line)| {
                (
                    model.as_str(),
                    line.responses,
                    line.dollars.map(|d| (d * 1e6).round()),
                )
            })
            .collect();
        assert_eq!(
            models,
            [
                ("claude-haiku-4-5", 1, Some(100.0)),
                ("claude-opus-4-7", 2, Some(3_700.0)),
            ]
        );
        // A model with no price leaves the total unknown, not short.
        let mut more = responses.to_vec();
        more.push(response(Some("acme-1"), 1, 0, 0, 0, 1));
        let bill = Bill::of(&more, "claude-opus-4-7", &PriceTable::new());
        assert_eq!((bill.total.dollars, bill.total.unpriced), (None, 1));
        assert_eq!(bill.models["acme-1"].dollars, None);
        assert!(bill.models["claude-opus-4-7"].dollars.is_some());
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
