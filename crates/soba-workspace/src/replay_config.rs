//! What `soba replay` takes from the command line, the configuration and
//! the environment, checked: the `ReplayOptions` of its flags (prices are
//! the configuration's, `Config::price_table`), its `Filter` (the local
//! time zone its days are counted in, a `--project` folder), the agents
//! to discover, and the error of a replay that replayed nothing.

use std::path::{Path, PathBuf};

use soba_replay::discover::Agent;
use soba_replay::{self as replay, CacheMode, Filter, PolicySpec, ReplayError, ReplayOptions};

use crate::context::Context;
use crate::error::{Result, WorkspaceError};

/// `soba replay`'s flags that shape the replay itself.
#[derive(Debug, Clone, Copy)]
pub struct ReplayFlags<'a> {
    /// The transcript or folder replayed, when one is named.
    pub path: Option<&'a Path>,
    /// `--policy`, each a policy spec.
    pub policy: &'a [String],
    /// `--window`.
    pub window: Option<u64>,
    /// `--max-output`.
    pub max_output: Option<u64>,
    /// `--cache`.
    pub cache: Option<&'a str>,
    /// `--summarizer-price`.
    pub summarizer_price: f64,
    /// `--cache-ttl`.
    pub cache_ttl: u64,
    /// `--peer-trigger`.
    pub peer_trigger: Option<u64>,
    /// `--dump-inputs`.
    pub dump_inputs: Option<&'a Path>,
}

/// The hint of a `--dump-inputs` file that cannot be written.
const DUMP_HINT: &str = "check that its folder exists and is writable and that the disk has room, or pass another --dump-inputs FILE";

/// Returns the error of a `--dump-inputs` file that cannot be written.
pub fn dump_error(err: &dyn std::error::Error) -> WorkspaceError {
    WorkspaceError::user(replay::error_text(err)).hint(DUMP_HINT)
}

/// Builds the replay options from the flags and the configuration; `warn`
/// receives the price table's warnings (`warning: …`).
pub fn options(
    ctx: &Context,
    flags: &ReplayFlags<'_>,
    warn: &mut dyn FnMut(String),
) -> Result<ReplayOptions> {
    let mut policies = Vec::new();
    for name in flags.policy {
        if name.trim().is_empty() {
            continue;
        }
        policies.push(PolicySpec::parse(name).map_err(WorkspaceError::usage)?);
    }
    let cache = match flags.cache {
        Some(mode) => Some(CacheMode::parse(mode).ok_or_else(|| {
            WorkspaceError::usage(format!("--cache {mode}: use anthropic, openai or none"))
        })?),
        None => None,
    };
    // A summarizer token above 100 main-model tokens is no price anyone
    // pays, and larger values overflow the billed figures.
    if !(flags.summarizer_price.is_finite() && (0.0..=100.0).contains(&flags.summarizer_price)) {
        return Err(WorkspaceError::usage(format!(
            "--summarizer-price {:e}: expected a number from 0 to 100",
            flags.summarizer_price
        )));
    }
    if flags.window == Some(0) || flags.max_output == Some(0) {
        return Err(WorkspaceError::usage(
            "--window and --max-output must be positive numbers of tokens",
        ));
    }
    let dump_inputs = match flags.dump_inputs {
        Some(path) => {
            // Never written through a link, as --html; never over a
            // transcript being replayed (create says why).
            if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink()) {
                return Err(WorkspaceError::user(format!(
                    "--dump-inputs {}: the path is a symbolic link",
                    soba_core::terminal::sanitize_line(&path.display().to_string())
                ))
                .hint("pass the path of a regular file"));
            }
            let replayed: Vec<&Path> = flags.path.into_iter().collect();
            let dump = replay::fidelity::InputDump::create(path, &replayed)
                .map_err(|err| dump_error(&err))?;
            Some(std::sync::Arc::new(dump))
        }
        None => None,
    };
    // The built-in prices with the config's overrides; an entry left out
    // is a warning, two entries naming one model an error.
    let priced = ctx.config().price_table().map_err(|message| {
        WorkspaceError::usage(message)
            .hint("keep the prices under one of the two names in your user config")
    })?;
    for warning in &priced.warnings {
        warn(format!("warning: {warning}"));
    }
    Ok(ReplayOptions {
        policies,
        window: flags.window,
        max_output: flags.max_output,
        compaction: ctx.config().compaction.clone(),
        cache,
        summarizer_price: flags.summarizer_price,
        cache_ttl: flags.cache_ttl,
        peer_trigger: flags.peer_trigger,
        counting: replay::Counting::Bpe,
        registry: ctx.config().registry(),
        prices: priced.table,
        dump_inputs,
    })
}

/// Returns the filter of `--since`, `--until` (days as `YYYY-MM-DD`,
/// counted in the local time zone, whose warning goes to `warn`) and
/// `--project`.
pub fn filter(
    since: Option<&str>,
    until: Option<&str>,
    project: Option<&str>,
    warn: &mut dyn FnMut(String),
) -> Result<Filter> {
    let day = |flag: &str, value: Option<&str>| -> Result<Option<jiff::civil::Date>> {
        value
            .map(|text| {
                text.trim().parse::<jiff::civil::Date>().map_err(|_| {
                    WorkspaceError::usage(format!(
                        "{flag} {}: expected a day as YYYY-MM-DD",
                        soba_core::terminal::sanitize_line(text)
                    ))
                })
            })
            .transpose()
    };
    let since = day("--since", since)?;
    let until = day("--until", until)?;
    let filter = Filter {
        since,
        until,
        project: project
            .map(str::trim)
            .filter(|project| !project.is_empty())
            .map(project_folder),
        zone: (since.is_some() || until.is_some()).then(|| local_zone_warned(warn)),
    };
    if let (Some(since), Some(until)) = (filter.since, filter.until)
        && since > until
    {
        return Err(WorkspaceError::usage(format!(
            "--since {since} is after --until {until}"
        )));
    }
    Ok(filter)
}

/// The local time zone days are counted in ([`local_zone`]), its warning
/// given to `warn`.
pub fn local_zone_warned(warn: &mut dyn FnMut(String)) -> jiff::tz::TimeZone {
    let (zone, warning) = local_zone();
    if let Some(warning) = warning {
        warn(warning);
    }
    zone
}

/// Returns the agents `--agent` names, which pick among discovered
/// sessions (so not with a path).
pub fn agents(names: &[String], has_path: bool) -> Result<Vec<Agent>> {
    let mut agents = Vec::new();
    for name in names.iter().filter(|name| !name.trim().is_empty()) {
        let agent = Agent::parse(name).ok_or_else(|| {
            WorkspaceError::usage(format!(
                "--agent {}: use claude-code, codex, pi, gemini or opencode",
                soba_core::terminal::sanitize_line(name)
            ))
        })?;
        agents.push(agent);
    }
    if !agents.is_empty() && has_path {
        return Err(WorkspaceError::usage(
            "--agent picks among discovered sessions: leave out PATH",
        ));
    }
    Ok(agents)
}

/// Returns the error of a replay that failed, with what to do when
/// nothing could be replayed.
pub fn replay_error(err: ReplayError) -> WorkspaceError {
    let hint = match &err {
        ReplayError::NothingReplayed { .. } => {
            Some("pass --window N for transcripts whose model soba does not know")
        }
        _ => None,
    };
    let error = WorkspaceError::user(err.to_string());
    match hint {
        Some(hint) => error.hint(hint),
        None => error,
    }
}

/// Returns the error of a replay of `dir` (or of the discovered sessions)
/// that replayed nothing: the filters left every session out, or none
/// could be replayed.
pub fn nothing_replayed(dir: Option<&Path>, filter: &Filter, n_traces: usize) -> WorkspaceError {
    match dir {
        // Only when nothing but the filters stood in the way.
        _ if !filter.is_empty() && n_traces == 0 => {
            WorkspaceError::user("no session passed the filters")
                .hint("--since, --until or --project left every session out")
        }
        Some(dir) => replay_error(ReplayError::NothingReplayed {
            path: PathBuf::from(dir),
        }),
        None => WorkspaceError::user("no discovered session could be replayed")
            .hint("pass --window N for transcripts whose model soba does not know"),
    }
}

/// A `--project` value that names a folder (`.`, `../api`, `~/code/x`
/// as the shell expands it) becomes its absolute path; any other value is
/// matched as text.
pub fn project_folder(value: &str) -> String {
    match std::fs::canonicalize(value) {
        Ok(path) if path.is_dir() => path.display().to_string(),
        _ => value.to_owned(),
    }
}

/// The local time zone days are counted in: `TZ` when it is a zone name,
/// a POSIX rule or a zone file (read as outside bytes: a regular file of
/// at most 1 MiB), else the system's; UTC, with a warning, when `TZ` is
/// none of these (the warning is returned, to be shown).
pub fn local_zone() -> (jiff::tz::TimeZone, Option<String>) {
    use jiff::tz::TimeZone;
    let Some(tz) = std::env::var_os("TZ").filter(|tz| !tz.is_empty()) else {
        return (TimeZone::try_system().unwrap_or(TimeZone::UTC), None);
    };
    let text = tz.to_string_lossy();
    let name = text.strip_prefix(':').unwrap_or(&text);
    let zone = if name.starts_with('/') {
        soba_store::untrusted::read_untrusted(std::path::Path::new(name), 1 << 20)
            .ok()
            .and_then(|bytes| TimeZone::tzif(name, &bytes).ok())
    } else if is_zone_name(name) {
        TimeZone::get(name)
            .ok()
            .or_else(|| TimeZone::posix(name).ok())
    } else {
        TimeZone::posix(name).ok()
    };
    match zone {
        Some(zone) => (zone, None),
        None => (
            TimeZone::UTC,
            Some(format!(
                "warning: TZ={} is not a time zone soba can read; days are counted in UTC",
                soba_core::terminal::sanitize_line(&text.chars().take(200).collect::<String>())
            )),
        ),
    }
}

/// Whether `name` looks like a zone database name (`Europe/Paris`,
/// `UTC`): letters, digits, `_`, `-`, `+` and `/`, no `..`.
pub fn is_zone_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/'))
}
