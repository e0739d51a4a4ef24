//! Native continuation end to end (SPEC §10.3, §5 step 2) against the fake
//! server speaking OpenAI Responses: `/responses/compact` gets the span
//! only, the returned item is stored on the capsule, and later requests
//! carry it only to the provider, model and endpoint it was made for —
//! every other request carries the rendered capsule. A native failure never
//! changes the outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use soba_core::calibration::MeasurementSource;
use soba_core::config::NativeMode;
use soba_core::input::native_item_tokens;
use soba_core::render::{CapsuleView, capsule_input};
use soba_core::summarize::{
    SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse,
};
use soba_core::{
    Block, Capsule, EntryBody, Message, MessageOrigin, Quality, Role, TokenCount, ToolInput,
    ToolUse, Usage,
};
use soba_engine::barrier::{Forced, Preflight};
use soba_engine::event::{CompactionEnd, Outcome, TurnEnd};
use soba_engine::native::{NativeCompactor, ResponsesCompactor};
use soba_engine::session::SessionCore;
use soba_provider::client::{Api, BoxFuture, Cancellation, Endpoint, ModelClient};
use soba_provider::error::ProviderError;
use soba_provider::fake::{Dialect, FakeServer, Reply, Script};
use soba_provider::request::{ChatRequest, ChatResponse, StreamEvent};
use soba_provider::transport::{HttpConfig, OpenAiResponsesClient, RetryPolicy};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::harness::{Harness, Options, small_config};

const MODEL: &str = "gpt-5-codex";
const SYSTEM: &str = "You are a test agent.";

fn http() -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        stream_timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        },
    }
}

fn endpoint(server: &FakeServer) -> Endpoint {
    Endpoint::new(server.url()).with_api_key("sk-native")
}

/// The Responses client reporting as usage the local count of the request
/// the session sends, so calibration stays at 1.0.
struct ResponsesEcho {
    inner: OpenAiResponsesClient,
    core: Arc<Mutex<SessionCore>>,
}

impl ModelClient for ResponsesEcho {
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
            let local = self.core.lock().await.live().total_tokens().get();
            let mut response = self.inner.stream(request, cancel, on_event).await?;
            response.message.usage = Some(Usage {
                input: local,
                output: 10,
                ..Usage::default()
            });
            response.message.model = Some("fake/model".into());
            Ok(response)
        })
    }
}

/// A harness talking OpenAI Responses (`gpt-5-codex`) with
/// `compaction.native` = `mode` and the session's Responses compactor.
async fn start(mode: NativeMode, summarizer: Option<Arc<dyn Summarizer>>) -> Harness {
    let mut compaction = small_config();
    compaction.native = mode;
    compaction.min_hygiene_tokens = TokenCount::new(1_000_000);
    compaction.compact_on_turn_complete = false;
    let mut h = Harness::start(Options {
        compaction,
        summarizer,
        files: Vec::new(),
    })
    .await;
    let client = OpenAiResponsesClient::new(endpoint(&h.server), http()).unwrap();
    h.agent.model = Arc::new(ResponsesEcho {
        inner: client,
        core: h.core.clone(),
    });
    h.agent.provider_model = MODEL.into();
    let compactor = ResponsesCompactor::for_session(
        NativeMode::Auto,
        Api::OpenAiResponses,
        "openai",
        MODEL,
        endpoint(&h.server),
        http(),
    )
    .unwrap();
    assert!(compactor.is_some());
    h.core.lock().await.set_native(compactor);
    h
}

/// 2,000 bytes of note text (500 tokens under the byte counter).
fn note(name: &str) -> String {
    let line = format!("{name}: the quick brown fox jumps over the lazy dog\n");
    line.repeat(2_000 / line.len() + 1)[..2_000].to_owned()
}

fn call(id: &str, path: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![Block::ToolUse(ToolUse {
            id: id.into(),
            name: "read_file".into(),
            input: ToolInput::from_value(json!({"path": path})),
        })],
    )
}

/// Appends a finished turn that read `names` (one tool batch each): with
/// keepRecent 1,000 tokens, the last batch and the final answer are the
/// retained tail of a `/compact`, everything before is the span.
async fn seed(h: &Harness, task: &str, names: &[&str]) {
    let mut core = h.core.lock().await;
    core.append_message(Message::user(task)).unwrap();
    for name in names {
        core.append_message(call(&format!("call_{name}"), &format!("{name}.txt")))
            .unwrap();
        core.append_message(Message::tool_result(
            format!("call_{name}"),
            note(name),
            false,
        ))
        .unwrap();
    }
    core.append_message(Message::assistant(format!("read {}", names.join(", "))))
        .unwrap();
}

fn user_item(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

fn assistant_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

/// The Responses items of one tool batch reading `name`.
fn batch_items(name: &str) -> [Value; 2] {
    [
        json!({"type": "function_call", "call_id": format!("call_{name}"), "name": "read_file", "arguments": format!("{{\"path\":\"{name}.txt\"}}")}),
        json!({"type": "function_call_output", "call_id": format!("call_{name}"), "output": note(name)}),
    ]
}

fn compaction_item(encrypted: &str) -> Value {
    json!({"type": "compaction", "encrypted_content": encrypted})
}

async fn compact(h: &Harness) -> CompactionEnd {
    match h
        .agent
        .barrier
        .preflight(
            Some(Forced::User { instructions: None }),
            &CancellationToken::new(),
        )
        .await
        .unwrap()
    {
        Preflight::Compacted(end) => end,
        other => panic!("{other:?}"),
    }
}

fn last_capsule(h: &Harness) -> Capsule {
    h.logged_entries()
        .iter()
        .rev()
        .find_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => Some((**capsule).clone()),
            _ => None,
        })
        .expect("a capsule was appended")
}

fn bodies(h: &Harness, path: &str) -> Vec<Value> {
    h.server
        .requests()
        .into_iter()
        .filter(|request| request.path == path)
        .map(|request| request.body)
        .collect()
}

/// Runs a turn answered "ok" and returns the `/responses` body it sent.
async fn turn(h: &Harness, text: &str) -> Value {
    h.server.push_for(
        "/responses",
        Script::stream(Dialect::Responses, &Reply::text("ok")),
    );
    assert_eq!(h.turn(text).await, TurnEnd::Completed);
    bodies(h, "/responses").pop().unwrap()
}

#[tokio::test]
async fn the_item_is_stored_and_sent_only_to_the_matching_model_and_endpoint() {
    let mut h = start(NativeMode::Auto, None).await;
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    let encrypted = format!("gAAAA{}", "x".repeat(995));
    h.server
        .push_for("/responses/compact", Script::compaction(&encrypted));
    let end = compact(&h).await;
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Full))
    );

    // The span only: the task and the first two batches; never the tail.
    let compact_bodies = bodies(&h, "/responses/compact");
    assert_eq!(compact_bodies.len(), 1);
    let [alpha_call, alpha_out] = batch_items("alpha");
    let [beta_call, beta_out] = batch_items("beta");
    assert_eq!(
        compact_bodies[0],
        json!({
            "model": MODEL,
            "instructions": SYSTEM,
            "input": [user_item("audit the notes"), alpha_call, alpha_out, beta_call, beta_out],
        })
    );

    // Only the compaction item is stored, with where it may be sent.
    let capsule = last_capsule(&h);
    let native = capsule.native.clone().expect("a native continuation");
    assert_eq!(native.provider, "openai");
    assert_eq!(native.model, MODEL);
    assert_eq!(
        native.endpoint_fingerprint,
        endpoint(&h.server).fingerprint()
    );
    assert_eq!(
        serde_json::from_str::<Value>(&native.item).unwrap(),
        compaction_item(&encrypted)
    );

    // Until a request that carried it reports usage, the item counts as
    // ceil(1,000 × 3/4 / 4) = 188 tokens.
    {
        let core = h.core.lock().await;
        assert_eq!(native_item_tokens(&native), TokenCount::new(188));
        let view = core.live().view();
        let slot = view.capsule.as_ref().unwrap();
        assert!(slot.rendered.is_none());
        assert_eq!(slot.tokens, TokenCount::new(188));
        assert_eq!(core.measure().source, MeasurementSource::Estimated);
        assert_eq!(core.measure().tokens, core.live().total_tokens());
    }

    // The next request: the item, the retained tail, the new message.
    let body = turn(&h, "go on").await;
    let [gamma_call, gamma_out] = batch_items("gamma");
    assert_eq!(
        body["input"],
        json!([
            compaction_item(&encrypted),
            gamma_call,
            gamma_out,
            assistant_item("read alpha, beta, gamma"),
            user_item("go on"),
        ])
    );
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["instructions"], SYSTEM);
    assert_eq!(body["store"], false);
    assert_eq!(
        h.core.lock().await.measure().source,
        MeasurementSource::ProviderUsage
    );

    // Another model on the same endpoint: the rendered capsule instead.
    let rendered = capsule_input(&CapsuleView::from(&capsule));
    let other_model = ResponsesCompactor::for_session(
        NativeMode::Auto,
        Api::OpenAiResponses,
        "openai",
        "gpt-5",
        endpoint(&h.server),
        http(),
    )
    .unwrap();
    h.core.lock().await.set_native(other_model);
    h.agent.provider_model = "gpt-5".into();
    let request = h.next_request().await;
    assert_eq!(request.native, None);
    assert_eq!(request.messages[0].text(), rendered);
    assert_eq!(request.messages[0].origin, MessageOrigin::Summary);
    let body = turn(&h, "and now?").await;
    let [gamma_call, gamma_out] = batch_items("gamma");
    assert_eq!(
        body["input"],
        json!([
            user_item(&rendered),
            gamma_call,
            gamma_out,
            assistant_item("read alpha, beta, gamma"),
            user_item("go on"),
            assistant_item("ok"),
            user_item("and now?"),
        ])
    );
    assert_eq!(body["model"], "gpt-5");
    h.agent.provider_model = MODEL.into();

    // The same model on another endpoint (another organization): rendered.
    let mut elsewhere = endpoint(&h.server);
    elsewhere.organization = Some("org-other".into());
    let other_endpoint = ResponsesCompactor::for_session(
        NativeMode::Auto,
        Api::OpenAiResponses,
        "openai",
        MODEL,
        elsewhere,
        http(),
    )
    .unwrap();
    h.core.lock().await.set_native(other_endpoint);
    let request = h.next_request().await;
    assert_eq!(request.native, None);
    assert_eq!(request.messages[0].text(), rendered);

    // Back on the model and endpoint it was made for: the item again.
    let same = ResponsesCompactor::for_session(
        NativeMode::Auto,
        Api::OpenAiResponses,
        "openai",
        MODEL,
        endpoint(&h.server),
        http(),
    )
    .unwrap();
    h.core.lock().await.set_native(same);
    let request = h.next_request().await;
    assert_eq!(
        request.native.map(|item| item.encrypted_content),
        Some(encrypted)
    );
    assert_eq!(
        request.messages[0]
            .tool_uses()
            .next()
            .map(|call| call.id.as_str()),
        Some("call_gamma")
    );
}

fn gamma_call_item() -> Value {
    batch_items("gamma")[0].clone()
}

#[tokio::test]
async fn the_next_native_compaction_starts_from_the_previous_item() {
    let h = start(NativeMode::Auto, None).await;
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    h.server
        .push_for("/responses/compact", Script::compaction("enc-first"));
    assert_eq!(compact(&h).await.outcome, Outcome::Completed);
    seed(&h, "and the next ones", &["delta", "epsilon"]).await;
    h.server
        .push_for("/responses/compact", Script::compaction("enc-second"));
    assert_eq!(compact(&h).await.outcome, Outcome::Completed);

    // The previous item, then the entries leaving the input: the old tail
    // and the new task with its first batch; not the new tail.
    let compact_bodies = bodies(&h, "/responses/compact");
    assert_eq!(compact_bodies.len(), 2);
    let [gamma_call, gamma_out] = batch_items("gamma");
    let [delta_call, delta_out] = batch_items("delta");
    assert_eq!(
        compact_bodies[1]["input"],
        json!([
            compaction_item("enc-first"),
            gamma_call,
            gamma_out,
            assistant_item("read alpha, beta, gamma"),
            user_item("and the next ones"),
            delta_call,
            delta_out,
        ])
    );
    let native = last_capsule(&h).native.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&native.item).unwrap(),
        compaction_item("enc-second")
    );
}

#[tokio::test]
async fn without_a_matching_item_the_rendered_previous_capsule_starts_the_span() {
    let h = start(NativeMode::Auto, None).await;
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    // The first native call fails: the capsule is portable only.
    h.server.push_for(
        "/responses/compact",
        Script::error(400, r#"{"error":{"message":"compaction unavailable"}}"#),
    );
    assert_eq!(compact(&h).await.outcome, Outcome::Completed);
    let first = last_capsule(&h);
    assert_eq!(first.native, None);
    seed(&h, "and the next ones", &["delta", "epsilon"]).await;
    h.server
        .push_for("/responses/compact", Script::compaction("enc-second"));
    assert_eq!(compact(&h).await.outcome, Outcome::Completed);
    let compact_bodies = bodies(&h, "/responses/compact");
    let input = compact_bodies[1]["input"].as_array().unwrap();
    assert_eq!(
        input[0],
        user_item(&capsule_input(&CapsuleView::from(&first)))
    );
    assert_eq!(input[1], gamma_call_item());
}

#[tokio::test]
async fn a_native_failure_still_appends_the_portable_capsule() {
    for (script, name) in [
        (
            Script::error(500, r#"{"error":{"message":"boom"}}"#),
            "server error",
        ),
        (
            Script::json(&json!({"output": [{"type": "message", "role": "user", "content": []}]})),
            "no compaction item",
        ),
        (Script::Stall(Duration::from_secs(5)), "stall"),
    ] {
        let h = start(NativeMode::Auto, None).await;
        seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
        h.server.push_for("/responses/compact", script);
        let started = Instant::now();
        let end = compact(&h).await;
        // The stall is abandoned at the deadline (timeoutMs 200, one chunk).
        assert!(started.elapsed() < Duration::from_millis(500), "{name}");
        assert_eq!(
            (end.outcome, end.quality),
            (Outcome::Completed, Some(Quality::Full)),
            "{name}"
        );
        let capsule = last_capsule(&h);
        assert_eq!(capsule.native, None, "{name}");
        assert_eq!(bodies(&h, "/responses/compact").len(), 1, "{name}");
        // The next request carries the rendered capsule.
        let body = turn(&h, "go on").await;
        assert_eq!(
            body["input"][0],
            user_item(&capsule_input(&CapsuleView::from(&capsule))),
            "{name}"
        );
    }
}

/// A summarizer that answers only once the native request has reached the
/// server: it can succeed only if both run at the same time.
struct WaitsForNative {
    server_requests: Arc<dyn Fn() -> usize + Send + Sync>,
}

impl Summarizer for WaitsForNative {
    fn model(&self) -> &str {
        "waits-for-native"
    }

    fn window_tokens(&self) -> TokenCount {
        TokenCount::new(200_000)
    }

    fn summarize<'a>(&'a self, _request: &'a SummaryRequest) -> SummaryFuture<'a> {
        Box::pin(async move {
            while (self.server_requests)() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let text = [
                "Goal",
                "Constraints",
                "Done",
                "In progress",
                "Pending",
                "Decisions",
                "Blockers",
                "Next steps",
            ]
            .iter()
            .map(|heading| format!("## {heading}\nAuditing the three notes.\n"))
            .collect::<String>();
            Ok::<_, SummarizeError>(SummaryResponse {
                text,
                model: "waits-for-native".into(),
                usage: None,
            })
        })
    }
}

#[tokio::test]
async fn the_native_call_runs_alongside_the_summarizer() {
    let slot: Arc<std::sync::Mutex<Option<Arc<FakeServer>>>> =
        Arc::new(std::sync::Mutex::new(None));
    let probe = slot.clone();
    let h = start(
        NativeMode::Auto,
        Some(Arc::new(WaitsForNative {
            server_requests: Arc::new(move || {
                probe.lock().unwrap().as_ref().map_or(0, |server| {
                    server
                        .requests()
                        .iter()
                        .filter(|request| request.path == "/responses/compact")
                        .count()
                })
            }),
        })),
    )
    .await;
    // A second server for the compact call, so the probe can watch it.
    let native_server = Arc::new(FakeServer::start().await.unwrap());
    native_server.push(Script::compaction("enc-parallel").with_delay(Duration::from_millis(50)));
    *slot.lock().unwrap() = Some(native_server.clone());
    let compactor = ResponsesCompactor::for_session(
        NativeMode::Auto,
        Api::OpenAiResponses,
        "openai",
        MODEL,
        endpoint(&native_server),
        http(),
    )
    .unwrap();
    h.core.lock().await.set_native(compactor);
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    let end = compact(&h).await;
    // Had the summarizer waited for the native call to start, it would have
    // timed out (200 ms) and the capsule would be degraded.
    assert_eq!(
        (end.outcome, end.quality),
        (Outcome::Completed, Some(Quality::Full))
    );
    let capsule = last_capsule(&h);
    assert_eq!(capsule.summarizer, "waits-for-native");
    let native = capsule.native.unwrap();
    assert_eq!(
        native.endpoint_fingerprint,
        endpoint(&native_server).fingerprint()
    );
    assert_eq!(
        serde_json::from_str::<Value>(&native.item).unwrap(),
        compaction_item("enc-parallel")
    );
}

#[tokio::test]
async fn a_cancel_abandons_the_native_call_and_appends_nothing() {
    let h = start(NativeMode::Auto, None).await;
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    h.server
        .push_for("/responses/compact", Script::Stall(Duration::from_secs(5)));
    let cancel = CancellationToken::new();
    let fire = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fire.cancel();
    });
    let started = Instant::now();
    let preflight = h
        .agent
        .barrier
        .preflight(Some(Forced::User { instructions: None }), &cancel)
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    match preflight {
        Preflight::EndTurn(end) => assert_eq!(end.outcome, Outcome::Cancelled),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.count_logged("capsule"), 0);
}

#[tokio::test]
async fn with_native_off_nothing_native_happens() {
    let h = start(NativeMode::Off, None).await;
    assert!(h.core.lock().await.native_compactor().is_none());
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    assert_eq!(compact(&h).await.outcome, Outcome::Completed);
    assert!(bodies(&h, "/responses/compact").is_empty());
    assert_eq!(last_capsule(&h).native, None);
    // Only OpenAI Responses serves native items.
    for api in [Api::AnthropicMessages, Api::OpenAiChat] {
        let compactor = ResponsesCompactor::for_session(
            NativeMode::Auto,
            api,
            "openai",
            MODEL,
            endpoint(&h.server),
            http(),
        )
        .unwrap();
        assert!(compactor.is_none(), "{api:?}");
    }
}

/// The item of a resumed session is sent as live: the same request.
#[tokio::test]
async fn resuming_sends_the_same_native_request() {
    let h = start(NativeMode::Auto, None).await;
    seed(&h, "audit the notes", &["alpha", "beta", "gamma"]).await;
    h.server
        .push_for("/responses/compact", Script::compaction("enc-resume"));
    assert_eq!(compact(&h).await.outcome, Outcome::Completed);
    let live = h.next_request().await;
    assert!(live.native.is_some());
    let live_effective = h.effective().await;
    let compactor: Option<Arc<dyn NativeCompactor>> =
        h.core.lock().await.native_compactor().cloned();
    let Harness {
        dir,
        agent,
        core,
        log_path,
        config,
        ..
    } = h;
    let tools = agent.tools.clone();
    drop(agent);
    drop(core);
    let (mut resumed, diagnostics) =
        SessionCore::open(&log_path, config, soba_store::log::WriterOptions::default()).unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    // Without the compactor the resumed session sends the rendered capsule.
    let portable = soba_engine::agent::build_request(&resumed, "model", &tools);
    assert_eq!(portable.native, None);
    resumed.set_native(compactor);
    let again = soba_engine::agent::build_request(&resumed, "model", &tools);
    assert_eq!(live, again);
    assert_eq!(resumed.measure().tokens, live_effective);
    drop(dir);
}
