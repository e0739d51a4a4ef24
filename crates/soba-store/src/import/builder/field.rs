//! Field helpers every importer reads its source through: usage figures
//! (`usage_figures`, `token_figure`), timestamps, counts, text and odd
//! content, images, and the JSON and JSONL document walks.

use super::*;

/// Parses an RFC 3339 text (as normalised by [`timestamp_of`]) to Unix ms.
pub(crate) fn timestamp_ms(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .map(jiff::Timestamp::as_millisecond)
}

/// Formats Unix milliseconds as RFC 3339 UTC.
pub(crate) fn format_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|ts| ts.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Normalises a source timestamp to RFC 3339 UTC: an RFC 3339 string (kept
/// verbatim when already UTC), a naive ISO date-time (taken as UTC, as
/// OpenHands writes them), or a number of Unix milliseconds (seconds when
/// small). Anything else gives `None`.
pub(crate) fn timestamp_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => {
            let text = text.trim();
            if let Ok(ts) = text.parse::<jiff::Timestamp>() {
                if text.ends_with('Z') && !text.contains(' ') {
                    return Some(text.to_owned());
                }
                return Some(ts.to_string());
            }
            let civil = text.parse::<jiff::civil::DateTime>().ok()?;
            let zoned = civil.to_zoned_datetime(jiff::tz::TimeZone::UTC).ok()?;
            Some(zoned.timestamp().to_string())
        }
        Value::Number(number) => {
            let raw = number.as_f64()?;
            if !raw.is_finite() {
                return None;
            }
            // Numbers below 1e11 are seconds (1e11 ms is 1973; 1e11 s is year 5138).
            let ms = if raw.abs() < 1e11 { raw * 1000.0 } else { raw };
            if ms.abs() > 8.0e15 {
                return None;
            }
            jiff::Timestamp::from_millisecond(ms as i64)
                .ok()
                .map(|ts| ts.to_string())
        }
        _ => None,
    }
}

/// Returns `obj[key]` normalised as a timestamp.
pub(crate) fn timestamp_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(timestamp_of)
}

/// Reads a non-negative count: an integer, a non-negative float (truncated)
/// or a numeric string. Anything else gives `None`.
pub(crate) fn count_of(value: &Value) -> Option<u64> {
    match value {
        Value::Number(number) => number.as_u64().or_else(|| {
            let float = number.as_f64()?;
            (float.is_finite() && float >= 0.0).then(|| float.min(u64::MAX as f64) as u64)
        }),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// Reads `obj[key]` as a count, zero when absent or not a count.
pub(crate) fn count_field(obj: &Map<String, Value>, key: &str) -> u64 {
    obj.get(key).and_then(count_of).unwrap_or(0)
}

/// The largest usage figure one request can plausibly record: 10^12
/// tokens, far beyond any context window or output limit. A larger figure
/// (`u64::MAX`, a counter that wrapped, a timestamp in the wrong field) is
/// implausible and rejected like a negative one.
pub(crate) const MAX_PLAUSIBLE_TOKENS: u64 = 1_000_000_000_000;

/// Reads usage figures — the one usage parser of every importer. Each of
/// `keys` (a dotted path into `usage`, e.g.
/// `prompt_tokens_details.cached_tokens`) must be absent, `null`, a
/// non-negative integer of at most [`MAX_PLAUSIBLE_TOKENS`] or a string of
/// such digits (read as 0 when absent). Any other value (negative,
/// fractional, implausibly large, not a number) gets a diagnostic naming
/// `at` and the field, and the whole
/// usage object is rejected (`None`): a guessed figure would mislead
/// calibration, so that inference records no usage.
pub(crate) fn usage_figures<const N: usize>(
    usage: &Map<String, Value>,
    keys: [&str; N],
    at: &str,
    diagnostics: &mut Diagnostics,
) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    let mut valid = true;
    for (slot, key) in out.iter_mut().zip(keys) {
        let mut field: Option<&Value> = None;
        let mut parent = Some(usage);
        for part in key.split('.') {
            field = parent.and_then(|obj| obj.get(part));
            parent = field.and_then(Value::as_object);
        }
        match figure_of(field) {
            Ok(n) => *slot = n,
            Err(why) => {
                valid = false;
                let shown = field.map(Value::to_string).unwrap_or_default();
                let shown: String = shown.chars().take(40).collect();
                diagnostics.push(format!(
                    "{at}: usage field `{key}` is {shown} ({why}); this usage is not recorded and is kept out of calibration"
                ));
            }
        }
    }
    valid.then_some(out)
}

/// Reads `obj[key]`, a token figure a transcript records beside its usage
/// (a compaction's tokens before it), as [`usage_figures`] reads one: a
/// value that is not a plausible count is read as 0 with a diagnostic
/// naming `at`, the key and the value.
pub(crate) fn token_figure(
    obj: &Map<String, Value>,
    key: &str,
    at: &str,
    diagnostics: &mut Diagnostics,
) -> u64 {
    let field = obj.get(key);
    figure_of(field).unwrap_or_else(|why| {
        let shown: String = field
            .map(Value::to_string)
            .unwrap_or_default()
            .chars()
            .take(40)
            .collect();
        diagnostics.push(format!("{at}: `{key}` is {shown} ({why}); read as 0"));
        0
    })
}

/// Reads one usage figure; the error says what is wrong with it.
fn figure_of(value: Option<&Value>) -> Result<u64, &'static str> {
    let figure = raw_figure_of(value)?;
    if figure > MAX_PLAUSIBLE_TOKENS {
        return Err("implausible: more than 10^12 tokens for one request");
    }
    Ok(figure)
}

/// Reads one usage figure as a 64-bit count, before the plausibility check.
fn raw_figure_of(value: Option<&Value>) -> Result<u64, &'static str> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(number)) => {
            if let Some(n) = number.as_u64() {
                Ok(n)
            } else if number.as_i64().is_some() {
                Err("negative")
            } else {
                match number.as_f64() {
                    Some(float) if float < 0.0 => Err("negative"),
                    Some(float) if float.fract() == 0.0 && float >= u64::MAX as f64 => {
                        Err("larger than a 64-bit count")
                    }
                    _ => Err("not a whole number"),
                }
            }
        }
        Some(Value::String(text)) => {
            let text = text.trim();
            if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
                Err("not a number")
            } else {
                text.parse().map_err(|_| "larger than a 64-bit count")
            }
        }
        Some(_) => Err("not a number"),
    }
}

/// Returns the text kept from a content field of unexpected shape — the
/// one helper of every importer for content that is neither text nor a
/// list of parts: `null` gives nothing; an object gives its `text` when it
/// has one, else its JSON; a number or boolean gives its JSON. Every case
/// but a plain string records a diagnostic naming `at` and `field` (a
/// `null` too: an empty message must not pass unnoticed; where the source
/// format allows `null`, such as an OpenAI assistant message that only
/// makes tool calls, the caller does not pass it here).
pub(crate) fn odd_content(
    value: &Value,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> Option<String> {
    let (kind, kept) = match value {
        Value::Null => {
            diagnostics.push(format!(
                "{at}: `{field}` is null, not text or a list of content blocks; kept as empty content"
            ));
            return None;
        }
        Value::String(text) => return Some(text.clone()),
        Value::Object(obj) => match str_field(obj, "text") {
            Some(text) => ("an object", Some((text.to_owned(), "its `text`"))),
            None => ("an object", None),
        },
        Value::Number(_) => ("a number", None),
        Value::Bool(_) => ("a boolean", None),
        Value::Array(_) => ("a list", None),
    };
    let (text, how) = kept.unwrap_or_else(|| (value.to_string(), "its JSON as text"));
    diagnostics.push(format!(
        "{at}: `{field}` is {kind}, not text or a list of content blocks; kept {how}"
    ));
    Some(text)
}

/// Empty content, for a content field that is missing.
static NO_CONTENT: Value = Value::String(String::new());

/// Returns `obj[key]`, the content field of a message that must have one;
/// a missing field gets a diagnostic naming `at` and `field` and reads as
/// empty content (a `null` is reported later by [`odd_content`]).
pub(crate) fn content_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> &'a Value {
    match obj.get(key) {
        Some(value) => value,
        None => {
            diagnostics.push(format!(
                "{at}: the message has no `{field}`; kept as empty content"
            ));
            &NO_CONTENT
        }
    }
}

/// Returns the text of a content value as [`text_of`] does, except that
/// content of unexpected shape (see [`odd_content`]), and list items that
/// are neither strings nor objects, are kept with a diagnostic instead of
/// becoming empty.
pub(crate) fn content_text(
    value: &Value,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> String {
    match value {
        Value::Array(parts) => {
            let mut texts: Vec<String> = Vec::new();
            for (idx, part) in parts.iter().enumerate() {
                match part {
                    Value::String(text) => texts.push(text.clone()),
                    Value::Object(obj) => {
                        if let Some(text) = str_field(obj, "text") {
                            texts.push(text.to_owned());
                        }
                    }
                    other => texts.extend(odd_content(
                        other,
                        at,
                        &format!("{field}[{idx}]"),
                        diagnostics,
                    )),
                }
            }
            texts.join("\n")
        }
        other => odd_content(other, at, field, diagnostics).unwrap_or_default(),
    }
}

/// Returns `obj[key]` as a string slice.
pub(crate) fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

/// Returns `obj[key]` as an object.
pub(crate) fn obj_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Option<&'a Map<String, Value>> {
    obj.get(key).and_then(Value::as_object)
}

/// Returns `obj[key]` as an array (empty when absent).
pub(crate) fn array_field<'a>(obj: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    obj.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Returns the text of a content value: a string, or the `text` of every
/// text-like part of an array joined by newlines.
pub(crate) fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|part| match part {
                    Value::String(text) => Some(text.as_str()),
                    Value::Object(obj) => str_field(obj, "text"),
                    _ => None,
                })
                .collect();
            texts.join("\n")
        }
        Value::Object(obj) => str_field(obj, "text").unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

/// Returns the image a `data:<mime>;base64,<data>` URI or plain URL names.
pub(crate) fn image_from_url(url: &str) -> Image {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media_type, data)) = rest.split_once(";base64,")
    {
        return Image {
            media_type: media_type.to_owned(),
            source: ImageSource::Data(data.to_owned()),
        };
    }
    Image {
        media_type: guess_media_type(url).to_owned(),
        source: ImageSource::Url(url.to_owned()),
    }
}

/// Guesses a media type from a URL's extension (PNG when unknown).
fn guess_media_type(url: &str) -> &'static str {
    let lower = url.to_ascii_lowercase();
    if lower.ends_with(".jpg") || lower.ends_with(".jpeg") {
        "image/jpeg"
    } else if lower.ends_with(".gif") {
        "image/gif"
    } else if lower.ends_with(".webp") {
        "image/webp"
    } else {
        "image/png"
    }
}

/// Builds a message with an origin.
pub(crate) fn message_with(role: Role, content: Vec<Block>, origin: MessageOrigin) -> Message {
    let mut message = Message::new(role, content);
    message.origin = origin;
    message
}

/// Builds a `tool` message with one result.
pub(crate) fn tool_message(
    tool_use_id: String,
    content: Vec<ResultPart>,
    is_error: bool,
) -> Message {
    Message::new(
        Role::Tool,
        vec![Block::ToolResult(soba_core::ToolResult {
            tool_use_id,
            content,
            is_error,
        })],
    )
}

/// Returns whether `text` is an agent-written interruption marker
/// (`[Request interrupted by user…]`, `<turn_aborted>`).
pub(crate) fn is_interrupt_marker(text: &str) -> bool {
    let text = text.trim_start();
    text.starts_with("[Request interrupted by user") || text.starts_with("<turn_aborted>")
}

/// Parses a whole-document JSON transcript (SWE-agent, Gemini CLI, the
/// openai-chat export, Codex `{messages, meta}`) into its top-level object;
/// a document that ends early says so, with where it ends.
pub(crate) fn parse_document(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(doc)) => Ok(doc),
        Ok(_) => Err("the file is not a JSON object".into()),
        Err(err) if err.is_eof() => Err(format!(
            "the JSON document ends early at byte {} (truncated?): re-copy it",
            text.len()
        )),
        Err(err) => Err(format!("invalid JSON: {err}")),
    }
}

/// Parses JSONL lines, calling `each(line_idx, object)` for every line that
/// is a JSON object and recording a diagnostic for every other non-blank
/// line. Line indexes are 0-based; diagnostics say "line N" 1-based.
pub(crate) fn for_each_jsonl_object(
    lines: &Lines<'_>,
    diagnostics: &mut Diagnostics,
    mut each: impl FnMut(usize, Map<String, Value>),
) {
    for_each_jsonl_line(lines, diagnostics, |line_idx, line| {
        if let Ok(obj) = line {
            each(line_idx, obj);
        }
    });
}

/// Parses JSONL lines as [`for_each_jsonl_object`] does, also handing
/// `each` the raw text of every line that is not a JSON object (after its
/// diagnostic), so tree-shaped importers can still read its ids.
pub(crate) fn for_each_jsonl_line(
    lines: &Lines<'_>,
    diagnostics: &mut Diagnostics,
    mut each: impl FnMut(usize, Result<Map<String, Value>, &str>),
) {
    lines.each_line(|line_idx, line| {
        if let Some(parsed) = jsonl_line(line_idx, line, diagnostics) {
            each(line_idx, parsed);
        }
        true
    });
}

/// Reads JSONL lines for a first pass, which needs only a few top-level
/// keys (see [`super::scan`]): calls `each(line_idx, line, scanned)` for
/// every non-blank line, trimmed, with the `keys` values of a line that is
/// a JSON object, or `None` after the diagnostic [`jsonl_line`] gives a
/// line that is not.
pub(crate) fn for_each_jsonl_scan(
    lines: &Lines<'_>,
    keys: &'static [&'static str],
    diagnostics: &mut Diagnostics,
    mut each: impl FnMut(usize, &str, Option<TopLevel>),
) {
    lines.each_line(|line_idx, line| {
        let line = line.trim();
        if line.is_empty() {
            return true;
        }
        let scanned = match scan_line(line, keys) {
            Ok(Scan::Object(top)) => Some(top),
            Ok(Scan::NotObject) => {
                diagnostics.push(not_an_object(line_idx));
                None
            }
            Err(err) => {
                diagnostics.push(malformed(line_idx, &err));
                None
            }
        };
        each(line_idx, line, scanned);
        true
    });
}

/// Parses one JSONL line (0-based `line_idx`): `None` when it is blank,
/// else the object, or the trimmed text of a line that is not a JSON
/// object after a diagnostic naming it. For importers that note things
/// about the lines themselves, so all notes come in line order.
pub(crate) fn jsonl_line<'a>(
    line_idx: usize,
    line: &'a str,
    diagnostics: &mut Diagnostics,
) -> Option<Result<Map<String, Value>, &'a str>> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(_) => {
            diagnostics.push(not_an_object(line_idx));
            Err(line)
        }
        Err(err) => {
            diagnostics.push(malformed(line_idx, &err));
            Err(line)
        }
    })
}

/// The diagnostic of a JSONL line (0-based) that is JSON but no object.
fn not_an_object(line_idx: usize) -> String {
    format!("line {}: skipped: not a JSON object", line_idx + 1)
}

/// The diagnostic of a JSONL line (0-based) that is not JSON.
fn malformed(line_idx: usize, err: &serde_json::Error) -> String {
    format!("line {}: skipped malformed JSON: {err}", line_idx + 1)
}
