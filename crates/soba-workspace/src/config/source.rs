//! Reading each source of configuration into assignments checked against
//! the key table: a config file (a regular file of at most 1 MiB, UTF-8,
//! one JSON object), `SOBA_*` variables and `--set PATH=VALUE`, with the
//! "did you mean" of an unknown key and the project file's restrictions.

use super::*;

/// The largest config file soba reads: 1 MiB.
pub const CONFIG_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// Reads a config file (a regular file of at most
/// [`CONFIG_FILE_MAX_BYTES`], never blocking on a FIFO or device); a
/// missing file, or a dangling link, is `None`.
pub(super) fn read_object(path: &Path) -> Result<Option<Map<String, Value>>, ConfigError> {
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
pub(super) fn parse_object(path: &Path, bytes: &[u8]) -> Result<Map<String, Value>, ConfigError> {
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
pub(super) fn suggest(parent: &[&str], name: &str) -> Option<String> {
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
pub(super) fn flatten(
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
pub(super) fn assignment(
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
pub(super) fn check_trusted_model(
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
pub(super) fn camel_case(upper_snake: &str) -> String {
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
pub(super) fn env_assignment(name: &str, text: &str) -> Result<Assignment, ConfigError> {
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
pub(super) fn not_a_key(
    segments: &[&str],
    source: Source,
    value: &str,
    env_form: bool,
) -> ConfigError {
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
pub(super) fn set_path(path: &str) -> Option<Vec<String>> {
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
pub(super) fn set_assignment(text: &str) -> Result<Assignment, ConfigError> {
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
