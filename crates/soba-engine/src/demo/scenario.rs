//! The session `soba demo` generates: a realistic coding task on a small
//! log-analysis project, with file reads, edits, failing and passing test
//! runs and checkpoints, long enough to cross hygieneLimit and autoLimit of
//! the demo model (65,000-token window).
//!
//! Everything is generated from a seed with a tiny deterministic generator,
//! so two runs give the same session byte for byte (ids and clock aside).

use serde_json::{Value, json};

/// One file of the generated workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoFile {
    /// Workspace-relative path.
    pub path: String,
    /// Its content.
    pub content: String,
}

/// One tool call the scripted model makes.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoCall {
    /// The tool's name (one of the agent's tools).
    pub tool: &'static str,
    /// Its arguments.
    pub input: Value,
}

/// One inference of the scripted model.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoStep {
    /// Assistant text before the calls.
    pub text: String,
    /// Tool calls; none ends the turn.
    pub calls: Vec<DemoCall>,
}

/// One user turn.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoTurn {
    /// What the user types.
    pub user: String,
    /// The model's steps; the last has no tool calls.
    pub steps: Vec<DemoStep>,
}

/// The whole generated session.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoScenario {
    /// Files written to the temporary workspace before the first turn.
    pub files: Vec<DemoFile>,
    /// The turns, in order.
    pub turns: Vec<DemoTurn>,
}

/// A splitmix64 generator: enough to vary the generated code deterministically.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

const NOUNS: [&str; 12] = [
    "record",
    "window",
    "bucket",
    "latency",
    "status",
    "endpoint",
    "client",
    "session",
    "payload",
    "histogram",
    "sample",
    "threshold",
];
const VERBS: [&str; 10] = [
    "parse",
    "merge",
    "filter",
    "collect",
    "render",
    "normalise",
    "summarise",
    "group",
    "rank",
    "validate",
];

/// Generates a Python module of roughly `n_functions` documented functions.
fn python_module(rng: &mut SplitMix, module: &str, n_functions: usize) -> String {
    let mut out = format!(
        "\"\"\"{module}: part of loglens, a small access-log analyzer.\n\nThe functions below are \
         pure and take already-parsed records.\n\"\"\"\n\nfrom __future__ import annotations\n\nimport \
         math\nfrom dataclasses import dataclass\nfrom typing import Iterable\n\n\n@dataclass\nclass \
         Record:\n    ts: float\n    method: str\n    path: str\n    status: int\n    latency_ms: \
         float\n\n"
    );
    for idx in 0..n_functions {
        let verb = rng.pick(&VERBS);
        let noun = rng.pick(&NOUNS);
        let other = rng.pick(&NOUNS);
        let limit = 10 + rng.next() % 490;
        out.push_str(&format!(
            "\ndef {verb}_{noun}_{idx}(records: Iterable[Record], limit: int = {limit}) -> list[Record]:\n    \
             \"\"\"{verb} each {noun} against its {other}, keeping at most `limit` results.\n\n    \
             Records whose {other} is missing are skipped rather than guessed, because a\n    \
             guessed {other} would skew every percentile computed downstream.\n    \"\"\"\n    \
             kept: list[Record] = []\n    for record in records:\n        if record.status >= 500 \
             and record.latency_ms > {limit}:\n            continue\n        if len(kept) >= limit:\n            \
             break\n        kept.append(record)\n    return kept\n"
        ));
    }
    out
}

fn call(tool: &'static str, input: Value) -> DemoCall {
    DemoCall { tool, input }
}

fn read(path: &str) -> DemoCall {
    call("read_file", json!({ "path": path }))
}

fn run_tests() -> DemoCall {
    call("bash", json!({ "command": "sh run_tests.sh" }))
}

fn step(text: &str, calls: Vec<DemoCall>) -> DemoStep {
    DemoStep {
        text: text.to_owned(),
        calls,
    }
}

/// The features the user asks for, one after the other. Each names the file
/// it touches, the marker the test script checks, and the line the edit adds.
const FEATURES: [(&str, &str, &str); 10] = [
    (
        "skip blank lines when parsing",
        "src/parser.py",
        "def skip_blank_lines",
    ),
    ("a --json output mode", "src/cli.py", "def render_json"),
    (
        "p50/p95/p99 latency percentiles",
        "src/stats.py",
        "def percentile",
    ),
    (
        "grouping by endpoint",
        "src/report.py",
        "def group_by_endpoint",
    ),
    (
        "a --since filter on timestamps",
        "src/cli.py",
        "def parse_since",
    ),
    (
        "status-class counts (2xx/4xx/5xx)",
        "src/stats.py",
        "def status_classes",
    ),
    (
        "a top-N slowest requests table",
        "src/report.py",
        "def slowest_requests",
    ),
    ("gzip input support", "src/parser.py", "def open_maybe_gzip"),
    (
        "a config file for default options",
        "src/config.py",
        "def load_config",
    ),
    (
        "an error budget report",
        "src/report.py",
        "def error_budget",
    ),
];

fn test_script() -> String {
    let mut script = String::from(
        "#!/bin/sh\n# loglens test runner: each check stands for one unit test.\nfailed=0\n",
    );
    for (idx, (feature, path, marker)) in FEATURES.iter().enumerate() {
        script.push_str(&format!(
            "if grep -q '{marker}' {path} 2>/dev/null; then echo 'ok {n} - {feature}'; else echo 'not ok {n} - \
             {feature}: {marker} missing in {path}'; failed=1; fi\n",
            n = idx + 1
        ));
    }
    script.push_str("exit $failed\n");
    script
}

/// Generates the demo scenario. The same seed gives the same scenario.
pub fn generate(seed: u64) -> DemoScenario {
    let mut rng = SplitMix(seed);
    let modules = [
        "parser",
        "cli",
        "stats",
        "report",
        "config",
        "formats",
        "filters",
        "timeseries",
    ];
    let mut files: Vec<DemoFile> = modules
        .iter()
        .map(|module| DemoFile {
            path: format!("src/{module}.py"),
            content: python_module(&mut rng, module, 36),
        })
        .collect();
    for module in modules {
        files.push(DemoFile {
            path: format!("tests/test_{module}.py"),
            content: python_module(&mut rng, &format!("test_{module}"), 30),
        });
    }
    files.push(DemoFile {
        path: "run_tests.sh".into(),
        content: test_script(),
    });
    files.push(DemoFile {
        path: "AGENTS.md".into(),
        content: "# loglens\n\nRun `sh run_tests.sh` before saying a change is done. Keep functions pure.\n".into(),
    });

    let mut turns = Vec::new();
    turns.push(DemoTurn {
        user: "We are extending loglens, our access-log analyzer. Over this session I'll ask for ten features one \
               by one. Always run `sh run_tests.sh` after a change and keep the public functions pure."
            .into(),
        steps: vec![
            step("Let me look at the project layout first.", vec![call("list_files", json!({}))]),
            step("", vec![read("src/parser.py"), read("src/cli.py")]),
            step("Understood. I've read the parser and CLI; ready for the first feature.", vec![]),
        ],
    });
    for (idx, (feature, path, marker)) in FEATURES.iter().enumerate() {
        let n = idx + 1;
        // The plan the model keeps: every feature asked for so far, this
        // one in progress (then completed at its milestone).
        let plan = |current: &str| {
            let mut steps: Vec<Value> = FEATURES[..n]
                .iter()
                .enumerate()
                .map(|(done_idx, (name, _, _))| {
                    let status = if done_idx + 1 < n {
                        "completed"
                    } else {
                        current
                    };
                    json!({ "step": format!("Feature {}: {name}", done_idx + 1), "status": status })
                })
                .collect();
            match FEATURES.len() - n {
                0 => {}
                1 => steps.push(json!({ "step": "Feature 10, when the user asks for it", "status": "pending" })),
                _ => steps.push(json!({
                    "step": format!("Features {}-{}, one by one as the user asks for them", n + 1, FEATURES.len()),
                    "status": "pending"
                })),
            }
            call("update_plan", json!({ "plan": steps }))
        };
        let helper_line = format!(
            "\n\n{marker}(*args, **kwargs):\n    \"\"\"Feature {n}: {feature}.\"\"\"\n    return None\n"
        );
        turns.push(DemoTurn {
            user: format!("Feature {n}: please add {feature}."),
            steps: vec![
                step(
                    &format!("I'll start by reading {path} and running the tests."),
                    vec![plan("in_progress"), read(path), run_tests()],
                ),
                step(
                    &format!("Test {n} fails as expected. Adding `{marker}` to {path}."),
                    vec![call(
                        "edit_file",
                        json!({
                            "path": path,
                            "oldString": "from typing import Iterable\n",
                            "newString": format!("from typing import Iterable{helper_line}"),
                        }),
                    )],
                ),
                step("Re-running the tests.", vec![run_tests()]),
                step(
                    &format!("Feature {n} ({feature}) is in; test {n} passes now."),
                    vec![
                        call(
                            "checkpoint",
                            json!({ "kind": "milestone", "note": format!("{marker} added to {path}; test {n} passes") }),
                        ),
                        plan("completed"),
                    ],
                ),
                step(&format!("Done: {feature} lives in {path}."), vec![]),
            ],
        });
        turns.push(DemoTurn {
            user: format!("Looks good. Before the next one, review {path} and the module it calls for dead code."),
            steps: vec![
                step("Reading both modules.", vec![read(path), read(&format!("src/{}.py", modules[(idx + 2) % modules.len()]))]),
                step(
                    &format!(
                        "Review of {path}: the generated helpers repeat the same filter loop; none is dead, but \
                         `limit` defaults differ between modules. I would keep them as they are for now."
                    ),
                    vec![],
                ),
            ],
        });
        if n % 2 == 0 {
            let mut steps = vec![step(
                "Auditing every module, one at a time, for inconsistent `limit` defaults.",
                vec![run_tests()],
            )];
            for module in modules {
                steps.push(step(
                    &format!("Next: src/{module}.py."),
                    vec![read(&format!("src/{module}.py"))],
                ));
                if n % 4 == 0 {
                    // Every other audit also compares each module with its tests,
                    // a long tool loop that crosses autoLimit mid-turn.
                    steps.push(step(
                        &format!("And its tests, tests/test_{module}.py."),
                        vec![read(&format!("tests/test_{module}.py"))],
                    ));
                }
            }
            steps.push(step(
                &format!(
                    "Audit after feature {n}: every module filters with its own `limit` default (10 to 499); \
                     nothing is dead code. Suggest one shared DEFAULT_LIMIT constant later."
                ),
                vec![],
            ));
            turns.push(DemoTurn {
                user:
                    "Audit the whole codebase for inconsistent `limit` defaults, module by module."
                        .into(),
                steps,
            });
        }
        if n == 5 {
            turns.push(DemoTurn {
                user: "Change of plan: config loading should come before the remaining report features.".into(),
                steps: vec![
                    step(
                        "Noted; recording the pivot.",
                        vec![call("checkpoint", json!({ "kind": "plan_pivot", "note": "config loading moves ahead of the report features" }))],
                    ),
                    step("Plan updated: config first, then the report features.", vec![]),
                ],
            });
        }
        turns.push(DemoTurn {
            user: "continue".into(),
            steps: vec![
                step("Checking the whole suite once more.", vec![run_tests(), read("run_tests.sh")]),
                step(&format!("{n} of 10 features are done; the remaining checks fail only for features not started."), vec![]),
            ],
        });
    }
    DemoScenario { files, turns }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_long() {
        let a = generate(7);
        let b = generate(7);
        assert_eq!(a, b);
        assert!(a.turns.len() >= 30, "{} turns", a.turns.len());
        assert!(
            a.turns
                .iter()
                .all(|turn| turn.steps.last().is_some_and(|s| s.calls.is_empty()))
        );
        let bytes: usize = a.files.iter().map(|f| f.content.len()).sum();
        assert!(
            bytes > 60_000,
            "workspace of {bytes} bytes is too small to cross the demo limits"
        );
    }

    #[test]
    fn every_edit_targets_text_present_in_the_file() {
        let scenario = generate(7);
        for turn in &scenario.turns {
            for step in &turn.steps {
                for call in step.calls.iter().filter(|c| c.tool == "edit_file") {
                    let path = call.input["path"].as_str().unwrap();
                    let file = scenario.files.iter().find(|f| f.path == path).unwrap();
                    assert!(
                        file.content
                            .contains(call.input["oldString"].as_str().unwrap())
                    );
                }
            }
        }
    }
}
