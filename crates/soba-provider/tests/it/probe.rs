//! The context-window probe against the loopback fake server: llama.cpp's
//! `/props`, then Ollama's `/api/ps` and `/api/show`, in that order.

use serde_json::json;
use soba_provider::fake::{FakeServer, Script};
use soba_provider::probe::server_context_window;

#[tokio::test]
async fn llama_cpp_props_answers_first() {
    let server = FakeServer::start().await.unwrap();
    server.push_for(
        "/props",
        Script::json(&json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1})),
    );
    let window = server_context_window(&format!("{}/v1", server.url()), "local", None)
        .await
        .unwrap();
    assert_eq!(window.tokens, 8192);
    assert_eq!(window.source, format!("n_ctx from {}/props", server.url()));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/props")
    );
}

#[tokio::test]
async fn ollama_is_asked_for_the_loaded_model_then_its_parameters() {
    let server = FakeServer::start().await.unwrap();
    server.push_for("/props", Script::error(404, "404 page not found"));
    server.push_for(
        "/api/ps",
        Script::json(&json!({"models": [{"name": "llama3:latest", "context_length": 2048}]})),
    );
    server.push_for(
        "/api/show",
        Script::json(&json!({"parameters": "num_ctx 12288\ntemperature 0.2",
                              "model_info": {"qwen2.context_length": 32768}})),
    );
    let window = server_context_window(&server.url(), "qwen3", Some("k"))
        .await
        .unwrap();
    assert_eq!(window.tokens, 12288);
    assert_eq!(
        window.source,
        format!("num_ctx from {}/api/show", server.url())
    );
    let requests = server.requests();
    let show = requests.last().unwrap();
    assert_eq!(
        (show.method.as_str(), show.path.as_str()),
        ("POST", "/api/show")
    );
    assert_eq!(show.body, json!({"model": "qwen3"}));
}

#[tokio::test]
async fn a_server_without_a_window_says_what_each_endpoint_gave() {
    let server = FakeServer::start().await.unwrap();
    server.push_for("/props", Script::json(&json!({"n_ctx": 0})));
    server.push_for("/api/ps", Script::error(200, "<html>"));
    server.push_for("/api/show", Script::error(404, "no such model"));
    let err = server_context_window(&server.url(), "m", None)
        .await
        .unwrap_err();
    let url = server.url();
    assert_eq!(
        err.to_string(),
        format!(
            "the server did not report a context window ({url}/props: n_ctx 0 is not a window; \
             {url}/api/ps: the reply is not JSON; {url}/api/show: HTTP 404)"
        )
    );
}

#[tokio::test]
async fn nothing_listening_is_a_clear_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = server_context_window(&url, "m", None).await.unwrap_err();
    assert_eq!(err.attempts.len(), 4);
    assert!(
        err.attempts[..3]
            .iter()
            .all(|a| a.ends_with("connection refused or unreachable")),
        "{err}"
    );
    assert_eq!(err.attempts[3], "is it running?");
}

#[tokio::test]
async fn credentials_in_the_base_url_authenticate_but_are_never_shown() {
    let server = FakeServer::start().await.unwrap();
    server.push_for("/props", Script::json(&json!({"n_ctx": 8192})));
    let with_user = server.url().replace("http://", "http://user:hunter2@");
    let window = server_context_window(&format!("{with_user}/v1"), "m", None)
        .await
        .unwrap();
    assert_eq!(window.source, format!("n_ctx from {}/props", server.url()));
    assert!(!window.source.contains("hunter2"));
    let requests = server.requests();
    assert_eq!(requests[0].header("authorization"), Some("<redacted>"));
    // A query or fragment cannot be joined: refused before any request.
    let err = server_context_window(&format!("{}/v1?token=abc", server.url()), "m", None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the server did not report a context window (the base URL has a query or fragment, so its endpoints cannot be derived)"
    );
    assert_eq!(server.requests().len(), 1);
}
