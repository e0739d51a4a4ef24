#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of soba-engine, one binary with a module per subsystem.

mod barrier;
mod embed;
mod examples;
mod harness;
mod session;
mod native;
mod summarizer;
mod tool;
