//! Calibration of local token counts against provider usage (SPEC §4.1,
//! §6.3) and the measurement of effective tokens with its source (§4.2).
//!
//! Both are pure functions of the path, recomputed on resume. A path is a
//! slice of entries in **root → leaf** order (chronological; the order the
//! model input is built in). It may start after the root (resume reads back
//! only to the latest capsule's retained tail): a capsule's stored
//! `state.calibration` then supplies what the missing prefix would have.

use crate::capsule::OverflowRecord;
use crate::entry::{Entry, EntryBody};
use crate::id::EntryId;
use crate::input::{InputMessageTokens, LiveInput};
use crate::message::{Message, Role};
use crate::tokens::TokenCount;

/// The EMA weight of a new sample.
pub const ALPHA: f64 = 0.3;
/// The least calibration factor.
pub const MIN_FACTOR: f64 = 0.5;
/// The greatest calibration factor.
pub const MAX_FACTOR: f64 = 2.0;
/// An overflow that does not state the prompt size multiplies the factor by
/// this.
pub const OVERFLOW_STEP: f64 = 1.15;
/// A response reporting a prompt below this share of the calibrated local
/// estimate reveals silent truncation (SPEC §10.4).
pub const TRUNCATION_SHARE: f64 = 0.8;

/// The registry's calibration seed for a model family (SPEC §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelFamily {
    /// OpenAI models counted with `o200k_base`: the local count is exact.
    OpenAiO200k,
    /// Anthropic Claude: no public tokenizer.
    Claude,
    /// Everything else.
    Other,
}

impl ModelFamily {
    /// Returns the seed factor: 1.0, 1.25 or 1.1.
    pub fn seed(self) -> Factor {
        Factor::new(match self {
            ModelFamily::OpenAiO200k => 1.0,
            ModelFamily::Claude => 1.25,
            ModelFamily::Other => 1.1,
        })
    }
}

/// A calibration factor, always within [0.5, 2.0].
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Factor(f64);

impl Factor {
    /// The identity factor.
    pub const ONE: Factor = Factor(1.0);

    /// Builds a factor, clamped to [0.5, 2.0]; a NaN gives 1.0.
    pub fn new(value: f64) -> Self {
        if value.is_nan() {
            Factor::ONE
        } else {
            Factor(value.clamp(MIN_FACTOR, MAX_FACTOR))
        }
    }

    /// Returns the value.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Returns the calibrated count `ceil(local × factor)`: rounding up errs
    /// on the side of compacting early rather than overflowing.
    pub fn apply(self, local: TokenCount) -> TokenCount {
        let scaled = (local.get() as f64 * self.0).ceil();
        // Float-to-int casts saturate; counts stay far below 2^53 in practice.
        TokenCount::new(scaled as u64)
    }

    /// Returns the factor after one EMA step with the sample
    /// `reported / local` (SPEC §4.1).
    pub fn updated(self, reported_prompt: u64, request_tokens_local: u64) -> Factor {
        if request_tokens_local == 0 {
            return self;
        }
        let sample = reported_prompt as f64 / request_tokens_local as f64;
        Factor::new(ALPHA * sample + (1.0 - ALPHA) * self.0)
    }

    /// Returns the factor corrected after a context overflow (SPEC §6.3):
    /// `stated / local` when the provider stated the prompt size, else this
    /// factor × 1.15; clamped.
    pub fn corrected_for_overflow(self, overflow: &OverflowRecord) -> Factor {
        match overflow.stated_prompt {
            Some(stated) if overflow.request_tokens_local > 0 => {
                Factor::new(stated as f64 / overflow.request_tokens_local as f64)
            }
            _ => Factor::new(self.0 * OVERFLOW_STEP),
        }
    }

    /// Returns whether a response reporting `reported_prompt` for a request
    /// counted `request_tokens_local` locally reveals silent truncation:
    /// reported < 0.8 × the calibrated local estimate (SPEC §10.4).
    pub fn reveals_truncation(self, reported_prompt: u64, request_tokens_local: u64) -> bool {
        (reported_prompt as f64) < TRUNCATION_SHARE * (request_tokens_local as f64) * self.0
    }
}

/// A response whose reported prompt reveals silent truncation.
#[derive(Debug, Clone, PartialEq)]
pub struct TruncationSign {
    /// The assistant entry.
    pub entry_id: EntryId,
    /// The prompt size the provider reported: the endpoint truncates to
    /// about this many tokens.
    pub reported_prompt: u64,
    /// The calibrated local estimate of that request.
    pub estimated_prompt: TokenCount,
}

/// The calibration of one model on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The factor local counts are multiplied by.
    pub factor: Factor,
    /// Usage samples folded into the EMA.
    pub samples: usize,
    /// Resets from overflow records or silent overflows.
    pub overflow_resets: usize,
    /// Responses left out because they revealed silent truncation, in path
    /// order; the engine warns once, naming the last one's reported prompt.
    pub truncations: Vec<TruncationSign>,
}

/// What [`calibrate`] needs besides the path.
#[derive(Debug, Clone, Copy)]
pub struct CalibrationInput<'a> {
    /// The model id (`provider/model`) whose factor is wanted; only its
    /// assistant entries and overflow records count.
    pub model: &'a str,
    /// The registry's seed for the model (see [`ModelFamily::seed`]).
    pub seed: Factor,
    /// The model's context window, to recognise silent overflow (a
    /// successful response reporting a prompt above it); `None` skips that.
    pub context_window: Option<TokenCount>,
}

/// Computes the calibration factor of `input.model` over `path` (root →
/// leaf), as SPEC §4.1 and §6.3 say:
///
/// - starts from the seed;
/// - each assistant entry of that model with usage and a local request
///   count folds `reportedPrompt / requestTokensLocal` into an EMA (α 0.3),
///   clamped to [0.5, 2.0] after every step;
/// - one reporting a prompt above the context window (silent overflow)
///   resets the factor to that ratio instead;
/// - one reporting less than 0.8 × the calibrated local estimate (silent
///   truncation) is left out and listed;
/// - a capsule whose `state.calibration` names the model resets the factor to
///   that value, the factor in force at its append with any overflow
///   correction already applied; otherwise its `overflow` record (on a
///   capsule made while this model was active) corrects the factor as in
///   [`Factor::corrected_for_overflow`].
pub fn calibrate(path: &[Entry], input: &CalibrationInput<'_>) -> Calibration {
    let mut calibration = Calibration::seeded(input.seed);
    for entry in path {
        calibration.observe(entry, input);
    }
    calibration
}

impl Calibration {
    /// Returns the calibration of an empty path: the seed, no samples.
    pub fn seeded(seed: Factor) -> Calibration {
        Calibration {
            factor: seed,
            samples: 0,
            overflow_resets: 0,
            truncations: Vec::new(),
        }
    }

    /// Folds one more path entry in (see [`calibrate`]), so a session can
    /// keep its factor up to date as entries are appended instead of
    /// walking the path at every preflight.
    pub fn observe(&mut self, entry: &Entry, input: &CalibrationInput<'_>) {
        match &entry.body {
            EntryBody::Message(message_entry) => {
                let message = &message_entry.message;
                let Some((reported, local)) = usage_sample(message, input.model) else {
                    return;
                };
                let factor = self.factor;
                if input
                    .context_window
                    .is_some_and(|window| reported > window.get())
                {
                    self.factor = Factor::new(reported as f64 / local as f64);
                    self.overflow_resets += 1;
                } else if factor.reveals_truncation(reported, local) {
                    self.truncations.push(TruncationSign {
                        entry_id: entry.id.clone(),
                        reported_prompt: reported,
                        estimated_prompt: factor.apply(TokenCount::new(local)),
                    });
                } else {
                    self.factor = factor.updated(reported, local);
                    self.samples += 1;
                }
            }
            EntryBody::Capsule(capsule) => {
                let stored = capsule
                    .state
                    .calibration
                    .iter()
                    .find(|(model, _)| model == input.model);
                if let Some((_, stored)) = stored {
                    self.factor = Factor::new(*stored);
                } else if let Some(overflow) = &capsule.overflow
                    && capsule.state.model == input.model
                {
                    self.factor = self.factor.corrected_for_overflow(overflow);
                    self.overflow_resets += 1;
                }
            }
            _ => {}
        }
    }
}

/// Returns `(reportedPrompt, requestTokensLocal)` of an assistant message of
/// `model` that carries both, with both non-zero.
fn usage_sample(message: &Message, model: &str) -> Option<(u64, u64)> {
    if message.role != Role::Assistant || message.model.as_deref() != Some(model) {
        return None;
    }
    let reported = message.usage?.prompt();
    let local = message.request_tokens_local?;
    (reported > 0 && local > 0).then_some((reported, local))
}

/// Where an effective-token figure comes from (SPEC §4.2); always shown with
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MeasurementSource {
    /// The last request's reported prompt plus calibrated local counts of
    /// what was appended since.
    ProviderUsage,
    /// The calibrated local count of the whole input.
    Estimated,
}

impl MeasurementSource {
    /// Returns the name shown and recorded (`provider_usage`, `estimated`).
    pub fn as_str(self) -> &'static str {
        match self {
            MeasurementSource::ProviderUsage => "provider_usage",
            MeasurementSource::Estimated => "estimated",
        }
    }
}

/// Effective tokens with their source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    /// The size of the model input as it would be sent now.
    pub tokens: TokenCount,
    /// How it was measured.
    pub source: MeasurementSource,
}

/// What [`measure`] needs. The model input is taken already built (from the
/// rebuild of SPEC §5), as per-message counts plus the fixed part, so the
/// measurement does not depend on how it is built.
#[derive(Debug, Clone, Copy)]
pub struct MeasureInput<'a> {
    /// The path, root → leaf, including the pending user message or tool
    /// results.
    pub path: &'a [Entry],
    /// The uncalibrated local count of the fixed part: system prompt, tool
    /// schemas (once), active skills, pinned context.
    pub fixed_tokens: TokenCount,
    /// The input's messages in order, with uncalibrated local counts.
    pub messages: &'a [InputMessageTokens],
    /// The model the request goes to.
    pub model: &'a str,
    /// That model's calibration factor on this path ([`calibrate`]).
    pub factor: Factor,
    /// Whether the tool set is the one the last request was sent with; it
    /// is not on the path, so the caller says.
    pub tool_set_unchanged: bool,
}

/// Measures effective tokens (SPEC §4.2).
///
/// `provider_usage` when the last assistant message on the path is this
/// model's, carries usage that does not reveal silent truncation, only
/// message entries follow it (no model, skill, hygiene, capsule or other
/// change), the tool set is unchanged and the message is in the input: its
/// reported prompt plus the calibrated count of that message as re-sent and
/// every later message. Otherwise `estimated`: the calibrated count of the
/// whole input, fixed part included.
pub fn measure(input: &MeasureInput<'_>) -> Measurement {
    let usage = provider_usage_tokens(
        input.path,
        input.model,
        input.factor,
        input.tool_set_unchanged,
        |last_id| {
            let resent_from = input
                .messages
                .iter()
                .position(|message| message.entry_id.as_ref() == Some(last_id))?;
            Some(
                input.messages[resent_from..]
                    .iter()
                    .map(|message| message.tokens)
                    .sum(),
            )
        },
    );
    let local = || input.fixed_tokens + input.messages.iter().map(|message| message.tokens).sum();
    measurement(usage, input.factor, local)
}

/// [`measure`] of a maintained [`LiveInput`] (the input of `path`): the
/// same figure from its cached sums, without listing its messages, so a
/// preflight measures in time independent of the input's length.
pub fn measure_live(
    path: &[Entry],
    live: &LiveInput,
    model: &str,
    factor: Factor,
    tool_set_unchanged: bool,
) -> Measurement {
    let usage = provider_usage_tokens(path, model, factor, tool_set_unchanged, |last_id| {
        live.tokens_from(last_id)
    });
    measurement(usage, factor, || live.total_tokens())
}

fn measurement(
    usage: Option<TokenCount>,
    factor: Factor,
    local: impl FnOnce() -> TokenCount,
) -> Measurement {
    match usage {
        Some(tokens) => Measurement {
            tokens,
            source: MeasurementSource::ProviderUsage,
        },
        None => Measurement {
            tokens: factor.apply(local()),
            source: MeasurementSource::Estimated,
        },
    }
}

/// The `provider_usage` figure, when it applies; `resent` gives the local
/// count of the input from the last assistant message (by entry id) to
/// the end, `None` when that message is not in the input.
fn provider_usage_tokens(
    path: &[Entry],
    model: &str,
    factor: Factor,
    tool_set_unchanged: bool,
    resent: impl FnOnce(&EntryId) -> Option<TokenCount>,
) -> Option<TokenCount> {
    if !tool_set_unchanged {
        return None;
    }
    let (last_idx, last) =
        path.iter()
            .enumerate()
            .rev()
            .find_map(|(idx, entry)| match &entry.body {
                EntryBody::Message(message_entry)
                    if message_entry.message.role == Role::Assistant =>
                {
                    Some((idx, &message_entry.message))
                }
                _ => None,
            })?;
    let only_messages_follow = path[last_idx + 1..]
        .iter()
        .all(|entry| matches!(entry.body, EntryBody::Message(_)));
    if !only_messages_follow || last.model.as_deref() != Some(model) {
        return None;
    }
    let reported = last.usage?.prompt();
    if reported == 0 {
        return None;
    }
    if let Some(local) = last.request_tokens_local
        && factor.reveals_truncation(reported, local)
    {
        return None;
    }
    let appended = resent(&path[last_idx].id)?;
    Some(TokenCount::new(reported) + factor.apply(appended))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capsule::{Capsule, CapsuleState, Narrative, Quality, Trigger};
    use crate::entry::MessageEntry;
    use crate::id::IdKind;
    use crate::message::Usage;

    const MODEL: &str = "anthropic/claude-sonnet-4-5";

    fn id(n: u128) -> EntryId {
        EntryId::from_uuid(IdKind::Entry, n)
    }

    fn entry(n: u128, body: EntryBody) -> Entry {
        Entry {
            id: id(n),
            parent_id: n.checked_sub(1).map(id),
            timestamp: String::new(),
            body,
        }
    }

    fn message(n: u128, message: Message) -> Entry {
        entry(
            n,
            EntryBody::Message(MessageEntry {
                message,
                tokens: None,
            }),
        )
    }

    fn reply(n: u128, model: &str, prompt: u64, local: u64) -> Entry {
        let mut message_value = Message::assistant("done");
        message_value.model = Some(model.to_owned());
        message_value.usage = Some(Usage {
            input: prompt,
            ..Usage::default()
        });
        message_value.request_tokens_local = Some(local);
        message(n, message_value)
    }

    fn capsule(
        n: u128,
        model: &str,
        calibration: Vec<(String, f64)>,
        overflow: Option<OverflowRecord>,
    ) -> Entry {
        let capsule = Capsule {
            trigger: Trigger::ContextOverflow,
            quality: Quality::Full,
            first_kept_entry_id: None,
            boundary_truncation: None,
            tokens_before: TokenCount::new(0),
            tokens_after: TokenCount::new(0),
            summarizer: "deterministic".into(),
            previous_capsule_id: None,
            state: CapsuleState {
                model: model.into(),
                calibration,
                ..CapsuleState::default()
            },
            instructions: None,
            native: None,
            overflow,
            imported: None,
            scope: None,
            narrative: Narrative::default(),
            earlier_narrative: None,
            rehydrated: Default::default(),
            local: Default::default(),
            markdown: String::new(),
        };
        entry(n, EntryBody::Capsule(Box::new(capsule)))
    }

    fn factor_of(path: &[Entry], seed: f64) -> f64 {
        let input = CalibrationInput {
            model: MODEL,
            seed: Factor::new(seed),
            context_window: None,
        };
        calibrate(path, &input).factor.get()
    }

    fn assert_close(got: f64, expected: f64) {
        assert!(
            (got - expected).abs() < 1e-12,
            "got {got}, expected {expected}"
        );
    }

    #[test]
    fn seeds_per_family() {
        assert_eq!(ModelFamily::OpenAiO200k.seed().get(), 1.0);
        assert_eq!(ModelFamily::Claude.seed().get(), 1.25);
        assert_eq!(ModelFamily::Other.seed().get(), 1.1);
        assert_eq!(Factor::new(f64::NAN), Factor::ONE);
    }

    #[test]
    fn ema_over_the_models_replies_in_path_order() {
        let path = [
            message(1, Message::user("go")),
            reply(2, MODEL, 13_000, 10_000),
            reply(3, "openai/gpt-5", 50_000, 10_000),
            reply(4, MODEL, 14_000, 10_000),
        ];
        // 0.3 × 1.3 + 0.7 × 1.25 = 1.265; 0.3 × 1.4 + 0.7 × 1.265 = 1.3055.
        assert_close(factor_of(&path, 1.25), 1.3055);
        let input = CalibrationInput {
            model: MODEL,
            seed: Factor::new(1.25),
            context_window: None,
        };
        assert_eq!(calibrate(&path, &input).samples, 2);
    }

    #[test]
    fn clamps_every_step() {
        // Samples of 10 would push the factor far above 2.
        let path: Vec<Entry> = (1..=5).map(|n| reply(n, MODEL, 100_000, 10_000)).collect();
        assert_close(factor_of(&path, 1.0), 2.0);
        // Samples of 0.6 pull it to 0.6 at best; 0.3 × 0.6 + 0.7 × 0.5 stays
        // above the floor.
        let path = [reply(1, MODEL, 6_000, 10_000)];
        assert_close(factor_of(&path, 0.5), 0.53);
    }

    #[test]
    fn truncated_responses_are_left_out() {
        // Estimate 10,000 × 1.25 = 12,500; 0.8 × that = 10,000; 9,999 reveals
        // truncation, 10,000 does not.
        let path = [reply(1, MODEL, 9_999, 10_000)];
        let input = CalibrationInput {
            model: MODEL,
            seed: Factor::new(1.25),
            context_window: None,
        };
        let calibration = calibrate(&path, &input);
        assert_close(calibration.factor.get(), 1.25);
        assert_eq!(calibration.samples, 0);
        assert_eq!(
            calibration.truncations,
            [TruncationSign {
                entry_id: id(1),
                reported_prompt: 9_999,
                estimated_prompt: TokenCount::new(12_500)
            }]
        );
        let path = [reply(1, MODEL, 10_000, 10_000)];
        assert_close(factor_of(&path, 1.25), 0.3 + 0.7 * 1.25);
    }

    #[test]
    fn overflow_records_correct_the_factor() {
        // Stated: factor = 130,567 / 100,000.
        let stated = OverflowRecord {
            stated_prompt: Some(130_567),
            request_tokens_local: 100_000,
        };
        let path = [
            reply(1, MODEL, 10_000, 10_000),
            capsule(2, MODEL, Vec::new(), Some(stated)),
        ];
        assert_close(factor_of(&path, 1.25), 1.30567);
        // Unstated: × 1.15 on the factor in force.
        let unstated = OverflowRecord {
            stated_prompt: None,
            request_tokens_local: 100_000,
        };
        let path = [capsule(1, MODEL, Vec::new(), Some(unstated))];
        assert_close(factor_of(&path, 1.25), 1.25 * 1.15);
        // Clamped: 1.8 × 1.15 = 2.07 → 2.0; a stated ratio of 3 → 2.0.
        assert_close(factor_of(&path, 1.8), 2.0);
        let huge = OverflowRecord {
            stated_prompt: Some(300_000),
            request_tokens_local: 100_000,
        };
        assert_close(
            factor_of(&[capsule(1, MODEL, Vec::new(), Some(huge))], 1.0),
            2.0,
        );
        // Another model's overflow does not touch this one.
        let other = [capsule(1, "openai/gpt-5", Vec::new(), Some(unstated))];
        assert_close(factor_of(&other, 1.25), 1.25);
        // Later replies continue the EMA from the corrected factor.
        let path = [
            capsule(1, MODEL, Vec::new(), Some(stated)),
            reply(2, MODEL, 12_000, 10_000),
        ];
        assert_close(factor_of(&path, 1.25), 0.3 * 1.2 + 0.7 * 1.30567);
    }

    #[test]
    fn stored_state_resets_the_factor_so_a_partial_path_agrees() {
        let unstated = OverflowRecord {
            stated_prompt: None,
            request_tokens_local: 100_000,
        };
        // The stored factor already includes the capsule's own correction.
        let path = [
            reply(1, MODEL, 14_000, 10_000),
            capsule(
                2,
                MODEL,
                vec![(MODEL.to_owned(), 1.6), ("other".to_owned(), 0.9)],
                Some(unstated),
            ),
            reply(3, MODEL, 15_000, 10_000),
        ];
        let full = factor_of(&path, 1.25);
        assert_close(full, 0.3 * 1.5 + 0.7 * 1.6);
        assert_close(factor_of(&path[1..], 1.25), full);
    }

    #[test]
    fn silent_overflow_resets_from_usage() {
        let path = [
            reply(1, MODEL, 13_000, 10_000),
            reply(2, MODEL, 140_000, 100_000),
        ];
        let input = CalibrationInput {
            model: MODEL,
            seed: Factor::new(1.25),
            context_window: Some(TokenCount::new(128_000)),
        };
        let calibration = calibrate(&path, &input);
        assert_close(calibration.factor.get(), 1.4);
        assert_eq!((calibration.samples, calibration.overflow_resets), (1, 1));
    }

    fn counted(n: u128, tokens: u64) -> InputMessageTokens {
        InputMessageTokens {
            entry_id: Some(id(n)),
            tokens: TokenCount::new(tokens),
        }
    }

    fn check_measure(
        path: &[Entry],
        messages: &[InputMessageTokens],
        tools_same: bool,
        expected: Measurement,
    ) {
        let input = MeasureInput {
            path,
            fixed_tokens: TokenCount::new(3_000),
            messages,
            model: MODEL,
            factor: Factor::new(1.25),
            tool_set_unchanged: tools_same,
        };
        assert_eq!(measure(&input), expected);
    }

    fn usage(tokens: u64) -> Measurement {
        Measurement {
            tokens: TokenCount::new(tokens),
            source: MeasurementSource::ProviderUsage,
        }
    }

    fn estimated(tokens: u64) -> Measurement {
        Measurement {
            tokens: TokenCount::new(tokens),
            source: MeasurementSource::Estimated,
        }
    }

    #[test]
    fn provider_usage_adds_the_calibrated_tail() {
        let path = [
            message(1, Message::user("go")),
            reply(2, MODEL, 40_000, 32_000),
            message(3, Message::user("more")),
        ];
        let messages = [counted(1, 30_000), counted(2, 1_000), counted(3, 600)];
        // 40,000 + ceil(1.25 × 1,600).
        check_measure(&path, &messages, true, usage(42_000));
        // Everything local: ceil(1.25 × (3,000 + 31,600)) = 43,250.
        check_measure(&path, &messages, false, estimated(43_250));
    }

    #[test]
    fn a_non_message_entry_or_another_model_invalidates_usage() {
        let messages = [counted(1, 30_000), counted(2, 1_000), counted(4, 600)];
        let model_change = entry(
            3,
            EntryBody::ModelChange {
                model: MODEL.into(),
            },
        );
        let path = [
            message(1, Message::user("go")),
            reply(2, MODEL, 40_000, 32_000),
            model_change,
        ];
        check_measure(&path, &messages, true, estimated(43_250));
        let path = [
            message(1, Message::user("go")),
            reply(2, "openai/gpt-5", 40_000, 32_000),
        ];
        check_measure(&path, &messages, true, estimated(43_250));
        // A reply without usage, or before any reply: estimated.
        let path = [message(1, Message::user("go"))];
        check_measure(&path, &messages[..1], true, estimated(41_250));
    }

    #[test]
    fn a_truncated_reply_is_not_trusted_as_usage() {
        // 0.8 × 1.25 × 32,000 = 32,000 > 20,000 reported.
        let path = [
            message(1, Message::user("go")),
            reply(2, MODEL, 20_000, 32_000),
        ];
        let messages = [counted(1, 30_000), counted(2, 1_000)];
        check_measure(&path, &messages, true, estimated(42_500));
    }

    /// `measure_live` reads a maintained input's sums and gives what
    /// `measure` gives over the listed messages, on every prefix of a path
    /// with replies, tool calls and a pending batch.
    #[test]
    fn measuring_a_live_input_equals_listing_it() {
        use crate::budget::Budget;
        use crate::config::CompactionConfig;
        use crate::input::{InputConfig, InputSetup};
        use crate::message::{Block, ToolInput, ToolUse};
        use crate::tokens::ByteCounter;

        let config = CompactionConfig::default();
        let budget = Budget::compute(TokenCount::new(200_000), TokenCount::new(8_000), &config)
            .expect("a budget");
        let setup = InputSetup::new(
            std::sync::Arc::new(ByteCounter),
            InputConfig::new(&budget, &config),
        )
        .with_system_prompt("be brief");
        let call = |n: u128, call_id: &str| {
            let mut calling = Message::new(
                Role::Assistant,
                vec![Block::ToolUse(ToolUse {
                    id: call_id.into(),
                    name: "bash".into(),
                    input: ToolInput::empty(),
                })],
            );
            calling.model = Some(MODEL.to_owned());
            calling.usage = Some(Usage {
                input: 900 + n as u64,
                ..Usage::default()
            });
            calling.request_tokens_local = Some(800);
            message(n, calling)
        };
        let result = |n: u128, call_id: &str| {
            message(n, Message::tool_result(call_id, "ok ".repeat(40), false))
        };
        let path = [
            message(1, Message::user("go ".repeat(300))),
            reply(2, MODEL, 1_000, 800),
            message(3, Message::user("more")),
            call(4, "a"),
            result(5, "a"),
            call(6, "b"),
        ];
        let mut sources = 0;
        for end in 1..=path.len() {
            let live = LiveInput::build(setup.clone(), &path[..end]);
            let listed = live.message_tokens();
            for factor in [1.0, 1.25] {
                let input = MeasureInput {
                    path: &path[..end],
                    fixed_tokens: live.fixed_tokens(),
                    messages: &listed,
                    model: MODEL,
                    factor: Factor::new(factor),
                    tool_set_unchanged: true,
                };
                let expected = measure(&input);
                let got = measure_live(&path[..end], &live, MODEL, Factor::new(factor), true);
                assert_eq!(got, expected, "prefix {end}, factor {factor}");
                sources += usize::from(got.source == MeasurementSource::ProviderUsage);
            }
        }
        // Both sources were exercised.
        assert!(sources > 0 && sources < 2 * path.len(), "{sources}");
    }
}
