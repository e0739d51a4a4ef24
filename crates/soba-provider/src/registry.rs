//! The model registry (SPEC §10.2): maps `provider/model` to the provider,
//! context window, maxOutputTokens, tokenizer, calibration seed and the
//! provider's cheap summarizer model, from built-ins plus config overrides.
//!
//! Lookups tolerate a missing or extra provider prefix
//! (`claude-sonnet-4-5`, `anthropic/claude-sonnet-4-5`,
//! `openrouter/anthropic/claude-sonnet-4.5`), dated suffixes
//! (`-20250929`, `-2025-04-14`), `-latest`, OpenRouter variants (`:free`)
//! and `.` for `-` in version numbers.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;
use soba_core::Encoding;

/// Default maxOutputTokens ceiling (SPEC §10.2).
pub const DEFAULT_MAX_OUTPUT_CAP: u64 = 32_000;
/// maxOutputTokens ceiling for windows of at least [`LARGE_WINDOW`] tokens.
pub const LARGE_WINDOW_MAX_OUTPUT_CAP: u64 = 64_000;
/// The window size from which [`LARGE_WINDOW_MAX_OUTPUT_CAP`] applies.
pub const LARGE_WINDOW: u64 = 1_000_000;

/// Providers whose models always need an explicit `contextWindow`: local
/// servers load models with whatever context they were started with.
pub const LOCAL_PROVIDERS: &[&str] = &[
    "ollama",
    "llamacpp",
    "llama.cpp",
    "vllm",
    "lmstudio",
    "lm-studio",
    "local",
];

/// A built-in model, with figures from the provider's public model pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinModel {
    /// The provider (model family) that publishes it.
    pub provider: &'static str,
    /// The model name, canonical (no date suffix).
    pub name: &'static str,
    /// The total context window, input and output together.
    pub context_window: u64,
    /// A separate input ceiling where the provider has one (OpenAI's GPT-5
    /// family: 400k in total but at most 272k of input).
    pub max_input_tokens: Option<u64>,
    /// The model's maximum output tokens.
    pub max_output_tokens: u64,
}

const fn model(
    provider: &'static str,
    name: &'static str,
    context_window: u64,
    max_output_tokens: u64,
) -> BuiltinModel {
    BuiltinModel {
        provider,
        name,
        context_window,
        max_input_tokens: None,
        max_output_tokens,
    }
}

const fn gpt5(name: &'static str) -> BuiltinModel {
    BuiltinModel {
        provider: "openai",
        name,
        context_window: 400_000,
        max_input_tokens: Some(272_000),
        max_output_tokens: 128_000,
    }
}

/// The built-in models. Sources: platform.openai.com/docs/models,
/// docs.anthropic.com models overview, ai.google.dev Gemini models,
/// api-docs.deepseek.com, Qwen3-Coder and Llama 4 model cards.
pub const BUILTIN_MODELS: &[BuiltinModel] = &[
    gpt5("gpt-5"),
    gpt5("gpt-5-mini"),
    gpt5("gpt-5-nano"),
    gpt5("gpt-5-codex"),
    gpt5("gpt-5.1"),
    gpt5("gpt-5.1-codex"),
    // GPT-5.2, 5.2-codex and 5.3-codex: max_input_tokens 272,000 and
    // max_output_tokens 128,000 in LiteLLM 1.110.2's
    // model_prices_and_context_window.json (the GPT-5 figures above).
    gpt5("gpt-5.2"),
    gpt5("gpt-5.2-codex"),
    gpt5("gpt-5.3-codex"),
    // GPT-5.4 and 5.5: max_input_tokens 1,050,000 and max_output_tokens
    // 128,000 in LiteLLM 1.110.2 (OpenAI's model pages give 1,050,000 as
    // the context window; taken as the whole window, the smaller reading).
    model("openai", "gpt-5.4", 1_050_000, 128_000),
    model("openai", "gpt-5.5", 1_050_000, 128_000),
    model("openai", "gpt-4.1", 1_047_576, 32_768),
    model("openai", "gpt-4.1-mini", 1_047_576, 32_768),
    model("openai", "gpt-4.1-nano", 1_047_576, 32_768),
    model("openai", "gpt-4o", 128_000, 16_384),
    model("openai", "gpt-4o-mini", 128_000, 16_384),
    model("openai", "o3", 200_000, 100_000),
    model("openai", "o4-mini", 200_000, 100_000),
    // Claude Opus 4.6 and 4.7: max_output_tokens 128,000 in LiteLLM
    // 1.110.2; its max_input_tokens 1,000,000 is the 1M window, an opt-in
    // here as for every Claude 4.x model (see below), so the standard
    // 200K window is the default.
    model("anthropic", "claude-opus-4-7", 200_000, 128_000),
    model("anthropic", "claude-opus-4-6", 200_000, 128_000),
    model("anthropic", "claude-opus-4-5", 200_000, 64_000),
    model("anthropic", "claude-opus-4-1", 200_000, 32_000),
    // Claude 4.x: the standard window is 200K. The 1M window is an opt-in
    // beta a user must declare (`models."anthropic/claude-sonnet-4-6"
    // .contextWindow`); Claude Code sessions on this model compact near
    // 167K, which only a 200K window explains. Output 128,000: LiteLLM
    // 1.110.2's max_output_tokens.
    model("anthropic", "claude-sonnet-4-6", 200_000, 128_000),
    model("anthropic", "claude-sonnet-4-5", 200_000, 64_000),
    model("anthropic", "claude-sonnet-4", 200_000, 64_000),
    model("anthropic", "claude-haiku-4-5", 200_000, 64_000),
    model("google", "gemini-3-pro-preview", 1_048_576, 65_536),
    model("google", "gemini-2.5-pro", 1_048_576, 65_536),
    model("google", "gemini-2.5-flash", 1_048_576, 65_536),
    model("google", "gemini-2.5-flash-lite", 1_048_576, 65_536),
    model("deepseek", "deepseek-chat", 131_072, 8_192),
    model("deepseek", "deepseek-reasoner", 131_072, 65_536),
    model("qwen", "qwen3-coder", 262_144, 65_536),
    // Kimi K2.5: max_input_tokens and max_output_tokens 262,144 for
    // `moonshot/kimi-k2.5` in LiteLLM 1.110.2.
    model("moonshot", "kimi-k2.5", 262_144, 262_144),
    model("meta-llama", "llama-4-maverick", 1_048_576, 16_384),
    // The scripted model of `soba demo` (no API): known so that a kept demo
    // session opens with `soba budget`, `soba compact` and `soba capsule`.
    model("demo", "scripted", 200_000, 32_000),
];

/// Each family's cheap summarizer model: (family, name at the family's own
/// API, name at OpenRouter).
const CHEAP_MODELS: &[(&str, &str, &str)] = &[
    ("anthropic", "claude-haiku-4-5", "claude-haiku-4.5"),
    ("openai", "gpt-5-mini", "gpt-5-mini"),
    ("google", "gemini-2.5-flash", "gemini-2.5-flash"),
    ("deepseek", "deepseek-chat", "deepseek-chat"),
];

/// The registry default per built-in provider (SPEC §14.3 model resolution).
const DEFAULT_MODELS: &[(&str, &str)] = &[
    ("anthropic", "anthropic/claude-sonnet-4-5"),
    ("openai", "openai/gpt-5"),
    ("openrouter", "openrouter/anthropic/claude-sonnet-4.5"),
];

/// A `models."<id>"` entry from config: extends or overrides a model.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelOverride {
    /// The context window in tokens.
    pub context_window: Option<u64>,
    /// The maxOutputTokens sent with every request.
    pub max_output_tokens: Option<u64>,
    /// The local tokenizer (`o200k_base` or `cl100k_base`).
    pub tokenizer: Option<String>,
    /// Whether a reply may carry its one tool call written as text
    /// (`toolCallsInText`, off by default): for local models that write
    /// `{"name": …, "arguments": …}` instead of native tool calls.
    pub tool_calls_in_text: Option<bool>,
}

/// Why a model could not be resolved (a configuration error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The model is unknown or served locally and no `contextWindow` is
    /// configured. Retrying does not help; set the key.
    #[error(
        "model {model} has no known context window: set {key} in the config (and maxOutputTokens)"
    )]
    MissingContextWindow {
        /// The model id as given.
        model: String,
        /// The config key to set, e.g. `models."ollama/qwen3".contextWindow`.
        key: String,
    },
    /// An override has an invalid value. Retrying does not help; fix it.
    #[error("invalid {key}: {detail}")]
    InvalidOverride {
        /// The config key, e.g. `models."x".tokenizer`.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// The model id is empty.
    #[error("empty model id: pass provider/model, e.g. anthropic/claude-sonnet-4-5")]
    EmptyId,
}

/// Everything the engine needs to know about one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The id as `provider/model`.
    pub id: String,
    /// The provider serving it (the config's `providers` key).
    pub provider: String,
    /// The model name sent on the wire.
    pub wire_model: String,
    /// The context window used for the budget.
    pub context_window: u64,
    /// maxOutputTokens (`max_tokens` of every request).
    pub max_output_tokens: u64,
    /// The local tokenizer.
    pub tokenizer: Encoding,
    /// The calibration seed (SPEC §4.1).
    pub calibration_seed: f64,
    /// The cheap summarizer model of the provider, as `provider/model`, or
    /// `None` where the provider names none (the summarizer is then
    /// deterministic, SPEC §9.2).
    pub summarizer_model: Option<String>,
    /// The built-in entry it came from, when any.
    pub builtin: Option<BuiltinModel>,
}

/// The registry: built-ins plus config overrides.
#[derive(Debug, Clone, Default)]
pub struct ModelRegistry {
    overrides: BTreeMap<String, ModelOverride>,
}

fn date_suffix() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$").expect("literal regex"))
}

/// Bedrock's model ids: an optional cross-region prefix, the vendor and a
/// `-v1` version (`us.anthropic.claude-opus-4-6-v1:0`).
fn bedrock_id() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"^(?:(?:us|eu|apac|global|au|jp|ca|us-gov)\.)?(?:anthropic|moonshotai|moonshot|meta|qwen|deepseek|openai|mistral|amazon)\.(.+?)(?:-v\d+)?$",
        )
        .expect("literal regex")
    })
}

/// Returns the canonical form of a model name for matching: lowercase,
/// last path segment (`anthropic/`, OpenRouter's `provider/`), no Vertex
/// `@version`, no `:variant`, no Bedrock region, vendor or `-v1`, no
/// `-thinking` (a spelling of the same model with thinking on), no date
/// suffix, `.` as `-`.
pub fn canonical_name(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let last = lower.rsplit('/').next().unwrap_or(&lower);
    let last = last.split('@').next().unwrap_or(last);
    let base = last.split(':').next().unwrap_or(last);
    let base = bedrock_id()
        .captures(base)
        .and_then(|captures| captures.get(1))
        .map_or(base, |model| model.as_str());
    let base = base.strip_suffix("-thinking").unwrap_or(base);
    let base = date_suffix().replace(base, "");
    let base = base.strip_suffix("-thinking").unwrap_or(&base);
    base.replace('.', "-")
}

/// Finds a model's figures by any spelling of its name: the shipped
/// LiteLLM table ([`crate::catalog`]) with SOBA's [`window_rules`], else
/// the hand list [`BUILTIN_MODELS`] (models the table lacks, and the
/// family and display name of those it has).
pub fn find_builtin(name: &str) -> Option<BuiltinModel> {
    let canonical = canonical_name(name);
    let hand = BUILTIN_MODELS
        .iter()
        .copied()
        .find(|model| model.name.replace('.', "-") == canonical);
    let Some(hit) = crate::catalog::catalog().lookup(name) else {
        return hand;
    };
    let Some(max_input) = hit.entry.max_input else {
        return hand;
    };
    let provider = match hand {
        Some(hand) => hand.provider,
        None => family(hit.entry.provider.as_deref().unwrap_or("")),
    };
    let model = BuiltinModel {
        provider,
        name: hand.map_or_else(|| hit.key.rsplit('/').next().unwrap_or(hit.key), |h| h.name),
        context_window: max_input,
        max_input_tokens: None,
        max_output_tokens: hit
            .entry
            .max_output
            .or(hand.map(|h| h.max_output_tokens))
            .unwrap_or(max_input / 4),
    };
    Some(window_rules(model))
}

/// Returns the model family of a LiteLLM provider: the vendor SOBA names
/// (`gemini` and Vertex's Gemini are `google`), else the provider itself.
fn family(litellm_provider: &'static str) -> &'static str {
    match litellm_provider {
        "gemini" | "vertex_ai-language-models" => "google",
        other => other,
    }
}

/// SOBA's overrides of LiteLLM's windows, where its figure is not the
/// window SOBA should plan for:
///
/// - **Claude: 200,000.** LiteLLM gives Opus 4.6/4.7 and Sonnet 4.6 their
///   1,000,000-token window, an opt-in (a beta header and a higher tier)
///   a user declares with `models."anthropic/<m>".contextWindow`; Claude
///   Code sessions on these models compact near 167K, which only the
///   standard 200K window explains.
/// - **GPT-5 family: 400,000 with an input ceiling of 272,000.** LiteLLM
///   records only the input ceiling (`max_input_tokens` 272,000,
///   `max_output_tokens` 128,000); OpenAI's model pages give 400,000 in
///   all, so the usable window is the ceiling plus the output reserved.
pub fn window_rules(model: BuiltinModel) -> BuiltinModel {
    const CLAUDE_STANDARD_WINDOW: u64 = 200_000;
    if model.name.to_ascii_lowercase().contains("claude")
        && model.context_window > CLAUDE_STANDARD_WINDOW
    {
        return BuiltinModel {
            context_window: CLAUDE_STANDARD_WINDOW,
            ..model
        };
    }
    if model.context_window == 272_000 && model.max_output_tokens == 128_000 {
        return BuiltinModel {
            context_window: 400_000,
            max_input_tokens: Some(272_000),
            ..model
        };
    }
    model
}

/// Returns the default maxOutputTokens for a model (SPEC §10.2): its maximum
/// capped at 32,000, or at 64,000 for windows ≥ 1,000,000. When the
/// maximum is unknown, a quarter of the window stands in for it.
pub fn default_max_output(context_window: u64, model_max: Option<u64>) -> u64 {
    let cap = if context_window >= LARGE_WINDOW {
        LARGE_WINDOW_MAX_OUTPUT_CAP
    } else {
        DEFAULT_MAX_OUTPUT_CAP
    };
    cap.min(model_max.unwrap_or(context_window / 4))
}

/// Returns whether a provider is a local server (SPEC §10.2).
pub fn is_local_provider(provider: &str) -> bool {
    LOCAL_PROVIDERS.contains(&provider.to_ascii_lowercase().as_str())
}

/// Returns the registry default model of a built-in provider.
pub fn default_model(provider: &str) -> Option<&'static str> {
    DEFAULT_MODELS
        .iter()
        .find(|(name, _)| *name == provider)
        .map(|(_, model)| *model)
}

impl ModelRegistry {
    /// Returns a registry of the built-ins only.
    pub fn new() -> Self {
        ModelRegistry::default()
    }

    /// Returns a registry with the config's `models` entries.
    pub fn with_overrides(overrides: BTreeMap<String, ModelOverride>) -> Self {
        ModelRegistry { overrides }
    }

    /// Adds or replaces one override.
    pub fn set_override(&mut self, id: impl Into<String>, entry: ModelOverride) {
        self.overrides.insert(id.into(), entry);
    }

    /// Returns the overrides.
    pub fn overrides(&self) -> &BTreeMap<String, ModelOverride> {
        &self.overrides
    }

    /// Resolves a model id (`provider/model`, or a bare built-in name).
    pub fn resolve(&self, id: &str) -> Result<ModelInfo, RegistryError> {
        let id = id.trim();
        if id.is_empty() {
            return Err(RegistryError::EmptyId);
        }
        let (given_provider, rest) = match id.split_once('/') {
            Some((provider, rest)) if !provider.is_empty() && !rest.is_empty() => {
                (Some(provider), rest)
            }
            _ => (None, id),
        };
        let local = given_provider.is_some_and(is_local_provider);
        let builtin = if local { None } else { find_builtin(rest) };
        let provider = match (given_provider, builtin) {
            (Some(provider), _) => provider.to_owned(),
            (None, Some(builtin)) => builtin.provider.to_owned(),
            (None, None) => String::new(),
        };
        let full_id = if provider.is_empty() {
            id.to_owned()
        } else {
            format!("{provider}/{rest}")
        };
        let entry = self.find_override(id, &full_id, builtin, &provider);
        let key_id = if given_provider.is_some() || provider.is_empty() {
            id.to_owned()
        } else {
            full_id.clone()
        };

        let raw_window = entry
            .and_then(|e| e.context_window)
            .or(builtin.map(|b| b.context_window));
        let Some(raw_window) = raw_window else {
            return Err(RegistryError::MissingContextWindow {
                model: id.to_owned(),
                key: format!("models.\"{key_id}\".contextWindow"),
            });
        };
        if raw_window == 0 {
            return Err(RegistryError::InvalidOverride {
                key: format!("models.\"{key_id}\".contextWindow"),
                detail: "must be a positive number of tokens".to_owned(),
            });
        }
        let max_output = match entry.and_then(|e| e.max_output_tokens) {
            Some(0) => {
                return Err(RegistryError::InvalidOverride {
                    key: format!("models.\"{key_id}\".maxOutputTokens"),
                    detail: "must be a positive number of tokens".to_owned(),
                });
            }
            Some(n) => n,
            None => default_max_output(raw_window, builtin.map(|b| b.max_output_tokens)),
        };
        // A separate input ceiling lowers the usable window, unless config
        // set the window explicitly.
        let context_window = match (
            entry.and_then(|e| e.context_window),
            builtin.and_then(|b| b.max_input_tokens),
        ) {
            (None, Some(max_input)) => raw_window.min(max_input + max_output),
            _ => raw_window,
        };
        let tokenizer = match entry.and_then(|e| e.tokenizer.as_deref()) {
            Some(name) => Encoding::parse(name).ok_or_else(|| RegistryError::InvalidOverride {
                key: format!("models.\"{key_id}\".tokenizer"),
                detail: format!("unknown tokenizer {name:?}: use o200k_base or cl100k_base"),
            })?,
            None => Encoding::O200kBase,
        };
        let family = builtin.map(|b| b.provider);
        let canonical = canonical_name(rest);
        let calibration_seed = if canonical.contains("claude") {
            1.25
        } else if family == Some("openai") && tokenizer == Encoding::O200kBase {
            1.0
        } else {
            1.1
        };
        Ok(ModelInfo {
            id: full_id,
            wire_model: rest.to_owned(),
            summarizer_model: summarizer_for(&provider, family, rest),
            provider,
            context_window,
            max_output_tokens: max_output,
            tokenizer,
            calibration_seed,
            builtin,
        })
    }

    fn find_override(
        &self,
        id: &str,
        full_id: &str,
        builtin: Option<BuiltinModel>,
        provider: &str,
    ) -> Option<&ModelOverride> {
        if let Some(entry) = self
            .overrides
            .get(id)
            .or_else(|| self.overrides.get(full_id))
        {
            return Some(entry);
        }
        // `models."anthropic/claude-sonnet-4-5"` also applies to a dated id,
        // and `models."acme/m"` to a bare `m` soba knows nothing of (the
        // provider is unknown then, so any key's provider fits).
        let canonical = canonical_name(id);
        self.overrides.iter().find_map(|(key, entry)| {
            let (key_provider, key_model) = key.split_once('/').unwrap_or(("", key));
            let same_provider =
                key_provider.is_empty() || provider.is_empty() || key_provider == provider;
            let same_model = builtin
                .is_some_and(|builtin| find_builtin(key_model) == Some(builtin))
                || canonical_name(key_model) == canonical;
            (same_provider && same_model).then_some(entry)
        })
    }
}

fn summarizer_for(provider: &str, family: Option<&str>, rest: &str) -> Option<String> {
    let family = family?;
    let (_, direct, openrouter) = CHEAP_MODELS.iter().find(|(name, _, _)| *name == family)?;
    if provider == family {
        return Some(format!("{provider}/{direct}"));
    }
    if provider == "openrouter" {
        // OpenRouter ids carry the family prefix: `anthropic/claude-haiku-4.5`.
        let prefix = rest.split_once('/').map_or(family, |(prefix, _)| prefix);
        return Some(format!("openrouter/{prefix}/{openrouter}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, expected: (&str, &str, u64, u64, f64, Option<&str>)) {
        let info = ModelRegistry::new().resolve(id).unwrap();
        let got = (
            info.id.as_str(),
            info.provider.as_str(),
            info.context_window,
            info.max_output_tokens,
            info.calibration_seed,
            info.summarizer_model.as_deref(),
        );
        assert_eq!(got, expected, "{id}");
    }

    #[test]
    fn anthropic_with_and_without_prefix_and_date() {
        let expected = (
            "anthropic/claude-sonnet-4-5",
            "anthropic",
            200_000,
            32_000,
            1.25,
            Some("anthropic/claude-haiku-4-5"),
        );
        check("claude-sonnet-4-5", expected);
        check("anthropic/claude-sonnet-4-5", expected);
        let dated = ModelRegistry::new()
            .resolve("anthropic/claude-sonnet-4-5-20250929")
            .unwrap();
        assert_eq!(dated.wire_model, "claude-sonnet-4-5-20250929");
        assert_eq!(dated.context_window, 200_000);
        check(
            "claude-haiku-4-5",
            (
                "anthropic/claude-haiku-4-5",
                "anthropic",
                200_000,
                32_000,
                1.25,
                Some("anthropic/claude-haiku-4-5"),
            ),
        );
    }

    #[test]
    fn openai_models() {
        // GPT-5: min(400,000, 272,000 input + 32,000 output).
        check(
            "openai/gpt-5",
            (
                "openai/gpt-5",
                "openai",
                304_000,
                32_000,
                1.0,
                Some("openai/gpt-5-mini"),
            ),
        );
        check(
            "gpt-5-codex",
            (
                "openai/gpt-5-codex",
                "openai",
                304_000,
                32_000,
                1.0,
                Some("openai/gpt-5-mini"),
            ),
        );
        // gpt-4.1: a ≥ 1M window allows 64,000, but the model stops at 32,768.
        check(
            "gpt-4.1-2025-04-14",
            (
                "openai/gpt-4.1-2025-04-14",
                "openai",
                1_047_576,
                32_768,
                1.0,
                Some("openai/gpt-5-mini"),
            ),
        );
        check(
            "o3",
            (
                "openai/o3",
                "openai",
                200_000,
                32_000,
                1.0,
                Some("openai/gpt-5-mini"),
            ),
        );
        check(
            "o4-mini",
            (
                "openai/o4-mini",
                "openai",
                200_000,
                32_000,
                1.0,
                Some("openai/gpt-5-mini"),
            ),
        );
    }

    #[test]
    fn large_windows_get_64k() {
        check(
            "google/gemini-2.5-pro",
            (
                "google/gemini-2.5-pro",
                "google",
                1_048_576,
                64_000,
                1.1,
                Some("google/gemini-2.5-flash"),
            ),
        );
        check(
            "gemini-3-pro-preview",
            (
                "google/gemini-3-pro-preview",
                "google",
                1_048_576,
                64_000,
                1.1,
                Some("google/gemini-2.5-flash"),
            ),
        );
        check(
            "llama-4-maverick",
            (
                "meta-llama/llama-4-maverick",
                "meta-llama",
                1_048_576,
                16_384,
                1.1,
                None,
            ),
        );
    }

    #[test]
    fn other_families() {
        check(
            "deepseek/deepseek-chat",
            (
                "deepseek/deepseek-chat",
                "deepseek",
                131_072,
                8_192,
                1.1,
                Some("deepseek/deepseek-chat"),
            ),
        );
        check(
            "qwen3-coder",
            ("qwen/qwen3-coder", "qwen", 262_144, 32_000, 1.1, None),
        );
    }

    #[test]
    fn current_models_under_every_spelling() {
        // Figures from LiteLLM 1.110.2 (see BUILTIN_MODELS); Claude at the
        // standard 200K window, output capped at 32,000 (SPEC §10.2).
        let opus = |id: &str| {
            let info = ModelRegistry::new().resolve(id).unwrap();
            (
                info.builtin.map(|b| b.name),
                info.context_window,
                info.max_output_tokens,
            )
        };
        for id in [
            "claude-opus-4-6",
            "claude-opus-4-6-thinking",
            "anthropic/claude-opus-4-6",
            "claude-opus-4-6-20260205",
            "anthropic.claude-opus-4-6-v1:0",
            "us.anthropic.claude-opus-4-6-v1:0",
            "bedrock/global.anthropic.claude-opus-4-6-v1",
            "vertex_ai/claude-opus-4-6@20260205",
            "openrouter/anthropic/claude-opus-4.6",
        ] {
            assert_eq!(opus(id), (Some("claude-opus-4-6"), 200_000, 32_000), "{id}");
        }
        assert_eq!(
            opus("claude-opus-4-7-thinking"),
            (Some("claude-opus-4-7"), 200_000, 32_000)
        );
        assert_eq!(
            opus("claude-sonnet-4-6"),
            (Some("claude-sonnet-4-6"), 200_000, 32_000)
        );
        // GPT-5.3-codex: min(400,000, 272,000 + 32,000).
        assert_eq!(
            opus("gpt-5.3-codex"),
            (Some("gpt-5.3-codex"), 304_000, 32_000)
        );
        assert_eq!(opus("openai/gpt-5.4"), (Some("gpt-5.4"), 1_050_000, 64_000));
        assert_eq!(
            opus("gpt-5.5-2026-04-23"),
            (Some("gpt-5.5"), 1_050_000, 64_000)
        );
        assert_eq!(opus("kimi-k2.5"), (Some("kimi-k2.5"), 262_144, 32_000));
        // Bedrock's own entry (LiteLLM 1.110.2): 256,000 in, 16,000 out.
        assert_eq!(
            opus("bedrock/moonshotai.kimi-k2.5"),
            (Some("kimi-k2.5"), 256_000, 16_000)
        );
        // Names that only look like a Bedrock id or a version stay whole.
        assert_eq!(canonical_name("deepseek-v3"), "deepseek-v3");
        assert_eq!(canonical_name("gpt-5.4-mini"), "gpt-5-4-mini");
    }

    #[test]
    fn the_table_knows_what_the_hand_list_lacks_and_config_comes_first() {
        // LiteLLM 1.110.2: gpt-5.6-sol max_input_tokens 922,000; Claude
        // Sonnet 5 1,000,000, held at Claude's standard 200,000.
        check(
            "gpt-5.6-sol",
            (
                "openai/gpt-5.6-sol",
                "openai",
                922_000,
                32_000,
                1.0,
                Some("openai/gpt-5-mini"),
            ),
        );
        check(
            "claude-sonnet-5",
            (
                "anthropic/claude-sonnet-5",
                "anthropic",
                200_000,
                32_000,
                1.25,
                Some("anthropic/claude-haiku-4-5"),
            ),
        );
        // The GPT-5 family's input ceiling: 272,000 + 32,000 in a 400,000
        // window, on every reseller's spelling too.
        let window = |id: &str| ModelRegistry::new().resolve(id).unwrap().context_window;
        assert_eq!(window("azure/gpt-5-codex"), 304_000);
        assert_eq!(window("us.anthropic.claude-opus-4-7"), 200_000);
        // The config comes first, under either spelling.
        let mut registry = ModelRegistry::new();
        registry.set_override(
            "anthropic/claude-sonnet-5",
            ModelOverride {
                context_window: Some(1_000_000),
                ..ModelOverride::default()
            },
        );
        registry.set_override(
            "acme/mystery-model",
            ModelOverride {
                context_window: Some(50_000),
                ..ModelOverride::default()
            },
        );
        let resolved = |id: &str| registry.resolve(id).unwrap().context_window;
        assert_eq!(resolved("claude-sonnet-5-20261001"), 1_000_000);
        assert_eq!(resolved("claude-sonnet-5-thinking"), 1_000_000);
        // A model soba knows nothing of, named without its provider.
        assert_eq!(resolved("mystery-model"), 50_000);
        assert_eq!(resolved("acme/mystery-model"), 50_000);
    }

    #[test]
    fn openrouter_ids() {
        check(
            "openrouter/anthropic/claude-sonnet-4.5",
            (
                "openrouter/anthropic/claude-sonnet-4.5",
                "openrouter",
                200_000,
                32_000,
                1.25,
                Some("openrouter/anthropic/claude-haiku-4.5"),
            ),
        );
        let info = ModelRegistry::new()
            .resolve("openrouter/qwen/qwen3-coder:free")
            .unwrap();
        assert_eq!(info.wire_model, "qwen/qwen3-coder:free");
        assert_eq!(info.context_window, 262_144);
    }

    #[test]
    fn local_models_need_a_window() {
        let err = ModelRegistry::new().resolve("ollama/qwen3").unwrap_err();
        assert_eq!(
            err,
            RegistryError::MissingContextWindow {
                model: "ollama/qwen3".into(),
                key: "models.\"ollama/qwen3\".contextWindow".into(),
            }
        );
        assert_eq!(
            err.to_string(),
            "model ollama/qwen3 has no known context window: set models.\"ollama/qwen3\".contextWindow in the config (and maxOutputTokens)"
        );
        // A built-in name on a local server is still local.
        assert!(ModelRegistry::new().resolve("ollama/qwen3-coder").is_err());
        assert!(ModelRegistry::new().resolve("mystery-model").is_err());
    }

    #[test]
    fn overrides_extend_and_override() {
        let mut registry = ModelRegistry::new();
        registry.set_override(
            "ollama/qwen3-coder",
            ModelOverride {
                context_window: Some(32_768),
                max_output_tokens: Some(8_192),
                tokenizer: Some("o200k_base".into()),
                tool_calls_in_text: None,
            },
        );
        registry.set_override(
            "anthropic/claude-sonnet-4-5",
            ModelOverride {
                context_window: Some(1_000_000),
                ..ModelOverride::default()
            },
        );
        registry.set_override(
            "ollama/tiny",
            ModelOverride {
                context_window: Some(8_192),
                ..ModelOverride::default()
            },
        );
        let local = registry.resolve("ollama/qwen3-coder").unwrap();
        assert_eq!(
            (
                local.context_window,
                local.max_output_tokens,
                local.calibration_seed
            ),
            (32_768, 8_192, 1.1)
        );
        assert_eq!(local.summarizer_model, None);
        let big = registry.resolve("claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(
            (big.context_window, big.max_output_tokens),
            (1_000_000, 64_000)
        );
        // Unknown maximum: a quarter of the window.
        assert_eq!(
            registry.resolve("ollama/tiny").unwrap().max_output_tokens,
            2_048
        );
    }

    #[test]
    fn invalid_overrides_name_the_key() {
        let mut registry = ModelRegistry::new();
        registry.set_override(
            "ollama/x",
            ModelOverride {
                context_window: Some(4_096),
                tokenizer: Some("sentencepiece".into()),
                ..ModelOverride::default()
            },
        );
        let err = registry.resolve("ollama/x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid models.\"ollama/x\".tokenizer: unknown tokenizer \"sentencepiece\": use o200k_base or cl100k_base"
        );
        assert_eq!(
            ModelRegistry::new().resolve("  ").unwrap_err(),
            RegistryError::EmptyId
        );
    }

    #[test]
    fn override_deserializes_from_camel_case() {
        let entry: ModelOverride = serde_json::from_str(
            r#"{"contextWindow": 32768, "maxOutputTokens": 8192, "tokenizer": "o200k_base"}"#,
        )
        .unwrap();
        assert_eq!(entry.context_window, Some(32_768));
        assert!(serde_json::from_str::<ModelOverride>(r#"{"contextwindow": 1}"#).is_err());
    }

    #[test]
    fn defaults() {
        assert_eq!(
            default_model("anthropic"),
            Some("anthropic/claude-sonnet-4-5")
        );
        assert_eq!(default_model("ollama"), None);
        assert_eq!(default_max_output(200_000, Some(64_000)), 32_000);
        assert_eq!(default_max_output(1_000_000, Some(128_000)), 64_000);
        assert_eq!(default_max_output(999_999, Some(128_000)), 32_000);
        for model in BUILTIN_MODELS {
            assert!(
                ModelRegistry::new()
                    .resolve(&format!("{}/{}", model.provider, model.name))
                    .is_ok()
            );
        }
    }
}
