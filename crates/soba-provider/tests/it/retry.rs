//! Retries (SPEC §10.1): 429 with retry-after, 5xx with backoff, dropped
//! connections before the first content event, and the cases that must
//! not be retried.

use std::time::{Duration, Instant};

use soba_provider::ProviderError;
use soba_provider::client::Api;
use soba_provider::fake::{Dialect, FakeServer, Reply, Script, StreamEnd};
use soba_provider::request::StreamEvent;

use crate::common::{client, fast_config, run_plain, simple_request};

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::rate_limited("1"));
    server.push(Script::stream(
        Dialect::Anthropic,
        &Reply::text("after the wait"),
    ));
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let started = Instant::now();
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let elapsed = started.elapsed();
    assert_eq!(result.unwrap().message.text(), "after the wait");
    // The wait is told to the listener before it starts.
    let retries: Vec<&StreamEvent> = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::Retrying { .. }))
        .collect();
    assert_eq!(
        retries,
        [&StreamEvent::Retrying {
            attempt: 2,
            max_attempts: fast_config().retry.max_retries + 1,
            delay: Duration::from_secs(1),
            reason: "rate limited (HTTP 429)".into(),
        }]
    );
    // The 10 ms base delay would have retried at once: retry-after won.
    assert!(
        elapsed >= Duration::from_secs(1),
        "retried after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "retried after {elapsed:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn retry_after_ms_is_honoured() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::rate_limited("0").with_header("retry-after-ms", "150"));
    server.push(Script::stream(Dialect::Chat, &Reply::text("ok")));
    let client = client(&server, Api::OpenAiChat, fast_config());
    let started = Instant::now();
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert!(result.is_ok());
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn retry_after_beyond_the_ceiling_fails_at_once() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::rate_limited("120"));
    let client = client(&server, Api::OpenAiResponses, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    match result.unwrap_err() {
        ProviderError::RateLimited {
            attempts,
            retry_after,
            ..
        } => {
            assert_eq!(attempts, 1);
            assert_eq!(retry_after, Some(Duration::from_secs(120)));
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_back_off_then_succeed() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::error(503, "upstream unavailable"));
    server.push(Script::error(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ));
    server.push(Script::stream(
        Dialect::Anthropic,
        &Reply::text("third time"),
    ));
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().message.text(), "third time");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn four_retries_then_a_clear_error() {
    let server = FakeServer::start().await.unwrap();
    for _ in 0..6 {
        server.push(Script::error(500, "boom"));
    }
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Server {
                status: 500,
                attempts: 5,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(server.requests().len(), 5);
    assert_eq!(server.pending(), 1);
}

#[tokio::test]
async fn dropped_before_content_is_retried() {
    let server = FakeServer::start().await.unwrap();
    // Only message_start and ping reach the client, then the connection breaks.
    server.push(
        Script::stream(Dialect::Anthropic, &Reply::text("lost")).cut_after(2, StreamEnd::Drop),
    );
    server.push(Script::stream(
        Dialect::Anthropic,
        &Reply::text("second try"),
    ));
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().message.text(), "second try");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn dropped_after_content_is_not_retried() {
    let server = FakeServer::start().await.unwrap();
    // The first text delta arrives, then the connection breaks.
    server.push(
        Script::stream(Dialect::Chat, &Reply::text("partial answer here"))
            .cut_after(3, StreamEnd::Drop),
    );
    server.push(Script::stream(
        Dialect::Chat,
        &Reply::text("must not be requested"),
    ));
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    assert!(
        matches!(result, Err(ProviderError::StreamInterrupted { .. })),
        "{result:?}"
    );
    assert!(events.iter().any(|event| event.is_content()));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn overloaded_event_before_content_is_retried() {
    use soba_provider::fake::Frame;
    let server = FakeServer::start().await.unwrap();
    let overloaded = Frame::event(
        "error",
        &serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    server.push(Script::Stream {
        frames: vec![overloaded],
        end: StreamEnd::Close,
    });
    server.push(Script::stream(
        Dialect::Anthropic,
        &Reply::text("recovered"),
    ));
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().message.text(), "recovered");
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let endpoint = soba_provider::client::Endpoint::new(format!("http://127.0.0.1:{port}"));
    let client =
        soba_provider::transport::client_for(Api::OpenAiChat, endpoint, fast_config()).unwrap();
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, ProviderError::Connect { attempts: 5, .. }),
        "{err:?}"
    );
    assert!(err.to_string().starts_with(&format!(
        "cannot reach http://127.0.0.1:{port}/chat/completions after 5 attempt(s)"
    )));
}
