//! OpenHands evaluation `output.jsonl` (FORMATS §3): one session per line
//! (benchmark instance). Agent actions sharing a `model_response.id` form
//! one assistant entry and one inference; observations pair with their
//! action through `cause`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use soba_core::{Block, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage};

use super::builder::Diagnostics;
use super::builder::{
    Context, SessionBuilder, array_field, content_text, for_each_jsonl_object, image_from_url,
    message_with, obj_field, str_field, text_of, timestamp_field, tool_message, usage_figures,
};
use super::lines::Lines;
use super::{Format, ImportedSession};

/// Raw usage sums of `model_response.usage`, once per response.
#[derive(Debug, Default)]
struct RawUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    cached_tokens: u64,
    reasoning_tokens: u64,
}

/// Imports every instance line of an `output.jsonl`.
///
/// The lines are read twice: once to find the JSON objects (and report
/// the rest), once to convert them one instance at a time.
pub(crate) fn import(lines: &Lines<'_>, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let mut file_diagnostics = Diagnostics::default();
    let mut instances = Vec::new();
    for_each_jsonl_object(lines, &mut file_diagnostics, |line_idx, _| {
        instances.push(line_idx)
    });
    let mut sessions = Vec::new();
    let mut ordinal = 0usize;
    lines.each_object_at(&instances, |line_idx, obj| {
        let this = ordinal;
        ordinal += 1;
        if !obj.get("history").is_some_and(Value::is_array) {
            file_diagnostics.push(format!(
                "line {}: skipped: no `history` array",
                line_idx + 1
            ));
            return;
        }
        let mut b = SessionBuilder::new(Format::OpenHands, ctx, this);
        b.diagnostics = std::mem::take(&mut file_diagnostics);
        convert_instance(line_idx, &obj, &mut b);
        sessions.push(b.finish());
    });
    if sessions.is_empty() {
        let first: Vec<&str> = file_diagnostics
            .iter()
            .take(3)
            .map(String::as_str)
            .collect();
        return Err(format!(
            "no instance line could be read ({})",
            first.join("; ")
        ));
    }
    if let Some(last) = sessions.last_mut() {
        last.stats.add_diagnostics(file_diagnostics);
    }
    Ok(sessions)
}

fn convert_instance(line_idx: usize, obj: &Map<String, Value>, b: &mut SessionBuilder) {
    let line_no = line_idx + 1;
    if let Some(id) = obj.get("instance_id") {
        b.original_id = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
    }
    let llm_config = obj_field(obj, "metadata").and_then(|meta| obj_field(meta, "llm_config"));
    b.model = llm_config
        .and_then(|config| str_field(config, "model"))
        .map(str::to_owned);
    b.context_window = llm_config
        .and_then(|config| config.get("max_input_tokens"))
        .and_then(Value::as_u64);
    if let Some(error) = obj.get("error").filter(|error| !error.is_null()) {
        b.diag(format!(
            "line {line_no}: the run ended with an error: {}",
            text_of(error)
        ));
    }

    let history = array_field(obj, "history");
    let mut raw = RawUsage::default();
    // model_response.id → (assistant entry index, inference index).
    let mut responses: HashMap<String, (usize, usize)> = HashMap::new();
    // action event id → tool_call_id, for pairing observations by `cause`.
    let mut call_by_action: HashMap<i64, String> = HashMap::new();
    for (event_idx, event) in history.iter().enumerate() {
        b.messages += 1;
        let Some(event) = event.as_object() else {
            b.diag(format!(
                "line {line_no}: history[{event_idx}]: skipped: not an object"
            ));
            continue;
        };
        if b.created_at.is_none() {
            b.created_at = timestamp_field(event, "timestamp");
        }
        let timestamp = timestamp_field(event, "timestamp");
        if let Some(action) = str_field(event, "action") {
            b.count_record(&format!("action:{action}"));
            convert_action(
                event,
                action,
                timestamp,
                b,
                &mut raw,
                &mut responses,
                &mut call_by_action,
            );
        } else if let Some(observation) = str_field(event, "observation") {
            b.count_record(&format!("observation:{observation}"));
            convert_observation(event, observation, timestamp, b, &call_by_action);
        } else {
            b.count_record("other");
            b.diag(format!(
                "line {line_no}: history[{event_idx}]: neither action nor observation; skipped"
            ));
        }
    }

    let accumulated = obj_field(obj, "metrics")
        .and_then(|metrics| metrics.get("accumulated_token_usage"))
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(totals) = accumulated.as_object() {
        let at = format!("line {line_no}: metrics.accumulated_token_usage");
        // Checked only to report figures that are not counts; the totals
        // are kept raw.
        let _ = usage_figures(
            totals,
            [
                "prompt_tokens",
                "completion_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
            ],
            &at,
            &mut b.diagnostics,
        );
    }
    b.usage_raw = json!({
        "counting": "per-request",
        "prompt_tokens": raw.prompt_tokens,
        "completion_tokens": raw.completion_tokens,
        "total_tokens": raw.total_tokens,
        "cached_tokens": raw.cached_tokens,
        "reasoning_tokens": raw.reasoning_tokens,
        "accumulated_token_usage": accumulated,
    });
}

fn convert_action(
    event: &Map<String, Value>,
    action: &str,
    timestamp: Option<String>,
    b: &mut SessionBuilder,
    raw: &mut RawUsage,
    responses: &mut HashMap<String, (usize, usize)>,
    call_by_action: &mut HashMap<i64, String>,
) {
    let empty = Map::new();
    let args = obj_field(event, "args").unwrap_or(&empty);
    let source = str_field(event, "source").unwrap_or("");
    let metadata = obj_field(event, "tool_call_metadata");
    match (action, metadata) {
        ("system", _) => {
            let content = str_field(args, "content").unwrap_or_default().to_owned();
            if b.system_prompt.is_none() {
                b.system_prompt = Some(content.clone());
                b.system_prompt_in_entries = true;
                b.tool_schemas = array_field(args, "tools").to_vec();
            }
            b.push_message(
                Message::new(Role::System, vec![Block::Text(content)]),
                timestamp,
            );
        }
        ("message", None) if source == "user" => {
            let mut blocks = vec![Block::Text(
                str_field(args, "content").unwrap_or_default().to_owned(),
            )];
            blocks.extend(
                array_field(args, "image_urls")
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|url| Block::Image(image_from_url(url))),
            );
            b.push_message(
                message_with(Role::User, blocks, MessageOrigin::Typed),
                timestamp,
            );
        }
        ("message", None) => {
            let text = str_field(args, "content").unwrap_or_default().to_owned();
            let idx = b.push_message(
                Message::new(Role::Assistant, vec![Block::Text(text)]),
                timestamp.clone(),
            );
            b.push_inference(idx, None, timestamp, None, None);
        }
        (_, Some(metadata)) => {
            let response = obj_field(metadata, "model_response");
            let response_id = response.and_then(|r| str_field(r, "id")).map(str::to_owned);
            let call_id = str_field(metadata, "tool_call_id")
                .unwrap_or_default()
                .to_owned();
            let function = str_field(metadata, "function_name")
                .unwrap_or(action)
                .to_owned();
            let call = ToolUse {
                id: call_id.clone(),
                name: function,
                input: call_input(response, &call_id, args),
            };
            if let Some(event_id) = event.get("id").and_then(Value::as_i64) {
                call_by_action.insert(event_id, call_id);
            }
            if let Some((entry_idx, _)) = response_id.as_ref().and_then(|id| responses.get(id)) {
                let entry_idx = *entry_idx;
                if let Some(message) = b.message_mut(entry_idx) {
                    message.content.push(Block::ToolUse(call));
                }
                return;
            }
            let text = str_field(args, "thought")
                .filter(|thought| !thought.trim().is_empty())
                .map(str::to_owned)
                .or_else(|| response_text(response))
                .filter(|text| !text.trim().is_empty());
            let mut blocks: Vec<Block> = text.into_iter().map(Block::Text).collect();
            blocks.push(Block::ToolUse(call));
            let at = event_at(event);
            let usage = response
                .and_then(|r| obj_field(r, "usage"))
                .and_then(|usage| normalise(usage, raw, &at, &mut b.diagnostics));
            let model = response
                .and_then(|r| str_field(r, "model"))
                .map(str::to_owned);
            let entry_idx =
                b.push_message(Message::new(Role::Assistant, blocks), timestamp.clone());
            let inference_idx =
                b.push_inference(entry_idx, usage, timestamp, model, response_id.clone());
            if let Some(id) = response_id {
                responses.insert(id, (entry_idx, inference_idx));
            }
        }
        // `recall` and agent bookkeeping actions are not model context.
        _ => {}
    }
}

/// Returns the call's arguments as the model wrote them in
/// `model_response`, else the action's `args` minus OpenHands' own fields.
fn call_input(
    response: Option<&Map<String, Value>>,
    call_id: &str,
    args: &Map<String, Value>,
) -> ToolInput {
    let arguments = response
        .and_then(|r| r.get("choices"))
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .and_then(|choice| choice.get("message"))
        .and_then(|message| message.get("tool_calls"))
        .and_then(Value::as_array)
        .and_then(|calls| {
            calls
                .iter()
                .find(|call| call.get("id").and_then(Value::as_str) == Some(call_id))
        })
        .and_then(|call| call.get("function"))
        .and_then(|function| function.get("arguments"));
    match arguments {
        Some(Value::String(text)) => ToolInput::from_json_text(text),
        Some(Value::Object(map)) => ToolInput::from_value(Value::Object(map.clone())),
        _ => {
            let mut map = args.clone();
            map.remove("thought");
            ToolInput::from_value(Value::Object(map))
        }
    }
}

fn response_text(response: Option<&Map<String, Value>>) -> Option<String> {
    response?
        .get("choices")?
        .as_array()?
        .first()?
        .get("message")?
        .get("content")
        .map(text_of)
}

/// Normalises an OpenAI/LiteLLM usage object (SPEC §4.2): cached and
/// cache-write tokens are taken out of `prompt_tokens`.
/// Figures that are not counts reject the whole object (see
/// `usage_figures`).
fn normalise(
    usage: &Map<String, Value>,
    raw: &mut RawUsage,
    at: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Usage> {
    let [
        prompt,
        completion,
        details_cached,
        cache_read,
        cache_write,
        reasoning,
        total,
    ] = usage_figures(
        usage,
        [
            "prompt_tokens",
            "completion_tokens",
            "prompt_tokens_details.cached_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "completion_tokens_details.reasoning_tokens",
            "total_tokens",
        ],
        at,
        diagnostics,
    )?;
    let cached = if details_cached > 0 {
        details_cached
    } else {
        cache_read
    };
    raw.prompt_tokens = raw.prompt_tokens.saturating_add(prompt);
    raw.completion_tokens = raw.completion_tokens.saturating_add(completion);
    raw.total_tokens = raw.total_tokens.saturating_add(total);
    raw.cached_tokens = raw.cached_tokens.saturating_add(cached);
    raw.reasoning_tokens = raw.reasoning_tokens.saturating_add(reasoning);
    Some(Usage {
        input: prompt.saturating_sub(cached).saturating_sub(cache_write),
        cache_read: cached,
        cache_write,
        output: completion,
        reasoning,
    })
}

/// Names an event in diagnostics: `history event <id>`.
fn event_at(event: &Map<String, Value>) -> String {
    match event.get("id") {
        Some(id) => format!("history event {id}"),
        None => "a history event".to_owned(),
    }
}

fn convert_observation(
    event: &Map<String, Value>,
    observation: &str,
    timestamp: Option<String>,
    b: &mut SessionBuilder,
    call_by_action: &HashMap<i64, String>,
) {
    let at = event_at(event);
    let content = event
        .get("content")
        .map(|content| content_text(content, &at, "content", &mut b.diagnostics))
        .unwrap_or_default();
    let cause = event.get("cause").and_then(Value::as_i64);
    let call_id = cause
        .and_then(|cause| call_by_action.get(&cause).cloned())
        .or_else(|| {
            obj_field(event, "tool_call_metadata")
                .and_then(|m| str_field(m, "tool_call_id"))
                .map(str::to_owned)
        });
    match (observation, call_id) {
        (_, Some(call_id)) => {
            let exit_code = obj_field(event, "extras")
                .and_then(|extras| obj_field(extras, "metadata"))
                .and_then(|metadata| metadata.get("exit_code"))
                .and_then(Value::as_i64);
            let is_error = observation == "error"
                || exit_code.is_some_and(|code| code != 0)
                || content.trim_start().starts_with("ERROR:");
            b.push_message(
                tool_message(call_id, vec![ResultPart::Text(content)], is_error),
                timestamp,
            );
        }
        ("recall", None) => {
            let mut text = content;
            let knowledge = obj_field(event, "extras")
                .map(|extras| array_field(extras, "microagent_knowledge"));
            for item in knowledge.unwrap_or(&[]).iter().filter_map(Value::as_object) {
                if let Some(extra) = str_field(item, "content") {
                    text.push_str("\n\n");
                    text.push_str(extra);
                }
            }
            b.push_message(
                message_with(Role::User, vec![Block::Text(text)], MessageOrigin::Injected),
                timestamp,
            );
        }
        // An error with no action to answer (e.g. a rejected tool call) is
        // sent back to the model as text written by the agent.
        ("error", None) => {
            b.push_message(
                message_with(
                    Role::User,
                    vec![Block::Text(content)],
                    MessageOrigin::Injected,
                ),
                timestamp,
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use soba_core::EntryBody;

    use super::*;

    fn total(session: &ImportedSession) -> Usage {
        let mut sum = Usage::default();
        for usage in session
            .inferences
            .iter()
            .filter_map(|inference| inference.usage.as_ref())
        {
            sum.add(usage);
        }
        sum
    }

    fn run(text: &str) -> Vec<ImportedSession> {
        let ctx = Context {
            source: PathBuf::from("output.jsonl"),
            fallback_ms: 0,
        };
        import(&Lines::Text(text), &ctx).expect("imports")
    }

    const INSTANCE: &str = r#"{"instance_id":"i-1","metadata":{"llm_config":{"model":"m","max_input_tokens":1000}},"error":null,"metrics":{"accumulated_token_usage":{"prompt_tokens":300}},"history":[
{"id":0,"timestamp":"2025-04-30T16:32:54.707474","source":"agent","action":"system","args":{"content":"sys","tools":[{"type":"function","function":{"name":"execute_bash"}}]}},
{"id":1,"timestamp":"2025-04-30T16:32:55","source":"user","action":"message","args":{"content":"fix","image_urls":null}},
{"id":2,"timestamp":"2025-04-30T16:32:56","source":"user","action":"recall","args":{}},
{"id":3,"timestamp":"2025-04-30T16:32:56","source":"environment","observation":"recall","content":"ctx","cause":2,"extras":{"microagent_knowledge":[{"content":"know"}]}},
{"id":4,"timestamp":"2025-04-30T16:32:57","source":"agent","action":"run","args":{"command":"ls","thought":"look"},"tool_call_metadata":{"function_name":"execute_bash","tool_call_id":"toolu_01","model_response":{"id":"r1","model":"llama","choices":[{"message":{"content":"look","tool_calls":[{"id":"toolu_01","function":{"name":"execute_bash","arguments":"{\"command\": \"ls\"}"}},{"id":"toolu_02","function":{"name":"execute_bash","arguments":"{\"command\": \"pwd\"}"}}]}}],"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_tokens_details":{"cached_tokens":40}}},"total_calls_in_response":2}},
{"id":5,"timestamp":"2025-04-30T16:32:57","source":"agent","action":"run","args":{"command":"pwd","thought":""},"tool_call_metadata":{"function_name":"execute_bash","tool_call_id":"toolu_02","model_response":{"id":"r1","model":"llama","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7}},"total_calls_in_response":2}},
{"id":6,"timestamp":"2025-04-30T16:32:58","source":"agent","observation":"run","content":"boom","cause":4,"extras":{"metadata":{"exit_code":2}}},
{"id":7,"timestamp":"2025-04-30T16:32:58","source":"agent","observation":"run","content":"/w","cause":5,"extras":{"metadata":{"exit_code":0}}},
{"id":8,"timestamp":"2025-04-30T16:32:59","source":"agent","observation":"error","content":"bad parameter","extras":{}},
{"id":9,"timestamp":"2025-04-30T16:33:00","source":"agent","action":"finish","args":{"thought":"done"},"tool_call_metadata":{"function_name":"finish","tool_call_id":"toolu_03","model_response":{"id":"r2","model":"llama","choices":[],"usage":{"prompt_tokens":200,"completion_tokens":3}},"total_calls_in_response":1}}
]}"#;

    #[test]
    fn groups_calls_by_response_and_pairs_by_cause() {
        let one_line = INSTANCE.replace('\n', "");
        let text = format!("{one_line}\n{{broken\n{one_line}\n");
        let sessions = run(&text);
        assert_eq!(sessions.len(), 2);
        let s = &sessions[0];
        assert_eq!(s.original_id, "i-1");
        assert_eq!(s.stats.messages, 10);
        assert_eq!(s.inferences.len(), 2);
        assert_eq!(s.stats.tool_calls, 3);
        assert_eq!(s.stats.tool_results, 2);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.tool_schemas.len(), 1);
        assert_eq!(s.context_window, Some(1000));
        assert_eq!(s.created_at.as_deref(), Some("2025-04-30T16:32:54.707474Z"));
        assert_eq!(s.stats.peak_prompt_tokens, Some(200));
        let usage = total(s);
        assert_eq!((usage.input, usage.cache_read, usage.output), (260, 40, 10));
        assert_eq!(s.stats.usage_raw["prompt_tokens"], 300);
        // system, user, recall context, assistant(2 calls), 2 results, error text, finish.
        let roles: Vec<&str> = s
            .entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::Message(m) => Some(m.message.role.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            roles,
            [
                "system",
                "user",
                "user",
                "assistant",
                "tool",
                "tool",
                "user",
                "assistant"
            ]
        );
        let EntryBody::Message(failed) = &s.entries[4].body else {
            panic!("message expected")
        };
        assert!(failed.message.tool_results().all(|r| r.is_error));
        let EntryBody::Message(ok) = &s.entries[5].body else {
            panic!("message expected")
        };
        assert!(ok.message.tool_results().all(|r| !r.is_error));
        assert!(
            sessions[0]
                .stats
                .diagnostics
                .iter()
                .any(|d| d.starts_with("line 2:"))
        );
    }
}
