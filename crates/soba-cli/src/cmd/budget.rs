//! `soba budget` (SPEC §4.3, §11.5): prints every limit of §4.3 for bare
//! numbers, a registry model or a session, or the §4.3 error with exit 1.
//! On a session it also prints the measured effective tokens and their
//! source (§4.2), read from the log without taking its lock (§3.2), so it
//! works while the session is open in another process.

use std::io::Write;

use serde_json::Value;
use soba_core::Entry;
use soba_core::budget::{Budget, BudgetError};
use soba_core::calibration::{Measurement, MeasurementSource};
use soba_core::config::CompactionConfig;
use soba_core::tokens::{TokenCount, group_thousands};
use soba_engine::tool::ToolRegistry;
use soba_provider::{ModelRegistry, RegistryError};
use soba_store::reader::read_log;

use crate::cli::{BudgetArgs, GlobalArgs};
use crate::context::Context;
use crate::engine::{self, ModelSetup};
use crate::error::{CliError, CliResult};

/// Runs `soba budget`.
pub fn cmd_budget(args: &BudgetArgs, global: &GlobalArgs) -> CliResult {
    if let Some(session) = &args.session {
        return session_budget(args, global, session);
    }
    let mut config = CompactionConfig::default();
    let mut registry = ModelRegistry::new();
    for assignment in &args.set {
        apply_set(&mut config, &mut registry, assignment)?;
    }
    let (model, context_window, max_output) = match (
        &args.model,
        args.context_window,
        args.max_output,
    ) {
        (Some(model), _, _) => {
            let info = registry.resolve(model).map_err(registry_error)?;
            (Some(info.id), info.context_window, info.max_output_tokens)
        }
        (None, Some(context_window), Some(max_output)) => (None, context_window, max_output),
        _ => {
            return Err(CliError::usage(
                "soba budget needs --context-window N --max-output N, --model ID or --session ID",
            ));
        }
    };
    let budget = Budget::compute(
        TokenCount::new(context_window),
        TokenCount::new(max_output),
        &config,
    )
    .map_err(budget_error)?;

    let title: Vec<(&str, String)> = model.into_iter().map(|id| ("model", id)).collect();
    print(&render(&title, &budget, None), &budget)
}

/// Prints the rendered limits on stdout and the budget's warnings on stderr.
fn print(rendered: &str, budget: &Budget) -> CliResult {
    let mut stdout = crate::output::stdout();
    stdout.write_all(rendered.as_bytes())?;
    stdout.flush()?;
    let mut stderr = crate::output::stderr();
    for warning in budget.warnings() {
        writeln!(stderr, "warning: {warning}")?;
    }
    Ok(())
}

/// `soba budget --session ID`: the limits of the session's model (`--model`
/// overrides it, as for `soba compact`) under the full configuration, with
/// `--set` applied like every command's, and the effective tokens measured
/// from the log. The log is only read, never locked.
fn session_budget(args: &BudgetArgs, global: &GlobalArgs, session: &str) -> CliResult {
    // `soba budget` declares its own --set; on a session it means what the
    // global one means everywhere else.
    let mut global = global.clone();
    global.set.extend(args.set.iter().cloned());
    let ctx = Context::load(&global)?;
    ctx.print_warnings();
    let summary = ctx.select_session(Some(session))?;
    let log = read_log(&summary.path)?;
    let Some(header) = log.header().cloned() else {
        return Err(CliError::user(format!(
            "{} is not a soba session (no valid header on line 1)",
            summary.path.display()
        ))
        .hint("import other agents' transcripts with `soba import`"));
    };
    for diagnostic in log.diagnostics() {
        crate::output::errln!("warning: session {}: {diagnostic}", summary.id);
    }
    let path: Vec<Entry> = log
        .path()
        .iter()
        .map(|logged| logged.entry.clone())
        .collect();
    drop(log);
    let model = engine::model_for_session_with(&ctx, args.model.as_deref(), &path, Some(&header))?;
    let setup = ModelSetup::resolve(&ctx, &model)?;
    let budget = setup.budget(&ctx)?;
    let measurement = engine::measure_log(&ctx, &setup, &header, &path, &ToolRegistry::builtin())?;
    let title = [
        ("session", summary.id.clone()),
        ("model", setup.info.id.clone()),
    ];
    print(&render(&title, &budget, Some(&measurement)), &budget)
}

/// Applies one `--set PATH=VALUE`: a `compaction.<key>` (the value read as
/// JSON when it parses as JSON, else as a string, so `--set
/// compaction.summarizer.model=openai/gpt-5-mini` works) or a model limit
/// `models.<id>.contextWindow|maxOutputTokens|tokenizer` (the id may be
/// quoted: `models."ollama/qwen3".contextWindow=32768`).
fn apply_set(
    config: &mut CompactionConfig,
    registry: &mut ModelRegistry,
    assignment: &str,
) -> CliResult {
    let Some((path, value_text)) = assignment.split_once('=') else {
        return Err(
            CliError::usage(format!("--set {assignment}: expected PATH=VALUE"))
                .hint("for example --set compaction.keepRecentTokens=30000"),
        );
    };
    let path = path.trim();
    let value = serde_json::from_str::<Value>(value_text)
        .unwrap_or_else(|_| Value::String(value_text.to_owned()));
    if let Some(key) = path.strip_prefix("compaction.") {
        return config
            .set_key(key, &value)
            .map_err(|err| CliError::user(format!("--set {assignment}: {err}")));
    }
    if let Some(rest) = path.strip_prefix("models.") {
        return set_model_limit(registry, rest, &value)
            .map_err(|err| err.hint(format!("in --set {assignment}")));
    }
    Err(CliError::user(format!(
        "--set {path}: soba budget reads only compaction.* and models.* keys"
    )))
}

/// Applies `<id>.<key>` of a `models.*` assignment to the registry.
fn set_model_limit(registry: &mut ModelRegistry, rest: &str, value: &Value) -> CliResult {
    let (id, key) = match rest.strip_prefix('"') {
        Some(quoted) => match quoted.split_once("\".") {
            Some((id, key)) => (id, key),
            None => ("", ""),
        },
        None => rest.rsplit_once('.').unwrap_or(("", "")),
    };
    if id.is_empty() || key.is_empty() {
        return Err(CliError::usage(format!(
            "models.{rest}: expected models.<id>.<key>"
        )));
    }
    let mut entry = registry.overrides().get(id).cloned().unwrap_or_default();
    let number = || {
        value.as_u64().ok_or_else(|| {
            CliError::user(format!("models.\"{id}\".{key} must be a positive integer"))
        })
    };
    match key {
        "contextWindow" => entry.context_window = Some(number()?),
        "maxOutputTokens" => entry.max_output_tokens = Some(number()?),
        "tokenizer" => {
            let name = value.as_str().ok_or_else(|| {
                CliError::user(format!(
                    "models.\"{id}\".tokenizer must be o200k_base or cl100k_base"
                ))
            })?;
            entry.tokenizer = Some(name.to_owned());
        }
        _ => {
            return Err(CliError::user(format!(
                "unknown key models.\"{id}\".{key}: use contextWindow, maxOutputTokens or tokenizer"
            )));
        }
    }
    registry.set_override(id, entry);
    Ok(())
}

fn registry_error(err: RegistryError) -> CliError {
    let hint = match &err {
        RegistryError::MissingContextWindow { key, .. } => Some(format!("or pass --set '{key}=N'")),
        _ => None,
    };
    let cli_error = CliError::user(err.to_string());
    match hint {
        Some(hint) => cli_error.hint(hint),
        None => cli_error,
    }
}

fn budget_error(err: BudgetError) -> CliError {
    let hint = match &err {
        BudgetError::HardLimit { .. } => {
            "lower --max-output or compaction.safetyReserveTokens, e.g. --set compaction.safetyReserveTokens=1024"
        }
        BudgetError::HygieneLimit { .. } => {
            "this window is too small for compaction; use a model with a larger window"
        }
        _ => "fix the value with --set compaction.<key>=<value> or in config.json",
    };
    CliError::user(err.to_string()).hint(hint)
}

/// Says how effective tokens were measured (SPEC §4.2).
fn source_meaning(source: MeasurementSource) -> &'static str {
    match source {
        MeasurementSource::ProviderUsage => {
            "the last response's reported prompt plus local counts of what followed it"
        }
        MeasurementSource::Estimated => "the calibrated local count of the whole input",
    }
}

/// Renders the limits as aligned `name  value  meaning` lines, after the
/// `title` lines (model, session), then the effective tokens and their
/// source when a session was measured.
fn render(title: &[(&str, String)], budget: &Budget, measured: Option<&Measurement>) -> String {
    let rows: [(&str, TokenCount, &str); 12] = [
        (
            "contextWindow",
            budget.context_window(),
            "the model's window",
        ),
        (
            "maxOutputTokens",
            budget.max_output_tokens(),
            "max_tokens of every request, thinking included",
        ),
        (
            "safetyReserveTokens",
            budget.safety_reserve_tokens(),
            "compaction.safetyReserveTokens",
        ),
        (
            "hardLimit",
            budget.hard_limit(),
            "above it, compaction is forced and nothing is sent",
        ),
        (
            "softLimit",
            budget.soft_limit(),
            "the soft threshold before the working-set cap",
        ),
        (
            "autoLimit",
            budget.auto_limit(),
            "auto_threshold fires at it",
        ),
        ("base", budget.base(), "what hygieneLimit is a share of"),
        (
            "hygieneLimit",
            budget.hygiene_limit(),
            "hygiene is considered at it",
        ),
        (
            "keepRecent",
            budget.keep_recent(),
            "the verbatim tail's budget",
        ),
        (
            "softGate",
            budget.soft_gate(),
            "every soft trigger needs effective tokens at it",
        ),
        (
            "roiFloor",
            budget.roi_floor(),
            "the least a soft compaction must reclaim",
        ),
        (
            "maxToolResultTokens",
            budget.max_tool_result_tokens(),
            "tool results above it are cut in the input",
        ),
    ];
    let values: Vec<String> = rows
        .iter()
        .map(|(_, value, _)| group_thousands(value.get()))
        .collect();
    let effective = measured.map_or_else(
        || "-".to_owned(),
        |measurement| group_thousands(measurement.tokens.get()),
    );
    let name_width = rows
        .iter()
        .map(|(name, _, _)| name.len())
        .max()
        .unwrap_or(0);
    let value_width = values
        .iter()
        .chain(std::iter::once(&effective))
        .map(String::len)
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (name, value) in title {
        out.push_str(&format!("{name:<name_width$}  {value}\n"));
    }
    for ((name, _, meaning), value) in rows.iter().zip(&values) {
        out.push_str(&format!(
            "{name:<name_width$}  {value:>value_width$}  {meaning}\n"
        ));
    }
    match measured {
        None => out.push_str(&format!(
            "{:<name_width$}  {effective:>value_width$}  no session measured (pass --session ID)\n",
            "effective"
        )),
        Some(measurement) => {
            let hard = budget.hard_limit().get().max(1);
            let percent = measurement.tokens.get().saturating_mul(100) / hard;
            out.push_str(&format!(
                "{:<name_width$}  {effective:>value_width$}  the model input as it would be sent now ({percent}% of hardLimit)\n",
                "effective"
            ));
            out.push_str(&format!(
                "{:<name_width$}  {}  {}\n",
                "source",
                measurement.source.as_str(),
                source_meaning(measurement.source)
            ));
        }
    }
    out
}
