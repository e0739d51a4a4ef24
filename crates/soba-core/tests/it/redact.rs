//! Laws of secret redaction (issue 13 classes 1 and 8): only the bytes of
//! secrets change, and a capsule file that parsed still parses.

use proptest::prelude::*;
use soba_core::builder::{ERROR_HEAD_CHARS, ERROR_TAIL_CHARS};
use soba_core::capsule::{LocalSections, Narrative, Quality, Trigger};
use soba_core::facts::truncate_middle_chars;
use soba_core::redact::{marker, redact};
use soba_core::render::{
    CapsuleFileHeader, CapsuleView, capsule_file, parse_capsule_file, sections_markdown,
};
use soba_core::tokens::ByteCounter;

/// A piece of generated text: kept bytes, or a secret and its kind.
#[derive(Debug, Clone)]
enum Part {
    Kept(String),
    Secret(String, &'static str),
}

/// Filler that holds no secret, alone or next to any other piece: prose,
/// markdown structure, near misses of every pattern.
const FILLER: [&str; 24] = [
    "the",
    "Done",
    "fn main() {}",
    "## Goal",
    "## Done",
    "### `cargo test`",
    "\n```\nlet x = 1;\n```\n",
    "\n~~~\n## Goal\n~~~\n",
    "- item",
    "x = 1",
    "tokens: 1234",
    "password: str",
    "token = None",
    "\"password\": \"\"",
    "AKIA is a prefix",
    "Bearer tokens expire.",
    "é…ß",
    "---",
    "| a | b |",
    "[… 12 characters omitted …]",
    "-----BEGIN PUBLIC KEY-----",
    "sk- and ghp_",
    "key:",
    "-----END CERTIFICATE-----",
];

/// A deterministic stream of choices from one seed (xorshift).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn word(&mut self, alphabet: &str, lo: usize, hi: usize) -> String {
        let n = self.range(lo, hi);
        self.chars(alphabet, n)
    }

    fn chars(&mut self, alphabet: &str, n: usize) -> String {
        let alphabet: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| alphabet[self.below(alphabet.len())])
            .collect()
    }
}

const BASE64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const LABELS: [&str; 5] = [
    "RSA PRIVATE KEY",
    "PRIVATE KEY",
    "EC PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
];

fn key_lines(dice: &mut Dice, n: usize) -> String {
    (0..n)
        .map(|_| dice.chars(BASE64, 64) + "\n")
        .collect::<String>()
}

/// One secret with what must stand around it, from a seed.
fn secret(dice: &mut Dice) -> Vec<Part> {
    let label = LABELS[dice.below(LABELS.len())];
    let kept = |text: &str| Part::Kept(text.to_owned());
    match dice.below(13) {
        // A whole key block; PGP with armor headers and a checksum.
        0 => {
            let armor = if label.starts_with("PGP") {
                "Version: GnuPG v2\n\n"
            } else {
                ""
            };
            let n = dice.range(0, 4);
            let last = dice.range(1, 64);
            let body = format!(
                "-----BEGIN {label}-----\n{armor}{}{}\n-----END {label}-----",
                key_lines(dice, n),
                dice.chars(BASE64, last)
            );
            vec![Part::Secret(body, "private_key")]
        }
        // Cut after its BEGIN line: whole lines, then part of one; a prose
        // line follows.
        1 => {
            let n = dice.range(0, 3);
            let partial = if n == 0 {
                dice.range(16, 63)
            } else {
                dice.range(1, 63)
            };
            let body = format!(
                "-----BEGIN {label}-----\n{}{}",
                key_lines(dice, n),
                dice.chars(BASE64, partial)
            );
            vec![Part::Secret(body, "private_key"), kept("\n- ")]
        }
        // Cut before its BEGIN line: part of a line, whole lines, END; a
        // prose line precedes.
        2 => {
            let n = dice.range(1, 3);
            let top = dice.range(1, 64);
            let last = dice.range(1, 64);
            let body = format!(
                "{}\n{}{}\n-----END {label}-----",
                dice.chars(BASE64, top),
                key_lines(dice, n),
                dice.chars(BASE64, last)
            );
            vec![kept(" |\n"), Part::Secret(body, "private_key")]
        }
        3 => vec![Part::Secret(
            format!("sk-ant-api03-{}", dice.chars(ALNUM, 24)),
            "anthropic_key",
        )],
        4 => vec![Part::Secret(
            format!("sk-proj-{}", dice.chars(ALNUM, 24)),
            "openai_key",
        )],
        5 => {
            let prefix = ["ghp", "gho", "ghu", "ghs", "ghr"][dice.below(5)];
            vec![Part::Secret(
                format!("{prefix}_{}", dice.chars(ALNUM, 36)),
                "github_token",
            )]
        }
        6 => {
            let prefix = ["AKIA", "ASIA"][dice.below(2)];
            vec![Part::Secret(
                format!(
                    "{prefix}{}",
                    dice.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
                ),
                "aws_access_key",
            )]
        }
        7 => vec![Part::Secret(
            format!("AIza{}", dice.chars(ALNUM, 35)),
            "google_api_key",
        )],
        8 => vec![Part::Secret(
            format!(
                "eyJ{}.eyJ{}.{}",
                dice.chars(ALNUM, 10),
                dice.chars(ALNUM, 12),
                dice.chars(ALNUM, 20)
            ),
            "jwt",
        )],
        9 => {
            let n = dice.range(16, 40);
            vec![
                kept("Authorization: Bearer "),
                Part::Secret(
                    format!("9{}x", dice.chars("abcdefXYZ0123456789._~+/-", n)),
                    "bearer_token",
                ),
            ]
        }
        10 => vec![
            kept("Authorization: Basic "),
            Part::Secret(format!("{}==", dice.word(ALNUM, 8, 30)), "basic_auth"),
        ],
        // `"name": "value"`, JSON or code.
        11 => {
            let name = [
                "password",
                "api_key",
                "client_secret",
                "access_token",
                "secret",
                "token",
            ][dice.below(6)];
            let value = format!("7{}", dice.word("abcXYZ0123456789/+ -", 3, 30));
            vec![
                kept(&format!("\"{name}\": \"")),
                Part::Secret(value, "secret"),
                kept("\""),
            ]
        }
        // `NAME=value`, env or ~/.aws/credentials.
        _ => {
            let (name, assign) = [
                ("AWS_SECRET_ACCESS_KEY", "="),
                ("aws_secret_access_key", " = "),
                ("export GITHUB_TOKEN", "="),
                ("DB_PASSWORD", ": "),
            ][dice.below(4)];
            let value = format!("7a{}", dice.word(BASE64, 14, 40));
            vec![
                kept(&format!("{name}{assign}")),
                Part::Secret(value, "secret"),
            ]
        }
    }
}

/// Random text: filler and secrets, each secret set off by a space or a
/// line break.
fn generate(seed: u64, n_parts: usize) -> Vec<Part> {
    let mut dice = Dice(seed | 1);
    let mut parts = Vec::new();
    for _ in 0..n_parts {
        let separator = [" ", "\n", "\n\n", " (", ". "][dice.below(5)];
        parts.push(Part::Kept(separator.to_owned()));
        if dice.below(3) == 0 {
            parts.extend(secret(&mut dice));
        } else {
            parts.push(Part::Kept(FILLER[dice.below(FILLER.len())].to_owned()));
        }
    }
    parts.push(Part::Kept("\n".to_owned()));
    parts
}

fn input_of(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|part| match part {
            Part::Kept(text) | Part::Secret(text, _) => text.as_str(),
        })
        .collect()
}

fn expected_of(parts: &[Part]) -> (String, usize) {
    let mut text = String::new();
    let mut n = 0;
    for part in parts {
        match part {
            Part::Kept(kept) => text.push_str(kept),
            Part::Secret(_, kind) => {
                text.push_str(&marker(kind));
                n += 1;
            }
        }
    }
    (text, n)
}

/// The `## ` headings of a parsed capsule file, in order.
fn headings(text: &str) -> Result<Vec<Option<String>>, String> {
    parse_capsule_file(text)
        .map(|parsed| parsed.sections.into_iter().map(|s| s.heading).collect())
        .map_err(|err| err.to_string())
}

fn view_of<'a>(narrative: &'a Narrative, local: &'a LocalSections) -> CapsuleView<'a> {
    CapsuleView {
        narrative,
        earlier_narrative: None,
        local,
        quality: Quality::Degraded,
        trigger: Trigger::User,
        summarizer: "deterministic",
        imported: None,
        scope: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Redaction changes only the bytes of secrets: the output is the input
    /// with exactly the generated secret spans replaced by their markers.
    #[test]
    fn only_secret_bytes_change(seed in any::<u64>(), n_parts in 0usize..24) {
        let parts = generate(seed, n_parts);
        let input = input_of(&parts);
        let (expected, n) = expected_of(&parts);
        let redacted = redact(&input);
        prop_assert_eq!(&redacted.text, &expected, "input: {:?}", input);
        prop_assert_eq!(redacted.count, n);
        prop_assert_eq!(redacted.by_kind.iter().map(|(_, n)| n).sum::<usize>(), n);
        prop_assert_eq!(redact(&redacted.text).count, 0);
    }

    /// A capsule whose sections hold cut and whole keys (its unresolved
    /// errors cut to 250 + 250 characters, as the builder does) parses
    /// after redaction whenever it parsed before, with the same sections;
    /// so does the file the writer renders (redacted), and redacting that
    /// again changes nothing structural.
    #[test]
    fn redacted_capsules_parse_with_the_same_sections(
        seeds in prop::collection::vec(any::<u64>(), 4),
        n_parts in 1usize..16,
    ) {
        let texts: Vec<String> = seeds.iter().map(|seed| input_of(&generate(*seed, n_parts))).collect();
        let narrative = Narrative {
            goal: texts[0].clone(),
            done: texts[1].clone(),
            next_steps: "ship it".to_owned(),
            ..Narrative::default()
        };
        let local = LocalSections {
            latest_instructions: vec![texts[2].clone()],
            unresolved_errors: texts
                .iter()
                .map(|text| {
                    format!(
                        "cargo test\n{}",
                        truncate_middle_chars(text, ERROR_HEAD_CHARS, ERROR_TAIL_CHARS)
                    )
                })
                .collect(),
            ..LocalSections::default()
        };
        let view = view_of(&narrative, &local);
        let raw = format!(
            "---\nschemaVersion: 1\ntitle: \"{}\"\n---\n# t\n\n{}",
            texts[3].replace(['\n', '"', '\\'], " "),
            sections_markdown(&view)
        );
        let before = headings(&raw);
        let after = headings(&redact(&raw).text);
        if before.is_ok() {
            prop_assert_eq!(&after, &before);
        }
        // The writer's own file always parses, with the sections it wrote.
        let header = CapsuleFileHeader {
            id: "ck_0190f3a2b4c577f3a9d1000000000001",
            title: &texts[3],
            created_at: "2026-03-01T12:00:00Z",
            source_session: "s",
            source_leaf: "e_0190f3a2b4c577f3a9d1000000000042",
        };
        let file = capsule_file(&header, &view, &ByteCounter);
        let written = headings(&file.text);
        if let Ok(before) = &before {
            prop_assert_eq!(written.as_ref().map(Vec::len), Ok(before.len()), "{}", file.text);
        }
        prop_assert_eq!(&headings(&redact(&file.text).text), &written);
    }
}
