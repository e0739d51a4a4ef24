#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of soba-engine, one binary with a module per subsystem.

mod barrier;
mod crash;
mod embed;
mod escape;
mod examples;
mod harness;
mod session;
mod soak;
mod native;
mod race;
mod rig;
mod summarizer;
mod tool;
