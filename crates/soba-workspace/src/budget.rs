//! `soba budget`'s report (SPEC §4.3, §11.5): every limit of §4.3 for bare
//! numbers, a registry model or a session, as aligned text any front door
//! can show. On a session it also measures the effective tokens and says
//! their source (§4.2), read from the log without taking its lock (§3.2),
//! so it works while the session is open in another process.

use soba_core::budget::{Budget, BudgetError};
use soba_core::calibration::{Calibration, Measurement, MeasurementSource};
use soba_core::input::CountSources;
use soba_core::tokens::{TokenCount, group_thousands};
use soba_core::{Encoding, Entry};
use soba_engine::tool::ToolRegistry;

use crate::config::ConfigError;
use crate::context::Context;
use crate::error::{Result, WorkspaceError};
use crate::setup::{self, ModelSetup};

/// What `soba budget` was asked about.
#[derive(Debug, Clone, Copy, Default)]
pub struct BudgetQuery<'a> {
    /// `--session`: a session id, prefix or path.
    pub session: Option<&'a str>,
    /// `--model`: a model id (with a session, it overrides the session's).
    pub model: Option<&'a str>,
    /// `--context-window`.
    pub context_window: Option<u64>,
    /// `--max-output`.
    pub max_output: Option<u64>,
}

/// The limits, rendered, and the budget whose warnings a front door shows.
#[derive(Debug)]
pub struct BudgetReport {
    /// Aligned `name  value  meaning` lines after the title lines.
    pub text: String,
    /// The budget the text shows.
    pub budget: Budget,
}

/// Returns the budget report for `query` under the workspace's full
/// configuration. Nothing named: the workspace's most recent session,
/// else the configured model. `warn` receives the lines about a damaged
/// session log as they are found (`warning: session ID: …`).
pub fn report(
    ctx: &Context,
    query: &BudgetQuery<'_>,
    warn: &mut dyn FnMut(String),
) -> Result<BudgetReport> {
    if let Some(session) = query.session {
        return session_budget(ctx, query, session, warn);
    }
    let nothing_named = query.model.is_none() && query.context_window.is_none();
    if nothing_named && let Ok(recent) = ctx.select_session(None) {
        return session_budget(ctx, query, &recent.path.display().to_string(), warn);
    }
    let configured = ctx.config().model.as_ref().map(|(model, _)| model.as_str());
    let (model, context_window, max_output) = match (
        query.model.or(configured.filter(|_| nothing_named)),
        query.context_window,
        query.max_output,
    ) {
        (Some(model), _, _) => match ctx.config().registry().resolve(model) {
            Ok(info) => {
                let source =
                    setup::WindowSource::of_resolved(&ctx.config().registry(), model, &info.id);
                (
                    Some((info.id, source)),
                    info.context_window,
                    info.max_output_tokens,
                )
            }
            // A local model: ask its server (or say why that failed).
            Err(soba_provider::RegistryError::MissingContextWindow { .. }) => {
                let setup = ModelSetup::resolve(ctx, model)?;
                (
                    Some((setup.info.id, setup.window_source)),
                    setup.info.context_window,
                    setup.info.max_output_tokens,
                )
            }
            Err(err) => return Err(ConfigError::from(err).into()),
        },
        (None, Some(context_window), Some(max_output)) => (None, context_window, max_output),
        _ => {
            return Err(WorkspaceError::usage(
                "soba budget needs --context-window N --max-output N, --model ID or --session ID",
            )
            .hint(format!(
                "with none of them it uses the most recent session (there is none in {}) or the configured model (none is set)",
                ctx.locations.sessions_dir.display()
            )));
        }
    };
    let (window, max_output) = (TokenCount::new(context_window), TokenCount::new(max_output));
    let budget = Budget::compute(
        window,
        max_output,
        &ctx.config().compaction.for_window(window, max_output),
    )
    .map_err(budget_error)?;

    let title: Vec<(&str, String)> = model
        .into_iter()
        .flat_map(|(id, source)| [("model", id), ("window from", source.to_string())])
        .collect();
    Ok(BudgetReport {
        text: render(&title, &budget, None),
        budget,
    })
}

/// `soba budget --session ID`: the limits of the session's model (`--model`
/// overrides it, as for `soba compact`) under the full configuration, and
/// the effective tokens measured from the log. The log is read as `soba
/// run` resumes it — backwards from the end, up to the live stretch — and
/// never locked.
fn session_budget(
    ctx: &Context,
    query: &BudgetQuery<'_>,
    session: &str,
    warn: &mut dyn FnMut(String),
) -> Result<BudgetReport> {
    let summary = ctx.select_session(Some(session))?;
    let resumed = soba_store::resume(&summary.path)?;
    let Some(header) = resumed.header.clone() else {
        return Err(WorkspaceError::user(format!(
            "{} is not a soba session (no valid header on line 1)",
            summary.path.display()
        ))
        .hint("import other agents' transcripts with `soba import`"));
    };
    for diagnostic in &resumed.diagnostics {
        warn(format!("warning: session {}: {diagnostic}", summary.id));
    }
    let path: Vec<Entry> = resumed
        .stretch
        .into_iter()
        .map(|logged| logged.entry)
        .collect();
    let model = setup::model_for_session_with(ctx, query.model, &path, Some(&header))?;
    let setup = ModelSetup::resolve(ctx, &model)?;
    let budget = setup.budget(ctx)?;
    let (measurement, calibration, counts) =
        setup::measure_log(ctx, &setup, &header, path, &ToolRegistry::builtin())?;
    let title = [
        ("session", summary.id.clone()),
        ("model", setup.info.id.clone()),
        ("window from", setup.window_source.to_string()),
        ("calibration", calibration_line(&calibration)),
        ("counts", counts_line(&counts, setup.info.tokenizer)),
    ];
    Ok(BudgetReport {
        text: render(&title, &budget, Some(&measurement)),
        budget,
    })
}

/// The factor local counts are multiplied by, and what it was learned
/// from: `1.203 from 12 responses (1 left out: silent truncation)`.
fn calibration_line(calibration: &Calibration) -> String {
    let mut line = match calibration.samples {
        0 => format!(
            "{:.3} (the model's seed: no response usage yet)",
            calibration.factor.get()
        ),
        1 => format!("{:.3} from 1 response", calibration.factor.get()),
        n => format!("{:.3} from {n} responses", calibration.factor.get()),
    };
    let truncated = calibration.truncations.len();
    if truncated > 0 {
        line.push_str(&format!(
            " ({truncated} left out: the server reported far fewer prompt tokens than were sent, a sign it truncated)"
        ));
    }
    if calibration.overflow_resets > 0 {
        line.push_str(&format!(
            " ({} reset by a context overflow)",
            calibration.overflow_resets
        ));
    }
    line
}

/// Where the live stretch's message counts came from: `stored for 120
/// messages`, or how many were counted again and why.
fn counts_line(counts: &CountSources, tokenizer: Encoding) -> String {
    let total = counts.stored + counts.recounted();
    let mut line = match total {
        0 => return "no messages in the live stretch".to_owned(),
        _ if counts.recounted() == 0 => {
            format!(
                "stored for all {} messages of the live context ({})",
                group(total),
                tokenizer.as_str()
            )
        }
        _ => format!(
            "{} of {} messages of the live context counted again with {}",
            group(counts.recounted()),
            group(total),
            tokenizer.as_str()
        ),
    };
    if counts.other_vocabulary > 0 {
        let other = counts
            .stored_encoding
            .map_or("another vocabulary", Encoding::as_str);
        line.push_str(&format!(
            " ({} stored for {other}: the model changed)",
            group(counts.other_vocabulary)
        ));
    }
    if counts.missing > 0 {
        line.push_str(&format!(
            " ({} stored no count: written by an older soba)",
            group(counts.missing)
        ));
    }
    line
}

fn group(n: usize) -> String {
    group_thousands(n as u64)
}

fn budget_error(err: BudgetError) -> WorkspaceError {
    let hint = match &err {
        BudgetError::HardLimit { .. } => {
            "lower --max-output or compaction.safetyReserveTokens, e.g. --set compaction.safetyReserveTokens=1024"
        }
        BudgetError::HygieneLimit { .. } => {
            "this window is too small for compaction; use a model with a larger window"
        }
        _ => "fix the value with --set compaction.<key>=<value> or in config.json",
    };
    WorkspaceError::user(err.to_string()).hint(hint)
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
