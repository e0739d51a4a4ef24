//! Builds the engine from configuration for `soba run`, `soba compact` and
//! `soba capsule`: the model (registry limits, provider, client with its
//! key), the summarizer, the session (new or resumed) with its system
//! prompt and tools, and the barrier.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::Digest;
use soba_core::budget::{Budget, BudgetError};
use soba_core::calibration::Factor;
use soba_core::render::{self, SystemHeader};
use soba_core::summarize::{
    SummarizeError, Summarizer, SummaryFuture, SummaryRequest, SummaryResponse,
};
use soba_core::{ContextEntry, ContextSource, Entry, EntryBody, Message, TokenCount};
use soba_engine::barrier::{BarrierContext, EventSink};
use soba_engine::session::{ModelSpec, SessionConfig, SessionCore};
use soba_engine::tool::ToolRegistry;
use soba_provider::client::{ModelClient, NeverCancel};
use soba_provider::registry::ModelInfo;
use soba_provider::request::{ChatRequest, StreamEvent};
use soba_provider::transport::{HttpConfig, client_for};
use soba_store::log::{MemoryItem, SessionHeader, SystemMinter, WriterOptions};
use tokio::sync::Mutex;

use crate::config::{ConfigError, ProviderConfig};
use crate::context::Context;
use crate::error::{CliError, CliResult};

/// A model resolved through the registry and the provider configuration.
#[derive(Debug, Clone)]
pub struct ModelSetup {
    /// The registry's answer (limits, tokenizer, seed, cheap model).
    pub info: ModelInfo,
    /// The provider serving it.
    pub provider: ProviderConfig,
}

impl ModelSetup {
    /// Resolves `id` with the config's `models.*` overrides and finds its
    /// provider.
    pub fn resolve(ctx: &Context, id: &str) -> CliResult<Self> {
        let info = ctx
            .config()
            .registry()
            .resolve(id)
            .map_err(ConfigError::from)?;
        let provider = ctx.config().provider_for(&info.id, &info.provider)?.clone();
        Ok(ModelSetup { info, provider })
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
    pub fn budget(&self, ctx: &Context) -> CliResult<Budget> {
        Budget::compute(
            TokenCount::new(self.info.context_window),
            TokenCount::new(self.info.max_output_tokens),
            &ctx.config().compaction,
        )
        .map_err(|err| budget_error(&self.info.id, err))
    }

    /// Builds the provider client, its key read from the provider's
    /// `apiKeyEnv` variable.
    pub fn client(&self, ctx: &Context) -> CliResult<Box<dyn ModelClient>> {
        let endpoint = ctx.config().endpoint(&self.provider, &ctx.env)?;
        client_for(self.provider.api, endpoint, HttpConfig::default()).map_err(|err| {
            CliError::internal(format!("cannot build the {} client", self.provider.name))
                .caused_by(err)
        })
    }
}

/// Turns an impossible budget into a configuration error naming the model.
pub fn budget_error(model: &str, err: BudgetError) -> CliError {
    let hint = match &err {
        BudgetError::HardLimit { .. } => {
            format!("lower compaction.safetyReserveTokens or models.\"{model}\".maxOutputTokens")
        }
        _ => "fix the value with --set compaction.<key>=<value> or in config.json".to_owned(),
    };
    CliError::user(format!("model {model}: {err}")).hint(hint)
}

/// The LLM summarizer: a model client asked with the summarize prompt.
pub struct ClientSummarizer {
    client: Box<dyn ModelClient>,
    model_id: String,
    wire_model: String,
    window: TokenCount,
}

impl std::fmt::Debug for ClientSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSummarizer")
            .field("model", &self.model_id)
            .finish_non_exhaustive()
    }
}

impl Summarizer for ClientSummarizer {
    fn model(&self) -> &str {
        &self.model_id
    }

    fn window_tokens(&self) -> TokenCount {
        self.window
    }

    fn summarize<'a>(&'a self, request: &'a SummaryRequest) -> SummaryFuture<'a> {
        Box::pin(async move {
            let chat = ChatRequest::new(
                self.wire_model.clone(),
                String::new(),
                vec![Message::user(request.prompt())],
                u64::from(request.max_output_tokens),
            );
            let mut ignore = |_: StreamEvent| {};
            match self.client.stream(&chat, &NeverCancel, &mut ignore).await {
                Ok(response) => Ok(SummaryResponse {
                    text: response.message.text(),
                    model: self.model_id.clone(),
                    usage: response.message.usage,
                }),
                Err(err) if err.is_overflow() => Err(SummarizeError::Overflow {
                    detail: err.to_string(),
                }),
                Err(err) => Err(SummarizeError::Provider {
                    message: err.to_string(),
                }),
            }
        })
    }
}

/// Picks the summarizer (SPEC §9.2): `compaction.summarizer.model`, else
/// the registry's cheap model of the session's provider, else none (the
/// deterministic builder). Notes for the user go to `notes`.
pub fn summarizer(
    ctx: &Context,
    main: &ModelSetup,
    notes: &mut Vec<String>,
) -> CliResult<Option<Arc<dyn Summarizer>>> {
    let configured = ctx.config().compaction.summarizer.model.clone();
    let id = match configured.as_deref() {
        Some(soba_core::builder::DETERMINISTIC) => return Ok(None),
        Some(id) => {
            if id == main.info.id {
                notes.push(format!(
                    "warning: the conversation model {id} also writes the summaries (compaction.summarizer.model); a cheaper model usually does as well"
                ));
            }
            id.to_owned()
        }
        None => match &main.info.summarizer_model {
            Some(id) => id.clone(),
            None => return Ok(None),
        },
    };
    let setup = ModelSetup::resolve(ctx, &id)?;
    match setup.client(ctx) {
        Ok(client) => Ok(Some(Arc::new(ClientSummarizer {
            client,
            model_id: setup.info.id.clone(),
            wire_model: setup.info.wire_model.clone(),
            window: TokenCount::new(setup.info.context_window),
        }))),
        Err(err) if configured.is_none() => {
            notes.push(format!(
                "note: summarizer {id} unavailable ({}); capsules are built deterministically",
                err.message
            ));
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// Returns the Project Memory index: every `.soba/memory/*.capsule.md`
/// whose front matter parses, by file name (SPEC §12).
pub fn memory_index(root: &Path) -> Vec<MemoryItem> {
    let dir = root.join(".soba").join("memory");
    let Ok(read_dir) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = read_dir
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.ends_with(".capsule.md"))
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let parsed = render::parse_capsule_file(&text).ok()?;
            let name = path.file_name()?.to_string_lossy().into_owned();
            let id = parsed
                .front
                .id
                .clone()
                .unwrap_or_else(|| name.trim_end_matches(".capsule.md").to_owned());
            Some(MemoryItem {
                title: parsed.front.title.clone().unwrap_or_else(|| id.clone()),
                id,
                created_at: parsed.front.created_at.clone().unwrap_or_default(),
                path: format!(".soba/memory/{name}"),
            })
        })
        .collect()
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

fn session_config(
    ctx: &Context,
    setup: &ModelSetup,
    header: &SessionHeader,
    tools: &ToolRegistry,
) -> SessionConfig {
    SessionConfig {
        model: setup.spec(),
        compaction: ctx.config().compaction.clone(),
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
/// model as its first entry (`model_change`).
pub fn create_session(
    ctx: &Context,
    setup: &ModelSetup,
    tools: &ToolRegistry,
) -> CliResult<SessionCore> {
    let mut minter = SystemMinter;
    let mut header = SessionHeader::new(&mut minter, ctx.workspace.root.display().to_string());
    header.memory = memory_index(&ctx.workspace.root);
    let path = soba_store::reader::session_path(&ctx.locations.sessions_dir, &header.id);
    let config = session_config(ctx, setup, &header, tools);
    let mut core = SessionCore::create(&path, header, config, writer_options(ctx))?;
    core.append(EntryBody::ModelChange {
        model: setup.info.id.clone(),
    })?;
    Ok(core)
}

/// Opens an existing session for writing; the returned lines are the
/// reader's diagnostics.
pub fn open_session(
    ctx: &Context,
    path: &Path,
    setup: &ModelSetup,
    tools: &ToolRegistry,
) -> CliResult<(SessionCore, Vec<String>)> {
    let header = soba_store::reader::read_header(path).map_err(|reason| {
        CliError::user(format!(
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

/// Snapshots `AGENTS.md` at the workspace root, else `CLAUDE.md`, as an
/// `agents_md` context entry when the path has none yet or the file's hash
/// changed (SPEC §5): call it at session start and at every turn start.
/// Returns the appended entry, if any, and warnings.
pub fn snapshot_agents_md(
    core: &mut SessionCore,
    root: &Path,
) -> CliResult<(Option<Entry>, Vec<String>)> {
    let mut warnings = Vec::new();
    let Some((name, path)) = ["AGENTS.md", "CLAUDE.md"]
        .iter()
        .map(|name| (*name, root.join(name)))
        .find(|(_, path)| path.is_file())
    else {
        return Ok((None, warnings));
    };
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if size > AGENTS_MD_MAX_BYTES {
        warnings.push(format!(
            "{name} is {size} bytes, over {AGENTS_MD_MAX_BYTES}; it was not added to the context"
        ));
        return Ok((None, warnings));
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) => {
            warnings.push(format!(
                "cannot read {name} ({err}); it was not added to the context"
            ));
            return Ok((None, warnings));
        }
    };
    let sha256: String = sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let current = core
        .path()
        .iter()
        .rev()
        .find_map(|entry| match &entry.body {
            EntryBody::Context(context) if context.source == ContextSource::AgentsMd => {
                Some(context.sha256.clone())
            }
            _ => None,
        });
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
    path.iter().rev().find_map(|entry| match &entry.body {
        EntryBody::ModelChange { model } => Some(model.clone()),
        EntryBody::Capsule(capsule) if !capsule.state.model.is_empty() => {
            Some(capsule.state.model.clone())
        }
        _ => None,
    })
}

/// Returns the model a command on an existing session uses: `--model`,
/// else the session's own model, else the configured one.
pub fn model_for_session(ctx: &Context, flag: Option<&str>, path: &[Entry]) -> CliResult<String> {
    model_for_session_with(ctx, flag, path, None)
}

/// Like [`model_for_session`], also trying the model an imported session's
/// header recorded (`importedFrom.model`) before the configured one.
pub fn model_for_session_with(
    ctx: &Context,
    flag: Option<&str>,
    path: &[Entry],
    header: Option<&SessionHeader>,
) -> CliResult<String> {
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
pub fn runtime() -> CliResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| CliError::internal("cannot start the async runtime").caused_by(err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::{EntryId, IdKind};

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
        let index = memory_index(dir.path());
        assert_eq!(index.len(), 1);
        assert_eq!(index[0].title, "Auth refactor");
        assert_eq!(index[0].path, ".soba/memory/ck_1.capsule.md");
    }
}
