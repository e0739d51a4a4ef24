//! Bad input through the `soba` binary and the provider clients (SPEC §17):
//! every case in `tests/bad-input/cli/` (impossible budgets, unknown and
//! forbidden config keys, damaged sessions and transcripts, malformed
//! capsule files, a session locked by another writer) and every provider
//! error shape in `tests/bad-input/provider/` (401/403/404/429/5xx, overflow
//! wordings and their lookalikes, bodies that are not JSON or are huge)
//! gives a clear error and never a panic. Each case's `.expected` holds the
//! exit code and output; `SOBA_BLESS=1` rewrites them (review the diff).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use soba_core::Message;
use soba_provider::client::{Api, Endpoint, NeverCancel};
use soba_provider::fake::{FakeServer, Script};
use soba_provider::overflow::OVERFLOW_SAMPLES;
use soba_provider::request::ChatRequest;
use soba_provider::transport::{HttpConfig, RetryPolicy, client_for};
use soba_store::{Durability, SequentialMinter, SessionWriter, WriterOptions};

use crate::support::Sandbox;

/// The key given to provider clients: it must never appear in an error.
const TEST_KEY: &str = "sk-bad-input-test-key-0123456789";

fn corpus_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/bad-input")
        .join(kind)
}

/// Returns the `.json` cases of a corpus folder, sorted.
fn cases(kind: &str) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir(kind))
        .expect("the corpus folder exists")
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    cases.sort();
    cases
}

/// Compares `actual` with the case's `.expected` (or writes it under
/// `SOBA_BLESS`); returns a mismatch report.
fn compare(case: &Path, actual: &str) -> Option<String> {
    let expected_path = case.with_extension("expected");
    if std::env::var_os("SOBA_BLESS").is_some() {
        std::fs::write(&expected_path, actual).expect("the expectation is written");
        return None;
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
        panic!(
            "{} has no expectation; run with SOBA_BLESS=1",
            case.display()
        )
    });
    (expected != actual).then(|| {
        format!(
            "{}:\n--- expected\n{expected}--- actual\n{actual}",
            case.display()
        )
    })
}

fn str_field<'a>(case: &'a Value, key: &str) -> Option<&'a str> {
    case.get(key).and_then(Value::as_str)
}

/// Copies a corpus session into the sandbox's sessions folder under its
/// header's id (else its file stem); returns (path, id).
fn install_session(sandbox: &Sandbox, rel: &str) -> (PathBuf, String) {
    let source = corpus_dir("").join(rel);
    let bytes = std::fs::read(&source).expect("the session case");
    let first_line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let id = std::str::from_utf8(
        first_line
            .strip_prefix(b"\xef\xbb\xbf")
            .unwrap_or(first_line),
    )
    .ok()
    .and_then(|line| serde_json::from_str::<Value>(line).ok())
    .and_then(|header| header["id"].as_str().map(str::to_owned))
    .unwrap_or_else(|| {
        source
            .file_stem()
            .expect("a stem")
            .to_string_lossy()
            .into_owned()
    });
    let dir = sandbox.sessions_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{id}.jsonl"));
    std::fs::write(&path, bytes).unwrap();
    // Listings show a session's last change: a fixed one, so expected
    // output does not depend on the day the test runs.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|file| {
            file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_735_689_600))
        })
        .unwrap();
    (path, id)
}

/// Makes a file that is not a readable regular file at `path`: `fifo`,
/// `devZero` or `devStdin` (symlinks), `directory`, or `oversized:<bytes>`
/// (a sparse regular file).
fn make_special(path: &Path, kind: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    match kind {
        "fifo" => {
            let status = std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap();
            assert!(status.success());
        }
        "devZero" => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        "devStdin" => std::os::unix::fs::symlink("/dev/stdin", path).unwrap(),
        "directory" => std::fs::create_dir_all(path).unwrap(),
        other => {
            let bytes: u64 = other
                .strip_prefix("oversized:")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unknown special kind {other:?}"));
            std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
        }
    }
}

/// Runs one CLI case and describes what the binary did.
fn describe_cli(case_path: &Path) -> String {
    let case: Value =
        serde_json::from_str(&std::fs::read_to_string(case_path).unwrap()).expect("a JSON case");
    let mut sandbox = Sandbox::new();
    if let Some(config) = case.get("userConfig") {
        sandbox.write_user_config(config);
    }
    if let Some(config) = str_field(&case, "userConfigText") {
        std::fs::write(sandbox.home.join("config.json"), config).unwrap();
    }
    if let Some(rel) = str_field(&case, "userConfigFile") {
        std::fs::copy(corpus_dir("").join(rel), sandbox.home.join("config.json")).unwrap();
    }
    if let Some(config) = case.get("projectConfig") {
        sandbox.write_project_config(config);
    }
    if let Some(config) = str_field(&case, "projectConfigText") {
        let path = sandbox.ws.join(".soba/config.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, config).unwrap();
    }
    if let Some(env) = case.get("env").and_then(Value::as_object) {
        for (name, value) in env {
            sandbox
                .env
                .push((name.clone(), value.as_str().unwrap_or_default().to_owned()));
        }
    }
    // Special files cannot be committed: `special` lists them by path
    // under `<root>` (`ws/…`, `home/…`) and kind.
    if let Some(specials) = case.get("special").and_then(Value::as_array) {
        let root = sandbox.home.parent().unwrap().to_path_buf();
        for special in specials {
            let at = root.join(str_field(special, "at").expect("special.at"));
            make_special(&at, str_field(special, "kind").expect("special.kind"));
        }
    }
    let session = str_field(&case, "session").map(|rel| install_session(&sandbox, rel));
    let input = str_field(&case, "input").map(|rel| {
        let name = Path::new(rel)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        std::fs::create_dir_all(sandbox.ws.join("input")).unwrap();
        std::fs::copy(
            corpus_dir("").join(rel),
            sandbox.ws.join("input").join(&name),
        )
        .unwrap();
        format!("input/{name}")
    });
    // A writer in this process holds the session, as another soba would.
    let _lock = case
        .get("lockSession")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        .then(|| {
            let (path, _) = session.as_ref().expect("a session to lock");
            let options = WriterOptions {
                durability: Durability::Flush,
                minter: Box::new(SequentialMinter::default()),
            };
            SessionWriter::open(path, options).expect("the test holds the session")
        });
    let args: Vec<String> = case["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| {
            let mut arg = arg.as_str().expect("string args").to_owned();
            if let Some((path, id)) = &session {
                arg = arg
                    .replace("{session}", &path.display().to_string())
                    .replace("{session_id}", id);
            }
            if let Some(input) = &input {
                arg = arg.replace("{input}", input);
            }
            arg
        })
        .collect();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    // A deadline: a command that would hang (reading a FIFO) fails instead.
    let output = sandbox.run_within(60, &arg_refs);
    // The sessions folder's name carries a hash of the (random) workspace.
    let sessions = sandbox.sessions_dir().display().to_string();
    let root = sandbox.home.parent().unwrap().display().to_string();
    // A lock error names the holder: this test process, whose pid varies.
    let holder = regex::Regex::new(r"\(pid \d+, [^)]*\)").expect("a valid pattern");
    let scrub = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes)
            .replace(&sessions, "<sessions>")
            .replace(&root, "<root>");
        holder
            .replace_all(&text, "(pid <pid>, <command>)")
            .into_owned()
    };
    let stdout = scrub(&output.stdout);
    let stderr = scrub(&output.stderr);
    assert!(
        output.status.code().is_some_and(|code| code != 101) && !stderr.contains("panicked"),
        "{}: soba panicked or died: {:?}\n{stderr}",
        case_path.display(),
        output.status
    );
    let mut out = format!(
        "$ soba {}\nexit: {}\n--- stderr\n{stderr}",
        args.join(" ")
            .replace(&sessions, "<sessions>")
            .replace(&root, "<root>"),
        output.status.code().unwrap_or(-1)
    );
    if case.get("stdout").and_then(Value::as_bool).unwrap_or(true) {
        out.push_str(&format!("--- stdout\n{stdout}"));
    }
    out
}

/// Every `tests/bad-input/cli` case: a clear message, the right exit code,
/// no panic.
#[test]
fn the_cli_corpus_gives_clear_errors() {
    let cases = cases("cli");
    assert!(cases.len() >= 30, "{} cli cases", cases.len());
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|case| compare(case, &describe_cli(case)))
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Client settings for the provider cases: one retry, 1 ms backoff.
fn one_retry() -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        stream_timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_retries: 1,
            base_delay: Duration::from_millis(1),
            jitter: 0.0,
            max_retry_after: Duration::from_secs(60),
        },
    }
}

/// Sends one request to a fake server answering with the case's error
/// (`repeat` times) and describes the error the client returns.
async fn describe_provider(
    api: Api,
    status: u16,
    body: &str,
    headers: &[(String, String)],
    repeat: usize,
) -> String {
    let server = FakeServer::start().await.unwrap();
    for _ in 0..repeat {
        let mut script = Script::error(status, body);
        for (name, value) in headers {
            script = script.with_header(name, value);
        }
        server.push(script);
    }
    server.push(Script::error(
        599,
        "a request the client should not have sent",
    ));
    let endpoint = Endpoint::new(server.url()).with_api_key(TEST_KEY);
    let client = client_for(api, endpoint, one_retry()).unwrap();
    let request = ChatRequest::new("model-x", "You are SOBA.", vec![Message::user("hi")], 1_024);
    let mut on_event = |_| {};
    let result = client.stream(&request, &NeverCancel, &mut on_event).await;
    let n_requests = server.requests().len();
    match result {
        Ok(response) => format!(
            "ok ({n_requests} requests): {:?}\n",
            response.message.text()
        ),
        Err(err) => {
            let message = err.to_string().replace(&server.url(), "<url>");
            assert!(!message.contains(TEST_KEY), "the key leaked: {message}");
            assert!(
                message.len() < 2_000,
                "an unbounded error message ({} bytes)",
                message.len()
            );
            format!(
                "error: {message}\nstatus {:?} · overflow {} (stated {:?}) · retryable {} · {n_requests} requests\n",
                err.status(),
                err.is_overflow(),
                err.stated_prompt(),
                err.is_retryable(),
            )
        }
    }
}

/// Every provider error shape in `tests/bad-input/provider`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_error_shape_is_classified_and_clear() {
    let cases = cases("provider");
    assert!(cases.len() >= 20, "{} provider cases", cases.len());
    let mut mismatches = Vec::new();
    for case_path in &cases {
        let case: Value =
            serde_json::from_str(&std::fs::read_to_string(case_path).unwrap()).unwrap();
        let api = Api::parse(str_field(&case, "api").unwrap()).expect("a known api");
        let status = case["status"].as_u64().unwrap() as u16;
        let body = str_field(&case, "body").unwrap_or_default();
        let headers: Vec<(String, String)> = case
            .get("headers")
            .and_then(Value::as_object)
            .map(|headers| {
                headers
                    .iter()
                    .map(|(name, value)| {
                        (name.clone(), value.as_str().unwrap_or_default().to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let repeat = case.get("repeat").and_then(Value::as_u64).unwrap_or(1) as usize;
        let actual = describe_provider(api, status, body, &headers, repeat).await;
        mismatches.extend(compare(case_path, &actual));
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Every built-in overflow wording (SPEC §6.3) is an overflow through a
/// real client, with the stated prompt where the wording gives one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_overflow_sample_is_an_overflow() {
    let mut lines = String::new();
    for (provider, status, body) in OVERFLOW_SAMPLES {
        let described = describe_provider(Api::OpenAiChat, *status, body, &[], 1).await;
        assert!(
            described.contains("overflow true"),
            "{provider}: {described}"
        );
        let summary = described.lines().last().unwrap_or_default();
        lines.push_str(&format!("{provider}: {summary}\n"));
    }
    let expected_path = corpus_dir("provider").join("builtin-overflow-samples.txt");
    if let Some(mismatch) = compare(&expected_path, &lines) {
        panic!("{mismatch}");
    }
}
