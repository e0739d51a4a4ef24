//! The [`ModelClient`] trait every inference client implements, and the
//! small [`Cancellation`] trait it takes.
//!
//! Both compile without the `http` feature, so an embedder can bring its own
//! client. Cancellation is a trait rather than `tokio_util`'s
//! `CancellationToken` so that this module needs no async runtime; with the
//! `http` feature, `CancellationToken` implements it.

use std::future::Future;
use std::pin::Pin;

use crate::error::ProviderError;
use crate::request::{ChatRequest, ChatResponse, StreamEvent};

/// A boxed, sendable future, as returned by the object-safe traits here.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A signal that a request should stop.
pub trait Cancellation: Send + Sync {
    /// Returns whether cancellation was requested.
    fn is_cancelled(&self) -> bool;

    /// Returns a future that completes once cancellation is requested.
    fn cancelled(&self) -> BoxFuture<'_, ()>;
}

/// A [`Cancellation`] that never fires.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverCancel;

impl Cancellation for NeverCancel {
    fn is_cancelled(&self) -> bool {
        false
    }

    fn cancelled(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

#[cfg(feature = "http")]
impl Cancellation for tokio_util::sync::CancellationToken {
    fn is_cancelled(&self) -> bool {
        tokio_util::sync::CancellationToken::is_cancelled(self)
    }

    fn cancelled(&self) -> BoxFuture<'_, ()> {
        Box::pin(tokio_util::sync::CancellationToken::cancelled(self))
    }
}

/// The wire dialect a provider speaks (`api` in the provider config, §14.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// Anthropic Messages (`anthropic-messages`).
    AnthropicMessages,
    /// OpenAI Chat Completions and compatible servers (`openai-chat`).
    OpenAiChat,
    /// OpenAI Responses (`openai-responses`).
    OpenAiResponses,
}

impl Api {
    /// Returns the config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::AnthropicMessages => "anthropic-messages",
            Api::OpenAiChat => "openai-chat",
            Api::OpenAiResponses => "openai-responses",
        }
    }

    /// Parses a config name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "anthropic-messages" => Some(Api::AnthropicMessages),
            "openai-chat" => Some(Api::OpenAiChat),
            "openai-responses" => Some(Api::OpenAiResponses),
            _ => None,
        }
    }
}

/// A model client: sends one request and streams the answer.
///
/// Implementations retry transient failures themselves (before the first
/// content event only), stop promptly when `cancel` fires (returning
/// [`ProviderError::Cancelled`]) and close the connection when the returned
/// future is dropped.
pub trait ModelClient: Send + Sync {
    /// Returns the dialect this client speaks.
    fn api(&self) -> Api;

    /// Sends `request`, calls `on_event` for every stream event in order,
    /// and returns the complete response.
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_names_round_trip() {
        for api in [
            Api::AnthropicMessages,
            Api::OpenAiChat,
            Api::OpenAiResponses,
        ] {
            assert_eq!(Api::parse(api.as_str()), Some(api));
        }
        assert_eq!(Api::parse("gemini"), None);
    }

    #[test]
    fn never_cancel_is_never_cancelled() {
        assert!(!NeverCancel.is_cancelled());
    }
}
