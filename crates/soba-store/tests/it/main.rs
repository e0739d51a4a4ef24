#![allow(clippy::unwrap_used, clippy::expect_used)]
mod import;
mod log;
mod reader;
mod resume;
mod strategy;
mod support;
mod wire;
