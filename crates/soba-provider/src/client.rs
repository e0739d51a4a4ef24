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

/// Where a provider lives: base URL, key and OpenAI account headers.
///
/// `Debug` never prints the key (SPEC §17: keys are never logged).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Endpoint {
    /// The base URL, e.g. `https://api.anthropic.com` or
    /// `https://api.openai.com/v1` (a trailing `/` is ignored; a query is
    /// kept after the joined path). The clients join paths to it with
    /// `transport::endpoint_url` (feature `http`).
    pub base_url: String,
    /// The API key, read by the caller from the provider's `apiKeyEnv`.
    pub api_key: Option<String>,
    /// The OpenAI organization header, when set.
    pub organization: Option<String>,
    /// The OpenAI project header, when set.
    pub project: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("organization", &self.organization)
            .field("project", &self.project)
            .finish()
    }
}

impl Endpoint {
    /// Returns an endpoint with a base URL and no key.
    pub fn new(base_url: impl Into<String>) -> Self {
        Endpoint {
            base_url: base_url.into(),
            ..Endpoint::default()
        }
    }

    /// Returns the endpoint with a key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Returns the endpoint fingerprint of SPEC §10.3, hex-encoded:
    /// `sha256(lower(baseUrl) + "\n" + organization + "\n" + project)`;
    /// never the key.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut hasher = sha2::Sha256::new();
        hasher.update(self.base_url.to_lowercase().as_bytes());
        hasher.update(b"\n");
        hasher.update(self.organization.as_deref().unwrap_or("").as_bytes());
        hasher.update(b"\n");
        hasher.update(self.project.as_deref().unwrap_or("").as_bytes());
        hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
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
    fn endpoint_debug_hides_the_key_and_fingerprint_ignores_it() {
        let endpoint = Endpoint::new("https://API.openai.com/v1/").with_api_key("sk-secret");
        assert!(!format!("{endpoint:?}").contains("sk-secret"));
        let without_key = Endpoint::new("https://api.openai.com/v1/");
        assert_eq!(endpoint.fingerprint(), without_key.fingerprint());
        // sha256("https://api.openai.com/v1/\n\n")
        assert_eq!(
            endpoint.fingerprint(),
            "09e87a817eb6322ec512eee317c8b3a424a3a54d459a526587fba0c6c88fc5ca"
        );
        let mut other = without_key.clone();
        other.project = Some("p".into());
        assert_ne!(other.fingerprint(), without_key.fingerprint());
    }

    #[test]
    fn never_cancel_is_never_cancelled() {
        assert!(!NeverCancel.is_cancelled());
    }
}
