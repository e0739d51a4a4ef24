//! `soba replay` (SPEC §15) on the shared corpus of real transcripts: every
//! file replays, the `none` policy reproduces the recorded prompt sizes,
//! and the binary's exit codes and skipped rows behave as specified. The
//! corpus lives outside the repository; each test says why it skipped when
//! it is absent.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use soba_core::TokenCount;
use soba_replay::{
    self as replay, Loaded, PolicyKind, PolicySpec, ReplayOptions, Trace, TraceOptions,
};

/// The shared raw traces, `../shared/traces/raw` from the repository root.
fn raw_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/raw");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipped: {} is absent", dir.display());
        None
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn soba(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .env_remove("SOBA_HOME")
        .env_remove("SOBA_MODEL")
        .output()
        .expect("the soba binary runs")
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn every_shared_trace_replays_under_every_policy() {
    let Some(dir) = raw_dir() else { return };
    for path in files_under(&dir) {
        // At defaults: a model no table knows (SWE-agent's) replays at the
        // window its transcript proves (issue 34).
        let options = ReplayOptions::default();
        let report = replay::replay_path(&path, &options)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert!(report.replayed() >= 1, "{}", path.display());
        for trace in &report.traces {
            assert_eq!(trace.skipped, None, "{}", trace.trace);
            let names: Vec<&str> = trace.policies.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "none",
                    "soba",
                    "claude-code",
                    "codex",
                    "pi",
                    "opencode",
                    "goose"
                ]
            );
            let none = &trace.policies[0];
            assert_eq!(none.requests as usize, trace.recorded_requests);
            for stats in &trace.policies {
                assert!(stats.requests > 0, "{} {}", trace.trace, stats.name);
                assert!(stats.billed_equivalent_tokens > 0.0);
                if let Some(mean) = stats.recall_mean() {
                    assert!((0.0..=1.0).contains(&mean));
                }
            }
            // SOBA never sends a request above its hardLimit.
            let soba = &trace.policies[1];
            let (hard, _) = trace.soba_limits.expect("soba ran");
            assert!(
                soba.peak_input_tokens <= hard + hard / 100,
                "{}",
                trace.trace
            );
            println!(
                "{}: {} requests, soba peak {} compactions {}",
                trace.trace, trace.recorded_requests, soba.peak_input_tokens, soba.compactions
            );
        }
    }
}

/// Returns (median, max) of relative errors.
fn error_figures(mut errors: Vec<f64>) -> (f64, f64) {
    errors.sort_by(f64::total_cmp);
    let median = if errors.len() % 2 == 1 {
        errors[errors.len() / 2]
    } else {
        (errors[errors.len() / 2 - 1] + errors[errors.len() / 2]) / 2.0
    };
    (median, errors.last().copied().unwrap_or(0.0))
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn none_reproduces_recorded_prompt_sizes_of_pi_and_codex() {
    let Some(dir) = raw_dir() else { return };
    for file in [
        "pi-mono/large-session.jsonl",
        "pi-mono/before-compaction.jsonl",
        "codex-converted/trajectory-1.json",
    ] {
        let path = dir.join(file);
        let Loaded::Session { name, session } =
            replay::load(&path).unwrap().into_iter().next().unwrap()
        else {
            panic!("{file} did not import");
        };
        let trace = Trace::prepare(
            name.clone(),
            (*session).clone(),
            &TraceOptions {
                image_tokens: TokenCount::new(1_100),
                ..TraceOptions::default()
            },
        )
        .unwrap();
        let options = ReplayOptions {
            policies: vec![PolicySpec::new(PolicyKind::None)],
            ..ReplayOptions::default()
        };
        let outcome = replay::replay_session(name, *session, &options).unwrap();
        let none = &outcome.report.series[0];
        let end = trace.first_compaction_step.unwrap_or(trace.steps.len());
        let mut errors = Vec::new();
        for (step, tokens) in trace.steps[..end].iter().zip(&none.tokens) {
            let Some(reported) = step.usage.map(|usage| usage.prompt()) else {
                continue;
            };
            if reported <= 50_000 {
                continue;
            }
            let replayed = tokens.expect("none sends every request") as f64;
            errors.push((replayed - reported as f64).abs() / reported as f64);
        }
        assert!(!errors.is_empty(), "{file}: no request above 50,000 tokens");
        let calibration = trace.primary_calibration();
        let (median, max) = error_figures(errors.clone());
        println!(
            "{file}: factor {:.4} overhead {} ({}), {} requests > 50k before the first compaction, median error {:.2} %, max {:.2} %",
            calibration.factor,
            calibration.overhead,
            calibration.source.as_str(),
            errors.len(),
            median * 100.0,
            max * 100.0
        );
        assert!(median <= 0.03, "{file}: median error {median}");
        assert!(max <= 0.15, "{file}: max error {max}");
    }
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn codex_trace_first_compaction_is_found_from_usage() {
    let Some(dir) = raw_dir() else { return };
    let path = dir.join("codex-converted/trajectory-1.json");
    let Loaded::Session { name, session } = replay::load(&path).unwrap().remove(0) else {
        panic!("the codex trace did not import");
    };
    let trace = Trace::prepare(name, *session, &TraceOptions::default()).unwrap();
    let step = trace
        .first_compaction_step
        .expect("a drop below half is a compaction");
    // SOURCES.md: the prompt falls from 211,015 to 15,784 tokens.
    assert_eq!(trace.steps[step].usage.map(|u| u.prompt()), Some(15_784));
    assert_eq!(trace.window, 258_400);
    assert_eq!(trace.max_output, 32_000);
    // Matched by canonical name, shown as the transcript spells it.
    assert_eq!(trace.model, "gpt-5-3-codex-bak");
    assert_eq!(trace.model_shown, "gpt-5.3-codex-bak");
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn a_single_file_with_an_unknown_model_replays_at_the_window_it_proves() {
    let Some(dir) = raw_dir() else { return };
    let file = dir.join("swe-agent/pydicom__pydicom-1458.traj");
    let file = file.to_str().unwrap();
    // Issue 34: no window known, so the largest request plus its output
    // (a lower bound) is used, said on one line.
    let output = soba(&["replay", file, "--policy", "none,soba"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let notes: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("is unknown: replayed at"))
        .collect();
    assert_eq!(notes.len(), 1, "{stdout}");
    assert!(
        notes[0].contains("a lower bound; pass --window N"),
        "{stdout}"
    );

    let output = soba(&[
        "replay",
        file,
        "--policy",
        "none,soba",
        "--window",
        "128000",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.lines().any(|line| line.starts_with("soba ")),
        "{stdout}"
    );

    // A model limit set in config resolves the window too.
    let output = soba(&[
        "replay",
        file,
        "--policy",
        "none",
        "--set",
        "models.\"unknown\".contextWindow=128000",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("window 128,000"));
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn a_folder_lists_unreplayable_traces_as_skipped_and_exits_zero() {
    let Some(dir) = raw_dir() else { return };
    let output = soba(&[
        "replay",
        dir.join("swe-agent").to_str().unwrap(),
        "--policy",
        "none",
        "--json",
    ]);
    // Both SWE-agent files lack a known window: each replays at the
    // window its transcript proves (issue 34), so the folder replays.
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let traces = json["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2);
    assert!(traces.iter().all(|t| t["skipped"].is_null()), "{traces:?}");

    let scratch = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir.join("swe-agent/pydicom__pydicom-1458.traj"),
        scratch.path().join("unknown-model.traj"),
    )
    .unwrap();
    std::fs::copy(
        dir.join("gemini-cli/session-2026-01-30T06-08-7befeae5.json"),
        scratch.path().join("gemini.json"),
    )
    .unwrap();
    std::fs::write(scratch.path().join("notes.txt"), "not a transcript\n").unwrap();
    let html = scratch.path().join("report.html");
    let output = soba(&[
        "replay",
        scratch.path().to_str().unwrap(),
        "--policy",
        "none,soba",
        "--json",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let traces = json["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 3);
    let skipped: Vec<&str> = traces
        .iter()
        .filter_map(|t| t["skipped"].as_str())
        .collect();
    // Only the text file: the unknown model replays too.
    assert_eq!(skipped.len(), 1, "{traces:?}");
    assert!(!skipped.iter().any(|reason| reason.contains("--window")));
    let replayed = traces.iter().find(|t| t["skipped"].is_null()).unwrap();
    for key in [
        "trace",
        "format",
        "window",
        "maxOutput",
        "fixedOverhead",
        "factor",
        "policies",
    ] {
        assert!(!replayed[key].is_null(), "traces[] lacks {key}");
    }
    for policy in json["policies"].as_array().unwrap() {
        for key in [
            "name",
            "requests",
            "overWindow",
            "compactions",
            "peakInputTokens",
            "meanInputTokens",
            "summarizerInputTokens",
            "summarizerOutputTokens",
            "billedEquivalentTokens",
            "probeRecallMean",
            "probeRecallMin",
            "resends",
            "summarizerCalls",
            "rejectedCapsules",
            "hygienePasses",
            "probes",
        ] {
            assert!(policy.get(key).is_some(), "policies[] lacks {key}");
        }
    }
    assert!(json["realSummaries"].is_array());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("skipped"), "{stderr}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<svg"));
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn peer_trigger_adds_peer_variants() {
    let Some(dir) = raw_dir() else { return };
    let file = dir.join("gemini-cli/session-2026-01-30T06-08-7befeae5.json");
    let output = soba(&[
        "replay",
        file.to_str().unwrap(),
        "--policy",
        "soba,goose",
        "--peer-trigger",
        "40000",
        "--json",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = json["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["soba", "goose", "goose@40000"]);
}

/// `--dump-inputs`: one line per policy at the last request of each
/// fifth of the trace, with every item's role, kind, origin and text.
#[test]
fn dump_inputs_writes_every_policys_input_at_five_points() {
    let sandbox = crate::support::Sandbox::new();
    let trace = sandbox.ws.join("session.jsonl");
    soba_store::fixtures::write_claude_code_session(&trace, 100_000).unwrap();
    let dump = sandbox.ws.join("inputs.jsonl");
    let output = soba(&[
        "replay",
        trace.to_str().unwrap(),
        "--peer-trigger",
        "20000",
        "--json",
        "--dump-inputs",
        dump.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("wrote "), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let n = json["traces"][0]["requests"].as_u64().unwrap();
    assert!(n >= 5, "{n}");
    let names: Vec<&str> = json["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 12);
    let text = std::fs::read_to_string(&dump).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), names.len() * 5);
    let points: Vec<u64> = (1..=5).map(|k| (k * n).div_ceil(5) - 1).collect();
    for (idx, line) in lines.iter().enumerate() {
        assert_eq!(line["trace"].as_str(), Some(trace.to_str().unwrap()));
        assert_eq!(line["requests"].as_u64(), Some(n));
        assert_eq!(line["request"].as_u64(), Some(points[idx / names.len()]));
        assert_eq!(line["policy"].as_str(), Some(names[idx % names.len()]));
        for item in line["items"].as_array().unwrap() {
            let role = item["role"].as_str().unwrap();
            assert!(
                ["system", "user", "assistant", "tool"].contains(&role),
                "{item}"
            );
            assert!(item["kind"].is_string(), "{item}");
            assert!(item["text"].is_string(), "{item}");
            let real_user = item["realUser"].as_bool().unwrap();
            // Only typed text is the user's: never a tool result or capsule.
            if real_user {
                assert_eq!(role, "user", "{item}");
                assert!(["message", "truncated"].contains(&item["kind"].as_str().unwrap()));
            }
        }
    }
    // `none` at the last point holds every result and the typed task.
    let last_none = &lines[4 * names.len()];
    assert_eq!(last_none["policy"], "none");
    let items = last_none["items"].as_array().unwrap();
    assert!(items.iter().any(|item| item["realUser"] == true));
    assert!(
        items
            .iter()
            .any(|item| item["kind"] == "tool_result" && item["role"] == "tool")
    );
    assert!(
        items
            .iter()
            .any(|item| item["kind"] == "tool_call" && item["role"] == "assistant")
    );
    // The JSON report carries the fidelity of every policy, with counts.
    let fidelity = &json["policies"][0]["fidelity"];
    for key in [
        "filesTouched",
        "openErrors",
        "constraints",
        "openPlanItems",
        "olderResults",
    ] {
        assert!(fidelity[key]["items"].is_u64(), "{key}: {fidelity}");
        assert!(fidelity[key]["kept"].is_u64(), "{key}: {fidelity}");
    }
    assert!(
        fidelity["olderResults"]["items"].as_u64().unwrap() > 0,
        "{fidelity}"
    );
    assert_eq!(fidelity["olderResults"]["share"], 1.0);

    // A file that cannot be written is an error naming it and what to do.
    let nowhere = sandbox.ws.join("no/such/folder/inputs.jsonl");
    let output = soba(&[
        "replay",
        trace.to_str().unwrap(),
        "--dump-inputs",
        nowhere.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot write the model inputs to {}",
            nowhere.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("--dump-inputs FILE"), "{stderr}");
}

#[test]
fn bad_options_are_usage_errors() {
    let output = soba(&["replay", "nowhere.jsonl", "--policy", "gemini"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown policy gemini"));
    let output = soba(&["replay", "nowhere.jsonl", "--cache", "redis"]);
    assert_eq!(output.status.code(), Some(2));
    // A price that overflows the billed figures is refused.
    let output = soba(&["replay", "nowhere.jsonl", "--summarizer-price", "1e308"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("--summarizer-price 1e308: expected a number from 0 to 100")
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn json_decomposes_every_policys_cost_into_reads_writes_and_the_summarizer() {
    let Some(dir) = raw_dir() else { return };
    let file = dir.join("pi-mono/before-compaction.jsonl");
    let output = soba(&[
        "replay",
        file.to_str().unwrap(),
        "--cache",
        "anthropic",
        "--peer-trigger",
        "80000",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for policy in json["policies"].as_array().unwrap() {
        let name = policy["name"].as_str().unwrap();
        let cache = &policy["cache"];
        let read = cache["readTokens"].as_f64().unwrap();
        let write = cache["writeTokens"].as_f64().unwrap();
        let by: f64 = ["afterCompaction", "afterHygiene", "atExpiry", "other"]
            .iter()
            .map(|key| cache["writeTokensBy"][key].as_f64().unwrap())
            .sum();
        assert_eq!(by, write, "{name}");
        let summarizer = policy["summarizerBilledTokens"].as_f64().unwrap();
        let billed = policy["billedEquivalentTokens"].as_f64().unwrap();
        // Anthropic: reads × 0.1 + writes × 1.25 + the summarizer.
        let sum = 0.1 * read + 1.25 * write + summarizer;
        assert!((billed - sum).abs() <= 2.0, "{name}: {billed} != {sum}");
        let compactions = policy["compactions"].as_u64().unwrap();
        let after = cache["writeTokensBy"]["afterCompaction"].as_u64().unwrap();
        assert_eq!(compactions == 0, after == 0, "{name}");
    }
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn a_recorded_compaction_far_below_the_window_gives_a_warning() {
    let Some(dir) = raw_dir() else { return };
    let file = dir.join("pi-mono/before-compaction.jsonl");
    let run = |sets: &[&str]| {
        let mut args = vec![
            "replay",
            file.to_str().unwrap(),
            "--policy",
            "none",
            "--json",
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        let output = soba(&args);
        assert_eq!(output.status.code(), Some(0));
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        (
            json["traces"][0]["window"].as_u64().unwrap(),
            json["traces"][0]["warnings"].clone(),
        )
    };
    // Claude Opus 4.5's window is 200,000: pi's compaction at 184,915
    // tokens fits it, no warning.
    assert_eq!(run(&[]), (200_000, serde_json::json!([])));
    // Declared 1M, the recorded compaction implies 200,000.
    let (window, warnings) = run(&[r#"models."anthropic/claude-opus-4-5".contextWindow=1000000"#]);
    assert_eq!(window, 1_000_000);
    assert_eq!(
        warnings,
        serde_json::json!([
            "the trace records a compaction at 184,915 tokens, far below the window 1,000,000 in use; it implies --window 200,000"
        ])
    );
}

/// A small Codex rollout: meta, a user turn, an assistant answer with its
/// token count.
fn codex_rollout(cwd: &str, day: &str) -> String {
    [
        format!(r#"{{"timestamp":"{day}T10:00:00Z","type":"session_meta","payload":{{"id":"R-{day}","timestamp":"{day}T10:00:00Z","cwd":"{cwd}","base_instructions":{{"text":"You are Codex."}}}}}}"#),
        format!(r#"{{"timestamp":"{day}T10:00:00Z","type":"turn_context","payload":{{"model":"gpt-5-codex","cwd":"{cwd}"}}}}"#),
        format!(r#"{{"timestamp":"{day}T10:00:02Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"fix the failing test"}}]}}}}"#),
        format!(r#"{{"timestamp":"{day}T10:00:04Z","type":"response_item","payload":{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"Fixed."}}]}}}}"#),
        format!(r#"{{"timestamp":"{day}T10:00:05Z","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":1200,"cached_input_tokens":0,"output_tokens":7,"reasoning_output_tokens":0,"total_tokens":0}},"last_token_usage":{{"input_tokens":1200,"cached_input_tokens":0,"output_tokens":7,"reasoning_output_tokens":0,"total_tokens":0}},"model_context_window":272000}}}}}}"#),
    ]
    .join("\n")
        + "\n"
}

/// `soba replay` with no path finds Claude Code, Codex and pi sessions in
/// a generated home's standard places, leaves sub-agent files out, says
/// what it found per agent, and filters by agent, day and project.
#[test]
fn replay_without_a_path_discovers_every_agents_sessions() {
    let sandbox = crate::support::Sandbox::new();
    let home = sandbox.home.parent().unwrap().to_owned();
    let claude = home.join(".claude/projects/-work-project");
    std::fs::create_dir_all(claude.join("0a1b/subagents")).unwrap();
    soba_store::fixtures::write_claude_code_session(&claude.join("0a1b.jsonl"), 40_000).unwrap();
    // A sub-agent's transcript is part of its parent session.
    std::fs::copy(
        claude.join("0a1b.jsonl"),
        claude.join("0a1b/subagents/agent-1.jsonl"),
    )
    .unwrap();
    std::fs::copy(claude.join("0a1b.jsonl"), claude.join("agent-2.jsonl")).unwrap();
    let codex = home.join(".codex/sessions/2026/11/30");
    std::fs::create_dir_all(&codex).unwrap();
    std::fs::write(
        codex.join("rollout-2026-11-30T10-00-00-r1.jsonl"),
        codex_rollout("/work/api", "2026-11-30"),
    )
    .unwrap();
    std::fs::write(codex.join("history.jsonl"), "not a session\n").unwrap();
    let pi = home.join(".pi/agent/sessions/--work-app--");
    std::fs::create_dir_all(&pi).unwrap();
    std::fs::write(
        pi.join("2025-02-01T10-00-00-000Z_p1.jsonl"),
        crate::support::pi_session("fix the build"),
    )
    .unwrap();

    let out = sandbox.run(&["replay", "--json", "--policy", "none,soba"]);
    let stderr = crate::support::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let claude_root = home.join(".claude/projects");
    for line in [
        format!("claude-code: 1 session file in {}", claude_root.display()),
        format!(
            "codex: 1 session file in {}",
            home.join(".codex/sessions").display()
        ),
        format!(
            "codex: no {}",
            home.join(".codex/archived_sessions").display()
        ),
        format!(
            "pi: 1 session file in {}",
            home.join(".pi/agent/sessions").display()
        ),
        format!("gemini: no {}", home.join(".gemini/tmp").display()),
        "replayed 3 sessions from 3 files".to_owned(),
    ] {
        assert!(stderr.contains(&line), "{line:?} not in:\n{stderr}");
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let traces = report["traces"].as_array().unwrap();
    let formats: Vec<&str> = traces
        .iter()
        .map(|trace| trace["format"].as_str().unwrap())
        .collect();
    assert_eq!(formats, ["claude-code", "codex-rollout", "pi-v1"]);
    assert!(traces.iter().all(|trace| trace["skipped"].is_null()));
    // Each in tokens and dollars: the recorded cost from its own usage,
    // and each policy's.
    for trace in traces {
        assert!(trace["recordedDollars"].as_f64().unwrap() > 0.0, "{trace}");
        for policy in trace["policies"].as_array().unwrap() {
            assert!(
                policy["billedEquivalentTokens"].as_u64().unwrap() > 0,
                "{policy}"
            );
            assert!(policy["dollars"].as_f64().unwrap() > 0.0, "{policy}");
        }
    }
    let total: f64 = traces
        .iter()
        .map(|trace| trace["recordedDollars"].as_f64().unwrap())
        .sum();
    assert!((report["recordedDollars"].as_f64().unwrap() - total).abs() < 1e-5);

    // --agent, --since/--until and --project narrow it down.
    let only = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["replay", "--json", "--policy", "none"];
        all.extend_from_slice(args);
        let out = sandbox.run(&all);
        assert!(
            out.status.success(),
            "{}",
            crate::support::text(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["traces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|trace| trace["format"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(only(&["--agent", "codex,pi"]), ["codex-rollout", "pi-v1"]);
    // Claude Code's started on 2025-11-20, Codex's on 2026-11-30, pi's on
    // 2025-02-01.
    assert_eq!(
        only(&["--since", "2025-06-01"]),
        ["claude-code", "codex-rollout"]
    );
    assert_eq!(only(&["--until", "2025-06-01"]), ["pi-v1"]);
    assert_eq!(
        only(&["--since", "2025-06-01", "--until", "2026-06-01"]),
        ["claude-code"]
    );
    // Claude Code's ran in /work/project, Codex's in /work/api, pi's in
    // /work/app.
    assert_eq!(only(&["--project", "/work/app"]), ["pi-v1"]);
    assert_eq!(only(&["--project", "/work"]).len(), 3);
    assert_eq!(only(&["--project", "api", "-j", "1"]), ["codex-rollout"]);

    // Bad filters are usage errors that say what to write.
    let out = sandbox.run(&["replay", "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        crate::support::text(&out.stderr)
            .contains("--since yesterday: expected a day as YYYY-MM-DD")
    );
    let out = sandbox.run(&["replay", "--agent", "cursor"]);
    assert_eq!(out.status.code(), Some(2));
    let out = sandbox.run(&["replay", "--project", "/nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(crate::support::text(&out.stderr).contains("no session passed the filters"));
}

/// With nothing in the standard places, `soba replay` says so and how to
/// name a file instead.
#[test]
fn replay_without_a_path_in_an_empty_home_says_where_it_looked() {
    let sandbox = crate::support::Sandbox::new();
    let out = sandbox.run(&["replay"]);
    let stderr = crate::support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("claude-code: no "), "{stderr}");
    assert!(
        stderr.contains("no sessions of Claude Code, Codex, pi, Gemini CLI or opencode were found"),
        "{stderr}"
    );
    assert!(stderr.contains("soba replay PATH"), "{stderr}");
}

/// The recorded cost is the transcript's own usage at the model's list
/// price, and every policy's cost is its billed-equivalent input at the
/// input price plus the recorded output at the output price; `--cost
/// tokens` leaves dollars out of the table.
#[test]
fn dollars_price_the_recorded_usage_and_each_policys_requests() {
    let sandbox = crate::support::Sandbox::new();
    let path = sandbox.write("pi.jsonl", &crate::support::pi_session("fix the build"));
    let path = path.to_str().unwrap();
    let out = sandbox.run_ok(&["replay", path, "--json", "--policy", "none,soba"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // claude-sonnet-4-5 at $3 / $15 / $0.30 / $3.75 per million: input
    // 10 + 5, output 20 + 7, cache reads 100 + 300, cache writes 50.
    let recorded = (15.0 * 3.0 + 27.0 * 15.0 + 400.0 * 0.30 + 50.0 * 3.75) / 1e6;
    let trace = &report["traces"][0];
    assert!((trace["recordedDollars"].as_f64().unwrap() - recorded).abs() < 1e-6);
    assert!((report["recordedDollars"].as_f64().unwrap() - recorded).abs() < 1e-6);
    assert_eq!(report["pricesAsOf"], "2026-11-20");
    for policy in trace["policies"].as_array().unwrap() {
        let billed = policy["billedEquivalentTokens"].as_f64().unwrap();
        let expected = (billed * 3.0 + 27.0 * 15.0) / 1e6;
        let dollars = policy["dollars"].as_f64().unwrap();
        assert!((dollars - expected).abs() < 2e-6, "{policy}");
    }

    let out = sandbox.run_ok(&["replay", path, "--policy", "none,soba"]);
    let table = crate::support::text(&out.stdout);
    assert!(
        table.contains(
            "recorded $0.0008: what 1 trace(s) cost by their own usage (list prices as of 2026-11-20)"
        ),
        "{table}"
    );
    let header = table
        .lines()
        .find(|line| line.starts_with("policy"))
        .unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    let billed = columns.iter().position(|c| *c == "billed").unwrap();
    assert_eq!(
        columns[billed..billed + 3],
        ["billed", "$", "recall"],
        "{table}"
    );
    // The table reads without the guide: a legend under it, naming `$`
    // only when the table has that column.
    assert!(
        table.contains(
            "\n  $: at list price · recall, min: the mean and worst retention-probe share"
        ),
        "{table}"
    );
    let out = sandbox.run_ok(&["replay", path, "--policy", "none,soba", "--cost", "tokens"]);
    let table = crate::support::text(&out.stdout);
    assert!(!table.contains('$'), "{table}");
    assert!(
        table.contains("\n  recall, min: the mean and worst retention-probe share"),
        "{table}"
    );

    // Without usage records there is no recorded cost, and the table says
    // why instead of blaming the price.
    let no_usage: Vec<String> = crate::support::pi_session("fix the build")
        .lines()
        .map(
            |line| match serde_json::from_str::<serde_json::Value>(line) {
                Ok(mut value) => {
                    if let Some(message) = value.get_mut("message").and_then(|m| m.as_object_mut())
                    {
                        message.remove("usage");
                    }
                    value.to_string()
                }
                Err(_) => line.to_owned(),
            },
        )
        .collect();
    let bare = sandbox.write("bare.jsonl", &(no_usage.join("\n") + "\n"));
    let out = sandbox.run_ok(&["replay", bare.to_str().unwrap(), "--policy", "none"]);
    let table = crate::support::text(&out.stdout);
    assert!(
        table.contains("recorded: no trace records usage at a known price"),
        "{table}"
    );
}

/// Discovery against odd homes (attack findings): a copy of a session in
/// a second root is counted once, a zero-filled file is refused from its
/// first bytes, files deeper than the layout are not read, a name that is
/// not UTF-8 is still found, a newline in a name cannot fake a row on
/// stdout, a relative `--project` names a folder, and a hostile `TZ`
/// falls back to UTC with a warning instead of being read.
#[test]
fn discovery_holds_against_odd_homes() {
    use std::os::unix::ffi::OsStrExt;
    let sandbox = crate::support::Sandbox::new();
    let home = sandbox.home.parent().unwrap().to_owned();
    let ws = sandbox.ws.display().to_string();
    let claude = home.join(".claude/projects/-work-project");
    std::fs::create_dir_all(&claude).unwrap();
    soba_store::fixtures::write_claude_code_session(&claude.join("0a1b.jsonl"), 20_000).unwrap();
    let copy = home.join(".config/claude/projects/-work-project");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(claude.join("0a1b.jsonl"), copy.join("0a1b.jsonl")).unwrap();
    let pi = home.join(".pi/agent/sessions/--ws--");
    std::fs::create_dir_all(pi.join("deep/deeper")).unwrap();
    let session = crate::support::pi_session("fix the build").replace("/work/app", &ws);
    std::fs::write(pi.join("a\nFAKE ROW.jsonl"), &session).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"c\xfe.jsonl");
    std::fs::write(pi.join(odd), session.replace("pi-sess-1", "pi-sess-2")).unwrap();
    std::fs::write(pi.join("deep/deeper/too-deep.jsonl"), &session).unwrap();
    std::fs::write(pi.join("zeros.jsonl"), vec![0u8; 1 << 20]).unwrap();

    let out = sandbox
        .command(&[
            "replay",
            "--policy",
            "none",
            "--cost",
            "tokens",
            "--since",
            "2025-01-01",
        ])
        .env("TZ", "/dev/zero")
        .output()
        .unwrap();
    let stderr = crate::support::text(&out.stderr);
    let stdout = crate::support::text(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "warning: TZ=/dev/zero is not a time zone soba can read; days are counted in UTC"
        ),
        "{stderr}"
    );
    // pi: the two sessions and the zero-filled file; not the one too deep.
    assert!(
        stderr.contains(&format!(
            "pi: 3 session files in {}",
            home.join(".pi/agent/sessions").display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("zeros.jsonl: ") && stderr.contains("is not a transcript soba can import"),
        "{stderr}"
    );
    assert!(stderr.contains("the same session as"), "{stderr}");
    assert!(
        stderr.contains("replayed 3 sessions from 5 files"),
        "{stderr}"
    );
    assert!(
        !stdout.lines().any(|line| line.starts_with("FAKE")),
        "{stdout}"
    );
    assert!(stdout.contains("a\\nFAKE ROW.jsonl"), "{stdout}");

    // `--project .` from the workspace keeps the two pi sessions run there.
    let out = sandbox.run(&["replay", "--json", "--policy", "none", "--project", "."]);
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept: Vec<&str> = report["traces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|trace| trace["skipped"].is_null())
        .map(|trace| trace["format"].as_str().unwrap())
        .collect();
    assert_eq!(kept, ["pi-v1", "pi-v1"]);
    // Both copies of the Claude Code session ran in /work/project.
    assert_eq!(report["leftOut"]["project"], 2);
}

/// A run of several sessions reports them per session (the default), per
/// day and per project, each row with the recorded cost, the session's own
/// agent's compaction and SOBA's replayed, the saving, the requests over
/// the window and recall; `--json` holds all three groupings.
#[test]
fn several_sessions_are_reported_per_session_day_and_project() {
    let mut sandbox = crate::support::Sandbox::new();
    sandbox.env.push(("TZ".to_owned(), "UTC".to_owned()));
    let dir = sandbox.ws.join("sessions");
    std::fs::create_dir_all(dir.join("claude")).unwrap();
    // Claude Code's started on 2025-11-20 in /work/project, Codex's on
    // 2026-11-30 in /work/api, pi's on 2025-02-01 in /work/app.
    soba_store::fixtures::write_claude_code_session(&dir.join("claude/0a1b.jsonl"), 40_000)
        .unwrap();
    std::fs::write(
        dir.join("rollout-r1.jsonl"),
        codex_rollout("/work/api", "2026-11-30"),
    )
    .unwrap();
    std::fs::write(
        dir.join("pi.jsonl"),
        crate::support::pi_session("fix the build"),
    )
    .unwrap();
    // A byte-identical copy in the same folder counts once (the first in
    // walk order, `pi-copy.jsonl`, is kept).
    std::fs::copy(dir.join("pi.jsonl"), dir.join("pi-copy.jsonl")).unwrap();
    let dir = dir.to_str().unwrap();
    let run = |by: &str| -> Vec<Vec<String>> {
        let out = sandbox.run_ok(&["replay", dir, "--by", by, "-j", "1"]);
        let text = crate::support::text(&out.stdout);
        // The grouped table: from its header to its total row.
        text.lines()
            .skip_while(|line| !line.starts_with(&format!("{by} ")))
            .take_while(|line| !line.is_empty() && !line.starts_with("agent$"))
            .map(|line| {
                line.split("  ")
                    .map(str::trim)
                    .filter(|cell| !cell.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    };
    let keys =
        |rows: &[Vec<String>]| -> Vec<String> { rows.iter().map(|row| row[0].clone()).collect() };
    let days = run("day");
    assert_eq!(
        days[0],
        [
            "day",
            "sessions",
            "requests",
            "recorded$",
            "agent$",
            "soba$",
            "saving",
            "overWin",
            "recall"
        ]
    );
    assert_eq!(
        keys(&days[1..]),
        ["2025-02-01", "2025-11-20", "2026-11-30", "total"]
    );
    assert_eq!(days[4][1], "3", "{days:?}");
    let weeks = run("week");
    assert_eq!(
        keys(&weeks[1..]),
        ["2025-W05", "2025-W47", "2026-W49", "total"]
    );
    let months = run("month");
    assert_eq!(
        keys(&months[1..]),
        ["2025-02", "2025-11", "2026-11", "total"]
    );
    let projects = run("project");
    assert_eq!(
        keys(&projects[1..]),
        ["/work/api", "/work/app", "/work/project", "total"]
    );
    let sessions = run("session");
    assert_eq!(
        keys(&sessions[1..]),
        [
            "pi-copy.jsonl",
            "claude/0a1b.jsonl",
            "rollout-r1.jsonl",
            "total"
        ]
    );
    let agents: Vec<&str> = sessions[1..4].iter().map(|row| row[1].as_str()).collect();
    assert_eq!(agents, ["pi", "claude-code", "codex"]);

    let out = sandbox.run_ok(&["replay", dir, "-j", "1"]);
    let text = crate::support::text(&out.stdout);
    assert!(
        text.contains("pi.jsonl  skipped: the same session as"),
        "{text}"
    );
    let out = sandbox.run_ok(&["replay", dir, "--json", "-j", "1"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = &report["groups"]["project"]["total"];
    assert_eq!(total["sessions"], 3);
    assert_eq!(total["own"]["policies"], "claude-code, codex, pi");
    // The own policy's figures are the sum of each session's own agent's.
    let traces = report["traces"].as_array().unwrap();
    let own_sum: f64 = traces
        .iter()
        .filter(|trace| trace["skipped"].is_null())
        .map(|trace| {
            let agent = match trace["format"].as_str().unwrap() {
                "claude-code" => "claude-code",
                "codex-rollout" => "codex",
                _ => "pi",
            };
            trace["policies"]
                .as_array()
                .unwrap()
                .iter()
                .find(|policy| policy["name"] == agent)
                .unwrap()["dollars"]
                .as_f64()
                .unwrap()
        })
        .sum();
    let own = total["own"]["dollars"].as_f64().unwrap();
    assert!((own - own_sum).abs() < 1e-5, "{own} vs {own_sum}");
    let soba = total["soba"]["dollars"].as_f64().unwrap();
    let saving = total["savingDollars"].as_f64().unwrap();
    assert!((saving - (own - soba)).abs() < 2e-6, "{total}");
    let recorded = report["recordedDollars"].as_f64().unwrap();
    assert!((total["recordedDollars"].as_f64().unwrap() - recorded).abs() < 1e-6);
    let day_keys: Vec<&str> = report["groups"]["day"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["key"].as_str().unwrap())
        .collect();
    assert_eq!(day_keys, ["2025-02-01", "2025-11-20", "2026-11-30"]);

    // A single trace keeps its calibration line instead.
    let pi = format!("{dir}/pi-copy.jsonl");
    let out = sandbox.run_ok(&["replay", &pi, "--policy", "none,soba"]);
    let text = crate::support::text(&out.stdout);
    assert!(text.contains("\ntraces\n"), "{text}");
    assert!(!text.contains("agent$"), "{text}");
}

/// Prices come from the config when it sets them: a price not given keeps
/// the built-in one, a model with no built-in price needs its input and
/// output prices, and a negative price is refused with what to write.
#[test]
fn replay_prices_are_overridable_in_the_config() {
    let sandbox = crate::support::Sandbox::new();
    let path = sandbox.write("pi.jsonl", &crate::support::pi_session("fix the build"));
    let path = path.to_str().unwrap();
    sandbox.write_user_config(&serde_json::json!({
        "models": {"anthropic/claude-sonnet-4-5": {"inputPrice": 30, "outputPrice": 150}}
    }));
    let out = sandbox.run_ok(&["replay", path, "--json", "--policy", "none"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Input 10 + 5, output 20 + 7 at the new prices; cache reads 100 + 300
    // and writes 50 at the built-in $0.30 and $3.75.
    let recorded = (15.0 * 30.0 + 27.0 * 150.0 + 400.0 * 0.30 + 50.0 * 3.75) / 1e6;
    let got = report["recordedDollars"].as_f64().unwrap();
    assert!((got - recorded).abs() < 1e-6, "{got} vs {recorded}");
    let policy = &report["traces"][0]["policies"][0];
    let billed = policy["billedEquivalentTokens"].as_f64().unwrap();
    let expected = (billed * 30.0 + 27.0 * 150.0) / 1e6;
    // billed is rounded to a token in JSON: half a token at $30 a million.
    let dollars = policy["dollars"].as_f64().unwrap();
    assert!((dollars - expected).abs() < 2e-5, "{dollars} vs {expected}");

    sandbox.write_user_config(&serde_json::json!({
        "models": {"acme/house-model": {"inputPrice": 1}}
    }));
    // An entry the replay cannot use is left out with a warning; the
    // replay goes on.
    let out = sandbox.run(&["replay", path, "--policy", "none"]);
    let stderr = crate::support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: models.\"acme/house-model\": soba has no built-in price for this model, so its prices need both inputPrice and outputPrice"),
        "{stderr}"
    );
    // Two names of one model are an error naming both, not a mix.
    sandbox.write_user_config(&serde_json::json!({
        "models": {
            "claude-sonnet-4-5": {"inputPrice": 7},
            "anthropic/claude-sonnet-4-5": {"outputPrice": 2}
        }
    }));
    let out = sandbox.run(&["replay", path, "--policy", "none"]);
    let stderr = crate::support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("both set prices of claude-sonnet-4-5"),
        "{stderr}"
    );
    // The report says which prices came from the config: all of them
    // here (the trace's one model), none when the config prices another.
    sandbox.write_user_config(&serde_json::json!({
        "models": {"claude-sonnet-4-5": {"inputPrice": 7}}
    }));
    let out = sandbox.run_ok(&["replay", path, "--policy", "none"]);
    let table = crate::support::text(&out.stdout);
    assert!(table.contains("(prices from your config)"), "{table}");
    sandbox.write_user_config(&serde_json::json!({
        "models": {"gpt-5": {"inputPrice": 7}}
    }));
    let out = sandbox.run_ok(&["replay", path, "--policy", "none"]);
    let table = crate::support::text(&out.stdout);
    assert!(
        table.contains("(list prices as of 2026-11-20)") && !table.contains("from your config"),
        "{table}"
    );

    sandbox.write_user_config(&serde_json::json!({
        "models": {"anthropic/claude-sonnet-4-5": {"cacheReadPrice": -1}}
    }));
    let out = sandbox.run(&["replay", path, "--policy", "none"]);
    let stderr = crate::support::text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("a number of US dollars per million tokens, from 0 to 10000"),
        "{stderr}"
    );
}

/// Claude Code's writes to the 1-hour cache are recorded inside
/// `cache_creation_input_tokens` but billed at twice the input price, not
/// at the 5-minute write price: the recorded cost counts them so.
#[test]
fn one_hour_cache_writes_are_priced_at_twice_the_input() {
    let sandbox = crate::support::Sandbox::new();
    let session = |split: &str| {
        [
            r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"S","timestamp":"2025-06-01T10:00:00.000Z","cwd":"/w","message":{"role":"user","content":"say hello"}}"#.to_owned(),
            format!(
                r#"{{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"S","timestamp":"2025-06-01T10:00:01.000Z","message":{{"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","type":"message","content":[{{"type":"text","text":"hello"}}],"usage":{{"input_tokens":10,"cache_creation_input_tokens":1000,"cache_read_input_tokens":0,"output_tokens":5{split}}}}}}}"#
            ),
        ]
        .join("\n")
            + "\n"
    };
    let recorded = |text: &str, name: &str| -> f64 {
        let path = sandbox.write(name, text);
        let out = sandbox.run_ok(&[
            "replay",
            path.to_str().unwrap(),
            "--json",
            "--policy",
            "none",
        ]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["recordedDollars"].as_f64().unwrap()
    };
    // Sonnet 4.5: $3 input, $3.75 a 5-minute write, $6 a 1-hour one, $15 output.
    let five_minutes = (10.0 * 3.0 + 1_000.0 * 3.75 + 5.0 * 15.0) / 1e6;
    assert!((recorded(&session(""), "plain.jsonl") - five_minutes).abs() < 1e-9);
    let split =
        r#","cache_creation":{"ephemeral_5m_input_tokens":400,"ephemeral_1h_input_tokens":600}"#;
    let with_hour = (10.0 * 3.0 + 400.0 * 3.75 + 600.0 * 6.0 + 5.0 * 15.0) / 1e6;
    let got = recorded(&session(split), "hour.jsonl");
    assert!((got - with_hour).abs() < 1e-9, "{got} vs {with_hour}");
}

/// Issue 34: a session of a model newer than the model table replays at
/// the window it proves, and the note says the table lacks the model, its
/// date, and how to refresh it.
#[test]
fn a_model_newer_than_the_table_is_named_with_the_tables_date() {
    let sandbox = crate::support::Sandbox::new();
    let text = [
        r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"S","timestamp":"2025-06-01T10:00:00.000Z","cwd":"/w","message":{"role":"user","content":"say hello"}}"#,
        r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"S","timestamp":"2025-06-01T10:00:01.000Z","message":{"id":"msg_1","model":"claude-opus-9-9","role":"assistant","type":"message","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":900,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5}}}"#,
    ]
    .join("\n")
        + "\n";
    let path = sandbox.write("newer.jsonl", &text);
    let out = sandbox.run_ok(&["replay", path.to_str().unwrap(), "--policy", "none"]);
    let stdout = crate::support::text(&out.stdout);
    let note: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("is unknown: replayed at"))
        .collect();
    assert_eq!(note.len(), 1, "{stdout}");
    let table = soba_provider::catalog::catalog();
    assert!(
        note[0].ends_with(&format!("; {}", table.missing_note("claude-opus-9-9"))),
        "{stdout}"
    );
    assert!(
        note[0].contains("is not in the model table (LiteLLM "),
        "{stdout}"
    );
}

/// Issue 34 (WALK-41 #6): `soba replay` replays SOBA's own sessions, a
/// log or the sessions folder, from the history before SOBA compacted it
/// (six answers, each one request); the flight record beside the log is
/// named, not called an unknown transcript; `soba import` still refuses
/// the log.
#[test]
fn soba_replays_its_own_sessions_from_their_history_before_compaction() {
    use crate::support::{Sandbox, long_pi_session, text};
    let sandbox = Sandbox::new();
    let file = sandbox.write("trace.jsonl", &long_pi_session(6, 600, "none"));
    sandbox.run_ok(&["import", file.to_str().unwrap()]);
    let compacted = text(
        &sandbox
            .run_ok(&[
                "compact",
                "--model",
                "anthropic/claude-sonnet-4-5",
                "--set",
                "compaction.keepRecentTokens=256",
            ])
            .stdout,
    );
    assert!(compacted.starts_with("Compacted"), "{compacted}");
    let log = sandbox.session_files().remove(0);
    let log_path = log.to_str().unwrap();

    let output = sandbox.run(&["replay", log_path, "--json", "--policy", "none,soba"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let trace = &json["traces"][0];
    assert_eq!(trace["format"], "soba", "{trace}");
    assert_eq!(trace["requests"], 6, "{trace}");
    // What reading the log left out is the trace's warning.
    assert_eq!(
        trace["warnings"][0],
        "reading the SOBA log: 1 capsule(s) and 0 hygiene pass(es) of the log are left out: the replay rebuilds the history they replaced and makes each policy's own",
        "{trace}"
    );
    let none = json["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|policy| policy["name"] == "none")
        .expect("the none policy");
    assert_eq!(none["requests"], 6, "{none}");

    let folder = sandbox.sessions_dir();
    let output = sandbox.run(&["replay", folder.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report = text(&output.stdout);
    assert!(
        report.contains("replayed 1 trace(s), 2 skipped"),
        "{report}"
    );
    assert!(
        report
            .contains("skipped: a SOBA flight record (the engine's decisions, not a conversation"),
        "{report}"
    );
    assert!(
        report.contains("skipped: the lock file `soba import` keeps beside the sessions it writes"),
        "{report}"
    );

    let refused = sandbox.run(&["import", log_path]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(
        text(&refused.stderr).contains("already a soba session"),
        "{}",
        text(&refused.stderr)
    );
}
