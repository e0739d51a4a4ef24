//! The provider subsystem's error type, [`ProviderError`], shared by the
//! clients, the registry lookups and the wire decoders.

use std::time::Duration;

/// How many characters of a response body an error keeps.
pub const BODY_EXCERPT_CHARS: usize = 600;

/// Everything that can go wrong talking to a model provider.
///
/// Each variant's doc says when it happens and whether retrying the same
/// request can help. The HTTP clients already retry what can be retried
/// (SPEC §10.1); an error that reaches the caller has exhausted that budget.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// HTTP 401 or 403: the key is missing, wrong or lacks access. Retrying
    /// does not help; fix the key.
    #[error(
        "authentication failed (http {status}): check the provider's API key variable and its access; body: {body}"
    )]
    Unauthorized {
        /// The HTTP status.
        status: u16,
        /// The start of the response body.
        body: String,
    },

    /// HTTP 404: wrong `baseUrl`, wrong path or an unknown model. Retrying
    /// does not help; fix the configuration.
    #[error(
        "not found (http 404) at {url}: check the provider's baseUrl and the model name; body: {body}"
    )]
    NotFound {
        /// The URL that was requested.
        url: String,
        /// The start of the response body.
        body: String,
    },

    /// The request is larger than the model's context window (SPEC §6.3).
    /// Retrying the same request never helps; compact first, then retry once.
    #[error("context overflow (http {status}{}): compact the conversation before retrying; body: {body}", stated_suffix(*stated_prompt))]
    ContextOverflow {
        /// The HTTP status (400 for errors reported inside a stream).
        status: u16,
        /// The prompt size the provider stated, when it stated one.
        stated_prompt: Option<u64>,
        /// The context window the provider stated, when it stated one
        /// (llama.cpp: "exceeds the available context size (8192 tokens)").
        stated_limit: Option<u64>,
        /// The start of the response body.
        body: String,
    },

    /// HTTP 429 after every retry, or with a `retry-after` beyond the
    /// configured ceiling. Retrying later can help.
    #[error("rate limited (http 429) after {attempts} attempt(s){}: wait and retry later; body: {body}", retry_after_suffix(*retry_after))]
    RateLimited {
        /// How many requests were sent.
        attempts: u32,
        /// The provider's `retry-after`, when given.
        retry_after: Option<Duration>,
        /// The start of the response body.
        body: String,
    },

    /// HTTP 5xx (or 408) after every retry. Retrying later can help.
    #[error(
        "provider server error (http {status}) after {attempts} attempt(s): retry later; body: {body}"
    )]
    Server {
        /// The HTTP status.
        status: u16,
        /// How many requests were sent.
        attempts: u32,
        /// The start of the response body.
        body: String,
    },

    /// Any other non-success status (an ordinary 400, 422, …): the provider
    /// rejected the request. Retrying the same request does not help.
    #[error("request rejected (http {status}): {body}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The start of the response body.
        body: String,
    },

    /// The connection could not be made or was reset before a response,
    /// after every retry. Retrying later can help.
    #[error("cannot reach {url} after {attempts} attempt(s): check baseUrl and the network")]
    Connect {
        /// The URL that was requested.
        url: String,
        /// How many attempts were made.
        attempts: u32,
        /// The transport error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// No byte arrived for the stream idle timeout. Not retried
    /// automatically (the wait was already long); retrying can help.
    #[error("no data from the provider for {} ms: retry, or raise the stream idle timeout", idle.as_millis())]
    IdleTimeout {
        /// The idle timeout that expired.
        idle: Duration,
    },

    /// The connection dropped after content had been streamed, so the
    /// response cannot be retried transparently. Retrying the step can help.
    #[error("the connection dropped mid-stream: retry the step")]
    StreamInterrupted {
        /// The transport error, when there was one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// The provider reported an error inside a successful stream (an SSE
    /// `error` event, `response.failed`). Retryable kinds (overloaded,
    /// server errors) are retried before the first content event; once this
    /// reaches the caller, retrying the step may help for those kinds only.
    #[error("the provider reported an error mid-stream ({kind}): {message}")]
    StreamFailed {
        /// The provider's error type or code.
        kind: String,
        /// The provider's message.
        message: String,
    },

    /// The response did not follow the API's format: bad JSON, a missing
    /// field, a stream that ended before completion. Retrying rarely helps;
    /// check that `baseUrl` points at the right kind of API.
    #[error(
        "malformed response from the provider ({detail}): check that the endpoint speaks this API; body: {body}"
    )]
    Malformed {
        /// What was wrong.
        detail: String,
        /// The start of the offending text.
        body: String,
    },

    /// The caller cancelled the request. Not an error of the provider.
    #[error("the request was cancelled")]
    Cancelled,

    /// The request could not be built (an invalid header value or base
    /// URL). Retrying does not help; fix the configuration.
    #[error("invalid provider configuration: {detail}")]
    InvalidConfig {
        /// What was wrong.
        detail: String,
    },
}

fn stated_suffix(stated: Option<u64>) -> String {
    match stated {
        Some(n) => format!(", stated prompt {n} tokens"),
        None => String::new(),
    }
}

fn retry_after_suffix(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(wait) => format!(", retry-after {} ms", wait.as_millis()),
        None => String::new(),
    }
}

impl ProviderError {
    /// Returns whether this is a context overflow (SPEC §6.3).
    pub fn is_overflow(&self) -> bool {
        matches!(self, ProviderError::ContextOverflow { .. })
    }

    /// Returns the prompt size stated by an overflow error.
    pub fn stated_prompt(&self) -> Option<u64> {
        match self {
            ProviderError::ContextOverflow { stated_prompt, .. } => *stated_prompt,
            _ => None,
        }
    }

    /// Returns the context window stated by an overflow error.
    pub fn stated_limit(&self) -> Option<u64> {
        match self {
            ProviderError::ContextOverflow { stated_limit, .. } => *stated_limit,
            _ => None,
        }
    }

    /// Returns whether sending the same request again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::RateLimited { .. }
            | ProviderError::Server { .. }
            | ProviderError::Connect { .. }
            | ProviderError::IdleTimeout { .. }
            | ProviderError::StreamInterrupted { .. } => true,
            ProviderError::StreamFailed { kind, .. } => is_transient_stream_kind(kind),
            _ => false,
        }
    }

    /// Returns the HTTP status behind this error, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Unauthorized { status, .. }
            | ProviderError::ContextOverflow { status, .. }
            | ProviderError::Server { status, .. }
            | ProviderError::Rejected { status, .. } => Some(*status),
            ProviderError::NotFound { .. } => Some(404),
            ProviderError::RateLimited { .. } => Some(429),
            _ => None,
        }
    }

    /// Builds a [`ProviderError::Malformed`] from a detail and the text.
    pub(crate) fn malformed(detail: impl Into<String>, text: &str) -> Self {
        ProviderError::Malformed {
            detail: detail.into(),
            body: excerpt(text),
        }
    }
}

/// Returns whether a mid-stream error kind is transient (worth a retry
/// before any content was streamed).
pub(crate) fn is_transient_stream_kind(kind: &str) -> bool {
    let kind = kind.to_ascii_lowercase();
    [
        "overloaded",
        "api_error",
        "server_error",
        "internal",
        "rate_limit",
        "timeout",
        "unavailable",
    ]
    .iter()
    .any(|marker| kind.contains(marker))
}

/// Returns the first [`BODY_EXCERPT_CHARS`] characters of a body, on a
/// character boundary, with `…` when cut.
pub fn excerpt(body: &str) -> String {
    let trimmed = body.trim();
    match trimmed.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_cuts_on_char_boundary() {
        let long = "é".repeat(BODY_EXCERPT_CHARS + 10);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), BODY_EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt("  short \n"), "short");
    }

    #[test]
    fn messages_are_lowercase_and_actionable() {
        let err = ProviderError::ContextOverflow {
            status: 400,
            stated_prompt: Some(213_462),
            stated_limit: None,
            body: "x".into(),
        };
        assert_eq!(
            err.to_string(),
            "context overflow (http 400, stated prompt 213462 tokens): compact the conversation before retrying; body: x"
        );
        assert!(err.is_overflow());
        assert!(!err.is_retryable());
        let limited = ProviderError::RateLimited {
            attempts: 5,
            retry_after: Some(Duration::from_millis(1500)),
            body: String::new(),
        };
        assert!(
            limited
                .to_string()
                .starts_with("rate limited (http 429) after 5 attempt(s), retry-after 1500 ms")
        );
        assert!(limited.is_retryable());
        let failed = ProviderError::StreamFailed {
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
        };
        assert!(failed.is_retryable());
        let refused = ProviderError::StreamFailed {
            kind: "invalid_request_error".into(),
            message: "no".into(),
        };
        assert!(!refused.is_retryable());
    }
}
