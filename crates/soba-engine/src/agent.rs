//! The agent loop (SPEC §1, §6.3, §7): a user turn is a run of steps, each
//! preceded by the preflight barrier; tool calls run between steps; a
//! context overflow gets one forced compaction and one retry.

use std::collections::HashSet;
use std::sync::Arc;

use soba_core::{Block, Entry, EntryBody, Message, TokenCount};
use soba_provider::ProviderError;
use soba_provider::client::ModelClient;
use soba_provider::request::{ChatRequest, StopReason, StreamEvent, ToolSchema};
use tokio_util::sync::CancellationToken;

use crate::barrier::{BarrierContext, Forced, Preflight};
use crate::embed::TokenCancellation;
use crate::error::EngineError;
use crate::event::{EngineEvent, TurnEnd};
use crate::session::SessionCore;
use crate::tool::{ApprovalVerdict, Approvals, USER_DENIAL};
use crate::tool::{ToolContext, ToolEffect, ToolOutcome, ToolRegistry};

/// What a turn needs besides the session.
#[derive(Clone)]
pub struct Agent {
    /// The barrier (session, events, summarizer).
    pub barrier: BarrierContext,
    /// The model client.
    pub model: Arc<dyn ModelClient>,
    /// The tools offered.
    pub tools: Arc<ToolRegistry>,
    /// The approval gate.
    pub approvals: Arc<Approvals>,
    /// The tools' workspace and settings (its cancel token is replaced per turn).
    pub tool_context: ToolContext,
    /// The model name sent to the provider (no `provider/` prefix).
    pub provider_model: String,
    /// Whether a reply without native tool calls may carry one written as
    /// text (`models."<id>".toolCallsInText`; see [`soba_core::textcall`]).
    pub text_tool_calls: bool,
}

/// Turns one tool call written as text in an assistant reply with no native
/// call into a tool-use block, the text around it kept; returns whether it
/// did. The call's id is new (`text_call_` and a v7 UUID), since
/// the model gave none.
pub fn adopt_text_call(message: &mut Message, tools: &ToolRegistry) -> bool {
    if message.has_tool_uses() {
        return false;
    }
    let Some(call) = soba_core::textcall::parse(&message.text(), &tools.names()) else {
        return false;
    };
    let mut content = Vec::with_capacity(message.content.len() + 1);
    let mut text_placed = false;
    for block in message.content.drain(..) {
        match block {
            Block::Text(_) if text_placed => {}
            Block::Text(_) => {
                text_placed = true;
                if !call.remaining_text.is_empty() {
                    content.push(Block::Text(call.remaining_text.clone()));
                }
            }
            other => content.push(other),
        }
    }
    content.push(Block::ToolUse(soba_core::ToolUse {
        id: format!("text_call_{}", uuid::Uuid::now_v7().simple()),
        name: call.name,
        input: soba_core::ToolInput::from_value(serde_json::Value::Object(call.arguments)),
    }));
    message.content = content;
    true
}

/// The longest id a renamed tool call gets when the original fits in it:
/// OpenAI Chat Completions refuses tool-call ids over 40 characters.
const MAX_RENAMED_ID: usize = 40;

/// Makes the tool-call ids of a new assistant message unique before any
/// call runs: an id given twice in the message, or already used by a call
/// or result on `earlier` (the session's live path), is renamed `<id>_2`
/// (`_3`, … until unused); the first use keeps its id. Returns the renames
/// (old id, new id) in block order.
///
/// Without this, two calls sharing an id both run, but the model input
/// pairs only the first with a result, so the model never sees a tool that
/// ran. The suffix is `_N` because every dialect accepts it: Anthropic
/// allows only `[A-Za-z0-9_-]` in ids (no `#`), and OpenAI Chat at most 40
/// characters, so an id that fits keeps fitting (its end is cut for the
/// suffix).
pub fn unique_call_ids(message: &mut Message, earlier: &[Entry]) -> Vec<(String, String)> {
    let mut used: HashSet<String> = earlier
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message(logged) => Some(&logged.message),
            _ => None,
        })
        .flat_map(|logged| &logged.content)
        .filter_map(|block| match block {
            Block::ToolUse(call) => Some(call.id.clone()),
            Block::ToolResult(result) => Some(result.tool_use_id.clone()),
            _ => None,
        })
        .collect();
    let mut renames = Vec::new();
    for block in &mut message.content {
        let Block::ToolUse(call) = block else {
            continue;
        };
        if used.insert(call.id.clone()) {
            continue;
        }
        let fresh = (2_u64..)
            .map(|n| suffixed_id(&call.id, n))
            .find(|candidate| !used.contains(candidate))
            .expect("a finite set of used ids leaves some suffix free");
        used.insert(fresh.clone());
        renames.push((std::mem::replace(&mut call.id, fresh.clone()), fresh));
    }
    renames
}

/// Returns `id` with the suffix `_n`, its end cut (on a character
/// boundary) when that keeps an id of at most [`MAX_RENAMED_ID`] within it.
fn suffixed_id(id: &str, n: u64) -> String {
    let suffix = format!("_{n}");
    let mut base = id;
    if id.len() <= MAX_RENAMED_ID && id.len() + suffix.len() > MAX_RENAMED_ID {
        let mut cut = MAX_RENAMED_ID.saturating_sub(suffix.len());
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        base = &id[..cut];
    }
    format!("{base}{suffix}")
}

/// Returns the one line told (and logged) when a reply stopped at the
/// output limit: which limit, and the key that raises it.
pub fn output_limit_warning(model_id: &str, max_tokens: u64) -> String {
    format!(
        "the reply was cut by the output limit (max_tokens {max_tokens}); raise models.\"{model_id}\".maxOutputTokens for longer replies"
    )
}

/// How many times in a row one turn may make the very same tool calls
/// (names and arguments) before it is stopped as a loop. Gemini CLI stops
/// at 5; a model polling a slow command legitimately repeats a few times.
pub const MAX_REPEATED_CALLS: usize = 10;

/// The result of a call of the batch after one the user denied: the turn
/// stopped there.
pub const NOT_RUN_AFTER_DENIAL: &str = soba_core::facts::NOT_RUN_AFTER_DENIAL;

/// Counts consecutive identical tool-call batches within one turn.
#[derive(Default)]
struct RepeatedCalls {
    last: Option<Vec<(String, String)>>,
    times: usize,
}

impl RepeatedCalls {
    /// Records a batch; returns why the turn stops when it is the
    /// [`MAX_REPEATED_CALLS`]-th identical one in a row.
    fn see(&mut self, calls: &[soba_core::ToolUse]) -> Option<String> {
        let key: Vec<(String, String)> = calls
            .iter()
            .map(|call| (call.name.clone(), call.input.to_json_text()))
            .collect();
        if self.last.as_ref() == Some(&key) {
            self.times += 1;
        } else {
            self.last = Some(key);
            self.times = 1;
        }
        (self.times >= MAX_REPEATED_CALLS).then(|| repeated_calls_reason(&calls[0].name))
    }
}

/// Returns why a turn stopped on a loop of identical tool calls.
pub fn repeated_calls_reason(tool: &str) -> String {
    format!(
        "the model made the same {tool} call {MAX_REPEATED_CALLS} times in a row with the same arguments, so the turn was stopped as a loop (the last one was not run); send a message to redirect it"
    )
}

/// Returns the warning for a turn whose every attempt got an empty
/// response: the turn ends with no reply, and the user is told what to
/// check and that the message can simply be sent again.
pub fn empty_reply_warning(attempts: u32) -> String {
    format!(
        "the provider sent an empty response ({attempts} attempts: no text, tool call, reasoning or stop reason), so this turn has no reply; send the message again, and if it stays empty check that the model name exists on the server and that baseUrl points at an API of this kind, and look at the server's log (a local server may be out of memory or context)"
    )
}

/// Returns the tool result of a call the output limit cut: it is not run,
/// since its arguments may be incomplete even when they parse.
pub fn cut_call_error(name: &str, max_tokens: u64) -> String {
    format!(
        "this {name} call was cut by the output limit (max_tokens {max_tokens}) while its arguments were being written; the tool was not run. Send the call again, with shorter arguments if they were long (write a large file in parts)"
    )
}

/// Returns the id of the tool call the output limit cut: the message's
/// last block when the reply stopped at `max_tokens` and that block is a
/// call (a call is streamed whole before the next block starts).
pub fn cut_call_id(message: &Message, stop: &StopReason) -> Option<String> {
    if *stop != StopReason::MaxTokens {
        return None;
    }
    match message.content.last() {
        Some(Block::ToolUse(call)) => Some(call.id.clone()),
        _ => None,
    }
}

/// Returns the warning told when a tool call was renamed.
pub fn renamed_call_warning(old: &str, new: &str) -> String {
    format!(
        "the model gave tool-call id {old:?} to more than one call; this call is {new:?}, so each call is paired with its own result"
    )
}

/// Builds the request the session would send now with SOBA's tools (see
/// [`request_with_tools`]).
pub fn build_request(core: &SessionCore, model: &str, tools: &ToolRegistry) -> ChatRequest {
    let schemas: Vec<ToolSchema> = tools
        .tool_schemas()
        .into_iter()
        .map(|schema| ToolSchema {
            name: schema.name.to_owned(),
            description: schema.description.to_owned(),
            input_schema: schema.input_schema,
        })
        .collect();
    request_with_tools(core, model, schemas)
}

/// Builds the request the session would send now with the given tools: the
/// latest capsule as its rendered message (a cache breakpoint), or as its
/// native item when the model input sends that instead (SPEC §5 step 2).
pub fn request_with_tools(core: &SessionCore, model: &str, tools: Vec<ToolSchema>) -> ChatRequest {
    let view = core.live().view();
    let system = view
        .system
        .iter()
        .map(|part| part.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut messages = Vec::with_capacity(view.messages.len() + 1);
    let mut breakpoints = Vec::new();
    let mut native = None;
    if let Some(capsule) = &view.capsule {
        match capsule.rendered {
            Some(rendered) => {
                messages.push(rendered.clone());
                breakpoints.push(0);
            }
            // The input's native predicate accepted only parsable items.
            None => {
                native = capsule
                    .capsule
                    .native
                    .as_ref()
                    .and_then(|item| crate::native::parse_item(&item.item));
            }
        }
    }
    messages.extend(view.messages.iter().map(|message| message.message.clone()));
    let mut request = ChatRequest::new(
        model,
        system,
        messages,
        core.config().model.max_output_tokens.get(),
    );
    request.tools = tools;
    request.cache_breakpoints = breakpoints;
    request.native = native;
    request
}

/// Returns the tool schemas as JSON values, as the model input counts them.
pub fn tool_schema_values(tools: &ToolRegistry) -> Vec<serde_json::Value> {
    tools
        .tool_schemas()
        .into_iter()
        .map(|schema| {
            serde_json::json!({"name": schema.name, "description": schema.description, "input_schema": schema.input_schema})
        })
        .collect()
}

impl Agent {
    fn emit(&self, event: EngineEvent) {
        (self.barrier.events)(event);
    }

    /// Runs one user turn: appends `text` as a real user message, then
    /// steps until an assistant message without tool calls, a cancel, a
    /// stale barrier or a failure.
    pub async fn run_turn(
        &self,
        text: &str,
        cancel: &CancellationToken,
    ) -> Result<TurnEnd, EngineError> {
        self.run_turn_message(Message::user(text), cancel).await
    }

    /// Runs one user turn from a real user message built by the host, e.g.
    /// the typed text followed by attached files as further text blocks;
    /// otherwise as [`Agent::run_turn`].
    pub async fn run_turn_message(
        &self,
        message: Message,
        cancel: &CancellationToken,
    ) -> Result<TurnEnd, EngineError> {
        let entry = self.barrier.core.lock().await.append_message(message)?;
        self.emit(EngineEvent::TurnStarted { entry_id: entry.id });
        let end = self.steps(cancel).await?;
        self.emit(EngineEvent::TurnEnded { end: end.clone() });
        Ok(end)
    }

    async fn steps(&self, cancel: &CancellationToken) -> Result<TurnEnd, EngineError> {
        let mut overflow_retried = false;
        let mut forced: Option<Forced> = None;
        let mut repeats = RepeatedCalls::default();
        loop {
            if cancel.is_cancelled() {
                return Ok(TurnEnd::Cancelled);
            }
            match self.barrier.preflight(forced.take(), cancel).await? {
                Preflight::Proceed | Preflight::Compacted(_) => {}
                Preflight::EndTurn(end) => {
                    return Ok(match end.outcome {
                        crate::event::Outcome::Cancelled => TurnEnd::Cancelled,
                        crate::event::Outcome::Stale => TurnEnd::Stale,
                        _ => TurnEnd::Failed(
                            end.reason.unwrap_or_else(|| "compaction failed".into()),
                        ),
                    });
                }
            }
            let (request, local, hard_limit, effective, model_id) = {
                let mut core = self.barrier.core.lock().await;
                let request = build_request(&core, &self.provider_model, &self.tools);
                core.last_request_at = Some((self.barrier.clock)());
                let local = core.live().total_tokens();
                (
                    request,
                    local,
                    core.budget().hard_limit(),
                    core.measure().tokens,
                    core.model_id().to_owned(),
                )
            };
            if effective > hard_limit {
                return Ok(TurnEnd::Failed(format!(
                    "the request would be {effective} tokens > hardLimit {hard_limit}; not sent"
                )));
            }
            let events = self.barrier.events.clone();
            let mut on_event = move |event: StreamEvent| match event {
                StreamEvent::TextDelta(text) => events(EngineEvent::TextDelta { text }),
                StreamEvent::Retrying {
                    attempt,
                    max_attempts,
                    delay,
                    reason,
                } => events(EngineEvent::Retrying {
                    attempt,
                    max_attempts,
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    reason,
                }),
                _ => {}
            };
            let cancellation = TokenCancellation(cancel);
            let response = tokio::select! {
                _ = cancel.cancelled() => return Ok(TurnEnd::Cancelled),
                response = self.model.stream(&request, &cancellation, &mut on_event) => response,
            };
            let response = match response {
                Ok(response) => response,
                Err(err) if err.is_overflow() => {
                    if overflow_retried {
                        return Ok(TurnEnd::Failed(format!(
                            "context overflow again after a recovery compaction: {err}"
                        )));
                    }
                    overflow_retried = true;
                    forced = Some(Forced::ContextOverflow {
                        stated_prompt: err.stated_prompt(),
                        request_tokens_local: local.get(),
                        stated_limit: err.stated_limit(),
                    });
                    continue;
                }
                Err(err) if cancel.is_cancelled() => {
                    tracing::debug!("request ended by cancel: {err}");
                    return Ok(TurnEnd::Cancelled);
                }
                Err(ProviderError::EmptyResponse { attempts }) => {
                    // An empty reply, with a warning (issue 33): nothing is
                    // appended (an empty assistant message would be refused
                    // by some APIs on the next request), and the turn ends
                    // like a reply without tool calls.
                    let warning = empty_reply_warning(attempts);
                    tracing::warn!("{warning}");
                    self.emit(EngineEvent::Warning { message: warning });
                    return Ok(TurnEnd::Completed);
                }
                Err(err) => return Ok(TurnEnd::Failed(err.to_string())),
            };
            if cancel.is_cancelled() {
                // Linearisation: a cancel seen before the append appends nothing.
                return Ok(TurnEnd::Cancelled);
            }
            let stop_reason = response.stop_reason.clone();
            let mut message = response.message;
            message.request_tokens_local = Some(local.get());
            // The session's `provider/model` id, not the name the provider
            // reported (e.g. a dated snapshot): calibration and the
            // `provider_usage` measurement match assistant messages by it.
            message.model = Some(model_id);
            if self.text_tool_calls {
                adopt_text_call(&mut message, &self.tools);
            }
            let (entry, renames) = {
                let mut core = self.barrier.core.lock().await;
                let renames = unique_call_ids(&mut message, core.path());
                (core.append_message(message.clone())?, renames)
            };
            for (old, new) in &renames {
                self.emit(EngineEvent::Warning {
                    message: renamed_call_warning(old, new),
                });
            }
            let cut_call = cut_call_id(&message, &stop_reason);
            if stop_reason == StopReason::MaxTokens {
                let warning = output_limit_warning(
                    message.model.as_deref().unwrap_or(&self.provider_model),
                    request.max_tokens,
                );
                tracing::warn!(entry = %entry.id, cut_call = ?cut_call, "{warning}");
                self.emit(EngineEvent::Warning { message: warning });
            }
            let calls: Vec<_> = message.tool_uses().cloned().collect();
            self.emit(EngineEvent::AssistantMessage {
                entry_id: entry.id,
                text: message.text(),
                tool_calls: calls.iter().map(|call| call.name.clone()).collect(),
            });
            if calls.is_empty() {
                return Ok(TurnEnd::Completed);
            }
            if let Some(reason) = repeats.see(&calls) {
                // Logged as they came, not run again: the turn stops.
                let mut core = self.barrier.core.lock().await;
                for call in &calls {
                    let result = Message::new(
                        soba_core::Role::Tool,
                        vec![Block::ToolResult(
                            ToolOutcome::error(&reason).to_result(&call.id),
                        )],
                    );
                    core.append_message(result)?;
                }
                return Ok(TurnEnd::Failed(reason));
            }
            // A call the user denied stops the turn (as in Claude Code and
            // Codex): the calls after it are answered, not run, and the
            // user says what to do instead.
            let mut denied: Option<String> = None;
            for call in calls {
                let outcome = if denied.is_some() {
                    ToolOutcome::error(NOT_RUN_AFTER_DENIAL)
                } else if cut_call.as_deref() == Some(call.id.as_str()) {
                    ToolOutcome::error(cut_call_error(&call.name, request.max_tokens))
                } else {
                    let (outcome, by_user) = self.run_tool(&call, cancel).await;
                    if by_user {
                        denied = Some(describe_call(&call));
                    }
                    outcome
                };
                let mut core = self.barrier.core.lock().await;
                let result = Message::new(
                    soba_core::Role::Tool,
                    vec![Block::ToolResult(outcome.to_result(&call.id))],
                );
                core.append_message(result)?;
                if let Some(ToolEffect::Checkpoint { kind, note }) = &outcome.effect {
                    core.append(EntryBody::Checkpoint {
                        kind: *kind,
                        note: note.clone(),
                    })?;
                }
                // An "always" answer is a setting of the session: recorded
                // after the result, so `-c` restores it.
                let grants = self.approvals.grants();
                let recorded = core.derived().approvals.unwrap_or_default();
                if !recorded.covers_all(&grants) {
                    let mut all = recorded;
                    all.extend(&grants);
                    core.append(EntryBody::ConfigChange {
                        auto_compact: None,
                        approvals: Some(all),
                    })?;
                }
                drop(core);
                self.emit(EngineEvent::ToolResult {
                    name: call.name.clone(),
                    call: describe_call(&call),
                    is_error: outcome.is_error,
                    bytes: outcome.content.len(),
                });
            }
            if let Some(call) = denied
                && !cancel.is_cancelled()
            {
                return Ok(TurnEnd::Denied { call });
            }
        }
    }

    /// Runs one call; the flag says whether the user denied it (an
    /// interactive "no", not a policy's refusal).
    async fn run_tool(
        &self,
        call: &soba_core::ToolUse,
        cancel: &CancellationToken,
    ) -> (ToolOutcome, bool) {
        let Some(tool) = self.tools.get(&call.name) else {
            let error = format!(
                "unknown tool {:?}; available: {}",
                call.name,
                self.tools.names().join(", ")
            );
            return (ToolOutcome::error(error), false);
        };
        // Arguments that are not a JSON object (invalid, cut off) are never
        // replaced by `{}`: the model gets the reason and can call again.
        if let Some(error) = soba_provider::wire::invalid_arguments(&call.name, &call.input) {
            return (ToolOutcome::error(error), false);
        }
        match self.approvals.check(tool, &call.input).await {
            ApprovalVerdict::Denied(reason) => {
                let by_user = reason == USER_DENIAL;
                (ToolOutcome::error(reason), by_user)
            }
            ApprovalVerdict::Approved(_) => {
                let ctx = ToolContext::new(
                    self.tool_context.workspace().clone(),
                    self.tool_context.config().clone(),
                    cancel.child_token(),
                );
                (tool.call(&call.input, &ctx).await, false)
            }
        }
    }
}

/// Returns a one-line description of a call, e.g. `bash: sh run_tests.sh`.
pub fn describe_call(call: &soba_core::ToolUse) -> String {
    let detail = ["command", "path", "pattern", "note"]
        .iter()
        .find_map(|key| call.input.str_arg(key))
        .unwrap_or("");
    let detail: String = detail.chars().take(80).collect();
    if detail.is_empty() {
        call.name.clone()
    } else {
        format!("{}: {detail}", call.name)
    }
}

/// Returns the tokens of the current effective input (for printers).
pub fn effective_tokens(core: &SessionCore) -> TokenCount {
    core.measure().tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_id_stays_within_every_dialects_limits() {
        assert_eq!(suffixed_id("toolu_01A", 2), "toolu_01A_2");
        let forty = "c".repeat(40);
        assert_eq!(suffixed_id(&forty, 2), format!("{}_2", "c".repeat(38)));
        assert_eq!(suffixed_id(&forty, 12), format!("{}_12", "c".repeat(37)));
        // An id already over the limit came from a provider that allows it.
        let long = "d".repeat(50);
        assert_eq!(suffixed_id(&long, 2), format!("{long}_2"));
        // Cut on a character boundary.
        let wide = format!("{}éx", "e".repeat(37));
        assert_eq!(wide.len(), 40);
        assert_eq!(suffixed_id(&wide, 2), format!("{}_2", "e".repeat(37)));
    }

    #[test]
    fn duplicates_in_a_message_and_on_the_path_are_renamed_once_each() {
        let call = |id: &str| {
            Block::ToolUse(soba_core::ToolUse {
                id: id.into(),
                name: "read".into(),
                input: soba_core::ToolInput::from_json_text("{}"),
            })
        };
        let mut message = Message::new(
            soba_core::Role::Assistant,
            vec![call("a"), call("a"), call("a_2"), call("b")],
        );
        let renames = unique_call_ids(&mut message, &[]);
        let ids: Vec<&str> = message.tool_uses().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "a_2", "a_2_2", "b"]);
        assert_eq!(
            renames,
            [
                ("a".to_owned(), "a_2".to_owned()),
                ("a_2".to_owned(), "a_2_2".to_owned())
            ]
        );
    }
}
