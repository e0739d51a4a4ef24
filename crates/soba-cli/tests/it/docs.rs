//! The documentation in `docs/` against the binary and the key table: every
//! subcommand `soba --help` lists is described in the user guide, the
//! guide's configuration table is exactly the loader's key table (paths,
//! defaults, project permission, in order), and links between the
//! documents resolve.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use soba_workspace::config::keys::KEYS;

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

fn read_doc(name: &str) -> String {
    let path = docs_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Returns the subcommand names of a `--help` text's `Commands:` list.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        // Entries are indented by two spaces; wrapped descriptions by more.
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn help_of(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .arg("--help")
        .env(
            "SOBA_HOME",
            std::env::temp_dir().join("soba-docs-test-home"),
        )
        .output()
        .expect("the soba binary runs");
    assert!(output.status.success(), "soba {args:?} --help failed");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

#[test]
fn every_subcommand_of_soba_help_is_in_the_user_guide() {
    let guide = read_doc("user-guide.md");
    let top = subcommands(&help_of(&[]));
    assert!(top.len() >= 12, "parsed too few subcommands: {top:?}");
    let mut missing = Vec::new();
    for name in &top {
        if !guide.contains(&format!("### `soba {name}`")) {
            missing.push(format!("soba {name} (a `### `soba {name}`` section)"));
        }
    }
    // Commands with their own subcommands: each one is named too.
    for parent in ["capsule", "config"] {
        assert!(top.iter().any(|name| name == parent), "{top:?}");
        for name in subcommands(&help_of(&[parent])) {
            if name != "help" && !guide.contains(&format!("`soba {parent} {name}")) {
                missing.push(format!("soba {parent} {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in docs/user-guide.md: {missing:?}");
}

/// One row of the guide's key table: path, default (`None` for "—"),
/// whether a project file may set it.
fn guide_keys(guide: &str) -> Vec<(String, Option<Value>, bool)> {
    guide
        .lines()
        .skip_while(|line| line.trim() != "### Every configuration key")
        .skip(1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2) // the header and its separator
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert!(cells.len() >= 4, "a row of four cells: {line}");
            let path = cells[0].trim_matches('`').to_owned();
            let default = match cells[1] {
                "—" => None,
                cell => Some(
                    serde_json::from_str(cell.trim_matches('`'))
                        .unwrap_or_else(|err| panic!("default of {path} is not JSON: {err}")),
                ),
            };
            let project = match cells[2] {
                "yes" => true,
                "no" => false,
                other => panic!("project cell of {path} is {other:?}, not yes or no"),
            };
            (path, default, project)
        })
        .collect()
}

#[test]
fn the_user_guide_lists_every_config_key_with_its_default() {
    let guide = read_doc("user-guide.md");
    let documented = guide_keys(&guide);
    let table: Vec<(String, Option<Value>, bool)> = KEYS
        .iter()
        .map(|key| (key.path.to_owned(), key.default_value(), key.project))
        .collect();
    let documented_paths: Vec<&str> = documented.iter().map(|(p, _, _)| p.as_str()).collect();
    let table_paths: Vec<&str> = table.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(
        documented_paths, table_paths,
        "the keys of docs/user-guide.md differ from config::keys::KEYS"
    );
    for (doc, key) in documented.iter().zip(&table) {
        assert_eq!(doc, key, "docs/user-guide.md row of {}", key.0);
    }
    // The spec's §14.3 defaults, spelled out, as a user reads them.
    for (path, default) in [
        ("compaction.minTokensForAutoCompact", "32000"),
        ("compaction.keepRecentTokens", "20000"),
        ("compaction.safetyReserveTokens", "8192"),
        ("compaction.maxWorkingSetTokens", "80000"),
        ("compaction.minHygieneTokens", "20000"),
        ("compaction.native", "\"off\""),
        ("tools.bash.timeoutMs", "120000"),
    ] {
        let expected: Value = serde_json::from_str(default).expect("literal JSON");
        let row = documented.iter().find(|(p, _, _)| p == path);
        assert_eq!(
            row.and_then(|(_, d, _)| d.clone()),
            Some(expected),
            "{path}"
        );
    }
}

#[test]
fn links_between_documents_resolve() {
    let mut broken = Vec::new();
    for name in [
        "user-guide.md",
        "embedding.md",
        "session-log-format.md",
        "capsule-format.md",
    ] {
        let text = read_doc(name);
        for (idx, _) in text.match_indices("](") {
            let rest = &text[idx + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            let file = target.split('#').next().unwrap_or("");
            if file.is_empty() || file.contains("://") {
                continue;
            }
            if !docs_dir().join(file).exists() {
                broken.push(format!("{name}: {target}"));
            }
        }
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md exists");
    assert!(
        readme.contains("docs/user-guide.md") && readme.contains("docs/embedding.md"),
        "the README links the user guide and the embedding guide"
    );
    assert!(broken.is_empty(), "broken links: {broken:?}");
}

/// Returns the fenced `json` blocks of a document that mention `needle`.
fn json_blocks_with(doc: &str, needle: &str) -> Vec<Value> {
    doc.split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .filter(|block| block.contains(needle))
        .map(|block| serde_json::from_str(block).expect("a guide snippet is JSON"))
        .collect()
}

#[test]
fn the_user_guides_local_model_snippet_makes_soba_budget_work() {
    let guide = read_doc("user-guide.md");
    let snippets = json_blocks_with(&guide, "ollama/qwen3-coder");
    assert_eq!(snippets.len(), 1, "the guide's local-model snippet");
    let snippet = &snippets[0];
    let model = snippet["models"]
        .as_object()
        .and_then(|models| models.keys().next())
        .expect("the snippet declares a model")
        .clone();
    let window = snippet["models"][&model]["contextWindow"]
        .as_u64()
        .expect("its window");
    // Without the snippet the model is unknown; with it, every limit prints.
    let bare = crate::support::Sandbox::new();
    let output = bare.run(&["budget", "--model", &model]);
    assert_eq!(output.status.code(), Some(1));
    let sandbox = crate::support::Sandbox::new();
    sandbox.write_user_config(snippet);
    let output = sandbox.run_ok(&["budget", "--model", &model]);
    let stdout = crate::support::text(&output.stdout);
    assert!(
        stdout.starts_with(&format!("model                {model}\n")),
        "{stdout}"
    );
    let window_line = format!(
        "contextWindow        {}  the model's window",
        soba_core::tokens::group_thousands(window)
    );
    assert!(stdout.contains(&window_line), "{stdout}");
}

#[test]
fn user_docs_stand_alone_without_the_spec() {
    // A user's clone has no `../shared/SPEC.md`: no document may send them
    // there or cite its sections.
    let mut citations = Vec::new();
    for name in [
        "user-guide.md",
        "embedding.md",
        "session-log-format.md",
        "capsule-format.md",
    ] {
        for (n, line) in read_doc(name).lines().enumerate() {
            if line.contains('§') || line.contains("SPEC.md") {
                citations.push(format!("{name}:{}: {line}", n + 1));
            }
        }
    }
    assert!(citations.is_empty(), "{citations:#?}");
}

/// Issue 36 item 3: every output sample in the docs marked
/// `<!-- tested: soba ARGS -->` (the fenced block right after the marker)
/// is what the binary prints for ARGS, offline, in an empty sandbox;
/// paths of the sandbox print as `~`.
#[test]
fn marked_command_samples_in_the_docs_are_the_binarys_output() {
    let mut n_checked = 0;
    for name in ["user-guide.md"] {
        let doc = read_doc(name);
        let mut rest = doc.as_str();
        while let Some(at) = rest.find("<!-- tested: soba ") {
            let after = &rest[at + "<!-- tested: soba ".len()..];
            let end = after.find(" -->").expect("a closed marker");
            let args: Vec<&str> = after[..end].split_whitespace().collect();
            let block = &after[end + " -->".len()..];
            let block = block
                .trim_start_matches('\n')
                .strip_prefix("```")
                .and_then(|text| text.split_once('\n'))
                .map(|(_, text)| text)
                .expect("a fenced block after the marker");
            let expected = &block[..block.find("```").expect("a closed block")];
            let sandbox = crate::support::Sandbox::new();
            let output = sandbox.run(&args);
            let printed = String::from_utf8_lossy(&output.stdout)
                .replace(&sandbox.home.display().to_string(), "~");
            assert!(output.status.success(), "soba {args:?}: {output:?}");
            assert_eq!(printed, expected, "{name}: soba {}", args.join(" "));
            n_checked += 1;
            rest = &after[end..];
        }
    }
    assert!(n_checked >= 1, "no marked samples found");
}
