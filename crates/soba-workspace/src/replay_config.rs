//! What `soba replay` takes from the workspace: the replay's prices with
//! the configuration's `models.*.*Price` overrides, the local time zone
//! its days are counted in, and a `--project` folder.

use soba_replay::price::{Price, PriceTable};

use crate::config::Config;
use crate::error::{Result, WorkspaceError};

/// The built-in prices with the config's `models.*.*Price` overrides: a
/// price not given keeps the built-in one; a model soba has no price for
/// needs its input and output prices (without them the entry is left out,
/// with a warning), and its cache prices default to the input price. Two
/// entries naming one model (`claude-sonnet-4-5` and
/// `anthropic/claude-sonnet-4-5`) are an error, not a mix of both.
/// Returns the table and the warnings to show.
pub fn price_table(config: &Config) -> Result<(PriceTable, Vec<String>)> {
    use soba_core::terminal::sanitize_line as line;
    let mut table = PriceTable::new();
    let mut warnings = Vec::new();
    let mut named: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
    for (model, [input, output, read, write]) in &config.prices {
        let canonical = soba_provider::registry::canonical_name(model);
        if let Some(first) = named.insert(canonical.clone(), model) {
            return Err(WorkspaceError::usage(format!(
                "models.\"{}\" and models.\"{}\" both set prices of {}",
                line(first),
                line(model),
                line(&canonical)
            ))
            .hint("keep the prices under one of the two names in your user config"));
        }
        let builtin = table.get(model);
        let (Some(input), Some(output)) = (
            input.or(builtin.map(|p| p.input)),
            output.or(builtin.map(|p| p.output)),
        ) else {
            warnings.push(format!(
                "warning: models.\"{}\": soba has no built-in price for this model, so its prices need both inputPrice and outputPrice (US dollars per million tokens); left out",
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
    Ok((table, warnings))
}

/// A `--project` value that names a folder (`.`, `../api`, `~/code/x`
/// as the shell expands it) becomes its absolute path; any other value is
/// matched as text.
pub fn project_folder(value: &str) -> String {
    match std::fs::canonicalize(value) {
        Ok(path) if path.is_dir() => path.display().to_string(),
        _ => value.to_owned(),
    }
}

/// The local time zone days are counted in: `TZ` when it is a zone name,
/// a POSIX rule or a zone file (read as outside bytes: a regular file of
/// at most 1 MiB), else the system's; UTC, with a warning, when `TZ` is
/// none of these (the warning is returned, to be shown).
pub fn local_zone() -> (jiff::tz::TimeZone, Option<String>) {
    use jiff::tz::TimeZone;
    let Some(tz) = std::env::var_os("TZ").filter(|tz| !tz.is_empty()) else {
        return (TimeZone::try_system().unwrap_or(TimeZone::UTC), None);
    };
    let text = tz.to_string_lossy();
    let name = text.strip_prefix(':').unwrap_or(&text);
    let zone = if name.starts_with('/') {
        soba_store::untrusted::read_untrusted(std::path::Path::new(name), 1 << 20)
            .ok()
            .and_then(|bytes| TimeZone::tzif(name, &bytes).ok())
    } else if is_zone_name(name) {
        TimeZone::get(name)
            .ok()
            .or_else(|| TimeZone::posix(name).ok())
    } else {
        TimeZone::posix(name).ok()
    };
    match zone {
        Some(zone) => (zone, None),
        None => (
            TimeZone::UTC,
            Some(format!(
                "warning: TZ={} is not a time zone soba can read; days are counted in UTC",
                soba_core::terminal::sanitize_line(&text.chars().take(200).collect::<String>())
            )),
        ),
    }
}

/// Whether `name` looks like a zone database name (`Europe/Paris`,
/// `UTC`): letters, digits, `_`, `-`, `+` and `/`, no `..`.
pub fn is_zone_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/'))
}
