//! Build script of the crates whose tests read the real transcripts in
//! `../shared/traces/raw` beside the repository. When the folder is there it
//! sets `--cfg shared_traces`; the tests that need it carry
//! `#[cfg_attr(not(shared_traces), ignore = "…")]`, so a clone without it
//! shows them as ignored, with the reason, in cargo's summary instead of
//! counting them as passed.

use std::path::Path;

#[allow(
    clippy::disallowed_macros,
    reason = "a build script speaks to cargo on stdout"
)]
fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_traces)");
    let Ok(manifest) = std::env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let raw = Path::new(&manifest).join("../../../shared/traces/raw");
    if raw.is_dir() {
        println!("cargo::rustc-cfg=shared_traces");
        // Removing the folder reruns this script (a missing path is stale).
        println!("cargo::rerun-if-changed={}", raw.display());
    }
    // Without the folder no directive is printed: cargo then reruns this
    // script whenever a file of the package changes, which notices a folder
    // added later at the next edit (or `cargo clean -p <crate>`).
}
