//! Tool calls written as text. Small local models (and many served through
//! Ollama or llama.cpp) answer with `{"name": …, "arguments": …}` in a fenced
//! block, in `<tool_call>` tags or as the whole reply instead of a native
//! tool call. [`parse`] finds exactly one well-formed call of a declared
//! tool in such a reply; anything else — no call, two calls, an undeclared
//! tool, arguments that are not an object, broken JSON — leaves the reply as
//! text. Hosts turn it on per model (`models."<id>".toolCallsInText`).

use std::ops::Range;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

/// One call found in an assistant's text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCall {
    /// The declared tool's name.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Map<String, Value>,
    /// The reply without the call's block, trimmed: what the model said
    /// around it.
    pub remaining_text: String,
}

/// More blocks than this in one reply: not one call.
const MAX_BLOCKS: usize = 64;

fn tagged() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?s)<tool_call>(.*?)</tool_call>").expect("literal regex"))
}

fn fenced() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // A fence of three or more backticks, an optional info string, the
    // body, and the same fence closing it on its own line.
    RE.get_or_init(|| {
        Regex::new(r"(?s)```[A-Za-z0-9_+-]*[ \t]*\r?\n(.*?)\r?\n[ \t]*```").expect("literal regex")
    })
}

/// Finds the one tool call in `text`, if there is exactly one and it names
/// a tool in `declared`; see the module docs.
pub fn parse(text: &str, declared: &[&str]) -> Option<TextCall> {
    // Every block a call may be written in, as (the block's byte range, its
    // content's range). A reply with more blocks than anyone writes around
    // one call is not one call: stop reading (this also keeps the work
    // linear in the reply).
    let mut found: Vec<(Range<usize>, Range<usize>)> = Vec::new();
    for regex in [tagged(), fenced()] {
        for captures in regex.captures_iter(text) {
            if let (Some(whole), Some(inner)) = (captures.get(0), captures.get(1)) {
                found.push((whole.range(), inner.range()));
                if found.len() > MAX_BLOCKS {
                    return None;
                }
            }
        }
    }
    let inside = |outer: &Range<usize>, inner: &Range<usize>| {
        outer != inner && outer.start <= inner.start && inner.end <= outer.end
    };
    // The JSON is the innermost block's (tags inside a fence); the range
    // removed from the reply is the outermost block around it.
    let mut blocks: Vec<(Range<usize>, &str)> = Vec::new();
    for (range, content) in &found {
        if found.iter().any(|(other, _)| inside(content, other)) {
            continue;
        }
        let outermost = found
            .iter()
            .filter(|(other, _)| inside(other, range))
            .map(|(other, _)| other.clone())
            .max_by_key(|other| other.len())
            .unwrap_or_else(|| range.clone());
        blocks.push((outermost, &text[content.clone()]));
    }
    if blocks.is_empty() {
        let whole = text.trim();
        if whole.starts_with('{') {
            let start = text.len() - text.trim_start().len();
            blocks.push((start..start + whole.len(), whole));
        }
    }
    let mut calls = blocks.into_iter().filter_map(|(range, inner)| {
        let (name, arguments) = call_of(inner.trim(), declared)?;
        Some((range, name, arguments))
    });
    let (range, name, arguments) = calls.next()?;
    if calls.next().is_some() {
        return None;
    }
    let remaining_text = format!("{}{}", &text[..range.start], &text[range.end..])
        .trim()
        .to_owned();
    Some(TextCall {
        name,
        arguments,
        remaining_text,
    })
}

/// Reads `{"name", "arguments"|"parameters"}` or the OpenAI shape
/// `{"type": "function", "function": {"name", "arguments"}}`; arguments may
/// be an object or a string holding one.
fn call_of(json: &str, declared: &[&str]) -> Option<(String, Map<String, Value>)> {
    let value: Value = serde_json::from_str(json).ok()?;
    let object = value.as_object()?;
    let call = match object.get("function") {
        Some(Value::Object(function)) => function,
        _ => object,
    };
    let name = call.get("name")?.as_str()?;
    if !declared.contains(&name) {
        return None;
    }
    let arguments = match call.get("arguments").or_else(|| call.get("parameters")) {
        None => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(Value::String(text)) => match serde_json::from_str(text).ok()? {
            Value::Object(arguments) => arguments,
            _ => return None,
        },
        Some(_) => return None,
    };
    // Anything besides the name and its arguments is not a call shape we
    // know (a JSON answer that happens to have a "name" field).
    let known = ["name", "arguments", "parameters", "type", "id"];
    if call.keys().any(|key| !known.contains(&key.as_str())) {
        return None;
    }
    Some((name.to_owned(), arguments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOOLS: &[&str] = &["read_file", "bash"];

    fn call(text: &str) -> Option<(String, Value, String)> {
        parse(text, TOOLS).map(|call| {
            (
                call.name,
                Value::Object(call.arguments),
                call.remaining_text,
            )
        })
    }

    #[test]
    fn the_shapes_small_models_write_are_read() {
        let expected = Some((
            "read_file".to_owned(),
            json!({"path": "src/lib.rs"}),
            "Let me look.".to_owned(),
        ));
        assert_eq!(
            call(
                "Let me look.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/lib.rs\"}}\n```"
            ),
            expected
        );
        assert_eq!(
            call(
                "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/lib.rs\"}}\n</tool_call>"
            ),
            expected
        );
        assert_eq!(
            call(
                "Let me look. ```\n{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"src/lib.rs\\\"}\"}}\n```"
            ),
            expected
        );
        assert_eq!(
            call("  {\"name\": \"bash\", \"parameters\": {\"command\": \"ls\"}}\n"),
            Some(("bash".to_owned(), json!({"command": "ls"}), String::new()))
        );
        assert_eq!(
            call(
                "```json\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>\n```"
            ),
            Some(("bash".to_owned(), json!({"command": "ls"}), String::new())),
            "tags inside a fence are one call"
        );
    }

    #[test]
    fn anything_ambiguous_stays_text() {
        for text in [
            "no call here",
            "```json\n{\"name\": \"rm_rf\", \"arguments\": {}}\n```",
            "```json\n{\"name\": \"bash\", \"arguments\": [\"ls\"]}\n```",
            "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}\n```",
            "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```\nthen\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```",
            "```json\n{\"name\": \"bash\", \"version\": \"1.0\"}\n```",
            "The config is {\"name\": \"bash\"} and more",
            "```python\nprint({\"name\": \"bash\"})\n```",
            "<tool_call>{\"name\": \"bash\", \"arguments\": \"not json\"}</tool_call>",
            // Two calls in one fence: ambiguous, neither runs.
            "```\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</tool_call>\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"x\"}}</tool_call>\n```",
        ] {
            assert_eq!(call(text), None, "{text}");
        }
    }

    #[test]
    fn a_reply_of_many_blocks_is_not_a_call() {
        let mut text = "<tool_call>x</tool_call>".repeat(100_000);
        text.push_str(
            "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>",
        );
        assert_eq!(call(&text), None);
    }

    #[test]
    fn a_call_among_other_code_blocks_is_found() {
        let text = "Here is the plan:\n```sh\nls -la\n```\n```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la\"}}\n```";
        assert_eq!(
            call(text),
            Some((
                "bash".to_owned(),
                json!({"command": "ls -la"}),
                "Here is the plan:\n```sh\nls -la\n```".to_owned()
            ))
        );
    }
}
