//! The pure heart of SOBA: the message model, token accounting, budget math,
//! triggers and derived state, the planner, capsules and summary guards.
//!
//! Nothing in this crate touches files, the network, the clock, the
//! environment or an async runtime: time, ids and randomness come in as
//! arguments, so every decision can be replayed from a session log.
#![warn(missing_docs)]

pub mod bpe;
pub mod budget;
pub mod builder;
pub mod calibration;
pub mod capsule;
pub mod command;
pub mod config;
pub mod consistency;
pub mod derived;
pub mod directive;
pub mod entry;
pub mod facts;
pub mod guard;
pub mod hygiene;
pub mod id;
pub mod input;
pub mod message;
pub mod plan;
pub mod preflight;
pub mod redact;
pub mod rehydrate;
pub mod render;
pub mod retention;
pub mod summarize;
pub mod terminal;
pub mod textcall;
pub mod tokens;
pub mod trigger;
pub mod truncate;
pub mod unit;

pub use capsule::{Capsule, CapsuleState, Quality, SummaryScope, Trigger};
pub use entry::{
    ApprovalGrants, CheckpointKind, ContextEntry, ContextSource, Entry, EntryBody, MessageEntry,
};
pub use id::{EntryId, IdError, IdKind};
pub use message::{
    Block, Image, ImageSource, Message, MessageOrigin, ResultPart, Role, ToolInput, ToolResult,
    ToolUse, Usage,
};
pub use tokens::{Encoding, TokenCount, TokenCounter};
