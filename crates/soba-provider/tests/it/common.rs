//! Shared helpers: fast client settings, a rich sample request, and a
//! runner that collects stream events.

use std::time::Duration;

use serde_json::json;
use soba_core::{Block, Image, ImageSource, Message, MessageOrigin, Role, ToolInput, ToolUse};
use soba_provider::ProviderError;
use soba_provider::client::{Api, Cancellation, Endpoint, ModelClient, NeverCancel};
use soba_provider::fake::FakeServer;
use soba_provider::request::{ChatRequest, ChatResponse, ReasoningConfig, StreamEvent, ToolSchema};
use soba_provider::transport::{HttpConfig, RetryPolicy, client_for};

/// Client settings for tests: every timeout well under 500 ms.
pub fn fast_config() -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        stream_timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(10),
            jitter: 0.2,
            max_retry_after: Duration::from_secs(60),
        },
    }
}

/// Returns a client of `api` pointed at the fake server, with a test key.
/// (In production the OpenAI base URLs end in `/v1`; the fake server serves
/// every dialect at its root.)
pub fn client(server: &FakeServer, api: Api, config: HttpConfig) -> Box<dyn ModelClient> {
    let endpoint = Endpoint::new(server.url()).with_api_key("sk-test-secret");
    client_for(api, endpoint, config).expect("the test client builds")
}

/// Runs one request and returns the result and every event.
pub async fn run(
    client: &dyn ModelClient,
    request: &ChatRequest,
    cancel: &dyn Cancellation,
) -> (Result<ChatResponse, ProviderError>, Vec<StreamEvent>) {
    let mut events = Vec::new();
    let mut on_event = |event: StreamEvent| events.push(event);
    let result = client.stream(request, cancel, &mut on_event).await;
    (result, events)
}

/// Runs one request that cannot be cancelled.
pub async fn run_plain(
    client: &dyn ModelClient,
    request: &ChatRequest,
) -> (Result<ChatResponse, ProviderError>, Vec<StreamEvent>) {
    run(client, request, &NeverCancel).await
}

/// A small request with one tool.
pub fn simple_request() -> ChatRequest {
    let mut request = ChatRequest::new(
        "claude-sonnet-4-5",
        "You are SOBA.",
        vec![Message::user("list the files")],
        1_024,
    );
    request.tools = vec![read_tool()];
    request
}

fn read_tool() -> ToolSchema {
    ToolSchema {
        name: "read".into(),
        description: "Read a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

/// A request exercising every mapping: a capsule message (cache
/// breakpoint), reasoning with a signature, tool calls and results, an
/// image, and reasoning settings.
pub fn rich_request(model: &str) -> ChatRequest {
    let mut capsule = Message::user("## Context Capsule\nGoal: fix the failing parser test.");
    capsule.origin = MessageOrigin::Summary;
    let mut assistant = Message::new(
        Role::Assistant,
        vec![
            Block::Thinking {
                text: "The parser test fails; read it first.".into(),
                signature: Some("sig-abc".into()),
            },
            Block::Text("Looking at the test.".into()),
            Block::ToolUse(ToolUse {
                id: "call_1".into(),
                name: "read".into(),
                input: ToolInput::from_json_text(r#"{"path":"src/parser.rs"}"#),
            }),
        ],
    );
    assistant.model = Some(model.into());
    let image = Block::Image(Image {
        media_type: "image/png".into(),
        source: ImageSource::Data("iVBORw0KGgo=".into()),
    });
    let mut request = ChatRequest::new(
        model,
        "You are SOBA, a coding agent.",
        vec![
            capsule,
            Message::user("continue"),
            assistant,
            Message::tool_result("call_1", "fn parse() {}", false),
            Message::assistant("The parser returns early."),
            Message::new(
                Role::User,
                vec![Block::Text("Here is the screenshot.".into()), image],
            ),
        ],
        32_000,
    );
    request.tools = vec![
        read_tool(),
        ToolSchema {
            name: "bash".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        },
    ];
    request.cache_breakpoints = vec![0];
    request.reasoning = Some(ReasoningConfig {
        effort: Some("medium".into()),
        budget_tokens: Some(4_096),
    });
    request
}
