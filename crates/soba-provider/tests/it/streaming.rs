//! A streamed answer with tool calls for each client, usage with cache
//! figures, the events in order, and what was sent.

use serde_json::json;
use soba_core::{Block, Usage};
use soba_provider::client::{Api, Endpoint, NeverCancel};
use soba_provider::fake::{Dialect, FakeServer, REDACTED, Reply, Script};
use soba_provider::request::{NativeCompaction, StopReason, StreamEvent};
use soba_provider::transport::OpenAiResponsesClient;

use crate::common::{client, fast_config, run_plain, simple_request};

fn reply() -> Reply {
    Reply::text("I will read two files.")
        .with_model("fake-model-2025")
        .with_thinking("Two files matter.", "SIG-1")
        .with_tool_call("call_a", "read", json!({"path": "src/a.rs"}))
        .with_tool_call("call_b", "read", json!({"path": "src/b.rs"}))
        .with_usage(Usage {
            input: 120,
            cache_read: 4_000,
            cache_write: 0,
            output: 80,
            reasoning: 30,
        })
}

/// Checks the answer and the event sequence every dialect must produce.
fn check_answer(
    events: &[StreamEvent],
    response: &soba_provider::ChatResponse,
    expected_usage: Usage,
) {
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.text(), "I will read two files.");
    assert_eq!(response.message.model.as_deref(), Some("fake-model-2025"));
    assert_eq!(response.message.usage, Some(expected_usage));
    let calls: Vec<_> = response.message.tool_uses().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].input.str_arg("path")),
        ("call_a", Some("src/a.rs"))
    );
    assert_eq!(
        (calls[1].id.as_str(), calls[1].input.str_arg("path")),
        ("call_b", Some("src/b.rs"))
    );

    let text: String = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta(delta) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "I will read two files.");
    let starts: Vec<(usize, &str)> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallStart { index, name, .. } => Some((*index, name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [(0, "read"), (1, "read")]);
    let ends: Vec<usize> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallEnd { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [0, 1]);
    let arguments: String = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments,
            } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(arguments, r#"{"path":"src/b.rs"}"#);
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Done {
            stop_reason: StopReason::ToolUse
        })
    );
    assert!(
        events
            .iter()
            .any(|event| matches!(event, StreamEvent::Usage(_)))
    );
}

#[tokio::test]
async fn anthropic_streams_tool_calls_thinking_and_cache_usage() {
    let server = FakeServer::start().await.unwrap();
    let usage = Usage {
        input: 120,
        cache_read: 4_000,
        cache_write: 1_500,
        output: 80,
        reasoning: 0,
    };
    server.push(Script::stream(
        Dialect::Anthropic,
        &reply().with_usage(usage),
    ));
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let response = result.unwrap();
    // Anthropic reports no reasoning split; cache writes are kept.
    check_answer(&events, &response, usage);
    assert_eq!(usage.prompt(), 5_620);
    assert_eq!(
        response.message.content[0],
        Block::Thinking {
            text: "Two files matter.".into(),
            signature: Some("SIG-1".into())
        }
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some(REDACTED));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(requests[0].body["stream"], true);
}

#[tokio::test]
async fn openai_chat_streams_tool_calls_and_subtracts_cached_tokens() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(Dialect::Chat, &reply()));
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let response = result.unwrap();
    // The fake sent prompt_tokens 4,120 with cached_tokens 4,000.
    check_answer(
        &events,
        &response,
        Usage {
            input: 120,
            cache_read: 4_000,
            cache_write: 0,
            output: 80,
            reasoning: 30,
        },
    );
    let thinking: String = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ThinkingDelta(delta) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "Two files matter.");

    let requests = server.requests();
    assert_eq!(requests[0].path, "/chat/completions");
    assert_eq!(requests[0].header("authorization"), Some(REDACTED));
    assert_eq!(
        requests[0].body["stream_options"],
        json!({"include_usage": true})
    );
}

#[tokio::test]
async fn openai_chat_without_a_key_sends_no_authorization() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(Dialect::Chat, &Reply::text("hi")));
    let endpoint = Endpoint::new(server.url());
    let client =
        soba_provider::transport::client_for(Api::OpenAiChat, endpoint, fast_config()).unwrap();
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().stop_reason, StopReason::EndTurn);
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn openai_responses_streams_function_calls_with_reasoning_usage() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(Dialect::Responses, &reply()));
    let client = client(&server, Api::OpenAiResponses, fast_config());
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let response = result.unwrap();
    check_answer(
        &events,
        &response,
        Usage {
            input: 120,
            cache_read: 4_000,
            cache_write: 0,
            output: 80,
            reasoning: 30,
        },
    );
    // The reasoning item's encrypted content is kept as the signature.
    assert_eq!(
        response.message.content[0],
        Block::Thinking {
            text: "Two files matter.".into(),
            signature: Some("SIG-1".into())
        }
    );

    let requests = server.requests();
    assert_eq!(requests[0].path, "/responses");
    assert_eq!(requests[0].body["store"], false);
}

#[tokio::test]
async fn max_tokens_stop_in_every_dialect() {
    for (dialect, api) in [
        (Dialect::Anthropic, Api::AnthropicMessages),
        (Dialect::Chat, Api::OpenAiChat),
        (Dialect::Responses, Api::OpenAiResponses),
    ] {
        let server = FakeServer::start().await.unwrap();
        server.push(Script::stream(
            dialect,
            &Reply::text("cut here").truncated(),
        ));
        let client = client(&server, api, fast_config());
        let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
        assert_eq!(
            result.unwrap().stop_reason,
            StopReason::MaxTokens,
            "{dialect:?}"
        );
    }
}

#[tokio::test]
async fn compact_keeps_only_the_compaction_item() {
    let server = FakeServer::start().await.unwrap();
    server.push_for("/responses/compact", Script::compaction("gAAAA-opaque"));
    let endpoint = Endpoint::new(server.url()).with_api_key("sk-test-secret");
    let client = OpenAiResponsesClient::new(endpoint, fast_config()).unwrap();
    let span = vec![
        soba_core::Message::user("old work"),
        soba_core::Message::assistant("done"),
    ];
    let previous = NativeCompaction {
        encrypted_content: "previous-item".into(),
    };
    let outcome = client
        .compact(
            "gpt-5-codex",
            "Compact this.",
            &span,
            Some(&previous),
            &NeverCancel,
        )
        .await
        .unwrap();
    assert_eq!(
        outcome.item,
        NativeCompaction {
            encrypted_content: "gAAAA-opaque".into()
        }
    );
    assert_eq!(outcome.usage.unwrap().output, 20);

    let requests = server.requests();
    assert_eq!(requests[0].path, "/responses/compact");
    let input = requests[0].body["input"].as_array().unwrap();
    assert_eq!(
        input[0],
        json!({"type": "compaction", "encrypted_content": "previous-item"})
    );
    assert_eq!(input.len(), 3);
    assert_eq!(requests[0].body["model"], "gpt-5-codex");
}

#[tokio::test]
async fn echo_script_answers_with_the_last_user_text() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::echo(Dialect::Chat, "echo: "));
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().message.text(), "echo: list the files");
}

#[tokio::test]
async fn sse_comments_crlf_and_split_frames_are_tolerated() {
    use soba_provider::fake::{Frame, StreamEnd};
    let server = FakeServer::start().await.unwrap();
    let mut frames = vec![Frame::raw(": OPENROUTER PROCESSING\r\n\r\n")];
    for frame in Dialect::Chat.frames(&Reply::text("split ok")) {
        // Cut every frame in two, with CRLF line ends.
        let text = frame.text.replace('\n', "\r\n");
        let (head, tail) = text.split_at(text.len() / 2);
        frames.push(Frame::raw(head));
        frames.push(Frame::raw(tail));
    }
    server.push(Script::Stream {
        frames,
        end: StreamEnd::Close,
    });
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().message.text(), "split ok");
}
