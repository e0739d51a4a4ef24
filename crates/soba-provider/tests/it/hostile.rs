//! Providers that misbehave (issue 33, the attacker's findings): streams
//! of keep-alives only, a reply that never ends, keys echoed back, a
//! `baseUrl` with a query, fragment, user info or another scheme, a
//! redirect whose `location` is no URL, several `choices`, an empty 200
//! body. Each is named for what it is, and no secret reaches a message.

use std::time::Duration;

use serde_json::json;
use soba_provider::ProviderError;
use soba_provider::client::{Api, Endpoint, ModelClient};
use soba_provider::fake::{FakeServer, Frame, Script, StreamEnd};
use soba_provider::request::StreamEvent;
use soba_provider::transport::{HttpConfig, client_for};

use crate::common::{client, fast_config, run_plain, simple_request};

/// Returns `n` copies of `frame`, each written `every` after the last:
/// a stream that stays busy for `n × every` without saying anything.
fn repeated(frame: Frame, n: usize, every: Duration) -> Vec<Frame> {
    (0..n).map(|_| frame.clone().delayed(every)).collect()
}

fn keep_alive(frames: Vec<Frame>) -> Script {
    Script::Stream {
        frames,
        end: StreamEnd::Close,
    }
}

fn client_with_key(server: &FakeServer, api: Api, key: &str) -> Box<dyn ModelClient> {
    let endpoint = Endpoint::new(server.url()).with_api_key(key);
    client_for(api, endpoint, fast_config()).unwrap()
}

#[tokio::test]
async fn keep_alives_alone_hit_the_idle_timeout() {
    let every = Duration::from_millis(50);
    // 100 × 50 ms = 5 s of keep-alives against an idle timeout of 300 ms.
    let cases = [
        (
            Api::OpenAiChat,
            "/chat/completions",
            repeated(Frame::raw(": ping\n\n"), 100, every),
        ),
        (
            Api::OpenAiChat,
            "/chat/completions",
            repeated(Frame::raw("data:\n\n"), 100, every),
        ),
        (
            Api::AnthropicMessages,
            "/v1/messages",
            repeated(Frame::event("ping", &json!({"type": "ping"})), 100, every),
        ),
        (
            Api::OpenAiResponses,
            "/responses",
            repeated(Frame::raw(": keep-alive\r\n\r\n"), 100, every),
        ),
    ];
    for (api, path, frames) in cases {
        let server = FakeServer::start().await.unwrap();
        server.push(keep_alive(frames));
        let client = client(&server, api, fast_config());
        let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProviderError::IdleTimeout { idle, .. } if idle == Duration::from_millis(300)),
            "{api:?}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "no progress from {}{path} for 300 ms (keep-alives do not count): retry, or raise http.idleTimeoutMs",
                server.url()
            ),
            "{api:?}"
        );
        assert!(events.is_empty(), "{api:?}: {events:?}");
        assert_eq!(server.requests().len(), 1, "{api:?}: not retried");
    }
}

#[tokio::test]
async fn progress_resets_the_idle_timer_but_not_the_total_bound() {
    let server = FakeServer::start().await.unwrap();
    // A text delta every 100 ms (well within the 300 ms idle timeout),
    // for 5 s, against a total bound of 600 ms.
    let delta = Frame::data(r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#);
    server.push(keep_alive(repeated(delta, 50, Duration::from_millis(100))));
    let config = HttpConfig {
        stream_timeout: Duration::from_millis(600),
        ..fast_config()
    };
    let client = client(&server, Api::OpenAiChat, config);
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, ProviderError::StreamTooLong { limit, .. } if limit == Duration::from_millis(600)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the reply from {}/chat/completions was still streaming after 600 ms: retry, or raise http.streamTimeoutMs",
            server.url()
        )
    );
    // Progress did arrive, so this was not an idle timeout.
    assert!(
        events
            .iter()
            .any(|event| matches!(event, StreamEvent::TextDelta(_)))
    );
}

/// A key of no known shape: only the configured value can find it.
const ODD_KEY: &str = "k3y_Of-0dd.Shape~42";

#[tokio::test]
async fn a_key_echoed_back_never_reaches_a_message() {
    let echoes = [
        Script::error(
            401,
            format!(r#"{{"error":{{"message":"Incorrect API key provided: {ODD_KEY}"}}}}"#),
        ),
        Script::error(
            400,
            format!("bad request for key {ODD_KEY} and Bearer {ODD_KEY}"),
        ),
        Script::error(404, format!("no such model (key={ODD_KEY})")),
        Script::Stream {
            frames: vec![Frame::data(&format!(
                r#"{{"error":{{"code":"invalid_request_error","message":"key {ODD_KEY} is revoked"}}}}"#
            ))],
            end: StreamEnd::Close,
        },
    ];
    for script in echoes {
        let server = FakeServer::start().await.unwrap();
        server.push(script.clone());
        let client = client_with_key(&server, Api::OpenAiChat, ODD_KEY);
        let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        let shown = format!("{err} / {err:?}");
        assert!(!shown.contains(ODD_KEY), "{script:?}: {shown}");
        assert!(shown.contains("[REDACTED:api_key]"), "{script:?}: {shown}");
    }
    // Retry notices quote nothing of the body, and the final error is
    // scrubbed too; the Anthropic header is a key as well.
    let server = FakeServer::start().await.unwrap();
    for _ in 0..5 {
        server.push(Script::error(503, format!("overloaded, key {ODD_KEY}")));
    }
    let client = client_with_key(&server, Api::AnthropicMessages, ODD_KEY);
    let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider server error (http 503) after 5 attempt(s): retry later; body: overloaded, key [REDACTED:api_key]"
    );
    assert!(!format!("{events:?}").contains(ODD_KEY));
}

#[tokio::test]
async fn a_key_of_a_known_shape_is_redacted_even_when_not_configured() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::error(
        400,
        "your other key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA is also wrong",
    ));
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let shown = result.unwrap_err().to_string();
    assert!(!shown.contains("AAAAAAAAAAAAAAAA"), "{shown}");
    assert!(shown.contains("[REDACTED:"), "{shown}");
}

#[tokio::test]
async fn a_base_url_query_is_kept_after_the_joined_path_and_never_shown() {
    const SECRET: &str = "q-secret-0123456789";
    let server = FakeServer::start().await.unwrap();
    server.push(Script::error(
        404,
        format!("unknown model; you sent key={SECRET}"),
    ));
    let endpoint = Endpoint::new(format!("{}/v1/?key={SECRET}&v=1", server.url()));
    let client = client_for(Api::OpenAiChat, endpoint, fast_config()).unwrap();
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].query.as_deref(),
        Some(&*format!("key={SECRET}&v=1"))
    );
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "not found (http 404) at {}/v1/chat/completions?key=[REDACTED]&v=[REDACTED]: check the provider's baseUrl and the model name; body: unknown model; you sent key=[REDACTED:api_key]",
            server.url()
        )
    );
}

#[tokio::test]
async fn a_connection_failure_never_shows_the_query() {
    // A port nothing listens on: bind one, then drop it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let endpoint = Endpoint::new(format!("http://127.0.0.1:{port}/v1?token=abc"));
    let config = HttpConfig {
        retry: soba_provider::transport::RetryPolicy {
            max_retries: 0,
            ..fast_config().retry
        },
        ..fast_config()
    };
    let client = client_for(Api::OpenAiChat, endpoint, config).unwrap();
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let err = result.unwrap_err();
    let mut shown = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(inner) = cause {
        shown.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    assert!(
        shown.starts_with(&format!(
            "cannot reach http://127.0.0.1:{port}/v1/chat/completions?token=[REDACTED] after 1 attempt(s)"
        )),
        "{shown}"
    );
    assert!(!shown.contains("token=abc"), "{shown}");
}

#[tokio::test]
async fn a_base_url_with_a_fragment_user_info_or_another_scheme_is_a_config_error() {
    for (base_url, expected) in [
        (
            "https://api.example.com/v1#frag",
            "invalid provider configuration: the provider's baseUrl https://api.example.com/v1 has a fragment (#…), which is never sent to a server; remove it",
        ),
        (
            "https://user:hunter2-password@api.example.com/v1",
            "invalid provider configuration: the provider's baseUrl carries a user name or password (user:password@host); remove it: the key is read from the variable the provider's apiKeyEnv names",
        ),
        (
            "ftp://api.example.com/v1",
            "invalid provider configuration: the provider's baseUrl uses the scheme \"ftp\": only http and https are supported",
        ),
        (
            "api.example.com/v1?key=hunter2-password",
            "invalid provider configuration: the provider's baseUrl \"api.example.com/v1?key=[REDACTED]\" is not an absolute URL (relative URL without a base): write it as https://host/path",
        ),
    ] {
        for api in [
            Api::AnthropicMessages,
            Api::OpenAiChat,
            Api::OpenAiResponses,
        ] {
            let endpoint = Endpoint::new(base_url).with_api_key("sk-x");
            let err = client_for(api, endpoint, fast_config())
                .err()
                .expect("the client is refused");
            assert!(
                matches!(err, ProviderError::InvalidConfig { .. }),
                "{base_url}: {err:?}"
            );
            assert_eq!(err.to_string(), expected, "{base_url}");
            assert!(!err.to_string().contains("hunter2"));
        }
    }
}

#[tokio::test]
async fn a_redirect_with_an_invalid_location_is_named_as_received() {
    for (location, quoted) in [
        ("http://[::1", r#""http://[::1""#),
        ("mailto:ops@example.com", r#""mailto:ops@example.com""#),
        ("http://exa mple.com/v1", r#""http://exa mple.com/v1""#),
        ("https://exämple.com/ü", r#""https://exämple.com/ü""#),
    ] {
        let server = FakeServer::start().await.unwrap();
        server.push(Script::redirect(301, location));
        let client = client(&server, Api::OpenAiChat, fast_config());
        let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProviderError::Redirected { status: 301, .. }),
            "{location}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "the endpoint {}/chat/completions sent a redirect (http 301) whose location {quoted} is not a valid URL; soba follows no redirect: check the provider's baseUrl",
                server.url()
            )
        );
        assert_eq!(server.requests().len(), 1, "{location}: not retried");
    }
}

#[tokio::test]
async fn only_choice_zero_is_used() {
    let server = FakeServer::start().await.unwrap();
    server.push(Script::Stream {
        frames: vec![
            Frame::data(
                r#"{"choices":[{"index":1,"delta":{"content":"SECOND "}},{"index":0,"delta":{"content":"first "}}]}"#,
            ),
            Frame::data(r#"{"choices":[{"index":1,"delta":{"content":"more second"}}]}"#),
            Frame::data(r#"{"choices":[{"index":0,"delta":{"content":"answer"}}]}"#),
            Frame::data(r#"{"choices":[{"index":1,"delta":{},"finish_reason":"length"}]}"#),
            Frame::data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#),
            Frame::data("[DONE]"),
        ],
        end: StreamEnd::Close,
    });
    let client = client(&server, Api::OpenAiChat, fast_config());
    let (result, _) = run_plain(client.as_ref(), &simple_request()).await;
    let response = result.unwrap();
    assert_eq!(response.message.text(), "first answer");
    assert_eq!(
        response.stop_reason,
        soba_provider::request::StopReason::EndTurn
    );
}

#[tokio::test]
async fn an_empty_200_body_is_named_after_one_retry() {
    for (api, path) in [
        (Api::OpenAiChat, "/chat/completions"),
        (Api::AnthropicMessages, "/v1/messages"),
        (Api::OpenAiResponses, "/responses"),
    ] {
        let server = FakeServer::start().await.unwrap();
        for _ in 0..2 {
            server.push(Script::Stream {
                frames: Vec::new(),
                end: StreamEnd::Close,
            });
        }
        let client = client(&server, api, fast_config());
        let (result, events) = run_plain(client.as_ref(), &simple_request()).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProviderError::EmptyBody { attempts: 2, .. }),
            "{api:?}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "the endpoint {}{path} returned an empty body (http 200, no event stream, 2 attempt(s)): check that baseUrl points at the API itself (OpenAI-compatible servers usually end in /v1) and that the server supports streaming",
                server.url()
            )
        );
        let retries: Vec<_> = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Retrying { reason, .. } => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            retries,
            ["the endpoint returned an empty body (http 200)"],
            "{api:?}"
        );
        assert_eq!(server.requests().len(), 2, "{api:?}");
    }
}
