//! Tool-result outcomes: the exit code a result reports and whether it
//! failed (SPEC §9.2).

use std::sync::OnceLock;

use regex::Regex;

use crate::message::ToolResult;
use crate::truncate::{head_chars, tail_chars};

pub(super) fn exit_code_head() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // Codex's header anywhere in the head; Claude Code's `Exit code N`
        // only as the result's first line (the output after it can be
        // longer than the tail the trailing form is looked for in).
        Regex::new(
            r"Process exited with code (-?[0-9]+)|\A\s*Exit code (-?[0-9]+)[ \t]*(?:\r\n|\r|\n|\z)",
        )
        .expect("constant regex compiles")
    })
}

pub(super) fn exit_code_tail() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)(?:exit(?:ed with)? code|exit status|exit_code)\s*[:=]?\s*(-?[0-9]+)")
            .expect("constant regex compiles")
    })
}

/// Returns the exit status a tool result reports: Codex's header
/// (`Process exited with code N`), Claude Code's first line (`Exit code
/// N`, however long the output after it), or a trailing `exit code N` (OpenHands,
/// pi, Gemini CLI's `Exit Code: N`).
pub fn exit_code(text: &str) -> Option<i64> {
    if let Some(caps) = exit_code_head().captures(head_chars(text, 600)) {
        return caps
            .get(1)
            .or_else(|| caps.get(2))
            .map(|m| code(m.as_str()));
    }
    exit_code_tail()
        .captures_iter(tail_chars(text, 300))
        .last()
        .and_then(|caps| caps.get(1))
        .map(|m| code(m.as_str()))
}

/// Returns an exit status of ASCII digits; one too large for an `i64` is
/// still not 0 (an attack finding: `Exit code 99999999999999999999` read
/// as no code made a failed check "passed").
fn code(digits: &str) -> i64 {
    digits.parse().unwrap_or(if digits.starts_with('-') {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// Returns whether a tool result failed: `is_error`, a non-zero exit status,
/// or Codex's `exec_command failed` text.
pub fn is_failure(result: &ToolResult) -> bool {
    if result.is_error {
        return true;
    }
    let text = result.text();
    failed(false, &text, exit_code(&text))
}

/// Returns whether a result with this flag, text and exit status failed.
pub(super) fn failed(is_error: bool, text: &str, exit: Option<i64>) -> bool {
    is_error
        || exit.is_some_and(|code| code != 0)
        || text.trim_start().starts_with("exec_command failed")
}
