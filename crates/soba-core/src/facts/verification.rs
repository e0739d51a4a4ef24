//! Verification commands (SPEC §9.2): which shell commands run tests,
//! builds, linters or a project's check scripts.

use super::shell::{basename, shell_words, split_commands, strip_prefixes, strip_redirections};
use crate::command;

/// Programs that only show another command's output: a check piped into
/// one of them is still that check.
const OUTPUT_VIEWERS: [&str; 12] = [
    "head", "tail", "grep", "egrep", "rg", "less", "more", "cat", "tee", "wc", "sort", "uniq",
];

/// Returns the key under which verification keeps a command's latest
/// result: its simple commands without redirections and without the
/// viewers its output went through, so `npm run check 2>&1 | tail -5` and
/// `npm run check | grep error` are the one check `npm run check`, shown
/// once with its newest run.
pub fn check_key(command: &str) -> String {
    let segments = split_commands(&command::unwrap_shell(command));
    let kept: Vec<String> = segments
        .iter()
        .enumerate()
        .filter_map(|(idx, segment)| {
            let words = strip_redirections(shell_words(segment));
            let viewer = words
                .first()
                .is_some_and(|program| OUTPUT_VIEWERS.contains(&basename(program)));
            (idx == 0 || !viewer).then(|| words.join(" "))
        })
        .collect();
    kept.join(" ; ")
}

/// Returns whether two commands are one check ([`check_key`]).
pub(super) fn same_check(a: &str, b: &str) -> bool {
    a == b || check_key(a) == check_key(b)
}

/// Returns whether a shell command runs a test, build or lint step.
pub fn is_verification(command: &str) -> bool {
    split_commands(&command::unwrap_shell(command))
        .iter()
        .any(|segment| {
            let words = strip_redirections(shell_words(segment));
            is_verification_words(strip_prefixes(&words))
        })
}

pub(super) fn is_verification_words(words: &[String]) -> bool {
    let Some(program) = words.first() else {
        return false;
    };
    let args: Vec<&str> = words[1..]
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('+'))
        .collect();
    let first = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .copied()
        .unwrap_or("");
    let has = |flag: &str| args.contains(&flag);
    let scriptish = |script: &str| {
        [
            "test",
            "build",
            "lint",
            "check",
            "typecheck",
            "tsc",
            "e2e",
            "verify",
            "ci",
        ]
        .iter()
        .any(|word| script.contains(word))
    };
    match basename(program) {
        "cargo" => {
            matches!(
                first,
                "test" | "build" | "check" | "clippy" | "nextest" | "bench" | "t" | "b" | "c"
            ) || (first == "fmt" && has("--check"))
        }
        "npm" | "pnpm" | "yarn" | "bun" => match first {
            "test" | "t" | "tst" => true,
            "run" | "run-script" => args
                .iter()
                .skip_while(|a| **a != "run" && **a != "run-script")
                .nth(1)
                .is_some_and(|s| scriptish(s)),
            "install" | "i" | "ci" | "add" | "remove" | "exec" | "x" | "dlx" | "init"
            | "create" => false,
            script => basename(program) != "npm" && scriptish(script),
        },
        "npx" | "bunx" | "pnpx" => {
            let rest: Vec<String> = args
                .iter()
                .skip_while(|a| a.starts_with('-'))
                .map(|a| a.to_string())
                .collect();
            is_verification_words(&rest)
        }
        "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" if first == "run" => {
            let rest: Vec<String> = args
                .iter()
                .skip_while(|a| **a != "run")
                .skip(1)
                .map(|a| a.to_string())
                .collect();
            is_verification_words(&rest)
        }
        "bundle" if first == "exec" => {
            let rest: Vec<String> = args
                .iter()
                .skip_while(|a| **a != "exec")
                .skip(1)
                .map(|a| a.to_string())
                .collect();
            is_verification_words(&rest)
        }
        "pytest" | "py.test" | "tox" | "nox" | "mypy" | "pyright" | "flake8" | "pylint"
        | "ruff" | "jest" | "vitest" | "mocha" | "tsc" | "eslint" | "biome" | "stylelint"
        | "rspec" | "phpunit" | "ctest" | "make" | "gmake" | "ninja" | "mvn" | "mvnw"
        | "gradle" | "gradlew" | "golangci-lint" | "shellcheck" | "xcodebuild" | "pest" => true,
        "python" | "python3" | "py" => {
            if let Some(pos) = args.iter().position(|a| *a == "-m") {
                args.get(pos + 1).is_some_and(|module| {
                    matches!(
                        *module,
                        "pytest"
                            | "unittest"
                            | "mypy"
                            | "ruff"
                            | "flake8"
                            | "pylint"
                            | "tox"
                            | "nose2"
                            | "compileall"
                    )
                })
            } else {
                let file = basename(first);
                file.starts_with("test")
                    || file.starts_with("runtests")
                    || (file == "manage.py" && args.contains(&"test"))
            }
        }
        "go" => matches!(first, "test" | "build" | "vet"),
        "dotnet" | "swift" => matches!(first, "test" | "build"),
        "deno" => matches!(first, "test" | "lint" | "check"),
        "bazel" | "bazelisk" => matches!(first, "test" | "build"),
        "cmake" => has("--build"),
        "prettier" | "black" => has("--check"),
        "mix" => first == "test",
        "rake" => matches!(first, "test" | "spec"),
        "playwright" => first == "test",
        "cypress" => first == "run",
        "php" => args.contains(&"test") || first.ends_with("phpunit"),
        // A script run through a shell: `sh run_tests.sh`, `bash -e ci.sh`.
        "sh" | "bash" | "zsh" | "dash" | "ksh" => {
            !first.is_empty() && !has("-c") && is_script_step(first, &scriptish)
        }
        // A script run directly: `./run_tests.sh`, `scripts/check`.
        script if program.contains('/') || script.ends_with(".sh") => {
            is_script_step(program, &scriptish)
        }
        _ => false,
    }
}

/// Returns whether a script path names a test, build or lint step by its
/// file name (`run_tests.sh`, `ci/build`, `check.sh`).
pub(super) fn is_script_step(path: &str, scriptish: &dyn Fn(&str) -> bool) -> bool {
    let name = basename(path).to_ascii_lowercase();
    scriptish(name.trim_end_matches(".sh"))
}
