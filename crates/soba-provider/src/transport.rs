//! The HTTP clients (feature `http`): one transport with timeouts, retries
//! and cancellation (SPEC §10.1), and the three clients built on it,
//! [`AnthropicClient`], [`OpenAiChatClient`] and [`OpenAiResponsesClient`].
//!
//! Policy: a request is retried on 429, 408, 5xx, connection failures and
//! connections dropped before the first content event, up to
//! `max_retries` times with exponential backoff (1, 2, 4, 8 s ± 20 % by
//! default) or the server's `retry-after` / `retry-after-ms`. A
//! `retry-after` beyond `max_retry_after` (60 s) ends the retries at once,
//! since retrying sooner than asked would only fail again. An idle stream
//! (no progress for `idle_timeout`: no response headers, or no text,
//! reasoning, tool-call or usage event; keep-alive comments, pings and
//! empty `data:` lines do not count) fails with
//! [`ProviderError::IdleTimeout`] without a retry: the caller already
//! waited that long. A reply still streaming after `stream_timeout` fails
//! with [`ProviderError::StreamTooLong`], so a server dripping progress
//! cannot hold a turn forever. An empty stream
//! ([`ProviderError::EmptyResponse`]) or an empty 200 body
//! ([`ProviderError::EmptyBody`]) is retried once, announced like any
//! retry; a second one is the error. Cancellation wins over everything,
//! including the backoff sleep, and drops the connection.
//!
//! URLs: a path is joined to the `baseUrl`'s path with URL APIs, its query
//! kept ([`endpoint_url`]); a `baseUrl` with user info, a fragment or a
//! scheme other than http(s) is a configuration error. A URL is shown and
//! logged with its query values redacted. Every error leaves the transport
//! through [`ProviderError::scrubbed`]: the API key (the value of each
//! sensitive header) and long query values are replaced, then the capsule
//! redactor runs, so a key echoed back by a server reaches neither the
//! terminal nor `soba.log`.
//!
//! No redirect is followed, with or without a key: every request carries
//! credentials (`x-api-key`, `authorization`), and reqwest strips only
//! `authorization` when a redirect changes origin. A 3xx answer is
//! [`ProviderError::Redirected`], naming both origins, never retried (see
//! `no_redirects`).

use std::error::Error as StdError;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use soba_core::Message;

use crate::anthropic::{self, ANTHROPIC_VERSION, AnthropicDecoder};
use crate::client::{Api, BoxFuture, Cancellation, Endpoint, ModelClient};
use crate::error::{ProviderError, Secrets, excerpt};
use crate::openai_chat::{self, ChatDecoder};
use crate::openai_responses::{self, CompactOutcome, ResponsesDecoder};
use crate::overflow::classify_overflow;
use crate::request::{ChatRequest, ChatResponse, NativeCompaction, StreamEvent};
use crate::sse::{SseEvent, SseParser};
use crate::wire::StreamDecoder;

/// The most bytes of an error body that are read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Retry settings (SPEC §10.1).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (4).
    pub max_retries: u32,
    /// The first backoff delay; later ones double (1 s).
    pub base_delay: Duration,
    /// The relative jitter applied to backoff delays (0.2 = ±20 %).
    pub jitter: f64,
    /// The longest `retry-after` honoured (60 s).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_secs(1),
            jitter: 0.2,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Returns the backoff before retry number `retry` (0-based) for a
    /// jitter draw `unit` in [0, 1): `base × 2^retry × (1 ± jitter)`.
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let factor = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        self.base_delay
            .mul_f64(f64::from(2_u32.saturating_pow(retry.min(30))) * factor.max(0.0))
    }
}

/// Timeouts and retries of one client (SPEC §10.1); every value is
/// configurable so tests can use milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// TCP/TLS connect timeout (10 s).
    pub connect_timeout: Duration,
    /// The longest wait for the response headers or the next progress
    /// event (300 s: reasoning models can think for minutes before the
    /// first byte); `http.idleTimeoutMs`.
    pub idle_timeout: Duration,
    /// The longest one reply may stream, progress or not (1 h);
    /// `http.streamTimeoutMs`.
    pub stream_timeout: Duration,
    /// Retry settings.
    pub retry: RetryPolicy,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            stream_timeout: Duration::from_secs(3600),
            retry: RetryPolicy::default(),
        }
    }
}

/// Returns a pseudo-random number in [0, 1) for jitter, from std's
/// randomly keyed hasher (no RNG dependency needed for this).
fn jitter_unit() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() >> 11) as f64 / (1_u64 << 53) as f64
}

/// Parses `retry-after-ms` (milliseconds) or `retry-after` (seconds,
/// fractions allowed); HTTP dates are not honoured.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    number("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| number("retry-after").map(Duration::from_secs_f64))
}

/// A failure that can be retried, kept raw until the retries are spent.
enum Transient {
    Status {
        status: u16,
        body: String,
    },
    Connect(Box<dyn StdError + Send + Sync>),
    Dropped(Option<Box<dyn StdError + Send + Sync>>),
    Stream(ProviderError),
    /// The stream carried nothing ([`ProviderError::EmptyResponse`]):
    /// retried once only, whatever `max_retries` says.
    Empty,
    /// The 200 body was empty ([`ProviderError::EmptyBody`]): retried once
    /// only, like [`Transient::Empty`].
    EmptyBody,
}

/// How one attempt failed.
enum AttemptError {
    Fatal(ProviderError),
    Transient {
        failure: Transient,
        retry_after: Option<Duration>,
    },
}

impl From<ProviderError> for AttemptError {
    fn from(error: ProviderError) -> Self {
        AttemptError::Fatal(error)
    }
}

impl Transient {
    /// Says in one line why the attempt failed, for a retry notice.
    fn reason(&self) -> String {
        match self {
            Transient::Status { status: 429, .. } => "rate limited (HTTP 429)".to_owned(),
            Transient::Status { status, .. } => format!("HTTP {status}"),
            Transient::Connect(source) => root_cause(source.as_ref()),
            Transient::Dropped(_) => "the connection dropped before the response".to_owned(),
            Transient::Stream(error) => error.to_string(),
            Transient::Empty => {
                "the provider sent an empty response (no text, tool call, reasoning or stop reason)"
                    .to_owned()
            }
            Transient::EmptyBody => "the endpoint returned an empty body (http 200)".to_owned(),
        }
    }

    /// Returns whether this failure gets one retry only.
    fn is_empty(&self) -> bool {
        matches!(self, Transient::Empty | Transient::EmptyBody)
    }

    fn into_error(self, url: &str, attempts: u32, retry_after: Option<Duration>) -> ProviderError {
        match self {
            Transient::Status { status: 429, body } => ProviderError::RateLimited {
                attempts,
                retry_after,
                body,
            },
            Transient::Status { status, body } => ProviderError::Server {
                status,
                attempts,
                body,
            },
            Transient::Connect(source) => ProviderError::Connect {
                url: url.to_owned(),
                attempts,
                source,
            },
            Transient::Dropped(source) => ProviderError::StreamInterrupted { source },
            Transient::Stream(error) => error,
            Transient::Empty => ProviderError::EmptyResponse { attempts },
            Transient::EmptyBody => ProviderError::EmptyBody {
                url: url.to_owned(),
                attempts,
            },
        }
    }
}

/// Returns the innermost cause of `error`, lowercased at the start and
/// without an `(os error N)` suffix: `connection refused`.
fn root_cause(error: &(dyn StdError + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    let text = cause.to_string();
    let text = match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_owned(),
        _ => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Counts attempts and sleeps between them.
struct Retrier<'a> {
    policy: &'a RetryPolicy,
    /// The URL as shown (query values redacted).
    url: &'a str,
    secrets: &'a Secrets,
    attempts: u32,
    /// Whether an empty response was already retried (once is the limit).
    empty_retried: bool,
}

impl Retrier<'_> {
    /// Decides on a failed attempt: sleeps and returns `Ok` to retry, or
    /// returns the final error.
    async fn backoff(
        &mut self,
        error: AttemptError,
        cancel: &dyn Cancellation,
        on_retry: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<(), ProviderError> {
        let (failure, retry_after) = match error {
            AttemptError::Fatal(error) => return Err(error),
            AttemptError::Transient {
                failure,
                retry_after,
            } => (failure, retry_after),
        };
        let too_long = retry_after.is_some_and(|wait| wait > self.policy.max_retry_after);
        let empty_again = failure.is_empty() && self.empty_retried;
        if self.attempts > self.policy.max_retries || too_long || empty_again {
            return Err(failure.into_error(self.url, self.attempts, retry_after));
        }
        self.empty_retried |= failure.is_empty();
        let delay =
            retry_after.unwrap_or_else(|| self.policy.backoff(self.attempts - 1, jitter_unit()));
        tracing::debug!(
            url = self.url,
            attempt = self.attempts,
            delay_ms = delay.as_millis() as u64,
            "retrying provider request"
        );
        // An empty response gets one retry, so that one is the last.
        let max_attempts = if failure.is_empty() {
            self.attempts + 1
        } else {
            self.policy.max_retries + 1
        };
        on_retry(StreamEvent::Retrying {
            attempt: self.attempts + 1,
            max_attempts,
            delay,
            reason: self.secrets.scrub(&failure.reason()),
        });
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(ProviderError::Cancelled),
            () = tokio::time::sleep(delay) => Ok(()),
        }
    }
}

/// Returns the redirect policy of every HTTP client in this crate: follow
/// none. A redirect then reaches the caller as a 3xx response, which
/// [`redirect_error`] turns into an error naming where it pointed.
pub(crate) fn no_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::none()
}

/// Returns a URL's origin as `scheme://host:port`, the port always written
/// (the default one too) so two origins differ visibly.
fn origin_of(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port_or_known_default() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// The longest `location` header quoted in an error, in characters.
const MAX_QUOTED_LOCATION: usize = 200;

/// Returns the URL a client posts to: `path` (relative, e.g.
/// `chat/completions`) joined to the end of the `baseUrl`'s path, the
/// query kept (`https://host/v1?key=K` gives
/// `https://host/v1/chat/completions?key=K`). A `baseUrl` that is not an
/// absolute http(s) URL, or carries user info or a fragment, is
/// [`ProviderError::InvalidConfig`].
pub fn endpoint_url(endpoint: &Endpoint, path: &str) -> Result<reqwest::Url, ProviderError> {
    let base = endpoint.base_url.trim();
    let invalid = |why: String| ProviderError::InvalidConfig {
        detail: format!("the provider's baseUrl {why}"),
    };
    let mut url = reqwest::Url::parse(base).map_err(|err| {
        invalid(format!(
            "{:?} is not an absolute URL ({err}): write it as https://host/path",
            Secrets::none().scrub(&redacted_url_text(base))
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "uses the scheme {:?}: only http and https are supported",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "carries a user name or password (user:password@host); remove it: the key is read from the variable the provider's apiKeyEnv names".to_owned(),
        ));
    }
    if url.fragment().is_some() {
        return Err(invalid(format!(
            "{} has a fragment (#…), which is never sent to a server; remove it",
            shown_url(&url)
        )));
    }
    {
        let mut segments = url.path_segments_mut().map_err(|()| {
            invalid("cannot have a path appended: write it as https://host/path".to_owned())
        })?;
        segments.pop_if_empty();
        segments.extend(path.split('/').filter(|segment| !segment.is_empty()));
    }
    Ok(url)
}

/// Returns a URL as it may be shown or logged: without user name, password
/// or fragment, every query value replaced by `[REDACTED]` (the names
/// kept, so `?key=[REDACTED]` still says which parameter was sent).
pub fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_fragment(None);
    let query = shown.query().map(str::to_owned);
    shown.set_query(None);
    let mut text = shown.to_string();
    if let Some(query) = query {
        text.push('?');
        text.push_str(&redacted_query(&query));
    }
    text
}

/// Returns a query string with every value replaced by `[REDACTED]`.
fn redacted_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) => format!("{name}=[REDACTED]"),
            None => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Returns URL text that did not parse, its query values and anything
/// before an `@` replaced, for an error message.
fn redacted_url_text(text: &str) -> String {
    let text = match text.rsplit_once('@') {
        Some((_, host)) => format!("[REDACTED]@{host}"),
        None => text.to_owned(),
    };
    match text.split_once('?') {
        Some((base, query)) => format!("{base}?{}", redacted_query(query)),
        None => text,
    }
}

/// Returns the secrets a request carries: the value of every sensitive
/// header (the API key, also without its `Bearer ` scheme) and the long
/// query values of its URL.
fn secrets_of(url: Option<&reqwest::Url>, headers: &HeaderMap) -> Secrets {
    let mut secrets = Secrets::none();
    for value in headers.values().filter(|value| value.is_sensitive()) {
        if let Ok(text) = value.to_str() {
            secrets = secrets.with_key(Some(text));
            if let Some(token) = text.strip_prefix("Bearer ") {
                secrets = secrets.with_key(Some(token));
            }
        }
    }
    for (_, value) in url.into_iter().flat_map(reqwest::Url::query_pairs) {
        secrets = secrets.with_query_value(&value);
    }
    if let Some(query) = url.and_then(reqwest::Url::query) {
        for pair in query.split('&') {
            if let Some((_, raw)) = pair.split_once('=') {
                secrets = secrets.with_query_value(raw);
            }
        }
    }
    secrets
}

/// Returns a URL as it may be shown: without user name, password, query or
/// fragment.
fn bare_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// Builds the error for a redirect answer (`status` 3xx) to a request for
/// `url`: where its `location` points (resolved against `url`), or that it
/// named none.
pub(crate) fn redirect_error(status: u16, url: &str, headers: &HeaderMap) -> ProviderError {
    let requested = reqwest::Url::parse(url).ok();
    let header = headers.get(reqwest::header::LOCATION);
    let received = header.map(|value| {
        let text = String::from_utf8_lossy(value.as_bytes());
        let quoted: String = format!("{text:?}")
            .chars()
            .take(MAX_QUOTED_LOCATION)
            .collect();
        let quoted = if text.chars().count() + 2 > MAX_QUOTED_LOCATION {
            format!("{quoted}…")
        } else {
            quoted
        };
        quoted.into_boxed_str()
    });
    let location = header
        .and_then(|value| value.to_str().ok())
        .filter(|location| !location.trim().is_empty())
        .and_then(|location| match &requested {
            Some(base) => base.join(location.trim()).ok(),
            None => reqwest::Url::parse(location.trim()).ok(),
        })
        .filter(|target| matches!(target.scheme(), "http" | "https") && target.has_host())
        .map(|target| (bare_url(&target), origin_of(&target)));
    ProviderError::Redirected {
        status,
        url: requested.as_ref().map_or_else(|| url.to_owned(), bare_url),
        origin: requested.as_ref().map_or_else(|| url.to_owned(), origin_of),
        location,
        received,
    }
}

/// The shared HTTP machinery of the three clients.
#[derive(Debug, Clone)]
pub struct Transport {
    client: reqwest::Client,
    config: HttpConfig,
}

impl Transport {
    /// Builds a transport (one connection pool) with the given settings.
    pub fn new(config: HttpConfig) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .redirect(no_redirects())
            .build()
            .map_err(|err| ProviderError::InvalidConfig {
                detail: format!("cannot build the HTTP client: {err}"),
            })?;
        Ok(Transport { client, config })
    }

    /// Returns the settings.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// Posts `body` and decodes the event stream, with retries before the
    /// first content event, idle timeout and cancellation. Emits
    /// [`StreamEvent::Done`] last.
    pub async fn stream(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
        make_decoder: &(dyn Fn() -> Box<dyn StreamDecoder> + Sync),
        cancel: &dyn Cancellation,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, ProviderError> {
        let parsed = reqwest::Url::parse(url).ok();
        let secrets = secrets_of(parsed.as_ref(), &headers);
        let shown = parsed
            .as_ref()
            .map_or_else(|| redacted_url_text(url), shown_url);
        self.stream_inner(
            url,
            &shown,
            &secrets,
            headers,
            body,
            make_decoder,
            cancel,
            on_event,
        )
        .await
        .map_err(|error| error.scrubbed(&secrets))
    }

    #[allow(clippy::too_many_arguments)]
    async fn stream_inner(
        &self,
        url: &str,
        shown: &str,
        secrets: &Secrets,
        headers: HeaderMap,
        body: &Value,
        make_decoder: &(dyn Fn() -> Box<dyn StreamDecoder> + Sync),
        cancel: &dyn Cancellation,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, ProviderError> {
        let bytes = serde_json::to_vec(body).map_err(|err| ProviderError::InvalidConfig {
            detail: format!("cannot encode the request: {err}"),
        })?;
        let mut retrier = Retrier {
            policy: &self.config.retry,
            url: shown,
            secrets,
            attempts: 0,
            empty_retried: false,
        };
        loop {
            if cancel.is_cancelled() {
                return Err(ProviderError::Cancelled);
            }
            retrier.attempts += 1;
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                outcome = self.stream_once(url, shown, &headers, &bytes, make_decoder(), on_event) => outcome,
            };
            match outcome {
                Ok(response) => {
                    on_event(StreamEvent::Done {
                        stop_reason: response.stop_reason.clone(),
                    });
                    return Ok(response);
                }
                Err(error) => retrier.backoff(error, cancel, on_event).await?,
            }
        }
    }

    /// Posts `body` and returns the whole response body, with retries,
    /// idle timeout and cancellation (for non-streaming calls).
    pub async fn post_json(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
        cancel: &dyn Cancellation,
    ) -> Result<String, ProviderError> {
        let parsed = reqwest::Url::parse(url).ok();
        let secrets = secrets_of(parsed.as_ref(), &headers);
        let shown = parsed
            .as_ref()
            .map_or_else(|| redacted_url_text(url), shown_url);
        let bytes = serde_json::to_vec(body).map_err(|err| ProviderError::InvalidConfig {
            detail: format!("cannot encode the request: {err}"),
        })?;
        let mut retrier = Retrier {
            policy: &self.config.retry,
            url: &shown,
            secrets: &secrets,
            attempts: 0,
            empty_retried: false,
        };
        let outcome = loop {
            retrier.attempts += 1;
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => break Err(ProviderError::Cancelled),
                outcome = self.post_once(url, &shown, &headers, &bytes) => outcome,
            };
            match outcome {
                Ok(text) => break Ok(text),
                Err(error) => {
                    if let Err(error) = retrier.backoff(error, cancel, &mut |_| {}).await {
                        break Err(error);
                    }
                }
            }
        };
        outcome.map_err(|error| error.scrubbed(&secrets))
    }

    async fn send(
        &self,
        url: &str,
        shown: &str,
        headers: &HeaderMap,
        bytes: &[u8],
    ) -> Result<reqwest::Response, AttemptError> {
        let request = self
            .client
            .post(url)
            .headers(headers.clone())
            .body(bytes.to_vec());
        let response = match tokio::time::timeout(self.config.idle_timeout, request.send()).await {
            Err(_) => {
                return Err(ProviderError::IdleTimeout {
                    idle: self.config.idle_timeout,
                    url: shown.to_owned(),
                }
                .into());
            }
            Ok(Err(err)) if err.is_builder() => {
                return Err(ProviderError::InvalidConfig {
                    detail: format!("cannot send to {shown}: {}", err.without_url()),
                }
                .into());
            }
            Ok(Err(err)) => {
                return Err(AttemptError::Transient {
                    failure: Transient::Connect(Box::new(err.without_url())),
                    retry_after: None,
                });
            }
            Ok(Ok(response)) => response,
        };
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.status_error(url, shown, response).await)
    }

    async fn status_error(
        &self,
        url: &str,
        shown: &str,
        mut response: reqwest::Response,
    ) -> AttemptError {
        let status = response.status().as_u16();
        if response.status().is_redirection() {
            return redirect_error(status, url, response.headers()).into();
        }
        let retry_after = parse_retry_after(response.headers());
        let mut raw = Vec::new();
        while raw.len() < MAX_ERROR_BODY {
            match tokio::time::timeout(self.config.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => raw.extend_from_slice(&chunk),
                _ => break,
            }
        }
        let body = String::from_utf8_lossy(&raw).into_owned();
        if let Some(overflow) = classify_overflow(status, &body) {
            return ProviderError::ContextOverflow {
                status,
                stated_prompt: overflow.stated_prompt,
                stated_limit: overflow.stated_limit,
                body: excerpt(&body),
            }
            .into();
        }
        match status {
            401 | 403 => ProviderError::Unauthorized {
                status,
                body: excerpt(&body),
            }
            .into(),
            404 => ProviderError::NotFound {
                url: shown.to_owned(),
                body: excerpt(&body),
            }
            .into(),
            408 | 429 | 500..=599 => AttemptError::Transient {
                failure: Transient::Status {
                    status,
                    body: excerpt(&body),
                },
                retry_after,
            },
            _ => ProviderError::Rejected {
                status,
                body: excerpt(&body),
            }
            .into(),
        }
    }

    async fn post_once(
        &self,
        url: &str,
        shown: &str,
        headers: &HeaderMap,
        bytes: &[u8],
    ) -> Result<String, AttemptError> {
        let mut response = self.send(url, shown, headers, bytes).await?;
        let mut raw = Vec::new();
        loop {
            match tokio::time::timeout(self.config.idle_timeout, response.chunk()).await {
                Err(_) => {
                    return Err(ProviderError::IdleTimeout {
                        idle: self.config.idle_timeout,
                        url: shown.to_owned(),
                    }
                    .into());
                }
                Ok(Ok(Some(chunk))) => raw.extend_from_slice(&chunk),
                Ok(Ok(None)) => break,
                Ok(Err(err)) => {
                    return Err(AttemptError::Transient {
                        failure: Transient::Dropped(Some(Box::new(err.without_url()))),
                        retry_after: None,
                    });
                }
            }
        }
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }

    async fn stream_once(
        &self,
        url: &str,
        shown: &str,
        headers: &HeaderMap,
        bytes: &[u8],
        mut decoder: Box<dyn StreamDecoder>,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, AttemptError> {
        let started = tokio::time::Instant::now();
        let response = self.send(url, shown, headers, bytes).await?;
        let mut stream = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut produced: Vec<StreamEvent> = Vec::new();
        let mut content_seen = false;
        let mut n_events = 0_usize;
        let mut head = Vec::new();
        // Only a decoded event is progress: keep-alive comments, pings and
        // empty `data:` lines reset nothing, so a server sending only those
        // still times out. The total bound holds whatever arrives.
        let total_deadline = started + self.config.stream_timeout;
        let mut progress_deadline = tokio::time::Instant::now() + self.config.idle_timeout;
        loop {
            let deadline = progress_deadline.min(total_deadline);
            let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) if total_deadline <= progress_deadline => {
                    tracing::debug!(url = shown, "provider stream past its total bound");
                    return Err(ProviderError::StreamTooLong {
                        limit: self.config.stream_timeout,
                        url: shown.to_owned(),
                    }
                    .into());
                }
                Err(_) => {
                    tracing::debug!(url = shown, "provider stream made no progress");
                    return Err(ProviderError::IdleTimeout {
                        idle: self.config.idle_timeout,
                        url: shown.to_owned(),
                    }
                    .into());
                }
                Ok(Some(Ok(chunk))) => Some(chunk),
                Ok(Some(Err(err))) => {
                    let source: Box<dyn StdError + Send + Sync> = Box::new(err.without_url());
                    if content_seen {
                        return Err(ProviderError::StreamInterrupted {
                            source: Some(source),
                        }
                        .into());
                    }
                    return Err(AttemptError::Transient {
                        failure: Transient::Dropped(Some(source)),
                        retry_after: None,
                    });
                }
                Ok(None) => None,
            };
            match &chunk {
                Some(chunk) => {
                    if head.len() < 600 {
                        head.extend_from_slice(&chunk[..chunk.len().min(600 - head.len())]);
                    }
                    parser.feed(chunk, &mut events)?;
                }
                None => parser.finish(&mut events)?,
            }
            for event in events.drain(..) {
                n_events += 1;
                if let Err(error) = decoder.feed(&event, &mut produced) {
                    if !content_seen && error.is_retryable() {
                        return Err(AttemptError::Transient {
                            failure: Transient::Stream(error),
                            retry_after: None,
                        });
                    }
                    return Err(error.into());
                }
                if !produced.is_empty() {
                    progress_deadline = tokio::time::Instant::now() + self.config.idle_timeout;
                }
                for item in produced.drain(..) {
                    content_seen |= item.is_content();
                    on_event(item);
                }
                if decoder.is_done() {
                    // Dropping the stream closes the connection; nothing
                    // after the terminal event matters.
                    return finished(decoder.finish());
                }
            }
            if chunk.is_none() {
                break;
            }
        }
        if n_events == 0 && head.is_empty() {
            tracing::debug!(url = shown, "the provider returned an empty body");
            return Err(AttemptError::Transient {
                failure: Transient::EmptyBody,
                retry_after: None,
            });
        }
        if n_events == 0 && only_comments(&head) {
            // An event stream of keep-alive comments only, closed without
            // an event: an empty response, retried once like one (an
            // attack finding: it was called "not an event stream").
            tracing::debug!(url = shown, "the stream held comments only");
            return finished(Err(ProviderError::EmptyResponse { attempts: 1 }));
        }
        if n_events == 0 {
            return Err(ProviderError::malformed(
                "the response is not an event stream",
                &String::from_utf8_lossy(&head),
            )
            .into());
        }
        match decoder.finish() {
            Ok(response) => Ok(response),
            Err(error @ ProviderError::EmptyResponse { .. }) => finished(Err(error)),
            Err(_) if content_seen => Err(ProviderError::StreamInterrupted { source: None }.into()),
            Err(_) => Err(AttemptError::Transient {
                failure: Transient::Dropped(None),
                retry_after: None,
            }),
        }
    }
}

/// Returns whether the start of a body is only SSE comment lines (`:`
/// keep-alives) and blank lines.
fn only_comments(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    text.split('\n')
        .map(|line| line.trim_end_matches('\r'))
        .all(|line| line.is_empty() || line.starts_with(':'))
}

/// Returns a decoder's final answer as an attempt's outcome: an empty
/// response is transient (retried once), any other error fatal.
// A large error is fine here: it is built at most once per attempt, and
// boxing it would only add an allocation to every caller's match.
#[allow(clippy::result_large_err)]
fn finished(outcome: Result<ChatResponse, ProviderError>) -> Result<ChatResponse, AttemptError> {
    match outcome {
        Ok(response) => Ok(response),
        Err(ProviderError::EmptyResponse { .. }) => {
            tracing::debug!("the provider sent an empty response");
            Err(AttemptError::Transient {
                failure: Transient::Empty,
                retry_after: None,
            })
        }
        Err(error) => Err(error.into()),
    }
}

fn header(
    headers: &mut HeaderMap,
    name: &'static str,
    value: &str,
    secret: bool,
) -> Result<(), ProviderError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ProviderError::InvalidConfig {
        // Never echo a key back, even in an error.
        detail: if secret {
            format!("the API key contains characters not allowed in the {name} header")
        } else {
            format!("invalid {name} header value {value:?}")
        },
    })?;
    value.set_sensitive(secret);
    headers.insert(HeaderName::from_static(name), value);
    Ok(())
}

fn json_headers() -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    header(&mut headers, "content-type", "application/json", false)?;
    header(&mut headers, "accept", "text/event-stream", false)?;
    Ok(headers)
}

fn openai_headers(endpoint: &Endpoint) -> Result<HeaderMap, ProviderError> {
    let mut headers = json_headers()?;
    if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
        header(
            &mut headers,
            "authorization",
            &format!("Bearer {key}"),
            true,
        )?;
    }
    if let Some(organization) = &endpoint.organization {
        header(&mut headers, "openai-organization", organization, false)?;
    }
    if let Some(project) = &endpoint.project {
        header(&mut headers, "openai-project", project, false)?;
    }
    Ok(headers)
}

/// The Anthropic Messages client (`POST {baseUrl}/v1/messages`).
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    transport: Transport,
    endpoint: Endpoint,
}

impl AnthropicClient {
    /// Builds a client.
    pub fn new(endpoint: Endpoint, config: HttpConfig) -> Result<Self, ProviderError> {
        Ok(AnthropicClient {
            transport: Transport::new(config)?,
            endpoint,
        })
    }

    fn headers(&self) -> Result<HeaderMap, ProviderError> {
        let mut headers = json_headers()?;
        if let Some(key) = self.endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
            header(&mut headers, "x-api-key", key, true)?;
        }
        header(&mut headers, "anthropic-version", ANTHROPIC_VERSION, false)?;
        Ok(headers)
    }
}

impl ModelClient for AnthropicClient {
    fn api(&self) -> Api {
        Api::AnthropicMessages
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let headers = self.headers()?;
            let body = anthropic::request_body(request);
            let model = request.model.as_str();
            let make = move || Box::new(AnthropicDecoder::new(model)) as Box<dyn StreamDecoder>;
            self.transport
                .stream(
                    endpoint_url(&self.endpoint, "v1/messages")?.as_str(),
                    headers,
                    &body,
                    &make,
                    cancel,
                    on_event,
                )
                .await
        })
    }
}

/// The OpenAI Chat Completions client (`POST {baseUrl}/chat/completions`),
/// for OpenAI and every compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiChatClient {
    transport: Transport,
    endpoint: Endpoint,
}

impl OpenAiChatClient {
    /// Builds a client.
    pub fn new(endpoint: Endpoint, config: HttpConfig) -> Result<Self, ProviderError> {
        Ok(OpenAiChatClient {
            transport: Transport::new(config)?,
            endpoint,
        })
    }
}

impl ModelClient for OpenAiChatClient {
    fn api(&self) -> Api {
        Api::OpenAiChat
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let headers = openai_headers(&self.endpoint)?;
            let body = openai_chat::request_body(request);
            let model = request.model.as_str();
            let make = move || Box::new(ChatDecoder::new(model)) as Box<dyn StreamDecoder>;
            let url = endpoint_url(&self.endpoint, "chat/completions")?;
            self.transport
                .stream(url.as_str(), headers, &body, &make, cancel, on_event)
                .await
        })
    }
}

/// The OpenAI Responses client (`POST {baseUrl}/responses`), with native
/// compaction (`POST {baseUrl}/responses/compact`).
#[derive(Debug, Clone)]
pub struct OpenAiResponsesClient {
    transport: Transport,
    endpoint: Endpoint,
}

impl OpenAiResponsesClient {
    /// Builds a client.
    pub fn new(endpoint: Endpoint, config: HttpConfig) -> Result<Self, ProviderError> {
        Ok(OpenAiResponsesClient {
            transport: Transport::new(config)?,
            endpoint,
        })
    }

    /// Returns the endpoint (its fingerprint identifies native items).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Compacts a span natively (SPEC §10.3) and returns only the opaque
    /// `compaction` item; the user messages the API returns are discarded.
    pub async fn compact(
        &self,
        model: &str,
        instructions: &str,
        span: &[Message],
        previous: Option<&NativeCompaction>,
        cancel: &dyn Cancellation,
    ) -> Result<CompactOutcome, ProviderError> {
        let mut headers = openai_headers(&self.endpoint)?;
        header(&mut headers, "accept", "application/json", false)?;
        let body = openai_responses::compact_body(model, instructions, span, previous);
        let text = self
            .transport
            .post_json(
                endpoint_url(&self.endpoint, "responses/compact")?.as_str(),
                headers,
                &body,
                cancel,
            )
            .await?;
        openai_responses::parse_compact_response(&text)
    }
}

impl ModelClient for OpenAiResponsesClient {
    fn api(&self) -> Api {
        Api::OpenAiResponses
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a dyn Cancellation,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let headers = openai_headers(&self.endpoint)?;
            let body = openai_responses::request_body(request);
            let model = request.model.as_str();
            let make = move || Box::new(ResponsesDecoder::new(model)) as Box<dyn StreamDecoder>;
            self.transport
                .stream(
                    endpoint_url(&self.endpoint, "responses")?.as_str(),
                    headers,
                    &body,
                    &make,
                    cancel,
                    on_event,
                )
                .await
        })
    }
}

/// Builds the client for a provider's `api`.
pub fn client_for(
    api: Api,
    endpoint: Endpoint,
    config: HttpConfig,
) -> Result<Box<dyn ModelClient>, ProviderError> {
    // A baseUrl that cannot take a path is refused now, not at the first
    // request.
    endpoint_url(&endpoint, "")?;
    Ok(match api {
        Api::AnthropicMessages => Box::new(AnthropicClient::new(endpoint, config)?),
        Api::OpenAiChat => Box::new(OpenAiChatClient::new(endpoint, config)?),
        Api::OpenAiResponses => Box::new(OpenAiResponsesClient::new(endpoint, config)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_bounded_jitter() {
        let policy = RetryPolicy::default();
        let seconds: Vec<f64> = (0..4)
            .map(|retry| policy.backoff(retry, 0.5).as_secs_f64())
            .collect();
        assert_eq!(seconds, [1.0, 2.0, 4.0, 8.0]);
        assert!((policy.backoff(3, 0.0).as_secs_f64() - 6.4).abs() < 1e-9);
        assert!((policy.backoff(3, 1.0).as_secs_f64() - 9.6).abs() < 1e-9);
        for _ in 0..100 {
            let unit = jitter_unit();
            assert!((0.0..1.0).contains(&unit));
        }
    }

    #[test]
    fn retry_after_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(parse_retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(parse_retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(
            parse_retry_after(&headers),
            Some(Duration::from_millis(150))
        );
        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(parse_retry_after(&dated), None);
    }

    #[test]
    fn keys_never_appear_in_header_errors() {
        let endpoint = Endpoint::new("http://x").with_api_key("sk-bad\nkey");
        let err = openai_headers(&endpoint).unwrap_err();
        assert!(!err.to_string().contains("sk-bad"));
    }
}
