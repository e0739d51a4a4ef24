//! The `soba` binary: parses the command line and hands over to `app`.

fn main() -> std::process::ExitCode {
    soba_cli::run(std::env::args_os())
}
