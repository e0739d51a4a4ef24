//! Secret redaction for every `.capsule.md` SOBA writes (SPEC §12): secret
//! spans are replaced by `[REDACTED:<kind>]` and counted, so the caller can
//! say how many were removed.
//!
//! One span redactor: every pattern finds candidate spans on the *original*
//! text; overlapping candidates are merged (earliest start, then longest,
//! then the kind earlier in [`KINDS`] names the span); the markers are then
//! spliced in one pass. Every byte outside a span survives unchanged and in
//! order. Each pattern is bounded so that a span never crosses structure:
//! only a private key block spans lines, and its body is base64 lines,
//! armor headers and SOBA's own omission markers, ending at its `END` line
//! or, when the block was cut, at its last base64 line. A span therefore
//! never holds a heading, a code fence or a front matter delimiter, and a
//! capsule file that parsed before redaction parses after it with the same
//! sections.

use std::sync::OnceLock;

use regex::Regex;

/// What was redacted from a text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Redacted {
    /// The text with every secret span replaced by its marker.
    pub text: String,
    /// Replacements made, all kinds together.
    pub count: usize,
    /// Replacements per kind, in [`KINDS`] order, kinds with none omitted.
    pub by_kind: Vec<(&'static str, usize)>,
}

/// The kinds of secret, in priority order: when two candidate spans start
/// at the same byte and are equally long, the earlier kind names the span
/// (so `sk-ant-…` is an Anthropic key and not an OpenAI one).
pub const KINDS: [&str; 16] = [
    "private_key",
    "anthropic_key",
    "openai_key",
    "github_token",
    "gitlab_token",
    "slack_token",
    "stripe_key",
    "huggingface_token",
    "aws_access_key",
    "google_api_key",
    "google_oauth_token",
    "jwt",
    "url_password",
    "bearer_token",
    "basic_auth",
    "secret",
];

/// Which bytes of a regex match are the secret.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// The whole match.
    Whole,
    /// The first capture group that took part (the value of `name: value`,
    /// the credential after `Bearer`); the rest of the match is kept.
    Group,
}

/// A further check of the secret's bytes.
type Accept = fn(&str) -> bool;

struct Pattern {
    kind: usize,
    regex: Regex,
    take: Take,
    accept: Accept,
}

/// Names after which a value is a secret: `password`, `client_secret`,
/// `GITHUB_TOKEN`, `api-key`, `AWS_SECRET_ACCESS_KEY`, `SessionToken`. The
/// name must end there (`tokens: 1234` is no assignment); its closing quote,
/// JSON-escaped or not, may follow.
const SECRET_NAME: &str = r#"(?i)(?:pass(?:word|wd)|secret|token|api[_\-]?key|access[_\-]?key|secret[_\-]?key|account[_\-]?key)\\?["']?"#;

/// `:`, `=` or `=>` with spaces or tabs around it, never a line break.
const ASSIGN: &str = r"[ \t]*(?:=>|[:=])[ \t]*";

/// The kind index of `name` in [`KINDS`].
const fn kind(name: &str) -> usize {
    let mut idx = 0;
    while idx < KINDS.len() {
        if str_eq(KINDS[idx], name) {
            return idx;
        }
        idx += 1;
    }
    panic!("a kind listed in KINDS");
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut idx = 0;
    while idx < a.len() {
        if a[idx] != b[idx] {
            return false;
        }
        idx += 1;
    }
    true
}

fn any(_: &str) -> bool {
    true
}

/// A quoted value is a secret unless it is a marker already (a second pass
/// finds nothing).
fn quoted_value(value: &str) -> bool {
    !value.starts_with("[REDACTED:")
}

/// An unquoted value is a secret when it is 8+ characters with a digit, or
/// 16+ without a dot, and not a plain number (`token: usize`, `password:
/// str`, `token: self.token.clone()` and `"token": 12345678` stay).
fn unquoted_value(value: &str) -> bool {
    let n = value.chars().count();
    let has_digit = value.bytes().any(|b| b.is_ascii_digit());
    let all_digits = value.bytes().all(|b| b.is_ascii_digit());
    !all_digits && ((n >= 8 && has_digit) || (n >= 16 && !value.contains('.')))
}

/// A URL password is a secret unless it is a placeholder (`$PASS`,
/// `{password}`, `<pw>`, `***`) or a marker already.
fn url_password(value: &str) -> bool {
    !value.starts_with("[REDACTED:")
        && !value.starts_with(['$', '{', '<', '*', '%'])
        && !value.eq_ignore_ascii_case("password")
}

fn patterns() -> &'static [Pattern] {
    static COMPILED: OnceLock<Vec<Pattern>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let unquoted_chars = r#"[^\s"'`,;<>(){}\[\]&\\]"#;
        let sources: Vec<(usize, String, Take, Accept)> = vec![
            (
                const { kind("anthropic_key") },
                r"\bsk-ant-[A-Za-z0-9_\-]{16,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("openai_key") },
                r"\bsk-[A-Za-z0-9_\-]{16,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("github_token") },
                r"\bgh[pousr]_[A-Za-z0-9]{20,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("github_token") },
                r"\bgithub_pat_[A-Za-z0-9_]{20,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("slack_token") },
                r"\bxox[abeoprs]-[A-Za-z0-9\-]{10,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("gitlab_token") },
                r"\bglpat-[A-Za-z0-9_\-]{20,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("stripe_key") },
                r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("huggingface_token") },
                r"\bhf_[A-Za-z0-9]{30,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("google_oauth_token") },
                r"\bya29\.[A-Za-z0-9_\-]{20,}".into(),
                Take::Whole,
                any,
            ),
            // The password of `scheme://user:password@host`; the user and
            // host stay, so the command still reads.
            (
                const { kind("url_password") },
                r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\x22]+:([^\s:/@'\x22]{3,})@[A-Za-z0-9.\-\[]".into(),
                Take::Group,
                url_password,
            ),
            (
                const { kind("aws_access_key") },
                r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("google_api_key") },
                r"\bAIza[0-9A-Za-z_\-]{35,}".into(),
                Take::Whole,
                any,
            ),
            (
                const { kind("jwt") },
                r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}".into(),
                Take::Whole,
                any,
            ),
            // The token68 credential of `Authorization: Bearer …`, or of a
            // bare `Bearer …`; placeholders like `Bearer $TOKEN` or
            // `Bearer {token}` are not token68.
            (
                const { kind("bearer_token") },
                r"(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{16,}=*)".into(),
                Take::Group,
                any,
            ),
            // `Basic` is an ordinary word, so only after `Authorization`.
            (
                const { kind("basic_auth") },
                r#"(?i)\bauthorization\\?["']?[ \t]*[:=][ \t]*\\?["']?[ \t]*basic[ \t]+([A-Za-z0-9+/]{8,}={0,2})"#
                    .into(),
                Take::Group,
                any,
            ),
            // `"password": "…"`, `password = '…'`, `\"token\": \"…\"`
            // (JSON inside a JSON string): the value between the quotes.
            (
                const { kind("secret") },
                format!(
                    r#"{SECRET_NAME}{ASSIGN}(?:"((?:[^"\\\n]|\\[^\n]){{4,}})"|'([^'\n]{{4,}})'|\\"([^"\\\n]{{4,}})\\")"#
                ),
                Take::Group,
                quoted_value,
            ),
            // `AWS_SECRET_ACCESS_KEY=…`, `password: …`: the value up to a
            // space, quote, bracket or separator; never `::` or `==`.
            (
                const { kind("secret") },
                format!(r#"{SECRET_NAME}{ASSIGN}([^\s"'`,;<>(){{}}\[\]&\\:=]{unquoted_chars}*)"#),
                Take::Group,
                unquoted_value,
            ),
        ];
        sources
            .into_iter()
            .map(|(kind, source, take, accept)| Pattern {
                kind,
                regex: Regex::new(&source).expect("constant redaction pattern compiles"),
                take,
                accept,
            })
            .collect()
    })
}

/// Returns the marker that replaces a secret of `kind`.
pub fn marker(kind: &str) -> String {
    format!("[REDACTED:{kind}]")
}

/// A candidate secret: bytes `start..end` of the original text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    kind: usize,
}

/// Replaces every secret span in `text` with `[REDACTED:<kind>]` and counts
/// them; every other byte is kept as it was.
pub fn redact(text: &str) -> Redacted {
    let mut candidates = private_key_spans(text);
    for pattern in patterns() {
        for caps in pattern.regex.captures_iter(text) {
            let found = match pattern.take {
                Take::Whole => caps.get(0),
                Take::Group => caps.iter().skip(1).flatten().next(),
            };
            let Some(found) = found else { continue };
            let value = found.as_str();
            // Unquoted values end before a sentence's full stop.
            let value = match pattern.take {
                Take::Group => value.trim_end_matches('.'),
                Take::Whole => value,
            };
            if value.is_empty() || !(pattern.accept)(value) {
                continue;
            }
            candidates.push(Span {
                start: found.start(),
                end: found.start() + value.len(),
                kind: pattern.kind,
            });
        }
    }
    let spans = resolve(candidates);
    let mut out = String::with_capacity(text.len());
    let mut counts = [0usize; KINDS.len()];
    let mut copied = 0;
    for span in &spans {
        out.push_str(&text[copied..span.start]);
        out.push_str(&marker(KINDS[span.kind]));
        counts[span.kind] += 1;
        copied = span.end;
    }
    out.push_str(&text[copied..]);
    let by_kind: Vec<(&'static str, usize)> = KINDS
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| (*kind, n))
        .collect();
    Redacted {
        text: out,
        count: spans.len(),
        by_kind,
    }
}

/// Orders candidates (earliest start, then longest, then kind priority)
/// and merges overlapping ones, the first naming the merged span: a merged
/// span covers only bytes some pattern found secret, so nothing leaks and
/// nothing else is removed.
fn resolve(mut candidates: Vec<Span>) -> Vec<Span> {
    candidates.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then(b.end.cmp(&a.end))
            .then(a.kind.cmp(&b.kind))
    });
    let mut spans: Vec<Span> = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        if candidate.start == candidate.end {
            continue;
        }
        match spans.last_mut() {
            Some(last) if candidate.start < last.end => last.end = last.end.max(candidate.end),
            _ => spans.push(candidate),
        }
    }
    spans
}

// ---------------------------------------------------------------------------
// Private key blocks
// ---------------------------------------------------------------------------

/// `-----BEGIN … PRIVATE KEY-----` (PEM, OpenSSH) and
/// `-----BEGIN PGP PRIVATE KEY BLOCK-----`.
fn begin_line() -> &'static Regex {
    static BEGIN: OnceLock<Regex> = OnceLock::new();
    BEGIN.get_or_init(|| {
        Regex::new(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
            .expect("constant pattern compiles")
    })
}

fn end_line() -> &'static Regex {
    static END: OnceLock<Regex> = OnceLock::new();
    END.get_or_init(|| {
        Regex::new(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
            .expect("constant pattern compiles")
    })
}

/// SOBA's own omission markers (`[… 1,234 characters omitted …]`, and the
/// retention's `[… 900 characters omitted here; … …]`), written where a
/// long text was cut; a key block may run on across them.
fn omission_line() -> &'static Regex {
    static OMISSION: OnceLock<Regex> = OnceLock::new();
    OMISSION.get_or_init(|| {
        Regex::new(r"^\[… [^\[\]\n]*characters omitted[^\[\]\n]*…\]$")
            .expect("constant pattern compiles")
    })
}

/// The armor headers a key block may carry before its base64 body (PGP's
/// `Version:`, `Comment:`…, PEM's `Proc-Type:` and `DEK-Info:`).
fn is_armor_header(line: &str) -> bool {
    let Some((key, _)) = line.split_once(": ") else {
        return false;
    };
    [
        "Version",
        "Comment",
        "MessageID",
        "Hash",
        "Charset",
        "Proc-Type",
        "DEK-Info",
    ]
    .contains(&key)
}

fn is_base64(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

/// One line of a possible key body: bytes `start..end` of the text, its
/// spaces, tabs and carriage returns trimmed.
#[derive(Debug, Clone, Copy)]
struct Line {
    start: usize,
    end: usize,
}

impl Line {
    fn text(self, text: &str) -> &str {
        &text[self.start..self.end]
    }
}

/// Splits `text[from..to]` into lines at real line breaks and at JSON
/// escaped ones (`\n`, `\r\n` written as backslash sequences), trimmed.
fn lines_of(text: &str, from: usize, to: usize) -> Vec<Line> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut line_start = from;
    let mut idx = from;
    let mut push = |start: usize, end: usize| {
        let mut start = start;
        let mut end = end;
        while start < end && matches!(bytes[start], b' ' | b'\t' | b'\r') {
            start += 1;
        }
        while end > start && matches!(bytes[end - 1], b' ' | b'\t' | b'\r') {
            end -= 1;
        }
        if text[start..end].ends_with("\\r") {
            end -= 2;
        }
        lines.push(Line { start, end });
    };
    while idx < to {
        if bytes[idx] == b'\n' {
            push(line_start, idx);
            idx += 1;
            line_start = idx;
        } else if bytes[idx] == b'\\' && bytes.get(idx + 1) == Some(&b'n') && idx + 1 < to {
            push(line_start, idx);
            idx += 2;
            line_start = idx;
        } else {
            idx += 1;
        }
    }
    push(line_start, to);
    lines
}

/// Whether `text[from..to]` can be the body of a whole key block: lines of
/// base64 (space-separated chunks when the key was flattened onto one
/// line), blank lines, armor headers and omission markers.
fn is_whole_body(text: &str, from: usize, to: usize) -> bool {
    lines_of(text, from, to).iter().all(|line| {
        let line = line.text(text);
        line.is_empty()
            || is_armor_header(line)
            || omission_line().is_match(line)
            || is_flattened_base64(line)
    })
}

/// Whether a line is base64 chunks separated by spaces or tabs, every chunk
/// but the last 16+ characters (so `some prose here` is not).
fn is_flattened_base64(line: &str) -> bool {
    let chunks: Vec<&str> = line.split([' ', '\t']).filter(|t| !t.is_empty()).collect();
    let Some((last, rest)) = chunks.split_last() else {
        return false;
    };
    is_base64(last) && rest.iter().all(|c| c.len() >= MIN_CHUNK && is_base64(c))
}

/// Finds private key blocks: whole (BEGIN to END), cut after their BEGIN
/// line (they end at their last base64 line), and cut before it (an END
/// line with the base64 lines right above it).
fn private_key_spans(text: &str) -> Vec<Span> {
    let private_key = const { kind("private_key") };
    let mut spans = Vec::new();
    let ends: Vec<(usize, usize)> = end_line()
        .find_iter(text)
        .map(|m| (m.start(), m.end()))
        .collect();
    let mut ends_used = vec![false; ends.len()];
    let begins: Vec<(usize, usize)> = begin_line()
        .find_iter(text)
        .map(|m| (m.start(), m.end()))
        .collect();
    for (begin_idx, &(start, header_end)) in begins.iter().enumerate() {
        let next_begin = begins.get(begin_idx + 1).map_or(text.len(), |b| b.0);
        let first_end = ends.partition_point(|&(end_start, _)| end_start < header_end);
        let whole = Some(first_end)
            .filter(|&end_idx| end_idx < ends.len() && ends[end_idx].0 < next_begin)
            .filter(|&end_idx| is_whole_body(text, header_end, ends[end_idx].0));
        let end = match whole {
            Some(end_idx) => {
                ends_used[end_idx] = true;
                ends[end_idx].1
            }
            None => cut_body_end(text, header_end, next_begin),
        };
        spans.push(Span {
            start,
            end,
            kind: private_key,
        });
    }
    for (end_idx, &(end_start, end_end)) in ends.iter().enumerate() {
        if !ends_used[end_idx] {
            spans.push(Span {
                start: cut_head_start(text, end_start),
                end: end_end,
                kind: private_key,
            });
        }
    }
    spans
}

/// The width from which a base64 line is a whole line of a key (PEM and
/// PGP wrap at 64, OpenSSH at 70); a narrower line after one is the last.
const FULL_LINE: usize = 40;

/// The width from which a base64 line opening a run is taken as key
/// material on its own; shorter words may be prose.
const MIN_CHUNK: usize = 16;

/// The base64 lines of one run of a cut block, walked away from its
/// BEGIN or END line: equally wide lines, then one narrower (cut or last).
#[derive(Default)]
struct Run {
    widest: usize,
    done: bool,
}

impl Run {
    /// Whether a base64 line of `width` still belongs to the key; `opens`
    /// says the line opening the run may be taken (16+ characters, or a
    /// whole key line follows).
    fn take(&mut self, width: usize, opens: bool) -> bool {
        if self.done {
            return false;
        }
        if self.widest == 0 {
            self.widest = width;
            return opens;
        }
        if width < self.widest {
            self.done = true;
            return self.widest >= FULL_LINE;
        }
        self.widest = width;
        true
    }
}

/// Returns where a block cut before its END line ends: after its last line
/// of key material, reading from `header_end` up to the first line that is
/// no part of a key body (never beyond `limit`, the next BEGIN line).
///
/// Key material is base64 lines of any width (a cut block's lines need not
/// be equally wide, its first and last may be short), SOBA's omission
/// markers between them, and a last line SOBA cut with `…` (its base64
/// head). The block ends before the first other line: prose (spaces
/// between words, punctuation), a heading, a code fence, a front matter
/// delimiter, a blank line once the body has begun (unless next to an
/// omission marker), or a lone word (`Done`) after a line narrower than
/// a whole key line (a full-width line may be followed by any short last
/// line).
fn cut_body_end(text: &str, header_end: usize, limit: usize) -> usize {
    let lines = lines_of(text, header_end, limit);
    let mut end = header_end;
    let Some((first, rest)) = lines.split_first() else {
        return end;
    };
    // Chunks of 16+ base64 characters on the BEGIN line itself (a key
    // flattened onto one line); shorter words may be prose.
    for chunk in split_chunks(text, *first) {
        if chunk.end - chunk.start < MIN_CHUNK || !is_base64(chunk.text(text)) {
            break;
        }
        end = chunk.end;
    }
    if first.start != first.end && end != first.end {
        return end;
    }
    let mut in_header = true;
    // Whether the line before was a whole key line (or an omission
    // marker), after which any base64 may be the body's last line.
    let mut after_full = false;
    let mut after_marker = false;
    for (idx, line) in rest.iter().enumerate() {
        let content = line.text(text);
        if omission_line().is_match(content) {
            after_full = true;
            after_marker = true;
            continue;
        }
        if content.is_empty() {
            let marker_follows = rest[idx + 1..]
                .iter()
                .map(|next| next.text(text))
                .find(|next| !next.is_empty())
                .is_some_and(|next| omission_line().is_match(next));
            if in_header || after_marker || marker_follows {
                continue;
            }
            break;
        }
        after_marker = false;
        if in_header && is_armor_header(content) {
            continue;
        }
        if !is_base64(content) {
            // A line SOBA cut mid-way: its base64 head, then `…`.
            if let Some(head) = base64_before_cut(content)
                && (after_full || !is_word(&content[..head]))
            {
                end = line.start + head;
            }
            break;
        }
        if !after_full && is_word(content) {
            break;
        }
        in_header = false;
        after_full = content.len() >= FULL_LINE;
        end = line.end;
    }
    end
}

/// Whether a line is one ordinary word (`Done`, `ok`, `Thanks`): letters
/// only, lowercase after an optional capital.
fn is_word(line: &str) -> bool {
    let mut chars = line.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_lowercase())
}

/// The length of the base64 head of a line that SOBA cut right after it
/// (`…`, or the inline ` [… N characters omitted …] ` marker).
fn base64_before_cut(line: &str) -> Option<usize> {
    let head = line
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        .count();
    let rest = &line[head..];
    (head > 0 && (rest.starts_with('…') || rest.starts_with(" [… "))).then_some(head)
}

/// The length of the base64 tail of a line that SOBA cut right before it
/// (`…`, or the inline marker ending `…] `).
fn base64_after_cut(line: &str) -> Option<usize> {
    let tail = line
        .bytes()
        .rev()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        .count();
    let rest = &line[..line.len() - tail];
    (tail > 0 && (rest.ends_with('…') || rest.ends_with("…] "))).then_some(tail)
}

/// Returns the line that ends at the line break just before `line_start`
/// (a real or a JSON-escaped one), trimmed, and where its raw bytes start.
fn line_above(text: &str, line_start: usize) -> Option<(Line, usize)> {
    let before = &text[..line_start];
    let break_start = if before.ends_with('\n') {
        line_start - 1
    } else if before.ends_with("\\n") {
        line_start - 2
    } else {
        return None;
    };
    let head = &text[..break_start];
    let newline = head.rfind('\n').map_or(0, |idx| idx + 1);
    let raw_start = head[newline..]
        .rfind("\\n")
        .map_or(newline, |idx| newline + idx + 2);
    let line = lines_of(text, raw_start, break_start)
        .pop()
        .unwrap_or(Line {
            start: raw_start,
            end: raw_start,
        });
    Some((line, raw_start))
}

/// Returns where a block cut before its BEGIN line starts: at the base64
/// lines right above its END line (at `end_start`).
fn cut_head_start(text: &str, end_start: usize) -> usize {
    let head = &text[..end_start];
    let newline = head.rfind('\n').map_or(0, |idx| idx + 1);
    let line_start = head[newline..]
        .rfind("\\n")
        .map_or(newline, |idx| newline + idx + 2);
    let mut start = end_start;
    // Chunks on the END line itself: 16+ base64 characters, or ending in
    // `=` (padding, a PGP checksum).
    let on_line = Line {
        start: line_start,
        end: end_start,
    };
    for chunk in split_chunks(text, on_line).iter().rev() {
        let chunk_text = chunk.text(text);
        if !is_base64(chunk_text) || (chunk_text.len() < MIN_CHUNK && !chunk_text.ends_with('=')) {
            return start;
        }
        start = chunk.start;
    }
    if !text[line_start..start].trim_matches([' ', '\t']).is_empty() {
        return start;
    }
    // The lines above, nearest first: the one next to END is the body's
    // last (any width), then equally wide ones, the topmost possibly
    // narrower (where the text was cut).
    let mut run = Run::default();
    let mut cursor = line_start;
    let mut nearest = true;
    while let Some((line, raw_start)) = line_above(text, cursor) {
        let content = line.text(text);
        if !is_base64(content) {
            if let Some(tail) = base64_after_cut(content)
                && (nearest || run.take(tail, true))
            {
                start = line.end - tail;
            }
            break;
        }
        if !nearest && !run.take(content.len(), true) {
            break;
        }
        nearest = false;
        start = line.start;
        cursor = raw_start;
    }
    start
}

/// Splits a line into chunks separated by spaces and tabs.
fn split_chunks(text: &str, line: Line) -> Vec<Line> {
    let mut chunks = Vec::new();
    let mut chunk_start = None;
    for (idx, b) in text.as_bytes()[line.start..line.end].iter().enumerate() {
        let at = line.start + idx;
        match (b, chunk_start) {
            (b' ' | b'\t', Some(s)) => {
                chunks.push(Line { start: s, end: at });
                chunk_start = None;
            }
            (b' ' | b'\t', None) => {}
            (_, None) => chunk_start = Some(at),
            (_, Some(_)) => {}
        }
    }
    if let Some(s) = chunk_start {
        chunks.push(Line {
            start: s,
            end: line.end,
        });
    }
    chunks
}

#[cfg(test)]
mod tests;
