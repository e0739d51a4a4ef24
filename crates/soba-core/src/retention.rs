//! Retention, the verbatim tail (SPEC §8.2): the newest → oldest walk over
//! live units under keepRecent, the middle-out cut of a text-only
//! straddler, and the fail-closed fit that moves the boundary later until
//! the result fits (SPEC §7.2). Also the middle-out truncation by
//! characters the tool-output cap uses.

use crate::capsule::BoundaryTruncation;
use crate::input::InputMessage;
use crate::message::Message;
use crate::tokens::{MESSAGE_OVERHEAD, TokenCount, TokenCounter};
use crate::unit::Unit;

/// A truncated straddler keeps at least this many tokens (SPEC §8.2).
pub const STRADDLER_MIN_TOKENS: TokenCount = TokenCount::new(256);

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

/// Cuts a text-only message middle-out to at most `target` tokens (message
/// overhead included), tightening `current` when the message is already
/// cut. Returns `None` when no cut can reach the target.
pub fn cut_message(
    counter: &dyn TokenCounter,
    message: &InputMessage<'_>,
    current: Option<&BoundaryTruncation>,
    target: TokenCount,
) -> Option<BoundaryTruncation> {
    let original: &Message = message.original.unwrap_or(message.message);
    let text = original.text();
    let caps = current.map(|cut| (cut.head_chars, cut.tail_chars));
    // The first guess assumes the whole text is as dense as the message sent.
    let total_chars = text.chars().count() as u128;
    let sent_chars = (message.message.text().chars().count() as u128).max(1);
    let reference =
        TokenCount::new((u128::from(message.tokens.get()) * total_chars / sent_chars) as u64);
    let cut = fit_middle(
        counter,
        &text,
        reference,
        target,
        MESSAGE_OVERHEAD,
        &straddler_marker,
        caps,
    );
    (cut.tokens <= target && cut.tokens < message.tokens).then(|| BoundaryTruncation {
        entry_id: message.source.clone(),
        head_chars: cut.head_chars,
        tail_chars: cut.tail_chars,
        omitted_chars: cut.omitted_chars,
        kept_tokens: cut.tokens,
    })
}

/// The verbatim tail a walk chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Index of the first kept unit.
    pub first_kept: usize,
    /// A new cut of the first kept unit (a straddler), if this walk made
    /// one. A cut recorded by the previous capsule and kept as it is, is not
    /// new.
    pub new_cut: Option<BoundaryTruncation>,
    /// Tokens of the kept units, a cut straddler at its kept size.
    pub tail_tokens: TokenCount,
    /// Whether the boundary was moved later than keepRecent put it, so that
    /// the result fits (SPEC §7.2).
    pub moved_for_fit: bool,
}

impl Retention {
    /// Returns the tokens a new cut elides from the first kept unit.
    pub fn elided_tokens(&self, units: &[Unit]) -> TokenCount {
        match (&self.new_cut, units.get(self.first_kept)) {
            (Some(cut), Some(unit)) => unit.tokens.saturating_sub(cut.kept_tokens),
            _ => TokenCount::ZERO,
        }
    }
}

/// Returns the cut in force on a unit's message before this walk: the
/// previous capsule's record when the message is its truncated first entry.
fn recorded_cut<'a>(
    unit: &Unit,
    messages: &[InputMessage<'_>],
    previous: Option<&'a BoundaryTruncation>,
) -> Option<&'a BoundaryTruncation> {
    let message = messages.get(unit.messages.start)?;
    previous.filter(|cut| message.rewrites.truncated && &cut.entry_id == message.source)
}

/// Walks live units newest → oldest under `keep_recent` (SPEC §8.2).
///
/// The newest unit is always kept whole. The first unit that does not fit
/// is, when it is a text-only message, kept cut middle-out to
/// min(size, max(remaining, 256)) tokens; otherwise the boundary goes after
/// it. `previous` is the latest capsule's `boundaryTruncation`; its cut is
/// kept or tightened, never loosened. Returns `None` when there are no
/// units.
pub fn walk(
    counter: &dyn TokenCounter,
    units: &[Unit],
    messages: &[InputMessage<'_>],
    keep_recent: TokenCount,
    keep_results: usize,
    previous: Option<&BoundaryTruncation>,
) -> Option<Retention> {
    let last = units.len().checked_sub(1)?;
    let results_of = |unit: &Unit| -> usize {
        messages[unit.messages.clone()]
            .iter()
            .map(|message| message.results.len())
            .sum()
    };
    let mut remaining = keep_recent.saturating_sub(units[last].tokens);
    let mut tail_tokens = units[last].tokens;
    let mut first_kept = last;
    let mut new_cut = None;
    let mut kept_results = results_of(&units[last]);
    for idx in (0..last).rev() {
        if keep_results > 0 && kept_results >= keep_results {
            break;
        }
        let unit = &units[idx];
        kept_results += results_of(unit);
        if unit.tokens <= remaining {
            remaining = remaining.saturating_sub(unit.tokens);
            tail_tokens += unit.tokens;
            first_kept = idx;
            continue;
        }
        if unit.truncatable {
            let target = unit.tokens.min(remaining.max(STRADDLER_MIN_TOKENS));
            if target >= unit.tokens {
                tail_tokens += unit.tokens;
                first_kept = idx;
            } else if let Some(cut) = cut_message(
                counter,
                &messages[unit.messages.start],
                recorded_cut(unit, messages, previous),
                target,
            ) {
                tail_tokens += cut.kept_tokens;
                first_kept = idx;
                new_cut = Some(cut);
            }
        }
        break;
    }
    Some(Retention {
        first_kept,
        new_cut,
        tail_tokens,
        moved_for_fit: false,
    })
}

/// Why a tail cannot be made to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoFit {
    /// Local tokens of the newest unit.
    pub newest_unit: TokenCount,
    /// Local tokens available for the whole tail.
    pub room: TokenCount,
}

/// Moves the boundary later until the tail is at most `room` tokens
/// (SPEC §7.2): the oldest kept unit is cut further when it is a text-only
/// message that can still keep 256 tokens, else dropped; never the newest
/// unit. Fails when the newest unit alone is over `room`.
pub fn fit(
    counter: &dyn TokenCounter,
    units: &[Unit],
    messages: &[InputMessage<'_>],
    mut retention: Retention,
    room: TokenCount,
    previous: Option<&BoundaryTruncation>,
) -> Result<Retention, NoFit> {
    let last = units.len().saturating_sub(1);
    let mut tried_cut = false;
    while retention.tail_tokens > room {
        let idx = retention.first_kept;
        if idx >= last {
            return Err(NoFit {
                newest_unit: retention.tail_tokens,
                room,
            });
        }
        let unit = &units[idx];
        let size = retention
            .new_cut
            .as_ref()
            .map_or(unit.tokens, |cut| cut.kept_tokens);
        let rest = retention.tail_tokens.saturating_sub(size);
        retention.moved_for_fit = true;
        if unit.truncatable && !tried_cut {
            tried_cut = true;
            let target = room.saturating_sub(rest);
            if target >= STRADDLER_MIN_TOKENS {
                let current = retention
                    .new_cut
                    .as_ref()
                    .or(recorded_cut(unit, messages, previous));
                if let Some(cut) =
                    cut_message(counter, &messages[unit.messages.start], current, target)
                {
                    retention.tail_tokens = rest + cut.kept_tokens;
                    retention.new_cut = Some(cut);
                    continue;
                }
            }
        }
        retention.first_kept = idx + 1;
        retention.tail_tokens = rest;
        retention.new_cut = None;
        tried_cut = false;
    }
    Ok(retention)
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
