//! Terminal escapes from files and the environment (issue 13, class 5):
//! every entry point that prints an outside string shows ESC, BEL, C1 and
//! bidi characters as visible escapes and never writes them raw. The
//! crafted inputs are the `tests/bad-input/cli/terminal/` files, whose
//! exact output the bad-input corpus also pins.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Sandbox, text};

/// The escape sequences planted in every crafted file, as shown.
const SHOWN: &str = "\\x1b]52;c;aGk=\\x07\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}31m\\u{202e}evil";
const SESSION_ID: &str = "0194c2d0-e4c0-7000-8000-00000000e5c1";

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/bad-input/cli/terminal")
        .join(name)
}

/// Asserts that neither stream holds a character a terminal would act on
/// or that reorders text, and that `shown` appears escaped in `stream`.
fn check(output: &Output, stream: Stream, shown: &str) {
    for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        let printed = text(bytes);
        let bad: Vec<char> = printed
            .chars()
            .filter(|&ch| {
                (ch.is_control() && ch != '\n')
                    || matches!(ch, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            })
            .collect();
        assert!(bad.is_empty(), "{name} holds {bad:?}:\n{printed}");
    }
    let printed = text(match stream {
        Stream::Stdout => &output.stdout,
        Stream::Stderr => &output.stderr,
    });
    assert!(printed.contains(shown), "{shown} not in:\n{printed}");
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

fn with_session() -> Sandbox {
    let sandbox = Sandbox::new();
    let dir = sandbox.sessions_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        corpus("escapes.jsonl"),
        dir.join(format!("{SESSION_ID}.jsonl")),
    )
    .unwrap();
    sandbox
}

#[test]
fn sessions_shows_the_title_and_cwd_escaped() {
    let sandbox = with_session();
    let output = sandbox.run_ok(&["sessions"]);
    check(
        &output,
        Stream::Stdout,
        &format!("  read {SHOWN} second line\n"),
    );
    let json = sandbox.run_ok(&["sessions", "--json"]);
    check(&json, Stream::Stdout, "\\u001b]52;c;aGk=\\u0007");
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        rows[0]["cwd"]
            .as_str()
            .unwrap()
            .contains("\u{1b}]0;pwned\u{7}\u{9b}31m\u{202e}")
    );
}

#[test]
fn show_shows_cwd_model_and_text_escaped() {
    let sandbox = with_session();
    let output = sandbox.run_ok(&["show", SESSION_ID]);
    check(
        &output,
        Stream::Stdout,
        &format!("cwd       /work/{SHOWN} (linux)"),
    );
    check(
        &output,
        Stream::Stdout,
        &format!("model     anthropic/claude-sonnet-4-5{SHOWN}"),
    );
    let entries = sandbox.run_ok(&["show", "--entries", SESSION_ID]);
    // The preview is cut at 72 characters.
    check(
        &entries,
        Stream::Stdout,
        "user read \\x1b]52;c;aGk=\\x07\\x1b[2J",
    );
    check(&entries, Stream::Stdout, &format!("result out {SHOWN}"));
    check(&entries, Stream::Stdout, &format!("calls bash{SHOWN}"));
}

#[test]
fn import_summary_and_diagnostics_are_escaped() {
    let sandbox = Sandbox::new();
    let source = corpus("escapes-pi.jsonl");
    let output = sandbox.run_ok(&["import", "--dry-run", source.to_str().unwrap()]);
    check(
        &output,
        Stream::Stdout,
        &format!(", pi-{SHOWN}): dry run, not written"),
    );
    let json = sandbox.run_ok(&["import", "--dry-run", "--json", source.to_str().unwrap()]);
    check(&json, Stream::Stdout, "\\u009b31m\\u202eevil");
}

#[test]
fn capsule_load_confirmation_is_escaped() {
    let sandbox = with_session();
    std::fs::copy(
        corpus("escapes.capsule.md"),
        sandbox.ws.join("x.capsule.md"),
    )
    .unwrap();
    let output = sandbox.run_ok(&[
        "capsule",
        "load",
        "x.capsule.md",
        "--session",
        SESSION_ID,
        "--model",
        "anthropic/claude-sonnet-4-5",
    ]);
    check(&output, Stream::Stdout, &format!("\"Title {SHOWN}\""));
}

#[test]
fn config_show_escapes_a_model_from_the_environment() {
    let mut sandbox = Sandbox::new();
    sandbox.env.push((
        "SOBA_MODEL".into(),
        "anthropic/\u{1b}]52;c;aGk=\u{7}\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m\u{202e}evil".into(),
    ));
    let output = sandbox.run_ok(&["config", "show"]);
    check(
        &output,
        Stream::Stdout,
        &format!("# model in use: anthropic/{SHOWN} (environment variable SOBA_MODEL)"),
    );
    let json = sandbox.run_ok(&["config", "show", "--json"]);
    check(&json, Stream::Stdout, "\\u009b31m\\u202eevil");
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        value["model"]["id"]
            .as_str()
            .unwrap()
            .ends_with("\u{9b}31m\u{202e}evil")
    );
}

#[test]
fn errors_quoting_arguments_and_config_are_escaped() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["show", "\u{1b}]0;pwned\u{7}\u{202e}"]);
    assert_eq!(output.status.code(), Some(1));
    check(&output, Stream::Stderr, "\\u{1b}]0;pwned\\u{7}\\u{202e}");

    // A config value quoted in the error: serde already escapes C0, the
    // sanitizer the C1 and bidi characters.
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.home.join("config.json"),
        r#"{"compaction": {"keepRecentTokens": "\u001b[2J\u009b\u202e"}}"#,
    )
    .unwrap();
    let output = sandbox.run(&["config", "show"]);
    assert_eq!(output.status.code(), Some(1));
    check(
        &output,
        Stream::Stderr,
        "not \"\\u001b[2J\\u{9b}\\u{202e}\"",
    );
}
