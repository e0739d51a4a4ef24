//! Secret redaction for every `.capsule.md` SOBA writes (SPEC §12): matches
//! are replaced by `[REDACTED:<kind>]` and counted, so the caller can say how
//! many were removed.

use std::sync::OnceLock;

use regex::{Captures, Regex};

/// What was redacted from a text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Redacted {
    /// The text with every match replaced.
    pub text: String,
    /// Replacements made, all kinds together.
    pub count: usize,
    /// Replacements per kind, in pattern order, kinds with none omitted.
    pub by_kind: Vec<(&'static str, usize)>,
}

/// How a pattern's match is replaced.
#[derive(Debug, Clone, Copy)]
enum Replace {
    /// The whole match.
    Whole,
    /// Only the value of a `name = value` assignment (capture group 3),
    /// keeping the name and separator (groups 1 and 2).
    AssignmentValue,
}

struct Pattern {
    kind: &'static str,
    regex: Regex,
    replace: Replace,
}

/// The patterns, in application order: the more specific prefixes first, so
/// `sk-ant-…` is named an Anthropic key and not an OpenAI one.
const PATTERNS: [(&str, &str, Replace); 10] = [
    (
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
        Replace::Whole,
    ),
    // A PEM block cut before its END line (a truncated tool output).
    (
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[A-Za-z0-9+/=\s]*",
        Replace::Whole,
    ),
    (
        "anthropic_key",
        r"\bsk-ant-[A-Za-z0-9_\-]{16,}",
        Replace::Whole,
    ),
    ("openai_key", r"\bsk-[A-Za-z0-9_\-]{16,}", Replace::Whole),
    (
        "github_token",
        r"\b(?:ghp|gho)_[A-Za-z0-9]{20,}",
        Replace::Whole,
    ),
    (
        "github_token",
        r"\bgithub_pat_[A-Za-z0-9_]{20,}",
        Replace::Whole,
    ),
    (
        "slack_token",
        r"\bxox[abp]-[A-Za-z0-9\-]{10,}",
        Replace::Whole,
    ),
    ("aws_access_key", r"\bAKIA[0-9A-Z]{16}\b", Replace::Whole),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}",
        Replace::Whole,
    ),
    (
        "secret",
        r"(?i)(api[_-]?key|secret|token|password)(\s*[:=]\s*)(\S{16,})",
        Replace::AssignmentValue,
    ),
];

fn patterns() -> &'static [Pattern] {
    static COMPILED: OnceLock<Vec<Pattern>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        PATTERNS
            .iter()
            .map(|(kind, source, replace)| Pattern {
                kind,
                regex: Regex::new(source).expect("constant redaction pattern compiles"),
                replace: *replace,
            })
            .collect()
    })
}

/// Returns the marker that replaces a secret of `kind`.
pub fn marker(kind: &str) -> String {
    format!("[REDACTED:{kind}]")
}

/// Replaces every secret in `text` with `[REDACTED:<kind>]` and counts them.
pub fn redact(text: &str) -> Redacted {
    let mut current = text.to_owned();
    let mut by_kind: Vec<(&'static str, usize)> = Vec::new();
    for pattern in patterns() {
        let mut n = 0;
        let replaced =
            pattern
                .regex
                .replace_all(&current, |caps: &Captures<'_>| match pattern.replace {
                    Replace::Whole => {
                        n += 1;
                        marker(pattern.kind)
                    }
                    Replace::AssignmentValue => {
                        let value = caps.get(3).map_or("", |m| m.as_str());
                        let whole = caps.get(0).map_or("", |m| m.as_str());
                        // A value an earlier pattern already redacted stays as is.
                        if value
                            .trim_start_matches(['"', '\''])
                            .starts_with("[REDACTED:")
                        {
                            return whole.to_owned();
                        }
                        n += 1;
                        let name = caps.get(1).map_or("", |m| m.as_str());
                        let separator = caps.get(2).map_or("", |m| m.as_str());
                        format!("{name}{separator}{}", marker(pattern.kind))
                    }
                });
        if n > 0 {
            current = replaced.into_owned();
            match by_kind.iter_mut().find(|(kind, _)| *kind == pattern.kind) {
                Some((_, total)) => *total += n,
                None => by_kind.push((pattern.kind, n)),
            }
        }
    }
    let count = by_kind.iter().map(|(_, n)| n).sum();
    Redacted {
        text: current,
        count,
        by_kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: &str, count: usize) {
        let redacted = redact(input);
        assert_eq!(redacted.text, expected, "{input}");
        assert_eq!(redacted.count, count, "{input}");
    }

    #[test]
    fn each_pattern() {
        check(
            "key sk-ant-api03-abcdefghijklmnopqrstuv end",
            "key [REDACTED:anthropic_key] end",
            1,
        );
        check(
            "OPENAI sk-proj-abcdefghijklmnopqrstuvwx",
            "OPENAI [REDACTED:openai_key]",
            1,
        );
        check(
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "[REDACTED:github_token]",
            1,
        );
        check(
            "gho_abcdefghijklmnopqrstuvwxyz0123456789",
            "[REDACTED:github_token]",
            1,
        );
        check(
            "github_pat_11ABCDEFG0123456789_abcdefghijkl",
            "[REDACTED:github_token]",
            1,
        );
        check("xoxb-1234567890-abcdef", "[REDACTED:slack_token]", 1);
        check(
            "aws AKIAIOSFODNN7EXAMPLE.",
            "aws [REDACTED:aws_access_key].",
            1,
        );
        check(
            "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "Bearer [REDACTED:jwt]",
            1,
        );
        check(
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc==\n-----END RSA PRIVATE KEY-----\nb",
            "a\n[REDACTED:private_key]\nb",
            1,
        );
        check(
            "-----BEGIN PRIVATE KEY-----\nMIIEow\nab",
            "[REDACTED:private_key]",
            1,
        );
        check(
            "password = hunter2hunter2hunter2",
            "password = [REDACTED:secret]",
            1,
        );
        check(
            "API_KEY: 0123456789abcdef0123",
            "API_KEY: [REDACTED:secret]",
            1,
        );
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        for text in [
            "tokens: 1234",
            "token = short",
            "use sk-learn for this",
            "the password is stored in the vault",
            "AKIA is a prefix",
        ] {
            check(text, text, 0);
        }
    }

    #[test]
    fn counts_kinds_without_double_counting() {
        let redacted =
            redact("api_key=sk-abcdefghijklmnopqrstuvwx and ghp_abcdefghijklmnopqrstuvwxyz01");
        assert_eq!(
            redacted.text,
            "api_key=[REDACTED:openai_key] and [REDACTED:github_token]"
        );
        assert_eq!(redacted.count, 2);
        assert_eq!(
            redacted.by_kind,
            vec![("openai_key", 1), ("github_token", 1)]
        );
    }
}
