//! The LLM summarizer against the fake server (SPEC §9.2): the request it
//! sends in each dialect, text and usage back, and the mapping of overflow,
//! cancellation and other failures onto soba-core's `SummarizeError`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use soba_core::TokenCount;
use soba_core::summarize::{SummarizeError, Summarizer, SummaryRequest};
use soba_provider::client::{Api, Endpoint, ModelClient};
use soba_provider::fake::{Dialect, FakeServer, Reply, Script, StreamEnd};
use soba_provider::registry::{ModelInfo, ModelOverride, ModelRegistry};
use soba_provider::summarizer::LlmSummarizer;
use soba_provider::transport::client_for;
use tokio_util::sync::CancellationToken;

use crate::common::fast_config;

fn info(id: &str) -> ModelInfo {
    ModelRegistry::new().resolve(id).unwrap()
}

fn summarizer(server: &FakeServer, api: Api, id: &str) -> LlmSummarizer {
    let endpoint = Endpoint::new(server.url()).with_api_key("sk-test-secret");
    let client: Arc<dyn ModelClient> = Arc::from(client_for(api, endpoint, fast_config()).unwrap());
    LlmSummarizer::new(client, &info(id))
}

fn request(previous: Option<&str>) -> SummaryRequest {
    SummaryRequest {
        previous_state: previous.map(str::to_owned),
        span_text: "[user]\nfix the parser\n\n[assistant]\nreading src/parse.rs".into(),
        chunk_index: 0,
        chunk_count: 1,
        earlier_omitted: false,
        instructions: None,
        max_output_tokens: 2_000,
    }
}

const SUMMARY: &str = "## Goal\nfix the parser\n## Constraints\n(none)\n## Done\n(none)\n## In progress\nreading src/parse.rs\n## Pending\n(none)\n## Decisions\n(none)\n## Blockers\n(none)\n## Next steps\nrun the tests\nEND-OF-SUMMARY";

#[tokio::test]
async fn anthropic_request_is_the_prompt_alone() {
    let server = FakeServer::start().await.unwrap();
    let reply = Reply::text(SUMMARY).with_usage(soba_core::Usage {
        input: 310,
        cache_read: 0,
        cache_write: 0,
        output: 90,
        reasoning: 0,
    });
    server.push(Script::stream(Dialect::Anthropic, &reply));
    let summarizer = summarizer(
        &server,
        Api::AnthropicMessages,
        "anthropic/claude-haiku-4-5",
    );
    // 200,000 / 1.25, the Claude calibration seed.
    assert_eq!(summarizer.window_tokens(), TokenCount::new(160_000));
    let request = request(None);
    let response = summarizer.summarize(&request).await.unwrap();
    assert_eq!(response.text, SUMMARY);
    assert_eq!(response.model, "anthropic/claude-haiku-4-5");
    let usage = response.usage.unwrap();
    assert_eq!((usage.input, usage.output), (310, 90));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    let body = &requests[0].body;
    assert_eq!(body["model"], "claude-haiku-4-5");
    assert_eq!(body["max_tokens"], 2_000);
    assert!(body.get("system").is_none(), "{body}");
    assert!(body.get("tools").is_none(), "{body}");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    let text = Dialect::Anthropic.last_user_text(body);
    assert_eq!(text, request.prompt());
    assert!(text.contains("<conversation>\n[user]\nfix the parser"));
}

#[tokio::test]
async fn responses_and_chat_carry_the_previous_state() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::echo(Dialect::Responses, ""));
    server.push(Script::echo(Dialect::Chat, ""));
    let request = request(Some("## Goal\nthe old goal"));
    let responses = summarizer(&server, Api::OpenAiResponses, "openai/gpt-5-mini");
    // gpt-5-mini: 272,000 input + 32,000 output (the registry's usable
    // window), seed 1.0.
    assert_eq!(responses.window_tokens(), TokenCount::new(304_000));
    let echoed = responses.summarize(&request).await.unwrap();
    assert_eq!(echoed.text, request.prompt());
    let chat = summarizer(&server, Api::OpenAiChat, "openrouter/openai/gpt-5-mini");
    let echoed = chat.summarize(&request).await.unwrap();
    assert!(
        echoed
            .text
            .contains("<previous-state>\n## Goal\nthe old goal\n</previous-state>")
    );

    let requests = server.requests();
    assert_eq!(requests[0].path, "/responses");
    assert_eq!(
        requests[0].body["input"],
        json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": request.prompt()}]}])
    );
    assert_eq!(requests[0].body["max_output_tokens"], 2_000);
    assert_eq!(requests[0].body["model"], "gpt-5-mini");
    assert!(requests[0].body.get("instructions").is_none());
    assert_eq!(requests[1].path, "/chat/completions");
    assert_eq!(requests[1].body["model"], "openai/gpt-5-mini");
    assert_eq!(
        requests[1].body["messages"],
        json!([{"role": "user", "content": request.prompt()}])
    );
}

#[tokio::test]
async fn the_output_budget_is_capped_at_the_models_maximum() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(Dialect::Chat, &Reply::text(SUMMARY)));
    let mut registry = ModelRegistry::new();
    registry.set_override(
        "ollama/small",
        ModelOverride {
            context_window: Some(8_192),
            max_output_tokens: Some(1_024),
            ..ModelOverride::default()
        },
    );
    let model = registry.resolve("ollama/small").unwrap();
    let endpoint = Endpoint::new(server.url());
    let client: Arc<dyn ModelClient> =
        Arc::from(client_for(Api::OpenAiChat, endpoint, fast_config()).unwrap());
    let summarizer = LlmSummarizer::new(client, &model);
    // 8,192 / 1.1 (the seed of a model the registry does not know), floored.
    assert_eq!(summarizer.window_tokens(), TokenCount::new(7_447));
    summarizer.summarize(&request(None)).await.unwrap();
    assert_eq!(server.requests()[0].body["max_tokens"], 1_024);
}

#[tokio::test]
async fn every_providers_overflow_is_a_summarizer_overflow() {
    for (provider, api) in [
        ("anthropic", Api::AnthropicMessages),
        ("openai", Api::OpenAiChat),
        ("openai-responses", Api::OpenAiResponses),
        ("vllm", Api::OpenAiChat),
    ] {
        let server = FakeServer::start().await.unwrap();
        server.push(Script::overflow(provider).unwrap());
        let summarizer = summarizer(&server, api, "openai/gpt-5-mini");
        match summarizer.summarize(&request(None)).await {
            Err(SummarizeError::Overflow { detail }) => {
                assert!(detail.starts_with("context overflow (http 400"), "{detail}")
            }
            other => panic!("{provider}: expected an overflow, got {other:?}"),
        }
        assert_eq!(server.requests().len(), 1, "{provider}: never retried");
    }
}

#[tokio::test]
async fn other_failures_are_provider_errors() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::error(401, r#"{"error":{"message":"bad key"}}"#));
    let summarizer = summarizer(&server, Api::OpenAiChat, "openai/gpt-5-mini");
    match summarizer.summarize(&request(None)).await {
        Err(SummarizeError::Provider { message }) => {
            assert!(
                message.starts_with("authentication failed (http 401)"),
                "{message}"
            )
        }
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_cancel_ends_a_stalled_summary_as_cancelled() {
    let server = FakeServer::start().await.unwrap();
    let stalled = Script::stream(Dialect::Chat, &Reply::text(SUMMARY))
        .cut_after(2, StreamEnd::Stall(Duration::from_secs(5)));
    server.push(stalled);
    let cancel = CancellationToken::new();
    let summarizer = summarizer(&server, Api::OpenAiChat, "openai/gpt-5-mini")
        .with_cancellation(Arc::new(cancel.clone()));
    let fire = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fire.cancel();
    });
    let started = Instant::now();
    let result = summarizer.summarize(&request(None)).await;
    assert!(
        matches!(result, Err(SummarizeError::Cancelled)),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(server.wait_for_aborted(1, Duration::from_millis(500)).await);
}

#[tokio::test]
async fn dropping_a_stalled_summary_closes_the_stream() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::stream(Dialect::Chat, &Reply::text(SUMMARY))
            .cut_after(2, StreamEnd::Stall(Duration::from_secs(5))),
    );
    let summarizer = summarizer(&server, Api::OpenAiChat, "openai/gpt-5-mini");
    let request = request(None);
    // The barrier's per-chunk deadline drops the future.
    let timed =
        tokio::time::timeout(Duration::from_millis(200), summarizer.summarize(&request)).await;
    assert!(timed.is_err());
    assert!(server.wait_for_aborted(1, Duration::from_millis(500)).await);
}
