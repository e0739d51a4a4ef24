//! Builds the engine from configuration for `soba run`, `soba compact`,
//! `soba capsule`, `soba budget` and the TUI: the model (registry limits,
//! provider, client with its key), the summarizer, the native compactor,
//! the session (new or resumed) with its system prompt and tools, the
//! barrier, and a lock-free measurement of a session's log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sha2::Digest;
use soba_core::budget::{Budget, BudgetError};
use soba_core::calibration::{
    self, Calibration, CalibrationInput, Factor, MeasureInput, Measurement,
};
use soba_core::config::NativeMode;
use soba_core::input::{CountSources, InputConfig, InputSetup, LiveInput};
use soba_core::render::{self, SystemHeader};
use soba_core::summarize::Summarizer;
use soba_core::tokens::{BpeCounter, Counted, MemoCounter, MemoKey};
use soba_core::{ContextEntry, ContextSource, Entry, EntryBody, TokenCount, TokenCounter};
use soba_engine::barrier::{BarrierContext, EventSink};
use soba_engine::native::{NativeCompactor, NativeTarget, ResponsesCompactor};
use soba_engine::session::{ModelSpec, SessionConfig, SessionCore};
use soba_engine::tool::ToolRegistry;
use soba_provider::client::{Api, Endpoint, ModelClient};
use soba_provider::registry::{ModelInfo, ModelRegistry};
use soba_provider::summarizer::{LlmSummarizer, SummarizerChoice, select_summarizer};
use soba_provider::transport::client_for;
use soba_store::log::{MemoryItem, SessionHeader, SystemMinter, WriterOptions};
use tokio::sync::Mutex;

use crate::config::{ConfigError, ProviderConfig};
use crate::context::Context;
use crate::error::{Result, WorkspaceError};

/// A model resolved through the registry and the provider configuration.
#[derive(Debug, Clone)]
pub struct ModelSetup {
    /// The registry's answer (limits, tokenizer, seed, cheap model).
    pub info: ModelInfo,
    /// The provider serving it.
    pub provider: ProviderConfig,
    /// Where its context window came from.
    pub window_source: WindowSource,
    /// `models."<id>".toolCallsInText`: run one tool call written as text.
    pub text_tool_calls: bool,
}

/// Where a model's context window came from, as `soba budget` and the
/// sidebar say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSource {
    /// The built-in registry.
    Registry,
    /// `models."<id>".contextWindow` in the config (or `--set`).
    Config,
    /// Asked of the server (llama.cpp `/props`, Ollama `/api/ps` or
    /// `/api/show`) because neither knew it; the text says which field of
    /// which URL.
    Server(String),
}

impl WindowSource {
    /// Where the window of a model the registry resolved (asked for as
    /// `id`, resolved to `resolved`) came from: the config when it sets
    /// `contextWindow` for either name, else the built-in registry.
    pub fn of_resolved(registry: &ModelRegistry, id: &str, resolved: &str) -> Self {
        let overrides = registry.overrides();
        match overrides.get(id).or_else(|| overrides.get(resolved)) {
            Some(entry) if entry.context_window.is_some() => WindowSource::Config,
            _ => WindowSource::Registry,
        }
    }
}

impl std::fmt::Display for WindowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowSource::Registry => f.write_str("the built-in registry"),
            WindowSource::Config => f.write_str("the config"),
            WindowSource::Server(source) => write!(f, "the server: {source}"),
        }
    }
}

/// The smallest window a server may report: below it the system prompt and
/// the tool schemas (about 1,500 tokens) leave no room for a turn.
const MIN_SERVER_WINDOW: u64 = 4_096;

/// Windows already asked of a server in this process, by (base URL, model):
/// a session asks once.
static SERVER_WINDOWS: std::sync::Mutex<
    std::collections::BTreeMap<(String, String), soba_provider::probe::ServerWindow>,
> = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Asks the server behind `base_url` for `model`'s window, once per process;
/// blocks the calling thread (at most three 3 s requests) on a runtime of its
/// own, so it works inside or outside an async context.
fn server_window(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
) -> Result<soba_provider::probe::ServerWindow, soba_provider::probe::ProbeError> {
    let key = (base_url.to_owned(), model.to_owned());
    if let Some(known) = SERVER_WINDOWS
        .lock()
        .ok()
        .and_then(|map| map.get(&key).cloned())
    {
        return Ok(known);
    }
    let asked = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|err| soba_provider::probe::ProbeError {
                        attempts: vec![format!("cannot start a runtime: {err}")],
                    })?;
                runtime.block_on(soba_provider::probe::server_context_window(
                    base_url, model, api_key,
                ))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(soba_provider::probe::ProbeError {
                    attempts: vec!["the probe failed".to_owned()],
                })
            })
    })?;
    if let Ok(mut map) = SERVER_WINDOWS.lock() {
        map.insert(key, asked.clone());
    }
    Ok(asked)
}

/// The provider of `soba demo`'s scripted model (`demo/scripted`).
pub const DEMO_PROVIDER: &str = "demo";

impl ModelSetup {
    /// Resolves `id` with the config's `models.*` overrides and finds its
    /// provider.
    ///
    /// A model whose window neither the registry nor the config knows, on
    /// an OpenAI-compatible provider (Ollama, llama.cpp, any local server),
    /// gets the window its server reports (see [`WindowSource::Server`]).
    pub fn resolve(ctx: &Context, id: &str) -> Result<Self> {
        let mut registry = ctx.config().registry();
        let mut window_source = WindowSource::Registry;
        let info = match registry.resolve(id) {
            Ok(info) => info,
            Err(soba_provider::RegistryError::MissingContextWindow { model, key }) => {
                let asked = Self::ask_server(ctx, id).map_err(|why| {
                    WorkspaceError::from(ConfigError::from(
                        soba_provider::RegistryError::MissingContextWindow {
                            model: model.clone(),
                            key: key.clone(),
                        },
                    ))
                    .hint(why)
                })?;
                let mut entry = registry.overrides().get(id).cloned().unwrap_or_default();
                entry.context_window = Some(asked.tokens);
                registry.set_override(id, entry);
                window_source = WindowSource::Server(asked.source);
                registry.resolve(id).map_err(ConfigError::from)?
            }
            Err(err) => return Err(ConfigError::from(err).into()),
        };
        if window_source == WindowSource::Registry {
            window_source = WindowSource::of_resolved(&registry, id, &info.id);
        }
        let provider = match ctx.config().provider_for(&info.id, &info.provider) {
            Ok(provider) => provider.clone(),
            // `soba demo`'s scripted model has no API, but a kept demo
            // session opens for `soba budget`, `compact` and `capsule`
            // like any other; `client` refuses to call it.
            Err(_) if info.provider == DEMO_PROVIDER => ProviderConfig {
                name: DEMO_PROVIDER.to_owned(),
                api: Api::OpenAiChat,
                base_url: String::new(),
                api_key_env: None,
            },
            Err(err) => return Err(err.into()),
        };
        let text_tool_calls = registry
            .overrides()
            .get(id)
            .or_else(|| registry.overrides().get(&info.id))
            .and_then(|entry| entry.tool_calls_in_text)
            .unwrap_or(false);
        Ok(ModelSetup {
            info,
            provider,
            window_source,
            text_tool_calls,
        })
    }

    /// Asks the server of `id`'s provider for its window; `Err` says why
    /// that was not possible or what the server said, as a hint.
    fn ask_server(ctx: &Context, id: &str) -> Result<soba_provider::probe::ServerWindow, String> {
        let Some((provider_name, wire_model)) = id.split_once('/') else {
            return Err(
                "name the provider too (provider/model), so SOBA can ask its server".into(),
            );
        };
        let provider = ctx
            .config()
            .provider_for(id, provider_name)
            .map_err(|err| err.to_string())?;
        let hosted = ["anthropic", "openai", "openrouter"].contains(&provider_name);
        if hosted || provider.api != Api::OpenAiChat || provider.base_url.is_empty() {
            return Err(format!(
                "provider {provider_name} is not an OpenAI-compatible server SOBA can ask for the window"
            ));
        }
        let api_key = ctx
            .config()
            .endpoint(provider, &ctx.env)
            .ok()
            .and_then(|endpoint| endpoint.api_key);
        let root = soba_provider::probe::server_root(&provider.base_url);
        let window = server_window(&provider.base_url, wire_model, api_key.as_deref())
            .map_err(|err| format!("SOBA asked the server at {root} and {err}"))?;
        // Below this, the system prompt and tools leave no room to work.
        if window.tokens < MIN_SERVER_WINDOW {
            return Err(format!(
                "the server at {root} runs {wire_model} with a {}-token window ({}); SOBA needs at \
                 least {}: restart it with a larger one (llama.cpp: -c 8192; Ollama: \
                 OLLAMA_CONTEXT_LENGTH=8192)",
                soba_core::tokens::group_thousands(window.tokens),
                window.source,
                soba_core::tokens::group_thousands(MIN_SERVER_WINDOW)
            ));
        }
        Ok(window)
    }

    /// Returns the engine's model spec.
    pub fn spec(&self) -> ModelSpec {
        ModelSpec {
            id: self.info.id.clone(),
            context_window: TokenCount::new(self.info.context_window),
            max_output_tokens: TokenCount::new(self.info.max_output_tokens),
            encoding: self.info.tokenizer,
            seed: Factor::new(self.info.calibration_seed),
        }
    }

    /// Computes the limits of SPEC §4.3 for this model and configuration.
    pub fn budget(&self, ctx: &Context) -> Result<Budget> {
        let window = TokenCount::new(self.info.context_window);
        let max_output = TokenCount::new(self.info.max_output_tokens);
        Budget::compute(
            window,
            max_output,
            &ctx.config().compaction.for_window(window, max_output),
        )
        .map_err(|err| budget_error(&self.info.id, err))
    }

    /// Builds the provider client, its key read from the provider's
    /// `apiKeyEnv` variable. (The agent loop records the session's model id
    /// on the assistant messages, not the provider's reported name.)
    pub fn client(&self, ctx: &Context) -> Result<Box<dyn ModelClient>> {
        if self.provider.name == DEMO_PROVIDER && self.provider.base_url.is_empty() {
            return Err(WorkspaceError::user(format!(
                "model {} is soba demo's scripted model and cannot answer",
                self.info.id
            ))
            .hint("continue the session with a real model: pass --model ID"));
        }
        let endpoint = ctx
            .config()
            .endpoint(&self.provider, &ctx.env)
            .map_err(|err| with_onboarding(ctx, err))?;
        client_for(self.provider.api, endpoint, ctx.config().http()).map_err(|err| match err {
            // A baseUrl that is no usable URL is the user's to fix.
            soba_provider::ProviderError::InvalidConfig { .. } => WorkspaceError::user(format!(
                "provider {}: {err}",
                self.provider.name
            ))
            .hint(format!(
                "fix providers.{}.baseUrl in your config (`soba config show` says where it is set)",
                self.provider.name
            )),
            _ => {
                WorkspaceError::internal(format!("cannot build the {} client", self.provider.name))
                    .caused_by(err)
            }
        })
    }
}

/// The llama.cpp lines of the onboarding: a user config for `llama-server`
/// on its default port, checked by the CLI tests against the loader.
pub const LLAMA_CPP_CONFIG: &str = r#"{"providers": {"llamacpp": {"api": "openai-chat", "baseUrl": "http://localhost:8080/v1", "apiKeyEnv": null}}, "model": "llamacpp/local"}"#;

/// The Ollama line of the onboarding (flags only, no config file).
pub const OLLAMA_FLAGS: &str = "--model ollama/qwen3-coder";

/// Returns the short onboarding shown when there is no model to talk to
/// or its key is missing: what to set, where the config file is, how to
/// use a local server, and what runs offline. Each item is one hint.
pub fn onboarding(ctx: &Context) -> Vec<String> {
    vec![
        "to get started, export an API key: ANTHROPIC_API_KEY (uses anthropic/claude-sonnet-4-5), \
         OPENAI_API_KEY (openai/gpt-5) or OPENROUTER_API_KEY; or name a model with \
         SOBA_MODEL=provider/model or --model provider/model"
            .to_owned(),
        format!(
            "your config file is {} (JSON; \"model\": \"provider/model\" picks one for good; keys are never read from it)",
            ctx.locations.user_config.display()
        ),
        format!(
            "a local OpenAI-compatible server needs no key, and SOBA asks it for the model's window. \
             Ollama (http://localhost:11434/v1; start it with OLLAMA_CONTEXT_LENGTH=32768 ollama serve): \
             soba {OLLAMA_FLAGS}"
        ),
        format!(
            "llama.cpp (llama-server -m model.gguf -c 32768 --jinja --port 8080): put {LLAMA_CPP_CONFIG} in the config file"
        ),
        "`soba demo` runs the whole engine offline, no key needed; `soba sessions` and `soba show ID` read your sessions (imported ones too) without one".to_owned(),
    ]
}

/// Adds the onboarding to a missing model or key; other configuration
/// errors convert as usual.
pub fn with_onboarding(ctx: &Context, err: ConfigError) -> WorkspaceError {
    let onboard = matches!(err, ConfigError::NoModel | ConfigError::MissingKey { .. });
    let mut error = WorkspaceError::from(err);
    if onboard {
        error.hints.extend(onboarding(ctx));
    }
    error
}

/// Resolves the conversation model (`--model`, `SOBA_MODEL`, the config,
/// the first key set); with none, the error carries the onboarding.
pub fn resolve_model(ctx: &Context, flag: Option<&str>) -> Result<crate::config::ResolvedModel> {
    ctx.config()
        .resolve_model(flag, &ctx.env)
        .map_err(|err| with_onboarding(ctx, err))
}

/// Turns an impossible budget into a configuration error naming the model.
pub fn budget_error(model: &str, err: BudgetError) -> WorkspaceError {
    let hint = match &err {
        BudgetError::HardLimit { .. } => {
            format!("lower compaction.safetyReserveTokens or models.\"{model}\".maxOutputTokens")
        }
        _ => "fix the value with --set compaction.<key>=<value> or in config.json".to_owned(),
    };
    WorkspaceError::user(format!("model {model}: {err}")).hint(hint)
}

/// Picks the summarizer (SPEC §9.2, §18) with soba-provider's
/// [`select_summarizer`]: `compaction.summarizer.model`, else the registry's
/// cheap model of the session's provider, else none (the deterministic
/// builder). Its warnings (the conversation model summarizing) and notes
/// go to `notes`, for stderr or the TUI's conversation pane. A default
/// summarizer that cannot be used (its provider's key is missing, its
/// provider is not configured) falls back to the deterministic builder with
/// a note; a configured one is an error.
pub fn summarizer(
    ctx: &Context,
    main: &ModelSetup,
    notes: &mut Vec<String>,
) -> Result<Option<Arc<dyn Summarizer>>> {
    let configured = ctx.config().compaction.summarizer.model.clone();
    // Only a default choice may quietly fall back; a configured one fails.
    let fallback = |notes: &mut Vec<String>, id: &str, err: WorkspaceError| {
        if configured.is_some() {
            return Err(err);
        }
        notes.push(format!(
            "note: summarizer {id} unavailable ({}); capsules are built deterministically",
            err.message
        ));
        Ok(None)
    };
    // A window the conversation model's server reported holds for the
    // same model as summarizer (a local model summarizing itself).
    let mut registry = ctx.config().registry();
    if let WindowSource::Server(_) = &main.window_source {
        let mut entry = registry
            .overrides()
            .get(&main.info.id)
            .cloned()
            .unwrap_or_default();
        entry.context_window = Some(main.info.context_window);
        registry.set_override(main.info.id.clone(), entry);
    }
    let selection = match select_summarizer(configured.as_deref(), &main.info, &registry) {
        Ok(selection) => selection,
        Err(err) => {
            let id = main.info.summarizer_model.clone().unwrap_or_default();
            return fallback(notes, &id, ConfigError::from(err).into());
        }
    };
    notes.extend(
        selection
            .warnings
            .iter()
            .map(|warning| format!("warning: {warning}")),
    );
    let info = match selection.choice {
        SummarizerChoice::Deterministic => return Ok(None),
        SummarizerChoice::Model(info) => info,
    };
    let endpoint = ctx
        .config()
        .provider_for(&info.id, &info.provider)
        .and_then(|provider| {
            ctx.config()
                .endpoint(provider, &ctx.env)
                .map(|endpoint| (provider.api, endpoint))
        });
    let (api, endpoint) = match endpoint {
        Ok(found) => found,
        Err(err) => return fallback(notes, &info.id, err.into()),
    };
    match LlmSummarizer::connect(api, endpoint, ctx.config().http(), &info) {
        Ok(summarizer) => Ok(Some(Arc::new(summarizer))),
        Err(err) => {
            let err =
                WorkspaceError::internal(format!("cannot build the {} client", info.provider))
                    .caused_by(err);
            fallback(notes, &info.id, err)
        }
    }
}

/// Returns where a native item made for this model may be sent (SPEC
/// §10.3): its provider, wire model and endpoint fingerprint. The
/// fingerprint never involves the key, so this needs none.
pub fn native_target(setup: &ModelSetup) -> NativeTarget {
    NativeTarget {
        provider: setup.provider.name.clone(),
        model: setup.info.wire_model.clone(),
        endpoint_fingerprint: Endpoint::new(setup.provider.base_url.clone()).fingerprint(),
    }
}

/// Returns whether the session's model continues natively (SPEC §10.3):
/// `compaction.native` is `"auto"` and its provider speaks OpenAI Responses.
pub fn is_native(ctx: &Context, setup: &ModelSetup) -> bool {
    ctx.config().compaction.native == NativeMode::Auto && setup.provider.api == Api::OpenAiResponses
}

/// Returns the native compactor of the model (SPEC §10.3): one only with
/// `compaction.native: "auto"` on an OpenAI Responses provider, `None`
/// otherwise. Fails when the provider's key is missing.
pub fn native_compactor(
    ctx: &Context,
    setup: &ModelSetup,
) -> Result<Option<Arc<dyn NativeCompactor>>> {
    if !is_native(ctx, setup) {
        return Ok(None);
    }
    let endpoint = ctx.config().endpoint(&setup.provider, &ctx.env)?;
    ResponsesCompactor::for_session(
        ctx.config().compaction.native,
        setup.provider.api,
        &setup.provider.name,
        &setup.info.wire_model,
        endpoint,
        ctx.config().http(),
    )
    .map_err(|err| {
        WorkspaceError::internal(format!(
            "cannot build the {} native compaction client",
            setup.provider.name
        ))
        .caused_by(err)
    })
}

/// Sets the session's native compactor for its model (SPEC §10.3), or
/// clears it; call it after opening a session and after a model switch.
pub fn install_native(ctx: &Context, setup: &ModelSetup, core: &mut SessionCore) -> Result {
    core.set_native(native_compactor(ctx, setup)?);
    Ok(())
}

/// Returns the Project Memory index: every `.soba/memory/*.capsule.md`
/// whose front matter parses, by file name (SPEC §12), and a warning
/// for each capsule left out because it cannot be read safely: a symlink
/// (leading outside the workspace or not), a FIFO, a device, a folder, an
/// oversized file. Every file is read beneath the workspace root
/// ([`read_workspace_file`]); an unparsable capsule is left out silently,
/// as before.
pub fn memory_index_checked(root: &Path) -> (Vec<MemoryItem>, Vec<String>) {
    let dir = root.join(".soba").join("memory");
    let Ok(read_dir) = std::fs::read_dir(&dir) else {
        return (Vec::new(), Vec::new());
    };
    let mut files: Vec<(String, bool)> = read_dir
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().to_str()?.to_owned();
            let is_link = entry.file_type().is_ok_and(|kind| kind.is_symlink());
            name.ends_with(".capsule.md").then_some((name, is_link))
        })
        .collect();
    files.sort();
    let mut warnings = Vec::new();
    let mut items = Vec::new();
    for (name, is_link) in files {
        let rel = format!(".soba/memory/{name}");
        if is_link {
            // A capsule is a file SOBA wrote there; a link is someone else's.
            warnings.push(format!(
                "`{rel}` is a symlink; Project Memory capsules must be regular files in .soba/memory/, so it was left out of the memory index: replace the link with a copy of the capsule"
            ));
            continue;
        }
        let text =
            match read_workspace_file(root, Path::new(&rel), render::CAPSULE_FILE_MAX_BYTES as u64)
            {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => text,
                    Err(_) => continue,
                },
                Err(WorkspaceReadError::Missing) => continue,
                Err(WorkspaceReadError::TooLarge { size }) => {
                    warnings.push(format!(
                        "`{rel}` is {size} bytes, over {}; it was left out of the memory index",
                        render::CAPSULE_FILE_MAX_BYTES
                    ));
                    continue;
                }
                Err(WorkspaceReadError::Refused(why)) => {
                    warnings.push(format!("{why}; it was left out of the memory index"));
                    continue;
                }
            };
        let Ok(parsed) = render::parse_capsule_file(&text) else {
            continue;
        };
        let id = parsed
            .front
            .id
            .clone()
            .unwrap_or_else(|| name.trim_end_matches(".capsule.md").to_owned());
        items.push(MemoryItem {
            title: parsed.front.title.clone().unwrap_or_else(|| id.clone()),
            id,
            created_at: parsed.front.created_at.clone().unwrap_or_default(),
            path: rel,
        });
    }
    (items, warnings)
}

/// Renders the system prompt from a session header (SPEC §5).
pub fn system_prompt(header: &SessionHeader) -> String {
    render::system_prompt(&SystemHeader {
        workspace_root: header.cwd.clone(),
        os: header.os.clone(),
        date: header.created_at.chars().take(10).collect(),
        memory: header
            .memory
            .iter()
            .map(|item| render::MemoryItem {
                title: item.title.clone(),
                date: item.created_at.chars().take(10).collect(),
                id: item.id.clone(),
            })
            .collect(),
    })
}

/// Measures a session's effective tokens (SPEC §4.2) from its log as
/// read, without opening it for writing: readers take no lock (SPEC §3.2),
/// so this works while another process has the session open. The model
/// input is built as [`SessionCore`] builds it (same system prompt, tool
/// schemas, capsule renderer and native match), and measured with the
/// calibration factor of `setup`'s model, as [`SessionCore::measure`]
/// does on a session of that model; a test checks that the two agree.
/// Returns the calibration too, for `soba budget` to show what it learned,
/// and where the messages' counts came from.
pub fn measure_log(
    ctx: &Context,
    setup: &ModelSetup,
    header: &SessionHeader,
    mut path: Vec<Entry>,
    tools: &ToolRegistry,
) -> Result<(Measurement, Calibration, CountSources)> {
    let budget = setup.budget(ctx)?;
    let config = session_config(ctx, setup, header, tools);
    let memo_path = count_memo_path(ctx);
    let memo = Arc::new(MemoCounter::new(
        Arc::new(BpeCounter::new(setup.info.tokenizer)),
        memo_path
            .as_deref()
            .map(load_count_memo)
            .unwrap_or_default(),
    ));
    let counter: Arc<dyn TokenCounter> = memo.clone();
    let mut input_setup = InputSetup::new(counter, InputConfig::new(&budget, &config.compaction))
        .with_system_prompt(config.system_prompt.clone())
        .with_tool_schemas(config.tool_schemas.clone())
        .with_renderer(Arc::new(|capsule| {
            render::capsule_input(&render::CapsuleView::from(capsule))
        }));
    if is_native(ctx, setup) {
        input_setup = input_setup.with_native_match(native_target(setup).native_match());
    }
    // The log was read for this measurement alone: the input takes the
    // messages' content as it reads them and keeps only their counts
    // (calibration needs only usage).
    let live = LiveInput::measure_consuming(input_setup, &mut path);
    let path = path.as_slice();
    // The model the next request goes to. It is the session's own (what
    // `SessionCore::model_id` reports) unless `--model` names another, and
    // then the session is measured as a switch would leave it: the last
    // response was another model's, so the source is `estimated`.
    let model = config.model.id.as_str();
    let calibration = calibration::calibrate(
        path,
        &CalibrationInput {
            model,
            seed: config.model.seed,
            context_window: Some(config.model.context_window),
        },
    );
    let measurement = calibration::measure(&MeasureInput {
        path,
        fixed_tokens: live.fixed_tokens,
        messages: &live.messages,
        model,
        factor: calibration.factor,
        tool_set_unchanged: true,
    });
    if memo.added()
        && let Some(memo_path) = &memo_path
    {
        save_count_memo(memo_path, &memo.entries());
    }
    Ok((measurement, calibration, live.count_sources))
}

/// The most counts the memo file keeps.
const COUNT_MEMO_ENTRIES: usize = 256;
/// The largest memo file read.
const COUNT_MEMO_BYTES: u64 = 64 * 1024;

/// Where [`measure_log`] remembers the counts of the texts it counts every
/// run (system prompt, tool schemas, capsules): `token-counts.json` beside
/// the logs folder (`$SOBA_HOME`, else `$XDG_STATE_HOME/soba`).
fn count_memo_path(ctx: &Context) -> Option<PathBuf> {
    ctx.locations
        .logs_dir
        .parent()
        .map(|dir| dir.join("token-counts.json"))
}

/// Reads the memo file: `{"version": 1, "counts": {"<sha256 hex>": [n,
/// estimated]}}`. A missing, damaged or foreign file is an empty memo: it
/// only saves time, and the counts are taken again.
fn load_count_memo(path: &Path) -> Vec<(MemoKey, Counted)> {
    let Ok(text) = soba_store::untrusted::read_untrusted_to_string(path, COUNT_MEMO_BYTES) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_str::<Value>(&text) else {
        tracing::debug!("{} is not JSON; counting again", path.display());
        return Vec::new();
    };
    if value.get("version").and_then(Value::as_u64) != Some(1) {
        return Vec::new();
    }
    let Some(counts) = value.get("counts").and_then(Value::as_object) else {
        return Vec::new();
    };
    counts
        .iter()
        .filter_map(|(hex, count)| {
            let key = parse_memo_key(hex)?;
            let n = count.get(0)?.as_u64()?;
            let estimated = count.get(1)?.as_bool()?;
            Some((
                key,
                Counted {
                    n: TokenCount::new(n),
                    estimated,
                },
            ))
        })
        .take(COUNT_MEMO_ENTRIES)
        .collect()
}

fn parse_memo_key(hex: &str) -> Option<MemoKey> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut key = [0u8; 32];
    for (idx, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * idx..2 * idx + 2], 16).ok()?;
    }
    Some(key)
}

/// Writes the memo file whole (a temporary file renamed over it), at most
/// [`COUNT_MEMO_ENTRIES`] counts; a failure is logged and changes nothing.
fn save_count_memo(path: &Path, entries: &[(MemoKey, Counted)]) {
    let counts: serde_json::Map<String, Value> = entries
        .iter()
        .take(COUNT_MEMO_ENTRIES)
        .map(|(key, counted)| {
            let hex: String = key.iter().map(|byte| format!("{byte:02x}")).collect();
            (hex, serde_json::json!([counted.n.get(), counted.estimated]))
        })
        .collect();
    let text = serde_json::json!({"version": 1, "counts": counts}).to_string();
    let write = || -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.persist(path).map_err(|err| err.error)?;
        Ok(())
    };
    if let Err(err) = write() {
        tracing::debug!("cannot save the token-count memo {}: {err}", path.display());
    }
}

/// The summarizer's time per chunk on a local server when
/// `compaction.timeoutMs` is not set: a small model on a CPU reads a few
/// thousand tokens and writes a summary in tens of seconds, not 15.
pub const LOCAL_SUMMARIZER_TIMEOUT_MS: u64 = 180_000;

/// The session's compaction configuration: small windows get proportional
/// defaults (the engine takes the configuration as given; the CLI scales it
/// once here), and a local model's summarizer more time.
pub fn compaction_for(ctx: &Context, setup: &ModelSetup) -> soba_core::config::CompactionConfig {
    let mut compaction = ctx.config().compaction.for_window(
        TokenCount::new(setup.info.context_window),
        TokenCount::new(setup.info.max_output_tokens),
    );
    let local = matches!(setup.window_source, WindowSource::Server(_))
        || soba_provider::registry::is_local_provider(&setup.info.provider)
        || summarizer_is_local(ctx, compaction.summarizer.model.as_deref());
    if local && !compaction.explicit_keys.contains("timeoutMs") {
        compaction.timeout_ms = LOCAL_SUMMARIZER_TIMEOUT_MS;
    }
    compaction
}

/// Whether the configured summarizer runs on a local server: a local
/// provider's name (`llamacpp/…`), or a provider whose `baseUrl` is on
/// this machine. A cloud session with a local summarizer waits for it as
/// long as a local session does.
fn summarizer_is_local(ctx: &Context, model: Option<&str>) -> bool {
    let Some((provider, _)) = model.and_then(|model| model.split_once('/')) else {
        return false;
    };
    soba_provider::registry::is_local_provider(provider)
        || ctx
            .config()
            .providers
            .get(provider)
            .is_some_and(|config| soba_provider::probe::is_loopback_url(&config.base_url))
}

fn session_config(
    ctx: &Context,
    setup: &ModelSetup,
    header: &SessionHeader,
    tools: &ToolRegistry,
) -> SessionConfig {
    SessionConfig {
        model: setup.spec(),
        compaction: compaction_for(ctx, setup),
        system_prompt: system_prompt(header),
        tool_schemas: soba_engine::agent::tool_schema_values(tools),
        counter: None,
    }
}

fn writer_options(ctx: &Context) -> WriterOptions {
    WriterOptions {
        durability: ctx.config().durability,
        minter: Box::new(SystemMinter),
    }
}

/// Creates a new session in the workspace's sessions folder, recording the
/// model as its first entry (`model_change`); returns it with a warning
/// for each Project Memory capsule left out (see [`memory_index_checked`]).
pub fn create_session(
    ctx: &Context,
    setup: &ModelSetup,
    tools: &ToolRegistry,
) -> Result<(SessionCore, Vec<String>)> {
    let mut minter = SystemMinter;
    let mut header = SessionHeader::new(&mut minter, ctx.workspace.root.display().to_string());
    let (memory, warnings) = memory_index_checked(&ctx.workspace.root);
    header.memory = memory;
    let path = soba_store::reader::session_path(&ctx.locations.sessions_dir, &header.id);
    let config = session_config(ctx, setup, &header, tools);
    let mut core = SessionCore::create(&path, header, config, writer_options(ctx))?;
    core.append(EntryBody::ModelChange {
        model: setup.info.id.clone(),
    })?;
    Ok((core, warnings))
}

/// Opens an existing session for writing; the returned lines are the
/// reader's diagnostics.
pub fn open_session(
    ctx: &Context,
    path: &Path,
    setup: &ModelSetup,
    tools: &ToolRegistry,
) -> Result<(SessionCore, Vec<String>)> {
    let header = soba_store::reader::read_header(path).map_err(|reason| {
        WorkspaceError::user(format!(
            "{} is not a soba session ({reason})",
            path.display()
        ))
        .hint("import other agents' transcripts with `soba import`")
    })?;
    let config = session_config(ctx, setup, &header, tools);
    Ok(SessionCore::open(path, config, writer_options(ctx))?)
}

/// The largest `AGENTS.md` snapshotted; a larger one is skipped with a
/// warning rather than filling the context.
pub const AGENTS_MD_MAX_BYTES: u64 = 1024 * 1024;

/// The largest skill file (`.soba/skills/<name>.md`) soba reads: 1 MiB.
pub const SKILL_MAX_BYTES: u64 = 1024 * 1024;

/// Why [`read_workspace_file`] gave no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceReadError {
    /// Nothing is at the path.
    Missing,
    /// The file holds more than the limit (its size, as far as read).
    TooLarge {
        /// The size in bytes, at least the limit plus one.
        size: u64,
    },
    /// Refused or unreadable: the message names the file, what it is or
    /// where it leads, and what to do.
    Refused(String),
}

impl std::fmt::Display for WorkspaceReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkspaceReadError::Missing => f.write_str("no such file in the workspace"),
            WorkspaceReadError::TooLarge { size } => write!(f, "it is {size} bytes, too large"),
            WorkspaceReadError::Refused(why) => f.write_str(why),
        }
    }
}

/// Reads `rel`, a workspace file SOBA reads on its own or for the user
/// (`AGENTS.md`, a skill, a Project Memory capsule, an `@file`, a capsule
/// to load, the file an edit would change), at most `limit` bytes.
///
/// It is opened as the file tools open theirs (`Workspace::open_read`):
/// checked by name for a clear message, then resolved by the kernel
/// beneath a handle on the root, so a link swapped in after the check
/// cannot lead outside; the type is checked on the handle (a FIFO is
/// refused without blocking) and the cap holds while reading.
pub fn read_workspace_file(
    root: &Path,
    rel: &Path,
    limit: u64,
) -> Result<Vec<u8>, WorkspaceReadError> {
    use soba_engine::tool::ToolError;
    use std::io::Read as _;
    let workspace = soba_engine::tool::Workspace::new(root)
        .map_err(|err| WorkspaceReadError::Refused(err.to_string()))?;
    let shown = rel.display().to_string();
    let (file, metadata, _) = workspace.open_read(&shown).map_err(|err| match err {
        ToolError::NotFound { .. } => WorkspaceReadError::Missing,
        ToolError::SymlinkEscape { .. }
        | ToolError::OutsideWorkspace { .. }
        | ToolError::DanglingSymlink { .. } => WorkspaceReadError::Refused(format!(
            "{err}; replace the link with a copy of the file if soba should read it"
        )),
        ToolError::NotRegular { kind, .. } => WorkspaceReadError::Refused(format!(
            "`{shown}` is {kind}, not a regular file: soba reads only regular files here; put the content in a regular file"
        )),
        ToolError::IsDirectory { .. } => WorkspaceReadError::Refused(format!(
            "`{shown}` is a directory, not a regular file: soba reads only regular files here; put the content in a regular file"
        )),
        ToolError::Io { ref source, .. } => WorkspaceReadError::Refused(format!("{err}: {source}")),
        other => WorkspaceReadError::Refused(other.to_string()),
    })?;
    if metadata.len() > limit {
        return Err(WorkspaceReadError::TooLarge {
            size: metadata.len(),
        });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|err| WorkspaceReadError::Refused(format!("cannot read `{shown}`: {err}")))?;
    if bytes.len() as u64 > limit {
        return Err(WorkspaceReadError::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Reads `AGENTS.md` at the workspace root, else `CLAUDE.md`: its name and
/// text, `None` when neither exists, or the warning to show when it cannot
/// be used (not a regular file, over [`AGENTS_MD_MAX_BYTES`], unreadable).
pub fn read_agents_md(root: &Path) -> Result<Option<(&'static str, String)>, String> {
    let Some((name, _)) = ["AGENTS.md", "CLAUDE.md"]
        .iter()
        .map(|name| (*name, root.join(name)))
        .find(|(_, path)| path.symlink_metadata().is_ok())
    else {
        return Ok(None);
    };
    match read_workspace_file(root, Path::new(name), AGENTS_MD_MAX_BYTES) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(|text| Some((name, text)))
            .map_err(|_| format!("{name} is not UTF-8 text; it was not added to the context")),
        Err(WorkspaceReadError::Missing) => Ok(None),
        Err(WorkspaceReadError::TooLarge { size }) => Err(format!(
            "{name} is {size} bytes, over {AGENTS_MD_MAX_BYTES}; it was not added to the context"
        )),
        Err(WorkspaceReadError::Refused(why)) => {
            Err(format!("{why}; {name} was not added to the context"))
        }
    }
}

/// Snapshots `AGENTS.md` at the workspace root, else `CLAUDE.md`, as an
/// `agents_md` context entry when the path has none yet or the file's hash
/// changed (SPEC §5): call it at session start and at every turn start.
/// Returns the appended entry, if any, and warnings.
pub fn snapshot_agents_md(
    core: &mut SessionCore,
    root: &Path,
) -> Result<(Option<Entry>, Vec<String>)> {
    let mut warnings = Vec::new();
    let (name, text) = match read_agents_md(root) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok((None, warnings)),
        Err(warning) => {
            warnings.push(warning);
            return Ok((None, warnings));
        }
    };
    let sha256: String = sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    // The snapshot in force: on the live stretch, else pinned in the
    // latest capsule's state (the model input holds whichever applies).
    let current = core
        .live()
        .pinned_state()
        .agents_md
        .map(|context| context.sha256);
    if current.as_deref() == Some(sha256.as_str()) {
        return Ok((None, warnings));
    }
    let entry = core.append(EntryBody::Context(ContextEntry {
        source: ContextSource::AgentsMd,
        path: name.to_owned(),
        sha256,
        text,
    }))?;
    Ok((Some(entry), warnings))
}

/// Returns the model a session last used: its latest `model_change` on the
/// path, else the model in its latest capsule's state.
pub fn session_model(path: &[Entry]) -> Option<String> {
    model_on_path(path.iter())
}

/// [`session_model`] over entries borrowed from elsewhere (a log's path).
pub fn model_on_path<'a>(path: impl DoubleEndedIterator<Item = &'a Entry>) -> Option<String> {
    path.rev().find_map(|entry| match &entry.body {
        EntryBody::ModelChange { model } => Some(model.clone()),
        EntryBody::Capsule(capsule) if !capsule.state.model.is_empty() => {
            Some(capsule.state.model.clone())
        }
        _ => None,
    })
}

/// Returns the model a command on an existing session uses: `--model`,
/// else the session's own model, else the configured one.
pub fn model_for_session(ctx: &Context, flag: Option<&str>, path: &[Entry]) -> Result<String> {
    model_for_session_with(ctx, flag, path, None)
}

/// Like [`model_for_session`], also trying the model an imported session's
/// header recorded (`importedFrom.model`) before the configured one.
pub fn model_for_session_with(
    ctx: &Context,
    flag: Option<&str>,
    path: &[Entry],
    header: Option<&SessionHeader>,
) -> Result<String> {
    if let Some(model) = flag.map(str::trim).filter(|m| !m.is_empty()) {
        return Ok(model.to_owned());
    }
    if let Some(model) = session_model(path) {
        return Ok(model);
    }
    let imported = header
        .and_then(|header| header.imported_from.as_ref())
        .and_then(|from| from.extra.get("model"))
        .and_then(serde_json::Value::as_str);
    if let Some(model) = imported {
        return Ok(model.to_owned());
    }
    Ok(ctx.config().resolve_model(None, &ctx.env)?.id)
}

/// Builds the barrier around an open session.
pub fn barrier(
    core: Arc<Mutex<SessionCore>>,
    events: EventSink,
    summarizer: Option<Arc<dyn Summarizer>>,
) -> BarrierContext {
    BarrierContext {
        core,
        events,
        summarizer,
        operation_ids: Arc::new(|| format!("op_{}", uuid::Uuid::now_v7().simple())),
        clock: Arc::new(|| format!("{:.3}", jiff::Timestamp::now())),
    }
}

/// Starts the async runtime the engine runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| WorkspaceError::internal("cannot start the async runtime").caused_by(err))
}

/// Returns how many hex digits make every id of the session log at `log`
/// unique (at least 4): the one length ids of that session are printed
/// with. An unreadable log gives the minimum.
pub fn short_id_len(log: &Path) -> usize {
    soba_store::reader::entry_ids(log)
        .map(|ids| soba_core::id::shortest_unique_len(ids.iter()))
        .unwrap_or(soba_core::id::MIN_SHORT_HEX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use soba_core::calibration::MeasurementSource;
    use soba_core::{Block, EntryId, IdKind, Message, Role, Usage};
    use soba_engine::barrier::{Forced, Preflight};
    use soba_provider::fake::{FakeServer, Script};
    use tokio_util::sync::CancellationToken;

    use crate::context::Options;
    use crate::paths::Env;

    /// A context in a temporary home whose model `fake/codex` is served
    /// through OpenAI Responses by `server`, with `compaction` merged into
    /// small settings and the deterministic summarizer.
    fn context(dir: &Path, server: &FakeServer, compaction: serde_json::Value) -> Context {
        let home = dir.join("home");
        let ws = dir.join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let mut settings = json!({
            "summarizer": {"model": "deterministic"},
            "keepRecentTokens": 256,
            "compactOnTurnComplete": false
        });
        for (key, value) in compaction.as_object().unwrap() {
            settings[key] = value.clone();
        }
        let config = json!({
            "model": "fake/codex",
            "providers": {
                "fake": {"api": "openai-responses", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"},
                "chat": {"api": "openai-chat", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}
            },
            "models": {
                "fake/codex": {"contextWindow": 64000, "maxOutputTokens": 4000},
                "chat/model": {"contextWindow": 64000, "maxOutputTokens": 4000}
            },
            "compaction": settings
        });
        std::fs::write(home.join("config.json"), config.to_string()).unwrap();
        let env = Env::from_pairs([
            ("SOBA_HOME", home.display().to_string()),
            ("HOME", dir.display().to_string()),
            ("FAKE_KEY", "sk-fake".to_owned()),
        ]);
        Context::load_with(env, &ws, &Options::default()).unwrap()
    }

    /// Appends three answered user turns, the last answer carrying usage.
    fn seed(core: &mut SessionCore) {
        for turn in 0..3 {
            let words: String = (0..300).map(|i| format!("t{turn}w{i} ")).collect();
            core.append_message(Message::user(format!("turn {turn}: {words}")))
                .unwrap();
            let mut answer = Message::new(
                Role::Assistant,
                vec![Block::Text(format!("answered turn {turn}"))],
            );
            answer.model = Some("fake/codex".into());
            answer.usage = Some(Usage {
                input: 1_000 * (turn + 1),
                output: 10,
                ..Usage::default()
            });
            core.append_message(answer).unwrap();
        }
    }

    fn read_path(path: &Path) -> (SessionHeader, Vec<Entry>) {
        let log = soba_store::reader::read_log(path).unwrap();
        let entries = log.path().iter().map(|l| l.entry.clone()).collect();
        (log.header().cloned().unwrap(), entries)
    }

    #[test]
    fn the_lock_free_measurement_is_the_open_sessions() {
        let runtime = runtime().unwrap();
        let server = runtime.block_on(FakeServer::start()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), &server, json!({"native": "auto"}));
        let setup = ModelSetup::resolve(&ctx, "fake/codex").unwrap();
        let tools = ToolRegistry::builtin();
        let (mut core, _) = create_session(&ctx, &setup, &tools).unwrap();
        install_native(&ctx, &setup, &mut core).unwrap();
        assert_eq!(
            core.native_compactor().map(|c| c.target().clone()),
            Some(native_target(&setup))
        );
        seed(&mut core);
        let log_path = core.log_path().to_path_buf();
        // Before any capsule: the last answer's usage plus what follows.
        let (header, path) = read_path(&log_path);
        let measured = measure_log(&ctx, &setup, &header, path.clone(), &tools)
            .unwrap()
            .0;
        assert_eq!(measured, core.measure());
        assert_eq!(measured.source, MeasurementSource::ProviderUsage);

        // A /compact with native continuation: the capsule carries the item.
        server.push_for(
            "/responses/compact",
            Script::compaction("gAAAA-native-item"),
        );
        let core = Arc::new(Mutex::new(core));
        let barrier = barrier(core.clone(), Arc::new(|_| {}), None);
        let decided = runtime
            .block_on(barrier.preflight(
                Some(Forced::User { instructions: None }),
                &CancellationToken::new(),
            ))
            .unwrap();
        assert!(matches!(decided, Preflight::Compacted(_)), "{decided:?}");
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].path, "/responses/compact");
        assert_eq!(requests[0].body["model"], json!("codex"));
        let core = core.blocking_lock();
        let (header, path) = read_path(&log_path);
        let native = path.iter().rev().find_map(|entry| match &entry.body {
            EntryBody::Capsule(capsule) => capsule.native.clone(),
            _ => None,
        });
        assert!(
            native.is_some_and(|n| n.item.contains("gAAAA-native-item")),
            "the capsule stores the native item"
        );
        let measured = measure_log(&ctx, &setup, &header, path.clone(), &tools)
            .unwrap()
            .0;
        assert_eq!(measured, core.measure());
        // The native item, not the rendered capsule, is what is measured.
        let off = context(dir.path(), &server, json!({"native": "off"}));
        let without = measure_log(&off, &setup, &header, path.clone(), &tools)
            .unwrap()
            .0;
        assert_ne!(without.tokens, measured.tokens);
    }

    #[test]
    fn the_summarizer_is_selected_with_its_warning_and_fallback() {
        let runtime = runtime().unwrap();
        let server = runtime.block_on(FakeServer::start()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let check = |summarizer: serde_json::Value, model: &str| {
            let ctx = context(
                dir.path(),
                &server,
                json!({"summarizer": {"model": summarizer}}),
            );
            let setup = ModelSetup::resolve(&ctx, model).unwrap();
            let mut notes = Vec::new();
            let chosen = super::summarizer(&ctx, &setup, &mut notes)
                .map(|chosen| chosen.map(|s| s.model().to_owned()))
                .map_err(|err| err.message);
            (chosen, notes)
        };
        // The conversation model, named: used, with SPEC §9.2's warning.
        let (chosen, notes) = check(json!("fake/codex"), "fake/codex");
        assert_eq!(chosen, Ok(Some("fake/codex".to_owned())));
        assert_eq!(
            notes,
            [
                "warning: compaction.summarizer.model is the conversation model fake/codex: \
              each compaction costs about as much as a turn; name a cheaper model or \"deterministic\""
            ]
        );
        // Another model: no warning; the deterministic builder: no model.
        assert_eq!(
            check(json!("chat/model"), "fake/codex"),
            (Ok(Some("chat/model".to_owned())), Vec::new())
        );
        assert_eq!(
            check(json!("deterministic"), "fake/codex"),
            (Ok(None), Vec::new())
        );
        // The registry's cheap model by default, whose key is not set: the
        // deterministic builder, with a note.
        let (chosen, notes) = check(serde_json::Value::Null, "openai/gpt-5");
        assert_eq!(chosen, Ok(None));
        assert_eq!(
            notes,
            [
                "note: summarizer openai/gpt-5-mini unavailable (OPENAI_API_KEY is not set: \
              export the API key of provider openai in OPENAI_API_KEY); capsules are built deterministically"
            ]
        );
        // The same model named explicitly: an error.
        let (chosen, _) = check(json!("openai/gpt-5-mini"), "fake/codex");
        assert_eq!(
            chosen,
            Err("OPENAI_API_KEY is not set: export the API key of provider openai in OPENAI_API_KEY".to_owned())
        );
    }

    #[test]
    fn native_continuation_needs_auto_and_openai_responses() {
        let runtime = runtime().unwrap();
        let server = runtime.block_on(FakeServer::start()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let check = |native: &str, model: &str, expected: bool| {
            let ctx = context(dir.path(), &server, json!({"native": native}));
            let setup = ModelSetup::resolve(&ctx, model).unwrap();
            assert_eq!(is_native(&ctx, &setup), expected, "{native} {model}");
            let compactor = native_compactor(&ctx, &setup).unwrap();
            assert_eq!(
                compactor.map(|c| c.target().clone()),
                expected.then(|| native_target(&setup)),
                "{native} {model}"
            );
        };
        check("auto", "fake/codex", true);
        check("off", "fake/codex", false);
        check("auto", "chat/model", false);
    }

    fn entry(n: u128, body: EntryBody) -> Entry {
        Entry {
            id: EntryId::from_uuid(IdKind::Entry, n),
            parent_id: None,
            timestamp: String::new(),
            body,
        }
    }

    #[test]
    fn session_model_is_the_latest_change() {
        let path = vec![
            entry(
                1,
                EntryBody::ModelChange {
                    model: "a/x".into(),
                },
            ),
            entry(
                2,
                EntryBody::Message(soba_core::MessageEntry {
                    message: Message::user("hi"),
                    tokens: None,
                }),
            ),
            entry(
                3,
                EntryBody::ModelChange {
                    model: "b/y".into(),
                },
            ),
        ];
        assert_eq!(session_model(&path).as_deref(), Some("b/y"));
        assert_eq!(session_model(&path[1..2]), None);
    }

    /// Makes `path` a FIFO.
    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Runs `read` on a thread and fails if it does not return in 5 s.
    fn promptly<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(read());
        });
        receiver
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("returned within 5 s")
    }

    #[test]
    fn agents_md_must_be_a_regular_file_of_at_most_1_mib() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let agents = root.join("AGENTS.md");
        let read = |root: &Path| {
            let root = root.to_path_buf();
            promptly(move || read_agents_md(&root))
        };
        assert_eq!(read(&root), Ok(None));
        std::fs::write(root.join("CLAUDE.md"), "be brief").unwrap();
        assert_eq!(read(&root), Ok(Some(("CLAUDE.md", "be brief".to_owned()))));
        mkfifo(&agents);
        assert_eq!(
            read(&root),
            Err("`AGENTS.md` is a FIFO (named pipe), not a regular file: soba reads only regular files here; put the content in a regular file; AGENTS.md was not added to the context".to_owned())
        );
        std::fs::remove_file(&agents).unwrap();
        let folder = root.join("folder");
        std::fs::create_dir_all(&folder).unwrap();
        std::os::unix::fs::symlink(&folder, &agents).unwrap();
        let warning = read(&root).unwrap_err();
        assert!(
            warning.contains("is a directory, not a regular file"),
            "{warning}"
        );
        std::fs::remove_file(&agents).unwrap();
        // A link out of the workspace is refused before it is read: a
        // device, or a secret a cloned repository points at.
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("credentials");
        std::fs::write(&secret, "aws_secret_access_key = wJalr").unwrap();
        for target in [
            Path::new("/dev/zero"),
            Path::new("/dev/stdin"),
            secret.as_path(),
        ] {
            std::os::unix::fs::symlink(target, &agents).unwrap();
            let warning = read(&root).unwrap_err();
            assert!(
                warning.contains("outside the workspace root")
                    && warning.ends_with("; AGENTS.md was not added to the context"),
                "{warning}"
            );
            std::fs::remove_file(&agents).unwrap();
        }
        let big = std::fs::File::create(&agents).unwrap();
        big.set_len(AGENTS_MD_MAX_BYTES + 1).unwrap();
        assert_eq!(
            read(&root),
            Err("AGENTS.md is 1048577 bytes, over 1048576; it was not added to the context".into())
        );
    }

    #[test]
    fn memory_index_skips_special_files() {
        let dir = tempfile::tempdir().unwrap();
        let memory = dir.path().join(".soba/memory");
        std::fs::create_dir_all(&memory).unwrap();
        mkfifo(&memory.join("fifo.capsule.md"));
        std::os::unix::fs::symlink("/dev/zero", memory.join("zero.capsule.md")).unwrap();
        std::fs::create_dir_all(memory.join("dir.capsule.md")).unwrap();
        let root = dir.path().to_path_buf();
        assert_eq!(promptly(move || memory_index_checked(&root).0), Vec::new());
    }

    #[test]
    fn memory_index_reads_front_matter() {
        let dir = tempfile::tempdir().unwrap();
        let memory = dir.path().join(".soba/memory");
        std::fs::create_dir_all(&memory).unwrap();
        let headings: String = soba_core::capsule::NARRATIVE_HEADINGS
            .iter()
            .map(|h| format!("## {h}\n(none recorded)\n\n"))
            .collect();
        std::fs::write(
            memory.join("ck_1.capsule.md"),
            format!("---\nschemaVersion: 1\nid: \"ck_1\"\ntitle: \"Auth refactor\"\ncreatedAt: \"2025-03-01T10:00:00Z\"\n---\n{headings}"),
        )
        .unwrap();
        std::fs::write(memory.join("broken.capsule.md"), "no front matter").unwrap();
        let (index, _) = memory_index_checked(dir.path());
        assert_eq!(index.len(), 1);
        assert_eq!(index[0].title, "Auth refactor");
        assert_eq!(index[0].path, ".soba/memory/ck_1.capsule.md");
    }

    #[test]
    fn a_symlinked_or_special_memory_capsule_is_left_out_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let memory = root.join(".soba/memory");
        std::fs::create_dir_all(&memory).unwrap();
        let headings: String = soba_core::capsule::NARRATIVE_HEADINGS
            .iter()
            .map(|h| format!("## {h}\n(none recorded)\n\n"))
            .collect();
        let capsule =
            format!("---\nschemaVersion: 1\nid: \"ck_1\"\ntitle: \"Outside\"\n---\n{headings}");
        let outside = dir.path().join("outside.capsule.md");
        std::fs::write(&outside, &capsule).unwrap();
        std::os::unix::fs::symlink(&outside, memory.join("a-link.capsule.md")).unwrap();
        mkfifo(&memory.join("b-fifo.capsule.md"));
        let (index, warnings) = promptly(move || memory_index_checked(&root));
        assert_eq!(index, Vec::new());
        assert_eq!(
            warnings,
            [
                "`.soba/memory/a-link.capsule.md` is a symlink; Project Memory capsules must be regular files in .soba/memory/, so it was left out of the memory index: replace the link with a copy of the capsule",
                "`.soba/memory/b-fifo.capsule.md` is a FIFO (named pipe), not a regular file: soba reads only regular files here; put the content in a regular file; it was left out of the memory index",
            ]
        );
    }

    /// Swaps `name` in `root` between a regular file and a symlink to
    /// `secret` outside until `stop` is set.
    fn swap_with_a_link(
        root: PathBuf,
        name: &'static str,
        secret: PathBuf,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<usize> {
        std::thread::spawn(move || {
            let mut n_swaps = 0;
            let target = root.join(name);
            let link = root.join(".swap-link");
            let file = root.join(".swap-file");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&secret, &link).unwrap();
                std::fs::rename(&link, &target).unwrap();
                std::fs::write(&file, "inside").unwrap();
                std::fs::rename(&file, &target).unwrap();
                n_swaps += 1;
            }
            n_swaps
        })
    }

    #[test]
    fn workspace_files_read_on_their_own_never_follow_a_link_swapped_in() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join(".soba/skills")).unwrap();
        let secret = dir.path().join("credentials");
        std::fs::write(&secret, "aws_secret_access_key = wJalr").unwrap();
        std::fs::write(root.join("AGENTS.md"), "inside").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = swap_with_a_link(root.clone(), "AGENTS.md", secret, stop.clone());
        let mut n_read = 0;
        for _ in 0..3000 {
            // The name check passes on the regular file; the open must not
            // follow the link put there an instant later.
            if let Ok(Some((_, text))) = read_agents_md(&root) {
                assert_eq!(text, "inside");
                n_read += 1;
            }
            if let Ok(bytes) = read_workspace_file(&root, Path::new("AGENTS.md"), 1024) {
                assert_eq!(bytes, b"inside");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Only escapes are asserted: how many reads land on the regular
        // file depends on the scheduler.
        let _ = (swapper.join().unwrap(), n_read);
    }
}
