//! SOBA's async runtime glue: the preflight barrier, the compaction runner
//! (deadline, cancel, stale check), the agent loop, tools and events.
//!
//! Another agent embeds the engine through [`embed`]: an [`Engine`] over a
//! session log that prepares every request behind the preflight barrier,
//! with the host's own model client, tools and UI. `docs/embedding.md` at
//! the repository root is the guide; `examples/` has two runnable hosts.
//!
//! Feature `http` (default) wires soba-provider's HTTP clients and the
//! modules that need them: `agent` (SOBA's own loop and tools runner) and
//! `demo`. Without it the crate still offers [`embed`], [`barrier`],
//! [`session`], [`event`], [`native`] and [`tool`].
#![warn(missing_docs)]

pub mod agent;
pub mod barrier;
pub mod demo;
pub mod embed;
pub mod error;
pub mod event;
pub mod native;
pub mod session;
pub mod tool;

/// The embedding API's entry points, re-exported so a host needs one `use`.
pub use embed::{EmbedError, Engine, EngineConfig, Prepared};
pub use error::EngineError;
