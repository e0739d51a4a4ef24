//! Snapshots of the exact requests each client sends (path, headers with
//! keys redacted, body), for the same rich request — Anthropic's cache
//! breakpoints included.

use serde_json::{Value, json};
use soba_provider::client::{Api, NeverCancel};
use soba_provider::fake::{Dialect, FakeServer, RecordedRequest, Reply, Script};

use crate::common::{client, fast_config, rich_request, run_plain};

/// Drops the headers that vary between runs (port, length, agent).
fn normalise(request: &RecordedRequest) -> Value {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "host" | "content-length" | "user-agent"))
        .cloned()
        .collect();
    headers.sort();
    json!({
        "method": request.method,
        "path": request.path,
        "headers": headers.into_iter().map(|(name, value)| json!([name, value])).collect::<Vec<_>>(),
        "body": request.body,
    })
}

async fn sent(api: Api, dialect: Dialect, model: &str) -> Value {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::stream(dialect, &Reply::text("ok")));
    let client = client(&server, api, fast_config());
    let (result, _) = run_plain(client.as_ref(), &rich_request(model)).await;
    result.unwrap();
    normalise(&server.requests()[0])
}

#[tokio::test]
async fn anthropic_request() {
    let sent = sent(
        Api::AnthropicMessages,
        Dialect::Anthropic,
        "claude-sonnet-4-5",
    )
    .await;
    insta::assert_json_snapshot!("anthropic_request", sent);
}

#[tokio::test]
async fn openai_chat_request() {
    let sent = sent(Api::OpenAiChat, Dialect::Chat, "gpt-4.1").await;
    insta::assert_json_snapshot!("openai_chat_request", sent);
}

#[tokio::test]
async fn openai_responses_request() {
    let sent = sent(Api::OpenAiResponses, Dialect::Responses, "gpt-5").await;
    insta::assert_json_snapshot!("openai_responses_request", sent);
}

#[tokio::test]
async fn responses_compact_request() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::compaction("opaque"));
    let endpoint =
        soba_provider::client::Endpoint::new(server.url()).with_api_key("sk-test-secret");
    let client =
        soba_provider::transport::OpenAiResponsesClient::new(endpoint, fast_config()).unwrap();
    let request = rich_request("gpt-5-codex");
    client
        .compact(
            "gpt-5-codex",
            "Summarize the span.",
            &request.messages[1..5],
            None,
            &NeverCancel,
        )
        .await
        .unwrap();
    insta::assert_json_snapshot!(
        "responses_compact_request",
        normalise(&server.requests()[0])
    );
}
