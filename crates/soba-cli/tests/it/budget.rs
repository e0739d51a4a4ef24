//! `soba budget` (SPEC §4.3, §11.5) run as a user runs it: the built binary,
//! its stdout, stderr and exit code — on bare numbers, a model, and a
//! session measured without its lock (SPEC §3.2).

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::json;
use soba_core::Usage;
use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
use soba_store::log::{SessionWriter, WriterOptions};

use crate::support::Sandbox;

fn soba(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .env_remove("SOBA_HOME")
        .env_remove("SOBA_MODEL")
        .output()
        .expect("the soba binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("soba prints UTF-8")
}

/// Returns the value printed on the line named `name`.
fn value<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some(name)).then(|| words.next()).flatten()
    })
}

/// The rest of the line named `name`, after its padding.
fn line_value<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout.lines().find_map(|line| {
        line.strip_prefix(name)
            .filter(|rest| rest.starts_with(' '))
            .map(str::trim)
    })
}

const BARE: [&str; 5] = [
    "budget",
    "--context-window",
    "200000",
    "--max-output",
    "32000",
];

fn bare_with(extra: &[&str]) -> Output {
    soba(&[&BARE[..], extra].concat())
}

#[test]
fn prints_every_limit_for_bare_numbers() {
    let output = soba(&BARE);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stderr), "");
    insta::assert_snapshot!(text(&output.stdout));
}

#[test]
fn an_impossible_budget_exits_1_with_the_spec_message() {
    // A small window alone is not impossible (its defaults scale); a reserve
    // set by hand that fills it is.
    let output = soba(&[
        "budget",
        "--context-window",
        "8192",
        "--max-output",
        "2048",
        "--set",
        "compaction.safetyReserveTokens=8192",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output.stdout), "");
    assert_eq!(
        text(&output.stderr),
        "error: hardLimit \u{2212}2,048 ≤ 0 (safetyReserveTokens too large for this model)\n\
         hint: lower --max-output or compaction.safetyReserveTokens, e.g. --set compaction.safetyReserveTokens=1024\n"
    );
}

#[test]
fn warns_when_soft_compaction_sits_at_the_hard_limit() {
    // The spec's absolute defaults, set by hand on a 32k window: the soft
    // threshold sits one token under the hard one.
    let output = soba(&[
        "budget",
        "--context-window",
        "32768",
        "--max-output",
        "8192",
        "--set",
        "compaction.safetyReserveTokens=8192",
        "--set",
        "compaction.minTokensForAutoCompact=32000",
        "--set",
        "compaction.keepRecentTokens=20000",
    ]);
    assert_eq!(output.status.code(), Some(0));
    let stdout = text(&output.stdout);
    assert_eq!(value(&stdout, "hardLimit"), Some("16,384"));
    assert_eq!(value(&stdout, "softLimit"), Some("16,383"));
    assert_eq!(value(&stdout, "keepRecent"), Some("12,287"));
    assert_eq!(
        text(&output.stderr),
        "warning: soft compaction fires only one token below the hard limit for this model; \
         set compaction.minTokensForAutoCompact below 13,107 to compact earlier\n"
    );
}

#[test]
fn set_overrides_compaction_keys() {
    let output = bare_with(&[
        "--set",
        "compaction.maxWorkingSetTokens=null",
        "--set",
        "compaction.keepRecentTokens=30000",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    let stdout = text(&output.stdout);
    assert_eq!(value(&stdout, "autoLimit"), Some("127,846"));
    assert_eq!(value(&stdout, "base"), Some("159,808"));
    assert_eq!(value(&stdout, "hygieneLimit"), Some("79,904"));
    assert_eq!(value(&stdout, "keepRecent"), Some("30,000"));

    let bad = bare_with(&["--set", "compaction.hygieneRatio=1.5"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        text(&bad.stderr).lines().next(),
        Some("error: compaction.hygieneRatio 1.5 is outside (0, 1]")
    );

    let typo = bare_with(&["--set", "compaction.keepRecent=1"]);
    assert_eq!(typo.status.code(), Some(1));
    assert_eq!(
        text(&typo.stderr).lines().next(),
        Some(
            "error: unknown key compaction.keepRecent in --set compaction.keepRecent=1; \
             did you mean compaction.keepRecentTokens?"
        )
    );

    // Any key is checked as every command checks it.
    let elsewhere = bare_with(&["--set", "tools.allow=[\"bsh\"]"]);
    assert_eq!(elsewhere.status.code(), Some(1));
    assert!(
        text(&elsewhere.stderr).starts_with(
            "error: unknown tool \"bsh\" in --set tools.allow=[\"bsh\"]: did you mean bash?"
        ),
        "{}",
        text(&elsewhere.stderr)
    );
}

#[test]
fn model_limits_come_from_the_registry_and_its_overrides() {
    let output = soba(&[
        "budget",
        "--model",
        "ollama/qwen3-coder",
        "--set",
        "models.\"ollama/qwen3-coder\".contextWindow=65000",
        "--set",
        "models.ollama/qwen3-coder.maxOutputTokens=8000",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    let stdout = text(&output.stdout);
    assert_eq!(value(&stdout, "model"), Some("ollama/qwen3-coder"));
    assert_eq!(value(&stdout, "hardLimit"), Some("48,808"));
    assert_eq!(value(&stdout, "softLimit"), Some("39,046"));
    assert_eq!(value(&stdout, "roiFloor"), Some("9,761"));

    // Nothing listens on port 9 (discard): the probe fails at once.
    let unknown = soba(&[
        "budget",
        "--model",
        "ollama/qwen3-coder",
        "--set",
        "providers.ollama.baseUrl=\"http://127.0.0.1:9/v1\"",
    ]);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(
        text(&unknown.stderr),
        "error: model ollama/qwen3-coder has no known context window: \
         set models.\"ollama/qwen3-coder\".contextWindow in the config (and maxOutputTokens)\n\
         hint: or pass --set 'models.\"ollama/qwen3-coder\".contextWindow=N'\n\
         hint: SOBA asked the server at http://127.0.0.1:9 and the server did not report a context window \
         (http://127.0.0.1:9/props: connection refused or unreachable; \
         http://127.0.0.1:9/api/ps: connection refused or unreachable; \
         http://127.0.0.1:9/api/show: connection refused or unreachable; is it running?)\n"
    );
}

/// A sandbox whose model `fake/test-model` (64,000 / 4,000) and
/// `fake/small` (32,768 / 8,192) are served by `server`.
fn fake_sandbox(server: &FakeServer) -> Sandbox {
    let mut sandbox = Sandbox::new();
    sandbox.write_user_config(&json!({
        "model": "fake/test-model",
        "providers": {"fake": {"api": "openai-chat", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}},
        "models": {
            "fake/test-model": {"contextWindow": 64000, "maxOutputTokens": 4000},
            "fake/small": {"contextWindow": 32768, "maxOutputTokens": 8192}
        },
    }));
    sandbox.env = vec![("FAKE_KEY".into(), "sk-fake".into())];
    sandbox
}

async fn run_async(sandbox: &Sandbox, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::from(sandbox.command(args));
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("soba finishes")
        .expect("soba starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_measured_while_another_process_holds_it_open() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = fake_sandbox(&server);
    server.push(Script::stream(
        Dialect::Chat,
        &Reply::text("Noted.").with_usage(Usage {
            input: 2_000,
            output: 5,
            ..Usage::default()
        }),
    ));
    let first = run_async(&sandbox, &["run", "hello"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let file = sandbox.session_files().pop().expect("one session");
    let id = file.file_stem().unwrap().to_str().unwrap().to_owned();

    // This process now holds the session open for writing.
    let writer = SessionWriter::open(&file, WriterOptions::default()).unwrap();
    let output = run_async(&sandbox, &["budget", "--session", &id[..8]]).await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stderr), "");
    assert_eq!(value(&stdout, "session"), Some(id.as_str()));
    assert_eq!(value(&stdout, "model"), Some("fake/test-model"));
    // One response with usage: the factor moved off the seed, learned
    // from it.
    let calibration = line_value(&stdout, "calibration").unwrap();
    assert!(calibration.ends_with(" from 1 response"), "{stdout}");
    assert_ne!(calibration, "1.000 from 1 response", "{stdout}");
    // hardLimit = 64,000 − 4,000 − 8,192; softLimit = floor(0.8 × it).
    assert_eq!(value(&stdout, "hardLimit"), Some("51,808"));
    assert_eq!(value(&stdout, "softLimit"), Some("41,446"));
    assert_eq!(value(&stdout, "autoLimit"), Some("41,446"));
    assert_eq!(value(&stdout, "keepRecent"), Some("20,000"));
    assert_eq!(value(&stdout, "roiFloor"), Some("10,361"));
    // The reported prompt of the last response, plus its answer as re-sent.
    // The fake server names itself `fake-model`: the response counts as
    // fake/test-model's only because soba records the session's model id
    // on what it appends.
    assert_eq!(
        value(&stdout, "source"),
        Some("provider_usage"),
        "{}",
        std::fs::read_to_string(&file).unwrap()
    );
    let effective: u64 = value(&stdout, "effective")
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!((2_001..2_030).contains(&effective), "{stdout}");
    assert!(stdout.contains("(3% of hardLimit)"), "{stdout}");
    // The lock is real: a writer is refused while it is held.
    let refused = run_async(&sandbox, &["run", "--resume", &id, "again"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    assert_eq!(server.requests().len(), 1);
    drop(writer);

    // --model measures the same log against another model's limits.
    let output = run_async(
        &sandbox,
        &["budget", "--session", &id, "--model", "fake/small"],
    )
    .await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(value(&stdout, "model"), Some("fake/small"));
    assert_eq!(
        line_value(&stdout, "calibration"),
        Some("1.100 (the model's seed: no response usage yet)")
    );
    // A 32k window: the small-window defaults (8,192 × 32,768 / 64,000 =
    // 4,194 reserved), so no warning.
    assert_eq!(value(&stdout, "hardLimit"), Some("20,382"));
    assert_eq!(value(&stdout, "softLimit"), Some("16,384"));
    assert_eq!(value(&stdout, "keepRecent"), Some("4,096"));
    // The session's last response came from another model: estimated.
    assert_eq!(value(&stdout, "source"), Some("estimated"));
    assert_eq!(text(&output.stderr), "");
    // --set reaches the configuration as for every command.
    let output = run_async(
        &sandbox,
        &[
            "budget",
            "--session",
            &id,
            "--set",
            "compaction.safetyReserveTokens=1000",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(value(&text(&output.stdout), "hardLimit"), Some("59,000"));
    let stdout = text(&output.stdout);
    assert_eq!(
        line_value(&stdout, "counts"),
        Some("stored for all 2 messages of the live context (o200k_base)"),
        "{stdout}"
    );

    // The same log as an older soba wrote it, without counts: measured
    // the same, and the counts line says they were counted again.
    let stored_effective = value(&stdout, "effective").map(str::to_owned);
    let stripped: String = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(object) = value.as_object_mut() {
                object.remove("tokens");
            }
            value.to_string() + "\n"
        })
        .collect();
    std::fs::write(&file, stripped).unwrap();
    let output = run_async(
        &sandbox,
        &[
            "budget",
            "--session",
            &id,
            "--set",
            "compaction.safetyReserveTokens=1000",
        ],
    )
    .await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        line_value(&stdout, "counts"),
        Some(
            "2 of 2 messages of the live context counted again with o200k_base (2 stored no count: written by an older soba)"
        ),
        "{stdout}"
    );
    assert_eq!(
        value(&stdout, "effective").map(str::to_owned),
        stored_effective
    );
}

#[test]
fn an_unknown_session_names_the_fix() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["budget", "--session", "e_7f3a"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("soba sessions"), "{stderr}");
    assert_eq!(text(&output.stdout), "");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(soba(&["budget"]).status.code(), Some(2));
    assert_eq!(
        soba(&["budget", "--context-window", "200000"])
            .status
            .code(),
        Some(2)
    );
    let both = soba(&[
        "budget",
        "--context-window",
        "1",
        "--max-output",
        "1",
        "--model",
        "x",
    ]);
    assert_eq!(both.status.code(), Some(2));
    let session_and_numbers = soba(&[
        "budget",
        "--session",
        "e_7f3a",
        "--context-window",
        "1",
        "--max-output",
        "1",
    ]);
    assert_eq!(session_and_numbers.status.code(), Some(2));
    assert_eq!(
        bare_with(&["--set", "compaction.auto"]).status.code(),
        Some(2)
    );
}

/// `soba budget --session` remembers the counts of the texts it counts
/// every run (system prompt, tool schemas) in `$SOBA_HOME/token-counts.json`:
/// the second run adds nothing and prints the same figures, and a damaged
/// memo is counted again, never believed.
#[tokio::test]
async fn a_second_measurement_takes_the_fixed_counts_from_the_memo() {
    let server = FakeServer::start().await.unwrap();
    let sandbox = fake_sandbox(&server);
    server.push(Script::stream(Dialect::Chat, &Reply::text("Noted.")));
    let first = run_async(&sandbox, &["run", "hello"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let file = sandbox.session_files().pop().expect("one session");
    let id = file.file_stem().unwrap().to_str().unwrap().to_owned();
    let memo = sandbox.home.join("token-counts.json");
    let _ = std::fs::remove_file(&memo);

    let measured = run_async(&sandbox, &["budget", "--session", &id]).await;
    assert_eq!(
        measured.status.code(),
        Some(0),
        "{}",
        text(&measured.stderr)
    );
    let saved = std::fs::read_to_string(&memo).expect("the memo is written");
    let parsed: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(parsed["version"], 1);
    assert!(
        parsed["counts"].as_object().unwrap().len() >= 2,
        "the system prompt and the tool schemas at least: {saved}"
    );

    let again = run_async(&sandbox, &["budget", "--session", &id]).await;
    assert_eq!(text(&again.stdout), text(&measured.stdout));
    assert_eq!(
        std::fs::read_to_string(&memo).unwrap(),
        saved,
        "nothing new"
    );

    std::fs::write(&memo, "{\"version\": 1, \"counts\": {\"zz\": [1, false]").unwrap();
    let damaged = run_async(&sandbox, &["budget", "--session", &id]).await;
    assert_eq!(damaged.status.code(), Some(0), "{}", text(&damaged.stderr));
    assert_eq!(text(&damaged.stdout), text(&measured.stdout));
    let rewritten: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&memo).unwrap()).unwrap();
    assert_eq!(rewritten, parsed);
}
