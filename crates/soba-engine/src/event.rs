//! Events the engine emits while it works, for the TUI, `soba run --json`,
//! `soba demo` and embedders.

use serde_json::{Value, json};
use soba_core::tokens::group_thousands;
use soba_core::{EntryId, Quality, TokenCount, Trigger};

/// How a compaction ended (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A capsule was appended.
    Completed,
    /// Post-ROI miss, or nothing to compact.
    Skipped,
    /// The turn was cancelled before the append; nothing appended.
    Cancelled,
    /// The leaf moved during the barrier; nothing appended.
    Stale,
    /// An error; nothing appended.
    Failed,
}

impl Outcome {
    /// Returns the wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Skipped => "skipped",
            Outcome::Cancelled => "cancelled",
            Outcome::Stale => "stale",
            Outcome::Failed => "failed",
        }
    }
}

/// What the LLM summarizer will be asked by a compaction, announced in
/// its `compaction_start` before the first call, so that a user can
/// cancel a long one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryEstimate {
    /// The summarizer model.
    pub model: String,
    /// Summarizer calls planned, one per chunk.
    pub calls: usize,
    /// `compaction.summarizer.maxChunks`.
    pub max_calls: usize,
    /// Tokens of the history the calls carry.
    pub summarized_tokens: TokenCount,
    /// Tokens of the older history not sent (kept as local facts only);
    /// zero when all of it is sent.
    pub facts_only_tokens: TokenCount,
    /// Input tokens of all the calls, about: the history plus each call's
    /// prompt and state.
    pub input_tokens: TokenCount,
    /// Output tokens of all the calls, at most.
    pub max_output_tokens: TokenCount,
}

impl SummaryEstimate {
    /// Returns the one-line announcement, e.g. `compacting: gpt-5-mini
    /// summarizes the newest 512,000 tokens in 8 calls (…)`.
    pub fn line(&self) -> String {
        let calls = match self.calls {
            1 => "1 call".to_owned(),
            n => format!("{n} calls"),
        };
        let cost = format!(
            "about {} tokens in, at most {} out",
            group_thousands(self.input_tokens.get()),
            group_thousands(self.max_output_tokens.get())
        );
        if self.facts_only_tokens == TokenCount::ZERO {
            return format!(
                "compacting: {} summarizes {} tokens of history in {calls}; {cost}",
                self.model,
                group_thousands(self.summarized_tokens.get())
            );
        }
        format!(
            "compacting: {} summarizes the newest {} tokens of history in {calls} \
             (compaction.summarizer.maxChunks {}); the older {} tokens are kept as local facts only (files, \
             commands, errors, checkpoints, the original task); {cost}",
            self.model,
            group_thousands(self.summarized_tokens.get()),
            self.max_calls,
            group_thousands(self.facts_only_tokens.get())
        )
    }
}

/// The `compaction_end` event's fields (SPEC §7 step 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionEnd {
    /// Shared with `compaction_start` and the flight record.
    pub operation_id: String,
    /// How it ended.
    pub outcome: Outcome,
    /// What started it.
    pub trigger: Trigger,
    /// Effective tokens before.
    pub tokens_before: TokenCount,
    /// Effective tokens after; equal to before unless completed.
    pub tokens_after: TokenCount,
    /// Tokens reclaimed; zero unless completed.
    pub reclaimed: TokenCount,
    /// The capsule's id, short form, when completed.
    pub checkpoint_id: Option<EntryId>,
    /// The capsule's quality, when completed.
    pub quality: Option<Quality>,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// Why, for any outcome but a plain completion (and for a fallback).
    pub reason: Option<String>,
}

impl CompactionEnd {
    /// Returns `reclaimed / tokensBefore` in whole percent, rounded.
    pub fn percent(&self) -> u64 {
        match self.tokens_before.get() {
            0 => 0,
            before => (self.reclaimed.get() * 100 + before / 2) / before,
        }
    }

    /// Returns the one result line the UI keeps (SPEC §11.2), e.g.
    /// `Compacted (auto_threshold): 41,210 → 23,480 tokens (−43%) · ck_7f3a`;
    /// a capsule larger than the span it replaced shows its growth
    /// (`(+3%)`) and says so.
    pub fn result_line(&self, short_id: impl Fn(&EntryId) -> String) -> String {
        match self.outcome {
            Outcome::Completed => {
                let mut line = format!(
                    "Compacted ({}): {} → {} tokens ({})",
                    self.trigger.as_str(),
                    self.tokens_before,
                    self.tokens_after,
                    size_change(self.tokens_before.get(), self.tokens_after.get())
                );
                if self.tokens_after > self.tokens_before {
                    line.push_str(" · the capsule is larger than what it replaced");
                }
                if let Some(id) = &self.checkpoint_id {
                    line.push_str(&format!(" · {}", short_id(id)));
                }
                if self.quality == Some(Quality::Degraded) {
                    line.push_str(" · fallback used");
                }
                line
            }
            other => {
                let mut line = format!("Compaction {} ({})", other.as_str(), self.trigger.as_str());
                if let Some(reason) = &self.reason {
                    line.push_str(&format!(": {reason}"));
                }
                line
            }
        }
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// An assistant message without tool calls was appended.
    Completed,
    /// Ctrl-C, Esc or an external cancel.
    Cancelled,
    /// A rewind moved the leaf during a barrier.
    Stale,
    /// A provider error, a second overflow, or fail-closed planning.
    Failed(String),
    /// The user denied a call (`bash: rm -r build`): the turn stops there
    /// and waits for the user's next message.
    Denied {
        /// The denied call, described.
        call: String,
    },
}

/// One engine event.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// A turn started with this real user message.
    TurnStarted {
        /// The user message's entry.
        entry_id: EntryId,
    },
    /// A hygiene pass was persisted.
    Hygiene {
        /// The `hygiene` entry.
        entry_id: EntryId,
        /// Tokens reclaimed.
        reclaimed: TokenCount,
        /// Tool results stubbed.
        stubbed: usize,
        /// Effective tokens before the pass.
        tokens_before: TokenCount,
    },
    /// A compaction barrier started.
    CompactionStart {
        /// Operation id.
        operation_id: String,
        /// What fired.
        trigger: Trigger,
        /// The plan, as `Plan::explain` prints it.
        plan: String,
        /// Effective tokens at the preflight.
        tokens_before: TokenCount,
        /// What the LLM summarizer will be asked, when it is more than one
        /// call or not the whole span.
        estimate: Option<SummaryEstimate>,
    },
    /// Generation progress, 0–99 (only goes up).
    CompactionProgress {
        /// Operation id.
        operation_id: String,
        /// Percent done.
        percent: u8,
    },
    /// A compaction barrier ended.
    CompactionEnd(CompactionEnd),
    /// A streamed piece of assistant text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// The assistant message of a step was appended.
    AssistantMessage {
        /// Its entry.
        entry_id: EntryId,
        /// Its text blocks.
        text: String,
        /// Names of the tools it calls.
        tool_calls: Vec<String>,
    },
    /// A tool ran.
    ToolResult {
        /// The tool.
        name: String,
        /// A one-line description of the call.
        call: String,
        /// Whether it failed.
        is_error: bool,
        /// Its output size in bytes.
        bytes: usize,
    },
    /// A provider request failed before any content and is sent again
    /// after a wait (SPEC §10.1).
    Retrying {
        /// The attempt that comes next (2 is the first retry).
        attempt: u32,
        /// The most attempts there will be.
        max_attempts: u32,
        /// The wait before it, in milliseconds.
        delay_ms: u64,
        /// Why the last attempt failed, one line.
        reason: String,
    },
    /// Something the user should know (silent truncation, a fallback).
    Warning {
        /// The message.
        message: String,
    },
    /// The turn ended.
    TurnEnded {
        /// How.
        end: TurnEnd,
    },
}

fn tokens(n: TokenCount) -> Value {
    Value::from(n.get())
}

impl EngineEvent {
    /// Returns the event as one JSON object, as `soba run --json` writes it.
    pub fn to_json(&self) -> Value {
        match self {
            EngineEvent::TurnStarted { entry_id } => {
                json!({"type": "turn_start", "entryId": entry_id.as_str()})
            }
            EngineEvent::Hygiene {
                entry_id,
                reclaimed,
                stubbed,
                tokens_before,
            } => json!({
                "type": "hygiene", "entryId": entry_id.as_str(), "reclaimed": tokens(*reclaimed),
                "stubbed": stubbed, "tokensBefore": tokens(*tokens_before),
            }),
            EngineEvent::CompactionStart {
                operation_id,
                trigger,
                plan,
                tokens_before,
                estimate,
            } => json!({
                "type": "compaction_start", "operationId": operation_id, "trigger": trigger.as_str(),
                "tokensBefore": tokens(*tokens_before), "plan": plan,
                "estimate": estimate.as_ref().map(|estimate| json!({
                    "model": estimate.model, "calls": estimate.calls, "maxCalls": estimate.max_calls,
                    "summarizedTokens": tokens(estimate.summarized_tokens),
                    "factsOnlyTokens": tokens(estimate.facts_only_tokens),
                    "inputTokens": tokens(estimate.input_tokens),
                    "maxOutputTokens": tokens(estimate.max_output_tokens),
                })),
            }),
            EngineEvent::CompactionProgress {
                operation_id,
                percent,
            } => {
                json!({"type": "compaction_progress", "operationId": operation_id, "percent": percent})
            }
            EngineEvent::CompactionEnd(end) => json!({
                "type": "compaction_end",
                "operationId": end.operation_id,
                "outcome": end.outcome.as_str(),
                "trigger": end.trigger.as_str(),
                "tokensBefore": tokens(end.tokens_before),
                "tokensAfter": tokens(end.tokens_after),
                "reclaimed": tokens(end.reclaimed),
                "ratio": match end.tokens_before.get() { 0 => 0.0, before => end.reclaimed.get() as f64 / before as f64 },
                "checkpointId": end.checkpoint_id.as_ref().map(EntryId::as_str),
                "quality": end.quality.map(Quality::as_str),
                "durationMs": end.duration_ms,
                "reason": end.reason,
            }),
            EngineEvent::TextDelta { text } => json!({"type": "text_delta", "text": text}),
            EngineEvent::AssistantMessage {
                entry_id,
                text,
                tool_calls,
            } => json!({
                "type": "assistant_message", "entryId": entry_id.as_str(), "text": text, "toolCalls": tool_calls,
            }),
            EngineEvent::ToolResult {
                name,
                call,
                is_error,
                bytes,
            } => {
                json!({"type": "tool_result", "name": name, "call": call, "isError": is_error, "bytes": bytes})
            }
            EngineEvent::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            } => json!({
                "type": "retry", "attempt": attempt, "maxAttempts": max_attempts,
                "delayMs": delay_ms, "reason": reason,
            }),
            EngineEvent::Warning { message } => json!({"type": "warning", "message": message}),
            EngineEvent::TurnEnded { end } => {
                let (outcome, reason) = match end {
                    TurnEnd::Completed => ("completed", None),
                    TurnEnd::Cancelled => ("cancelled", None),
                    TurnEnd::Stale => ("stale", None),
                    TurnEnd::Failed(reason) => ("failed", Some(reason.clone())),
                    TurnEnd::Denied { call } => ("denied", Some(call.clone())),
                };
                json!({"type": "turn_end", "outcome": outcome, "reason": reason})
            }
        }
    }
}

impl EngineEvent {
    /// Returns a retry as one status line, e.g. `retrying in 4 s (attempt
    /// 2 of 5): connection refused`; `None` for other events.
    pub fn retry_line(&self) -> Option<String> {
        let EngineEvent::Retrying {
            attempt,
            max_attempts,
            delay_ms,
            reason,
        } = self
        else {
            return None;
        };
        let wait = if *delay_ms < 1_000 {
            format!("{delay_ms} ms")
        } else {
            format!("{} s", (delay_ms + 500) / 1_000)
        };
        Some(format!(
            "retrying in {wait} (attempt {attempt} of {max_attempts}): {reason}"
        ))
    }
}

/// Returns how a compaction changed the context, in whole percent of
/// `before`, rounded, signed: `−43%` smaller, `+3%` larger (a capsule can
/// be larger than what it replaced), `±0%` unchanged.
pub fn size_change(before: u64, after: u64) -> String {
    let percent = |delta: u64| match before {
        0 => 0,
        before => (u128::from(delta) * 100 + u128::from(before) / 2) / u128::from(before),
    };
    match after.cmp(&before) {
        std::cmp::Ordering::Less => format!("\u{2212}{}%", percent(before - after)),
        std::cmp::Ordering::Greater if before == 0 => "+∞%".to_owned(),
        std::cmp::Ordering::Greater => format!("+{}%", percent(after - before)),
        std::cmp::Ordering::Equal => "±0%".to_owned(),
    }
}

/// Formats a token count with separators (re-exported for printers).
pub fn format_tokens(n: TokenCount) -> String {
    group_thousands(n.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::IdKind;

    fn end(outcome: Outcome, quality: Option<Quality>) -> CompactionEnd {
        CompactionEnd {
            operation_id: "op".into(),
            outcome,
            trigger: Trigger::AutoThreshold,
            tokens_before: TokenCount::new(41_210),
            tokens_after: TokenCount::new(23_480),
            reclaimed: TokenCount::new(17_730),
            checkpoint_id: Some(EntryId::from_uuid(
                IdKind::Capsule,
                0x0190_f3a2_b4c5_77f3_a9d1_0000_0000_0001,
            )),
            quality,
            duration_ms: 12,
            reason: None,
        }
    }

    #[test]
    fn result_line_matches_the_spec_example() {
        let line = end(Outcome::Completed, Some(Quality::Full)).result_line(|id| id.short_with(4));
        assert_eq!(
            line,
            "Compacted (auto_threshold): 41,210 → 23,480 tokens (−43%) · ck_7f3a"
        );
        let degraded =
            end(Outcome::Completed, Some(Quality::Degraded)).result_line(|id| id.short_with(4));
        assert!(degraded.ends_with(" · fallback used"));
    }

    #[test]
    fn a_capsule_larger_than_its_span_shows_its_growth() {
        let mut grown = end(Outcome::Completed, Some(Quality::Full));
        grown.tokens_before = TokenCount::new(10_000);
        grown.tokens_after = TokenCount::new(10_300);
        grown.reclaimed = TokenCount::new(0);
        assert_eq!(
            grown.result_line(|id| id.short_with(4)),
            "Compacted (auto_threshold): 10,000 → 10,300 tokens (+3%) · the capsule is larger than what it replaced · ck_7f3a"
        );
        assert_eq!(size_change(41_210, 23_480), "\u{2212}43%");
        assert_eq!(size_change(10_000, 10_300), "+3%");
        assert_eq!(size_change(10_000, 10_000), "±0%");
        assert_eq!(size_change(10_000, 9_990), "\u{2212}0%");
        assert_eq!(size_change(0, 0), "±0%");
        assert_eq!(size_change(u64::MAX, 0), "\u{2212}100%");
    }

    #[test]
    fn a_retry_reads_as_one_line() {
        let retry = |delay_ms| EngineEvent::Retrying {
            attempt: 2,
            max_attempts: 5,
            delay_ms,
            reason: "connection refused".into(),
        };
        assert_eq!(
            retry(4_100).retry_line().as_deref(),
            Some("retrying in 4 s (attempt 2 of 5): connection refused")
        );
        assert_eq!(
            retry(900).retry_line().as_deref(),
            Some("retrying in 900 ms (attempt 2 of 5): connection refused")
        );
        assert_eq!(retry(900).to_json()["type"], "retry");
        assert_eq!(
            EngineEvent::TextDelta { text: "x".into() }.retry_line(),
            None
        );
    }

    #[test]
    fn compaction_end_json_has_every_field() {
        let json =
            EngineEvent::CompactionEnd(end(Outcome::Completed, Some(Quality::Full))).to_json();
        for key in [
            "operationId",
            "outcome",
            "trigger",
            "tokensBefore",
            "tokensAfter",
            "reclaimed",
            "ratio",
            "checkpointId",
            "quality",
            "durationMs",
            "reason",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
    }
}
