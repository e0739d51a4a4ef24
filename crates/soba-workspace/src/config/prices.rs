//! The list prices a session is priced at: the built-in table with the
//! config's `models.*.*Price` overrides. `soba replay` and the TUI's
//! `/usage` price with the same table.

use soba_core::terminal::sanitize_line as line;
use soba_replay::price::{Price, PriceTable};

use super::Config;

/// A price table and the config entries it left out, each as a warning.
#[derive(Debug)]
pub struct Priced {
    /// The built-in prices with the config's overrides.
    pub table: PriceTable,
    /// One line per entry left out, e.g. an unknown model with only an
    /// input price.
    pub warnings: Vec<String>,
}

impl Config {
    /// Returns the built-in prices with the config's `models.*.*Price`
    /// overrides: a price not given keeps the built-in one; a model soba
    /// has no price for needs its input and output prices (without them
    /// the entry is left out, with a warning), and its cache prices default
    /// to the input price. Two entries naming one model
    /// (`claude-sonnet-4-5` and `anthropic/claude-sonnet-4-5`) are an
    /// error (the message), not a mix of both.
    pub fn price_table(&self) -> Result<Priced, String> {
        let mut table = PriceTable::new();
        let mut warnings = Vec::new();
        let mut named: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for (model, [input, output, read, write]) in &self.prices {
            let canonical = soba_provider::registry::canonical_name(model);
            if let Some(first) = named.insert(canonical.clone(), model) {
                return Err(format!(
                    "models.\"{}\" and models.\"{}\" both set prices of {}",
                    line(first),
                    line(model),
                    line(&canonical)
                ));
            }
            let builtin = table.get(model);
            let (Some(input), Some(output)) = (
                input.or(builtin.map(|p| p.input)),
                output.or(builtin.map(|p| p.output)),
            ) else {
                warnings.push(format!(
                    "models.\"{}\": soba has no built-in price for this model, so its prices need both inputPrice and outputPrice (US dollars per million tokens); left out",
                    line(model)
                ));
                continue;
            };
            table.set(
                model,
                Price {
                    input,
                    output,
                    cache_read: read.or(builtin.map(|p| p.cache_read)).unwrap_or(input),
                    cache_write: write.or(builtin.map(|p| p.cache_write)).unwrap_or(input),
                },
            );
        }
        Ok(Priced { table, warnings })
    }
}
