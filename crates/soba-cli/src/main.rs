//! The `soba` binary: parses the command line and hands over to `app`.

fn main() -> std::process::ExitCode {
    ignore_file_size_signal();
    soba_cli::run(std::env::args_os())
}

/// A write past `ulimit -f` then fails with EFBIG, which soba reports (the
/// unwritten lines go to a recovery file), instead of SIGXFSZ killing it
/// in the middle of a line. The bash tool restores the default for the
/// commands it runs.
#[allow(unsafe_code)]
fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: only sets this one signal's disposition, before any thread
    // starts; no handler runs.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}
