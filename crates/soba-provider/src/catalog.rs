//! The model catalog: context windows, output limits and list prices of
//! the chat models LiteLLM's `model_prices_and_context_window.json` knows
//! (MIT licence; ccusage prices from it too), shipped with the binary as
//! `data/litellm-models.json` and parsed once, on first use.
//!
//! `scripts/refresh-prices` rewrites the file from the newest LiteLLM wheel
//! on PyPI, keeping only the fields read here; its header names the
//! version and the day PyPI received it ([`TABLE_DATE`]).
//!
//! A name is looked up as written first (`azure/gpt-5`,
//! `us.anthropic.claude-opus-4-7`: the reseller's own entry, its own
//! price), then by [`canonical_name`]
//! (no provider prefix, date, `@` tag, Bedrock vendor or `-thinking`).
//! Several entries share a canonical name (the vendor's own, Bedrock's,
//! Azure's, OpenRouter's); the vendor's own entry wins, then the one with
//! the fewest path segments, then the shortest and first by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use serde::Deserialize;

use crate::registry::canonical_name;

/// The day PyPI received the LiteLLM wheel the shipped table comes from.
pub const TABLE_DATE: &str = include_str!("../data/litellm-models.date");

/// The script that refreshes the shipped table.
pub const REFRESH_SCRIPT: &str = "scripts/refresh-prices";

const TABLE: &str = include_str!("../data/litellm-models.json");

/// LiteLLM providers that are the model's own vendor: their entry wins
/// over a reseller's (Bedrock, Azure, OpenRouter, …) for a bare name.
const VENDORS: &[&str] = &[
    "anthropic",
    "openai",
    "gemini",
    "vertex_ai-language-models",
    "deepseek",
    "moonshot",
    "xai",
    "mistral",
    "dashscope",
    "zai",
    "minimax",
    "meta_llama",
];

/// Where the shipped table comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct CatalogHeader {
    /// The LiteLLM file and wheel it was taken from.
    pub source: String,
    /// The LiteLLM version.
    pub version: String,
    /// The day PyPI received the wheel (`YYYY-MM-DD`).
    pub date: String,
}

/// A price tier that applies above a prompt size (Gemini 2.5 Pro above
/// 200k tokens, GPT-5.4 above 272k), in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CatalogTier {
    /// The prompt size in tokens above which the tier applies.
    pub above: u64,
    /// An uncached input token.
    pub input: Option<f64>,
    /// An output token.
    pub output: Option<f64>,
    /// A token read from the cache.
    pub cache_read: Option<f64>,
    /// A token written to the cache.
    pub cache_write: Option<f64>,
}

/// One model of the table; prices in US dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CatalogEntry {
    /// LiteLLM's provider (`anthropic`, `openai`, `bedrock`, …).
    pub provider: Option<String>,
    /// The largest prompt in tokens.
    pub max_input: Option<u64>,
    /// The largest response in tokens.
    pub max_output: Option<u64>,
    /// An uncached input token.
    pub input: Option<f64>,
    /// An output token (reasoning included).
    pub output: Option<f64>,
    /// A token read from the cache.
    pub cache_read: Option<f64>,
    /// A token written to the (5-minute) cache.
    pub cache_write: Option<f64>,
    /// A token written to Anthropic's 1-hour cache.
    #[serde(rename = "cacheWrite1h")]
    pub cache_write_1h: Option<f64>,
    /// The long-prompt tier, when the model has one.
    pub tier: Option<CatalogTier>,
}

#[derive(Deserialize)]
struct CatalogFile {
    header: CatalogHeader,
    models: BTreeMap<String, CatalogEntry>,
}

/// The parsed table with its index by canonical name.
#[derive(Debug)]
pub struct Catalog {
    header: CatalogHeader,
    /// Keys lowercased, for lookups as written.
    models: BTreeMap<String, (String, CatalogEntry)>,
    /// Canonical name → the lowercased key that stands for it.
    by_canonical: HashMap<String, String>,
}

/// A found entry and the table's name for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CatalogMatch<'a> {
    /// The table's name for the model, as LiteLLM spells it.
    pub key: &'a str,
    /// Its figures.
    pub entry: &'a CatalogEntry,
}

/// Returns the shipped table, parsed on first use.
pub fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let file: CatalogFile = serde_json::from_str(TABLE)
            .expect("the embedded litellm-models.json parses (a unit test checks it)");
        Catalog::new(file)
    })
}

/// Orders the entries sharing a canonical name: the vendor's own first,
/// then fewer path segments, then shorter, then by name.
fn rank(key: &str, entry: &CatalogEntry) -> (bool, usize, usize, String) {
    let vendor = entry
        .provider
        .as_deref()
        .is_some_and(|provider| VENDORS.contains(&provider));
    (!vendor, key.matches('/').count(), key.len(), key.to_owned())
}

impl Catalog {
    fn new(file: CatalogFile) -> Catalog {
        let mut by_canonical: HashMap<String, String> = HashMap::new();
        let mut models: BTreeMap<String, (String, CatalogEntry)> = BTreeMap::new();
        for (key, entry) in file.models {
            let lower = key.to_ascii_lowercase();
            let canonical = canonical_name(&key);
            let better = match by_canonical
                .get(&canonical)
                .and_then(|held| models.get(held))
            {
                Some((held_key, held_entry)) => rank(&key, &entry) < rank(held_key, held_entry),
                None => true,
            };
            if better {
                by_canonical.insert(canonical, lower.clone());
            }
            models.insert(lower, (key, entry));
        }
        Catalog {
            header: file.header,
            models,
            by_canonical,
        }
    }

    /// Returns where the table comes from.
    pub fn header(&self) -> &CatalogHeader {
        &self.header
    }

    /// Returns the number of models in the table.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// Returns whether the table is empty (never, for the shipped one).
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// Finds a model by the name as written, then by its canonical name.
    pub fn lookup(&self, name: &str) -> Option<CatalogMatch<'_>> {
        let lower = name.trim().to_ascii_lowercase();
        let key = if self.models.contains_key(&lower) {
            lower
        } else {
            self.by_canonical.get(&canonical_name(name))?.clone()
        };
        self.models
            .get(&key)
            .map(|(key, entry)| CatalogMatch { key, entry })
    }

    /// Returns a one-line note for a model the table lacks: the table's
    /// date and how to refresh it.
    pub fn missing_note(&self, model: &str) -> String {
        format!(
            "{model} is not in the model table (LiteLLM {} of {}): a newer model needs {REFRESH_SCRIPT}",
            self.header.version, self.header.date
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key, maximum input, maximum output and input price found.
    type Found<'a> = Option<(&'a str, Option<u64>, Option<u64>, Option<f64>)>;

    fn check(name: &str, expected: Found<'_>) {
        let found = catalog().lookup(name).map(|hit| {
            (
                hit.key,
                hit.entry.max_input,
                hit.entry.max_output,
                hit.entry.input,
            )
        });
        assert_eq!(found, expected, "{name}");
    }

    #[test]
    fn the_embedded_table_parses_and_holds_todays_models() {
        let table = catalog();
        assert_eq!(table.header().date, TABLE_DATE);
        assert_eq!(table.header().version, "1.110.2");
        assert!(table.len() > 3_000, "{}", table.len());
        for model in [
            "claude-opus-4-6",
            "claude-opus-4-7",
            "gpt-5.3-codex",
            "gpt-5.4",
            "gpt-5.5",
        ] {
            assert_eq!(table.lookup(model).map(|hit| hit.key), Some(model));
        }
        let opus = table.lookup("claude-opus-4-7").unwrap().entry;
        assert_eq!(
            (
                opus.provider.as_deref(),
                opus.max_input,
                opus.max_output,
                opus.input,
                opus.output,
                opus.cache_read,
                opus.cache_write,
                opus.cache_write_1h
            ),
            (
                Some("anthropic"),
                Some(1_000_000),
                Some(128_000),
                Some(5.0),
                Some(25.0),
                Some(0.5),
                Some(6.25),
                Some(10.0)
            )
        );
        let tier = table.lookup("gpt-5.4").unwrap().entry.tier.unwrap();
        assert_eq!(
            (tier.above, tier.input, tier.output, tier.cache_read),
            (272_000, Some(5.0), Some(22.5), Some(0.5))
        );
    }

    #[test]
    fn names_are_normalised_and_the_vendor_wins() {
        let opus = Some(("claude-opus-4-7", Some(1_000_000), Some(128_000), Some(5.0)));
        for name in [
            "claude-opus-4-7",
            "Claude-Opus-4-7",
            "anthropic/claude-opus-4-7",
            "claude-opus-4-7-thinking",
            "claude-opus-4-7-20991231",
            "vertex_ai/claude-opus-4-7@20991231",
            "openrouter/anthropic/claude-opus-4.7",
        ] {
            check(name, opus);
        }
        // A name the table holds as written is its own entry.
        assert_eq!(
            catalog()
                .lookup("claude-opus-4-7-20260416")
                .map(|hit| hit.key),
            Some("claude-opus-4-7-20260416")
        );
        // A bare name the vendor lists under its prefix: Moonshot's own.
        let kimi = Some((
            "moonshot/kimi-k2.5",
            Some(262_144),
            Some(262_144),
            Some(0.6),
        ));
        check("kimi-k2.5", kimi);
        check("moonshotai/kimi-k2.5", kimi);
        check(
            "gpt-5.3-codex",
            Some(("gpt-5.3-codex", Some(272_000), Some(128_000), Some(1.75))),
        );
        // A reseller's name as written finds the reseller's own entry.
        let azure = catalog().lookup("azure/gpt-5-codex").unwrap();
        assert_eq!(azure.key, "azure/gpt-5-codex");
        check("no-such-model-9", None);
        assert_eq!(
            catalog().missing_note("gpt-9"),
            "gpt-9 is not in the model table (LiteLLM 1.110.2 of 2026-11-20): a newer model needs scripts/refresh-prices"
        );
    }
}
