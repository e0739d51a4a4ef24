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
//! (no byte for `idle_timeout`, also while waiting for the response
//! headers) fails with [`ProviderError::IdleTimeout`] without a retry: the
//! caller already waited that long. An empty stream
//! ([`ProviderError::EmptyResponse`]) is retried once, announced like any
//! retry; a second one is the error. Cancellation wins over everything,
//! including the backoff sleep, and drops the connection.
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
use crate::error::{ProviderError, excerpt};
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
    /// The longest wait for the response headers or the next byte (300 s:
    /// reasoning models can think for minutes before the first byte).
    pub idle_timeout: Duration,
    /// Retry settings.
    pub retry: RetryPolicy,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
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
        }
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
    url: &'a str,
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
        let empty_again = matches!(failure, Transient::Empty) && self.empty_retried;
        if self.attempts > self.policy.max_retries || too_long || empty_again {
            return Err(failure.into_error(self.url, self.attempts, retry_after));
        }
        self.empty_retried |= matches!(failure, Transient::Empty);
        let delay =
            retry_after.unwrap_or_else(|| self.policy.backoff(self.attempts - 1, jitter_unit()));
        tracing::debug!(
            url = self.url,
            attempt = self.attempts,
            delay_ms = delay.as_millis() as u64,
            "retrying provider request"
        );
        // An empty response gets one retry, so that one is the last.
        let max_attempts = if matches!(failure, Transient::Empty) {
            self.attempts + 1
        } else {
            self.policy.max_retries + 1
        };
        on_retry(StreamEvent::Retrying {
            attempt: self.attempts + 1,
            max_attempts,
            delay,
            reason: failure.reason(),
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
    let location = headers
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|location| match &requested {
            Some(base) => base.join(location.trim()).ok(),
            None => reqwest::Url::parse(location.trim()).ok(),
        })
        .map(|target| (bare_url(&target), origin_of(&target)));
    ProviderError::Redirected {
        status,
        url: requested.as_ref().map_or_else(|| url.to_owned(), bare_url),
        origin: requested.as_ref().map_or_else(|| url.to_owned(), origin_of),
        location,
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
        let bytes = serde_json::to_vec(body).map_err(|err| ProviderError::InvalidConfig {
            detail: format!("cannot encode the request: {err}"),
        })?;
        let mut retrier = Retrier {
            policy: &self.config.retry,
            url,
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
                outcome = self.stream_once(url, &headers, &bytes, make_decoder(), on_event) => outcome,
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
        let bytes = serde_json::to_vec(body).map_err(|err| ProviderError::InvalidConfig {
            detail: format!("cannot encode the request: {err}"),
        })?;
        let mut retrier = Retrier {
            policy: &self.config.retry,
            url,
            attempts: 0,
            empty_retried: false,
        };
        loop {
            retrier.attempts += 1;
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                outcome = self.post_once(url, &headers, &bytes) => outcome,
            };
            match outcome {
                Ok(text) => return Ok(text),
                Err(error) => retrier.backoff(error, cancel, &mut |_| {}).await?,
            }
        }
    }

    async fn send(
        &self,
        url: &str,
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
                }
                .into());
            }
            Ok(Err(err)) if err.is_builder() => {
                return Err(ProviderError::InvalidConfig {
                    detail: format!("cannot send to {url}: {err}"),
                }
                .into());
            }
            Ok(Err(err)) => {
                return Err(AttemptError::Transient {
                    failure: Transient::Connect(Box::new(err)),
                    retry_after: None,
                });
            }
            Ok(Ok(response)) => response,
        };
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.status_error(url, response).await)
    }

    async fn status_error(&self, url: &str, mut response: reqwest::Response) -> AttemptError {
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
                url: url.to_owned(),
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
        headers: &HeaderMap,
        bytes: &[u8],
    ) -> Result<String, AttemptError> {
        let mut response = self.send(url, headers, bytes).await?;
        let mut raw = Vec::new();
        loop {
            match tokio::time::timeout(self.config.idle_timeout, response.chunk()).await {
                Err(_) => {
                    return Err(ProviderError::IdleTimeout {
                        idle: self.config.idle_timeout,
                    }
                    .into());
                }
                Ok(Ok(Some(chunk))) => raw.extend_from_slice(&chunk),
                Ok(Ok(None)) => break,
                Ok(Err(err)) => {
                    return Err(AttemptError::Transient {
                        failure: Transient::Dropped(Some(Box::new(err))),
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
        headers: &HeaderMap,
        bytes: &[u8],
        mut decoder: Box<dyn StreamDecoder>,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, AttemptError> {
        let response = self.send(url, headers, bytes).await?;
        let mut stream = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut produced: Vec<StreamEvent> = Vec::new();
        let mut content_seen = false;
        let mut n_events = 0_usize;
        let mut head = Vec::new();
        loop {
            let chunk = match tokio::time::timeout(self.config.idle_timeout, stream.next()).await {
                Err(_) => {
                    return Err(ProviderError::IdleTimeout {
                        idle: self.config.idle_timeout,
                    }
                    .into());
                }
                Ok(Some(Ok(chunk))) => Some(chunk),
                Ok(Some(Err(err))) => {
                    let source: Box<dyn StdError + Send + Sync> = Box::new(err);
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
        if n_events == 0 && !head.is_empty() {
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

/// Returns a decoder's final answer as an attempt's outcome: an empty
/// response is transient (retried once), any other error fatal.
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
                    &self.endpoint.url("/v1/messages"),
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
            let url = self.endpoint.url("/chat/completions");
            self.transport
                .stream(&url, headers, &body, &make, cancel, on_event)
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
                &self.endpoint.url("/responses/compact"),
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
                    &self.endpoint.url("/responses"),
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
