//! SWE-agent `.traj` files (FORMATS §2): `history` is converted, the
//! quadratic `trajectory[].messages` snapshots never are. 1.x carries
//! OpenAI-style tool calls with ids; 0.x writes one command per assistant
//! message, answered positionally by the next `user` message, so ids
//! `step-<i>` are synthesized and the command becomes
//! `tool_use{name:"bash", input:{command}}`.

use serde_json::{Map, Value, json};
use soba_core::{
    Block, Image, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolUse, Usage,
};

use super::builder::{
    Context, SessionBuilder, array_field, content_text, image_from_url, message_with, obj_field,
    parse_document, str_field, text_of, tool_message, usage_figures,
};
use super::{Format, ImportedSession};

/// Imports one `.traj` file.
pub(crate) fn import(text: &str, ctx: &Context) -> Result<Vec<ImportedSession>, String> {
    let doc = parse_document(text)?;
    let history = doc
        .get("history")
        .and_then(Value::as_array)
        .ok_or("no `history` array")?;
    let modern = history.iter().filter_map(Value::as_object).any(|entry| {
        entry.contains_key("tool_calls")
            || entry.contains_key("tool_call_ids")
            || entry.contains_key("message_type")
    });
    let mut b = SessionBuilder::new(
        if modern {
            Format::SweAgent1
        } else {
            Format::SweAgent0
        },
        ctx,
        0,
    );
    if let Some(replay) = replay_config(&doc) {
        if let Some(id) = obj_field(&replay, "problem_statement").and_then(|p| str_field(p, "id")) {
            id.clone_into(&mut b.original_id);
        }
        b.model = obj_field(&replay, "agent")
            .and_then(|agent| obj_field(agent, "model"))
            .and_then(|model| str_field(model, "name"))
            .map(str::to_owned);
    }
    b.cwd = array_field(&doc, "trajectory")
        .first()
        .and_then(Value::as_object)
        .and_then(|step| step.get("state"))
        .and_then(working_dir);

    // The synthesized id of the 0.x-style action awaiting its observation.
    let mut pending_step: Option<String> = None;
    let mut n_actions = 0usize;
    for (idx, entry) in history.iter().enumerate() {
        b.messages += 1;
        let Some(entry) = entry.as_object() else {
            b.diag(format!("history[{idx}]: skipped: not an object"));
            continue;
        };
        let role = str_field(entry, "role").unwrap_or("");
        let is_demo = entry.get("is_demo").and_then(Value::as_bool) == Some(true);
        b.count_record(if is_demo { "demo" } else { role });
        let content = entry.get("content").unwrap_or(&Value::Null);
        match role {
            "system" => {
                let text = content_text(
                    content,
                    &format!("history[{idx}]"),
                    "content",
                    &mut b.diagnostics,
                );
                if b.system_prompt.is_none() {
                    b.system_prompt = Some(text.clone());
                    b.system_prompt_in_entries = true;
                }
                b.push_message(Message::new(Role::System, vec![Block::Text(text)]), None);
            }
            "assistant" => {
                let text = str_field(entry, "thought")
                    .filter(|thought| {
                        !thought.trim().is_empty() && !entry.contains_key("tool_calls")
                    })
                    .map_or_else(|| text_of(content), str::to_owned);
                let mut blocks = Vec::new();
                if !text.trim().is_empty() {
                    blocks.push(Block::Text(text));
                }
                let calls = array_field(entry, "tool_calls");
                if calls.is_empty() {
                    if let Some(action) = str_field(entry, "action") {
                        let id = format!("step-{n_actions}");
                        let mut input = Map::new();
                        input.insert(
                            "command".into(),
                            Value::String(action.trim_end_matches('\n').to_owned()),
                        );
                        blocks.push(Block::ToolUse(ToolUse {
                            id: id.clone(),
                            name: "bash".into(),
                            input: ToolInput::from_value(Value::Object(input)),
                        }));
                        pending_step = Some(id);
                    }
                } else {
                    pending_step = None;
                    for call in calls.iter().filter_map(Value::as_object) {
                        blocks.push(Block::ToolUse(openai_tool_call(call)));
                    }
                }
                n_actions += 1;
                let idx = b.push_message(Message::new(Role::Assistant, blocks), None);
                let model = b.model.clone();
                b.push_inference(idx, None, None, model, None);
            }
            "tool" => {
                let ids: Vec<String> = array_field(entry, "tool_call_ids")
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                let parts = result_parts(content);
                if ids.is_empty() {
                    match pending_step.take() {
                        Some(id) => {
                            b.push_message(tool_message(id, parts, false), None);
                        }
                        None => b.diag(format!(
                            "history[{idx}]: tool message without tool_call_ids skipped"
                        )),
                    }
                } else {
                    for id in ids {
                        b.push_message(tool_message(id, parts.clone(), false), None);
                    }
                }
            }
            "user" => {
                if is_demo {
                    b.push_message(
                        message_with(
                            Role::User,
                            user_blocks(content),
                            MessageOrigin::Demonstration,
                        ),
                        None,
                    );
                } else if let Some(id) = pending_step.take() {
                    let mut result = tool_message(id, result_parts(content), false);
                    result.origin = MessageOrigin::Observation;
                    b.push_message(result, None);
                } else {
                    b.push_message(
                        message_with(Role::User, user_blocks(content), MessageOrigin::Typed),
                        None,
                    );
                }
            }
            other => b.diag(format!("history[{idx}]: role {other:?} skipped")),
        }
    }

    let info = obj_field(&doc, "info");
    let stats = info.and_then(|info| obj_field(info, "model_stats"));
    b.usage_raw = json!({ "counting": "run-total", "model_stats": stats.cloned().map_or(Value::Null, Value::Object) });
    if let Some(stats) = stats {
        let figures = usage_figures(
            stats,
            ["tokens_sent", "tokens_received"],
            "info.model_stats",
            &mut b.diagnostics,
        );
        let [input, output] = figures.unwrap_or_default();
        b.usage_override = Some(Usage {
            input,
            output,
            ..Usage::default()
        });
    } else {
        b.diag("no info.model_stats: the run recorded no usage");
    }
    if b.model.is_none() {
        b.diag("the trajectory does not name its model");
    }
    Ok(vec![b.finish()])
}

/// Returns `replay_config` as an object (1.x writes it as an object or a
/// JSON string).
fn replay_config(doc: &Map<String, Value>) -> Option<Map<String, Value>> {
    match doc.get("replay_config")? {
        Value::Object(obj) => Some(obj.clone()),
        Value::String(text) => match serde_json::from_str(text) {
            Ok(Value::Object(obj)) => Some(obj),
            _ => None,
        },
        _ => None,
    }
}

/// Reads `working_dir` from a trajectory `state` (an object or a JSON string).
fn working_dir(state: &Value) -> Option<String> {
    let parsed;
    let state = match state {
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).ok()?;
            &parsed
        }
        other => other,
    };
    state
        .get("working_dir")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Converts an OpenAI-style `tool_calls[]` element.
pub(crate) fn openai_tool_call(call: &Map<String, Value>) -> ToolUse {
    let function = obj_field(call, "function");
    let name = function
        .and_then(|f| str_field(f, "name"))
        .unwrap_or_default()
        .to_owned();
    let input = match function.and_then(|f| f.get("arguments")) {
        Some(Value::String(text)) => ToolInput::from_json_text(text),
        Some(Value::Null) | None => ToolInput::empty(),
        Some(other) => ToolInput::from_value(other.clone()),
    };
    ToolUse {
        id: str_field(call, "id").unwrap_or_default().to_owned(),
        name,
        input,
    }
}

/// Converts user content: a string, or text and `image_url` parts.
fn user_blocks(content: &Value) -> Vec<Block> {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter_map(Value::as_object)
            .filter_map(|part| match str_field(part, "type") {
                Some("image_url") => image_part(part).map(Block::Image),
                _ => str_field(part, "text").map(|text| Block::Text(text.to_owned())),
            })
            .collect(),
        other => vec![Block::Text(text_of(other))],
    }
}

/// Converts observation content into result parts.
fn result_parts(content: &Value) -> Vec<ResultPart> {
    user_blocks(content)
        .into_iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(ResultPart::Text(text)),
            Block::Image(image) => Some(ResultPart::Image(image)),
            _ => None,
        })
        .collect()
}

fn image_part(part: &Map<String, Value>) -> Option<Image> {
    let url = match part.get("image_url")? {
        Value::String(url) => url.as_str(),
        Value::Object(obj) => str_field(obj, "url")?,
        _ => return None,
    };
    Some(image_from_url(url))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use soba_core::EntryBody;

    use super::*;

    fn run(text: &str) -> ImportedSession {
        let ctx = Context {
            source: PathBuf::from("x.traj"),
            fallback_ms: 0,
        };
        import(text, &ctx).expect("imports").remove(0)
    }

    #[test]
    fn old_style_actions_get_synthesized_ids() {
        let text = r#"{"history":[
            {"role":"system","content":"sys","agent":"primary"},
            {"role":"user","content":"demo","is_demo":true},
            {"role":"user","content":"task"},
            {"role":"assistant","content":"look\n```\nls\n```","thought":"look","action":"ls\n"},
            {"role":"user","content":"a.py"},
            {"role":"assistant","content":"submit\n```\nsubmit\n```","thought":"done","action":"submit\n"}
        ],"info":{"model_stats":{"tokens_sent":10,"tokens_received":2,"api_calls":2}},"trajectory":[{"state":"{\"working_dir\": \"/repo\"}"}]}"#;
        let s = run(text);
        assert_eq!(s.format, Format::SweAgent0);
        assert_eq!(s.stats.messages, 6);
        assert_eq!(s.stats.tool_calls, 2);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 1);
        assert_eq!(s.inferences.len(), 2);
        assert_eq!(s.stats.usage.input, 10);
        assert_eq!(s.stats.peak_prompt_tokens, None);
        assert_eq!(s.cwd.as_deref(), Some("/repo"));
        assert_eq!(s.system_prompt.as_deref(), Some("sys"));
        let EntryBody::Message(obs) = &s.entries[4].body else {
            panic!("message expected")
        };
        assert_eq!(obs.message.role, Role::Tool);
        assert_eq!(obs.message.origin, MessageOrigin::Observation);
        assert_eq!(
            obs.message
                .tool_results()
                .next()
                .map(|r| r.tool_use_id.as_str()),
            Some("step-0")
        );
        let EntryBody::Message(call) = &s.entries[3].body else {
            panic!("message expected")
        };
        assert_eq!(
            call.message
                .tool_uses()
                .next()
                .and_then(|c| c.input.str_arg("command")),
            Some("ls")
        );
        let EntryBody::Message(demo) = &s.entries[1].body else {
            panic!("message expected")
        };
        assert!(!demo.message.is_real_user());
    }

    #[test]
    fn function_calling_pairs_by_id() {
        let text = r#"{"history":[
            {"role":"user","content":"task","message_type":"observation"},
            {"role":"assistant","content":"t","tool_calls":[{"id":"c1","type":"function","function":{"name":"open","arguments":"{\"path\":\"a\"}"}}]},
            {"role":"tool","content":"file","tool_call_ids":["c1"]},
            "garbage"
        ],"trajectory":[]}"#;
        let s = run(text);
        assert_eq!(s.format, Format::SweAgent1);
        assert_eq!(s.stats.tool_calls, 1);
        assert_eq!(s.stats.tool_results, 1);
        assert_eq!(s.stats.unpaired_tool_calls, 0);
        assert_eq!(s.stats.messages, 4);
        assert!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.starts_with("history[3]"))
        );
    }
}
