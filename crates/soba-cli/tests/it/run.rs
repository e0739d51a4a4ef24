//! `soba run` end to end (SPEC §11.4) against soba-provider's fake server:
//! a user-defined provider in the sandbox's user config points at it. The
//! binary runs as a child process; the test process serves the fake.

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use soba_core::Usage;
use soba_provider::fake::{Dialect, FakeServer, RecordedRequest, Reply, Script};

use crate::support::{Sandbox, last_line, text};

const DENIAL: &str = "not approved: rerun with --auto-approve or --allow bash,write";

/// A sandbox whose user config defines provider `fake` at the server, with
/// key variable FAKE_KEY set, and the model `fake/test-model`.
fn sandbox_for(server: &FakeServer, compaction: Value) -> Sandbox {
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "model": "fake/test-model",
        "providers": {"fake": {"api": "openai-chat", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}},
        "models": {"fake/test-model": {"contextWindow": 64000, "maxOutputTokens": 4000}},
        "compaction": compaction,
    }));
    sandbox.env = vec![("FAKE_KEY".into(), "sk-fake-key-for-tests".into())];
    sandbox
}

async fn run(sandbox: &Sandbox, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::from(sandbox.command(&[&["run"], args].concat()));
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("soba run finishes")
        .expect("soba run starts")
}

/// Returns the body of a recorded request as text.
fn body(request: &RecordedRequest) -> String {
    request.body.to_string()
}

fn write_then_answer(server: &FakeServer) {
    server.push(Script::stream(
        Dialect::Chat,
        &Reply::text("Writing the note.").with_tool_call(
            "call_1",
            "write_file",
            json!({"path": "note.txt", "content": "hello"}),
        ),
    ));
    server.push(Script::stream(Dialect::Chat, &Reply::text("All done.")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_needing_approval_is_refused_without_auto_approve() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    write_then_answer(&server);
    let output = run(&sandbox, &["write a note"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&output.stdout), "Writing the note.\nAll done.\n");
    assert!(
        stderr.contains(&format!("tool write_file: note.txt → {DENIAL}")),
        "{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[lines.len() - 2].starts_with("completed · session "),
        "{stderr}"
    );
    // The last line says how to come back.
    let id = lines[lines.len() - 2].trim_start_matches("completed · session ");
    assert_eq!(
        last_line(&stderr),
        format!(
            "session {}… saved — resume with `soba -c` (or `soba -r {}`)",
            &id[..8],
            &id[..8]
        )
    );
    assert!(!sandbox.ws.join("note.txt").exists());
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/chat/completions");
    assert_eq!(requests[0].body["model"], json!("test-model"));
    assert!(
        body(&requests[1]).contains(DENIAL),
        "{}",
        body(&requests[1])
    );
    // The key went in the header, never into the log.
    assert_eq!(requests[0].header("authorization"), Some("<redacted>"));
    let log = std::fs::read_to_string(&sandbox.session_files()[0]).unwrap();
    assert!(!log.contains("sk-fake-key-for-tests"));
    assert!(log.contains(DENIAL));
    // The run is logged under SOBA_HOME/logs, without the key.
    let logs: Vec<_> = std::fs::read_dir(sandbox.home.join("logs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1);
    assert!(
        logs[0]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("soba.log.")
    );
    let logged = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(logged.contains("soba run: turn starts"), "{logged}");
    assert!(logged.contains("model=fake/test-model"), "{logged}");
    assert!(!logged.contains("sk-fake-key-for-tests"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approve_and_allow_let_the_tool_run() {
    for flags in [&["--auto-approve"][..], &["--allow", "write"][..]] {
        let server = FakeServer::start().await.unwrap();
        let sandbox = sandbox_for(&server, json!({}));
        write_then_answer(&server);
        let output = run(&sandbox, &[&["write a note"], flags].concat()).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{flags:?}: {stderr}");
        assert_eq!(
            std::fs::read_to_string(sandbox.ws.join("note.txt")).unwrap(),
            "hello"
        );
        assert!(
            stderr.contains("tool write_file: note.txt → ok"),
            "{stderr}"
        );
        assert!(!body(&server.requests()[1]).contains(DENIAL));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_events_include_a_compaction_barrier() {
    let server = FakeServer::start().await.unwrap();
    // Tight settings so the turn_complete intent of the first turn
    // compacts at the second turn's first preflight.
    let sandbox = sandbox_for(
        &server,
        json!({"keepRecentTokens": 256, "minTokensForAutoCompact": 1000, "minReclaimableTokens": 1, "minSavingsRatio": 0.01, "userMessageBudgetTokens": 100}),
    );
    // The fake reports a prompt size close to the request's real size, so
    // calibration stays near 1.
    let realistic = Script::Compute(Arc::new(|request: &RecordedRequest| {
        let prompt = request.body.to_string().len() as u64 / 4;
        Script::stream(
            Dialect::Chat,
            &Reply::text("Noted.").with_usage(Usage {
                input: prompt,
                output: 5,
                ..Usage::default()
            }),
        )
    }));
    server.push(realistic.clone());
    server.push(realistic);
    let long_prompt: String = (0..12_000).map(|i| format!("item{i} ")).collect();
    let first = run(&sandbox, &[&long_prompt]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let second = run(&sandbox, &["-c", "--json", "what next?"]).await;
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    let events: Vec<Value> = text(&second.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let position = |name: &str| {
        types
            .iter()
            .position(|t| *t == name)
            .unwrap_or_else(|| panic!("no {name} in {types:?}\n{stderr}"))
    };
    assert!(position("turn_start") < position("compaction_start"));
    assert!(position("compaction_start") < position("compaction_end"));
    assert!(position("compaction_end") < position("assistant_message"));
    assert_eq!(types.last(), Some(&"turn_end"));
    let start = &events[position("compaction_start")];
    assert_eq!(start["trigger"], json!("turn_complete"));
    let end = &events[position("compaction_end")];
    assert_eq!(end["outcome"], json!("completed"), "{end}");
    assert!(end["reclaimed"].as_u64().unwrap() > 5_000, "{end}");
    // Both turns ran in one session.
    assert_eq!(sandbox.session_files().len(), 1);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_errors_fail_the_turn_with_exit_1() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    server.push(Script::error(
        401,
        r#"{"error":{"message":"invalid api key"}}"#,
    ));
    let output = run(&sandbox, &["hello"]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        last_line(&stderr).starts_with("error: turn failed: "),
        "{stderr}"
    );
    assert!(last_line(&stderr).contains("(session "), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_stream_twice_is_an_empty_reply_with_a_warning() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    let empty = || Script::Stream {
        frames: vec![soba_provider::fake::Frame::data("[DONE]")],
        end: soba_provider::fake::StreamEnd::Close,
    };
    server.push(empty());
    server.push(empty());
    let output = run(&sandbox, &["hello"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(server.requests().len(), 2, "retried once");
    assert!(
        stderr.contains("the provider sent an empty response (2 attempts")
            && stderr.contains("this turn has no reply; send the message again"),
        "{stderr}"
    );
    assert_eq!(text(&output.stdout).trim(), "", "no reply is printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_errors_exit_1_before_any_request() {
    let server = FakeServer::start().await.unwrap();
    // The key variable is not set.
    let mut sandbox = sandbox_for(&server, json!({}));
    sandbox.env.clear();
    let output = run(&sandbox, &["hello"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        last_line(&text(&output.stderr)),
        "error: FAKE_KEY is not set: export the API key of provider fake in FAKE_KEY"
    );
    // A model the registry does not know needs its window; its server
    // (the fake, answering 500 to the probe) reports none.
    let sandbox = sandbox_for(&server, json!({}));
    let output = run(&sandbox, &["--model", "fake/other", "hello"]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: model fake/other has no known context window: set models.\"fake/other\".contextWindow"),
        "{stderr}"
    );
    // The hint is folded into the one error line: the last line names the reason.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.trim_end().ends_with(&format!(
            "(or pass --set 'models.\"fake/other\".contextWindow=N'; SOBA asked the server at {url} \
             and the server did not report a context window ({url}/props: HTTP 500; \
             {url}/api/ps: HTTP 500; {url}/api/show: HTTP 500))",
            url = server.url()
        )),
        "{stderr}"
    );
    // A provider nobody defined.
    let output = run(&sandbox, &["--model", "google/gemini-2.5-pro", "hello"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("uses provider \"google\", which is not configured"));
    // Usage errors exit 2.
    let output = run(&sandbox, &["--allow", "everything", "hello"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let output = run(&sandbox, &[]).await;
    assert_eq!(output.status.code(), Some(2));
    // Only the window probe reached the server, never a model request.
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/props", "/api/ps", "/api/show"]);
}

/// An "always" answer the TUI recorded in the session holds when
/// `soba run --resume` continues it: the command runs without approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_keeps_the_sessions_always_approvals() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Fine.")));
    let first = run(&sandbox, &["hello"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let log = sandbox.session_files().remove(0);
    // What the TUI appends after `a` on `echo …`.
    {
        let mut writer =
            soba_store::SessionWriter::open(&log, soba_store::WriterOptions::default()).unwrap();
        writer
            .append(soba_core::EntryBody::ConfigChange {
                auto_compact: None,
                approvals: Some(soba_core::ApprovalGrants {
                    tools: Default::default(),
                    bash_words: ["echo".to_owned()].into_iter().collect(),
                }),
            })
            .unwrap();
    }
    let echo = |id: &str, command: &str| {
        Script::stream(
            Dialect::Chat,
            &Reply::text("Running.").with_tool_call(id, "bash", json!({"command": command})),
        )
    };
    server.push(echo("call_1", "echo granted"));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Done.")));
    let id = log.file_stem().unwrap().to_string_lossy().into_owned();
    let second = run(&sandbox, &["--resume", &id, "say it"]).await;
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("tool bash: echo granted → ok ("),
        "{stderr}"
    );
    // Another first word is still refused.
    server.push(echo("call_2", "rm -rf x"));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Done.")));
    let third = run(&sandbox, &["-r", &id, "remove it"]).await;
    let stderr = text(&third.stderr);
    assert!(
        stderr.contains(&format!("tool bash: rm -rf x → {DENIAL}")),
        "{stderr}"
    );
    // The attack of session 23: a log hard-linked to a file elsewhere (or
    // a symbolic link) is someone else's file too; its grants are not
    // restored, and soba says so.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::hard_link(&log, elsewhere.path().join("copy.jsonl")).unwrap();
    server.push(echo("call_3", "echo granted"));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Done.")));
    let fourth = run(&sandbox, &["-r", &id, "say it again"]).await;
    let stderr = text(&fourth.stderr);
    assert!(
        stderr.contains("were not restored: soba asks again"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("tool bash: echo granted → {DENIAL}")),
        "{stderr}"
    );
}

/// An unused session (opened and left before anything was said, e.g. by
/// a crash or an older version) is newer than the real one: `-c` passes
/// over it, and `soba sessions` hides it unless `--all`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_passes_over_unused_sessions() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    for _ in 0..2 {
        server.push(Script::stream(Dialect::Chat, &Reply::text("Fine.")));
    }
    let first = run(&sandbox, &["hello"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let real = sandbox.session_files();
    assert_eq!(real.len(), 1);
    let unused = sandbox
        .sessions_dir()
        .join("0194c2d0-e4c0-7000-8000-000000000001.jsonl");
    std::fs::write(
        &unused,
        "{\"type\":\"session\",\"schemaVersion\":1,\"id\":\"0194c2d0-e4c0-7000-8000-000000000001\",\"createdAt\":\"2030-01-01T00:00:00.000Z\",\"cwd\":\"/w\",\"os\":\"linux\",\"memory\":[]}\n\
         {\"type\":\"model_change\",\"id\":\"e_0194c2d0e4c070018000000000000001\",\"parentId\":null,\"timestamp\":\"2030-01-01T00:00:00.000Z\",\"model\":\"fake/test-model\"}\n",
    )
    .unwrap();
    let second = run(&sandbox, &["-c", "again"]).await;
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    let log = soba_store::reader::read_log(&real[0]).unwrap();
    let users = log
        .path()
        .iter()
        .filter(|logged| matches!(&logged.entry.body, soba_core::EntryBody::Message(m) if m.message.is_real_user()))
        .count();
    assert_eq!(users, 2, "the turn ran in the session with a message");
    assert_eq!(
        soba_store::reader::read_log(&unused)
            .unwrap()
            .entries()
            .len(),
        1
    );

    let listed = text(&sandbox.run_ok(&["sessions"]).stdout);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(!listed.contains("0194c2d0"), "{listed}");
    assert_eq!(
        last_line(&listed),
        "(1 unused session not shown: opened and left without a message; --all lists them)"
    );
    let all = text(&sandbox.run_ok(&["sessions", "--all"]).stdout);
    assert_eq!(all.lines().count(), 3, "{all}");
    assert!(all.contains("0194c2d0"), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_model_exits_1_with_an_onboarding_that_works() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["run", "hello"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    let stderr = text(&output.stderr);
    // The onboarding first, one hint a line; the reason stays the last line.
    assert_eq!(
        last_line(&stderr),
        "error: no model configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENROUTER_API_KEY, or pass --model ollama/<name>; soba demo and soba replay work offline"
    );
    let hints: Vec<&str> = stderr.lines().filter(|l| l.starts_with("hint: ")).collect();
    assert_eq!(hints.len(), 5, "{stderr}");
    assert!(
        hints[0].contains("ANTHROPIC_API_KEY") && hints[0].contains("SOBA_MODEL"),
        "{stderr}"
    );
    let config_file = sandbox.home.join("config.json");
    assert!(
        hints[1].contains(&format!("your config file is {} ", config_file.display())),
        "{stderr}"
    );
    assert!(hints[4].contains("`soba demo` runs"), "{stderr}");
    assert!(sandbox.session_files().is_empty());

    // What it says about local servers works: the llama.cpp config as the
    // user config, and the Ollama flags, each resolve a model.
    let llama = hints[3]
        .split("put ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(" in the config file"))
        .expect("the llama.cpp config");
    // llama-server answers on its port; the fake server stands in for it.
    let server = FakeServer::start().await.unwrap();
    server.push_for("/props", Script::json(&json!({"n_ctx": 32768})));
    server.push(Script::stream(
        Dialect::Chat,
        &Reply::text("Hello from llama.cpp."),
    ));
    std::fs::write(
        &config_file,
        llama.replace("http://localhost:8080/v1", &server.url()),
    )
    .unwrap();
    let answered = run(&sandbox, &["hello"]).await;
    assert_eq!(
        answered.status.code(),
        Some(0),
        "{}",
        text(&answered.stderr)
    );
    assert_eq!(text(&answered.stdout), "Hello from llama.cpp.\n");
    std::fs::remove_file(&config_file).unwrap();
    let flags = hints[2]
        .split("ollama serve): soba ")
        .nth(1)
        .expect("the Ollama flags");
    assert_eq!(flags, "--model ollama/qwen3-coder");
    // Ollama answers /api/show; the fake server stands in for it.
    server.push_for("/props", Script::error(404, "404 page not found"));
    server.push_for("/api/ps", Script::json(&json!({"models": []})));
    server.push_for(
        "/api/show",
        Script::json(&json!({"parameters": "num_ctx 32768"})),
    );
    let ollama_url = format!("providers.ollama.baseUrl=\"{}/v1\"", server.url());
    let budget = sandbox.run(
        &[
            &["budget", "--set", &ollama_url],
            &flags.split(' ').collect::<Vec<_>>()[..],
        ]
        .concat(),
    );
    assert_eq!(budget.status.code(), Some(0), "{}", text(&budget.stderr));
    assert!(
        text(&budget.stdout).contains("num_ctx from"),
        "{}",
        text(&budget.stdout)
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_cancels_the_turn_with_exit_130() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    server.push(Script::Stall(Duration::from_secs(30)));
    let mut command = tokio::process::Command::from(sandbox.command(&["run", "hello"]));
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = command.spawn().unwrap();
    let pid = child.id().expect("the child is running");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.requests().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no request was sent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = send_sigint(pid);
    assert!(sent, "SIGINT could not be sent");
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("soba exits after SIGINT")
        .unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", text(&output.stderr));
    assert!(
        last_line(&text(&output.stderr)).starts_with("error: interrupted (SIGINT)"),
        "{}",
        text(&output.stderr)
    );
}

/// SIGINT, SIGTERM and SIGHUP while a reply streams: the text streamed so
/// far is saved as an assistant message marked interrupted, one line says
/// so and how to resume, the exit code is 128 + the signal, and the log
/// passes `soba show --check`.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_mid_reply_saves_the_partial_reply_marked_interrupted() {
    use soba_provider::fake::{Frame, StreamEnd};
    use tokio::io::AsyncReadExt;

    for (signal, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let server = FakeServer::start().await.unwrap();
        let sandbox = sandbox_for(&server, json!({}));
        let chunk = |content: &str| {
            Frame::data(
                &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "test-model",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": null}]})
                .to_string(),
            )
        };
        // Two pieces, then the server goes silent mid-reply.
        server.push(Script::Stream {
            frames: vec![chunk("The partial "), chunk("answer so far.")],
            end: StreamEnd::Stall(Duration::from_secs(60)),
        });
        let mut command = tokio::process::Command::from(sandbox.command(&["run", "hello"]));
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        let pid = child.id().expect("the child is running");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut shown = Vec::new();
        let wait = async {
            let mut buffer = [0u8; 256];
            while !text(&shown).contains("The partial answer so far.") {
                let read = stdout.read(&mut buffer).await.unwrap();
                assert_ne!(read, 0, "stdout closed before the reply streamed");
                shown.extend_from_slice(&buffer[..read]);
            }
        };
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .expect("the partial reply is printed");
        assert!(send_signal(signal, pid), "SIG{signal} could not be sent");
        let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
            .await
            .expect("soba exits after the signal")
            .unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "SIG{signal}: {stderr}");
        let log = sandbox.session_files().remove(0);
        let id = log.file_stem().unwrap().to_string_lossy().into_owned();
        let short: String = id.chars().take(8).collect();
        assert_eq!(
            last_line(&stderr),
            format!(
                "error: interrupted (SIG{signal}): the turn was cancelled; its partial reply (26 characters, marked interrupted) is in the log; session {short}… saved — resume with `soba -c` (or `soba -r {short}`)"
            ),
            "{stderr}"
        );
        let check = sandbox.run(&["show", &id, "--check"]);
        assert_eq!(
            check.status.code(),
            Some(0),
            "SIG{signal}: {}{}",
            text(&check.stdout),
            text(&check.stderr)
        );
        let saved = soba_store::read_log(&log).unwrap();
        let path = saved.path();
        let last = path.last().expect("the log has entries");
        let soba_core::EntryBody::Message(soba_core::MessageEntry { message, .. }) =
            &last.entry.body
        else {
            panic!("the last entry is not a message: {last:?}");
        };
        assert_eq!(message.role, soba_core::Role::Assistant);
        assert_eq!(
            message.text(),
            format!(
                "The partial answer so far.\n[interrupted by SIG{signal}: the reply was cut off here]"
            )
        );
        // The next turn goes on from it.
        server.push(Script::stream(Dialect::Chat, &Reply::text("Resumed.")));
        let resumed = run(&sandbox, &["-c", "go on"]).await;
        assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
        let sent = body(server.requests().last().unwrap());
        assert!(
            sent.contains("The partial answer so far.") && sent.contains("[interrupted by SIG"),
            "{sent}"
        );
    }
}

/// Sends a signal to our own child with the `kill` command.
#[cfg(unix)]
fn send_signal(signal: &str, pid: u32) -> bool {
    std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

/// Sends SIGINT to our own child with the `kill` command (the workspace
/// denies unsafe code, so no libc call).
#[cfg(unix)]
fn send_sigint(pid: u32) -> bool {
    std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_runs_in_the_same_session_and_agents_md_is_snapshotted_on_change() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    sandbox.write("AGENTS.md", "Always run the tests with `make check`.\n");
    for _ in 0..3 {
        server.push(Script::stream(Dialect::Chat, &Reply::text("Fine.")));
    }
    let first = run(&sandbox, &["hello"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let first_stderr = text(&first.stderr);
    let id = first_stderr
        .lines()
        .find_map(|line| line.strip_prefix("completed · session "))
        .unwrap()
        .to_owned();
    assert!(body(&server.requests()[0]).contains("make check"));
    // Unchanged: no new snapshot. Changed: one more.
    let second = run(&sandbox, &["--resume", &id[..8], "again"]).await;
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    sandbox.write("AGENTS.md", "Run `cargo test` instead.\n");
    let third = run(&sandbox, &["--resume", &id, "and again"]).await;
    assert_eq!(third.status.code(), Some(0), "{}", text(&third.stderr));
    assert_eq!(sandbox.session_files().len(), 1);
    let log = soba_store::reader::read_log(&sandbox.session_files()[0]).unwrap();
    let snapshots: Vec<String> = log
        .entries()
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            soba_core::EntryBody::Context(context) => Some(context.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        snapshots,
        [
            "Always run the tests with `make check`.\n",
            "Run `cargo test` instead.\n"
        ]
    );
    let last_request = body(&server.requests()[2]);
    assert!(last_request.contains("cargo test") && !last_request.contains("make check"));
    // An unknown session names the fix.
    let missing = run(&sandbox, &["--resume", "ffffffff", "x"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("list them with `soba sessions`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_continuation_and_the_barrier_lines_off_a_terminal() {
    let server = FakeServer::start().await.unwrap();
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "model": "fake/codex",
        "providers": {"fake": {"api": "openai-responses", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}},
        "models": {"fake/codex": {"contextWindow": 64000, "maxOutputTokens": 4000}},
        "compaction": {
            "native": "auto",
            "summarizer": {"model": "deterministic"},
            "keepRecentTokens": 256, "minTokensForAutoCompact": 1000, "minReclaimableTokens": 1,
            "minSavingsRatio": 0.01, "userMessageBudgetTokens": 100
        },
    }));
    sandbox.env = vec![("FAKE_KEY".into(), "sk-fake".into())];
    let realistic = Script::Compute(Arc::new(|request: &RecordedRequest| {
        let prompt = request.body.to_string().len() as u64 / 4;
        Script::stream(
            Dialect::Responses,
            &Reply::text("Noted.").with_usage(Usage {
                input: prompt,
                output: 5,
                ..Usage::default()
            }),
        )
    }));
    server.push_for("/responses", realistic.clone());
    server.push_for("/responses", realistic);
    server.push_for("/responses/compact", Script::compaction("gAAAA-run-item"));
    let long_prompt: String = (0..12_000).map(|i| format!("item{i} ")).collect();
    let first = run(&sandbox, &[&long_prompt]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    // The turn_complete intent compacts at the second turn's preflight.
    let second = run(&sandbox, &["-c", "what next?"]).await;
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    // stderr is a pipe: no live percentage, no control characters, just
    // the result line.
    assert!(!stderr.contains("Compacting context"), "{stderr}");
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "{stderr:?}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].starts_with("Compacted (turn_complete): "),
        "{stderr}"
    );
    assert!(lines[1].starts_with("completed · session "), "{stderr}");
    // /responses/compact got the span; the capsule keeps the item, and the
    // next request carries it.
    let requests = server.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/responses", "/responses/compact", "/responses"]);
    assert_eq!(requests[1].body["model"], json!("codex"));
    assert!(body(&requests[2]).contains("gAAAA-run-item"));
    let log = soba_store::reader::read_log(&sandbox.session_files()[0]).unwrap();
    let native = log
        .entries()
        .iter()
        .find_map(|logged| match &logged.entry.body {
            soba_core::EntryBody::Capsule(capsule) => capsule.native.clone(),
            _ => None,
        });
    assert!(native.is_some_and(|n| n.item.contains("gAAAA-run-item")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversation_model_as_summarizer_is_warned_about_on_stderr() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({"summarizer": {"model": "fake/test-model"}}));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Hi.")));
    let output = run(&sandbox, &["hello"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some(
            "warning: compaction.summarizer.model is the conversation model fake/test-model: \
             each compaction costs about as much as a turn; name a cheaper model or \"deterministic\""
        ),
        "{stderr}"
    );
}

/// Returns whether util-linux `script` (which gives a command a terminal)
/// is installed.
fn has_script() -> bool {
    std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_barrier_percentage_is_redrawn_in_place() {
    if !has_script() {
        println!("skipped: util-linux script is not installed (it gives soba run a terminal)");
        return;
    }
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(
        &server,
        json!({"keepRecentTokens": 256, "minTokensForAutoCompact": 1000, "minReclaimableTokens": 1, "minSavingsRatio": 0.01, "userMessageBudgetTokens": 100, "summarizer": {"model": "deterministic"}}),
    );
    let realistic = Script::Compute(Arc::new(|request: &RecordedRequest| {
        let prompt = request.body.to_string().len() as u64 / 4;
        Script::stream(
            Dialect::Chat,
            &Reply::text("Noted.").with_usage(Usage {
                input: prompt,
                output: 5,
                ..Usage::default()
            }),
        )
    }));
    server.push(realistic.clone());
    server.push(realistic);
    let long_prompt: String = (0..12_000).map(|i| format!("item{i} ")).collect();
    let first = run(&sandbox, &[&long_prompt]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    // `script` runs the second turn on a pseudo-terminal and copies what
    // it printed (stdout and stderr) to its own stdout.
    let soba = format!("'{}' run -c 'what next?'", env!("CARGO_BIN_EXE_soba"));
    // The sandbox's environment (SOBA_HOME, HOME, PATH, FAKE_KEY) only.
    let command = sandbox.command(&[]);
    let mut script = tokio::process::Command::new("script");
    script
        .args(["-q", "-e", "-c", &soba, "/dev/null"])
        .env_clear()
        .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(&sandbox.ws);
    let output = tokio::time::timeout(Duration::from_secs(60), script.output())
        .await
        .expect("soba run finishes")
        .expect("script starts");
    let screen = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{screen:?}");
    assert!(
        screen.contains("\r\x1b[2KCompacting context before response · 0%"),
        "{screen:?}"
    );
    assert!(
        screen.contains("\r\x1b[2KCompacted (turn_complete): "),
        "{screen:?}"
    );
}

/// A sandbox with a local OpenAI-compatible provider `local` at the server
/// (no key) and no `contextWindow` for its model: the window must come from
/// the server.
fn local_sandbox(server: &FakeServer, model: Value) -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "model": "local/tiny",
        "providers": {"local": {"api": "openai-chat", "baseUrl": format!("{}/v1", server.url()), "apiKeyEnv": null}},
        "models": {"local/tiny": model},
    }));
    sandbox
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_model_without_a_configured_window_gets_its_servers() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = local_sandbox(&server, json!({}));
    server.push_for(
        "/props",
        Script::json(&json!({"default_generation_settings": {"n_ctx": 8192}})),
    );
    let budget = sandbox.run(&["budget", "--model", "local/tiny"]);
    let stdout = text(&budget.stdout);
    assert_eq!(budget.status.code(), Some(0), "{}", text(&budget.stderr));
    assert!(
        stdout.contains(&format!(
            "window from          the server: n_ctx from {}/props\n",
            server.url()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("contextWindow        8,192  the model's window"),
        "{stdout}"
    );

    // `soba run` asks once per process; the flag before the subcommand
    // applies to it.
    server.push_for(
        "/props",
        Script::json(&json!({"default_generation_settings": {"n_ctx": 8192}})),
    );
    server.push_for(
        "/v1/chat/completions",
        Script::stream(Dialect::Chat, &Reply::text("Hello from a small model.")),
    );
    let output = sandbox.run(&["--model", "local/tiny", "run", "hello"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Hello from a small model.\n");
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/props", "/props", "/v1/chat/completions"]);

    // No server: the error names the key to set and what the server said.
    drop(server);
    let failed = sandbox.run(&["budget", "--model", "local/tiny"]);
    assert_eq!(failed.status.code(), Some(1));
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains(
            "error: model local/tiny has no known context window: set models.\"local/tiny\".contextWindow in the config"
        ),
        "{stderr}"
    );
    // The fake server's listener may still be closing when soba asks
    // (under load): then the request fails instead of being refused.
    assert!(
        stderr.contains("hint: SOBA asked the server at http://127.0.0.1:")
            && (stderr.contains("/props: connection refused or unreachable")
                || stderr.contains("/props: request failed")),
        "{stderr}"
    );
}

/// The reply of a small model that writes its tool call as text.
const TEXT_CALL: &str = "I will read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n```";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_written_as_text_runs_only_where_the_model_is_set_to() {
    for setting in [true, false] {
        let server = FakeServer::start().await.unwrap();
        let sandbox = local_sandbox(
            &server,
            json!({"contextWindow": 16384, "toolCallsInText": setting}),
        );
        std::fs::write(sandbox.ws.join("notes.txt"), "the secret word is plover\n").unwrap();
        server.push(Script::stream(Dialect::Chat, &Reply::text(TEXT_CALL)));
        server.push(Script::stream(
            Dialect::Chat,
            &Reply::text("The word is plover."),
        ));
        let output = sandbox.run(&["run", "--json", "what does notes.txt say?"]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        let events: Vec<Value> = text(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let tools: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "tool_result")
            .collect();
        let requests = server.requests();
        if setting {
            assert_eq!(tools.len(), 1, "{events:?}");
            assert_eq!(tools[0]["name"], "read_file");
            assert_eq!(tools[0]["isError"], false);
            assert_eq!(requests.len(), 2);
            // The call goes back as a native call with its result; the
            // text around it stays.
            let messages = requests[1].body["messages"].as_array().unwrap();
            let assistant = &messages[messages.len() - 2];
            assert_eq!(assistant["content"], "I will read it.");
            assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read_file");
            assert!(body(&requests[1]).contains("plover"));
        } else {
            assert!(tools.is_empty(), "{events:?}");
            assert_eq!(requests.len(), 1, "the reply stays text and ends the turn");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_replaced_while_the_reply_streams_fails_the_turn_and_keeps_the_reply_in_a_recovery_file()
 {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Fine.")));
    let first = run(&sandbox, &["hello"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let log = sandbox.session_files().remove(0);
    // While the request is answered, an editor saves the log by writing a
    // copy and renaming it over the path.
    let edited = log.clone();
    server.push(Script::Compute(Arc::new(move |_| {
        let copy = edited.with_extension("jsonl.edit");
        std::fs::copy(&edited, &copy).unwrap();
        std::fs::rename(&copy, &edited).unwrap();
        Script::stream(Dialect::Chat, &Reply::text("Replied after the rename."))
    })));
    let second = run(&sandbox, &["-c", "again"]).await;
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("saved"), "{stderr}");
    assert!(!stderr.contains("completed"), "{stderr}");
    let recovered: Vec<_> = std::fs::read_dir(sandbox.sessions_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains(".recovered-"))
        .collect();
    assert_eq!(recovered.len(), 1, "{stderr}");
    let recovery = std::fs::read_to_string(&recovered[0]).unwrap();
    assert!(recovery.contains("Replied after the rename."), "{recovery}");
    assert!(
        last_line(&stderr).starts_with(&format!(
            "error: the log of session {} ({}) was replaced by another program while soba was writing it, so nothing more is written to it; the entries missing from the file now at that path are in {}",
            log.file_stem().unwrap().to_string_lossy(),
            log.display(),
            recovered[0].display()
        )),
        "{stderr}"
    );
    let on_disk = std::fs::read_to_string(&log).unwrap();
    assert!(
        on_disk.contains("again") && !on_disk.contains("Replied after"),
        "{on_disk}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_past_a_capsule_keeping_from_a_foreign_entry_warns() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Fine.")));
    // The fixture up to its capsule and the entries after it (its last
    // two lines move the leaf elsewhere), with the capsule's kept-from id
    // changed to one of another session.
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../soba-store/tests/fixtures/sessions/valid/all-entry-types.jsonl"
    ))
    .unwrap();
    let log: String = fixture
        .split_inclusive('\n')
        .take(17)
        .collect::<String>()
        .replace(
            "\"firstKeptEntryId\":\"e_0194c2d0e4c0700b8000000000015445\"",
            "\"firstKeptEntryId\":\"e_0194c2d0e4c0700b80000000000fffff\"",
        );
    let id = "0194c2d0-e4c0-7000-8000-00000000f001";
    std::fs::create_dir_all(sandbox.sessions_dir()).unwrap();
    std::fs::write(sandbox.sessions_dir().join(format!("{id}.jsonl")), log).unwrap();
    let output = run(&sandbox, &["--resume", id, "go on"]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.lines().any(|line| line
            == format!(
                "warning: session {id}: capsule ck_0194c2d0e4c0700e800000000001b112 keeps from entry \
                 e_0194c2d0e4c0700b80000000000fffff, which is not before it in this session (a hand edit, \
                 or a line from another session): the tail that capsule meant to keep is not in the model \
                 input, only the capsule and what follows it; `soba show --check` for details"
            )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_past_the_file_size_limit_keeps_the_entries_in_a_recovery_file() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = sandbox_for(&server, json!({}));
    server.push(Script::stream(Dialect::Chat, &Reply::text("Fine.")));
    let long_prompt = "word ".repeat(8000);
    let first = run(&sandbox, &[&long_prompt]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let log = sandbox.session_files().remove(0);
    let before = std::fs::read(&log).unwrap();
    // The next run may write no byte past the log's end (`ulimit -f`, in
    // 512-byte blocks, rounded down). soba ignores SIGXFSZ itself, so the
    // write fails with EFBIG instead of killing it (the attack of session
    // 22 found it killed without a word).
    let blocks = before.len() / 512;
    server.push(Script::stream(Dialect::Chat, &Reply::text("Never saved.")));
    let soba = sandbox.command(&["run", "-c", "again"]);
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -f {blocks}; exec \"$0\" \"$@\""))
        .arg(soba.get_program())
        .args(soba.get_args())
        .env_clear()
        .current_dir(soba.get_current_dir().unwrap());
    for (name, value) in soba.get_envs() {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("saved"), "{stderr}");
    let recovered: Vec<_> = std::fs::read_dir(sandbox.sessions_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains(".recovered-"))
        .collect();
    assert_eq!(recovered.len(), 1, "{stderr}");
    let recovery = std::fs::read_to_string(&recovered[0]).unwrap();
    assert!(recovery.contains("again"), "{recovery}");
    assert!(
        last_line(&stderr).starts_with(&format!(
            "error: cannot append to the log of session {} ({}): File too large (os error 27); the entries not written are in {}: the log reached the largest file this process may write",
            log.file_stem().unwrap().to_string_lossy(),
            log.display(),
            recovered[0].display()
        )),
        "{stderr}"
    );
}
