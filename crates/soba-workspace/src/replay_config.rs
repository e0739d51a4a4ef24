//! What `soba replay` takes from the environment: the local time zone its
//! days are counted in, and a `--project` folder. (Its prices are the
//! configuration's, `Config::price_table`.)

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
