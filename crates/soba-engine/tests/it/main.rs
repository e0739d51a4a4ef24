#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of soba-engine, one binary with a module per subsystem.

mod barrier;
mod confine;
mod crash;
mod embed;
mod escape;
mod examples;
mod harness;
mod huge;
mod native;
mod race;
mod rehydrate;
mod reply;
mod rig;
mod session;
mod soak;
mod summarizer;
mod tool;
