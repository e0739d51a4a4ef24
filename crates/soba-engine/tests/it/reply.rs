//! Replies a provider garbled or cut (issue 33): tool-call arguments that
//! are not a JSON object, and replies stopped by the output limit. No tool
//! runs with substituted or cut arguments; the model is told why, and the
//! user is told which limit cut the reply and which key raises it.

use soba_core::{Block, EntryBody};
use soba_engine::event::{EngineEvent, TurnEnd};
use soba_provider::fake::{Frame, Script, StreamEnd};

use crate::harness::{Harness, Options};

/// Returns a Chat Completions stream with one tool call whose arguments
/// are `arguments` (raw text, sent as one fragment), ending with
/// `finish_reason`.
fn call_stream(tool: &str, arguments: &str, finish_reason: &str) -> Script {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_cut", "type": "function", "function": {"name": tool, "arguments": arguments}}
    ]}}]});
    let finish =
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]});
    Script::Stream {
        frames: vec![
            Frame::data(&call.to_string()),
            Frame::data(&finish.to_string()),
            Frame::data("[DONE]"),
        ],
        end: StreamEnd::Close,
    }
}

/// Returns the text and error flag of every logged tool result.
fn tool_results(h: &Harness) -> Vec<(String, bool)> {
    h.logged_entries()
        .iter()
        .filter_map(|entry| match &entry.body {
            EntryBody::Message(logged) => Some(logged.message.content.clone()),
            _ => None,
        })
        .flatten()
        .filter_map(|block| match block {
            Block::ToolResult(result) => Some((result.text(), result.is_error)),
            _ => None,
        })
        .collect()
}

fn warnings(h: &Harness) -> Vec<String> {
    h.events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            EngineEvent::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn invalid_arguments_are_returned_to_the_model_and_the_tool_never_runs() {
    let h = Harness::start(Options::default()).await;
    // list_files needs no argument: with `{}` substituted it would run.
    h.server
        .push(call_stream("list_files", r#"{"path": data}"#, "tool_calls"));
    h.push_text("I will retry.");
    assert_eq!(h.turn("list the data").await, TurnEnd::Completed);
    assert_eq!(
        tool_results(&h),
        [(
            r#"the arguments of this list_files call are not valid JSON: expected value at line 1 column 10; the tool was not run. The arguments received (14 characters): "{\"path\": data}". Send the call again with the arguments as one complete JSON object"#.to_owned(),
            true
        )]
    );
    // The model's call keeps its raw text, so the next request shows the
    // model what it sent.
    let second = &h.server.requests()[1].body;
    assert_eq!(
        second["messages"][2]["tool_calls"][0]["function"]["arguments"],
        r#"{"path": data}"#
    );
}

#[tokio::test]
async fn arguments_cut_off_mid_stream_never_run_with_a_substitute() {
    let h = Harness::start(Options::default()).await;
    h.server.push(call_stream(
        "write_file",
        r#"{"path": "note.txt", "content": "hel"#,
        "tool_calls",
    ));
    h.push_text("Retrying.");
    assert_eq!(h.turn("write a note").await, TurnEnd::Completed);
    let results = tool_results(&h);
    assert_eq!(results.len(), 1);
    assert!(
        results[0]
            .0
            .starts_with("the arguments of this write_file call are cut off: EOF while parsing a string at line 1 column 36;"),
        "{results:?}"
    );
    assert!(results[0].1);
    assert!(!h.dir.path().join("workspace/note.txt").exists());
}

#[tokio::test]
async fn a_call_cut_by_the_output_limit_is_not_run_and_the_user_is_told() {
    let h = Harness::start(Options::default()).await;
    // The arguments happen to parse, but the reply stopped at max_tokens
    // while the call was the last thing written.
    h.server.push(call_stream(
        "write_file",
        r#"{"path": "note.txt", "content": "hello"}"#,
        "length",
    ));
    h.push_text("Writing it in parts.");
    assert_eq!(h.turn("write a note").await, TurnEnd::Completed);
    assert!(!h.dir.path().join("workspace/note.txt").exists());
    let max_tokens = h.server.requests()[0].body["max_tokens"].as_u64().unwrap();
    let model_id = h.core.lock().await.model_id().to_owned();
    assert_eq!(
        tool_results(&h),
        [(
            format!(
                "this write_file call was cut by the output limit (max_tokens {max_tokens}) while its arguments were being written; the tool was not run. Send the call again, with shorter arguments if they were long (write a large file in parts)"
            ),
            true
        )]
    );
    assert_eq!(
        warnings(&h),
        [format!(
            "the reply was cut by the output limit (max_tokens {max_tokens}); raise models.\"{model_id}\".maxOutputTokens for longer replies"
        )]
    );
}

#[tokio::test]
async fn a_text_reply_cut_by_the_output_limit_completes_with_a_warning() {
    let h = Harness::start(Options::default()).await;
    let text =
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": "The answer is"}}]});
    h.server.push(Script::Stream {
        frames: vec![
            Frame::data(&text.to_string()),
            Frame::data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#),
            Frame::data("[DONE]"),
        ],
        end: StreamEnd::Close,
    });
    assert_eq!(h.turn("answer").await, TurnEnd::Completed);
    let warnings = warnings(&h);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("the reply was cut by the output limit (max_tokens "),
        "{warnings:?}"
    );
    assert_eq!(h.server.requests().len(), 1);
}

/// Returns a Chat Completions stream that is only its end marker: no text,
/// no tool call, no stop reason.
fn empty_stream() -> Script {
    Script::Stream {
        frames: vec![Frame::data("[DONE]")],
        end: StreamEnd::Close,
    }
}

#[tokio::test]
async fn an_empty_stream_ends_the_turn_with_no_reply_and_a_warning() {
    let h = Harness::start(Options::default()).await;
    h.server.push(empty_stream());
    assert_eq!(h.turn("hello").await, TurnEnd::Completed);
    // The harness sets max_retries 0, so the retry the transport gives an
    // empty stream (tested in soba-provider) is not made here.
    assert_eq!(h.server.requests().len(), 1);
    assert_eq!(
        warnings(&h),
        [soba_engine::agent::empty_reply_warning(1)],
        "one warning, saying the turn has no reply"
    );
    let assistant = h
        .logged_entries()
        .iter()
        .filter(|entry| {
            matches!(&entry.body, EntryBody::Message(logged) if logged.message.role == soba_core::Role::Assistant)
        })
        .count();
    assert_eq!(assistant, 0, "no empty assistant message is logged");
    // The message can be sent again: the next turn gets its reply.
    h.push_text("Hello again.");
    assert_eq!(h.turn("hello").await, TurnEnd::Completed);
    assert_eq!(h.server.requests().len(), 2);
    assert_eq!(warnings(&h).len(), 1, "the reply came: no second warning");
}

/// Attack finding: a server that answers every request with the same tool
/// call kept `soba run` going without end. The tenth identical batch in a
/// row stops the turn; it is logged and answered, not run.
#[tokio::test]
async fn the_same_call_ten_times_in_a_row_stops_the_turn_as_a_loop() {
    let h = Harness::start(Options::default()).await;
    for _ in 0..soba_engine::agent::MAX_REPEATED_CALLS + 5 {
        h.server.push(call_stream("list_files", "{}", "tool_calls"));
    }
    let end = h.turn("list the files").await;
    assert_eq!(
        end,
        TurnEnd::Failed(soba_engine::agent::repeated_calls_reason("list_files"))
    );
    assert_eq!(
        h.server.requests().len(),
        soba_engine::agent::MAX_REPEATED_CALLS
    );
    let results = tool_results(&h);
    assert_eq!(results.len(), soba_engine::agent::MAX_REPEATED_CALLS);
    assert!(
        results[..results.len() - 1]
            .iter()
            .all(|(_, is_error)| !is_error)
    );
    assert_eq!(
        results.last().unwrap(),
        &(
            soba_engine::agent::repeated_calls_reason("list_files"),
            true
        )
    );
}
