//! `soba budget` (SPEC §4.3, §11.5) run as a user runs it: the built binary,
//! its stdout, stderr and exit code.

use std::process::{Command, Output};

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
    let output = soba(&["budget", "--context-window", "8192", "--max-output", "2048"]);
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
    let output = soba(&[
        "budget",
        "--context-window",
        "32768",
        "--max-output",
        "8192",
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
            "error: --set compaction.keepRecent=1: unknown key compaction.keepRecent; \
             did you mean compaction.keepRecentTokens?"
        )
    );

    let elsewhere = bare_with(&["--set", "tools.allow=[]"]);
    assert_eq!(elsewhere.status.code(), Some(1));
    assert_eq!(
        text(&elsewhere.stderr).lines().next(),
        Some("error: --set tools.allow: soba budget reads only compaction.* and models.* keys")
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

    let unknown = soba(&["budget", "--model", "ollama/qwen3-coder"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(
        text(&unknown.stderr),
        "error: model ollama/qwen3-coder has no known context window: \
         set models.\"ollama/qwen3-coder\".contextWindow in the config (and maxOutputTokens)\n\
         hint: or pass --set 'models.\"ollama/qwen3-coder\".contextWindow=N'\n"
    );
}

#[test]
fn sessions_are_not_wired_yet() {
    let output = soba(&["budget", "--session", "e_7f3a"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(
            "error: soba budget --session e_7f3a: reading a session's budget is not wired yet"
        ),
        "{stderr}"
    );
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
    assert_eq!(
        bare_with(&["--set", "compaction.auto"]).status.code(),
        Some(2)
    );
}
