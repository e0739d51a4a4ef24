//! The one tolerant decoder of entry lines: a clean line on a fast path,
//! otherwise field by field through a JSON value with `serde_path_to_error`,
//! repairing what it can (clamped figures, unknown enum names) and keeping
//! the rest as a damaged placeholder, with a `FieldIssue` for each.

use super::*;

/// One field of an entry line that did not fit its type, and what the
/// decoder made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldIssue {
    /// The field, as a path into the line (`tokensBefore`,
    /// `content[0].text`); empty when the line as a whole is meant.
    pub field: String,
    /// What was wrong, and for a repair what was read instead.
    pub problem: String,
}

impl FieldIssue {
    pub(super) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldIssue {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl std::fmt::Display for FieldIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "`{}`: {}", self.field, self.problem)
        }
    }
}

/// An entry line decoded tolerantly by [`decode_entry`].
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedEntry {
    /// The entry. Its body is [`EntryBody::Damaged`] when the body does not
    /// fit its type; the entry still keeps its place in the tree.
    pub entry: Entry,
    /// What did not fit. For an [`EntryBody::Damaged`] body, the one reason
    /// it is a placeholder; otherwise the repairs made (an out-of-range
    /// figure clamped, an unknown enum value read as `unknown`, an unknown
    /// content block left out), each on an entry that is otherwise intact.
    pub issues: Vec<FieldIssue>,
}

/// How many fields of one line the decoder repairs before it gives up and
/// keeps the entry as a placeholder.
pub(super) const MAX_REPAIRS: usize = 32;

/// Decodes one entry line, tolerantly (the one decoder of entry lines: the
/// full reader, resume and the writer's reopening all use it).
///
/// Only a line whose place in the tree cannot be read is an error: not
/// JSON, not an object, a second header, or no valid `id` or `parentId`.
/// Everything else gives an entry:
///
/// - an unknown `type` reads as [`EntryBody::Unknown`];
/// - an unknown value of an enum-valued field is forward-compatible data
///   where the entry stays usable (a capsule's `trigger` and `quality` read
///   as `unknown`, a message's `origin` as `injected`, a content block of
///   unknown `type` is left out), with an issue;
/// - a figure out of range (a negative or fractional token count, a number
///   beyond what JSON numbers hold) is clamped into range, with an issue;
/// - a body that does not fit its type in any other way (a wrong JSON type,
///   a missing field, an unknown `role`) gives an [`EntryBody::Damaged`]
///   placeholder that keeps the envelope, with the reason;
/// - a missing or non-string `timestamp` reads as empty, with an issue.
///
/// Clean lines take a fast path: they are decoded straight from the text.
pub fn decode_entry(line: &str) -> Result<DecodedEntry, DecodeError> {
    if let Some(decoded) = decode_clean(line) {
        return Ok(decoded);
    }
    decode_tolerant(line)
}

/// Decodes a line that fits its type, straight from the text; `None` when
/// anything is off (the tolerant path then decides).
pub(super) fn decode_clean(line: &str) -> Option<DecodedEntry> {
    // Most lines are messages, and SOBA writes `type` first: those are
    // read in one pass, envelope and body together.
    if line.starts_with(MESSAGE_LINE_START)
        && let Ok(message) = serde_json::from_str::<MessageLine>(line)
        && message.type_name == "message"
    {
        let (envelope, record) = message.split();
        return decode_record(envelope, BodyRecord::Message(record));
    }
    let envelope: Envelope = serde_json::from_str(line).ok()?;
    if envelope.type_name == HEADER_TYPE {
        return None;
    }
    fn body<T: serde::de::DeserializeOwned>(line: &str) -> Option<T> {
        serde_json::from_str(line).ok()
    }
    let record = match envelope.type_name.as_str() {
        "message" => BodyRecord::Message(body(line)?),
        "context" => BodyRecord::Context(body(line)?),
        "capsule" => BodyRecord::Capsule(Box::new(body(line)?)),
        "hygiene" => BodyRecord::Hygiene(body(line)?),
        "checkpoint" => BodyRecord::Checkpoint(body(line)?),
        "leaf" => BodyRecord::Leaf(body(line)?),
        "model_change" => BodyRecord::ModelChange(body(line)?),
        "config_change" => BodyRecord::ConfigChange(body(line)?),
        "skill" => BodyRecord::Skill(body(line)?),
        _ => BodyRecord::Unknown {
            type_name: envelope.type_name.clone(),
        },
    };
    decode_record(envelope, record)
}

/// Builds the entry of a line decoded into its envelope and body record;
/// `None` when anything is off.
pub(super) fn decode_record(envelope: Envelope, record: BodyRecord) -> Option<DecodedEntry> {
    let id = EntryId::parse(envelope.id.as_deref()?).ok()?;
    let timestamp = envelope.timestamp?;
    let parent_id = match envelope.parent_id.as_deref() {
        Some(parent) => Some(EntryId::parse(parent).ok()?),
        None => None,
    };
    let mut issues = Vec::new();
    let body = record.into_body(&mut issues).ok()?;
    if !issues.is_empty() {
        return None;
    }
    Some(DecodedEntry {
        entry: Entry {
            id,
            parent_id,
            timestamp,
            body,
        },
        issues,
    })
}

/// The JSON kind of a value, for messages.
pub(super) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Decodes a line that does not fit its type: through a JSON value, field
/// by field, repairing what can be repaired.
pub(super) fn decode_tolerant(line: &str) -> Result<DecodedEntry, DecodeError> {
    let mut issues = Vec::new();
    let mut value = match parse_value(line, &mut issues) {
        Ok(value) => value,
        Err(DecodeError::Syntax(message)) if message.starts_with("recursion limit exceeded") => {
            return too_deep(line, &message);
        }
        Err(err) => return Err(err),
    };
    let Value::Object(object) = &mut value else {
        return Err(DecodeError::shape(format!(
            "expected a JSON object, found {}",
            json_kind(&value)
        )));
    };
    let type_name = match object.get("type") {
        Some(Value::String(name)) => Ok(name.clone()),
        Some(other) => Err(FieldIssue::new(
            "type",
            format!("expected a string, found {}", json_kind(other)),
        )),
        None => Err(FieldIssue::new("type", "missing")),
    };
    if type_name.as_deref() == Ok(HEADER_TYPE) {
        return Err(DecodeError::shape("a session header after line 1"));
    }
    let id = match object.get("id") {
        Some(Value::String(text)) => parse_id("id", text).map_err(into_shape)?,
        Some(other) => {
            return Err(DecodeError::shape(format!(
                "`id`: expected a string, found {}",
                json_kind(other)
            )));
        }
        None => return Err(DecodeError::shape("missing field `id`")),
    };
    let parent_id = match object.get("parentId") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(parse_id("parentId", text).map_err(into_shape)?),
        Some(other) => {
            return Err(DecodeError::shape(format!(
                "`parentId`: expected a string or null, found {}",
                json_kind(other)
            )));
        }
    };
    let timestamp = match object.get("timestamp") {
        Some(Value::String(text)) => text.clone(),
        Some(other) => {
            issues.push(FieldIssue::new(
                "timestamp",
                format!(
                    "expected a string, found {}; read as no time",
                    json_kind(other)
                ),
            ));
            String::new()
        }
        None => {
            issues.push(FieldIssue::new("timestamp", "missing; read as no time"));
            String::new()
        }
    };
    let placeholder = |type_name: String, cause: FieldIssue| DecodedEntry {
        entry: Entry {
            id: id.clone(),
            parent_id: parent_id.clone(),
            timestamp: timestamp.clone(),
            body: EntryBody::Damaged {
                type_name,
                reason: cause.to_string(),
            },
        },
        issues: vec![cause],
    };
    let type_name = match type_name {
        Ok(name) => name,
        Err(cause) => return Ok(placeholder(String::new(), cause)),
    };
    let record = match type_name.as_str() {
        "message" => record_from_value(&mut value, &mut issues).map(BodyRecord::Message),
        "context" => record_from_value(&mut value, &mut issues).map(BodyRecord::Context),
        "capsule" => record_from_value(&mut value, &mut issues)
            .map(|record| BodyRecord::Capsule(Box::new(record))),
        "hygiene" => record_from_value(&mut value, &mut issues).map(BodyRecord::Hygiene),
        "checkpoint" => record_from_value(&mut value, &mut issues).map(BodyRecord::Checkpoint),
        "leaf" => record_from_value(&mut value, &mut issues).map(BodyRecord::Leaf),
        "model_change" => record_from_value(&mut value, &mut issues).map(BodyRecord::ModelChange),
        "config_change" => record_from_value(&mut value, &mut issues).map(BodyRecord::ConfigChange),
        "skill" => record_from_value(&mut value, &mut issues).map(BodyRecord::Skill),
        _ => Ok(BodyRecord::Unknown {
            type_name: type_name.clone(),
        }),
    };
    let body = match record.and_then(|record| record.into_body(&mut issues)) {
        Ok(body) => body,
        Err(cause) => return Ok(placeholder(type_name, cause)),
    };
    Ok(DecodedEntry {
        entry: Entry {
            id,
            parent_id,
            timestamp,
            body,
        },
        issues,
    })
}

/// Keeps a line nested too deeply to read as a value as a placeholder,
/// when its envelope can still be read.
pub(super) fn too_deep(line: &str, message: &str) -> Result<DecodedEntry, DecodeError> {
    let too_deep = || DecodeError::Syntax(message.to_owned());
    let envelope: Envelope = serde_json::from_str(line).map_err(|_| too_deep())?;
    if envelope.type_name == HEADER_TYPE {
        return Err(DecodeError::shape("a session header after line 1"));
    }
    let id = parse_id("id", envelope.id.as_deref().ok_or_else(too_deep)?).map_err(into_shape)?;
    let parent_id = match envelope.parent_id.as_deref() {
        Some(parent) => Some(parse_id("parentId", parent).map_err(into_shape)?),
        None => None,
    };
    let cause = FieldIssue::new(
        "",
        "nested more than 128 levels deep, beyond what this version reads",
    );
    Ok(DecodedEntry {
        entry: Entry {
            id,
            parent_id,
            timestamp: envelope.timestamp.unwrap_or_default(),
            body: EntryBody::Damaged {
                type_name: envelope.type_name,
                reason: cause.to_string(),
            },
        },
        issues: vec![cause],
    })
}

pub(super) fn into_shape(issue: FieldIssue) -> DecodeError {
    DecodeError::Shape(issue.to_string())
}

/// Parses a line into a JSON value. A number beyond what an `f64` holds
/// (`1e400`), which serde_json refuses, is read as the largest one of its
/// sign, with an issue; the field's own check then clamps it.
pub(super) fn parse_value(line: &str, issues: &mut Vec<FieldIssue>) -> Result<Value, DecodeError> {
    match serde_json::from_str::<Value>(line) {
        Ok(value) => Ok(value),
        Err(err) if err.is_syntax() && err.to_string().starts_with("number out of range") => {
            let (clamped, replaced) = clamp_number_literals(line);
            let value = serde_json::from_str::<Value>(&clamped)
                .map_err(|err| DecodeError::from_json_line(&err, line))?;
            for literal in replaced {
                issues.push(FieldIssue::new(
                    "",
                    format!(
                        "the number {literal} is beyond the range of JSON numbers; read as {}",
                        if literal.starts_with('-') {
                            "-1.7976931348623157e+308"
                        } else {
                            "1.7976931348623157e+308"
                        }
                    ),
                ));
            }
            Ok(value)
        }
        Err(err) => Err(DecodeError::from_json_line(&err, line)),
    }
}

/// Rewrites number literals outside strings that overflow an `f64` as the
/// largest finite one of their sign; returns the text and the literals
/// replaced.
pub(super) fn clamp_number_literals(line: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(line.len());
    let mut replaced = Vec::new();
    let mut chars = line.char_indices().peekable();
    let mut in_string = false;
    let mut escaped = false;
    while let Some((start, c)) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push(c);
            continue;
        }
        if c == '-' || c.is_ascii_digit() {
            let mut end = start + c.len_utf8();
            while let Some(&(idx, next)) = chars.peek() {
                if next.is_ascii_digit() || matches!(next, '.' | 'e' | 'E' | '+' | '-') {
                    end = idx + next.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let literal = &line[start..end];
            match literal.parse::<f64>() {
                Ok(number) if number.is_infinite() => {
                    out.push_str(if number < 0.0 {
                        "-1.7976931348623157e308"
                    } else {
                        "1.7976931348623157e308"
                    });
                    replaced.push(literal.to_owned());
                }
                _ => out.push_str(literal),
            }
            continue;
        }
        out.push(c);
    }
    (out, replaced)
}

/// One step of a path into a JSON value.
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// Deserializes a record from `value`, repairing the fields that can be
/// repaired (each with an issue) and retrying; the error names the field
/// that does not fit.
pub(super) fn record_from_value<T: serde::de::DeserializeOwned>(
    value: &mut Value,
    issues: &mut Vec<FieldIssue>,
) -> Result<T, FieldIssue> {
    for _ in 0..MAX_REPAIRS {
        let err = match serde_path_to_error::deserialize::<_, T>(&*value) {
            Ok(record) => return Ok(record),
            Err(err) => err,
        };
        let mut steps = Vec::new();
        let mut exact = true;
        for segment in err.path().iter() {
            match segment {
                serde_path_to_error::Segment::Map { key } => steps.push(Step::Key(key.clone())),
                serde_path_to_error::Segment::Seq { index } => steps.push(Step::Index(*index)),
                _ => exact = false,
            }
        }
        let field = match err.path().to_string() {
            path if path == "." => String::new(),
            path => path,
        };
        let message = err.into_inner().to_string();
        if exact && let Some(problem) = repair(value, &steps, &message) {
            issues.push(FieldIssue::new(field, problem));
            continue;
        }
        return Err(FieldIssue::new(field, message));
    }
    Err(FieldIssue::new(
        "",
        format!("more than {MAX_REPAIRS} fields do not fit"),
    ))
}

/// Returns the value at `steps` inside `root`.
pub(super) fn value_at<'v>(root: &'v mut Value, steps: &[Step]) -> Option<&'v mut Value> {
    let mut cursor = root;
    for step in steps {
        cursor = match (step, cursor) {
            (Step::Key(key), Value::Object(map)) => map.get_mut(key)?,
            (Step::Index(index), Value::Array(items)) => items.get_mut(*index)?,
            _ => return None,
        };
    }
    Some(cursor)
}

/// Repairs the field at `steps` that failed with `message`, when its class
/// allows: a figure out of range is clamped into range, an array item of
/// an unknown `type` (a content block a newer version writes) is left out.
/// Returns what was done; `None` leaves the failure standing.
pub(super) fn repair(root: &mut Value, steps: &[Step], message: &str) -> Option<String> {
    let target = value_at(root, steps)?;
    match target {
        Value::Number(number) => {
            let shown = number.to_string();
            let figure = number.as_f64()?;
            let (clamped, range) = if message.ends_with("expected u64") {
                let clamped = if figure <= 0.0 {
                    0
                } else if figure >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    figure.floor() as u64
                };
                (Value::from(clamped), "a whole number from 0 up")
            } else if message.ends_with("expected i64") {
                let clamped = if figure <= i64::MIN as f64 {
                    i64::MIN
                } else if figure >= i64::MAX as f64 {
                    i64::MAX
                } else {
                    figure.trunc() as i64
                };
                (Value::from(clamped), "a whole number")
            } else {
                return None;
            };
            let problem = format!("{shown} is out of range (expected {range}); read as {clamped}");
            *target = clamped;
            Some(problem)
        }
        // An array item whose `type` this version does not know (a
        // content block or result part a newer version writes).
        Value::String(name)
            if message.starts_with(&format!("unknown variant `{name}`"))
                && matches!(steps, [.., Step::Index(_), Step::Key(key)] if key == "type") =>
        {
            let name = name.clone();
            let [parent_steps @ .., Step::Index(index), _] = steps else {
                return None;
            };
            let Value::Array(items) = value_at(root, parent_steps)? else {
                return None;
            };
            items.remove(*index);
            Some(format!(
                "unknown type {name:?} (written by a newer soba?); left out"
            ))
        }
        _ => None,
    }
}

pub(super) fn parse_id(field: &str, text: &str) -> Result<EntryId, FieldIssue> {
    EntryId::parse(text).map_err(|err| FieldIssue::new(field, err.to_string()))
}

/// Parses an optional id whose loss costs only itself: a bad one is left
/// out with an issue, and the entry kept.
pub(super) fn optional_id(
    field: &str,
    text: Option<&str>,
    issues: &mut Vec<FieldIssue>,
) -> Option<EntryId> {
    match parse_id(field, text?) {
        Ok(id) => Some(id),
        Err(problem) => {
            issues.push(FieldIssue {
                problem: format!("{}; left out", problem.problem),
                ..problem
            });
            None
        }
    }
}

pub(super) fn parse_name<T>(
    field: &str,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, FieldIssue> {
    parse(name).ok_or_else(|| FieldIssue::new(field, unknown_value(name)))
}

/// Says that an enum-valued field holds a name this version does not know.
pub(super) fn unknown_value(name: &str) -> String {
    format!("unknown value {name:?} (written by a newer soba?)")
}
