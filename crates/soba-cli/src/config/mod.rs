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

pub mod json;
pub mod keys;
mod prices;
pub mod schema;

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

/// Why the configuration cannot be loaded or used. Every variant is a
/// configuration error (exit 1) except [`ConfigError::BadAssignment`], a
/// usage error (exit 2); none is retryable without fixing the input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A config file exists but cannot be read.
    #[error("cannot read {path}: {reason}; check that it is a readable file")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (shown in the message, so it is not also a source).
        reason: std::io::Error,
    },
    /// A config file is not a regular file (a FIFO, a device such as
    /// `/dev/stdin`, a directory) or is larger than
    /// [`CONFIG_FILE_MAX_BYTES`].
    #[error(transparent)]
    Unreadable(soba_store::untrusted::UntrustedReadError),
    /// A config file is not valid UTF-8.
    #[error(
        "{path} is not valid UTF-8 (first invalid byte at offset {valid_up_to}): re-save it as UTF-8"
    )]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Bytes before the first invalid sequence.
        valid_up_to: usize,
    },
    /// A config file is not valid JSON.
    #[error("{path} is not valid JSON (line {line}, column {column}): {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A config file names the same key twice in one object (JSON parsers
    /// disagree on which one counts; serde_json keeps the last).
    #[error("{path} sets {key} twice (again on line {line}): keep one of them")]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// The repeated key's full path (dotted).
        key: String,
        /// The 1-based line of the second occurrence.
        line: usize,
    },
    /// A config file's top level is not a JSON object.
    #[error(
        "{path} must hold one JSON object, like {{\"model\": \"anthropic/claude-sonnet-4-5\"}}"
    )]
    NotAnObject {
        /// The file.
        path: PathBuf,
    },
    /// A key is not in the table.
    #[error("unknown key {key} in {origin}{}", suggestion.as_ref().map(|s| format!("; did you mean {s}?")).unwrap_or_default())]
    UnknownKey {
        /// The key as written (dotted).
        key: String,
        /// Where it was written.
        origin: Source,
        /// The closest known key, when one is close.
        suggestion: Option<String>,
    },
    /// A value has the wrong type.
    #[error("{key} in {origin} must be {expected}, not {value}")]
    WrongType {
        /// The key.
        key: String,
        /// Where it was written.
        origin: Source,
        /// What the key takes.
        expected: String,
        /// The value given, as JSON.
        value: String,
    },
    /// A `tools.allow` (or `--allow`) entry names no tool that asks for
    /// approval.
    #[error("unknown tool {name:?} in {origin}: {why}")]
    UnknownTool {
        /// The name as given.
        name: String,
        /// Where it was written.
        origin: Source,
        /// A suggestion and the known names.
        why: String,
    },
    /// A project file sets a key only the user may set (SPEC §14.2).
    #[error(
        "{key} is not allowed in the project config {path}: a project file may set only model, compaction.* and models.*.{{contextWindow,maxOutputTokens,tokenizer}}; move it to your user config"
    )]
    ForbiddenInProject {
        /// The key.
        key: String,
        /// The project file.
        path: PathBuf,
    },
    /// A project file names a model of a provider that is neither built in
    /// nor defined by the user (it could send the user's key elsewhere).
    #[error(
        "{key} = {model:?} in the project config {path} names provider {provider:?}, which is neither built in nor defined in your user config; define providers.{provider} in your user config or use another model"
    )]
    UntrustedProvider {
        /// `model` or `compaction.summarizer.model`.
        key: String,
        /// The model named.
        model: String,
        /// Its provider.
        provider: String,
        /// The project file.
        path: PathBuf,
    },
    /// A `--set` argument is not `PATH=VALUE` (no `=`, or no key before
    /// it: `--set '='`).
    #[error(
        "--set '{assignment}': expected PATH=VALUE, e.g. --set compaction.keepRecentTokens=30000"
    )]
    BadAssignment {
        /// The argument, as given.
        assignment: String,
    },
    /// A `SOBA_*` variable's name has an empty key segment (`SOBA_=1`,
    /// `SOBA_COMPACTION__=1`), so it names no setting.
    #[error(
        "environment variable '{name}={value}' names no setting: expected SOBA_<KEY>=value, with __ between nested keys, e.g. SOBA_COMPACTION__KEEP_RECENT_TOKENS=30000"
    )]
    BadVariable {
        /// The variable's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// A user-defined provider lacks a required field.
    #[error(
        "providers.{provider} has no {field}: a provider needs api (anthropic-messages, openai-chat or openai-responses) and baseUrl"
    )]
    IncompleteProvider {
        /// The provider.
        provider: String,
        /// The missing field.
        field: &'static str,
    },
    /// A `compaction.*` value was refused by the core.
    #[error("{0}")]
    Compaction(#[from] soba_core::config::ConfigError),
    /// No model could be resolved.
    #[error("{}", NO_MODEL_MESSAGE)]
    NoModel,
    /// The model's provider is not configured.
    #[error(
        "model {model} uses provider {provider:?}, which is not configured: add providers.{provider} with api and baseUrl (and apiKeyEnv) to your user config"
    )]
    UnknownProvider {
        /// The model id.
        model: String,
        /// Its provider.
        provider: String,
    },
    /// The provider's key variable is not set.
    #[error("{var} is not set: export the API key of provider {provider} in {var}")]
    MissingKey {
        /// The provider.
        provider: String,
        /// The variable its `apiKeyEnv` names.
        var: String,
    },
    /// The registry cannot resolve the model.
    #[error("{0}")]
    Registry(#[from] registry::RegistryError),
    /// A `SOBA_*` or key variable is not UTF-8.
    #[error(transparent)]
    EnvNotUtf8(#[from] crate::paths::NotUtf8),
}

impl ConfigError {
    /// Returns a hint for the user, when there is more to say.
    pub fn hint(&self) -> Option<String> {
        match self {
            ConfigError::Registry(registry::RegistryError::MissingContextWindow {
                key, ..
            }) => Some(format!("or pass --set '{key}=N'")),
            ConfigError::UnknownKey { .. } | ConfigError::WrongType { .. } => {
                Some("`soba config schema` prints every key with its type".to_owned())
            }
            ConfigError::Unreadable(soba_store::untrusted::UntrustedReadError::TooLarge {
                path,
                ..
            }) => Some(format!(
                "a config file holds a few settings: shorten {}",
                path.display()
            )),
            ConfigError::Unreadable(err) => Some(format!(
                "a config file must be a regular JSON file: replace {} with one, or remove it",
                err.path().display()
            )),
            _ => None,
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

/// The largest config file soba reads: 1 MiB.
pub const CONFIG_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// Reads a config file (a regular file of at most
/// [`CONFIG_FILE_MAX_BYTES`], never blocking on a FIFO or device); a
/// missing file, or a dangling link, is `None`.
fn read_object(path: &Path) -> Result<Option<Map<String, Value>>, ConfigError> {
    use soba_store::untrusted::{UntrustedReadError, read_untrusted};
    let bytes = match read_untrusted(path, CONFIG_FILE_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(err) if err.is_not_found() => return Ok(None),
        Err(UntrustedReadError::Io { path, source }) => {
            return Err(ConfigError::Read {
                path,
                reason: source,
            });
        }
        Err(err) => return Err(ConfigError::Unreadable(err)),
    };
    parse_object(path, &bytes).map(Some)
}

/// Parses a config file's bytes: UTF-8 text (a leading byte-order mark is
/// skipped) holding one JSON object that repeats no key.
fn parse_object(path: &Path, bytes: &[u8]) -> Result<Map<String, Value>, ConfigError> {
    let text = std::str::from_utf8(bytes).map_err(|err| ConfigError::NotUtf8 {
        path: path.to_path_buf(),
        valid_up_to: err.valid_up_to(),
    })?;
    let value = json::parse(text).map_err(|err| match err {
        json::JsonError::Syntax {
            line,
            column,
            message,
        } => ConfigError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message,
        },
        json::JsonError::DuplicateKey { path: key, line } => ConfigError::DuplicateKey {
            path: path.to_path_buf(),
            key: KeyPath(key).to_string(),
            line,
        },
    })?;
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(ConfigError::NotAnObject {
            path: path.to_path_buf(),
        }),
    }
}

/// Returns the closest known key to an unknown one under `parent`, as a
/// full dotted path; else a key elsewhere whose last name is the same
/// (`keepRecentTokens` at the top level means `compaction.keepRecentTokens`).
fn suggest(parent: &[&str], name: &str) -> Option<String> {
    let children = keys::children(parent);
    if let Some(close) = keys::closest(name, children.iter().copied()) {
        let mut path = KeyPath::from_segments(parent);
        path.0.push(close.to_owned());
        return Some(path.to_string());
    }
    KEYS.iter()
        .filter(|spec| !spec.path.contains('*'))
        .find(|spec| {
            spec.path
                .rsplit('.')
                .next()
                .is_some_and(|last| last.eq_ignore_ascii_case(name))
        })
        .map(|spec| spec.path.to_owned())
}

/// Walks a JSON object against the key table, collecting assignments.
fn flatten(
    object: &Map<String, Value>,
    prefix: &mut Vec<String>,
    source: &Source,
    project: bool,
    out: &mut Vec<Assignment>,
) -> Result<(), ConfigError> {
    for (name, value) in object {
        prefix.push(name.clone());
        let segments: Vec<&str> = prefix.iter().map(String::as_str).collect();
        let path = KeyPath::from_segments(&segments);
        match keys::position(&segments) {
            Position::Leaf(spec) => {
                if project
                    && !spec.project
                    && let Source::ProjectFile(file) = source
                {
                    return Err(ConfigError::ForbiddenInProject {
                        key: path.to_string(),
                        path: file.clone(),
                    });
                }
                out.push(assignment(spec, path, value.clone(), source)?);
            }
            Position::Object { .. } => match value {
                Value::Object(inner) => flatten(inner, prefix, source, project, out)?,
                other => {
                    return Err(ConfigError::WrongType {
                        key: path.to_string(),
                        origin: source.clone(),
                        expected: "an object".to_owned(),
                        value: other.to_string(),
                    });
                }
            },
            Position::Unknown => {
                return Err(ConfigError::UnknownKey {
                    key: path.to_string(),
                    origin: source.clone(),
                    suggestion: suggest(&segments[..segments.len() - 1], name),
                });
            }
        }
        prefix.pop();
    }
    Ok(())
}

/// Type-checks one value and resolves aliases.
fn assignment(
    spec: &KeySpec,
    path: KeyPath,
    value: Value,
    source: &Source,
) -> Result<Assignment, ConfigError> {
    if !spec.value_type.accepts(&value) {
        return Err(ConfigError::WrongType {
            key: path.to_string(),
            origin: source.clone(),
            expected: spec.value_type.expected(),
            value: value.to_string(),
        });
    }
    let (path, deprecated_alias) = match spec.alias {
        Some(alias) => (
            KeyPath(alias.of.split('.').map(str::to_owned).collect()),
            alias.deprecated.then_some(spec.path),
        ),
        None => (path, None),
    };
    Ok(Assignment {
        path,
        value,
        source: source.clone(),
        deprecated_alias,
    })
}

/// Checks that a project file's `model` or `compaction.summarizer.model`
/// names a built-in provider or one the user file defines.
fn check_trusted_model(
    assignment: &Assignment,
    project_file: &Path,
    user_providers: &BTreeSet<String>,
) -> Result<(), ConfigError> {
    let key = assignment.path.to_string();
    if key != "model" && key != "compaction.summarizer.model" {
        return Ok(());
    }
    let Some(model) = assignment.value.as_str() else {
        return Ok(());
    };
    if key == "compaction.summarizer.model" && model == soba_core::builder::DETERMINISTIC {
        return Ok(());
    }
    let provider = match model.split_once('/') {
        Some((provider, _)) => provider.to_owned(),
        // A bare name is trusted only when it is a built-in model, which
        // belongs to a built-in provider.
        None => match registry::find_builtin(model) {
            Some(builtin) => builtin.provider.to_owned(),
            None => String::new(),
        },
    };
    if keys::builtin_provider(&provider).is_some() || user_providers.contains(&provider) {
        return Ok(());
    }
    Err(ConfigError::UntrustedProvider {
        key,
        model: model.to_owned(),
        provider,
        path: project_file.to_path_buf(),
    })
}

/// Converts `UPPER_SNAKE` to `camelCase`.
fn camel_case(upper_snake: &str) -> String {
    let mut out = String::with_capacity(upper_snake.len());
    for (idx, word) in upper_snake.split('_').filter(|w| !w.is_empty()).enumerate() {
        let lower = word.to_ascii_lowercase();
        if idx == 0 {
            out.push_str(&lower);
        } else {
            let mut chars = lower.chars();
            if let Some(first) = chars.next() {
                out.push(first.to_ascii_uppercase());
                out.extend(chars);
            }
        }
    }
    out
}

/// Converts a dotted camelCase key to its variable, e.g.
/// `compaction.keepRecentTokens` → `SOBA_COMPACTION__KEEP_RECENT_TOKENS`.
pub fn env_var_name(path: &str) -> String {
    let segments: Vec<String> = path
        .split('.')
        .map(|segment| {
            let mut out = String::new();
            for c in segment.chars() {
                if c.is_ascii_uppercase() {
                    out.push('_');
                }
                out.push(c.to_ascii_uppercase());
            }
            out
        })
        .collect();
    format!("SOBA_{}", segments.join("__"))
}

/// Reads one `SOBA_<SEGMENT>__<SEGMENT>` variable.
fn env_assignment(name: &str, text: &str) -> Result<Assignment, ConfigError> {
    let source = Source::Env(name.to_owned());
    let rest = &name["SOBA_".len()..];
    if rest.split("__").any(str::is_empty) {
        return Err(ConfigError::BadVariable {
            name: name.to_owned(),
            value: text.to_owned(),
        });
    }
    let mut segments: Vec<String> = Vec::new();
    for raw in rest.split("__") {
        let current: Vec<&str> = segments.iter().map(String::as_str).collect();
        let segment = match keys::position(&current) {
            // A provider name or model id is taken as written, lowercased.
            Position::Object { map: true } => raw.to_ascii_lowercase(),
            _ => camel_case(raw),
        };
        segments.push(segment);
    }
    let borrowed: Vec<&str> = segments.iter().map(String::as_str).collect();
    match keys::position(&borrowed) {
        Position::Leaf(spec) => {
            let value = spec.value_type.parse_text(text);
            assignment(spec, KeyPath(segments.clone()), value, &source)
        }
        _ => Err(not_a_key(&borrowed, source, text, true)),
    }
}

/// The error for a path from a variable or `--set` that is not a key:
/// the suggestion replaces the first unknown segment.
fn not_a_key(segments: &[&str], source: Source, value: &str, env_form: bool) -> ConfigError {
    let path = KeyPath::from_segments(segments);
    if matches!(keys::position(segments), Position::Object { .. }) {
        return ConfigError::WrongType {
            key: path.to_string(),
            origin: source,
            expected: "an object (set its keys one by one, e.g. compaction.keepRecentTokens)"
                .to_owned(),
            value: value.to_owned(),
        };
    }
    let cut = (1..=segments.len())
        .find(|&n| keys::position(&segments[..n]) == Position::Unknown)
        .unwrap_or(segments.len());
    let suggestion = suggest(&segments[..cut - 1], segments[cut - 1]).map(|key| {
        let mut full: Vec<String> = split_display_path(&key);
        full.extend(segments[cut..].iter().map(|s| (*s).to_owned()));
        let full_segments: Vec<&str> = full.iter().map(String::as_str).collect();
        let key = if matches!(keys::position(&full_segments), Position::Leaf(_)) {
            KeyPath(full).to_string()
        } else {
            key
        };
        if env_form {
            format!("{key} ({})", env_var_name(&key))
        } else {
            key
        }
    });
    ConfigError::UnknownKey {
        key: path.to_string(),
        origin: source,
        suggestion,
    }
}

/// Splits a `--set` path into segments: `.` separates, `"…"` quotes a
/// segment; an unquoted map key runs to the last segment, so
/// `models.openrouter/x-1.5.contextWindow` works.
fn set_path(path: &str) -> Option<Vec<String>> {
    let mut tokens: Vec<(String, bool)> = Vec::new();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"')?;
            tokens.push((quoted[..end].to_owned(), true));
            rest = &quoted[end + 1..];
            rest = match rest.strip_prefix('.') {
                Some(after) => after,
                None if rest.is_empty() => rest,
                None => return None,
            };
        } else {
            let (token, after) = match rest.find('.') {
                Some(dot) => (&rest[..dot], &rest[dot + 1..]),
                None => (rest, ""),
            };
            tokens.push((token.to_owned(), false));
            rest = after;
        }
    }
    let mut segments: Vec<String> = Vec::new();
    let mut idx = 0;
    while idx < tokens.len() {
        let current: Vec<&str> = segments.iter().map(String::as_str).collect();
        let (token, quoted) = &tokens[idx];
        if !quoted
            && matches!(keys::position(&current), Position::Object { map: true })
            && tokens.len() - idx > 2
        {
            let joined: Vec<&str> = tokens[idx..tokens.len() - 1]
                .iter()
                .map(|(t, _)| t.as_str())
                .collect();
            segments.push(joined.join("."));
            idx = tokens.len() - 1;
            continue;
        }
        segments.push(token.clone());
        idx += 1;
    }
    (!segments.is_empty() && !segments.iter().any(String::is_empty)).then_some(segments)
}

/// Reads one `--set PATH=VALUE`.
fn set_assignment(text: &str) -> Result<Assignment, ConfigError> {
    let bad = || ConfigError::BadAssignment {
        assignment: text.to_owned(),
    };
    let (path_text, value_text) = text.split_once('=').ok_or_else(bad)?;
    let segments = set_path(path_text).ok_or_else(bad)?;
    let borrowed: Vec<&str> = segments.iter().map(String::as_str).collect();
    let source = Source::Flag(format!("--set {text}"));
    match keys::position(&borrowed) {
        Position::Leaf(spec) => assignment(
            spec,
            KeyPath(segments.clone()),
            spec.value_type.parse_text(value_text),
            &source,
        ),
        _ => Err(not_a_key(&borrowed, source, value_text, false)),
    }
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
