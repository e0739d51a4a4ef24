#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Integration tests of the TUI crate: one test binary, frames drawn on a
//! test backend and snapshot-tested.

mod tui;

/// Fails when a file in `tests/it/` is not declared as a module here, so no
/// test file is silently left out of the build.
#[test]
fn every_test_file_is_declared() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("tests/it/main.rs exists");
    let declared: Vec<String> = main
        .lines()
        .filter_map(|line| {
            line.trim()
                .strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_owned)
        })
        .collect();
    let mut undeclared = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tests/it is readable") {
        let path = entry.expect("directory entry is readable").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let is_module =
            path.extension().is_some_and(|ext| ext == "rs") || path.join("mod.rs").exists();
        if is_module && stem != "main" && !declared.iter().any(|d| d == stem) {
            undeclared.push(stem.to_owned());
        }
    }
    assert!(
        undeclared.is_empty(),
        "tests/it files not declared in main.rs: {undeclared:?}"
    );
}
