//! Hostile providers through the real binary (issue 33, class "providers"
//! of the campaign; the JSON runner serves no HTTP, so these cases drive
//! `soba run` against the loopback fake server): keep-alives only, a reply
//! that never ends, keys echoed back, `baseUrl`s with a query, fragment,
//! user info or another scheme, bad redirects, arguments that are not
//! JSON, replies cut by the output limit, several choices, empty bodies.
//! Every case states the correct outcome; none may leak the key or a
//! query value to stderr, stdout, the session log or `soba.log`.

use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use soba_provider::fake::{FakeServer, Frame, Script, StreamEnd};

use crate::support::{Sandbox, text};

/// A key of no known shape: only the configured value can find it.
const KEY: &str = "k3y_Of-0dd.Shape~42xyz";

/// A secret carried in a `baseUrl` query.
const QUERY_SECRET: &str = "qsecret-0123456789";

/// A sandbox whose provider `fake` (openai-chat) lives at `base_url`, with
/// [`KEY`] in FAKE_KEY and `extra` merged into the user config.
fn sandbox_at(base_url: &str, extra: Value) -> Sandbox {
    let mut config = json!({
        "model": "fake/test-model",
        "providers": {"fake": {"api": "openai-chat", "baseUrl": base_url, "apiKeyEnv": "FAKE_KEY"}},
        "models": {"fake/test-model": {"contextWindow": 64000, "maxOutputTokens": 4000}},
        "http": {"idleTimeoutMs": 400},
    });
    if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            config.insert(key.clone(), value.clone());
        }
    }
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&config);
    sandbox.env = vec![("FAKE_KEY".into(), KEY.into())];
    sandbox
}

async fn run(sandbox: &Sandbox, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::from(sandbox.command(&[&["run"], args].concat()));
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("soba run finishes")
        .expect("soba run starts")
}

/// Returns everything SOBA wrote: stdout, stderr, session logs, soba.log.
fn everything(sandbox: &Sandbox, output: &Output) -> String {
    let mut all = format!("{}{}", text(&output.stdout), text(&output.stderr));
    for file in sandbox.session_files() {
        all.push_str(&std::fs::read_to_string(file).unwrap_or_default());
    }
    if let Ok(logs) = std::fs::read_dir(sandbox.home.join("logs")) {
        for entry in logs {
            all.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default());
        }
    }
    all
}

/// Asserts that no secret reached any output or file.
fn assert_no_secret(sandbox: &Sandbox, output: &Output, case: &str) {
    let all = everything(sandbox, output);
    assert!(!all.contains(KEY), "{case}: the key leaked:\n{all}");
    assert!(
        !all.contains(QUERY_SECRET),
        "{case}: the query secret leaked:\n{all}"
    );
}

fn stream(frames: Vec<Frame>) -> Script {
    Script::Stream {
        frames,
        end: StreamEnd::Close,
    }
}

fn chunk(value: Value) -> Frame {
    Frame::data(&value.to_string())
}

/// A Chat Completions reply with one tool call (`arguments` raw) ending
/// with `finish_reason`.
fn call_reply(tool: &str, arguments: &str, finish_reason: &str) -> Script {
    stream(vec![
        chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": tool, "arguments": arguments}}
        ]}}]})),
        chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]})),
        Frame::data("[DONE]"),
    ])
}

fn text_reply(text: &str, finish_reason: &str) -> Script {
    stream(vec![
        chunk(json!({"choices": [{"index": 0, "delta": {"content": text}}]})),
        chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]})),
        Frame::data("[DONE]"),
    ])
}

/// One case: scripts queued on a fresh server, the run's exit code, and
/// texts stderr must contain.
struct Case {
    name: &'static str,
    scripts: Vec<Script>,
    extra_config: Value,
    exit: i32,
    stderr_has: Vec<String>,
}

async fn check(case: Case) {
    let server = FakeServer::start().await.unwrap();
    for script in case.scripts {
        server.push(script);
    }
    let sandbox = sandbox_at(&server.url(), case.extra_config);
    let output = run(&sandbox, &["--auto-approve", "do the task"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(case.exit),
        "{}: {stderr}",
        case.name
    );
    for expected in &case.stderr_has {
        assert!(
            stderr.contains(expected.as_str()),
            "{}: stderr lacks {expected:?}:\n{stderr}",
            case.name
        );
    }
    assert_no_secret(&sandbox, &output, case.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_only_end_with_the_idle_timeout_key() {
    let every = Duration::from_millis(50);
    for (name, frame) in [
        ("comments", Frame::raw(": ping\n\n")),
        ("empty-data", Frame::raw("data:\n\n")),
        ("null-choices", Frame::data(r#"{"choices":[]}"#)),
    ] {
        check(Case {
            name,
            // 10 s of keep-alives against an idle timeout of 400 ms.
            scripts: vec![stream((0..200).map(|_| frame.clone().delayed(every)).collect())],
            extra_config: json!({}),
            exit: 1,
            stderr_has: vec![
                "no progress from http://127.0.0.1:".into(),
                "/chat/completions for 400 ms (keep-alives do not count): retry, or raise http.idleTimeoutMs".into(),
            ],
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_dripping_forever_ends_at_the_total_bound() {
    let delta = chunk(json!({"choices": [{"index": 0, "delta": {"content": "a"}}]}));
    check(Case {
        name: "drip",
        scripts: vec![stream(
            (0..200)
                .map(|_| delta.clone().delayed(Duration::from_millis(50)))
                .collect(),
        )],
        extra_config: json!({"http": {"idleTimeoutMs": 400, "streamTimeoutMs": 1000}}),
        exit: 1,
        stderr_has: vec![
            "was still streaming after 1000 ms: retry, or raise http.streamTimeoutMs".into(),
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_echoed_back_reaches_no_output_and_no_log() {
    let echo = format!("invalid key {KEY} (Bearer {KEY})");
    let cases = [
        (
            "echo-401",
            Script::error(401, echo.clone()),
            "authentication failed (http 401)",
        ),
        (
            "echo-400",
            Script::error(400, echo.clone()),
            "request rejected (http 400)",
        ),
        (
            "echo-stream-error",
            stream(vec![chunk(
                json!({"error": {"code": "invalid_api_key", "message": echo.clone()}}),
            )]),
            "the provider reported an error mid-stream",
        ),
        (
            "echo-503-retried",
            Script::error(503, echo.clone()).with_header("retry-after-ms", "5"),
            "provider server error (http 503)",
        ),
    ];
    for (name, script, expected) in cases {
        check(Case {
            name,
            scripts: (0..5).map(|_| script.clone()).collect(),
            extra_config: json!({}),
            exit: 1,
            stderr_has: vec![expected.into(), "[REDACTED:api_key]".into()],
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_query_is_kept_and_never_shown() {
    // A reply: the query reaches the server after the joined path.
    let server = FakeServer::start().await.unwrap();
    server.push(text_reply("Done.", "stop"));
    let sandbox = sandbox_at(
        &format!("{}/v1?key={QUERY_SECRET}", server.url()),
        json!({}),
    );
    let output = run(&sandbox, &["do the task"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].query.as_deref(),
        Some(&*format!("key={QUERY_SECRET}"))
    );
    assert_no_secret(&sandbox, &output, "query-ok");
    // An error: the URL is shown with the value redacted.
    let server = FakeServer::start().await.unwrap();
    server.push(Script::error(
        404,
        format!("no model for key={QUERY_SECRET}"),
    ));
    let sandbox = sandbox_at(
        &format!("{}/v1?key={QUERY_SECRET}", server.url()),
        json!({}),
    );
    let output = run(&sandbox, &["do the task"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "not found (http 404) at {}/v1/chat/completions?key=[REDACTED]",
            server.url()
        )),
        "{stderr}"
    );
    assert_no_secret(&sandbox, &output, "query-404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_with_fragment_user_info_or_another_scheme_is_a_config_error() {
    for (base_url, expected) in [
        (
            "http://127.0.0.1:9/v1#top".to_owned(),
            "has a fragment (#…), which is never sent to a server; remove it",
        ),
        (
            format!("http://user:{QUERY_SECRET}@127.0.0.1:9/v1"),
            "carries a user name or password (user:password@host); remove it",
        ),
        (
            "file:///etc/passwd".to_owned(),
            "uses the scheme \"file\": only http and https are supported",
        ),
    ] {
        let sandbox = sandbox_at(&base_url, json!({}));
        let output = run(&sandbox, &["do the task"]).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{base_url}: {stderr}");
        assert!(
            stderr
                .contains("provider fake: invalid provider configuration: the provider's baseUrl"),
            "{base_url}: {stderr}"
        );
        assert!(stderr.contains(expected), "{base_url}: {stderr}");
        assert!(
            stderr.contains("fix providers.fake.baseUrl in your config"),
            "{stderr}"
        );
        assert_no_secret(&sandbox, &output, &base_url);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_redirect_is_named_not_called_a_network_failure() {
    for (name, script, expected) in [
        (
            "redirect-invalid-location",
            Script::redirect(301, "http://[::1"),
            "sent a redirect (http 301) whose location \"http://[::1\" is not a valid URL",
        ),
        (
            "redirect-no-location",
            Script::error(302, ""),
            "sent a redirect (http 302) with no location header",
        ),
    ] {
        check(Case {
            name,
            scripts: vec![script],
            extra_config: json!({}),
            exit: 1,
            stderr_has: vec![expected.into()],
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_are_not_json_never_run_a_tool() {
    for (name, arguments, expected) in [
        (
            "args-invalid",
            r#"{"path": "note.txt", content: 1}"#,
            "are not valid JSON: key must be a string",
        ),
        (
            "args-cut",
            r#"{"path": "note.txt", "content": "hel"#,
            "are cut off: EOF while parsing a string",
        ),
    ] {
        let server = FakeServer::start().await.unwrap();
        server.push(call_reply("write_file", arguments, "tool_calls"));
        server.push(text_reply("I will send it again.", "stop"));
        let sandbox = sandbox_at(&server.url(), json!({}));
        let output = run(&sandbox, &["--auto-approve", "write a note"]).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{name}: {}",
            text(&output.stderr)
        );
        assert!(!sandbox.ws.join("note.txt").exists(), "{name}");
        let second = server.requests()[1].body.to_string();
        assert!(second.contains(expected), "{name}: {second}");
        assert!(second.contains("the tool was not run"), "{name}: {second}");
        assert_no_secret(&sandbox, &output, name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_by_the_output_limit_is_told_and_its_call_not_run() {
    let warning = "warning: the reply was cut by the output limit (max_tokens 4000); raise models.\"fake/test-model\".maxOutputTokens for longer replies";
    // A call whose arguments happen to parse, cut by the limit.
    let server = FakeServer::start().await.unwrap();
    server.push(call_reply(
        "write_file",
        r#"{"path": "note.txt", "content": "hello"}"#,
        "length",
    ));
    server.push(text_reply("Writing it in parts.", "stop"));
    let sandbox = sandbox_at(&server.url(), json!({}));
    let output = run(&sandbox, &["--auto-approve", "write a note"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(warning), "{stderr}");
    assert!(!sandbox.ws.join("note.txt").exists());
    let second = server.requests()[1].body.to_string();
    assert!(
        second.contains("this write_file call was cut by the output limit (max_tokens 4000)"),
        "{second}"
    );
    // The log records it too.
    let logged = everything(&sandbox, &output);
    assert!(
        logged.contains("the reply was cut by the output limit (max_tokens 4000)"),
        "{logged}"
    );
    // A text reply cut by the limit completes, with the warning.
    check(Case {
        name: "length-text",
        scripts: vec![text_reply("The answer is", "length")],
        extra_config: json!({}),
        exit: 0,
        stderr_has: vec![warning.into()],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_choice_is_shown() {
    let server = FakeServer::start().await.unwrap();
    server.push(stream(vec![
        chunk(json!({"choices": [
            {"index": 1, "delta": {"content": "INJECTED "}},
            {"index": 0, "delta": {"content": "Hello"}}
        ]})),
        chunk(json!({"choices": [{"index": 1, "delta": {"content": "MORE"}}]})),
        chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        Frame::data("[DONE]"),
    ]));
    let sandbox = sandbox_at(&server.url(), json!({}));
    let output = run(&sandbox, &["say hello"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Hello\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_200_body_is_named() {
    check(Case {
        name: "empty-body",
        scripts: vec![stream(Vec::new()), stream(Vec::new())],
        extra_config: json!({}),
        exit: 1,
        stderr_has: vec![
            "/chat/completions returned an empty body (http 200, no event stream, 2 attempt(s)): check that baseUrl points at the API itself".into(),
        ],
    })
    .await;
}
