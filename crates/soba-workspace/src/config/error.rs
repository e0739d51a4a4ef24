//! Why the configuration cannot be loaded or used: one error per problem,
//! naming the source, the key and what to do.

use super::*;

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
