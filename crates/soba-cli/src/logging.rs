//! Logs (SPEC §14.1): `tracing` events go to `<logs>/soba.log.<date>`,
//! rotated daily with 7 files kept, never to the terminal. `SOBA_LOG` sets
//! the filter (`tracing_subscriber` syntax, default `info`). A log that
//! cannot be opened never fails a command.

use tracing_appender::non_blocking::WorkerGuard;
use tracing_appender::rolling::{RollingFileAppender, Rotation};

use soba_workspace::paths::{self, Env};

/// Daily log files kept.
pub const LOG_FILES_KEPT: usize = 7;

/// Starts logging to the logs directory; the guard flushes on drop, so the
/// caller keeps it until exit. `None` when logging could not start.
pub fn init(env: &Env) -> Option<WorkerGuard> {
    let dir = paths::logs_dir(env).ok()?;
    // Owner-only, like the sessions: the files inside then need no mode
    // of their own, and no one else can plant a link among them.
    soba_store::private::create_dir_all(&dir).ok()?;
    let appender = RollingFileAppender::builder()
        .rotation(Rotation::DAILY)
        .filename_prefix("soba.log")
        .max_log_files(LOG_FILES_KEPT)
        .build(&dir)
        .ok()?;
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = tracing_subscriber::EnvFilter::try_new(env.get("SOBA_LOG").unwrap_or("info"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init()
        .ok()?;
    Some(guard)
}
