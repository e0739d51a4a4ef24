//! Claude Code sessions: the native JSONL of `~/.claude/projects` and its
//! stream-json variant (FORMATS §7a), and the "openai-chat" JSON export
//! (FORMATS §5).
//!
//! Native lines of one API response share `message.id` and are merged into
//! one assistant entry, with usage counted once per id (from the id's last
//! line). The export's consecutive assistant messages are merged the same
//! way. A compaction (`compact_boundary` plus the summary message) becomes
//! an imported capsule followed by the summary as a `user` message with
//! origin `Summary`; the capsule keeps from the entry after the summary.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};
use soba_core::{
    Block, Image, ImageSource, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage,
};

use super::builder::Diagnostics;
use super::builder::{
    Context, KeptTarget, SessionBuilder, content_field, content_text, count_field,
    for_each_jsonl_scan, image_from_url, is_interrupt_marker, message_with, obj_field, odd_content,
    parse_document, str_field, text_of, timestamp_field, token_figure, tool_message, usage_figures,
};
use super::lines::Lines;
use super::scan::{Top, TopLevel};
use super::swe_agent::openai_tool_call;
use super::tree::{
    Join, Node, Parent, TreeKeys, attached, branch, parsed_node, raw_flag, raw_node,
};
use super::{BilledResponse, Format, ImportedSession};

/// The prefix of the export's compaction marker.
const COMPACT_MARKER: &str = "[compact_boundary]";

/// A compaction seen whose summary message has not arrived yet.
#[derive(Debug)]
struct PendingBoundary {
    original_id: String,
    timestamp: Option<String>,
    tokens_before: u64,
}

impl PendingBoundary {
    /// Pushes the capsule carrying the summary (stored once: the capsule is
    /// what the model sees for it). Claude Code's compaction keeps nothing
    /// of the earlier conversation verbatim, so the capsule keeps nothing
    /// before it; the entries after it follow verbatim.
    fn close(self, summary: Option<(Message, Option<String>)>, b: &mut SessionBuilder) {
        let text = summary
            .as_ref()
            .map(|(message, _)| message.text())
            .unwrap_or_default();
        let capsule = b.push_capsule(
            text,
            self.original_id,
            self.tokens_before,
            self.timestamp,
            KeptTarget::Nothing,
        );
        if summary.is_none() {
            b.diag(format!(
                "entry {capsule}: compaction marker without a summary message; the capsule's summary is empty"
            ));
        }
    }
}

// ---------------------------------------------------------------------------
// Native JSONL

/// Imports a native Claude Code session file (or stream-json output).
///
/// The lines are read twice: once for the tree (ids, parents, which lines
/// are conversational), once for the lines on the branch, converted one at
/// a time.
pub(crate) fn import_native(
    lines: &Lines<'_>,
    ctx: &Context,
) -> Result<Vec<ImportedSession>, String> {
    let mut b = SessionBuilder::new(Format::ClaudeCode, ctx, 0);
    let mut scanned: Vec<Scanned> = Vec::new();
    // Damaged main-chain lines' ids and parents, read from their raw text.
    let mut damaged: Vec<Node> = Vec::new();
    let mut sidechain = 0usize;
    // Every assistant line, on the branch or not: what was billed.
    let mut assistant_lines: Vec<usize> = Vec::new();
    for_each_jsonl_scan(
        lines,
        CLAUDE_SCAN,
        &mut b.diagnostics,
        |idx, line, top| match top {
            Some(top) => {
                if top.str("type") == Some("assistant") {
                    assistant_lines.push(idx);
                }
                let line = Scanned::of(idx, &top);
                sidechain += usize::from(line.sidechain);
                scanned.push(line);
            }
            None => {
                if raw_flag(line, "isSidechain") {
                    sidechain += 1;
                } else {
                    damaged.extend(raw_node(idx, line, CLAUDE_TREE));
                }
            }
        },
    );
    if scanned.is_empty() {
        return Err("no JSON line".into());
    }
    let Selection {
        lines: selected,
        joined,
        mut off_branch,
    } = select_lines(&scanned, damaged, &mut b);

    let mut pending: Option<PendingBoundary> = None;
    // message.id → (entry index, inference index).
    // A response's lines are merged only while no user message has come
    // since its first line (tool results may): `prompts` counts them.
    let mut responses: HashMap<String, (usize, Option<usize>, usize)> = HashMap::new();
    let mut prompts = 0usize;
    // message.id → the raw figures of the last usage object seen (`None`
    // when unusable), in the order of `RAW_USAGE_KEYS`.
    // Per response: the four figures of RAW_USAGE_KEYS, then the 1-hour
    // cache writes among `cache_creation_input_tokens`.
    let mut raw_usage: HashMap<String, Option<[u64; 5]>> = HashMap::new();
    let mut synthetic = 0u64;
    let mut has_session_id = false;
    lines.each_object_at(&selected, |line_idx, obj| {
        let obj = &obj;
        let line_no = line_idx + 1;
        let kind = str_field(obj, "type").unwrap_or("");
        // A line joined from a sibling branch is taken only when it is what
        // the tree walk expected: another content block of a response
        // already read, or a user line holding tool results. Anything else
        // there (a prompt a rewind abandoned) stays off the branch.
        if joined.contains(&line_idx) {
            let message = obj_field(obj, "message");
            let expected = match kind {
                "assistant" => message
                    .and_then(|message| str_field(message, "id"))
                    .and_then(|id| responses.get(id))
                    .is_some_and(|&(_, _, since)| since == prompts),
                "user" => message
                    .and_then(|message| message.get("content"))
                    .and_then(Value::as_array)
                    .is_some_and(|blocks| {
                        blocks.iter().any(|block| {
                            block.get("type").and_then(Value::as_str) == Some("tool_result")
                        })
                    }),
                _ => false,
            };
            if !expected {
                off_branch += 1;
                return;
            }
        }
        b.count_record(kind);
        if !has_session_id
            && let Some(id) = str_field(obj, "sessionId").or_else(|| str_field(obj, "session_id"))
        {
            id.clone_into(&mut b.original_id);
            has_session_id = true;
        }
        if b.cwd.is_none() {
            b.cwd = str_field(obj, "cwd").map(str::to_owned);
        }
        let timestamp = timestamp_field(obj, "timestamp");
        if b.created_at.is_none() {
            b.created_at.clone_from(&timestamp);
        }
        match kind {
            "system" => {
                b.messages += 1;
                match str_field(obj, "subtype") {
                    Some("compact_boundary") => {
                        if let Some(previous) = pending.take() {
                            previous.close(None, &mut b);
                        }
                        let tokens_before = obj_field(obj, "compactMetadata").map_or(0, |meta| {
                            token_figure(
                                meta,
                                "preTokens",
                                &format!("line {line_no}"),
                                &mut b.diagnostics,
                            )
                        });
                        let original_id = str_field(obj, "uuid")
                            .map_or_else(|| format!("line:{line_idx}"), str::to_owned);
                        pending = Some(PendingBoundary {
                            original_id,
                            timestamp,
                            tokens_before,
                        });
                    }
                    Some("init") if b.model.is_none() => {
                        b.model = str_field(obj, "model").map(str::to_owned);
                    }
                    _ => {}
                }
            }
            "user" => {
                b.messages += 1;
                let Some(message) = obj_field(obj, "message") else {
                    b.diag(format!(
                        "line {line_no}: user line without a message skipped"
                    ));
                    return;
                };
                let is_summary = obj.get("isCompactSummary").and_then(Value::as_bool) == Some(true);
                let is_meta = obj.get("isMeta").and_then(Value::as_bool) == Some(true);
                let at = format!("line {line_no}");
                let content = content_field(
                    message,
                    "content",
                    &at,
                    "message.content",
                    &mut b.diagnostics,
                );
                let (blocks, results) = split_user_content(content, &at, &mut b.diagnostics);
                if let Some(boundary) = pending.take() {
                    if is_summary || results.is_empty() {
                        let summary = message_with(Role::User, blocks, MessageOrigin::Summary);
                        boundary.close(Some((summary, timestamp)), &mut b);
                        return;
                    }
                    boundary.close(None, &mut b);
                }
                for result in results {
                    b.push_message(result, timestamp.clone());
                }
                if !blocks.is_empty() {
                    prompts += 1;
                    let origin = if is_summary {
                        MessageOrigin::Summary
                    } else if is_meta || is_injected(&blocks) {
                        MessageOrigin::Injected
                    } else if is_marker(&blocks) {
                        MessageOrigin::Marker
                    } else {
                        MessageOrigin::Typed
                    };
                    b.push_message(message_with(Role::User, blocks, origin), timestamp);
                }
            }
            "assistant" => {
                b.messages += 1;
                let Some(message) = obj_field(obj, "message") else {
                    b.diag(format!(
                        "line {line_no}: assistant line without a message skipped"
                    ));
                    return;
                };
                if let Some(boundary) = pending.take() {
                    boundary.close(None, &mut b);
                }
                let at = format!("line {line_no}");
                let content = content_field(
                    message,
                    "content",
                    &at,
                    "message.content",
                    &mut b.diagnostics,
                );
                let blocks = assistant_blocks(content, &at, &mut b.diagnostics);
                let model = str_field(message, "model").map(str::to_owned);
                let usage_obj = obj_field(message, "usage");
                // `Some(None)`: usage recorded but unusable.
                let parsed_usage =
                    usage_obj.map(|usage| anthropic_usage(usage, &at, &mut b.diagnostics));
                let usage = parsed_usage.flatten();
                let msg_id = str_field(message, "id").map(str::to_owned);
                let earlier = msg_id.as_ref().and_then(|id| responses.get(id)).copied();
                if let (Some(id), Some((entry_idx, _, since))) = (&msg_id, earlier)
                    && since != prompts
                {
                    b.diag(format!(
                        "{at}: message.id {id:?} was the response at entry {entry_idx}, before a user message; kept as a response of its own"
                    ));
                }
                if let Some((entry_idx, inference_idx, _)) =
                    earlier.filter(|&(_, _, since)| since == prompts)
                {
                    if let Some(target) = b.message_mut(entry_idx) {
                        target.content.extend(blocks);
                    }
                    match (inference_idx, parsed_usage) {
                        (Some(inference_idx), Some(Some(usage))) => {
                            b.set_inference_usage(inference_idx, usage);
                        }
                        // The response's usage is repeated per line; an
                        // unusable copy makes the response's usage unknown.
                        (Some(inference_idx), Some(None)) => b.clear_inference_usage(inference_idx),
                        _ => {}
                    }
                } else {
                    let entry_idx =
                        b.push_message(Message::new(Role::Assistant, blocks), timestamp.clone());
                    let is_synthetic = model.as_deref() == Some("<synthetic>");
                    let inference_idx = if is_synthetic {
                        synthetic += 1;
                        if let Some(message) = b.message_mut(entry_idx) {
                            message.model.clone_from(&model);
                        }
                        None
                    } else {
                        Some(b.push_inference(entry_idx, usage, timestamp, model, msg_id.clone()))
                    };
                    if let Some(id) = &msg_id {
                        responses.insert(id.clone(), (entry_idx, inference_idx, prompts));
                    }
                }
                if let (Some(id), Some(usage_obj)) = (msg_id, usage_obj)
                    && model_is_real(message)
                {
                    let kept = usage.is_some().then(|| {
                        let [a, b, c, d] = RAW_USAGE_KEYS.map(|key| count_field(usage_obj, key));
                        let long = obj_field(usage_obj, "cache_creation")
                            .map_or(0, |split| count_field(split, ONE_HOUR_WRITES));
                        [a, b, c, d, long.min(c)]
                    });
                    raw_usage.insert(id, kept);
                }
            }
            _ => {}
        }
    });
    if let Some(boundary) = pending.take() {
        boundary.close(None, &mut b);
    }
    if off_branch > 0 {
        b.diag(format!("{off_branch} lines off the current branch (the parentUuid chain from the last line, with the sibling lines of its responses' parallel tool calls and results) skipped: a branch abandoned by a rewind or a retry"));
    }
    if sidechain > 0 {
        b.diag(format!("{sidechain} sidechain lines (a sub-agent's own conversation) skipped: the main conversation holds what the sub-agent returned, as its call's tool result"));
    }
    if synthetic > 0 {
        b.diag(format!("{synthetic} synthetic assistant messages (model <synthetic>) kept as entries, not as inferences"));
    }
    let mut sums: Map<String, Value> = Map::new();
    for (slot, key) in RAW_USAGE_KEYS.into_iter().enumerate() {
        let sum = raw_usage
            .values()
            .flatten()
            .fold(0u64, |acc, figures| acc.saturating_add(figures[slot]));
        sums.insert(key.to_owned(), Value::from(sum));
    }
    // Written only when some are: most sessions use the 5-minute cache.
    let long: u64 = raw_usage
        .values()
        .flatten()
        .fold(0u64, |acc, figures| acc.saturating_add(figures[4]));
    if long > 0 {
        sums.insert(
            format!("cache_creation.{ONE_HOUR_WRITES}"),
            Value::from(long),
        );
    }
    sums.insert("counting".into(), Value::from("per-request"));
    b.usage_raw = Value::Object(sums);
    b.billed = Some(billed_responses(lines, &assistant_lines));
    Ok(vec![b.finish()])
}

/// Returns the responses billed: every assistant line with usage, main
/// chain, abandoned branches, interrupted requests and sub-agent lines
/// alike, one response per `message.id` in the order of its first line.
/// Claude Code writes a line per content block, each with the response's
/// usage so far (the output grows line by line), so the id's last line
/// holds its final figures. A line without an id is a response of its
/// own; `<synthetic>` lines were never sent, and a line whose usage is
/// unreadable (already noted by the main pass when on the branch) bills
/// nothing known.
fn billed_responses(lines: &Lines<'_>, assistant_lines: &[usize]) -> Vec<BilledResponse> {
    let mut out: Vec<BilledResponse> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    lines.each_object_at(assistant_lines, |_, obj| {
        let Some(message) = obj_field(&obj, "message") else {
            return;
        };
        let Some(usage_obj) = obj_field(message, "usage") else {
            return;
        };
        if !model_is_real(message) {
            return;
        }
        let Some(usage) = anthropic_usage(usage_obj, "", &mut Diagnostics::default()) else {
            return;
        };
        let cache_write_1h = obj_field(usage_obj, "cache_creation")
            .map_or(0, |split| count_field(split, ONE_HOUR_WRITES))
            .min(usage.cache_write);
        let id = str_field(message, "id");
        if let Some(&at) = id.and_then(|id| by_id.get(id)) {
            let earlier = &mut out[at];
            earlier.usage = usage;
            earlier.cache_write_1h = cache_write_1h;
            return;
        }
        if let Some(id) = id {
            by_id.insert(id.to_owned(), out.len());
        }
        out.push(BilledResponse {
            model: str_field(message, "model").map(str::to_owned),
            usage,
            cache_write_1h,
            timestamp: timestamp_field(&obj, "timestamp"),
        });
    });
    out
}

/// The cache writes of `cache_creation_input_tokens` made with the 1-hour
/// lifetime (billed at 2× input, not the 5-minute 1.25×), in
/// `usage.cache_creation`.
const ONE_HOUR_WRITES: &str = "ephemeral_1h_input_tokens";

/// Anthropic's usage figures, summed raw into `usageRaw`.
const RAW_USAGE_KEYS: [&str; 4] = [
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
];

fn model_is_real(message: &Map<String, Value>) -> bool {
    str_field(message, "model") != Some("<synthetic>")
}

/// The keys of Claude Code's tree.
const CLAUDE_TREE: TreeKeys = TreeKeys {
    id: "uuid",
    parent: "parentUuid",
    logical_parent: Some("logicalParentUuid"),
};

/// The top-level keys the first pass reads.
const CLAUDE_SCAN: &[&str] = &[
    "type",
    "subtype",
    "uuid",
    "parentUuid",
    "logicalParentUuid",
    "isSidechain",
    "parent_tool_use_id",
];

/// What the first pass keeps of a line: whether it is conversational and
/// its place in the tree.
struct Scanned {
    line_idx: usize,
    /// A `user`, `assistant` or `system` line of the main chain.
    conversational: bool,
    /// What the sibling walk needs: its role, `None` unless it is a
    /// conversational `user` or `assistant` line.
    role: Option<Role>,
    /// A sidechain (sub-agent) line, left out and counted.
    sidechain: bool,
    /// Whether the line has a `parentUuid` key.
    has_parent_key: bool,
    /// A `system` line of subtype `api_error`: the notice of a failed
    /// request that Claude Code retries ([`reattach_retry_notices`]).
    retry_notice: bool,
    /// Its tree node, for a main-chain line with `uuid` or `parentUuid`.
    node: Option<Node>,
}

impl Scanned {
    fn of(line_idx: usize, top: &TopLevel) -> Scanned {
        let side = top.get("isSidechain") == Some(&Top::Bool(true))
            || top
                .get("parent_tool_use_id")
                .is_some_and(|value| *value != Top::Null);
        let conversational =
            matches!(top.str("type"), Some("user" | "assistant" | "system")) && !side;
        let in_tree = (top.has("uuid") || top.has("parentUuid")) && !side;
        Scanned {
            line_idx,
            conversational,
            role: match top.str("type") {
                Some("assistant") if conversational => Some(Role::Assistant),
                Some("user") if conversational => Some(Role::User),
                _ => None,
            },
            sidechain: side,
            has_parent_key: top.has("parentUuid"),
            retry_notice: top.str("type") == Some("system")
                && top.str("subtype") == Some("api_error"),
            node: in_tree.then(|| parsed_node(line_idx, top, CLAUDE_TREE)),
        }
    }
}

/// What the tree walk knows of a node's line.
#[derive(Debug, Clone, Copy)]
struct NodeLine {
    /// Whether the line parsed (else its node was read from raw text).
    parsed: bool,
    /// A `user`, `assistant` or `system` line of the main chain.
    conversational: bool,
    /// Its role, for a conversational `user` or `assistant` line.
    role: Option<Role>,
    /// A retry notice (`system` `api_error`).
    retry_notice: bool,
}

impl NodeLine {
    const DAMAGED: NodeLine = NodeLine {
        parsed: false,
        conversational: false,
        role: None,
        retry_notice: false,
    };
}

/// The lines the second pass converts.
struct Selection {
    /// Ascending line indexes.
    lines: Vec<usize>,
    /// Those joined from sibling branches (checked again when read).
    joined: HashSet<usize>,
    /// Conversational lines left off the branch so far.
    off_branch: usize,
}

/// Chooses the conversational lines to convert, as ascending line indexes:
/// the `parentUuid` chain from the last conversational line (through
/// `logicalParentUuid` across compactions) when the file has one, bridged
/// across `damaged` lines by the shared tree walk, plus the sibling
/// branches of its responses (`tree::attached`): an assistant line under
/// an assistant line (another content block of a response: a parallel
/// call) and a user line under an assistant line (a tool result, whose
/// parent is its own call); else every line. Sidechain and sub-agent
/// lines are left out.
fn select_lines(scanned: &[Scanned], damaged: Vec<Node>, b: &mut SessionBuilder) -> Selection {
    let candidates: Vec<usize> = scanned
        .iter()
        .filter(|line| line.conversational)
        .map(|line| line.line_idx)
        .collect();
    let has_tree = scanned
        .iter()
        .any(|line| line.conversational && line.has_parent_key);
    if !has_tree {
        return Selection {
            lines: candidates,
            joined: HashSet::new(),
            off_branch: 0,
        };
    }
    // Nodes in file order: parsed lines of the main chain and damaged
    // lines that are not sidechain lines.
    let mut nodes: Vec<(Node, NodeLine)> = scanned
        .iter()
        .filter_map(|line| {
            line.node.clone().map(|node| {
                let kind = NodeLine {
                    parsed: true,
                    conversational: line.conversational,
                    role: line.role,
                    retry_notice: line.retry_notice,
                };
                (node, kind)
            })
        })
        .chain(damaged.into_iter().map(|node| (node, NodeLine::DAMAGED)))
        .collect();
    nodes.sort_by_key(|(node, _)| node.line_idx);
    let leaf = nodes
        .iter()
        .rposition(|(node, line)| node.id.is_some() && line.conversational);
    let (mut nodes, kinds): (Vec<Node>, Vec<NodeLine>) = nodes.into_iter().unzip();
    reattach_retry_notices(&mut nodes, &kinds, b);
    let path = branch(&nodes, leaf, "parentUuid", &mut b.diagnostics);
    let siblings = attached(&nodes, &path, |child, parent| {
        match (kinds[parent].role, kinds[child].role) {
            (Some(Role::Assistant), Some(Role::Assistant)) => Join::Branch,
            (Some(Role::Assistant), Some(Role::User)) => Join::Leaf,
            _ => Join::No,
        }
    });
    let joined: HashSet<usize> = siblings.iter().map(|&pos| nodes[pos].line_idx).collect();
    let on_path: HashSet<usize> = path
        .into_iter()
        .chain(siblings)
        .filter(|&node_pos| kinds[node_pos].parsed)
        .map(|node_pos| nodes[node_pos].line_idx)
        .collect();
    let selected: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|line_idx| on_path.contains(line_idx))
        .collect();
    Selection {
        off_branch: candidates.len() - selected.len(),
        lines: selected,
        joined,
    }
}

/// Moves retry notices written late back onto the conversation. Claude
/// Code writes a `system` `api_error` line for a failed request and
/// retries it; the notice names as its parent the line the request
/// followed, but it can reach the file only after the retried response
/// and its tool calls, and the lines written next then hang from the
/// notice. Read as written, the retried response would be a sibling
/// branch abandoned for the notice, although the next requests carried
/// it. A notice whose parent is an ancestor of the last user or assistant
/// line written before it (not that line itself) is attached to that
/// line instead, with a diagnostic; a notice is never where a rewind
/// starts, so no abandoned branch is joined this way.
fn reattach_retry_notices(nodes: &mut [Node], kinds: &[NodeLine], b: &mut SessionBuilder) {
    if !kinds.iter().any(|kind| kind.retry_notice) {
        return;
    }
    let by_id: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(pos, node)| node.id.clone().map(|id| (id, pos)))
        .collect();
    let parent_pos = |nodes: &[Node], pos: usize| match &nodes[pos].parent {
        Parent::Id(id) => by_id.get(id).copied(),
        _ => None,
    };
    let mut last_message: Option<usize> = None;
    for pos in 0..nodes.len() {
        if kinds[pos].retry_notice
            && let (Some(named), Some(reached)) = (parent_pos(nodes, pos), last_message)
            && named != reached
            && let Some(reached_id) = nodes[reached].id.clone()
        {
            // Is `named` an ancestor of `reached`? (Bounded: a cycle in
            // hostile input ends the walk.)
            let mut current = reached;
            let mut steps = 0usize;
            let mut ancestor = false;
            while let Some(up) = parent_pos(nodes, current) {
                if up == named {
                    ancestor = true;
                    break;
                }
                steps += 1;
                if steps > nodes.len() {
                    break;
                }
                current = up;
            }
            if ancestor {
                b.diag(format!(
                    "line {}: a retry notice (system api_error) names line {} as its parent but was written after line {}, which the conversation had reached; it is attached to line {} so the retried response stays on the branch",
                    nodes[pos].line_idx + 1,
                    nodes[named].line_idx + 1,
                    nodes[reached].line_idx + 1,
                    nodes[reached].line_idx + 1,
                ));
                nodes[pos].parent = Parent::Id(reached_id);
            }
        }
        if kinds[pos].role.is_some() && nodes[pos].id.is_some() {
            last_message = Some(pos);
        }
    }
}

/// Normalises Anthropic usage (input already excludes the cache); `None`
/// (with a diagnostic) when a figure is not a count.
fn anthropic_usage(
    usage: &Map<String, Value>,
    at: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Usage> {
    let [input, cache_read, cache_write, output] = usage_figures(
        usage,
        [
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
        ],
        at,
        diagnostics,
    )?;
    Some(Usage {
        input,
        cache_read,
        cache_write,
        output,
        reasoning: 0,
    })
}

/// Converts assistant content blocks (Anthropic Messages shape); content
/// of unexpected shape is kept as text with a diagnostic naming `at`.
fn assistant_blocks(content: &Value, at: &str, diagnostics: &mut Diagnostics) -> Vec<Block> {
    let items = match content {
        Value::String(text) => return vec![Block::Text(text.clone())],
        Value::Array(items) => items,
        other => {
            return odd_content(other, at, "message.content", diagnostics)
                .map(Block::Text)
                .into_iter()
                .collect();
        }
    };
    let mut blocks = Vec::new();
    for (idx, item) in items.iter().enumerate() {
        let Some(block) = item.as_object() else {
            let field = format!("message.content[{idx}]");
            blocks.extend(odd_content(item, at, &field, diagnostics).map(Block::Text));
            continue;
        };
        match str_field(block, "type") {
            Some("text") => blocks.push(Block::Text(
                str_field(block, "text").unwrap_or_default().to_owned(),
            )),
            Some("thinking") => blocks.push(Block::Thinking {
                text: str_field(block, "thinking").unwrap_or_default().to_owned(),
                signature: str_field(block, "signature").map(str::to_owned),
            }),
            Some("tool_use" | "server_tool_use") => blocks.push(Block::ToolUse(ToolUse {
                id: str_field(block, "id").unwrap_or_default().to_owned(),
                name: str_field(block, "name").unwrap_or_default().to_owned(),
                input: match block.get("input") {
                    Some(Value::String(text)) => ToolInput::from_json_text(text),
                    Some(Value::Null) | None => ToolInput::empty(),
                    Some(other) => ToolInput::from_value(other.clone()),
                },
            })),
            _ => {}
        }
    }
    blocks
}

/// Splits user content into its text/image blocks and one `tool` message
/// per `tool_result` block.
fn split_user_content(
    content: &Value,
    at: &str,
    diagnostics: &mut Diagnostics,
) -> (Vec<Block>, Vec<Message>) {
    let mut blocks = Vec::new();
    let mut results = Vec::new();
    match content {
        Value::String(text) => blocks.push(Block::Text(text.clone())),
        Value::Array(items) => {
            for (idx, item) in items.iter().enumerate() {
                let Some(item) = item.as_object() else {
                    let field = format!("message.content[{idx}]");
                    blocks.extend(odd_content(item, at, &field, diagnostics).map(Block::Text));
                    continue;
                };
                match str_field(item, "type") {
                    Some("tool_result") => {
                        let id = str_field(item, "tool_use_id")
                            .unwrap_or_default()
                            .to_owned();
                        let is_error = item
                            .get("is_error")
                            .and_then(Value::as_bool)
                            .unwrap_or(false);
                        let field = format!("message.content[{idx}].content");
                        let parts = result_parts(item.get("content"), at, &field, diagnostics);
                        results.push(tool_message(id, parts, is_error));
                    }
                    Some("image") => {
                        if let Some(image) = anthropic_image(item) {
                            blocks.push(Block::Image(image));
                        }
                    }
                    _ => {
                        if let Some(text) = str_field(item, "text") {
                            blocks.push(Block::Text(text.to_owned()));
                        }
                    }
                }
            }
        }
        other => {
            blocks.extend(odd_content(other, at, "message.content", diagnostics).map(Block::Text))
        }
    }
    (blocks, results)
}

/// Converts `tool_result.content` (a string or text/image blocks); other
/// shapes are kept as text with a diagnostic.
fn result_parts(
    content: Option<&Value>,
    at: &str,
    field: &str,
    diagnostics: &mut Diagnostics,
) -> Vec<ResultPart> {
    match content {
        None => Vec::new(),
        Some(Value::String(text)) => vec![ResultPart::Text(text.clone())],
        Some(Value::Array(items)) => {
            let mut parts = Vec::new();
            for (idx, item) in items.iter().enumerate() {
                let Some(obj) = item.as_object() else {
                    let field = format!("{field}[{idx}]");
                    parts.extend(odd_content(item, at, &field, diagnostics).map(ResultPart::Text));
                    continue;
                };
                match str_field(obj, "type") {
                    Some("image") => parts.extend(anthropic_image(obj).map(ResultPart::Image)),
                    _ => parts.extend(
                        str_field(obj, "text").map(|text| ResultPart::Text(text.to_owned())),
                    ),
                }
            }
            parts
        }
        Some(other) => odd_content(other, at, field, diagnostics)
            .map(ResultPart::Text)
            .into_iter()
            .collect(),
    }
}

fn anthropic_image(item: &Map<String, Value>) -> Option<Image> {
    let source = obj_field(item, "source")?;
    match str_field(source, "type") {
        Some("url") => str_field(source, "url").map(image_from_url),
        _ => Some(Image {
            media_type: str_field(source, "media_type")
                .unwrap_or("image/png")
                .to_owned(),
            source: ImageSource::Data(str_field(source, "data").unwrap_or_default().to_owned()),
        }),
    }
}

/// Returns whether every text block is an interruption marker.
fn is_marker(blocks: &[Block]) -> bool {
    !blocks.is_empty()
        && blocks
            .iter()
            .all(|block| matches!(block, Block::Text(text) if is_interrupt_marker(text)))
}

/// Returns whether the text is output Claude Code injects (local command
/// output, system reminders) rather than something the user typed.
fn is_injected(blocks: &[Block]) -> bool {
    !blocks.is_empty()
        && blocks.iter().all(|block| {
            matches!(block, Block::Text(text)
                if text.trim_start().starts_with("<local-command-") || text.trim_start().starts_with("<system-reminder>"))
        })
}

// ---------------------------------------------------------------------------
// openai-chat export

/// Imports the "openai-chat" export of a Claude Code session.
pub(crate) fn import_openai_chat(
    text: &str,
    ctx: &Context,
) -> Result<Vec<ImportedSession>, String> {
    let doc = parse_document(text)?;
    let messages = doc
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("no `messages` array")?;
    let mut b = SessionBuilder::new(Format::ClaudeCodeOpenAiChat, ctx, 0);
    if let Some(id) = str_field(&doc, "task_id").or_else(|| str_field(&doc, "session_id")) {
        id.clone_into(&mut b.original_id);
    }
    b.model = str_field(&doc, "model").map(str::to_owned);
    let model = b.model.clone();
    let mut pending: Option<PendingBoundary> = None;
    // The assistant entry of the response being read, if the previous
    // message was an assistant message.
    let mut run: Option<usize> = None;
    for (idx, message) in messages.iter().enumerate() {
        b.messages += 1;
        let Some(message) = message.as_object() else {
            b.diag(format!("messages[{idx}]: skipped: not an object"));
            run = None;
            continue;
        };
        let role = str_field(message, "role").unwrap_or("");
        b.count_record(role);
        // An assistant message that only makes tool calls may have no
        // content; every other message of a known role must have some.
        let calls_only = role == "assistant"
            && message.get("tool_calls").is_some_and(Value::is_array)
            && message.get("content").is_none_or(Value::is_null);
        let known = matches!(role, "system" | "developer" | "user" | "assistant" | "tool");
        let content = if calls_only || !known {
            &Value::Null
        } else {
            content_field(
                message,
                "content",
                &format!("messages[{idx}]"),
                "content",
                &mut b.diagnostics,
            )
        };
        if role != "assistant" {
            run = None;
        }
        if role != "user"
            && let Some(boundary) = pending.take()
        {
            boundary.close(None, &mut b);
        }
        match role {
            "system" | "developer" => {
                let text = text_of(content);
                if text.trim_start().starts_with(COMPACT_MARKER) {
                    pending = Some(PendingBoundary {
                        original_id: format!("messages[{idx}]"),
                        timestamp: None,
                        tokens_before: 0,
                    });
                } else {
                    b.push_message(Message::new(Role::System, vec![Block::Text(text)]), None);
                }
            }
            "user" => {
                let blocks =
                    chat_user_blocks(content, &format!("messages[{idx}]"), &mut b.diagnostics);
                if let Some(boundary) = pending.take() {
                    boundary.close(
                        Some((
                            message_with(Role::User, blocks, MessageOrigin::Summary),
                            None,
                        )),
                        &mut b,
                    );
                    continue;
                }
                let origin = if is_marker(&blocks) {
                    MessageOrigin::Marker
                } else {
                    MessageOrigin::Typed
                };
                b.push_message(message_with(Role::User, blocks, origin), None);
            }
            "assistant" => {
                let at = format!("messages[{idx}]");
                let mut blocks = if calls_only {
                    Vec::new()
                } else {
                    split_thinking(&content_text(content, &at, "content", &mut b.diagnostics))
                };
                for call in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(call) = call.as_object() {
                        blocks.push(Block::ToolUse(openai_tool_call(call)));
                    }
                }
                match run.and_then(|entry_idx| b.message_mut(entry_idx)) {
                    Some(target) => target.content.extend(blocks),
                    None => {
                        let entry_idx = b.push_message(Message::new(Role::Assistant, blocks), None);
                        b.push_inference(entry_idx, None, None, model.clone(), None);
                        run = Some(entry_idx);
                    }
                }
            }
            "tool" => {
                let id = str_field(message, "tool_call_id")
                    .unwrap_or_default()
                    .to_owned();
                let at = format!("messages[{idx}]");
                let text = content_text(content, &at, "content", &mut b.diagnostics);
                let is_error = text.trim_start().starts_with("<tool_use_error>");
                b.push_message(
                    tool_message(id, vec![ResultPart::Text(text)], is_error),
                    None,
                );
            }
            other => b.diag(format!("messages[{idx}]: role {other:?} skipped")),
        }
    }
    if let Some(boundary) = pending.take() {
        boundary.close(None, &mut b);
    }
    b.usage_raw = json!({ "counting": "none" });
    Ok(vec![b.finish()])
}

/// Converts export user content (a string, or OpenAI content parts).
fn chat_user_blocks(content: &Value, at: &str, diagnostics: &mut Diagnostics) -> Vec<Block> {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter_map(Value::as_object)
            .filter_map(|part| match str_field(part, "type") {
                Some("image_url") => {
                    let url = part
                        .get("image_url")
                        .and_then(|u| u.get("url").or(Some(u)))
                        .and_then(Value::as_str)?;
                    Some(Block::Image(image_from_url(url)))
                }
                _ => str_field(part, "text").map(|text| Block::Text(text.to_owned())),
            })
            .collect(),
        other => odd_content(other, at, "content", diagnostics)
            .map(Block::Text)
            .into_iter()
            .collect(),
    }
}

/// Splits text into `thinking` blocks (`<thinking>…</thinking>`) and the
/// text around them; blank pieces are dropped.
fn split_thinking(text: &str) -> Vec<Block> {
    const OPEN: &str = "<thinking>";
    const CLOSE: &str = "</thinking>";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let before = rest[..start].trim();
        if !before.is_empty() {
            blocks.push(Block::Text(before.to_owned()));
        }
        let after_open = &rest[start + OPEN.len()..];
        let (thinking, remainder) = match after_open.find(CLOSE) {
            Some(end) => (&after_open[..end], &after_open[end + CLOSE.len()..]),
            None => (after_open, ""),
        };
        blocks.push(Block::Thinking {
            text: thinking.trim().to_owned(),
            signature: None,
        });
        rest = remainder;
    }
    let tail = rest.trim();
    if !tail.is_empty() {
        blocks.push(Block::Text(tail.to_owned()));
    }
    blocks
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use soba_core::EntryBody;

    use super::*;

    fn ctx() -> Context {
        Context {
            source: PathBuf::from("session.jsonl"),
            fallback_ms: 0,
        }
    }

    fn messages(s: &ImportedSession) -> Vec<&Message> {
        s.entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::Message(m) => Some(&m.message),
                _ => None,
            })
            .collect()
    }

    const NATIVE: &str = r#"{"type":"summary","summary":"Title","leafUuid":"u9"}
{"type":"user","uuid":"u1","parentUuid":null,"isSidechain":false,"sessionId":"S","cwd":"/w","timestamp":"2025-06-01T10:00:00.000Z","message":{"role":"user","content":"fix the bug"}}
{"type":"user","uuid":"u1b","parentUuid":"u1","isMeta":true,"sessionId":"S","timestamp":"2025-06-01T10:00:00.100Z","message":{"role":"user","content":"<local-command-stdout>ok</local-command-stdout>"}}
{"type":"assistant","uuid":"a1","parentUuid":"u1b","sessionId":"S","timestamp":"2025-06-01T10:00:01.000Z","requestId":"r1","message":{"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","type":"message","content":[{"type":"thinking","thinking":"hmm","signature":"sig"}],"usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":5}}}
{"type":"assistant","uuid":"a2","parentUuid":"a1","sessionId":"S","timestamp":"2025-06-01T10:00:01.500Z","requestId":"r1","message":{"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":40}}}
{"type":"assistant","uuid":"a3","parentUuid":"a2","sessionId":"S","timestamp":"2025-06-01T10:00:01.600Z","requestId":"r1","message":{"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","type":"message","content":[{"type":"tool_use","id":"toolu_2","name":"Read","input":{"file_path":"a"}}],"usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":60}}}
{"type":"user","uuid":"t1","parentUuid":"a3","sessionId":"S","timestamp":"2025-06-01T10:00:02.000Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.rs","is_error":false}]},"toolUseResult":{"stdout":"a.rs"}}
{"type":"user","uuid":"x1","parentUuid":"t1","isSidechain":true,"sessionId":"S","timestamp":"2025-06-01T10:00:02.100Z","message":{"role":"user","content":"sub-agent prompt"}}
{"type":"user","uuid":"b1","parentUuid":"t1","sessionId":"S","timestamp":"2025-06-01T10:00:02.200Z","message":{"role":"user","content":"abandoned branch"}}
{"type":"user","uuid":"i1","parentUuid":"t1","sessionId":"S","timestamp":"2025-06-01T10:00:03.000Z","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user for tool use]"}]}}
{"type":"system","subtype":"compact_boundary","uuid":"c1","parentUuid":null,"logicalParentUuid":"i1","sessionId":"S","timestamp":"2025-06-01T10:05:00.000Z","content":"Conversation compacted","compactMetadata":{"trigger":"auto","preTokens":155000}}
{"type":"user","uuid":"s1","parentUuid":"c1","isCompactSummary":true,"sessionId":"S","timestamp":"2025-06-01T10:05:00.100Z","message":{"role":"user","content":"This session is being continued... Summary: did things"}}
{"broken
{"type":"assistant","uuid":"a9","parentUuid":"s1","sessionId":"S","timestamp":"2025-06-01T10:05:02.000Z","message":{"id":"msg_2","model":"claude-sonnet-4-5","role":"assistant","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":20000,"output_tokens":2}}}
{"type":"file-history-snapshot","messageId":"m","snapshot":{}}
"#;

    #[test]
    fn native_merges_by_message_id_and_follows_the_chain() {
        let s = import_native(&Lines::Text(NATIVE), &ctx())
            .expect("imports")
            .remove(0);
        assert_eq!(s.original_id, "S");
        assert_eq!(s.cwd.as_deref(), Some("/w"));
        assert_eq!(s.inferences.len(), 2);
        assert_eq!(s.stats.tool_calls, 2);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.stats.compactions, 1);
        // Usage once per id, from the id's last line.
        assert_eq!(s.inferences[0].usage.map(|u| u.output), Some(60));
        assert_eq!(s.stats.usage_raw["output_tokens"], 62);
        assert_eq!(s.stats.usage_raw["cache_read_input_tokens"], 21000);
        assert_eq!(s.stats.peak_prompt_tokens, Some(20010));
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.starts_with("line 13:")),
            "{:?}",
            s.stats.diagnostics
        );
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.contains("1 lines off the current branch"))
        );
        let all = messages(&s);
        let texts: Vec<String> = all.iter().map(|m| m.text()).collect();
        assert!(
            !texts
                .iter()
                .any(|t| t.contains("abandoned") || t.contains("sub-agent"))
        );
        let origins: Vec<MessageOrigin> = all.iter().map(|m| m.origin).collect();
        assert_eq!(
            origins,
            [
                MessageOrigin::Typed,
                MessageOrigin::Injected,
                MessageOrigin::Typed,
                MessageOrigin::Typed,
                MessageOrigin::Marker,
                MessageOrigin::Typed
            ]
        );
        // The merged assistant entry holds thinking + both calls.
        assert_eq!(all[2].content.len(), 3);
        let capsule_idx = s
            .entries
            .iter()
            .position(|e| matches!(e.body, EntryBody::Capsule(_)))
            .expect("capsule");
        let EntryBody::Capsule(capsule) = &s.entries[capsule_idx].body else {
            panic!("capsule expected")
        };
        assert_eq!(capsule.tokens_before.get(), 155_000);
        // The summary is stored once, in the capsule, which keeps nothing
        // before it; its size is measured.
        assert!(capsule.markdown.contains("did things"));
        assert!(!texts.iter().any(|t| t.contains("did things")));
        assert_eq!(capsule.first_kept_entry_id, None);
        assert!(capsule.tokens_after.get() > 10, "{}", capsule.tokens_after);
    }

    #[test]
    fn stream_json_uses_file_order() {
        let text = r#"{"type":"system","subtype":"init","session_id":"S2","model":"claude-opus-4","tools":["Bash"]}
{"type":"assistant","session_id":"S2","uuid":"a","parent_tool_use_id":null,"message":{"id":"m1","model":"claude-opus-4","content":[{"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":1,"output_tokens":1}}}
{"type":"user","session_id":"S2","uuid":"b","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]}]}}
{"type":"assistant","session_id":"S2","uuid":"c","parent_tool_use_id":"t","message":{"id":"m2","model":"claude-opus-4","content":[{"type":"text","text":"subagent"}]}}
{"type":"result","session_id":"S2","usage":{"input_tokens":1}}
"#;
        let s = import_native(&Lines::Text(text), &ctx())
            .expect("imports")
            .remove(0);
        assert_eq!(s.original_id, "S2");
        assert_eq!(s.model.as_deref(), Some("claude-opus-4"));
        assert_eq!(s.inferences.len(), 1);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 0);
    }

    #[test]
    fn openai_chat_merges_runs_and_maps_compaction() {
        let text = r#"{"format":"openai-chat","model":"claude-sonnet-4-6","task_id":"T1","messages":[
            {"role":"user","content":"build"},
            {"role":"assistant","content":"<thinking>\nplan\n</thinking>"},
            {"role":"assistant","content":"On it."},
            {"role":"assistant","content":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"Bash","arguments":"{\"command\": \"ls\"}"}}]},
            {"role":"tool","tool_call_id":"toolu_1","content":"a"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"toolu_2","type":"function","function":{"name":"Write","arguments":"{\"file_path\": \"b\""}}]},
            {"role":"system","content":"[compact_boundary] Conversation compacted"},
            {"role":"user","content":"This session is being continued from a previous conversation. Summary: S"},
            {"role":"user","content":"[Request interrupted by user]"},
            {"role":"assistant","content":"ok"},
            42
        ]}"#;
        let s = import_openai_chat(text, &ctx()).expect("imports").remove(0);
        assert_eq!(s.original_id, "T1");
        assert_eq!(s.stats.messages, 11);
        assert_eq!(s.inferences.len(), 3);
        assert_eq!(s.stats.tool_calls, 2);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.stats.compactions, 1);
        assert_eq!(s.stats.records.get("assistant"), Some(&5));
        let all = messages(&s);
        assert!(
            matches!(&all[1].content[..], [Block::Thinking { text, .. }, Block::Text(t), Block::ToolUse(_)] if text == "plan" && t == "On it.")
        );
        let truncated = all[3].tool_uses().next().expect("call");
        assert_eq!(truncated.input.raw(), Some("{\"file_path\": \"b\""));
        let capsule_idx = s
            .entries
            .iter()
            .position(|e| matches!(e.body, EntryBody::Capsule(_)))
            .expect("capsule");
        let EntryBody::Capsule(capsule) = &s.entries[capsule_idx].body else {
            panic!("capsule expected")
        };
        assert_eq!(capsule.first_kept_entry_id, None);
        assert_eq!(
            capsule.markdown,
            "This session is being continued from a previous conversation. Summary: S"
        );
        assert_eq!(
            capsule.imported.as_ref().map(|i| i.original_id.as_str()),
            Some("messages[6]")
        );
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.starts_with("messages[10]"))
        );
        assert_eq!(all[4].origin, MessageOrigin::Marker);
        assert!(all.iter().all(|m| m.origin != MessageOrigin::Summary));
    }

    #[test]
    fn thinking_split_handles_unclosed_tags() {
        assert_eq!(
            split_thinking("a <thinking>x"),
            vec![
                Block::Text("a".into()),
                Block::Thinking {
                    text: "x".into(),
                    signature: None
                }
            ]
        );
        assert_eq!(split_thinking("   "), Vec::<Block>::new());
    }
}
