//! Hygiene, level 1 and free (SPEC §8.1): stubbing old tool-result bodies
//! in the model input, once per turn, when it reclaims enough to pay for the
//! cache write it causes. The pass is planned here and persisted as a
//! `hygiene` entry; [`crate::input::LiveInput`] applies such entries.

use std::fmt;

use crate::budget::Budget;
use crate::config::CompactionConfig;
use crate::entry::EntryBody;
use crate::id::EntryId;
use crate::input::{InputOrigin, LiveInput};
use crate::tokens::TokenCount;

/// The settings hygiene reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HygieneConfig {
    /// hygieneLimit: hygiene is considered at the first preflight of a turn
    /// with effective tokens at or above it.
    pub hygiene_limit: TokenCount,
    /// `hygieneKeepMessages`: the newest input messages never stubbed.
    pub keep_messages: usize,
    /// `minHygieneTokens`: the least a pass must reclaim to apply.
    pub min_tokens: TokenCount,
}

impl HygieneConfig {
    /// Takes the settings from a budget and the compaction configuration
    /// (protected tools are part of [`crate::input::InputConfig`], since the
    /// rebuild applies them too).
    pub fn new(budget: &Budget, config: &CompactionConfig) -> Self {
        HygieneConfig {
            hygiene_limit: budget.hygiene_limit(),
            keep_messages: config.hygiene_keep_messages,
            min_tokens: config.min_hygiene_tokens,
        }
    }
}

/// Returns whether hygiene is considered at this preflight: the first of
/// the turn whose effective tokens reach hygieneLimit. The caller keeps
/// `considered_this_turn` (SPEC §6.2: such marks live in memory).
pub fn is_due(
    effective: TokenCount,
    hygiene_limit: TokenCount,
    considered_this_turn: bool,
) -> bool {
    !considered_this_turn && effective >= hygiene_limit
}

/// One tool result a hygiene pass stubs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubbedResult {
    /// The message entry carrying the result.
    pub entry_id: EntryId,
    /// The call it answers.
    pub call_id: String,
    /// The tool, from its call.
    pub tool: String,
    /// The body's tokens (after the tool-output cap).
    pub tokens: TokenCount,
    /// The stub's tokens.
    pub stub_tokens: TokenCount,
}

/// A hygiene pass to persist as a `hygiene` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HygienePlan {
    /// Every result at or before this entry on the path is stubbed (unless
    /// protected or an unresolved error).
    pub pruned_through_entry_id: EntryId,
    /// Tokens the stubs save in the model input.
    pub reclaimed_tokens: TokenCount,
    /// The results stubbed, oldest first.
    pub stubbed: Vec<StubbedResult>,
}

impl HygienePlan {
    /// Returns the entry body that persists the pass.
    pub fn entry_body(&self) -> EntryBody {
        EntryBody::Hygiene {
            pruned_through: self.pruned_through_entry_id.clone(),
            reclaimed_tokens: self.reclaimed_tokens,
            stubbed_calls: Some(
                self.stubbed
                    .iter()
                    .map(|stubbed| stubbed.call_id.clone())
                    .collect(),
            ),
        }
    }
}

/// What hygiene decided at a preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HygieneDecision {
    /// Effective tokens are below hygieneLimit.
    NotDue {
        /// The effective tokens measured.
        effective: TokenCount,
        /// hygieneLimit.
        hygiene_limit: TokenCount,
    },
    /// Every message is inside the keep window.
    NothingOutsideWindow,
    /// The stubs would reclaim less than `minHygieneTokens`: not applied.
    BelowGate {
        /// What the pass would have reclaimed.
        reclaimable: TokenCount,
        /// `minHygieneTokens`.
        min_tokens: TokenCount,
    },
    /// Apply (append) this pass.
    Apply(HygienePlan),
}

impl fmt::Display for HygieneDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HygieneDecision::NotDue {
                effective,
                hygiene_limit,
            } => {
                write!(
                    f,
                    "hygiene not due: effective {effective} < hygieneLimit {hygiene_limit}"
                )
            }
            HygieneDecision::NothingOutsideWindow => {
                write!(f, "hygiene skipped: every message is in the keep window")
            }
            HygieneDecision::BelowGate {
                reclaimable,
                min_tokens,
            } => {
                write!(
                    f,
                    "hygiene skipped: it would reclaim {reclaimable} < minHygieneTokens {min_tokens}"
                )
            }
            HygieneDecision::Apply(plan) => write!(
                f,
                "hygiene: stub {} tool results through {}, reclaiming {} tokens",
                plan.stubbed.len(),
                plan.pruned_through_entry_id,
                plan.reclaimed_tokens
            ),
        }
    }
}

/// Plans a hygiene pass over the current model input (SPEC §8.1).
///
/// The keep window is the newest `keep_messages` message entries of the
/// input (one per tool result, the just-appended message included),
/// widened to the start of a tool batch it cuts. Every result before it is
/// stubbed unless it is of a protected tool, an unresolved error, or not
/// larger than its stub. The pass applies only if it reclaims at least
/// `min_tokens`.
pub fn plan_hygiene(
    live: &LiveInput,
    effective: TokenCount,
    config: &HygieneConfig,
) -> HygieneDecision {
    if effective < config.hygiene_limit {
        return HygieneDecision::NotDue {
            effective,
            hygiene_limit: config.hygiene_limit,
        };
    }
    let views: Vec<_> = live.item_views().collect();
    let mut window_start = views.len();
    let mut counted = 0;
    for (idx, view) in views.iter().enumerate().rev() {
        if counted == config.keep_messages {
            break;
        }
        if view.origin == InputOrigin::Entry {
            counted += 1;
            window_start = idx;
        }
    }
    while window_start > 0 && window_start < views.len() && views[window_start].is_result() {
        window_start -= 1;
    }
    if counted < config.keep_messages {
        window_start = 0;
    }
    let Some(through) = views[..window_start]
        .iter()
        .rev()
        .find(|view| view.origin == InputOrigin::Entry)
    else {
        return HygieneDecision::NothingOutsideWindow;
    };
    let candidates = live.stub_candidates(through.path_index);
    let stubbed: Vec<StubbedResult> = candidates
        .iter()
        .filter_map(|candidate| {
            let view = views.get(candidate.item)?;
            let info = view.results.get(candidate.result)?;
            Some(StubbedResult {
                entry_id: view.source.clone(),
                call_id: info.call_id.clone(),
                tool: info.tool.clone(),
                tokens: candidate.body_tokens,
                stub_tokens: candidate.stub_tokens,
            })
        })
        .collect();
    let reclaimable: TokenCount = stubbed
        .iter()
        .map(|stub| stub.tokens.saturating_sub(stub.stub_tokens))
        .sum();
    if reclaimable < config.min_tokens {
        return HygieneDecision::BelowGate {
            reclaimable,
            min_tokens: config.min_tokens,
        };
    }
    HygieneDecision::Apply(HygienePlan {
        pruned_through_entry_id: through.source.clone(),
        reclaimed_tokens: reclaimable,
        stubbed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ErrorKey;
    use crate::message::ToolInput;
    use crate::message::ToolUse;
    use serde_json::{Value, json};

    fn key(name: &str, args: Value) -> ErrorKey {
        ErrorKey::from_call(
            &ToolUse {
                id: "c".into(),
                name: name.into(),
                input: ToolInput::from_value(args),
            },
            Some("/w"),
        )
    }

    #[test]
    fn error_keys_match_the_same_command_or_the_same_tool_and_path() {
        let bash = |command: &str| key("bash", json!({ "command": command }));
        assert_eq!(bash("cargo  test"), bash("cargo test"));
        assert_ne!(bash("cargo test"), bash("cargo build"));
        let edit = |path: &str, old: &str| key("edit_file", json!({ "path": path, "old": old }));
        assert_eq!(edit("src/a.rs", "x"), edit("src/a.rs", "y"));
        assert_ne!(edit("src/a.rs", "x"), edit("src/b.rs", "x"));
        assert_ne!(
            edit("src/a.rs", "x"),
            key("write_file", json!({"path": "src/a.rs"}))
        );
        // The directory is part of the command, however it is given.
        let in_backend = key(
            "exec_command",
            json!({"cmd": "make", "workdir": "/w/backend"}),
        );
        assert_eq!(in_backend, bash("cd backend && make"));
        assert_eq!(in_backend.as_str(), "$ cd backend && make");
        assert_ne!(in_backend, bash("make"));
        assert_eq!(edit("/w/src/a.rs", "x"), edit("src/a.rs", "x"));
    }

    #[test]
    fn due_once_per_turn_at_the_limit() {
        let limit = TokenCount::new(50_000);
        assert!(!is_due(TokenCount::new(49_999), limit, false));
        assert!(is_due(TokenCount::new(50_000), limit, false));
        assert!(!is_due(TokenCount::new(90_000), limit, true));
    }
}
