//! A configured SOBA workspace, the library every front door (the `soba`
//! commands, the TUI) is glue over: configuration and paths, the session
//! setup (model, summarizer, native compactor, system prompt, session,
//! barrier, count memo), and the operations two front doors share. It
//! prints nothing: it returns values and [`WorkspaceError`]s, which a
//! front door formats and maps to its exit codes.

#![warn(missing_docs)]

pub mod budget;
pub mod capsule;
pub mod config;
pub mod context;
pub mod demo;
pub mod error;
pub mod import;
pub mod memory;
pub mod outline;
pub mod paths;
pub mod replay_config;
pub mod resume;
pub mod session;
pub mod session_list;
pub mod setup;
pub mod skill;
pub mod stats;
pub mod tools;

pub use context::{Context, Options};
pub use error::{ErrorKind, WorkspaceError};
