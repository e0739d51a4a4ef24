//! Idle timeouts and cancellation: client timeouts of 300 ms against fake
//! stalls of 5 s or more (SPEC §17).

use std::time::{Duration, Instant};

use soba_provider::ProviderError;
use soba_provider::client::Api;
use soba_provider::fake::{Dialect, FakeServer, Reply, Script, StreamEnd};
use soba_provider::request::StreamEvent;
use tokio_util::sync::CancellationToken;

use crate::common::{client, fast_config, run, run_plain, simple_request};

const STALL: Duration = Duration::from_secs(5);

#[tokio::test]
async fn stall_before_headers_hits_the_idle_timeout() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::Stall(STALL));
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let started = Instant::now();
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert!(
        matches!(result, Err(ProviderError::IdleTimeout { idle, .. }) if idle == Duration::from_millis(300)),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_500));
    assert_eq!(server.requests().len(), 1, "an idle timeout is not retried");
}

#[tokio::test]
async fn stall_mid_stream_hits_the_idle_timeout() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::stream(Dialect::Responses, &Reply::text("slow thinker"))
            .cut_after(3, StreamEnd::Stall(STALL)),
    );
    let client = client(&server, Api::OpenAiResponses, fast_config());
    let started = Instant::now();
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    assert!(
        matches!(result, Err(ProviderError::IdleTimeout { .. })),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_500));
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, StreamEvent::Done { .. }))
    );
}

#[tokio::test]
async fn slow_but_steady_streams_are_not_idle() {
    let server = FakeServer::start().await.unwrap();
    // Every frame 50 ms apart: slower than nothing, well inside 300 ms.
    server.push(
        Script::stream(Dialect::Chat, &Reply::text("a slow summary"))
            .with_frame_delay(Duration::from_millis(50)),
    );
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    assert_eq!(result.unwrap().message.text(), "a slow summary");
}

#[tokio::test]
async fn cancel_mid_stream_closes_the_connection() {
    let server = FakeServer::start().await.unwrap();
    let long_text = "word ".repeat(400);
    server.push(
        Script::stream(Dialect::Anthropic, &Reply::text(long_text))
            .with_frame_delay(Duration::from_millis(20)),
    );
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let started = Instant::now();
    let mut events = Vec::new();
    let mut on_event = |event: StreamEvent| {
        if matches!(event, StreamEvent::TextDelta(_)) {
            trigger.cancel();
        }
        events.push(event);
    };
    let result = client
        .stream(&simple_request(), &cancel, &mut on_event)
        .await;
    assert!(
        matches!(result, Err(ProviderError::Cancelled)),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_000));
    assert_eq!(
        events
            .iter()
            .filter(|event| matches!(event, StreamEvent::TextDelta(_)))
            .count(),
        1
    );
    assert!(
        server.wait_for_aborted(1, Duration::from_secs(1)).await,
        "the server saw the connection close"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn dropping_the_future_closes_the_connection() {
    let server = FakeServer::start().await.unwrap();
    server.push(
        Script::stream(Dialect::Chat, &Reply::text("x".repeat(2_000)))
            .with_frame_delay(Duration::from_millis(20)),
    );
    let client = client(&server, Api::OpenAiChat, fast_config());
    let request = simple_request();
    let outcome = tokio::time::timeout(
        Duration::from_millis(200),
        run_plain(client.as_ref(), &request),
    )
    .await;
    assert!(
        outcome.is_err(),
        "the stream was still running when dropped"
    );
    assert_eq!(server.streams_started(), 1);
    assert!(server.wait_for_aborted(1, Duration::from_secs(1)).await);
}

#[tokio::test]
async fn cancel_during_backoff_returns_promptly() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::rate_limited("30"));
    let client = client(&server, Api::OpenAiResponses, fast_config());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let (result, _) = run(client.as_ref(), &simple_request(), &cancel).await;
    assert!(
        matches!(result, Err(ProviderError::Cancelled)),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_000));
}

#[tokio::test]
async fn already_cancelled_sends_nothing() {
    let server = FakeServer::start().await.unwrap();
    let client = client(&server, Api::AnthropicMessages, fast_config());
    let cancel = CancellationToken::new();
    cancel.cancel();
    let (result, _) = run(client.as_ref(), &simple_request(), &cancel).await;
    assert!(matches!(result, Err(ProviderError::Cancelled)));
    assert!(server.requests().is_empty());
}
