#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of soba-provider: the three HTTP clients against the
//! loopback fake server (all offline; client timeouts ≤ 500 ms against
//! stalls ≥ 5 s, SPEC §17).

mod common;
mod empty;
mod errors;
mod hostile;
mod layout;
mod overflow;
mod probe;
mod redirect;
mod retry;
mod snapshots;
mod streaming;
mod summarizer;
mod timeout;
