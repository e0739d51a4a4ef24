//! SOBA's async runtime glue: the preflight barrier, the compaction runner
//! (deadline, cancel, stale check), the agent loop, tools and events.
#![warn(missing_docs)]
