//! Middle-out truncation: cutting a text's middle out by characters, by
//! lines or to a token target, and the markers written where the middle
//! was. Retention's straddler cut, the tool-output cap in the model input
//! and the fact extractor's excerpts all cut through here.

use crate::tokens::{TokenCount, TokenCounter, group_thousands};

/// Returns the marker between the head and the tail of a truncated
/// straddler.
pub fn straddler_marker(omitted_chars: u64) -> String {
    format!(
        "\n\n[… {omitted_chars} characters omitted here; they are summarized in the capsule …]\n\n"
    )
}

/// Returns the marker between the head and the tail of a tool result cut
/// to `maxToolResultTokens` in the model input.
pub fn tool_cap_marker(omitted_chars: u64, max_tool_result_tokens: TokenCount) -> String {
    format!(
        "\n\n[… tool output truncated: {omitted_chars} characters omitted to fit maxToolResultTokens {} …]\n\n",
        max_tool_result_tokens.get()
    )
}

/// What an [`instruction_cap_marker`] opens and closes with, around its
/// count (the parser of an earlier cut reads the same text).
const INSTRUCTION_CUT_OPEN: &str = "\n[… ";
const INSTRUCTION_CUT_CLOSE: &str =
    " characters of this message cut to fit the capsule; the session log has it whole …]\n";

/// Returns the marker between the head and the tail of a user message cut
/// to keep a capsule within its budget and size bound.
pub fn instruction_cap_marker(omitted_chars: u64) -> String {
    format!(
        "{INSTRUCTION_CUT_OPEN}{}{INSTRUCTION_CUT_CLOSE}",
        group_thousands(omitted_chars)
    )
}

/// Returns a user message cut in its middle to `max` tokens for a capsule,
/// with [`instruction_cap_marker`] counting every character cut from the
/// message: a text cut before (by the user-message budget, or by an
/// earlier capsule) has its marker taken out and its count carried.
pub fn cut_instruction(text: &str, max: TokenCount, counter: &dyn TokenCounter) -> String {
    if counter.count_text(text).n <= max {
        return text.to_owned();
    }
    let (joined, earlier) = match earlier_instruction_cut(text) {
        Some((start, end, omitted)) => (format!("{}{}", &text[..start], &text[end..]), omitted),
        None => (text.to_owned(), 0),
    };
    truncate_middle_tokens_marked(&joined, max, counter, &|omitted| {
        instruction_cap_marker(omitted as u64 + earlier)
    })
}

/// Finds an [`instruction_cap_marker`] in `text`: its byte range and the
/// characters it says were cut.
fn earlier_instruction_cut(text: &str) -> Option<(usize, usize, u64)> {
    let close = text.find(INSTRUCTION_CUT_CLOSE)?;
    let start = text[..close].rfind(INSTRUCTION_CUT_OPEN)?;
    let end = close + INSTRUCTION_CUT_CLOSE.len();
    let digits = &text[start + INSTRUCTION_CUT_OPEN.len()..close];
    let omitted = digits.replace(',', "").parse().ok()?;
    Some((start, end, omitted))
}

/// Returns the first `head_chars` and the last `tail_chars` Unicode scalar
/// values of `text` with `marker` between them. Counts larger than the text
/// are clamped, so the head and the tail never overlap.
pub fn cut_middle(text: &str, head_chars: u64, tail_chars: u64, marker: &str) -> String {
    let head_end = byte_offset_from_start(text, head_chars);
    let tail_start = byte_offset_from_end(text, tail_chars).max(head_end);
    let mut out = String::with_capacity(head_end + marker.len() + (text.len() - tail_start));
    out.push_str(&text[..head_end]);
    out.push_str(marker);
    out.push_str(&text[tail_start..]);
    out
}

/// Returns the byte offset after the first `chars` characters.
fn byte_offset_from_start(text: &str, chars: u64) -> usize {
    let chars = usize::try_from(chars).unwrap_or(usize::MAX);
    if chars == 0 {
        return 0;
    }
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(offset, _)| offset)
}

/// Returns the byte offset of the last `chars` characters.
fn byte_offset_from_end(text: &str, chars: u64) -> usize {
    let chars = usize::try_from(chars).unwrap_or(usize::MAX);
    if chars == 0 {
        return text.len();
    }
    text.char_indices()
        .rev()
        .nth(chars - 1)
        .map_or(0, |(offset, _)| offset)
}

/// A middle-out cut and what it costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MiddleCut {
    pub(crate) head_chars: u64,
    pub(crate) tail_chars: u64,
    pub(crate) omitted_chars: u64,
    /// The head, the marker and the tail.
    pub(crate) text: String,
    /// Tokens of `text` plus the overhead asked for.
    pub(crate) tokens: TokenCount,
}

/// Cuts `text` middle-out so that its count plus `overhead` is at most
/// `target`, keeping as much as a few proportional steps find.
///
/// `reference_tokens` is the count of the whole text (or an estimate),
/// used for the first guess. `caps` bounds the head and the tail (a cut
/// may be tightened, never loosened). When even the marker alone is over
/// the target, the cut keeps nothing but the marker.
pub(crate) fn fit_middle(
    counter: &dyn TokenCounter,
    text: &str,
    reference_tokens: TokenCount,
    target: TokenCount,
    overhead: TokenCount,
    marker: &dyn Fn(u64) -> String,
    caps: Option<(u64, u64)>,
) -> MiddleCut {
    let total_chars = text.chars().count() as u64;
    let (max_head, max_tail) = caps.unwrap_or((total_chars, total_chars));
    let k_max = total_chars
        .saturating_sub(1)
        .min(max_head.saturating_add(max_tail));
    let split = |kept: u64| {
        let mut head = kept.div_ceil(2).min(max_head);
        let tail = (kept - head).min(max_tail);
        head = (kept - tail).min(max_head);
        (head, tail)
    };
    let eval = |kept: u64| {
        let (head, tail) = split(kept);
        let omitted = total_chars - head - tail;
        let text = cut_middle(text, head, tail, &marker(omitted));
        let tokens = counter.count_text(&text).n + overhead;
        MiddleCut {
            head_chars: head,
            tail_chars: tail,
            omitted_chars: omitted,
            text,
            tokens,
        }
    };
    let target_n = target.get();
    let body_target = target_n.saturating_sub(overhead.get());
    let reference = reference_tokens.get().max(1);
    let mut kept =
        (u128::from(total_chars) * u128::from(body_target) / u128::from(reference)) as u64;
    kept = kept.min(k_max);
    // `low` fits (or is the empty cut), `high` is known not to fit.
    let mut best: Option<MiddleCut> = None;
    let mut low: Option<u64> = None;
    let mut high = k_max + 1;
    for _ in 0..24 {
        let cut = eval(kept);
        let n = cut.tokens.get();
        if n <= target_n {
            low = Some(kept);
            let close_enough = target_n - n <= target_n / 1_000;
            best = Some(cut);
            if kept == k_max || close_enough {
                break;
            }
            let grow =
                (u128::from(kept.max(1)) * u128::from(target_n - n) / u128::from(n.max(1))) as u64;
            kept = kept.saturating_add(grow.max(1));
        } else {
            high = kept;
            if kept == 0 {
                break;
            }
            kept = (u128::from(kept) * u128::from(target_n) / u128::from(n)) as u64;
        }
        let floor = low.map_or(0, |low| low + 1);
        if floor >= high {
            break;
        }
        if kept < floor || kept >= high {
            kept = floor + (high - floor) / 2;
        }
    }
    best.unwrap_or_else(|| eval(0))
}

/// Returns the first `n` characters of `text`.
pub(crate) fn head_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((idx, _)) => &text[..idx],
        None => text,
    }
}

/// Returns the last `n` characters of `text`.
pub(crate) fn tail_chars(text: &str, n: usize) -> &str {
    // Walked from the end: a megabyte of tool output costs its tail only.
    match n
        .checked_sub(1)
        .and_then(|back| text.char_indices().rev().nth(back))
    {
        Some((idx, _)) => &text[idx..],
        None => text,
    }
}

/// Returns the marker written where `omitted` characters were cut.
pub fn omission_marker(omitted: usize) -> String {
    format!(
        "\n[… {} characters omitted …]\n",
        group_thousands(omitted as u64)
    )
}

/// Returns the marker written where `omitted` characters were cut from a
/// text that must stay on one line (a key, a command).
pub fn omission_marker_inline(omitted: usize) -> String {
    format!(
        " [… {} characters omitted …] ",
        group_thousands(omitted as u64)
    )
}

/// Returns `text` unchanged when it has at most `head + tail` characters,
/// else its first `head` and last `tail` characters with a marker between.
pub fn truncate_middle_chars(text: &str, head: usize, tail: usize) -> String {
    let n = text.chars().count();
    if n <= head + tail {
        return text.to_owned();
    }
    format!(
        "{}{}{}",
        head_chars(text, head),
        omission_marker(n - head - tail),
        tail_chars(text, tail)
    )
}

/// Returns `text` unchanged when it fits in `max` tokens, else its head and
/// end (equal numbers of characters) around a marker, as long as fits.
pub fn truncate_middle_tokens(text: &str, max: TokenCount, counter: &dyn TokenCounter) -> String {
    truncate_middle_tokens_marked(text, max, counter, &omission_marker)
}

/// [`truncate_middle_tokens`] with `marker(omitted characters)` written
/// where the middle was.
pub fn truncate_middle_tokens_marked(
    text: &str,
    max: TokenCount,
    counter: &dyn TokenCounter,
    marker: &dyn Fn(usize) -> String,
) -> String {
    if counter.count_text(text).n <= max {
        return text.to_owned();
    }
    let n = text.chars().count();
    let render = |keep: usize| {
        if n <= 2 * keep {
            return text.to_owned();
        }
        format!(
            "{}{}{}",
            head_chars(text, keep),
            marker(n - 2 * keep),
            tail_chars(text, keep)
        )
    };
    // A token covers a bounded number of characters, so searching beyond
    // this many per side only costs time.
    let mut hi = (n.saturating_sub(1) / 2).min((max.get() as usize).saturating_mul(64));
    let mut lo = 0;
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if counter.count_text(&render(mid)).n <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    render(lo)
}

/// Returns `text` with its middle cut on line boundaries: whole lines from
/// the start within `head` characters, whole lines from the end within
/// `tail`, and an omission marker line between. A first or last line too
/// long on its own is cut at a word break (never inside a word, unless the
/// word alone is longer than the budget). Text within `head + tail`
/// characters is returned unchanged.
pub fn truncate_middle_lines(text: &str, head: usize, tail: usize) -> String {
    let total = text.chars().count();
    if total <= head + tail {
        return text.to_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut head_end = 0;
    let mut used = 0;
    while head_end < lines.len() {
        let n = lines[head_end].chars().count() + 1;
        if used + n > head {
            break;
        }
        used += n;
        head_end += 1;
    }
    let mut tail_start = lines.len();
    let mut tail_used = 0;
    while tail_start > head_end {
        let n = lines[tail_start - 1].chars().count() + 1;
        if tail_used + n > tail {
            break;
        }
        tail_used += n;
        tail_start -= 1;
    }
    let mut head_text: Vec<String> = lines[..head_end].iter().map(|l| (*l).to_owned()).collect();
    if head_end == 0 && !lines.is_empty() {
        head_text.push(cut_at_word(lines[0], head, false));
    }
    let mut tail_text: Vec<String> = lines[tail_start..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    if tail_start == lines.len() && tail_start > head_end {
        tail_text.insert(0, cut_at_word(lines[lines.len() - 1], tail, true));
    }
    // The newlines between kept lines count as kept: one fewer than the
    // kept pieces.
    let kept: usize = head_text
        .iter()
        .chain(&tail_text)
        .map(|line| line.trim_matches('…').chars().count() + 1)
        .sum::<usize>()
        .saturating_sub(1);
    let mut out = head_text.join("\n");
    out.push_str(&omission_marker(total.saturating_sub(kept).max(1)));
    out.push_str(&tail_text.join("\n"));
    out
}

/// Returns at most `max` characters of `line` from its start (or, with
/// `from_end`, its end), cut at a word break when one leaves at least half
/// of them, with `…` where the cut is.
fn cut_at_word(line: &str, max: usize, from_end: bool) -> String {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= max {
        return line.to_owned();
    }
    let max = max.saturating_sub(1).max(1);
    if from_end {
        let start = chars.len() - max;
        let piece: String = chars[start..].iter().collect();
        let cut = piece
            .find(char::is_whitespace)
            .filter(|pos| *pos <= piece.len() / 2)
            .map_or(piece.as_str(), |pos| piece[pos..].trim_start());
        format!("…{cut}")
    } else {
        let piece: String = chars[..max].iter().collect();
        let cut = piece
            .rfind(char::is_whitespace)
            .filter(|pos| *pos >= piece.len() / 2)
            .map_or(piece.as_str(), |pos| piece[..pos].trim_end());
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::exit_code;
    use crate::tokens::ByteCounter;

    #[test]
    fn cut_middle_counts_scalar_values_and_clamps() {
        assert_eq!(cut_middle("héllo wörld", 2, 3, "…"), "hé…rld");
        assert_eq!(cut_middle("abc", 5, 5, "|"), "abc|");
        assert_eq!(cut_middle("abcdef", 0, 0, "|"), "|");
    }

    #[test]
    fn fit_middle_reaches_the_target_from_either_side() {
        let text = "x".repeat(10_000); // 2,500 tokens under ByteCounter
        let marker = |omitted: u64| format!("[{omitted} cut]");
        for target in [300u64, 1_000, 2_000] {
            let cut = fit_middle(
                &ByteCounter,
                &text,
                TokenCount::new(2_500),
                TokenCount::new(target),
                TokenCount::ZERO,
                &marker,
                None,
            );
            assert!(cut.tokens.get() <= target, "{} > {target}", cut.tokens);
            assert!(
                cut.tokens.get() * 100 >= target * 98,
                "{} ≪ {target}",
                cut.tokens
            );
            assert_eq!(cut.head_chars + cut.tail_chars + cut.omitted_chars, 10_000);
            assert!(cut.head_chars.abs_diff(cut.tail_chars) <= 1);
        }
        // A wrong reference still converges.
        let cut = fit_middle(
            &ByteCounter,
            &text,
            TokenCount::new(10),
            TokenCount::new(500),
            TokenCount::ZERO,
            &marker,
            None,
        );
        assert!(
            cut.tokens.get() <= 500 && cut.tokens.get() >= 480,
            "{}",
            cut.tokens
        );
        // Caps bound the head and the tail.
        let cut = fit_middle(
            &ByteCounter,
            &text,
            TokenCount::new(2_500),
            TokenCount::new(2_000),
            TokenCount::ZERO,
            &marker,
            Some((100, 2_000)),
        );
        assert_eq!(cut.head_chars, 100);
        assert!(cut.tail_chars <= 2_000);
    }

    #[test]
    fn errors_are_cut_on_line_boundaries() {
        let text = "not ok 6 - status-class counts (2xx/4xx/5xx)\nline two of the failure\n\
                    not ok 7 - percentile report\nok 8 - export";
        // Whole lines from each end; the cut lines are counted.
        let cut = truncate_middle_lines(text, 50, 20);
        assert_eq!(
            cut,
            "not ok 6 - status-class counts (2xx/4xx/5xx)\n[… 53 characters omitted …]\nok 8 - export"
        );
        assert_eq!(truncate_middle_lines("short", 50, 20), "short");
        // A single long line is cut at word breaks, never inside a word.
        let line = "word ".repeat(40);
        let cut = truncate_middle_lines(line.trim_end(), 30, 30);
        let (head, rest) = cut.split_once('\n').expect("a marker line");
        assert_eq!(head, "word word word word word…");
        assert!(rest.ends_with("\n…word word word word word"), "{rest}");
    }

    #[test]
    fn tail_chars_takes_characters_from_the_end() {
        assert_eq!(tail_chars("héllo wörld", 4), "örld");
        assert_eq!(tail_chars("héllo", 5), "héllo");
        assert_eq!(tail_chars("héllo", 50), "héllo");
        assert_eq!(tail_chars("", 3), "");
        assert_eq!(tail_chars("ab", 0), "ab", "zero keeps the text, as before");
        let long = format!("{}exit code 3", "€".repeat(1 << 20));
        assert_eq!(tail_chars(&long, 11), "exit code 3");
        assert_eq!(exit_code(&long), Some(3));
    }

    #[test]
    fn middle_truncation_by_chars_is_exact() {
        let text = "a".repeat(300) + &"b".repeat(300);
        let cut = truncate_middle_chars(&text, 250, 250);
        assert!(cut.starts_with(&"a".repeat(250)));
        assert!(cut.ends_with(&"b".repeat(250)));
        assert!(cut.contains("[… 100 characters omitted …]"));
        assert_eq!(truncate_middle_chars("short", 250, 250), "short");
    }

    #[test]
    fn middle_truncation_by_tokens_fits() {
        let text = "word ".repeat(2_000);
        let cut = truncate_middle_tokens(&text, TokenCount::new(300), &ByteCounter);
        let n = ByteCounter.count_text(&cut).n.get();
        assert!(n <= 300 && n > 290, "{n}");
        assert!(cut.starts_with("word word"));
    }
}
