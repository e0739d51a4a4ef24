//! A fake model provider on loopback (feature `fake-server`) for the tests
//! of every crate (SPEC §10.4): it answers each request with the next
//! queued [`Script`] — an event stream in any of the three dialects with
//! per-event delays, a stall, a connection dropped mid-stream, an error
//! status with its body, or a computed answer — and records every request
//! (method, path, headers with keys redacted, body) so tests can assert
//! exactly what was sent.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
//! let server = FakeServer::start().await?;
//! server.push(Script::stream(Dialect::Anthropic, &Reply::text("hello")));
//! // point a client at server.url() …
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};
use soba_core::Usage;

use crate::overflow::OVERFLOW_SAMPLES;

/// Header names whose values are secrets: recorded as `<redacted>`.
const SECRET_HEADERS: &[&str] = &["authorization", "x-api-key", "api-key", "x-goog-api-key"];

/// The redacted value recorded for secret headers.
pub const REDACTED: &str = "<redacted>";

/// The three wire dialects the fake server can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/chat/completions`).
    Chat,
    /// OpenAI Responses (`/responses`).
    Responses,
}

impl Dialect {
    /// Returns the request path this dialect's clients post to.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Anthropic => "/v1/messages",
            Dialect::Chat => "/chat/completions",
            Dialect::Responses => "/responses",
        }
    }

    /// Returns the event stream answering with `reply`.
    pub fn frames(self, reply: &Reply) -> Vec<Frame> {
        match self {
            Dialect::Anthropic => anthropic_frames(reply),
            Dialect::Chat => chat_frames(reply),
            Dialect::Responses => responses_frames(reply),
        }
    }

    /// Returns the text of the last user message in a request body of this
    /// dialect (for echo scripts).
    pub fn last_user_text(self, body: &Value) -> String {
        let list = match self {
            Dialect::Anthropic | Dialect::Chat => body.get("messages"),
            Dialect::Responses => body.get("input"),
        };
        let Some(items) = list.and_then(Value::as_array) else {
            return String::new();
        };
        let last = items
            .iter()
            .rev()
            .find(|item| item.get("role").and_then(Value::as_str) == Some("user"));
        match last.and_then(|item| item.get("content")) {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }
}

/// One tool call in a scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeToolCall {
    /// The call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments object.
    pub arguments: Value,
}

/// What a scripted answer says, independent of the dialect.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The model name the stream reports.
    pub model: String,
    /// Reasoning text and its signature (encrypted content), when any.
    pub thinking: Option<(String, String)>,
    /// The visible text (may be empty).
    pub text: String,
    /// Tool calls, in order.
    pub tool_calls: Vec<FakeToolCall>,
    /// The usage to report, normalised; each dialect encodes it its own way
    /// (cached tokens folded into the prompt for OpenAI).
    pub usage: Usage,
    /// How many characters each text delta carries.
    pub chunk_chars: usize,
    /// Whether the answer stops at `max_tokens`.
    pub truncated: bool,
}

impl Reply {
    /// Returns a text answer with small default usage.
    pub fn text(text: impl Into<String>) -> Self {
        Reply {
            model: "fake-model".to_owned(),
            thinking: None,
            text: text.into(),
            tool_calls: Vec::new(),
            usage: Usage {
                input: 10,
                cache_read: 0,
                cache_write: 0,
                output: 5,
                reasoning: 0,
            },
            chunk_chars: 8,
            truncated: false,
        }
    }

    /// Adds a tool call.
    pub fn with_tool_call(mut self, id: &str, name: &str, arguments: Value) -> Self {
        self.tool_calls.push(FakeToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments,
        });
        self
    }

    /// Sets the usage.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Adds reasoning with a signature.
    pub fn with_thinking(mut self, text: &str, signature: &str) -> Self {
        self.thinking = Some((text.to_owned(), signature.to_owned()));
        self
    }

    /// Sets the reported model.
    pub fn with_model(mut self, model: &str) -> Self {
        self.model = model.to_owned();
        self
    }

    /// Marks the answer as cut at `max_tokens`.
    pub fn truncated(mut self) -> Self {
        self.truncated = true;
        self
    }

    fn pieces(&self, text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(self.chunk_chars.max(1))
            .map(|chunk| chunk.iter().collect())
            .collect()
    }
}

/// One chunk written to the response body after a delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The wait before writing it.
    pub delay: Duration,
    /// The bytes, exactly as written (an SSE frame ends with a blank line).
    pub text: String,
}

impl Frame {
    /// Returns an `event:` + `data:` frame.
    pub fn event(name: &str, data: &Value) -> Self {
        Frame {
            delay: Duration::ZERO,
            text: format!("event: {name}\ndata: {data}\n\n"),
        }
    }

    /// Returns a `data:`-only frame.
    pub fn data(data: &str) -> Self {
        Frame {
            delay: Duration::ZERO,
            text: format!("data: {data}\n\n"),
        }
    }

    /// Returns a frame of raw text (comments, CRLF, split lines…).
    pub fn raw(text: &str) -> Self {
        Frame {
            delay: Duration::ZERO,
            text: text.to_owned(),
        }
    }

    /// Returns the frame written after `delay`.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// How a scripted stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The body ends normally.
    Close,
    /// The connection is broken without finishing the body.
    Drop,
    /// The server goes silent for this long, then ends the body.
    Stall(Duration),
}

/// A computed answer.
pub type Responder = Arc<dyn Fn(&RecordedRequest) -> Script + Send + Sync>;

/// How the server answers one request.
#[derive(Clone)]
#[non_exhaustive]
pub enum Script {
    /// A `200 text/event-stream` body.
    Stream {
        /// The frames, in order.
        frames: Vec<Frame>,
        /// How the body ends.
        end: StreamEnd,
    },
    /// A plain response (errors, JSON bodies).
    Respond {
        /// The HTTP status.
        status: u16,
        /// The body.
        body: String,
        /// Extra headers (`retry-after`, content type…).
        headers: Vec<(String, String)>,
        /// The wait before the response headers.
        delay: Duration,
    },
    /// No response headers for this long, then a 503.
    Stall(Duration),
    /// An answer computed from the request.
    Compute(Responder),
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Script::Stream { frames, end } => f
                .debug_struct("Stream")
                .field("frames", &frames.len())
                .field("end", end)
                .finish(),
            Script::Respond { status, body, .. } => f
                .debug_struct("Respond")
                .field("status", status)
                .field("body", body)
                .finish(),
            Script::Stall(wait) => f.debug_tuple("Stall").field(wait).finish(),
            Script::Compute(_) => f.write_str("Compute(..)"),
        }
    }
}

impl Script {
    /// Returns a complete event stream answering with `reply`.
    pub fn stream(dialect: Dialect, reply: &Reply) -> Self {
        Script::Stream {
            frames: dialect.frames(reply),
            end: StreamEnd::Close,
        }
    }

    /// Returns an error response.
    pub fn error(status: u16, body: impl Into<String>) -> Self {
        Script::Respond {
            status,
            body: body.into(),
            headers: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    /// Returns a 200 JSON response.
    pub fn json(body: &Value) -> Self {
        Script::Respond {
            status: 200,
            body: body.to_string(),
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            delay: Duration::ZERO,
        }
    }

    /// Returns a redirect (`status` 3xx) to `location`.
    pub fn redirect(status: u16, location: &str) -> Self {
        Script::error(status, "").with_header("location", location)
    }

    /// Returns a 429 with the given `retry-after` value.
    pub fn rate_limited(retry_after: &str) -> Self {
        Script::error(429, r#"{"error":{"type":"rate_limit_error","message":"Rate limited. Please retry later."}}"#)
            .with_header("retry-after", retry_after)
    }

    /// Returns one provider's real overflow error (a name from
    /// [`OVERFLOW_SAMPLES`]); `None` for an unknown name.
    pub fn overflow(provider: &str) -> Option<Self> {
        OVERFLOW_SAMPLES
            .iter()
            .find(|(name, _, _)| *name == provider)
            .map(|(_, status, body)| Script::error(*status, *body))
    }

    /// Returns a `/responses/compact` answer carrying `encrypted` (and a
    /// user message that clients must discard).
    pub fn compaction(encrypted: &str) -> Self {
        Script::json(&json!({
            "id": "resp_fake_compact",
            "object": "response.compaction",
            "output": [
                {"id": "msg_fake", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "discard me"}]},
                {"id": "cmp_fake", "type": "compaction", "encrypted_content": encrypted},
            ],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120},
        }))
    }

    /// Returns a script that answers with `Reply::text(prefix + last user
    /// text)` in the dialect (echoed markers).
    pub fn echo(dialect: Dialect, prefix: &str) -> Self {
        let prefix = prefix.to_owned();
        Script::Compute(Arc::new(move |request: &RecordedRequest| {
            let text = dialect.last_user_text(&request.body);
            Script::stream(dialect, &Reply::text(format!("{prefix}{text}")))
        }))
    }

    /// Returns the script with an extra response header (plain responses).
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        if let Script::Respond { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    /// Returns the script with a wait before the response headers.
    pub fn with_delay(mut self, wait: Duration) -> Self {
        if let Script::Respond { delay, .. } = &mut self {
            *delay = wait;
        }
        self
    }

    /// Returns the stream with every frame delayed by `delay` (a slow
    /// answer, e.g. a slow summary).
    pub fn with_frame_delay(mut self, delay: Duration) -> Self {
        if let Script::Stream { frames, .. } = &mut self {
            for frame in frames {
                frame.delay = delay;
            }
        }
        self
    }

    /// Returns the stream cut after `n_frames`, ending as `end` (a dropped
    /// connection or a stall mid-stream).
    pub fn cut_after(mut self, n_frames: usize, how: StreamEnd) -> Self {
        if let Script::Stream { frames, end } = &mut self {
            frames.truncate(n_frames);
            *end = how;
        }
        self
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The method.
    pub method: String,
    /// The path (no query).
    pub path: String,
    /// The query string as received, when there was one.
    pub query: Option<String>,
    /// Lowercase header names with values; secrets are [`REDACTED`].
    pub headers: Vec<(String, String)>,
    /// The body as JSON (a JSON string holding the text when not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// Returns a header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Script>,
    by_path: HashMap<String, VecDeque<Script>>,
    requests: Vec<RecordedRequest>,
    streams_started: usize,
    streams_aborted: usize,
}

#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not hide the records from others.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The running fake server; stops when dropped.
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    /// Starts a server on `127.0.0.1` with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, router).await {
                tracing::warn!(%err, "fake provider server stopped");
            }
        });
        Ok(FakeServer { addr, shared, task })
    }

    /// Returns the base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a script for the next request on any path.
    pub fn push(&self, script: Script) {
        self.shared.lock().queue.push_back(script);
    }

    /// Queues a script for the next request on `path` (consulted before
    /// the shared queue, so parallel calls to different paths stay apart).
    pub fn push_for(&self, path: &str, script: Script) {
        self.shared
            .lock()
            .by_path
            .entry(path.to_owned())
            .or_default()
            .push_back(script);
    }

    /// Returns every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Returns how many scripts are still queued.
    pub fn pending(&self) -> usize {
        let inner = self.shared.lock();
        inner.queue.len() + inner.by_path.values().map(VecDeque::len).sum::<usize>()
    }

    /// Returns how many event streams were started.
    pub fn streams_started(&self) -> usize {
        self.shared.lock().streams_started
    }

    /// Returns how many event streams the client abandoned before their end
    /// (connection closed by the client).
    pub fn streams_aborted(&self) -> usize {
        self.shared.lock().streams_aborted
    }

    /// Waits until at least `n` streams were abandoned by the client, up to
    /// `deadline`; returns whether they were.
    pub async fn wait_for_aborted(&self, n: usize, deadline: Duration) -> bool {
        let start = tokio::time::Instant::now();
        loop {
            if self.streams_aborted() >= n {
                return true;
            }
            if start.elapsed() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn record(method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> RecordedRequest {
    let headers = headers
        .iter()
        .map(|(name, value)| {
            let name = name.as_str().to_ascii_lowercase();
            let value = if SECRET_HEADERS.contains(&name.as_str()) {
                REDACTED.to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name, value)
        })
        .collect();
    let body = serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
    RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body,
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = record(&method, &uri, &headers, &body);
    let script = {
        let mut inner = shared.lock();
        inner.requests.push(recorded.clone());
        match inner
            .by_path
            .get_mut(uri.path())
            .and_then(VecDeque::pop_front)
        {
            Some(script) => Some(script),
            None => inner.queue.pop_front(),
        }
    };
    let script = match script {
        Some(Script::Compute(responder)) => responder(&recorded),
        Some(script) => script,
        None => Script::error(
            500,
            format!("fake server: no script queued for {method} {}", uri.path()),
        ),
    };
    respond(shared, script).await
}

fn plain(status: u16, body: String, headers: &[(String, String)]) -> Response {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (name, value) in headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::from("fake server: invalid scripted header")))
}

/// Records whether the client abandoned a stream: dropped before the end.
struct StreamGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl StreamGuard {
    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.lock().streams_aborted += 1;
        }
    }
}

async fn respond(shared: Arc<Shared>, script: Script) -> Response {
    match script {
        Script::Respond {
            status,
            body,
            headers,
            delay,
        } => {
            tokio::time::sleep(delay).await;
            plain(status, body, &headers)
        }
        Script::Stall(wait) => {
            tokio::time::sleep(wait).await;
            plain(503, "fake server: stalled".to_owned(), &[])
        }
        Script::Compute(_) => plain(
            500,
            "fake server: a computed script computed another".to_owned(),
            &[],
        ),
        Script::Stream { frames, end } => {
            shared.lock().streams_started += 1;
            let guard = StreamGuard {
                shared,
                finished: false,
            };
            let state = (VecDeque::from(frames), end, guard, false);
            let body = futures_util::stream::unfold(
                state,
                |(mut frames, end, mut guard, ended)| async move {
                    if ended {
                        return None;
                    }
                    if let Some(frame) = frames.pop_front() {
                        tokio::time::sleep(frame.delay).await;
                        return Some((Ok(Bytes::from(frame.text)), (frames, end, guard, false)));
                    }
                    match end {
                        StreamEnd::Close => {
                            guard.finish();
                            None
                        }
                        StreamEnd::Stall(wait) => {
                            tokio::time::sleep(wait).await;
                            guard.finish();
                            None
                        }
                        StreamEnd::Drop => {
                            guard.finish();
                            let err = std::io::Error::new(
                                std::io::ErrorKind::ConnectionReset,
                                "fake server: dropped",
                            );
                            Some((Err(err), (frames, end, guard, true)))
                        }
                    }
                },
            );
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(Body::from_stream(body))
                .unwrap_or_else(|_| {
                    Response::new(Body::from("fake server: cannot build the stream"))
                })
        }
    }
}

fn anthropic_frames(reply: &Reply) -> Vec<Frame> {
    let usage = &reply.usage;
    let mut frames = vec![
        Frame::event(
            "message_start",
            &json!({
                "type": "message_start",
                "message": {
                    "id": "msg_fake", "type": "message", "role": "assistant", "model": reply.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {
                        "input_tokens": usage.input,
                        "cache_creation_input_tokens": usage.cache_write,
                        "cache_read_input_tokens": usage.cache_read,
                        "output_tokens": 1,
                    },
                },
            }),
        ),
        Frame::event("ping", &json!({"type": "ping"})),
    ];
    let mut index = 0;
    if let Some((thinking, signature)) = &reply.thinking {
        frames.push(Frame::event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
        for piece in reply.pieces(thinking) {
            frames.push(Frame::event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}})));
        }
        frames.push(Frame::event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signature}})));
        frames.push(Frame::event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !reply.text.is_empty() {
        frames.push(Frame::event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for piece in reply.pieces(&reply.text) {
            frames.push(Frame::event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
        }
        frames.push(Frame::event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for call in &reply.tool_calls {
        frames.push(Frame::event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}})));
        for piece in reply.pieces(&call.arguments.to_string()) {
            frames.push(Frame::event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
        }
        frames.push(Frame::event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if reply.truncated {
        "max_tokens"
    } else if reply.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    frames.push(Frame::event("message_delta", &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": usage.output}})));
    frames.push(Frame::event(
        "message_stop",
        &json!({"type": "message_stop"}),
    ));
    frames
}

fn chat_frames(reply: &Reply) -> Vec<Frame> {
    let chunk = |delta: Value, finish: Value| {
        Frame::data(
            &json!({
                "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": reply.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            })
            .to_string(),
        )
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some((thinking, _)) = &reply.thinking {
        for piece in reply.pieces(thinking) {
            frames.push(chunk(json!({"reasoning_content": piece}), Value::Null));
        }
    }
    for piece in reply.pieces(&reply.text) {
        frames.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        frames.push(chunk(json!({"tool_calls": [{"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}]}), Value::Null));
        for piece in reply.pieces(&call.arguments.to_string()) {
            frames.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if reply.truncated {
        "length"
    } else if reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    frames.push(chunk(json!({}), json!(finish)));
    let usage = &reply.usage;
    let prompt = usage.input + usage.cache_read + usage.cache_write;
    frames.push(Frame::data(&json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": reply.model, "choices": [],
        "usage": {
            "prompt_tokens": prompt, "completion_tokens": usage.output, "total_tokens": prompt + usage.output,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        },
    }).to_string()));
    frames.push(Frame::data("[DONE]"));
    frames
}

fn responses_frames(reply: &Reply) -> Vec<Frame> {
    let mut sequence = 0_u64;
    let mut frame = |mut data: Value| {
        let kind = data["type"].as_str().unwrap_or("unknown").to_owned();
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        Frame::event(&kind, &data)
    };
    let mut frames = vec![frame(
        json!({"type": "response.created", "response": {"id": "resp_fake", "object": "response", "model": reply.model, "status": "in_progress", "output": []}}),
    )];
    let mut output = Vec::new();
    if let Some((thinking, signature)) = &reply.thinking {
        let index = output.len();
        frames.push(frame(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "reasoning", "id": "rs_fake", "summary": []}})));
        for piece in reply.pieces(thinking) {
            frames.push(frame(json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_fake", "output_index": index, "summary_index": 0, "delta": piece})));
        }
        let item = json!({"type": "reasoning", "id": "rs_fake", "summary": [{"type": "summary_text", "text": thinking}], "encrypted_content": signature});
        frames.push(frame(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
        output.push(item);
    }
    if !reply.text.is_empty() {
        let index = output.len();
        frames.push(frame(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "message", "id": "msg_fake", "role": "assistant", "status": "in_progress", "content": []}})));
        frames.push(frame(json!({"type": "response.content_part.added", "item_id": "msg_fake", "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
        for piece in reply.pieces(&reply.text) {
            frames.push(frame(json!({"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": index, "content_index": 0, "delta": piece})));
        }
        frames.push(frame(json!({"type": "response.output_text.done", "item_id": "msg_fake", "output_index": index, "content_index": 0, "text": reply.text})));
        let item = json!({"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": reply.text, "annotations": []}]});
        frames.push(frame(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
        output.push(item);
    }
    for (n, call) in reply.tool_calls.iter().enumerate() {
        let index = output.len();
        let item_id = format!("fc_fake_{n}");
        let arguments = call.arguments.to_string();
        frames.push(frame(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name, "arguments": "", "status": "in_progress"}})));
        for piece in reply.pieces(&arguments) {
            frames.push(frame(json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index, "delta": piece})));
        }
        frames.push(frame(json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index, "arguments": arguments})));
        let item = json!({"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name, "arguments": arguments, "status": "completed"});
        frames.push(frame(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
        output.push(item);
    }
    let usage = &reply.usage;
    let input = usage.input + usage.cache_read + usage.cache_write;
    let usage_json = json!({
        "input_tokens": input, "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": input + usage.output,
    });
    if reply.truncated {
        frames.push(frame(json!({"type": "response.incomplete", "response": {"id": "resp_fake", "model": reply.model, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": output, "usage": usage_json}})));
    } else {
        frames.push(frame(json!({"type": "response.completed", "response": {"id": "resp_fake", "model": reply.model, "status": "completed", "output": output, "usage": usage_json}})));
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::parse_all;
    use crate::wire::StreamDecoder;

    fn decode(dialect: Dialect, reply: &Reply) -> crate::ChatResponse {
        let text: String = dialect
            .frames(reply)
            .into_iter()
            .map(|frame| frame.text)
            .collect();
        let mut decoder: Box<dyn StreamDecoder> = match dialect {
            Dialect::Anthropic => Box::new(crate::anthropic::AnthropicDecoder::new("m")),
            Dialect::Chat => Box::new(crate::openai_chat::ChatDecoder::new("m")),
            Dialect::Responses => Box::new(crate::openai_responses::ResponsesDecoder::new("m")),
        };
        let mut out = Vec::new();
        for event in parse_all(text.as_bytes()).unwrap() {
            decoder.feed(&event, &mut out).unwrap();
        }
        decoder.finish().unwrap()
    }

    #[test]
    fn every_dialect_round_trips_through_its_decoder() {
        let reply = Reply::text("the answer is 42")
            .with_thinking("let me think", "SIG")
            .with_tool_call("call_1", "read", json!({"path": "src/lib.rs"}))
            .with_usage(Usage {
                input: 30,
                cache_read: 900,
                cache_write: 0,
                output: 70,
                reasoning: 20,
            });
        for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
            let response = decode(dialect, &reply);
            assert_eq!(response.message.text(), "the answer is 42", "{dialect:?}");
            let call = response.message.tool_uses().next().unwrap();
            assert_eq!(
                call.input.str_arg("path"),
                Some("src/lib.rs"),
                "{dialect:?}"
            );
            let usage = response.message.usage.unwrap();
            assert_eq!(
                (usage.input, usage.cache_read, usage.output),
                (30, 900, 70),
                "{dialect:?}"
            );
            assert_eq!(
                response.stop_reason,
                crate::StopReason::ToolUse,
                "{dialect:?}"
            );
        }
    }

    #[test]
    fn last_user_text_per_dialect() {
        assert_eq!(
            Dialect::Chat.last_user_text(&json!({"messages": [{"role": "user", "content": "hi"}]})),
            "hi"
        );
        assert_eq!(
            Dialect::Responses.last_user_text(&json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "yo"}]}]})),
            "yo"
        );
        assert_eq!(Dialect::Anthropic.last_user_text(&json!({})), "");
    }
}
