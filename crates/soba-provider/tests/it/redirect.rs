//! Redirects (issue 33): no client follows one, so no credential ever
//! reaches another origin. A redirect is an error naming both origins and
//! the fix (the final URL in `baseUrl`), never retried; a redirect to
//! itself is reported as a loop.

use std::sync::Arc;

use serde_json::json;
use soba_core::summarize::{SummarizeError, Summarizer, SummaryRequest};
use soba_provider::ProviderError;
use soba_provider::client::{Api, Endpoint, ModelClient};
use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
use soba_provider::probe::server_context_window;
use soba_provider::registry::ModelRegistry;
use soba_provider::summarizer::LlmSummarizer;
use soba_provider::transport::client_for;

use crate::common::{client, fast_config, run_plain, simple_request};

/// Returns `scheme://host:port` of a fake server.
fn origin(server: &FakeServer) -> String {
    server.url()
}

/// Asserts that `other` never received a request, so never a key.
fn assert_untouched(other: &FakeServer) {
    let requests = other.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.header("x-api-key").is_none() && r.header("authorization").is_none()),
        "a key reached the other origin: {requests:?}"
    );
    assert_eq!(requests.len(), 0, "the redirect was followed");
}

fn dialect(api: Api) -> Dialect {
    match api {
        Api::AnthropicMessages => Dialect::Anthropic,
        Api::OpenAiChat => Dialect::Chat,
        Api::OpenAiResponses => Dialect::Responses,
    }
}

#[tokio::test]
async fn no_client_follows_a_redirect_to_another_origin() {
    for api in [
        Api::AnthropicMessages,
        Api::OpenAiChat,
        Api::OpenAiResponses,
    ] {
        let first = FakeServer::start().await.unwrap();
        let other = FakeServer::start().await.unwrap();
        let path = dialect(api).path();
        let target = format!("{}{path}", other.url());
        for _ in 0..6 {
            first.push(Script::redirect(307, &target));
        }
        other.push(Script::stream(dialect(api), &Reply::text("stolen")));
        let client = client(&first, api, fast_config());
        let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProviderError::Redirected { status: 307, .. }),
            "{api:?}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "the provider at {} redirected (http 307) to another origin, {} ({target}); \
                 soba follows no redirect and never sends the API key to another origin: \
                 put the final URL in the provider's baseUrl",
                origin(&first),
                origin(&other),
            ),
            "{api:?}"
        );
        assert!(!err.is_retryable());
        assert_eq!(
            first.requests().len(),
            1,
            "{api:?}: a redirect is not retried"
        );
        assert_untouched(&other);
    }
}

#[tokio::test]
async fn a_same_origin_redirect_is_not_followed_either() {
    let server = FakeServer::start().await.unwrap();
    server.push_for("/v1/messages", Script::redirect(308, "/v2/messages?x=1"));
    server.push_for(
        "/v2/messages",
        Script::stream(Dialect::Anthropic, &Reply::text("moved")),
    );
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    let url = server.url();
    assert_eq!(
        err.to_string(),
        format!(
            "the provider at {url} redirected (http 308) to {url}/v2/messages; soba follows \
             no redirect, so the API key stays where it was configured: put the final URL in \
             the provider's baseUrl"
        )
    );
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/messages"]);
}

#[tokio::test]
async fn a_redirect_loop_is_named_and_not_retried() {
    let server = FakeServer::start().await.unwrap();
    for _ in 0..20 {
        server.push(Script::redirect(302, "/chat/completions"));
    }
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "redirect loop: {}/chat/completions redirects (http 302) to itself: check the \
             provider's baseUrl and the server's configuration",
            server.url()
        )
    );
    assert!(!err.to_string().contains("network"));
    assert_eq!(server.requests().len(), 1);
    assert!(events.is_empty(), "no retry was announced: {events:?}");
}

#[tokio::test]
async fn a_redirect_without_a_location_says_so() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::error(302, ""));
    let client = client(&server, Api::OpenAiResponses, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(
        result.unwrap_err().to_string(),
        format!(
            "the endpoint {}/responses sent a redirect (http 302) with no location header; \
             soba follows no redirect: check the provider's baseUrl",
            server.url()
        )
    );
}

#[tokio::test]
async fn the_summarizer_never_follows_a_redirect() {
    for api in [
        Api::AnthropicMessages,
        Api::OpenAiChat,
        Api::OpenAiResponses,
    ] {
        let first = FakeServer::start().await.unwrap();
        let other = FakeServer::start().await.unwrap();
        let path = dialect(api).path();
        first.push(Script::redirect(307, &format!("{}{path}", other.url())));
        other.push(Script::stream(dialect(api), &Reply::text("stolen summary")));
        let endpoint = Endpoint::new(first.url()).with_api_key("sk-test-secret");
        let client: Arc<dyn ModelClient> =
            Arc::from(client_for(api, endpoint, fast_config()).unwrap());
        let info = ModelRegistry::new().resolve("openai/gpt-5-mini").unwrap();
        let summarizer = LlmSummarizer::new(client, &info);
        let request = SummaryRequest {
            previous_state: None,
            span_text: "[user]\nhello".into(),
            chunk_index: 0,
            chunk_count: 1,
            earlier_omitted: false,
            instructions: None,
            max_output_tokens: 500,
        };
        match summarizer.summarize(&request).await {
            Err(SummarizeError::Provider { message }) => assert!(
                message.starts_with(&format!(
                    "the provider at {} redirected (http 307) to another origin, {}",
                    first.url(),
                    other.url()
                )),
                "{api:?}: {message}"
            ),
            other => panic!("{api:?}: expected a provider error, got {other:?}"),
        }
        assert_untouched(&other);
    }
}

#[tokio::test]
async fn the_window_probe_never_follows_a_redirect() {
    let first = FakeServer::start().await.unwrap();
    let other = FakeServer::start().await.unwrap();
    for path in ["/props", "/api/ps", "/api/show"] {
        first.push_for(
            path,
            Script::redirect(307, &format!("{}{path}", other.url())),
        );
    }
    other.push(Script::json(&json!({"n_ctx": 8192})));
    let err = server_context_window(&first.url(), "m", Some("sk-probe-secret"))
        .await
        .unwrap_err();
    let url = first.url();
    let to = other.url();
    assert_eq!(
        err.attempts[0],
        format!(
            "{url}/props: the provider at {url} redirected (http 307) to another origin, {to} \
             ({to}/props); soba follows no redirect and never sends the API key to another \
             origin: put the final URL in the provider's baseUrl"
        )
    );
    assert_eq!(err.attempts.len(), 3, "{err}");
    assert_untouched(&other);
}
