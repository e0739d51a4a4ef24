//! Empty streams (issue 33): a stream with no text, no tool call, no
//! reasoning and no stop reason is not a finished reply. It is retried once,
//! announced like any retry; a second empty one is an error saying what to
//! check. A reply with a stop reason and no content is the model's own.

use serde_json::json;
use soba_provider::ProviderError;
use soba_provider::client::Api;
use soba_provider::fake::{Dialect, FakeServer, Frame, Reply, Script, StreamEnd};
use soba_provider::request::StreamEvent;

use crate::common::{client, fast_config, run_plain, simple_request};

const EMPTY_REASON: &str =
    "the provider sent an empty response (no text, tool call, reasoning or stop reason)";

/// Returns the empty stream of a dialect: only its framing, no content and
/// no stated reason for stopping.
fn empty_stream(dialect: Dialect) -> Script {
    let frames = match dialect {
        Dialect::Chat => vec![Frame::data("[DONE]")],
        Dialect::Anthropic => vec![
            Frame::event(
                "message_start",
                &json!({"type": "message_start", "message": {"id": "msg_e", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": 0, "output_tokens": 0}}}),
            ),
            Frame::event("message_stop", &json!({"type": "message_stop"})),
        ],
        Dialect::Responses => vec![
            Frame::event(
                "response.created",
                &json!({"type": "response.created", "response": {"id": "resp_e", "model": "m", "status": "in_progress", "output": []}}),
            ),
            Frame::event(
                "response.completed",
                &json!({"type": "response.completed", "response": {"id": "resp_e", "model": "m", "status": "completed", "output": []}}),
            ),
        ],
    };
    Script::Stream {
        frames,
        end: StreamEnd::Close,
    }
}

fn api(dialect: Dialect) -> Api {
    match dialect {
        Dialect::Anthropic => Api::AnthropicMessages,
        Dialect::Chat => Api::OpenAiChat,
        Dialect::Responses => Api::OpenAiResponses,
    }
}

const DIALECTS: [Dialect; 3] = [Dialect::Anthropic, Dialect::Chat, Dialect::Responses];

#[tokio::test]
async fn an_empty_stream_is_retried_once_with_a_warning() {
    for dialect in DIALECTS {
        let server = FakeServer::start().await.unwrap();
        server.push(empty_stream(dialect));
        server.push(Script::stream(dialect, &Reply::text("second try")));
        let client = client(&server, api(dialect), fast_config());
        let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
        assert_eq!(result.unwrap().message.text(), "second try", "{dialect:?}");
        let retries: Vec<(u32, u32, &str)> = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Retrying {
                    attempt,
                    max_attempts,
                    reason,
                    ..
                } => Some((*attempt, *max_attempts, reason.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(retries, [(2, 2, EMPTY_REASON)], "{dialect:?}");
        assert_eq!(server.requests().len(), 2, "{dialect:?}");
    }
}

#[tokio::test]
async fn a_second_empty_stream_is_an_error_saying_what_to_check() {
    for dialect in DIALECTS {
        let server = FakeServer::start().await.unwrap();
        for _ in 0..5 {
            server.push(empty_stream(dialect));
        }
        let client = client(&server, api(dialect), fast_config());
        let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProviderError::EmptyResponse { attempts: 2 }),
            "{dialect:?}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the provider sent an empty response (2 attempt(s)): no text, tool call, reasoning or stop reason; check that the model name exists on the server and that baseUrl points at an API of this kind, and look at the server's log (a local server may be out of memory or context)"
        );
        assert_eq!(
            server.requests().len(),
            2,
            "{dialect:?}: retried once only, whatever max_retries says"
        );
    }
}

#[tokio::test]
async fn a_stop_reason_without_content_is_the_models_own_empty_answer() {
    for dialect in [Dialect::Anthropic, Dialect::Chat] {
        let server = FakeServer::start().await.unwrap();
        server.push(Script::stream(dialect, &Reply::text("")));
        let client = client(&server, api(dialect), fast_config());
        let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
        let response = result.unwrap();
        assert_eq!(response.message.text(), "", "{dialect:?}");
        assert!(
            !events
                .iter()
                .any(|event| matches!(event, StreamEvent::Retrying { .. })),
            "{dialect:?}"
        );
        assert_eq!(server.requests().len(), 1, "{dialect:?}");
    }
    // Responses: an incomplete response names its reason.
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(
        Dialect::Responses,
        &Reply::text("").truncated(),
    ));
    let client = client(&server, Api::OpenAiResponses, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(
        result.unwrap().stop_reason,
        soba_provider::StopReason::MaxTokens
    );
}

/// Attack finding: a tool-call fragment that never gets a name is no call.
/// Counted as content, it made every response of such a server a call of
/// tool `""`, answered with an error, and the agent looped without end.
#[tokio::test]
async fn a_tool_call_fragment_without_a_name_is_an_empty_response() {
    let nameless = |id: &str| {
        let chunk = json!({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": id, "function": {"arguments": ""}}
        ]}, "finish_reason": null}]});
        Script::Stream {
            frames: vec![Frame::data(&chunk.to_string()), Frame::data("[DONE]")],
            end: StreamEnd::Close,
        }
    };
    let server = FakeServer::start().await.unwrap();
    server.push(nameless("call_0"));
    server.push(nameless(""));
    let first = client(&server, api(Dialect::Chat), fast_config());
    let (result, _) = run_plain(first.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, ProviderError::EmptyResponse { attempts: 2 }),
        "{err:?}"
    );

    // Beside text, the fragment is dropped and the text kept.
    let server = FakeServer::start().await.unwrap();
    let text = json!({"id": "x", "choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": null}]});
    let fragment = json!({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_0", "function": {"name": "", "arguments": "{}"}}
    ]}, "finish_reason": "tool_calls"}]});
    server.push(Script::Stream {
        frames: vec![
            Frame::data(&text.to_string()),
            Frame::data(&fragment.to_string()),
            Frame::data("[DONE]"),
        ],
        end: StreamEnd::Close,
    });
    let client = client(&server, api(Dialect::Chat), fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let message = result.unwrap().message;
    assert_eq!(message.text(), "hello");
    assert_eq!(message.tool_uses().count(), 0);
}

/// Attack finding: a stream of keep-alive comments that closes without an
/// event is an empty response (retried once), not "not an event stream".
#[tokio::test]
async fn a_stream_of_comments_only_is_an_empty_response() {
    let comments = || Script::Stream {
        frames: (0..5).map(|_| Frame::raw(": ping\n\n")).collect(),
        end: StreamEnd::Close,
    };
    let server = FakeServer::start().await.unwrap();
    server.push(comments());
    server.push(comments());
    let client = client(&server, api(Dialect::Chat), fast_config());
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, ProviderError::EmptyResponse { attempts: 2 }),
        "{err:?}"
    );
    assert!(
        events.iter().any(
            |event| matches!(event, StreamEvent::Retrying { reason, .. } if reason == EMPTY_REASON)
        ),
        "{events:?}"
    );
}
