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

    /// No progress arrived for the stream idle timeout: no response
    /// headers, or no text, reasoning, tool call or usage event (keep-alive
    /// comments, pings and empty `data:` lines do not count). Not retried
    /// automatically (the wait was already long); retrying can help.
    #[error("no progress from {url} for {} ms (keep-alives do not count): retry, or raise {IDLE_TIMEOUT_KEY}", idle.as_millis())]
    IdleTimeout {
        /// The idle timeout that expired.
        idle: Duration,
        /// The URL that was requested, query values redacted.
        url: String,
    },

    /// One reply streamed for longer than the total bound, progress or
    /// not. Not retried automatically; retrying can help when the server
    /// was only slow.
    #[error("the reply from {url} was still streaming after {} ms: retry, or raise {STREAM_TIMEOUT_KEY}", limit.as_millis())]
    StreamTooLong {
        /// The bound that expired.
        limit: Duration,
        /// The URL that was requested, query values redacted.
        url: String,
    },

    /// The endpoint answered 200 with an empty body: no event at all.
    /// Retried once; an error that reaches the caller got it every time.
    /// Retrying rarely helps: the URL is usually not the API.
    #[error(
        "the endpoint {url} returned an empty body (http 200, no event stream, {attempts} attempt(s)): check that baseUrl points at the API itself (OpenAI-compatible servers usually end in /v1) and that the server supports streaming"
    )]
    EmptyBody {
        /// The URL that was requested, query values redacted.
        url: String,
        /// How many requests got an empty body.
        attempts: u32,
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

    /// The provider answered with a redirect (3xx). No redirect is ever
    /// followed: the request carries the API key, which must never reach
    /// another origin (a same-origin redirect is refused too, so that no
    /// redirect chain can wander off). Not retried; retrying does not help:
    /// put the final URL in the provider's `baseUrl`.
    #[error("{}", redirect_message(*status, url, origin, location.as_ref(), received.as_deref()))]
    Redirected {
        /// The HTTP status (301, 302, 303, 307, 308…).
        status: u16,
        /// The URL that was requested, without credentials.
        url: String,
        /// The requested URL's origin, `scheme://host:port`.
        origin: String,
        /// Where the server redirected to (resolved against `url`, without
        /// credentials, query or fragment) and that URL's origin; `None`
        /// when the server named no valid `location`.
        location: Option<(String, String)>,
        /// The `location` header as received, escaped (`{:?}` of its
        /// lossy text, at most 200 characters); `None` when there was none.
        /// (Boxed to keep the error small.)
        received: Option<Box<str>>,
    },

    /// The provider's stream carried nothing: no text, no tool call, no
    /// reasoning and no stated reason for stopping (each stream decoder's
    /// `finish` says what that means in its dialect; a stream that is only
    /// `data: [DONE]` is one). The HTTP transport retries it once; an error
    /// that reaches the caller got an empty response on every attempt.
    /// Retrying later may help when the server was overloaded; more often
    /// the model name or the endpoint is wrong.
    #[error(
        "the provider sent an empty response ({attempts} attempt(s)): no text, tool call, reasoning or stop reason; check that the model name exists on the server and that baseUrl points at an API of this kind, and look at the server's log (a local server may be out of memory or context)"
    )]
    EmptyResponse {
        /// How many requests got an empty response.
        attempts: u32,
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

/// The configuration key that sets [`ProviderError::IdleTimeout`]'s wait.
pub const IDLE_TIMEOUT_KEY: &str = "http.idleTimeoutMs";

/// The configuration key that sets [`ProviderError::StreamTooLong`]'s bound.
pub const STREAM_TIMEOUT_KEY: &str = "http.streamTimeoutMs";

/// Says why a redirect was refused: a loop, another origin (both named
/// as `scheme://host:port`), the same origin, or a `location` that is
/// missing or no URL (the header named as received, escaped).
fn redirect_message(
    status: u16,
    url: &str,
    origin: &str,
    location: Option<&(String, String)>,
    received: Option<&str>,
) -> String {
    match (location, received) {
        (None, None) => format!(
            "the endpoint {url} sent a redirect (http {status}) with no location header; soba follows no redirect: check the provider's baseUrl"
        ),
        (None, Some(received)) => format!(
            "the endpoint {url} sent a redirect (http {status}) whose location {received} is not a valid URL; soba follows no redirect: check the provider's baseUrl"
        ),
        (Some(location), _) => redirect_to(status, url, origin, location),
    }
}

/// Says why a redirect to a valid location was refused.
fn redirect_to(status: u16, url: &str, origin: &str, location: &(String, String)) -> String {
    match location {
        (location, _) if location == url => format!(
            "redirect loop: {url} redirects (http {status}) to itself: check the provider's baseUrl and the server's configuration"
        ),
        (location, to) if to != origin => format!(
            "the provider at {origin} redirected (http {status}) to another origin, {to} ({location}); soba follows no redirect and never sends the API key to another origin: put the final URL in the provider's baseUrl"
        ),
        (location, _) => format!(
            "the provider at {origin} redirected (http {status}) to {location}; soba follows no redirect, so the API key stays where it was configured: put the final URL in the provider's baseUrl"
        ),
    }
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
            | ProviderError::StreamTooLong { .. }
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

/// The secrets one request carries (the API key as configured, whatever
/// its shape, and long query values of the URL), replaced in everything a
/// provider sent back before it is shown or logged.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Vec<String>);

/// Query values shorter than this are not treated as secrets (`v=1`,
/// `beta=true`): replacing them would garble every message.
const MIN_QUERY_SECRET: usize = 8;

impl Secrets {
    /// Returns no secrets.
    pub fn none() -> Self {
        Secrets(Vec::new())
    }

    /// Adds the API key (any non-empty value).
    pub fn with_key(mut self, key: Option<&str>) -> Self {
        if let Some(key) = key.map(str::trim).filter(|key| !key.is_empty()) {
            self.0.push(key.to_owned());
        }
        self
    }

    /// Adds a query value when it is long enough to be a credential.
    pub fn with_query_value(mut self, value: &str) -> Self {
        if value.chars().count() >= MIN_QUERY_SECRET {
            self.0.push(value.to_owned());
        }
        self
    }

    /// Returns `text` with every secret replaced by `[REDACTED:api_key]`
    /// (longest first, so a key containing another one goes whole), then
    /// passed through the capsule redactor ([`soba_core::redact`]), which
    /// catches keys of known shapes that were not configured here.
    pub fn scrub(&self, text: &str) -> String {
        let mut secrets: Vec<&String> = self.0.iter().collect();
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        let mut out = text.to_owned();
        for secret in secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), &soba_core::redact::marker("api_key"));
            }
        }
        soba_core::redact::redact(&out).text
    }
}

impl ProviderError {
    /// Returns the error with every text that came from the provider or
    /// the URL (bodies, messages, details, kinds, URLs) passed through
    /// [`Secrets::scrub`]: an error is shown on stderr and written to
    /// `soba.log`, and a server may echo the key back.
    pub fn scrubbed(self, secrets: &Secrets) -> Self {
        let s = |text: String| secrets.scrub(&text);
        match self {
            ProviderError::Unauthorized { status, body } => ProviderError::Unauthorized {
                status,
                body: s(body),
            },
            ProviderError::NotFound { url, body } => ProviderError::NotFound {
                url: s(url),
                body: s(body),
            },
            ProviderError::ContextOverflow {
                status,
                stated_prompt,
                stated_limit,
                body,
            } => ProviderError::ContextOverflow {
                status,
                stated_prompt,
                stated_limit,
                body: s(body),
            },
            ProviderError::RateLimited {
                attempts,
                retry_after,
                body,
            } => ProviderError::RateLimited {
                attempts,
                retry_after,
                body: s(body),
            },
            ProviderError::Server {
                status,
                attempts,
                body,
            } => ProviderError::Server {
                status,
                attempts,
                body: s(body),
            },
            ProviderError::Rejected { status, body } => ProviderError::Rejected {
                status,
                body: s(body),
            },
            ProviderError::Connect {
                url,
                attempts,
                source,
            } => ProviderError::Connect {
                url: s(url),
                attempts,
                source: Box::new(ScrubbedSource(
                    secrets.scrub(&source_chain(source.as_ref())),
                )),
            },
            ProviderError::IdleTimeout { idle, url } => {
                ProviderError::IdleTimeout { idle, url: s(url) }
            }
            ProviderError::StreamTooLong { limit, url } => {
                ProviderError::StreamTooLong { limit, url: s(url) }
            }
            ProviderError::EmptyBody { url, attempts } => ProviderError::EmptyBody {
                url: s(url),
                attempts,
            },
            ProviderError::StreamInterrupted { source } => ProviderError::StreamInterrupted {
                source: source.map(|source| {
                    Box::new(ScrubbedSource(
                        secrets.scrub(&source_chain(source.as_ref())),
                    )) as Box<dyn std::error::Error + Send + Sync>
                }),
            },
            ProviderError::StreamFailed { kind, message } => ProviderError::StreamFailed {
                kind: s(kind),
                message: s(message),
            },
            ProviderError::Malformed { detail, body } => ProviderError::Malformed {
                detail: s(detail),
                body: s(body),
            },
            ProviderError::Redirected {
                status,
                url,
                origin,
                location,
                received,
            } => ProviderError::Redirected {
                status,
                url: s(url),
                origin: s(origin),
                location: location.map(|(to, to_origin)| (s(to), s(to_origin))),
                received: received.map(|text| s(text.into()).into_boxed_str()),
            },
            ProviderError::InvalidConfig { detail } => {
                ProviderError::InvalidConfig { detail: s(detail) }
            }
            other @ (ProviderError::EmptyResponse { .. } | ProviderError::Cancelled) => other,
        }
    }
}

/// Returns an error and its causes as one line, `a: b: c`.
fn source_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// A transport error's text after [`Secrets::scrub`], standing in for the
/// original (whose `Display` may hold the URL with its query).
#[derive(Debug)]
struct ScrubbedSource(String);

impl std::fmt::Display for ScrubbedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScrubbedSource {}

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
