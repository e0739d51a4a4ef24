//! Retention units (SPEC §1, §8.2): the indivisible blocks the retention
//! walk keeps or summarizes. A unit is a user message; an assistant message
//! together with every tool result answering its calls (a *tool batch*);
//! or a `capsule_file` context entry. `system` messages are pinned, not
//! units, and every other entry weighs nothing and never splits a unit.

use std::ops::Range;

use crate::id::EntryId;
use crate::input::{InputMessage, InputOrigin};
use crate::message::Role;
use crate::tokens::TokenCount;

/// What a unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnitKind {
    /// A user message (typed or injected).
    User,
    /// An assistant message without tool calls.
    Assistant,
    /// An assistant message with its tool calls' results.
    ToolBatch,
    /// A loaded portable capsule.
    CapsuleFile,
}

impl UnitKind {
    /// Returns a short name for explanations.
    pub fn as_str(self) -> &'static str {
        match self {
            UnitKind::User => "user",
            UnitKind::Assistant => "assistant",
            UnitKind::ToolBatch => "tool batch",
            UnitKind::CapsuleFile => "capsule file",
        }
    }
}

/// One retention unit over the model input's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// What it is.
    pub kind: UnitKind,
    /// Its first entry: where a boundary before it points.
    pub first_entry_id: EntryId,
    /// Its messages, as indices into [`crate::input::ModelInput::messages`].
    pub messages: Range<usize>,
    /// Its local tokens as sent (after stubs, caps and cuts).
    pub tokens: TokenCount,
    /// Whether a retention boundary may cut it middle-out: a single
    /// text-only user or assistant message (never tool blocks or images).
    pub truncatable: bool,
}

impl Unit {
    /// Returns the entries the unit was rendered from, in order, each once.
    pub fn entry_ids<'a>(&self, messages: &'a [InputMessage<'a>]) -> Vec<&'a EntryId> {
        let mut ids: Vec<&EntryId> = Vec::with_capacity(self.messages.len());
        for message in &messages[self.messages.clone()] {
            if !ids.contains(&message.source) {
                ids.push(message.source);
            }
        }
        ids
    }
}

/// Groups the input's messages (after the capsule) into units, in order.
pub fn units(messages: &[InputMessage<'_>]) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    for (idx, message) in messages.iter().enumerate() {
        if message.is_result()
            && let Some(batch) = units
                .last_mut()
                .filter(|unit| unit.kind == UnitKind::ToolBatch)
        {
            batch.messages.end = idx + 1;
            batch.tokens += message.tokens;
            batch.truncatable = false;
            continue;
        }
        let kind = match (message.origin, message.message.role) {
            (InputOrigin::CapsuleFile, _) => UnitKind::CapsuleFile,
            (_, Role::Assistant) if message.message.has_tool_uses() => UnitKind::ToolBatch,
            (_, Role::Assistant) => UnitKind::Assistant,
            // A result without its call is swept from the input; should one
            // reach here, it stands alone rather than join another unit.
            _ if message.is_result() => UnitKind::ToolBatch,
            _ => UnitKind::User,
        };
        let truncatable = matches!(kind, UnitKind::User | UnitKind::Assistant)
            && message.origin == InputOrigin::Entry
            && message.message.is_text_only();
        units.push(Unit {
            kind,
            first_entry_id: message.source.clone(),
            messages: idx..idx + 1,
            tokens: message.tokens,
            truncatable,
        });
    }
    units
}
