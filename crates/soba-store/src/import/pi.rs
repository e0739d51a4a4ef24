//! pi coding-agent session JSONL (FORMATS §1): the old flat layout (file
//! order) and the `version: 3` tree (the `parentId` chain from the last
//! entry).

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use soba_core::{
    Block, Image, ImageSource, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage,
};

use super::builder::Diagnostics;
use super::builder::{
    Context, KeptTarget, SessionBuilder, content_field, count_field, for_each_jsonl_scan,
    message_with, obj_field, odd_content, str_field, text_of, timestamp_field, timestamp_of,
    token_figure, tool_message, usage_figures,
};
use super::lines::Lines;
use super::tree::{Node, TreeKeys, branch, parsed_node, raw_node};
use super::{Format, ImportedSession};

/// Raw usage sums in pi's own names.
#[derive(Debug, Default)]
struct RawUsage {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    total_tokens: u64,
    cost: f64,
}

/// What the first pass keeps of a body line: its place in the tree.
struct Scanned {
    node: Node,
    /// Whether the line has both `id` and `parentId` (a tree file).
    tree_keys: bool,
}

/// Imports a pi session file (one session per file). The lines are read
/// twice: once for the header and the tree (ids and parents only), once
/// for the lines on the branch, converted one at a time.
pub(crate) fn import(lines: &Lines<'_>, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let mut diagnostics = Diagnostics::default();
    let mut header: Option<Map<String, Value>> = None;
    let mut scanned: Vec<Scanned> = Vec::new();
    // Damaged lines' ids and parents, read from their raw text.
    let mut damaged: Vec<Node> = Vec::new();
    for_each_jsonl_scan(
        lines,
        PI_SCAN,
        &mut diagnostics,
        |idx, line, top| match top {
            // The header is read whole; it scanned as an object, so it parses.
            Some(top) if header.is_none() && top.str("type") == Some("session") => {
                header = serde_json::from_str(line).ok();
            }
            Some(top) => scanned.push(Scanned {
                node: parsed_node(idx, &top, PI_TREE),
                tree_keys: top.has("id") && top.has("parentId"),
            }),
            None => damaged.extend(raw_node(idx, line, PI_TREE)),
        },
    );
    let header = header.ok_or_else(|| "no `session` header line".to_owned())?;
    let is_tree = count_field(&header, "version") >= 2
        || (header.contains_key("id") && header.contains_key("parentId"))
        || scanned.iter().any(|line| line.tree_keys);
    let format = if is_tree { Format::PiV3 } else { Format::PiV1 };

    let mut b = SessionBuilder::new(format, ctx, 0);
    b.diagnostics = diagnostics;
    if let Some(id) = str_field(&header, "id") {
        id.clone_into(&mut b.original_id);
    }
    b.cwd = str_field(&header, "cwd").map(str::to_owned);
    b.created_at = timestamp_field(&header, "timestamp");
    b.model = str_field(&header, "modelId").map(str::to_owned);

    let selected: Vec<usize> = if is_tree {
        branch_path(scanned, damaged, &mut b)
    } else {
        scanned.iter().map(|line| line.node.line_idx).collect()
    };

    let mut raw = RawUsage::default();
    // The first entry produced by each selected line, in order.
    let mut produced: Vec<(usize, usize)> = Vec::new();
    let mut id_line: HashMap<String, usize> = HashMap::new();
    lines.each_object_at(&selected, |line_idx, obj| {
        if let Some(id) = str_field(&obj, "id") {
            id_line.insert(id.to_owned(), line_idx);
        }
        let before = b.len();
        convert_line(line_idx, &obj, &mut b, &mut raw, &produced, &id_line);
        if b.len() > before {
            produced.push((line_idx, before));
        }
    });
    b.usage_raw = json!({
        "counting": "per-request",
        "input": raw.input,
        "output": raw.output,
        "cacheRead": raw.cache_read,
        "cacheWrite": raw.cache_write,
        "totalTokens": raw.total_tokens,
        "cost": raw.cost,
    });
    Ok(vec![b.finish()])
}

/// The top-level keys the first pass reads.
const PI_SCAN: &[&str] = &["type", "id", "parentId"];

/// The keys of pi's tree.
const PI_TREE: TreeKeys = TreeKeys {
    id: "id",
    parent: "parentId",
    logical_parent: None,
};

/// Returns the line indexes on the `parentId` chain from the last entry
/// with an id, root first (SPEC §3.4), bridged across `damaged` lines by
/// the shared tree walk. Lines without ids are kept in file order when no
/// line has one.
fn branch_path(scanned: Vec<Scanned>, damaged: Vec<Node>, b: &mut SessionBuilder) -> Vec<usize> {
    let n_body = scanned.len();
    // Nodes in file order: the parsed lines and the damaged ones.
    let mut nodes: Vec<(Node, bool)> = scanned
        .into_iter()
        .map(|line| (line.node, true))
        .chain(damaged.into_iter().map(|node| (node, false)))
        .collect();
    nodes.sort_by_key(|(node, _)| node.line_idx);
    let (nodes, parsed): (Vec<Node>, Vec<bool>) = nodes.into_iter().unzip();
    let mut keep: Vec<usize> = branch(&nodes, None, "parentId", &mut b.diagnostics)
        .into_iter()
        .filter(|&node_pos| parsed[node_pos])
        .map(|node_pos| nodes[node_pos].line_idx)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let off_branch = n_body - keep.len();
    if off_branch > 0 {
        b.diag(format!("{off_branch} entries off the current branch (parentId chain from the last entry) skipped"));
    }
    keep
}

fn convert_line(
    line_idx: usize,
    obj: &Map<String, Value>,
    b: &mut SessionBuilder,
    raw: &mut RawUsage,
    produced: &[(usize, usize)],
    id_line: &HashMap<String, usize>,
) {
    let line_no = line_idx + 1;
    let kind = str_field(obj, "type").unwrap_or("");
    let timestamp = timestamp_field(obj, "timestamp");
    match kind {
        "message" => {
            let Some(message) = obj_field(obj, "message") else {
                b.diag(format!(
                    "line {line_no}: message line without a `message` object skipped"
                ));
                return;
            };
            b.messages += 1;
            let timestamp = timestamp.or_else(|| message.get("timestamp").and_then(timestamp_of));
            convert_message(line_no, message, timestamp, b, raw);
        }
        "compaction" => {
            b.count_record("compaction");
            let summary = str_field(obj, "summary").unwrap_or_default().to_owned();
            let tokens_before = token_figure(
                obj,
                "tokensBefore",
                &format!("line {line_no}"),
                &mut b.diagnostics,
            );
            let (original_id, kept_line) = if let Some(kept_id) = str_field(obj, "firstKeptEntryId")
            {
                let own =
                    str_field(obj, "id").map_or_else(|| format!("line:{line_idx}"), str::to_owned);
                (own, id_line.get(kept_id).copied())
            } else if let Some(index) = obj.get("firstKeptEntryIndex").and_then(Value::as_u64) {
                (format!("line:{line_idx}"), usize::try_from(index).ok())
            } else {
                (format!("line:{line_idx}"), None)
            };
            let kept_entry = kept_line
                .and_then(|kept| produced.iter().find(|(line, _)| *line >= kept).map(|p| p.1));
            let idx = b.push_capsule(
                summary,
                original_id,
                tokens_before,
                timestamp,
                KeptTarget::Nothing,
            );
            match kept_entry {
                Some(entry) => b.set_kept(idx, KeptTarget::Entry(entry)),
                None => {
                    match kept_line {
                        None => b.diag(format!("line {line_no}: compaction records no first kept entry; it keeps nothing verbatim")),
                        Some(kept) => b.diag(format!("line {line_no}: compaction keeps from line {}, which gave no entry before it; it keeps nothing verbatim", kept + 1)),
                    }
                    b.set_kept(idx, KeptTarget::Nothing);
                }
            }
        }
        "model_change" => {
            b.count_record("model_change");
            let model = str_field(obj, "modelId")
                .or_else(|| str_field(obj, "model"))
                .unwrap_or_default();
            let model = match str_field(obj, "provider") {
                Some(provider) if !provider.is_empty() => format!("{provider}/{model}"),
                _ => model.to_owned(),
            };
            b.push_model_change(model, timestamp);
        }
        "custom_message" => {
            b.count_record("custom_message");
            let content = obj
                .get("content")
                .map(|content| user_blocks(content, b, line_no))
                .unwrap_or_default();
            b.push_message(
                message_with(Role::User, content, MessageOrigin::Injected),
                timestamp,
            );
        }
        "branch_summary" => {
            b.count_record("branch_summary");
            let summary = str_field(obj, "summary").unwrap_or_default().to_owned();
            b.push_message(
                message_with(
                    Role::User,
                    vec![Block::Text(summary)],
                    MessageOrigin::Summary,
                ),
                timestamp,
            );
        }
        "thinking_level_change" | "custom" | "label" | "session_info" => b.count_record(kind),
        "session" => {
            // The header was read on the first pass; another is damage
            // (two files joined, or a key written twice), said, not merged.
            b.count_record(kind);
            b.diag(format!(
                "line {line_no}: a second session header skipped (the first one describes the session)"
            ));
        }
        other => {
            b.count_record(other);
            b.diag(format!(
                "line {line_no}: unknown entry type {other:?} skipped"
            ));
        }
    }
}

fn convert_message(
    line_no: usize,
    message: &Map<String, Value>,
    timestamp: Option<String>,
    b: &mut SessionBuilder,
    raw: &mut RawUsage,
) {
    let role = str_field(message, "role").unwrap_or("");
    b.count_record(role);
    match role {
        "user" => {
            let at = format!("line {line_no}");
            let content = content_field(
                message,
                "content",
                &at,
                "message.content",
                &mut b.diagnostics,
            );
            let content = user_blocks(content, b, line_no);
            b.push_message(
                message_with(Role::User, content, MessageOrigin::Typed),
                timestamp,
            );
        }
        "assistant" => {
            let mut content = Vec::new();
            let at = format!("line {line_no}");
            let items = match message.get("content") {
                Some(Value::Array(items)) => items.as_slice(),
                Some(other) => {
                    content.extend(
                        odd_content(other, &at, "message.content", &mut b.diagnostics)
                            .map(Block::Text),
                    );
                    &[][..]
                }
                None => {
                    content_field(
                        message,
                        "content",
                        &at,
                        "message.content",
                        &mut b.diagnostics,
                    );
                    &[][..]
                }
            };
            for (block_idx, block) in items.iter().enumerate() {
                let Some(block) = block.as_object() else {
                    let field = format!("message.content[{block_idx}]");
                    content.extend(
                        odd_content(block, &at, &field, &mut b.diagnostics).map(Block::Text),
                    );
                    continue;
                };
                match str_field(block, "type") {
                    Some("text") => content.push(Block::Text(
                        str_field(block, "text").unwrap_or_default().to_owned(),
                    )),
                    Some("thinking") => content.push(Block::Thinking {
                        text: str_field(block, "thinking").unwrap_or_default().to_owned(),
                        signature: str_field(block, "thinkingSignature").map(str::to_owned),
                    }),
                    Some("toolCall") => content.push(Block::ToolUse(tool_call(block))),
                    other => b.diag(format!(
                        "line {line_no}: assistant block type {other:?} skipped"
                    )),
                }
            }
            let at = format!("line {line_no}");
            let usage = obj_field(message, "usage").and_then(|usage| {
                let [input, output, cache_read, cache_write, total_tokens] = usage_figures(
                    usage,
                    ["input", "output", "cacheRead", "cacheWrite", "totalTokens"],
                    &at,
                    &mut b.diagnostics,
                )?;
                raw.input = raw.input.saturating_add(input);
                raw.output = raw.output.saturating_add(output);
                raw.cache_read = raw.cache_read.saturating_add(cache_read);
                raw.cache_write = raw.cache_write.saturating_add(cache_write);
                raw.total_tokens = raw.total_tokens.saturating_add(total_tokens);
                if let Some(cost) = obj_field(usage, "cost")
                    .and_then(|c| c.get("total"))
                    .and_then(Value::as_f64)
                    && cost.is_finite()
                {
                    raw.cost += cost;
                }
                Some(Usage {
                    input,
                    cache_read,
                    cache_write,
                    output,
                    reasoning: 0,
                })
            });
            let model = str_field(message, "model").map(str::to_owned);
            let response_id = str_field(message, "responseId").map(str::to_owned);
            let idx = b.push_message(Message::new(Role::Assistant, content), timestamp.clone());
            b.push_inference(idx, usage, timestamp, model, response_id);
        }
        "toolResult" => {
            let id = str_field(message, "toolCallId")
                .unwrap_or_default()
                .to_owned();
            let at = format!("line {line_no}");
            let content = content_field(
                message,
                "content",
                &at,
                "message.content",
                &mut b.diagnostics,
            );
            let parts = result_parts(Some(content), line_no, &mut b.diagnostics);
            let is_error = message
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            b.push_message(tool_message(id, parts, is_error), timestamp);
        }
        "bashExecution" => {
            if message.get("excludeFromContext").and_then(Value::as_bool) == Some(true) {
                return;
            }
            let command = str_field(message, "command").unwrap_or_default();
            let output = str_field(message, "output").unwrap_or_default();
            let mut text = format!("$ {command}\n{output}");
            if message.get("cancelled").and_then(Value::as_bool) == Some(true) {
                text.push_str("\n(cancelled)");
            } else if let Some(code) = message.get("exitCode").and_then(Value::as_i64)
                && code != 0
            {
                text.push_str(&format!("\n(exit code {code})"));
            }
            b.push_message(Message::user(text), timestamp);
        }
        "custom" | "hookMessage" => {
            let content = message
                .get("content")
                .map(|c| user_blocks(c, b, line_no))
                .unwrap_or_default();
            b.push_message(
                message_with(Role::User, content, MessageOrigin::Injected),
                timestamp,
            );
        }
        "branchSummary" | "compactionSummary" => {
            let summary = str_field(message, "summary").map_or_else(
                || text_of(message.get("content").unwrap_or(&Value::Null)),
                str::to_owned,
            );
            b.push_message(
                message_with(
                    Role::User,
                    vec![Block::Text(summary)],
                    MessageOrigin::Summary,
                ),
                timestamp,
            );
        }
        other => b.diag(format!("line {line_no}: message role {other:?} skipped")),
    }
}

/// Converts a pi `toolCall` block. `partialJson` (the streamed text of an
/// aborted call) is kept as the raw text, and parsed when the arguments are
/// empty.
fn tool_call(block: &Map<String, Value>) -> ToolUse {
    let arguments = block.get("arguments").cloned().unwrap_or(Value::Null);
    let input = match (arguments, str_field(block, "partialJson")) {
        (Value::Object(map), Some(partial)) if !map.is_empty() => {
            ToolInput::with_raw(map, Some(partial.to_owned()))
        }
        (Value::Object(map), None) if !map.is_empty() => ToolInput::from_value(Value::Object(map)),
        (_, Some(partial)) => ToolInput::from_json_text(partial),
        (Value::String(text), None) => ToolInput::from_json_text(&text),
        (Value::Null, None) => ToolInput::empty(),
        (other, None) => ToolInput::from_value(other),
    };
    ToolUse {
        id: str_field(block, "id").unwrap_or_default().to_owned(),
        name: str_field(block, "name").unwrap_or_default().to_owned(),
        input,
    }
}

/// Converts user content (a string or text/image blocks).
fn user_blocks(content: &Value, b: &mut SessionBuilder, line_no: usize) -> Vec<Block> {
    let at = format!("line {line_no}");
    match content {
        Value::String(text) => vec![Block::Text(text.clone())],
        Value::Array(blocks) => blocks
            .iter()
            .enumerate()
            .filter_map(|(idx, block)| {
                let Some(block) = block.as_object() else {
                    let field = format!("content[{idx}]");
                    return odd_content(block, &at, &field, &mut b.diagnostics).map(Block::Text);
                };
                match str_field(block, "type") {
                    Some("text") => Some(Block::Text(
                        str_field(block, "text").unwrap_or_default().to_owned(),
                    )),
                    Some("image") => Some(Block::Image(pi_image(block))),
                    other => {
                        b.diag(format!(
                            "line {line_no}: content block type {other:?} skipped"
                        ));
                        None
                    }
                }
            })
            .collect(),
        other => odd_content(other, &at, "content", &mut b.diagnostics)
            .map(Block::Text)
            .into_iter()
            .collect(),
    }
}

fn pi_image(block: &Map<String, Value>) -> Image {
    Image {
        media_type: str_field(block, "mimeType")
            .unwrap_or("image/png")
            .to_owned(),
        source: ImageSource::Data(str_field(block, "data").unwrap_or_default().to_owned()),
    }
}

/// Converts tool-result content (text and image blocks, or a string).
fn result_parts(
    content: Option<&Value>,
    line_no: usize,
    diagnostics: &mut Diagnostics,
) -> Vec<ResultPart> {
    let at = format!("line {line_no}");
    match content {
        None => Vec::new(),
        Some(Value::String(text)) => vec![ResultPart::Text(text.clone())],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .filter_map(|(idx, block)| {
                let Some(block) = block.as_object() else {
                    let field = format!("message.content[{idx}]");
                    return odd_content(block, &at, &field, diagnostics).map(ResultPart::Text);
                };
                match str_field(block, "type") {
                    Some("image") => Some(ResultPart::Image(pi_image(block))),
                    _ => str_field(block, "text").map(|text| ResultPart::Text(text.to_owned())),
                }
            })
            .collect(),
        Some(other) => odd_content(other, &at, "message.content", diagnostics)
            .map(ResultPart::Text)
            .into_iter()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use soba_core::EntryBody;

    use super::*;

    fn run(text: &str) -> ImportedSession {
        let ctx = Context {
            source: PathBuf::from("t.jsonl"),
            fallback_ms: 0,
        };
        let mut sessions = import(&Lines::Text(text), &ctx).expect("imports");
        sessions.remove(0)
    }

    const FLAT: &str = r#"{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w","provider":"anthropic","modelId":"m1"}
{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":"fix it"}],"timestamp":1}}
{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hm","thinkingSignature":"sig"},{"type":"toolCall","id":"t1","name":"bash","arguments":{"command":"ls"}},{"type":"toolCall","id":"t2","name":"edit","arguments":{},"partialJson":"{\"path\":\"a."}],"model":"m1","usage":{"input":3,"output":5,"cacheRead":100,"cacheWrite":20,"cost":{"total":0.5}},"stopReason":"toolUse"}}
not json
{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"toolResult","toolCallId":"t1","toolName":"bash","content":[{"type":"text","text":"a.rs"}],"isError":false}}
{"type":"thinking_level_change","timestamp":"2025-01-01T00:00:04.000Z","thinkingLevel":"high"}
{"type":"compaction","timestamp":"2025-01-01T00:00:05.000Z","summary":"did stuff","tokensBefore":900,"firstKeptEntryIndex":4}
{"type":"message","timestamp":"2025-01-01T00:00:06.000Z","message":{"role":"bashExecution","command":"ls","output":"a.rs\n","exitCode":2,"cancelled":false}}
{"type":"model_change","timestamp":"2025-01-01T00:00:07.000Z","provider":"openai","modelId":"gpt"}
"#;

    #[test]
    fn flat_session() {
        let s = run(FLAT);
        assert_eq!(s.format, Format::PiV1);
        assert_eq!(s.original_id, "s1");
        assert_eq!(s.stats.messages, 4);
        assert_eq!(s.stats.tool_calls, 2);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.stats.compactions, 1);
        assert_eq!(s.stats.peak_prompt_tokens, Some(123));
        assert_eq!(s.stats.usage_raw["cacheRead"], 100);
        assert!(
            s.stats.diagnostics.iter().any(|d| d.starts_with("line 4:")),
            "{:?}",
            s.stats.diagnostics
        );
        assert_eq!(s.inferences.len(), 1);
        assert_eq!(s.inferences[0].usage.map(|u| u.prompt()), Some(123));
        // The capsule keeps from line index 4 (the tool result).
        let EntryBody::Capsule(capsule) = &s.entries[3].body else {
            panic!("capsule expected")
        };
        assert_eq!(capsule.first_kept_entry_id.as_ref(), Some(&s.entries[2].id));
        assert_eq!(capsule.markdown, "did stuff");
        assert_eq!(capsule.tokens_before.get(), 900);
        let EntryBody::Message(bash) = &s.entries[4].body else {
            panic!("message expected")
        };
        assert_eq!(bash.message.text(), "$ ls\na.rs\n\n(exit code 2)");
        assert!(bash.message.is_real_user());
        assert!(
            matches!(&s.entries[5].body, EntryBody::ModelChange { model } if model == "openai/gpt")
        );
        let EntryBody::Message(assistant) = &s.entries[1].body else {
            panic!("message expected")
        };
        let partial = assistant.message.tool_uses().nth(1).expect("second call");
        assert_eq!(partial.input.raw(), Some("{\"path\":\"a."));
    }

    #[test]
    fn tree_follows_parent_chain_from_last_entry() {
        let text = r#"{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00Z"}
{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01Z","message":{"role":"user","content":"first"}}
{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02Z","message":{"role":"user","content":"abandoned"}}
{"type":"message","id":"c","parentId":"a","timestamp":"2025-01-01T00:00:03Z","message":{"role":"user","content":"kept"}}
{"type":"compaction","id":"d","parentId":"c","timestamp":"2025-01-01T00:00:04Z","summary":"S","firstKeptEntryId":"c","tokensBefore":5}
{"type":"custom_message","id":"e","parentId":"d","timestamp":"2025-01-01T00:00:05Z","content":"ext"}
"#;
        let s = run(text);
        assert_eq!(s.format, Format::PiV3);
        let texts: Vec<String> = s
            .entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::Message(m) => Some(m.message.text()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["first", "kept", "ext"]);
        let EntryBody::Capsule(capsule) = &s.entries[2].body else {
            panic!("capsule expected")
        };
        assert_eq!(capsule.first_kept_entry_id.as_ref(), Some(&s.entries[1].id));
        assert_eq!(
            capsule.imported.as_ref().map(|i| i.original_id.as_str()),
            Some("d")
        );
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.contains("1 entries off the current branch"))
        );
        let EntryBody::Message(ext) = &s.entries[3].body else {
            panic!("message expected")
        };
        assert!(!ext.message.is_real_user());
    }

    #[test]
    fn missing_header_is_an_error() {
        let ctx = Context {
            source: PathBuf::from("t.jsonl"),
            fallback_ms: 0,
        };
        assert!(import(&Lines::Text("{\"type\":\"message\"}\n"), &ctx).is_err());
    }
}
