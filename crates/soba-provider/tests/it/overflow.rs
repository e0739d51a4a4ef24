//! Every provider's overflow shape, sent by the fake server, reaches the
//! caller as a context overflow with the stated prompt size (SPEC §6.3);
//! ordinary 400s do not.

use soba_provider::ProviderError;
use soba_provider::client::Api;
use soba_provider::fake::{Dialect, FakeServer, Frame, Script, StreamEnd};
use soba_provider::overflow::OVERFLOW_SAMPLES;

use crate::common::{client, fast_config, run_plain, simple_request};

/// The stated prompt each sample must yield (None: the text gives none).
fn expected_stated(sample: &str) -> Option<u64> {
    match sample {
        "anthropic" => Some(208_656),
        "anthropic-max-tokens" => Some(174_167),
        "openai" => Some(204_308),
        "deepseek" => Some(123_137),
        "vllm" => Some(8),
        "vllm-prompt" => Some(25_938),
        "openai-legacy" => Some(8_977),
        "openrouter" => Some(70_875),
        "google" => Some(1_200_293),
        "xai" => Some(136_973),
        "llama.cpp" => Some(13_392),
        "mistral" => Some(240_000),
        "cerebras" => Some(42_328),
        _ => None,
    }
}

async fn check(api: Api, script: Script, expected: Option<u64>) {
    let server = FakeServer::start().await.unwrap();
    server.push(script);
    let client = client(&server, api, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    match result {
        Err(err @ ProviderError::ContextOverflow { .. }) => {
            assert_eq!(err.stated_prompt(), expected, "{err}");
            assert!(!err.is_retryable());
        }
        other => panic!("expected an overflow, got {other:?}"),
    }
    assert_eq!(
        server.requests().len(),
        1,
        "an overflow is never retried as is"
    );
}

#[tokio::test]
async fn every_provider_shape_is_an_overflow() {
    // Shapes by dialect: the OpenAI-compatible ones through openai-chat.
    for (name, _, _) in OVERFLOW_SAMPLES {
        let api = match *name {
            "anthropic" | "anthropic-max-tokens" | "http-413" => Api::AnthropicMessages,
            "openai-responses" => Api::OpenAiResponses,
            _ => Api::OpenAiChat,
        };
        let script = Script::overflow(name).unwrap();
        check(api, script, expected_stated(name)).await;
    }
}

#[tokio::test]
async fn overflow_reported_inside_streams() {
    let anthropic = Frame::event(
        "error",
        &serde_json::json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "prompt is too long: 213462 tokens > 200000 maximum"},
        }),
    );
    check(
        Api::AnthropicMessages,
        Script::Stream {
            frames: vec![anthropic],
            end: StreamEnd::Close,
        },
        Some(213_462),
    )
    .await;

    let responses = Frame::event(
        "response.failed",
        &serde_json::json!({
            "type": "response.failed",
            "response": {"status": "failed", "error": {"code": "context_length_exceeded", "message": "Your input exceeds the context window of this model. Please adjust your input and try again."}},
        }),
    );
    check(
        Api::OpenAiResponses,
        Script::Stream {
            frames: vec![responses],
            end: StreamEnd::Close,
        },
        None,
    )
    .await;

    let openrouter = Frame::data(
        r#"{"error":{"message":"This endpoint's maximum context length is 16384 tokens. However, you requested about 94307 tokens (94307 of text input). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400}}"#,
    );
    check(
        Api::OpenAiChat,
        Script::Stream {
            frames: vec![openrouter],
            end: StreamEnd::Close,
        },
        Some(94_307),
    )
    .await;
}

#[tokio::test]
async fn ordinary_400s_are_not_overflows() {
    let cases = [
        (
            Api::AnthropicMessages,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.tool_use.id: String should match pattern"}}"#,
        ),
        (
            Api::OpenAiChat,
            r#"{"error":{"message":"Invalid value for 'tool_choice'","type":"invalid_request_error","param":"tool_choice","code":null}}"#,
        ),
        (
            Api::OpenAiResponses,
            r#"{"error":{"message":"Unsupported parameter: 'temperature'","type":"invalid_request_error","code":"unsupported_parameter"}}"#,
        ),
    ];
    for (api, body) in cases {
        let server = FakeServer::start().await.unwrap();
        server.push(Script::error(400, body));
        let client = client(&server, api, fast_config());
        let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProviderError::Rejected { status: 400, .. }),
            "{err:?}"
        );
        assert!(!err.is_overflow() && !err.is_retryable());
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn silent_overflow_is_visible_from_usage() {
    use soba_core::Usage;
    use soba_provider::fake::Reply;
    let server = FakeServer::start().await.unwrap();
    let usage = Usage {
        input: 9_000,
        cache_read: 0,
        cache_write: 0,
        output: 10,
        reasoning: 0,
    };
    server.push(Script::stream(
        Dialect::Chat,
        &Reply::text("ok").with_usage(usage),
    ));
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let reported = result.unwrap().message.usage.unwrap().prompt();
    assert!(soba_provider::is_silent_overflow(reported, 8_192));
    assert!(!soba_provider::is_silent_overflow(reported, 32_768));
}
