//! Clear, non-retried errors: 401/403/404, malformed bodies and streams.

use soba_provider::ProviderError;
use soba_provider::client::Api;
use soba_provider::fake::{FakeServer, Frame, Script, StreamEnd};

use crate::common::{client, fast_config, run_plain, simple_request};

async fn fail(api: Api, script: Script) -> (ProviderError, usize) {
    let server = FakeServer::start().await.unwrap();
    server.push(script);
    server.push(Script::error(500, "must not be requested"));
    let client = client(&server, api, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    (result.unwrap_err(), server.requests().len())
}

#[tokio::test]
async fn unauthorized_is_clear_and_not_retried() {
    let body =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let (err, n_requests) = fail(Api::AnthropicMessages, Script::error(401, body)).await;
    assert!(
        matches!(err, ProviderError::Unauthorized { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(n_requests, 1);
    let message = err.to_string();
    assert!(
        message
            .starts_with("authentication failed (http 401): check the provider's API key variable"),
        "{message}"
    );
    assert!(message.contains("invalid x-api-key"));
    assert!(!message.contains("sk-test-secret"));

    let (err, _) = fail(
        Api::OpenAiChat,
        Script::error(
            403,
            r#"{"error":{"message":"Project does not have access to model"}}"#,
        ),
    )
    .await;
    assert!(
        matches!(err, ProviderError::Unauthorized { status: 403, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn not_found_names_the_url() {
    let body = r#"{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}"#;
    let (err, n_requests) = fail(Api::OpenAiResponses, Script::error(404, body)).await;
    assert_eq!(n_requests, 1);
    match &err {
        ProviderError::NotFound { url, body } => {
            assert!(url.ends_with("/responses"), "{url}");
            assert!(body.contains("model_not_found"));
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("check the provider's baseUrl and the model name")
    );
}

#[tokio::test]
async fn a_non_stream_body_is_malformed() {
    let script = Script::Stream {
        frames: vec![Frame::raw("<html><body>Welcome to nginx!</body></html>")],
        end: StreamEnd::Close,
    };
    let (err, n_requests) = fail(Api::OpenAiChat, script).await;
    assert!(matches!(err, ProviderError::Malformed { .. }), "{err:?}");
    assert!(err.to_string().contains("nginx"));
    assert_eq!(n_requests, 1);
}

#[tokio::test]
async fn a_bad_json_event_is_malformed() {
    let script = Script::Stream {
        frames: vec![
            Frame::event(
                "message_start",
                &serde_json::json!({"type": "message_start"}),
            ),
            Frame::raw("event: content_block_delta\ndata: {not json\n\n"),
        ],
        end: StreamEnd::Close,
    };
    let (err, n_requests) = fail(Api::AnthropicMessages, script).await;
    assert!(matches!(err, ProviderError::Malformed { .. }), "{err:?}");
    assert_eq!(n_requests, 1);
}

#[tokio::test]
async fn a_stream_that_ends_early_after_content_is_interrupted() {
    use soba_provider::fake::{Dialect, Reply};
    let script = Script::stream(Dialect::Responses, &Reply::text("half an answer"))
        .cut_after(4, StreamEnd::Close);
    let (err, n_requests) = fail(Api::OpenAiResponses, script).await;
    assert!(
        matches!(err, ProviderError::StreamInterrupted { .. }),
        "{err:?}"
    );
    assert_eq!(n_requests, 1);
}
