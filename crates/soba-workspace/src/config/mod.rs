//! Configuration loading (SPEC §14): JSON, camelCase, from four sources in
//! precedence order — the user file, the project file, `SOBA_*` environment
//! variables and flags (`--set path=value`, `--model`). Every key is checked
//! against the one table in [`keys`]; unknown keys are errors with a "did
//! you mean" hint; a project file (untrusted: it comes with a cloned
//! repository) may set only `model`, `compaction.*` and the limits in
//! `models.*`.
//!
//! API keys are never read from files: only from the variable a provider's
//! `apiKeyEnv` names, when a client is built.

mod error;
pub mod json;
pub mod keys;
mod prices;
pub mod schema;
pub mod show;
mod source;

pub use prices::Priced;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use soba_core::config::CompactionConfig;
use soba_engine::tool::{ALLOW_NAMES, ToolRegistry};
use soba_provider::client::{Api, Endpoint};
use soba_provider::registry::{self, ModelOverride, ModelRegistry};
use soba_store::log::Durability;

use crate::paths::Env;
use keys::{KEYS, KeySpec, Position};

pub use error::ConfigError;
use source::*;
pub use source::{CONFIG_FILE_MAX_BYTES, env_var_name};

/// The exact message when no model can be resolved (SPEC §14.3).
pub const NO_MODEL_MESSAGE: &str = "no model configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENROUTER_API_KEY, or pass --model ollama/<name>; soba demo and soba replay work offline";

/// Environment variables with the `SOBA_` prefix that are not settings.
const NON_SETTING_VARS: &[&str] = &["SOBA_HOME", "SOBA_LOG"];

/// The built-in providers model resolution falls back to, in order.
const FALLBACK_PROVIDERS: [&str; 3] = ["anthropic", "openai", "openrouter"];

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The user config file.
    UserFile(PathBuf),
    /// The project config file.
    ProjectFile(PathBuf),
    /// An environment variable.
    Env(String),
    /// A command-line flag (`--set path=value`, `--model`).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::UserFile(path) => write!(f, "user config {}", path.display()),
            Source::ProjectFile(path) => write!(f, "project config {}", path.display()),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::Flag(flag) => write!(f, "{flag}"),
        }
    }
}

/// A concrete key path, e.g. `["models", "ollama/qwen3", "contextWindow"]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyPath(pub Vec<String>);

impl KeyPath {
    fn from_segments(segments: &[&str]) -> Self {
        KeyPath(segments.iter().map(|s| (*s).to_owned()).collect())
    }

    fn segments(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

impl fmt::Display for KeyPath {
    /// Writes the dotted path, quoting map keys that are not plain words
    /// (`models."openrouter/x-1.5".contextWindow`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (idx, segment) in self.0.iter().enumerate() {
            if idx > 0 {
                f.write_str(".")?;
            }
            let plain = !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if plain {
                f.write_str(segment)?;
            } else {
                write!(f, "{}", Value::String(segment.clone()))?;
            }
        }
        Ok(())
    }
}

/// One explicitly set value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The value, type-checked.
    pub value: Value,
    /// Its source.
    pub source: Source,
    /// Set through a deprecated alias (which loses to the key itself).
    pub via_deprecated_alias: bool,
}

/// One assignment read from a source, before merging.
#[derive(Debug, Clone)]
struct Assignment {
    path: KeyPath,
    value: Value,
    source: Source,
    deprecated_alias: Option<&'static str>,
}

/// A provider as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Its name (`providers.<name>`).
    pub name: String,
    /// Its wire dialect.
    pub api: Api,
    /// Its base URL.
    pub base_url: String,
    /// The variable its key is read from; `None` for keyless endpoints.
    pub api_key_env: Option<String>,
}

/// The merged, typed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// `model` (flags, environment, project, user — the first that sets it).
    pub model: Option<(String, Source)>,
    /// Every provider: the built-ins merged with the user's.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `models.*`: registry overrides.
    pub models: BTreeMap<String, ModelOverride>,
    /// `models.*.{input,output,cacheRead,cacheWrite}Price`: `soba replay`'s
    /// price overrides, in that order, US dollars per million tokens.
    pub prices: BTreeMap<String, [Option<f64>; 4]>,
    /// `compaction.*`.
    pub compaction: CompactionConfig,
    /// `session.durability`.
    pub durability: Durability,
    /// `tools.allow` (user config, environment or flags only).
    pub tools_allow: Vec<String>,
    /// `tools.bash.timeoutMs`.
    pub bash_timeout_ms: u64,
    /// `http.idleTimeoutMs`.
    pub idle_timeout_ms: u64,
    /// `http.streamTimeoutMs`.
    pub stream_timeout_ms: u64,
}

/// The model a command will use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The id as given (`provider/model`).
    pub id: String,
    /// Where it came from, e.g. `--model` or `ANTHROPIC_API_KEY is set`.
    pub reason: String,
}

/// What to load.
#[derive(Debug, Clone, Copy)]
pub struct LoadInput<'a> {
    /// The environment (`SOBA_*` settings).
    pub env: &'a Env,
    /// The user config file (may be missing).
    pub user_file: &'a Path,
    /// The project config file (may be missing).
    pub project_file: Option<&'a Path>,
    /// `--set path=value` arguments, in order.
    pub sets: &'a [String],
}

/// A loaded configuration with everything `soba config show` prints.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The typed configuration.
    pub config: Config,
    /// Every explicitly set key, merged (later sources win).
    pub settings: BTreeMap<KeyPath, Setting>,
    /// Deprecation warnings, one line each.
    pub warnings: Vec<String>,
}

/// Loads and merges every source.
pub fn load(input: &LoadInput<'_>) -> Result<Loaded, ConfigError> {
    let mut merger = Merger::default();
    let mut user_providers: BTreeSet<String> = BTreeSet::new();
    if let Some(object) = read_object(input.user_file)? {
        let source = Source::UserFile(input.user_file.to_path_buf());
        let mut out = Vec::new();
        flatten(&object, &mut Vec::new(), &source, false, &mut out)?;
        for assignment in &out {
            if assignment.path.0.first().map(String::as_str) == Some("providers")
                && let Some(name) = assignment.path.0.get(1)
            {
                user_providers.insert(name.clone());
            }
        }
        merger.apply_all(out);
    }
    if let Some(project_file) = input.project_file
        && let Some(object) = read_object(project_file)?
    {
        let source = Source::ProjectFile(project_file.to_path_buf());
        let mut out = Vec::new();
        flatten(&object, &mut Vec::new(), &source, true, &mut out)?;
        for assignment in &out {
            check_trusted_model(assignment, project_file, &user_providers)?;
        }
        merger.apply_all(out);
    }
    let mut from_env = Vec::new();
    for (name, value) in input.env.with_prefix("SOBA_")? {
        // An empty variable counts as unset, as for key variables.
        if NON_SETTING_VARS.contains(&name) || value.is_empty() {
            continue;
        }
        from_env.push(env_assignment(name, value)?);
    }
    merger.apply_all(from_env);
    let mut from_flags = Vec::new();
    for assignment in input.sets {
        from_flags.push(set_assignment(assignment)?);
    }
    merger.apply_all(from_flags);
    let config = build(&merger.settings)?;
    Ok(Loaded {
        config,
        settings: merger.settings,
        warnings: merger.warnings,
    })
}

/// Merges assignments, later ones winning; a deprecated alias never wins
/// over its key.
#[derive(Debug, Default)]
struct Merger {
    settings: BTreeMap<KeyPath, Setting>,
    warnings: Vec<String>,
}

impl Merger {
    /// Applies one source's assignments in order. A deprecated alias is
    /// ignored (with a warning) when its key is set by this source or was
    /// set by an earlier one: the key always wins.
    fn apply_all(&mut self, assignments: Vec<Assignment>) {
        let plain: BTreeSet<KeyPath> = assignments
            .iter()
            .filter(|a| a.deprecated_alias.is_none())
            .map(|a| a.path.clone())
            .collect();
        for assignment in assignments {
            if let Some(alias) = assignment.deprecated_alias {
                let key = assignment.path.to_string();
                let overridden = plain.contains(&assignment.path)
                    || self
                        .settings
                        .get(&assignment.path)
                        .is_some_and(|existing| !existing.via_deprecated_alias);
                if overridden {
                    self.warnings.push(format!(
                        "{alias} ({}) is deprecated and ignored because {key} is set; remove it",
                        assignment.source
                    ));
                    continue;
                }
                self.warnings.push(format!(
                    "{alias} ({}) is deprecated; rename it to {key}",
                    assignment.source
                ));
            }
            self.settings.insert(
                assignment.path,
                Setting {
                    value: assignment.value,
                    source: assignment.source,
                    via_deprecated_alias: assignment.deprecated_alias.is_some(),
                },
            );
        }
    }
}

/// Checks `--allow` or `tools.allow` entries (names, or comma-separated
/// lists of names) against the engine's [`ALLOW_NAMES`], with a "did you
/// mean" for a typo and a note for a tool that never asks.
pub fn check_tool_allow(entries: &[String], origin: &Source) -> Result<(), ConfigError> {
    let known: Vec<&str> = ALLOW_NAMES.iter().map(|(name, _)| *name).collect();
    let needing_no_approval: Vec<&str> = ToolRegistry::builtin()
        .names()
        .into_iter()
        .filter(|tool| {
            !ALLOW_NAMES
                .iter()
                .any(|(_, covered)| covered.contains(tool))
        })
        .collect();
    for name in entries
        .iter()
        .flat_map(|entry| entry.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        if known.contains(&name) {
            continue;
        }
        let why = if needing_no_approval.contains(&name) {
            format!("{name} never asks for approval, so it needs no entry; remove it")
        } else {
            let suggestion = keys::closest(name, known.iter().copied())
                .map(|close| format!("did you mean {close}? "))
                .unwrap_or_default();
            format!("{suggestion}the tools that ask are {}", ALLOW_DESCRIPTION)
        };
        return Err(ConfigError::UnknownTool {
            name: name.to_owned(),
            origin: origin.clone(),
            why,
        });
    }
    Ok(())
}

/// What each `tools.allow` name covers, for messages.
const ALLOW_DESCRIPTION: &str =
    "bash, write (write_file and edit_file), edit (edit_file alone), write_file and edit_file";

/// Builds the typed configuration from merged settings.
fn build(settings: &BTreeMap<KeyPath, Setting>) -> Result<Config, ConfigError> {
    let mut config = Config {
        model: None,
        providers: BTreeMap::new(),
        models: BTreeMap::new(),
        prices: BTreeMap::new(),
        compaction: CompactionConfig::default(),
        durability: Durability::Fsync,
        tools_allow: Vec::new(),
        bash_timeout_ms: 120_000,
        idle_timeout_ms: 300_000,
        stream_timeout_ms: 3_600_000,
    };
    let mut provider_fields: BTreeMap<String, BTreeMap<&str, Value>> = BTreeMap::new();
    for provider in keys::BUILTIN_PROVIDERS {
        let fields = provider_fields.entry(provider.name.to_owned()).or_default();
        for field in ["api", "baseUrl", "apiKeyEnv"] {
            if let Some(value) = keys::builtin_provider_default(provider.name, field) {
                fields.insert(field, value);
            }
        }
    }
    // Compaction keys go in table order so `summarizer` sub-keys and the
    // rest apply deterministically.
    for spec in KEYS.iter().filter(|spec| spec.alias.is_none()) {
        if let Some(key) = spec.path.strip_prefix("compaction.")
            && let Some(setting) =
                settings.get(&KeyPath(spec.path.split('.').map(str::to_owned).collect()))
        {
            config.compaction.set_key(key, &setting.value)?;
        }
    }
    for (path, setting) in settings {
        let segments = path.segments();
        match segments.as_slice() {
            ["model"] => {
                config.model = setting
                    .value
                    .as_str()
                    .map(|model| (model.to_owned(), setting.source.clone()));
            }
            ["providers", name, field] => {
                let field: &str = match *field {
                    "api" => "api",
                    "baseUrl" => "baseUrl",
                    _ => "apiKeyEnv",
                };
                provider_fields
                    .entry((*name).to_owned())
                    .or_default()
                    .insert(field, setting.value.clone());
            }
            [
                "models",
                id,
                field @ ("inputPrice" | "outputPrice" | "cacheReadPrice" | "cacheWritePrice"),
            ] => {
                let slot = match *field {
                    "inputPrice" => 0,
                    "outputPrice" => 1,
                    "cacheReadPrice" => 2,
                    _ => 3,
                };
                config.prices.entry((*id).to_owned()).or_default()[slot] = setting.value.as_f64();
            }
            ["models", id, field] => {
                let entry = config.models.entry((*id).to_owned()).or_default();
                match *field {
                    "contextWindow" => entry.context_window = setting.value.as_u64(),
                    "maxOutputTokens" => entry.max_output_tokens = setting.value.as_u64(),
                    "toolCallsInText" => entry.tool_calls_in_text = setting.value.as_bool(),
                    _ => entry.tokenizer = setting.value.as_str().map(str::to_owned),
                }
            }
            ["session", "durability"] => {
                config.durability = setting
                    .value
                    .as_str()
                    .and_then(Durability::parse)
                    .unwrap_or_default();
            }
            ["tools", "allow"] => {
                config.tools_allow = setting
                    .value
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                check_tool_allow(&config.tools_allow, &setting.source)?;
            }
            ["http", "idleTimeoutMs"] => {
                config.idle_timeout_ms = setting.value.as_u64().unwrap_or(300_000);
            }
            ["http", "streamTimeoutMs"] => {
                config.stream_timeout_ms = setting.value.as_u64().unwrap_or(3_600_000);
            }
            ["tools", "bash", "timeoutMs"] => {
                config.bash_timeout_ms = setting.value.as_u64().unwrap_or(120_000);
            }
            _ => {}
        }
    }
    for (name, fields) in provider_fields {
        let api = fields
            .get("api")
            .and_then(Value::as_str)
            .and_then(Api::parse)
            .ok_or(ConfigError::IncompleteProvider {
                provider: name.clone(),
                field: "api",
            })?;
        let base_url = fields
            .get("baseUrl")
            .and_then(Value::as_str)
            .ok_or(ConfigError::IncompleteProvider {
                provider: name.clone(),
                field: "baseUrl",
            })?
            .to_owned();
        let api_key_env = fields
            .get("apiKeyEnv")
            .and_then(Value::as_str)
            .map(str::to_owned);
        config.providers.insert(
            name.clone(),
            ProviderConfig {
                name,
                api,
                base_url,
                api_key_env,
            },
        );
    }
    Ok(config)
}

impl Config {
    /// Returns the HTTP settings of every provider client: the defaults
    /// with `http.idleTimeoutMs` and `http.streamTimeoutMs`.
    pub fn http(&self) -> soba_provider::transport::HttpConfig {
        soba_provider::transport::HttpConfig {
            idle_timeout: std::time::Duration::from_millis(self.idle_timeout_ms),
            stream_timeout: std::time::Duration::from_millis(self.stream_timeout_ms),
            ..soba_provider::transport::HttpConfig::default()
        }
    }

    /// Returns the model registry with the `models.*` overrides.
    pub fn registry(&self) -> ModelRegistry {
        ModelRegistry::with_overrides(self.models.clone())
    }

    /// Resolves the model (SPEC §14.3): `--model` > `SOBA_MODEL` > project
    /// `model` > user `model` > the registry default of the first built-in
    /// provider (Anthropic, OpenAI, OpenRouter) whose key variable is set.
    pub fn resolve_model(
        &self,
        flag: Option<&str>,
        env: &Env,
    ) -> Result<ResolvedModel, ConfigError> {
        if let Some(model) = flag.map(str::trim).filter(|m| !m.is_empty()) {
            return Ok(ResolvedModel {
                id: model.to_owned(),
                reason: "--model".to_owned(),
            });
        }
        if let Some((model, source)) = &self.model {
            return Ok(ResolvedModel {
                id: model.clone(),
                reason: source.to_string(),
            });
        }
        for name in FALLBACK_PROVIDERS {
            let var = self
                .providers
                .get(name)
                .and_then(|provider| provider.api_key_env.clone());
            if let Some(var) = var
                && env.get(&var).is_some()
                && let Some(model) = registry::default_model(name)
            {
                return Ok(ResolvedModel {
                    id: model.to_owned(),
                    reason: format!("{var} is set"),
                });
            }
        }
        Err(ConfigError::NoModel)
    }

    /// Returns the provider serving `model` (a registry-resolved id).
    pub fn provider_for(
        &self,
        model: &str,
        provider: &str,
    ) -> Result<&ProviderConfig, ConfigError> {
        self.providers
            .get(provider)
            .ok_or_else(|| ConfigError::UnknownProvider {
                model: model.to_owned(),
                provider: provider.to_owned(),
            })
    }

    /// Returns the endpoint of `provider`, its key read from the variable
    /// its `apiKeyEnv` names (and nowhere else).
    pub fn endpoint(&self, provider: &ProviderConfig, env: &Env) -> Result<Endpoint, ConfigError> {
        let mut endpoint = Endpoint::new(provider.base_url.clone());
        if let Some(var) = &provider.api_key_env {
            let key = env.var(var)?.ok_or_else(|| ConfigError::MissingKey {
                provider: provider.name.clone(),
                var: var.clone(),
            })?;
            endpoint = endpoint.with_api_key(key);
        }
        Ok(endpoint)
    }
}

/// One line of `soba config show`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowRow {
    /// The key.
    pub key: String,
    /// Its merged value.
    pub value: Value,
    /// Where it came from.
    pub source: Source,
}

impl Loaded {
    /// Returns every key with its merged value and source, in table order:
    /// fixed keys always, one row per field of every provider, one per set
    /// field of every configured model.
    pub fn rows(&self) -> Vec<ShowRow> {
        let mut rows = Vec::new();
        let provider_names: Vec<String> = self.config.providers.keys().cloned().collect();
        // Models that set only prices are configured models too.
        let mut model_ids: Vec<String> = self.config.models.keys().cloned().collect();
        model_ids.extend(self.config.prices.keys().cloned());
        model_ids.sort();
        model_ids.dedup();
        let fields_of = |map: &str| -> Vec<&'static str> {
            KEYS.iter()
                .filter_map(|spec| spec.path.strip_prefix(map)?.strip_prefix(".*."))
                .collect()
        };
        let mut concrete: Vec<(KeyPath, &KeySpec)> = Vec::new();
        for spec in KEYS.iter().filter(|spec| spec.alias.is_none()) {
            // Map entries are listed together, name by name, at their
            // first key's place.
            let (map, names) = match spec.path.split('.').next() {
                Some("providers") => ("providers", &provider_names),
                Some("models") => ("models", &model_ids),
                _ => {
                    concrete.push((
                        KeyPath(spec.path.split('.').map(str::to_owned).collect()),
                        spec,
                    ));
                    continue;
                }
            };
            if concrete.iter().any(|(path, _)| path.0[0] == map) || !spec.path.contains('*') {
                continue;
            }
            for name in names {
                for field in fields_of(map) {
                    let pattern = format!("{map}.*.{field}");
                    if let Some(field_spec) = KEYS.iter().find(|k| k.path == pattern) {
                        concrete.push((
                            KeyPath(vec![map.to_owned(), name.clone(), field.to_owned()]),
                            field_spec,
                        ));
                    }
                }
            }
        }
        for (path, spec) in concrete {
            let (value, source) = match self.settings.get(&path) {
                Some(setting) => (setting.value.clone(), setting.source.clone()),
                None => {
                    let default = match path.segments().as_slice() {
                        ["providers", name, field] => keys::builtin_provider_default(name, field),
                        _ => spec.default_value(),
                    };
                    match default {
                        Some(value) => (value, Source::Default),
                        None => continue,
                    }
                }
            };
            rows.push(ShowRow {
                key: path.to_string(),
                value,
                source,
            });
        }
        rows
    }

    /// Returns the merged configuration as one JSON document (the shape of
    /// SPEC §14.3).
    pub fn to_json(&self) -> Value {
        let mut root = Value::Object(Map::new());
        for row in self.rows() {
            let path = split_display_path(&row.key);
            insert_path(&mut root, &path, row.value);
        }
        root
    }
}

/// Splits a [`KeyPath`] display string back into segments.
fn split_display_path(text: &str) -> Vec<String> {
    set_path(text).unwrap_or_else(|| vec![text.to_owned()])
}

fn insert_path(root: &mut Value, path: &[String], value: Value) {
    let mut cursor = root;
    for (idx, segment) in path.iter().enumerate() {
        if !cursor.is_object() {
            *cursor = Value::Object(Map::new());
        }
        let Value::Object(map) = cursor else { return };
        if idx + 1 == path.len() {
            map.insert(segment.clone(), value);
            return;
        }
        cursor = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[cfg(unix)]
    fn not_utf8_env(name: &str) -> Env {
        use std::os::unix::ffi::OsStringExt;
        Env::from_os_pairs([
            (
                std::ffi::OsString::from(name),
                std::ffi::OsString::from_vec(b"anthropic/\xff".to_vec()),
            ),
            ("SOBA_LOG".into(), "debug".into()),
        ])
    }

    #[cfg(unix)]
    #[test]
    fn a_soba_variable_that_is_not_utf8_is_an_error_naming_it() {
        for name in [
            "SOBA_MODEL",
            "SOBA_COMPACTION__KEEP_RECENT_TOKENS",
            "SOBA_NOT_A_KEY",
        ] {
            let env = not_utf8_env(name);
            let err = load(&LoadInput {
                env: &env,
                user_file: Path::new("/nonexistent/soba/config.json"),
                project_file: None,
                sets: &[],
            })
            .expect_err("not UTF-8");
            assert_eq!(
                err.to_string(),
                format!(
                    "environment variable {name} is not valid UTF-8: set it to UTF-8 text (or unset it)"
                )
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn an_api_key_variable_that_is_not_utf8_is_an_error_not_missing() {
        let env = not_utf8_env("ANTHROPIC_API_KEY");
        let provider = ProviderConfig {
            name: "anthropic".into(),
            api: Api::AnthropicMessages,
            base_url: "https://api.anthropic.com".into(),
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
        };
        let loaded = load(&LoadInput {
            env: &Env::default(),
            user_file: Path::new("/nonexistent/soba/config.json"),
            project_file: None,
            sets: &[],
        })
        .unwrap();
        let err = loaded
            .config
            .endpoint(&provider, &env)
            .expect_err("not UTF-8");
        assert_eq!(
            err.to_string(),
            "environment variable ANTHROPIC_API_KEY is not valid UTF-8: set it to UTF-8 text (or unset it)"
        );
    }

    #[test]
    fn env_names_round_trip() {
        assert_eq!(
            env_var_name("compaction.keepRecentTokens"),
            "SOBA_COMPACTION__KEEP_RECENT_TOKENS"
        );
        assert_eq!(camel_case("KEEP_RECENT_TOKENS"), "keepRecentTokens");
        assert_eq!(camel_case("MODEL"), "model");
    }

    #[test]
    fn set_paths() {
        assert_eq!(
            set_path("models.\"openrouter/x-1.5\".contextWindow").unwrap(),
            ["models", "openrouter/x-1.5", "contextWindow"]
        );
        assert_eq!(
            set_path("models.openrouter/x-1.5.contextWindow").unwrap(),
            ["models", "openrouter/x-1.5", "contextWindow"]
        );
        assert_eq!(
            set_path("compaction.summarizer.model").unwrap(),
            ["compaction", "summarizer", "model"]
        );
        assert_eq!(set_path("a..b"), None);
        assert_eq!(set_path("\"unterminated"), None);
    }

    #[test]
    fn key_paths_quote_map_keys() {
        let path = KeyPath(vec![
            "models".into(),
            "ollama/qwen3".into(),
            "contextWindow".into(),
        ]);
        assert_eq!(path.to_string(), "models.\"ollama/qwen3\".contextWindow");
        assert_eq!(split_display_path(&path.to_string()), path.0);
    }

    #[test]
    fn a_config_file_that_is_not_utf8_names_the_offset_and_the_fix() {
        let path = Path::new("/home/dev/.soba/config.json");
        let err =
            parse_object(path, b"{\"model\": \"anthropic/\xff\xfe\"}").expect_err("not UTF-8");
        assert!(
            matches!(
                err,
                ConfigError::NotUtf8 {
                    valid_up_to: 21,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "/home/dev/.soba/config.json is not valid UTF-8 (first invalid byte at offset 21): re-save it as UTF-8"
        );
        let object = parse_object(path, "{\"model\": \"é\"}".as_bytes()).expect("UTF-8");
        assert_eq!(object["model"], json!("é"));
    }

    #[test]
    fn a_config_file_that_repeats_a_key_names_it_and_its_line() {
        let path = Path::new("/home/dev/.soba/config.json");
        let text = "{\n  \"models\": {\"ollama/qwen3\": {\"contextWindow\": 32768}},\n  \"models\": {}\n}\n";
        let err = parse_object(path, text.as_bytes()).expect_err("a repeated key");
        assert_eq!(
            err.to_string(),
            "/home/dev/.soba/config.json sets models twice (again on line 3): keep one of them"
        );
        let nested =
            "{\"models\": {\"ollama/qwen3\": {\"contextWindow\": 1, \"contextWindow\": 2}}}";
        let err = parse_object(path, nested.as_bytes()).expect_err("a repeated key");
        assert_eq!(
            err.to_string(),
            "/home/dev/.soba/config.json sets models.\"ollama/qwen3\".contextWindow twice (again on line 1): keep one of them"
        );
    }

    #[test]
    fn a_config_file_may_start_with_a_byte_order_mark() {
        let path = Path::new("/home/dev/.soba/config.json");
        let object = parse_object(path, b"\xef\xbb\xbf{\"model\": \"ollama/x\"}").expect("a BOM");
        assert_eq!(object["model"], json!("ollama/x"));
    }

    #[test]
    fn an_unreadable_config_file_says_why() {
        let temp = tempfile::tempdir().expect("a temp dir");
        let dir = temp.path();
        // A directory where the file should be is refused without reading.
        let err = read_object(dir).expect_err("a directory");
        assert_eq!(
            err.to_string(),
            format!(
                "{} is a directory, not a regular file: soba reads only regular files here; copy the content into a file and use that",
                dir.display()
            )
        );
        assert_eq!(
            err.hint(),
            Some(format!(
                "a config file must be a regular JSON file: replace {} with one, or remove it",
                dir.display()
            ))
        );
        assert_eq!(
            read_object(&dir.join("missing.json")).expect("missing is fine"),
            None
        );
    }

    #[test]
    fn to_json_nests_rows() {
        let mut root = json!({});
        insert_path(&mut root, &["a".into(), "b".into()], json!(1));
        insert_path(&mut root, &["a".into(), "c".into()], json!(2));
        assert_eq!(root, json!({"a": {"b": 1, "c": 2}}));
    }
}
