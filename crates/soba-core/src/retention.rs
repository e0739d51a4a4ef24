//! Retention, the verbatim tail (SPEC §8.2): the newest → oldest walk over
//! live units under keepRecent, the middle-out cut of a text-only
//! straddler, and the fail-closed fit that moves the boundary later until
//! the result fits (SPEC §7.2). The cut itself is [`crate::truncate`]'s.

use crate::capsule::BoundaryTruncation;
use crate::input::InputMessage;
use crate::message::Message;
use crate::tokens::{MESSAGE_OVERHEAD, TokenCount, TokenCounter};
use crate::truncate::{fit_middle, straddler_marker};
use crate::unit::Unit;

/// A truncated straddler keeps at least this many tokens (SPEC §8.2).
pub const STRADDLER_MIN_TOKENS: TokenCount = TokenCount::new(256);

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
