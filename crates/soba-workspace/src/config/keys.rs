//! The one table of configuration keys (SPEC §14.3): path, type, default,
//! description and whether a project file may set it. The loader, the JSON
//! Schema (`soba config schema`) and `soba config show` are all driven by
//! [`KEYS`], so documentation can be checked against it.
//!
//! A path is dotted camelCase; `*` stands for a map key chosen by the user
//! (a provider name, a model id).

use serde_json::{Value, json};

/// The type of a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// `true` or `false`.
    Bool,
    /// A non-negative integer in `[min, max]`.
    Integer {
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted, if bounded.
        max: Option<u64>,
    },
    /// A non-negative integer (at least `min`) or `null`.
    NullableInteger {
        /// The smallest value accepted.
        min: u64,
    },
    /// An exact decimal ratio, a JSON number or a decimal string (`0.8`).
    Ratio,
    /// Any string.
    String,
    /// A string or `null`.
    NullableString,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
    /// An array of strings.
    StringList,
    /// A price in US dollars per million tokens: a number from 0 to
    /// [`MAX_PRICE`].
    Price,
}

/// The largest price accepted, in US dollars per million tokens (no model
/// costs near it; larger values would only overflow the report).
pub const MAX_PRICE: f64 = 10_000.0;

impl ValueType {
    /// Returns what the type accepts, for error messages.
    pub fn expected(self) -> String {
        match self {
            ValueType::Bool => "true or false".to_owned(),
            ValueType::Integer { min: 0, max: None } => "a non-negative integer".to_owned(),
            ValueType::Integer { min, max: None } => format!("an integer ≥ {min}"),
            ValueType::Integer {
                min,
                max: Some(max),
            } => {
                format!("an integer from {min} to {max}")
            }
            ValueType::NullableInteger { min: 0 } => "a non-negative integer or null".to_owned(),
            ValueType::NullableInteger { min } => format!("an integer ≥ {min} or null"),
            ValueType::Ratio => "a decimal number such as 0.8".to_owned(),
            ValueType::String => "a string".to_owned(),
            ValueType::NullableString => "a string or null".to_owned(),
            ValueType::Enum(names) => {
                let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
            ValueType::StringList => "an array of strings".to_owned(),
            ValueType::Price => {
                format!("a number of US dollars per million tokens, from 0 to {MAX_PRICE}")
            }
        }
    }

    /// Returns whether `value` has this type (ratios: a parseable decimal).
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            ValueType::Bool => value.is_boolean(),
            ValueType::Integer { min, max } => value
                .as_u64()
                .is_some_and(|n| n >= min && max.is_none_or(|max| n <= max)),
            ValueType::NullableInteger { min } => {
                value.is_null() || value.as_u64().is_some_and(|n| n >= min)
            }
            ValueType::Ratio => {
                let text = match value {
                    Value::Number(number) => number.to_string(),
                    Value::String(text) => text.clone(),
                    _ => return false,
                };
                soba_core::config::Ratio::parse_decimal(&text).is_ok()
            }
            ValueType::String => value.is_string(),
            ValueType::NullableString => value.is_null() || value.is_string(),
            ValueType::Enum(names) => value.as_str().is_some_and(|text| names.contains(&text)),
            ValueType::StringList => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            ValueType::Price => value
                .as_f64()
                .is_some_and(|price| (0.0..=MAX_PRICE).contains(&price)),
        }
    }

    /// Converts the text of an environment variable or `--set` value: the
    /// text itself for string types (`null` for nullable ones), JSON (read
    /// by the config's one parser, [`super::json`]) otherwise; a string list
    /// also takes `a,b,c`.
    pub fn parse_text(self, text: &str) -> Value {
        let trimmed = text.trim();
        match self {
            ValueType::String | ValueType::Enum(_) | ValueType::NullableString => {
                if self == ValueType::NullableString && (trimmed == "null" || trimmed.is_empty()) {
                    return Value::Null;
                }
                if trimmed.starts_with('"')
                    && let Ok(Value::String(inner)) = super::json::parse(trimmed)
                {
                    return Value::String(inner);
                }
                Value::String(trimmed.to_owned())
            }
            ValueType::StringList => match super::json::parse(trimmed) {
                Ok(list @ Value::Array(_)) => list,
                _ => Value::Array(
                    trimmed
                        .split(',')
                        .map(str::trim)
                        .filter(|item| !item.is_empty())
                        .map(|item| Value::String(item.to_owned()))
                        .collect(),
                ),
            },
            _ => super::json::parse(trimmed).unwrap_or_else(|_| Value::String(text.to_owned())),
        }
    }

    /// Returns the JSON Schema of a value of this type.
    pub fn schema(self) -> Value {
        match self {
            ValueType::Bool => json!({"type": "boolean"}),
            ValueType::Integer { min, max } => {
                let mut schema = json!({"type": "integer", "minimum": min});
                if let Some(max) = max {
                    schema["maximum"] = json!(max);
                }
                schema
            }
            ValueType::NullableInteger { min } => {
                json!({"type": ["integer", "null"], "minimum": min})
            }
            ValueType::Ratio => json!({
                "anyOf": [
                    {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    {"type": "string", "pattern": RATIO_PATTERN}
                ]
            }),
            ValueType::String => json!({"type": "string"}),
            ValueType::NullableString => json!({"type": ["string", "null"]}),
            ValueType::Enum(names) => json!({"type": "string", "enum": names}),
            ValueType::StringList => json!({"type": "array", "items": {"type": "string"}}),
            ValueType::Price => json!({"type": "number", "minimum": 0, "maximum": MAX_PRICE}),
        }
    }
}

/// A decimal written as a string (`"0.8"`, `".25"`, `"8e-1"`).
pub const RATIO_PATTERN: &str = r"^\s*\+?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$";

/// Another name a key answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The key it stands for.
    pub of: &'static str,
    /// Whether using it earns a warning (and loses to the key itself).
    pub deprecated: bool,
}

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    /// Dotted camelCase path; `*` is a user-chosen map key.
    pub path: &'static str,
    /// What the value must be.
    pub value_type: ValueType,
    /// The default as JSON text; `None` for keys of map entries without one.
    pub default: Option<&'static str>,
    /// One sentence for the schema and `soba config show`.
    pub description: &'static str,
    /// Whether an (untrusted) project file may set it (SPEC §14.2).
    pub project: bool,
    /// Set when the key is another name for a key.
    pub alias: Option<Alias>,
}

impl KeySpec {
    /// Returns the default value, parsed.
    pub fn default_value(&self) -> Option<Value> {
        self.default
            .and_then(|text| serde_json::from_str(text).ok())
    }

    /// Returns the path's segments.
    pub fn segments(&self) -> impl Iterator<Item = &'static str> {
        self.path.split('.')
    }
}

const fn key(
    path: &'static str,
    value_type: ValueType,
    default: &'static str,
    project: bool,
    description: &'static str,
) -> KeySpec {
    KeySpec {
        path,
        value_type,
        default: Some(default),
        description,
        project,
        alias: None,
    }
}

const fn map_key(
    path: &'static str,
    value_type: ValueType,
    project: bool,
    description: &'static str,
) -> KeySpec {
    KeySpec {
        path,
        value_type,
        default: None,
        description,
        project,
        alias: None,
    }
}

const fn alias(
    path: &'static str,
    of: &'static str,
    value_type: ValueType,
    deprecated: bool,
    description: &'static str,
) -> KeySpec {
    KeySpec {
        path,
        value_type,
        default: None,
        description,
        project: true,
        alias: Some(Alias { of, deprecated }),
    }
}

const TOKENS: ValueType = ValueType::Integer { min: 0, max: None };
const POSITIVE: ValueType = ValueType::Integer { min: 1, max: None };

/// The wire dialects a provider can speak.
pub const APIS: &[&str] = &["anthropic-messages", "openai-chat", "openai-responses"];
/// The tokenizers a model can be counted with.
pub const TOKENIZERS: &[&str] = &["o200k_base", "cl100k_base"];

/// Every configuration key, in the order `soba config show` prints them.
pub const KEYS: &[KeySpec] = &[
    key(
        "model",
        ValueType::NullableString,
        "null",
        true,
        "The model as provider/model; null picks the registry default of the first built-in provider whose key variable is set.",
    ),
    map_key(
        "providers.*.api",
        ValueType::Enum(APIS),
        false,
        "The wire dialect of the provider.",
    ),
    map_key(
        "providers.*.baseUrl",
        ValueType::String,
        false,
        "The provider's base URL.",
    ),
    map_key(
        "providers.*.apiKeyEnv",
        ValueType::NullableString,
        false,
        "The environment variable holding the provider's API key (keys are never read from files); null for none.",
    ),
    map_key(
        "models.*.contextWindow",
        POSITIVE,
        true,
        "The model's context window in tokens; required for models the registry does not know.",
    ),
    map_key(
        "models.*.maxOutputTokens",
        POSITIVE,
        true,
        "The max_tokens sent with every request, thinking included.",
    ),
    map_key(
        "models.*.tokenizer",
        ValueType::Enum(TOKENIZERS),
        true,
        "The local tokenizer the model's tokens are counted with.",
    ),
    map_key(
        "models.*.inputPrice",
        ValueType::Price,
        false,
        "`soba replay`'s price of an uncached input token, in US dollars per million tokens (default: the built-in list price).",
    ),
    map_key(
        "models.*.outputPrice",
        ValueType::Price,
        false,
        "`soba replay`'s price of an output token, in US dollars per million tokens.",
    ),
    map_key(
        "models.*.cacheReadPrice",
        ValueType::Price,
        false,
        "`soba replay`'s price of a token read from the prompt cache, in US dollars per million tokens (default: the built-in price, else the input price).",
    ),
    map_key(
        "models.*.cacheWritePrice",
        ValueType::Price,
        false,
        "`soba replay`'s price of a token written to the prompt cache, in US dollars per million tokens (default: the built-in price, else the input price).",
    ),
    map_key(
        "models.*.toolCallsInText",
        ValueType::Bool,
        false,
        "Run one tool call the model writes as text ({\"name\": …, \"arguments\": …} in a fenced block, <tool_call> tags or the whole reply) when it sends no native call; for local models. Off by default.",
    ),
    key(
        "compaction.auto",
        ValueType::Bool,
        "true",
        true,
        "Enables soft triggers (/auto-compact toggles it); hard_limit and context_overflow always run.",
    ),
    key(
        "compaction.compactOnTurnComplete",
        ValueType::Bool,
        "true",
        true,
        "A completed turn leaves a turn_complete intent for the next preflight.",
    ),
    key(
        "compaction.compactOnMilestone",
        ValueType::Bool,
        "true",
        true,
        "Milestone and plan-pivot checkpoints leave an intent for the next preflight.",
    ),
    key(
        "compaction.compactOnReadCost",
        ValueType::Bool,
        "true",
        true,
        "Above softGate, compact (read_cost) once carrying the reclaimable tokens costs more in cache reads, at the input's growth rate, than the compaction.",
    ),
    key(
        "compaction.minTokensForAutoCompact",
        TOKENS,
        "32000",
        true,
        "The soft floor: no soft trigger fires below min(this, autoLimit) effective tokens.",
    ),
    key(
        "compaction.minReclaimableTokens",
        TOKENS,
        "12000",
        true,
        "The ROI floor before capping by minSavingsRatio × autoLimit.",
    ),
    key(
        "compaction.minSavingsRatio",
        ValueType::Ratio,
        "0.25",
        true,
        "The least share of effective tokens a soft compaction must reclaim.",
    ),
    key(
        "compaction.keepRecentTokens",
        TOKENS,
        "20000",
        true,
        "The verbatim tail kept after a capsule, in tokens (at least 256).",
    ),
    key(
        "compaction.keepRecentResults",
        TOKENS,
        "25",
        true,
        "The verbatim tail may stop before keepRecentTokens once it holds this many tool results (0: by tokens alone).",
    ),
    key(
        "compaction.cacheTtlSeconds",
        TOKENS,
        "300",
        true,
        "The provider's prompt-cache lifetime: after a longer idle gap, a cache_expired compaction runs at softGate, since the prompt is written again anyway (0: off).",
    ),
    alias(
        "compaction.retentionBudgetTokens",
        "compaction.keepRecentTokens",
        TOKENS,
        false,
        "Alias of compaction.keepRecentTokens.",
    ),
    key(
        "compaction.safetyReserveTokens",
        TOKENS,
        "8192",
        true,
        "Tokens kept free below contextWindow − maxOutputTokens.",
    ),
    key(
        "compaction.autoCompactThresholdRatio",
        ValueType::Ratio,
        "0.8",
        true,
        "The soft threshold as a share of hardLimit.",
    ),
    key(
        "compaction.timeoutMs",
        TOKENS,
        "15000",
        true,
        "The summarizer deadline per chunk, in milliseconds.",
    ),
    alias(
        "compaction.backgroundTimeoutMs",
        "compaction.timeoutMs",
        TOKENS,
        true,
        "Deprecated alias of compaction.timeoutMs, which wins when both are set.",
    ),
    key(
        "compaction.maxWorkingSetTokens",
        ValueType::NullableInteger { min: 0 },
        "80000",
        true,
        "The working-set ceiling on autoLimit; null removes it.",
    ),
    key(
        "compaction.hygieneRatio",
        ValueType::Ratio,
        "0.5",
        true,
        "Hygiene is considered at this share of the base limit.",
    ),
    key(
        "compaction.hygieneKeepMessages",
        TOKENS,
        "10",
        true,
        "Hygiene never prunes tool results among the newest this many messages.",
    ),
    key(
        "compaction.minHygieneTokens",
        TOKENS,
        "20000",
        true,
        "Hygiene applies only when it reclaims at least this many tokens.",
    ),
    key(
        "compaction.hygieneProtectedTools",
        ValueType::StringList,
        "[]",
        true,
        "Tools whose results hygiene never prunes.",
    ),
    key(
        "compaction.imageTokens",
        TOKENS,
        "1100",
        true,
        "The flat token cost of one image.",
    ),
    key(
        "compaction.userMessageBudgetTokens",
        TOKENS,
        "4000",
        true,
        "Tokens of latest user instructions a capsule carries verbatim.",
    ),
    key(
        "compaction.maxToolResultTokens",
        ValueType::NullableInteger { min: 0 },
        "null",
        true,
        "Tool results above this are middle-truncated in the model input; null means min(16000, floor(hardLimit / 4)).",
    ),
    key(
        "compaction.native",
        ValueType::Enum(&["off", "auto"]),
        "\"off\"",
        true,
        "\"auto\" also asks OpenAI Responses models for a native continuation item.",
    ),
    key(
        "compaction.summarizer.model",
        ValueType::NullableString,
        "null",
        true,
        "The summarizer model; null means the registry's cheap model of the provider, \"deterministic\" means no LLM.",
    ),
    key(
        "compaction.summarizer.maxOutputTokens",
        POSITIVE,
        "2000",
        true,
        "The output budget of one summarizer call.",
    ),
    key(
        "compaction.summarizer.maxChunks",
        POSITIVE,
        "8",
        true,
        "The most summarizer calls one compaction makes; a longer history has its newest part summarized and the rest kept as local facts.",
    ),
    key(
        "compaction.rehydrate.maxFiles",
        TOKENS,
        "5",
        true,
        "Files modified before a compaction whose current content follows the capsule; 0 turns it off.",
    ),
    key(
        "compaction.rehydrate.maxTokensPerFile",
        TOKENS,
        "5000",
        true,
        "A file brought back after a capsule is cut on line boundaries above this.",
    ),
    key(
        "compaction.rehydrate.maxTokens",
        TOKENS,
        "25000",
        true,
        "All files brought back after a capsule together; the rest are listed by path.",
    ),
    key(
        "http.idleTimeoutMs",
        POSITIVE,
        "300000",
        false,
        "The longest wait for a provider's response headers or its next text, reasoning, tool-call or usage event, in milliseconds; keep-alives do not count.",
    ),
    key(
        "http.streamTimeoutMs",
        POSITIVE,
        "3600000",
        false,
        "The longest one provider reply may stream, in milliseconds, progress or not.",
    ),
    key(
        "session.durability",
        ValueType::Enum(&["fsync", "flush"]),
        "\"fsync\"",
        false,
        "\"fsync\" makes every append survive a power loss; \"flush\" only a crash of the process.",
    ),
    key(
        "tools.allow",
        ValueType::StringList,
        "[]",
        false,
        "Tools that run without approval: bash, write (write_file and edit_file), edit.",
    ),
    key(
        "tools.bash.timeoutMs",
        ValueType::Integer {
            min: 1,
            max: Some(600_000),
        },
        "120000",
        false,
        "The default bash timeout in milliseconds (at most 600000).",
    ),
];

/// A provider SOBA knows without configuration (SPEC §14.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinProvider {
    /// Its name (`providers.<name>`).
    pub name: &'static str,
    /// Its wire dialect.
    pub api: &'static str,
    /// Its base URL.
    pub base_url: &'static str,
    /// The variable holding its key, if it needs one.
    pub api_key_env: Option<&'static str>,
}

/// The built-in providers; the first three, in this order, are the ones
/// model resolution falls back to when their key variable is set.
pub const BUILTIN_PROVIDERS: &[BuiltinProvider] = &[
    BuiltinProvider {
        name: "anthropic",
        api: "anthropic-messages",
        base_url: "https://api.anthropic.com",
        api_key_env: Some("ANTHROPIC_API_KEY"),
    },
    BuiltinProvider {
        name: "openai",
        api: "openai-responses",
        base_url: "https://api.openai.com/v1",
        api_key_env: Some("OPENAI_API_KEY"),
    },
    BuiltinProvider {
        name: "openrouter",
        api: "openai-chat",
        base_url: "https://openrouter.ai/api/v1",
        api_key_env: Some("OPENROUTER_API_KEY"),
    },
    BuiltinProvider {
        name: "ollama",
        api: "openai-chat",
        base_url: "http://localhost:11434/v1",
        api_key_env: None,
    },
];

/// Returns the built-in provider called `name`.
pub fn builtin_provider(name: &str) -> Option<&'static BuiltinProvider> {
    BUILTIN_PROVIDERS
        .iter()
        .find(|provider| provider.name == name)
}

/// Returns the default of `providers.<name>.<field>` for a built-in
/// provider, as JSON.
pub fn builtin_provider_default(name: &str, field: &str) -> Option<Value> {
    let provider = builtin_provider(name)?;
    match field {
        "api" => Some(json!(provider.api)),
        "baseUrl" => Some(json!(provider.base_url)),
        "apiKeyEnv" => Some(json!(provider.api_key_env)),
        _ => None,
    }
}

/// Returns the built-in providers as the `providers` object of SPEC §14.3.
pub fn builtin_providers_json() -> Value {
    let mut map = serde_json::Map::new();
    for provider in BUILTIN_PROVIDERS {
        let mut entry = serde_json::Map::new();
        entry.insert("api".into(), json!(provider.api));
        entry.insert("baseUrl".into(), json!(provider.base_url));
        if let Some(var) = provider.api_key_env {
            entry.insert("apiKeyEnv".into(), json!(var));
        }
        map.insert(provider.name.into(), Value::Object(entry));
    }
    Value::Object(map)
}

/// Returns the key whose pattern matches `segments` (map keys matching `*`).
pub fn find(segments: &[&str]) -> Option<&'static KeySpec> {
    KEYS.iter().find(|spec| matches(spec.path, segments))
}

/// Returns whether a pattern path matches concrete segments.
pub fn matches(pattern: &str, segments: &[&str]) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    pattern.len() == segments.len()
        && pattern
            .iter()
            .zip(segments)
            .all(|(want, got)| *want == "*" || want == got)
}

/// How a concrete prefix relates to the key table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// A whole key.
    Leaf(&'static KeySpec),
    /// An object holding keys; `map` when its children are user-chosen
    /// names (`providers`, `models`).
    Object {
        /// Whether the children are map keys.
        map: bool,
    },
    /// Nothing in the table.
    Unknown,
}

/// Classifies a concrete path prefix.
pub fn position(segments: &[&str]) -> Position {
    if let Some(spec) = find(segments) {
        return Position::Leaf(spec);
    }
    let mut found = false;
    let mut map = false;
    for spec in KEYS {
        let pattern: Vec<&str> = spec.path.split('.').collect();
        if pattern.len() > segments.len()
            && pattern
                .iter()
                .zip(segments)
                .all(|(want, got)| *want == "*" || want == got)
        {
            found = true;
            map |= pattern[segments.len()] == "*";
        }
    }
    if found {
        Position::Object { map }
    } else {
        Position::Unknown
    }
}

/// Returns the names the table allows directly under a concrete prefix
/// (not counting map keys).
pub fn children(segments: &[&str]) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for spec in KEYS {
        let pattern: Vec<&'static str> = spec.path.split('.').collect();
        if pattern.len() > segments.len()
            && pattern
                .iter()
                .zip(segments)
                .all(|(want, got)| *want == "*" || want == got)
        {
            let name = pattern[segments.len()];
            if name != "*" && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Returns whether some key under (or at) a concrete prefix may be set by a
/// project file.
pub fn project_may_set_under(segments: &[&str]) -> bool {
    KEYS.iter().any(|spec| {
        spec.project && {
            let pattern: Vec<&str> = spec.path.split('.').collect();
            pattern.len() >= segments.len()
                && pattern
                    .iter()
                    .zip(segments)
                    .all(|(want, got)| *want == "*" || want == got)
        }
    })
}

/// Returns the known name closest to `wanted` by edit distance (case
/// folded), when it is close enough to be a typo or `wanted` is a
/// truncation of it.
pub fn closest<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let folded = wanted.to_ascii_lowercase();
    known
        .into_iter()
        .filter_map(|name| {
            let name_folded = name.to_ascii_lowercase();
            let distance = edit_distance(&folded, &name_folded);
            let is_typo = distance <= (name.len() / 3).max(2);
            let is_truncation = folded.len() >= 4 && name_folded.starts_with(&folded);
            (is_typo || is_truncation).then_some((distance, name))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// Levenshtein distance over chars.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b_chars: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b_chars.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = Vec::with_capacity(b_chars.len() + 1);
        current.push(i + 1);
        for (j, b_char) in b_chars.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b_chars.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_keys_are_exactly_soba_cores() {
        let ours: Vec<&str> = KEYS
            .iter()
            .filter(|spec| spec.alias.is_none())
            .filter_map(|spec| spec.path.strip_prefix("compaction."))
            .collect();
        assert_eq!(ours, soba_core::config::COMPACTION_KEYS.to_vec());
    }

    #[test]
    fn defaults_are_valid_and_match_soba_core() {
        let mut config = soba_core::config::CompactionConfig::default();
        for spec in KEYS {
            if let Some(text) = spec.default {
                let value = spec
                    .default_value()
                    .unwrap_or_else(|| panic!("{}: default {text} is not JSON", spec.path));
                assert!(spec.value_type.accepts(&value), "{}", spec.path);
                if let Some(rest) = spec.path.strip_prefix("compaction.") {
                    config.set_key(rest, &value).unwrap();
                }
            }
        }
        // Every key was set, so all are explicit; the values are the defaults.
        assert_eq!(
            config.explicit_keys.len(),
            soba_core::config::COMPACTION_KEYS.len()
        );
        config.explicit_keys.clear();
        assert_eq!(config, soba_core::config::CompactionConfig::default());
    }

    #[test]
    fn aliases_point_at_keys() {
        for spec in KEYS {
            if let Some(alias) = spec.alias {
                let target = KEYS.iter().find(|k| k.path == alias.of).unwrap();
                assert_eq!(target.value_type, spec.value_type);
            }
        }
    }

    #[test]
    fn positions() {
        assert!(matches!(
            position(&["compaction"]),
            Position::Object { map: false }
        ));
        assert!(matches!(
            position(&["models"]),
            Position::Object { map: true }
        ));
        assert!(matches!(
            position(&["models", "ollama/x"]),
            Position::Object { map: false }
        ));
        assert!(matches!(
            position(&["models", "ollama/x", "contextWindow"]),
            Position::Leaf(_)
        ));
        assert_eq!(position(&["modls"]), Position::Unknown);
        assert_eq!(
            children(&["compaction", "summarizer"]),
            ["model", "maxOutputTokens", "maxChunks"]
        );
        assert!(project_may_set_under(&["models"]));
        assert!(!project_may_set_under(&["providers"]));
        assert!(!project_may_set_under(&["tools"]));
    }

    #[test]
    fn suggestions() {
        let names = children(&["compaction"]);
        assert_eq!(
            closest("keepRecentToken", names.iter().copied()),
            Some("keepRecentTokens")
        );
        assert_eq!(
            closest("keepRecent", names.iter().copied()),
            Some("keepRecentTokens")
        );
        assert_eq!(closest("zzzzzz", names.iter().copied()), None);
    }

    #[test]
    fn text_values_follow_the_type() {
        assert_eq!(
            ValueType::String.parse_text("openai/gpt-5"),
            json!("openai/gpt-5")
        );
        assert_eq!(ValueType::String.parse_text("123"), json!("123"));
        assert_eq!(ValueType::NullableString.parse_text("null"), Value::Null);
        assert_eq!(ValueType::NullableString.parse_text(""), Value::Null);
        assert_eq!(ValueType::String.parse_text(""), json!(""));
        assert_eq!(TOKENS.parse_text("30000"), json!(30000));
        assert_eq!(TOKENS.parse_text("lots"), json!("lots"));
        assert_eq!(ValueType::Ratio.parse_text("0.7"), json!(0.7));
        assert_eq!(
            ValueType::StringList.parse_text("bash, write"),
            json!(["bash", "write"])
        );
        assert_eq!(ValueType::StringList.parse_text("[\"a\"]"), json!(["a"]));
    }
}
