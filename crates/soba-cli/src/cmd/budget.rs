//! `soba budget`: prints every limit of SPEC §4.3 for bare numbers or a
//! registry model, or the §4.3 error with exit 1. Sessions are not wired yet.

use std::io::Write;

use serde_json::Value;
use soba_core::budget::{Budget, BudgetError};
use soba_core::config::CompactionConfig;
use soba_core::tokens::{TokenCount, group_thousands};
use soba_provider::{ModelRegistry, RegistryError};

use crate::cli::BudgetArgs;
use crate::error::{CliError, CliResult};

/// Runs `soba budget`.
pub fn cmd_budget(args: &BudgetArgs) -> CliResult {
    let mut config = CompactionConfig::default();
    let mut registry = ModelRegistry::new();
    for assignment in &args.set {
        apply_set(&mut config, &mut registry, assignment)?;
    }
    if let Some(session) = &args.session {
        return Err(CliError::user(format!(
            "soba budget --session {session}: reading a session's budget is not wired yet"
        ))
        .hint("pass the session's model as --model ID, or its limits as --context-window N --max-output N"));
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

    let mut stdout = std::io::stdout().lock();
    stdout.write_all(render(model.as_deref(), &budget).as_bytes())?;
    stdout.flush()?;
    let mut stderr = std::io::stderr().lock();
    for warning in budget.warnings() {
        writeln!(stderr, "warning: {warning}")?;
    }
    Ok(())
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

/// Renders the limits as aligned `name  value  meaning` lines, after the
/// model id when there is one.
fn render(model: Option<&str>, budget: &Budget) -> String {
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
    let name_width = rows
        .iter()
        .map(|(name, _, _)| name.len())
        .max()
        .unwrap_or(0);
    let value_width = values.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    if let Some(model) = model {
        out.push_str(&format!("{:<name_width$}  {model}\n", "model"));
    }
    for ((name, _, meaning), value) in rows.iter().zip(&values) {
        out.push_str(&format!(
            "{name:<name_width$}  {value:>value_width$}  {meaning}\n"
        ));
    }
    out.push_str(&format!(
        "{:<name_width$}  {:>value_width$}  no session measured (pass --session ID)\n",
        "effective", "-"
    ));
    out
}
