//! The engine's error type.

use soba_store::StoreError;

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The session log could not be read or written; see the source.
    #[error("session log")]
    Store(#[source] StoreError),
    /// The model's budget is impossible (SPEC §4.3); fix the configuration.
    #[error("{0}")]
    Budget(String),
    /// The session or a request is not usable as given.
    #[error("{0}")]
    Invalid(String),
    /// The model provider failed; see the message.
    #[error("provider: {0}")]
    Provider(String),
    /// Planning could not make the input fit (SPEC §7.2).
    #[error("{0}")]
    FailClosed(String),
}
