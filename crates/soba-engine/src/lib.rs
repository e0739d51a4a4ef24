//! SOBA's async runtime glue: the preflight barrier, the compaction runner
//! (deadline, cancel, stale check), the agent loop, tools and events.
#![warn(missing_docs)]

pub mod agent;
pub mod barrier;
pub mod demo;
pub mod error;
pub mod event;
pub mod native;
pub mod session;
pub mod tool;

pub use error::EngineError;
