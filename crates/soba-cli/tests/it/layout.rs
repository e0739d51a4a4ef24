//! The front-door rule (`ARCHITECTURE.md`, "soba-cli"): a `cmd/` file
//! parses flags, calls the workspace library and prints; it imports
//! nothing from the TUI (`soba_tui`) or from another `cmd/` file. Only the
//! dispatcher, `cmd/mod.rs`, names them all.

use std::path::Path;

/// Returns `text` without its `#[cfg(test)] mod … { … }` block (rustfmt
/// closes it with a `}` in the first column) and without line comments.
fn code_outside_tests(text: &str) -> String {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let next_opens_mod = lines.peek().is_some_and(|next| {
            let next = next.trim_start();
            next.starts_with("mod ") && next.trim_end().ends_with('{')
        });
        if line.trim() == "#[cfg(test)]" && next_opens_mod {
            for inner in lines.by_ref() {
                if inner == "}" {
                    break;
                }
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        out.push(code.to_owned());
    }
    out.join("\n")
}

#[test]
fn a_cmd_file_imports_no_other_cmd_file_and_no_tui() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd");
    let mut broken = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("src/cmd is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if !name.ends_with(".rs") || name == "mod.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a cmd file is readable");
        let code = code_outside_tests(&text);
        for forbidden in ["crate::cmd::", "super::", "crate::tui", "soba_tui"] {
            if code.contains(forbidden) {
                broken.push(format!("src/cmd/{name} uses {forbidden}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the front-door rule is broken: {broken:#?}"
    );
}

#[test]
fn the_check_sees_what_it_forbids() {
    let text = "use crate::cmd::capsule::find;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let code = code_outside_tests(text);
    assert!(code.contains("crate::cmd::"));
    assert!(
        !code.contains("super::"),
        "a file's own tests may use super::*"
    );
}
