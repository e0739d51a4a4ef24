//! Importers against the real transcripts of `shared/traces/raw` (every
//! figure `traces/SOURCES.md` gives), plus folder walking, detection by path
//! and robustness on damaged input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use soba_core::{Block, EntryBody, Message, MessageOrigin, Role};
use soba_store::import::{
    Detected, FileOutcome, Format, ImportOptions, ImportedSession, detect_format, import_as,
    import_bytes, import_dir, import_path,
};

/// Returns `shared/traces/raw`, or `None` (printing why) when absent.
fn raw_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/raw");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipped: ../shared/traces not found");
        None
    }
}

fn import_raw(rel: &str) -> Option<Vec<ImportedSession>> {
    let path = raw_dir()?.join(rel);
    Some(import_path(&path).unwrap_or_else(|err| panic!("{rel}: {err}")))
}

/// What SOURCES.md says about one session.
struct Expect<'a> {
    format: Format,
    messages: u64,
    records: &'a [(&'a str, u64)],
    tool_calls: u64,
    tool_results: u64,
    unpaired: u64,
    inferences: usize,
    compactions: u64,
    peak: Option<u64>,
    /// JSON pointers into `usage_raw` and their values.
    usage_raw: &'a [(&'a str, u64)],
}

fn check(s: &ImportedSession, expected: &Expect<'_>) {
    let name = s.source.display().to_string();
    assert_eq!(s.format, expected.format, "{name}: format");
    assert_eq!(s.stats.messages, expected.messages, "{name}: messages");
    for (kind, n) in expected.records {
        assert_eq!(
            s.stats.records.get(*kind).copied().unwrap_or(0),
            *n,
            "{name}: records[{kind}]"
        );
    }
    assert_eq!(
        s.stats.tool_calls, expected.tool_calls,
        "{name}: tool calls"
    );
    assert_eq!(
        s.stats.tool_results, expected.tool_results,
        "{name}: tool results"
    );
    assert_eq!(
        s.stats.unpaired_tool_calls, expected.unpaired,
        "{name}: unpaired"
    );
    assert_eq!(
        s.inferences.len(),
        expected.inferences,
        "{name}: inferences"
    );
    assert_eq!(
        s.stats.compactions, expected.compactions,
        "{name}: compactions"
    );
    assert_eq!(s.stats.peak_prompt_tokens, expected.peak, "{name}: peak");
    for (pointer, n) in expected.usage_raw {
        assert_eq!(
            s.stats.usage_raw.pointer(pointer),
            Some(&json!(n)),
            "{name}: usage_raw{pointer}"
        );
    }
    // Invariants every import keeps.
    let message_entries = s
        .entries
        .iter()
        .filter(|e| matches!(e.body, EntryBody::Message(_)))
        .count();
    assert_eq!(s.stats.entries, message_entries as u64, "{name}: entries");
    for (idx, entry) in s.entries.iter().enumerate() {
        let parent = idx.checked_sub(1).map(|prev| &s.entries[prev].id);
        assert_eq!(
            entry.parent_id.as_ref(),
            parent,
            "{name}: entry {idx} chains to the previous one"
        );
        assert!(
            entry.timestamp.parse::<jiff::Timestamp>().is_ok(),
            "{name}: entry {idx} timestamp {}",
            entry.timestamp
        );
    }
    assert!(
        s.entries.windows(2).all(|w| w[0].id.hex() < w[1].id.hex()),
        "{name}: ids sort in entry order"
    );
    for inference in &s.inferences {
        assert!(inference.first_entry <= inference.last_entry);
        let message = message_at(s, inference.last_entry);
        assert_eq!(
            message.role,
            Role::Assistant,
            "{name}: inference points at an assistant entry"
        );
        assert_eq!(message.usage, inference.usage);
    }
}

fn message_at(s: &ImportedSession, idx: usize) -> &Message {
    match &s.entries[idx].body {
        EntryBody::Message(entry) => &entry.message,
        other => panic!("entry {idx} is {}", other.type_name()),
    }
}

fn messages(s: &ImportedSession) -> impl Iterator<Item = &Message> {
    s.entries.iter().filter_map(|e| match &e.body {
        EntryBody::Message(entry) => Some(&entry.message),
        _ => None,
    })
}

fn tool_names(s: &ImportedSession) -> BTreeMap<String, u64> {
    let mut names = BTreeMap::new();
    for call in messages(s).flat_map(Message::tool_uses) {
        *names.entry(call.name.clone()).or_insert(0) += 1;
    }
    names
}

fn capsules(s: &ImportedSession) -> Vec<(usize, &soba_core::Capsule)> {
    s.entries
        .iter()
        .enumerate()
        .filter_map(|(idx, e)| match &e.body {
            EntryBody::Capsule(capsule) => Some((idx, capsule.as_ref())),
            _ => None,
        })
        .collect()
}

/// Returns the largest number of unpaired calls in one assistant message.
fn unpaired_per_message(s: &ImportedSession) -> Vec<usize> {
    let answered: std::collections::HashSet<&str> = messages(s)
        .flat_map(Message::tool_results)
        .map(|r| r.tool_use_id.as_str())
        .collect();
    let mut counts: Vec<usize> = messages(s)
        .map(|m| {
            m.tool_uses()
                .filter(|c| !answered.contains(c.id.as_str()))
                .count()
        })
        .filter(|n| *n > 0)
        .collect();
    counts.sort_unstable();
    counts
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn pi_large_session() {
    let Some(mut sessions) = import_raw("pi-mono/large-session.jsonl") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::PiV1,
            messages: 914,
            records: &[
                ("user", 88),
                ("assistant", 453),
                ("toolResult", 373),
                ("model_change", 1),
                ("thinking_level_change", 103),
            ],
            tool_calls: 391,
            tool_results: 373,
            unpaired: 18,
            inferences: 453,
            compactions: 0,
            peak: Some(177_604),
            usage_raw: &[
                ("/input", 1_049),
                ("/output", 83_156),
                ("/cacheRead", 43_229_469),
                ("/cacheWrite", 4_296_232),
            ],
        },
    );
    assert_eq!(s.original_id, "d703a1a9-1b7b-4fb1-b512-c9738b1fe617");
    assert_eq!(
        (
            s.stats.usage.input,
            s.stats.usage.cache_read,
            s.stats.usage.cache_write
        ),
        (1_049, 43_229_469, 4_296_232)
    );
    // 16 unanswered calls sit in the one errored message, 2 in aborted ones.
    assert_eq!(unpaired_per_message(&s).last(), Some(&16));
    assert_eq!(unpaired_per_message(&s).iter().sum::<usize>(), 18);
    // 3 aborted calls carry partialJson, kept as raw text.
    assert_eq!(
        messages(&s)
            .flat_map(Message::tool_uses)
            .filter(|c| c.input.raw().is_some())
            .count(),
        3
    );
    // claude-sonnet-4-5 answers 452 requests; one earlier gpt-5.1-codex request was aborted.
    let by_model = s.inferences.iter().fold(BTreeMap::new(), |mut acc, i| {
        *acc.entry(i.model.clone().unwrap_or_default()).or_insert(0) += 1;
        acc
    });
    assert_eq!(by_model.get("claude-sonnet-4-5"), Some(&452));
    assert_eq!(by_model.get("gpt-5.1-codex"), Some(&1));
    assert_eq!(s.stats.records.values().sum::<u64>(), 914 + 1 + 103);
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn pi_before_compaction() {
    let Some(mut sessions) = import_raw("pi-mono/before-compaction.jsonl") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::PiV1,
            messages: 990,
            records: &[
                ("user", 55),
                ("assistant", 484),
                ("toolResult", 448),
                ("bashExecution", 3),
                ("compaction", 2),
                ("model_change", 5),
                ("thinking_level_change", 5),
            ],
            tool_calls: 454,
            tool_results: 448,
            unpaired: 6,
            inferences: 484,
            compactions: 2,
            peak: Some(184_915),
            usage_raw: &[
                ("/input", 3_689),
                ("/output", 187_895),
                ("/cacheRead", 54_693_675),
                ("/cacheWrite", 1_685_320),
                ("/totalTokens", 56_570_579),
            ],
        },
    );
    assert_eq!(s.model.as_deref(), Some("claude-opus-4-5"));
    let model_changes = s
        .entries
        .iter()
        .filter(|e| matches!(e.body, EntryBody::ModelChange { .. }))
        .count();
    assert_eq!(model_changes, 5);
    // bashExecution messages are real user text "$ cmd\n<output>".
    let bash: Vec<&Message> = messages(&s)
        .filter(|m| m.text().starts_with("$ "))
        .collect();
    assert_eq!(bash.len(), 3);
    assert!(bash.iter().all(|m| m.is_real_user()));
    assert!(bash[0].text().starts_with("$ ls\nAGENTS.md\n"));
    assert_eq!(
        messages(&s)
            .flat_map(Message::tool_uses)
            .filter(|c| c.input.raw().is_some())
            .count(),
        3
    );

    // The two compactions, with their first kept entries resolved from
    // firstKeptEntryIndex (0-based over all lines).
    let lines: Vec<Value> = std::fs::read_to_string(&s.source)
        .expect("readable")
        .lines()
        .map(|line| serde_json::from_str(line).expect("valid line"))
        .collect();
    let found = capsules(&s);
    assert_eq!(found.len(), 2);
    for ((capsule_idx, capsule), (line, tokens_before, kept_line, k_chars)) in found
        .iter()
        .zip([(359, 175_004, 293, 4.3), (628, 185_014, 551, 3.6)])
    {
        let imported = capsule.imported.as_ref().expect("imported");
        assert_eq!(
            (imported.agent.as_str(), imported.original_id.clone()),
            ("pi", format!("line:{line}"))
        );
        assert_eq!(capsule.tokens_before.get(), tokens_before);
        let n_chars = capsule.markdown.chars().count() as f64;
        assert_eq!((n_chars / 100.0).round() / 10.0, k_chars, "summary length");
        assert_eq!(
            s.entries[*capsule_idx].timestamp,
            lines[line]["timestamp"].as_str().expect("timestamp")
        );
        let kept_id = capsule.first_kept_entry_id.as_ref().expect("kept entry");
        let kept = s
            .entries
            .iter()
            .find(|e| &e.id == kept_id)
            .expect("kept entry exists");
        // The entry made from line `kept_line` (or the first line after it that makes one).
        let first_line_with_entry = (kept_line..line)
            .find(|&l| {
                matches!(
                    lines[l]["type"].as_str(),
                    Some("message" | "model_change" | "compaction")
                )
            })
            .expect("a line makes an entry");
        assert_eq!(
            kept.timestamp,
            lines[first_line_with_entry]["timestamp"]
                .as_str()
                .expect("timestamp")
        );
    }
    assert_eq!(
        found[1].1.previous_capsule_id.as_ref(),
        Some(&s.entries[found[0].0].id)
    );
    // The sixth unanswered call is the bash call right before the second compaction.
    let before = message_at(&s, found[1].0 - 1);
    let call = before.tool_uses().next().expect("a call");
    assert_eq!(call.name, "bash");
    assert!(
        !messages(&s)
            .flat_map(Message::tool_results)
            .any(|r| r.tool_use_id == call.id)
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn swe_agent_one_x() {
    let Some(mut sessions) = import_raw("swe-agent/marshmallow-code__marshmallow-1867.traj") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::SweAgent1,
            messages: 28,
            records: &[("system", 1), ("user", 1), ("assistant", 13), ("tool", 13)],
            tool_calls: 13,
            tool_results: 13,
            unpaired: 0,
            inferences: 13,
            compactions: 0,
            peak: None,
            usage_raw: &[
                ("/model_stats/tokens_sent", 0),
                ("/model_stats/tokens_received", 0),
                ("/model_stats/api_calls", 13),
            ],
        },
    );
    assert!(
        s.system_prompt
            .as_deref()
            .is_some_and(|p| p.starts_with("SETTING: You are an autonomous programmer"))
    );
    assert!(s.system_prompt_in_entries);
    assert_eq!(messages(&s).filter(|m| m.is_real_user()).count(), 1);
    let first_call = messages(&s)
        .flat_map(Message::tool_uses)
        .next()
        .expect("a call");
    assert_eq!(
        (first_call.id.as_str(), first_call.name.as_str()),
        ("call_9diWc1DYm4RLmPfHgIaP2wd", "bash")
    );
    assert_eq!(first_call.input.str_arg("command"), Some("ls -F"));
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn swe_agent_zero_x() {
    let Some(mut sessions) = import_raw("swe-agent/pydicom__pydicom-1458.traj") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::SweAgent0,
            messages: 26,
            records: &[("system", 1), ("demo", 1), ("user", 12), ("assistant", 12)],
            tool_calls: 12,
            tool_results: 11,
            unpaired: 1,
            inferences: 12,
            compactions: 0,
            peak: None,
            usage_raw: &[
                ("/model_stats/tokens_sent", 122_612),
                ("/model_stats/tokens_received", 1_369),
                ("/model_stats/api_calls", 12),
            ],
        },
    );
    assert_eq!(
        s.stats
            .usage_raw
            .pointer("/model_stats/instance_cost")
            .and_then(Value::as_f64)
            .map(|c| (c * 100.0).round()),
        Some(127.0)
    );
    assert_eq!(
        (s.stats.usage.input, s.stats.usage.output),
        (122_612, 1_369)
    );
    let origins: Vec<MessageOrigin> = messages(&s)
        .filter(|m| m.role != Role::Assistant)
        .map(|m| m.origin)
        .collect();
    assert_eq!(
        origins
            .iter()
            .filter(|o| **o == MessageOrigin::Demonstration)
            .count(),
        1
    );
    assert_eq!(
        origins
            .iter()
            .filter(|o| **o == MessageOrigin::Observation)
            .count(),
        11
    );
    assert_eq!(messages(&s).filter(|m| m.is_real_user()).count(), 1);
    let calls: Vec<_> = messages(&s).flat_map(Message::tool_uses).collect();
    assert!(
        calls
            .iter()
            .enumerate()
            .all(|(i, c)| c.id == format!("step-{i}") && c.name == "bash")
    );
    assert_eq!(
        calls[0].input.str_arg("command"),
        Some("create reproduce_bug.py")
    );
    assert_eq!(calls[11].input.str_arg("command"), Some("submit"));
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn openhands_instances() {
    let Some(sessions) = import_raw("openhands/output.jsonl") else {
        return;
    };
    assert_eq!(sessions.len(), 3);
    let table = [
        ("ponylang__ponyc-4595", 49, 23, 565_158, 2_558, 33_459, true),
        ("ponylang__ponyc-4593", 70, 33, 410_169, 5_156, 19_391, true),
        (
            "ponylang__ponyc-4588",
            103,
            49,
            938_015,
            5_627,
            27_127,
            false,
        ),
    ];
    let mut total_prompt = 0;
    let mut total_completion = 0;
    let mut error_observations = 0;
    for (s, (id, events, calls, prompt, completion, peak, finished)) in sessions.iter().zip(table) {
        assert_eq!(s.original_id, id);
        let unpaired = u64::from(finished);
        check(
            s,
            &Expect {
                format: Format::OpenHands,
                messages: events,
                records: &[
                    ("action:system", 1),
                    ("action:message", 1),
                    ("action:finish", unpaired),
                ],
                tool_calls: calls,
                tool_results: calls - unpaired,
                unpaired,
                inferences: calls as usize,
                compactions: 0,
                peak: Some(peak),
                usage_raw: &[],
            },
        );
        assert_eq!(s.stats.usage_raw["prompt_tokens"], prompt);
        assert_eq!(s.stats.usage_raw["completion_tokens"], completion);
        assert_eq!(
            s.stats.usage_raw["accumulated_token_usage"]["prompt_tokens"],
            prompt
        );
        assert_eq!(
            (s.stats.usage.input, s.stats.usage.output),
            (prompt, completion)
        );
        assert!(
            s.inferences
                .iter()
                .all(|i| i.usage.is_some() && i.response_id.is_some())
        );
        let schema_names: Vec<&str> = s
            .tool_schemas
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .collect();
        assert_eq!(
            schema_names,
            ["execute_bash", "think", "finish", "str_replace_editor"]
        );
        assert!(
            s.system_prompt
                .as_deref()
                .is_some_and(|p| p.starts_with("You are OpenHands agent"))
        );
        // The calls left without an observation are the finish calls.
        let answered: std::collections::HashSet<&str> = messages(s)
            .flat_map(Message::tool_results)
            .map(|r| r.tool_use_id.as_str())
            .collect();
        let unanswered: Vec<&str> = messages(s)
            .flat_map(Message::tool_uses)
            .filter(|c| !answered.contains(c.id.as_str()))
            .map(|c| c.name.as_str())
            .collect();
        assert!(unanswered.iter().all(|name| *name == "finish"));
        assert_eq!(
            s.stats
                .diagnostics
                .iter()
                .any(|d| d.contains("maximum iteration")),
            !finished
        );
        error_observations += s
            .stats
            .records
            .get("observation:error")
            .copied()
            .unwrap_or(0);
        total_prompt += prompt;
        total_completion += completion;
        assert!(
            messages(s)
                .flat_map(Message::tool_results)
                .any(|r| r.is_error)
        );
    }
    assert_eq!(error_observations, 2);
    assert_eq!(((total_prompt as f64) / 1e4).round() / 100.0, 1.91);
    assert_eq!(((total_completion as f64) / 100.0).round() / 10.0, 13.3);
    let all_calls: u64 = sessions.iter().map(|s| s.stats.tool_calls).sum();
    let all_results: u64 = sessions.iter().map(|s| s.stats.tool_results).sum();
    assert_eq!((all_calls, all_results), (105, 103));
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn gemini_cli() {
    let Some(mut sessions) = import_raw("gemini-cli/session-2026-01-30T06-08-7befeae5.json") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::GeminiCli,
            messages: 32,
            records: &[("user", 1), ("gemini", 31)],
            tool_calls: 62,
            tool_results: 62,
            unpaired: 0,
            inferences: 31,
            compactions: 0,
            peak: Some(66_309),
            usage_raw: &[
                ("/input", 1_053_589),
                ("/cached", 927_523),
                ("/output", 21_861),
                ("/thoughts", 7_489),
                ("/total", 1_082_939),
            ],
        },
    );
    assert_eq!(s.model.as_deref(), Some("gemini-3-pro-preview"));
    let errors = messages(&s)
        .flat_map(Message::tool_results)
        .filter(|r| r.is_error)
        .count();
    assert_eq!(errors, 2);
    let thoughts = messages(&s)
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, Block::Thinking { .. }))
        .count();
    assert_eq!(thoughts, 63);
    // Normalised: input excludes cached; output includes thoughts.
    let u = s.stats.usage;
    assert_eq!(
        (u.input, u.cache_read, u.output, u.reasoning),
        (1_053_589 - 927_523, 927_523, 21_861 + 7_489, 7_489)
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn claude_code_openai_chat_export() {
    let Some(mut sessions) = import_raw("claude-code-openai-chat/develop-1.json") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::ClaudeCodeOpenAiChat,
            messages: 619,
            records: &[
                ("system", 2),
                ("user", 16),
                ("assistant", 353),
                ("tool", 248),
            ],
            tool_calls: 249,
            tool_results: 248,
            unpaired: 1,
            inferences: 238,
            compactions: 2,
            peak: None,
            usage_raw: &[],
        },
    );
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-4-6"));
    let names = tool_names(&s);
    let expected: BTreeMap<String, u64> = [
        ("Write", 139),
        ("Bash", 70),
        ("Edit", 15),
        ("TodoWrite", 12),
        ("Read", 11),
        ("ToolSearch", 2),
    ]
    .into_iter()
    .map(|(name, n)| (name.to_owned(), n))
    .collect();
    assert_eq!(names, expected);
    // The last call is the unanswered one.
    let last_call = messages(&s)
        .flat_map(Message::tool_uses)
        .last()
        .expect("a call");
    assert!(
        !messages(&s)
            .flat_map(Message::tool_results)
            .any(|r| r.tool_use_id == last_call.id)
    );
    let thinking = messages(&s)
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, Block::Thinking { .. }))
        .count();
    assert_eq!(thinking, 33);
    // Compactions at message indexes 112/113 and 269/270.
    let found = capsules(&s);
    let ids: Vec<&str> = found
        .iter()
        .map(|(_, c)| c.imported.as_ref().map_or("", |i| i.original_id.as_str()))
        .collect();
    assert_eq!(ids, ["messages[112]", "messages[269]"]);
    for (idx, capsule) in &found {
        assert!(
            capsule
                .markdown
                .starts_with("This session is being continued from a previous conversation")
        );
        // The summary is stored once, in the capsule; the capsule keeps
        // nothing before it, so the next entry is the conversation going on.
        let next = message_at(&s, idx + 1);
        assert_ne!(next.origin, MessageOrigin::Summary);
        assert_eq!(capsule.first_kept_entry_id, None);
        assert!(capsule.tokens_after.get() > 0);
    }
    let markers = messages(&s)
        .filter(|m| m.origin == MessageOrigin::Marker)
        .count();
    assert_eq!(markers, 4);
    assert_eq!(
        messages(&s).filter(|m| m.is_real_user()).count(),
        16 - 2 - 4
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn codex_messages_meta() {
    let Some(mut sessions) = import_raw("codex-converted/trajectory-1.json") else {
        return;
    };
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::CodexMessagesMeta,
            messages: 905,
            records: &[
                ("developer", 1),
                ("system", 2),
                ("user", 20),
                ("assistant", 472),
                ("tool", 410),
            ],
            tool_calls: 411,
            tool_results: 410,
            unpaired: 1,
            inferences: 348,
            compactions: 0,
            peak: Some(216_116),
            usage_raw: &[
                ("/total_token_usage/input_tokens", 40_399_924),
                ("/total_token_usage/cached_input_tokens", 26_484_096),
                ("/total_token_usage/output_tokens", 195_227),
                ("/total_token_usage/reasoning_output_tokens", 57_259),
                ("/total_token_usage/total_tokens", 40_595_151),
                ("/model_context_window", 258_400),
                ("/token_count_events", 715),
            ],
        },
    );
    assert_eq!(s.context_window, Some(258_400));
    let u = s.stats.usage;
    assert_eq!(
        (u.input, u.cache_read, u.output, u.reasoning),
        (40_399_924 - 26_484_096, 26_484_096, 195_227, 57_259)
    );
    assert!(
        s.system_prompt
            .as_deref()
            .is_some_and(|p| p.starts_with("You are Codex"))
    );
    assert!(!s.system_prompt_in_entries);
    let names = tool_names(&s);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            ("apply_patch".to_owned(), 68),
            ("exec_command".to_owned(), 309),
            ("update_plan".to_owned(), 5),
            ("write_stdin".to_owned(), 29)
        ]
    );
    assert_eq!(s.model.as_deref(), Some("gpt-5.3-codex-bak"));
    // 7 <turn_aborted> markers among the 20 user records (the 8 "continue"
    // prompts are real); the two environment contexts are injected.
    assert_eq!(
        messages(&s)
            .filter(|m| m.origin == MessageOrigin::Marker)
            .count(),
        7
    );
    assert_eq!(
        messages(&s)
            .filter(|m| m.origin == MessageOrigin::Injected)
            .count(),
        2
    );
    assert_eq!(messages(&s).filter(|m| m.is_real_user()).count(), 13);
    assert_eq!(
        messages(&s)
            .filter(|m| m.is_real_user() && m.text() == "continue")
            .count(),
        8
    );
    // The two compactions the export dropped show in the attached usage:
    // the token_count series falls from 211,015 to 15,784 and from 210,138
    // to 14,900; the 211,015 and 210,138 requests answered with nothing the
    // export kept (the compaction turn), so the inference before each drop
    // is the last recorded response, still above 200,000.
    let prompts: Vec<u64> = s
        .inferences
        .iter()
        .filter_map(|i| i.usage.map(|u| u.prompt()))
        .collect();
    for to in [15_784, 14_900] {
        assert!(
            prompts.windows(2).any(|w| w[0] > 200_000 && w[1] == to),
            "prompt drop to {to}"
        );
    }
    assert_eq!(
        s.inferences.iter().filter(|i| i.usage.is_some()).count(),
        346
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn folder_walk_is_sorted_and_skips_unknown_files() {
    let Some(raw) = raw_dir() else { return };
    let outcomes = import_dir(&raw).expect("walks");
    let paths: Vec<String> = outcomes
        .iter()
        .map(|f| {
            f.path
                .strip_prefix(&raw)
                .expect("under raw")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        paths,
        [
            "claude-code/bhavana-claude-session.jsonl",
            "claude-code-openai-chat/develop-1.json",
            "codex/soulpass-codex-session.jsonl",
            "codex-converted/trajectory-1.json",
            "gemini-cli/session-2026-01-30T06-08-7befeae5.json",
            "openhands/output.jsonl",
            "pi-mono/before-compaction.jsonl",
            "pi-mono/large-session.jsonl",
            "swe-agent/marshmallow-code__marshmallow-1867.traj",
            "swe-agent/pydicom__pydicom-1458.traj",
        ]
    );
    let sessions: usize = outcomes
        .iter()
        .map(|f| match &f.outcome {
            FileOutcome::Imported(sessions) => sessions.len(),
            other => panic!("{}: {other:?}", f.path.display()),
        })
        .sum();
    assert_eq!(sessions, 12);
    for (rel, format) in [
        ("claude-code/bhavana-claude-session.jsonl", "claude-code"),
        ("codex/soulpass-codex-session.jsonl", "codex-rollout"),
        ("pi-mono/large-session.jsonl", "pi-v1"),
        ("codex-converted/trajectory-1.json", "codex-messages-meta"),
        (
            "claude-code-openai-chat/develop-1.json",
            "claude-code-openai-chat",
        ),
        ("openhands/output.jsonl", "openhands"),
    ] {
        assert_eq!(
            detect_format(&raw.join(rel)).expect("detects").as_str(),
            format
        );
    }
}

#[test]
fn folder_walk_reports_unknown_and_soba_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("nested")).expect("mkdir");
    std::fs::write(dir.path().join("b-notes.txt"), "hello").expect("write");
    std::fs::write(
        dir.path().join("a-soba.jsonl"),
        "{\"type\":\"session\",\"schemaVersion\":1,\"id\":\"x\"}\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("nested/pi.jsonl"),
        "{\"type\":\"session\",\"id\":\"p\",\"timestamp\":\"2025-01-01T00:00:00Z\"}\n{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:01Z\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
    )
    .expect("write");
    let outcomes = import_dir(dir.path()).expect("walks");
    let summary: Vec<(String, &str)> = outcomes
        .iter()
        .map(|f| {
            let name = f
                .path
                .strip_prefix(dir.path())
                .expect("under dir")
                .display()
                .to_string();
            let kind = match &f.outcome {
                FileOutcome::Imported(_) => "imported",
                FileOutcome::Skipped(_) => "skipped",
                FileOutcome::Failed(_) => "failed",
            };
            (name, kind)
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("a-soba.jsonl".to_owned(), "skipped"),
            ("b-notes.txt".to_owned(), "skipped"),
            ("nested/pi.jsonl".to_owned(), "imported")
        ]
    );
    let FileOutcome::Skipped(soba) = &outcomes[0].outcome else {
        panic!("skipped")
    };
    assert!(soba.contains("already a soba session"), "{soba}");
    let FileOutcome::Skipped(unknown) = &outcomes[1].outcome else {
        panic!("skipped")
    };
    assert!(unknown.contains("pi-v1, pi-v3, swe-agent-1"), "{unknown}");
    assert!(matches!(
        detect_format(&dir.path().join("a-soba.jsonl")),
        Ok(Detected::Soba { schema_version: 1 })
    ));
    assert!(import_dir(&dir.path().join("missing")).is_err());
    // A single SOBA file is a clear error.
    let err = import_path(&dir.path().join("a-soba.jsonl")).expect_err("not importable");
    assert!(err.to_string().contains("already a soba session"));
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn damaged_real_files_never_panic() {
    let Some(raw) = raw_dir() else { return };
    let options = ImportOptions::with_fallback_ms(0);
    for rel in [
        "pi-mono/large-session.jsonl",
        "swe-agent/pydicom__pydicom-1458.traj",
        "openhands/output.jsonl",
        "gemini-cli/session-2026-01-30T06-08-7befeae5.json",
        "claude-code-openai-chat/develop-1.json",
    ] {
        let bytes = std::fs::read(raw.join(rel)).expect("readable");
        for cut in [1, 7, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            let _ = import_bytes(&bytes[..cut], Path::new(rel), &options);
        }
        // Every format's importer on every other file: errors or sessions, no panic.
        for format in Format::ALL {
            let _ = import_as(&bytes[..bytes.len() / 2], format, Path::new(rel), &options);
        }
    }
    // A pi file cut mid-line keeps its good lines and names the torn one.
    let bytes = std::fs::read(raw.join("pi-mono/large-session.jsonl")).expect("readable");
    let cut = bytes.len() / 2;
    let sessions = import_bytes(&bytes[..cut], Path::new("cut.jsonl"), &options).expect("imports");
    let torn_line = bytes[..cut].iter().filter(|b| **b == b'\n').count() + 1;
    assert!(
        sessions[0]
            .stats
            .diagnostics
            .iter()
            .any(|d| d.starts_with(&format!("line {torn_line}:")))
    );
}

#[test]
fn garbage_and_hostile_input() {
    let options = ImportOptions::with_fallback_ms(0);
    let path = Path::new("garbage");
    for input in [
        &b""[..],
        b"\xff\xfe\x00garbage",
        b"{}",
        b"[]",
        b"null",
        b"{\"history\":\"nope\",\"info\":1}",
        b"{\"format\":\"openai-chat\",\"messages\":[null,1,{\"role\":7}]}",
        b"{\"instance_id\":1,\"history\":[{\"action\":\"run\",\"tool_call_metadata\":{\"model_response\":{\"usage\":{\"prompt_tokens\":18446744073709551615,\"prompt_tokens_details\":{\"cached_tokens\":-5}}}}}]}",
        b"{\"type\":\"session\",\"id\":1}\n{\"type\":\"message\",\"message\":{\"role\":\"assistant\",\"content\":\"x\",\"usage\":{\"input\":18446744073709551615,\"cacheRead\":18446744073709551615}}}\n{\"type\":\"compaction\",\"firstKeptEntryIndex\":99999999999}",
        b"{\"sessionId\":\"s\",\"messages\":[{\"type\":\"gemini\",\"tokens\":{\"input\":1,\"cached\":5},\"toolCalls\":[{\"result\":[{}]}]}]}",
    ] {
        match import_bytes(input, path, &options) {
            Ok(sessions) => assert!(!sessions.is_empty()),
            Err(err) => assert!(!err.to_string().is_empty()),
        }
    }
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(import_bytes(deep.as_bytes(), path, &options).is_err());
    let unknown = import_bytes(b"hello", path, &options).expect_err("unknown");
    assert!(
        unknown.to_string().contains("codex-messages-meta"),
        "{unknown}"
    );
}

// ---------------------------------------------------------------------------
// Issue 13: importers neither drop nor invent silently.

/// Writes a session as a SOBA log and returns what `soba show --check`
/// would report about it (the shared `soba_store::check::problems`).
fn check_problems(session: &ImportedSession) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("imported.jsonl");
    let mut writer = soba_store::SessionWriter::create(
        &path,
        &crate::support::header("imported"),
        crate::support::options(3),
    )
    .expect("a new session file");
    for entry in &session.entries {
        writer
            .append_entry(entry)
            .expect("an imported entry is written");
    }
    drop(writer);
    let log = soba_store::read_log(&path).expect("readable");
    soba_store::check::problems(&log)
}

fn import_text(text: &str, format: Format) -> ImportedSession {
    let options = ImportOptions::with_fallback_ms(1_735_689_600_000);
    let mut sessions =
        import_as(text.as_bytes(), format, Path::new("t.jsonl"), &options).expect("imports");
    assert_eq!(sessions.len(), 1);
    sessions.remove(0)
}

/// Every text the session keeps: message text and tool-result text.
fn all_text(s: &ImportedSession) -> String {
    let mut out = String::new();
    for message in messages(s) {
        out.push_str(&message.text());
        for result in message.tool_results() {
            out.push_str(&result.text());
        }
        out.push('\n');
    }
    out
}

/// A linear pi v3 session: a header, then `n` entries (user, assistant
/// with a call, tool result, …), each holding the marker `<mK>`.
fn pi_v3_lines(n: usize) -> Vec<String> {
    let mut lines = vec![
        r#"{"type":"session","version":3,"id":"pi-tree","timestamp":"2025-01-01T00:00:00Z","cwd":"/w"}"#
            .to_owned(),
    ];
    for k in 0..n {
        let parent = if k == 0 {
            "null".to_owned()
        } else {
            format!("\"e{:04}\"", k - 1)
        };
        let message = match k % 3 {
            0 => format!(r#"{{"role":"user","content":"<m{k}> do it"}}"#),
            1 => format!(
                r#"{{"role":"assistant","content":[{{"type":"text","text":"<m{k}>"}},{{"type":"toolCall","id":"call{k}","name":"bash","arguments":{{"command":"ls"}}}}],"usage":{{"input":1,"output":2,"cacheRead":0,"cacheWrite":0}}}}"#
            ),
            _ => format!(
                r#"{{"role":"toolResult","toolCallId":"call{}","toolName":"bash","content":[{{"type":"text","text":"<m{k}>"}}],"isError":false}}"#,
                k - 1
            ),
        };
        lines.push(format!(
            r#"{{"type":"message","id":"e{k:04}","parentId":{parent},"timestamp":"2025-01-01T00:00:{:02}Z","message":{message}}}"#,
            k + 1
        ));
    }
    lines
}

/// A linear Claude Code session of `n` lines in the same pattern.
fn claude_lines(n: usize) -> Vec<String> {
    (0..n)
        .map(|k| {
            let parent = if k == 0 {
                "null".to_owned()
            } else {
                format!("\"u{:04}\"", k - 1)
            };
            let (kind, message) = match k % 3 {
                0 => ("user", format!(r#"{{"role":"user","content":"<m{k}> do it"}}"#)),
                1 => (
                    "assistant",
                    format!(
                        r#"{{"id":"msg{k}","model":"m","role":"assistant","content":[{{"type":"text","text":"<m{k}>"}},{{"type":"tool_use","id":"call{k}","name":"Bash","input":{{"command":"ls"}}}}],"usage":{{"input_tokens":1,"output_tokens":2}}}}"#
                    ),
                ),
                _ => (
                    "user",
                    format!(
                        r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"call{}","content":"<m{k}>"}}]}}"#,
                        k - 1
                    ),
                ),
            };
            format!(
                r#"{{"type":"{kind}","uuid":"u{k:04}","parentUuid":{parent},"sessionId":"cc-tree","cwd":"/w","timestamp":"2025-01-01T00:00:{:02}Z","message":{message}}}"#,
                k + 1
            )
        })
        .collect()
}

/// How one line is damaged.
#[derive(Debug, Clone)]
enum Damage {
    /// Cut to this fraction (in thousandths) of its length.
    Truncate(usize),
    /// Bytes inserted at this fraction (in thousandths) of its length.
    Garbage(usize, Vec<u8>),
    /// One field given a value of the wrong type.
    WrongType(usize),
}

fn damage_line(line: &str, damage: &Damage) -> Vec<u8> {
    let at = |permille: usize| {
        let mut cut = line.len() * permille / 1000;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        cut
    };
    match damage {
        Damage::Truncate(permille) => line.as_bytes()[..at(*permille)].to_vec(),
        Damage::Garbage(permille, garbage) => {
            let cut = at(*permille);
            let mut bytes = line.as_bytes()[..cut].to_vec();
            bytes.extend(garbage);
            bytes.extend(&line.as_bytes()[cut..]);
            bytes
        }
        Damage::WrongType(which) => {
            let keys = [
                "\"id\":",
                "\"uuid\":",
                "\"parentId\":",
                "\"parentUuid\":",
                "\"message\":",
                "\"content\":",
            ];
            let present: Vec<&str> = keys.iter().copied().filter(|k| line.contains(k)).collect();
            let key = present[which % present.len()];
            line.replacen(key, &format!("{key}[1,2],\"was\":"), 1)
                .into_bytes()
        }
    }
}

fn damage_strategy() -> impl Strategy<Value = Damage> {
    let garbage = proptest::collection::vec(
        proptest::sample::select(vec![
            0xffu8, 0xfe, b'{', b'}', b'"', b',', b':', b'\\', 0x00, b'[',
        ]),
        1..6,
    );
    prop_oneof![
        (0usize..1000).prop_map(Damage::Truncate),
        (0usize..1000, garbage).prop_map(|(at, bytes)| Damage::Garbage(at, bytes)),
        (0usize..6).prop_map(Damage::WrongType),
    ]
}

/// Imports `lines` with line `damaged` damaged and checks that every other
/// line's marker survives and the result passes `soba show --check`.
fn check_one_damaged_line(
    lines: &[String],
    damaged: usize,
    damage: &Damage,
    format: Format,
    first_marker_line: usize,
) {
    let mut bytes = Vec::new();
    for (idx, line) in lines.iter().enumerate() {
        if idx == damaged {
            bytes.extend(damage_line(line, damage));
        } else {
            bytes.extend(line.as_bytes());
        }
        bytes.push(b'\n');
    }
    let options = ImportOptions::with_fallback_ms(0);
    let sessions = import_as(&bytes, format, Path::new("t.jsonl"), &options).expect("imports");
    let text = all_text(&sessions[0]);
    for idx in first_marker_line..lines.len() {
        if idx == damaged {
            continue;
        }
        let marker = format!("<m{}>", idx - first_marker_line);
        prop_assert_eq_like(
            text.contains(&marker),
            &marker,
            &text,
            &sessions[0].stats.diagnostics,
        );
    }
    // A result on the damaged line is lost (a diagnostic says so), and the
    // check rightly names the call the conversation then went on without;
    // nothing else may be wrong.
    let problems: Vec<String> = check_problems(&sessions[0])
        .into_iter()
        .filter(|p| !p.contains("has no result before the next response"))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
}

fn prop_assert_eq_like(found: bool, marker: &str, text: &str, diagnostics: &[String]) {
    assert!(
        found,
        "{marker} lost; kept:\n{text}\ndiagnostics: {diagnostics:?}"
    );
}

use proptest::prelude::*;

proptest! {
    #[test]
    fn a_pi_v3_tree_with_one_damaged_line_keeps_every_other_message(
        n in 3usize..12,
        pick in 0usize..1000,
        damage in damage_strategy(),
    ) {
        let lines = pi_v3_lines(n);
        // Any entry line (the header is what makes the file pi).
        let damaged = 1 + pick % n;
        check_one_damaged_line(&lines, damaged, &damage, Format::PiV3, 1);
    }

    #[test]
    fn a_claude_code_chain_with_one_damaged_line_keeps_every_other_message(
        n in 3usize..12,
        pick in 0usize..1000,
        damage in damage_strategy(),
    ) {
        let lines = claude_lines(n);
        check_one_damaged_line(&lines, pick % n, &damage, Format::ClaudeCode, 0);
    }
}

#[test]
fn a_malformed_line_in_a_pi_tree_no_longer_loses_the_task() {
    let mut lines = pi_v3_lines(6);
    // Line 3 (entry e0001) is cut mid-way: its id is still readable.
    lines[2].truncate(60);
    let s = import_text(&(lines.join("\n") + "\n"), Format::PiV3);
    let text = all_text(&s);
    for k in [0, 2, 3, 4, 5] {
        assert!(text.contains(&format!("<m{k}>")), "<m{k}> lost: {text}");
    }
    assert!(
        s.stats
            .diagnostics
            .iter()
            .any(|d| d.starts_with("line 3: skipped malformed JSON")),
        "{:?}",
        s.stats.diagnostics
    );
    assert!(
        !s.stats
            .diagnostics
            .iter()
            .any(|d| d.contains("the branch starts there")),
        "{:?}",
        s.stats.diagnostics
    );
    // The call of the lost line has its result kept as an observation.
    assert_eq!(s.stats.orphan_tool_results, 1);
    assert!(check_problems(&s).is_empty());
}

#[test]
fn a_parallel_batch_split_by_its_recorder_is_regrouped_call_by_call() {
    // Claude Code's export: one call per assistant message, results
    // interleaved with the later calls of the same response.
    let records = [
        r#"{"role":"user","content":"go"}"#.to_owned(),
        chat_call("a"),
        chat_call("b"),
        chat_result("a"),
        chat_call("c"),
        chat_result("b"),
        chat_result("c"),
        r#"{"role":"assistant","content":"done"}"#.to_owned(),
    ];
    let (order, s) = chat_order(&records);
    assert_eq!(
        order,
        ["U", "A(a,b)", "R(a)", "R(b)", "A(c)", "R(c)", "Assistant"]
    );
    // The two adjacent calls are one message; b's result, recorded after
    // c's call, is the one moved.
    assert_eq!(s.stats.reordered_tool_results, 1);
    assert_eq!(s.stats.unpaired_tool_calls, 0);
}

#[test]
fn a_result_directly_before_its_call_is_moved_after_it() {
    let lines = [
        r#"{"type":"session","id":"s","timestamp":"2025-01-01T00:00:00Z"}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01Z","message":{"role":"user","content":"go"}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02Z","message":{"role":"toolResult","toolCallId":"c1","content":"r1","isError":false}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:03Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{}}]}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:04Z","message":{"role":"assistant","content":[{"type":"text","text":"done"}]}}"#,
    ];
    let s = import_text(&(lines.join("\n") + "\n"), Format::PiV1);
    let roles: Vec<Role> = messages(&s).map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(s.stats.reordered_tool_results, 1);
    assert_eq!(
        (s.stats.orphan_tool_results, s.stats.results_before_calls),
        (0, 0)
    );
    assert_eq!(s.stats.unpaired_tool_calls, 0);
    // The inference follows its moved assistant entry; ids stay in order.
    assert!(
        matches!(&s.entries[s.inferences[0].first_entry].body, EntryBody::Message(m) if m.message.role == Role::Assistant && m.message.tool_uses().count() == 1)
    );
    let ids: Vec<&str> = s.entries.iter().map(|e| e.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted);
    assert_eq!(
        s.stats.diagnostics,
        ["entry 1: a tool result recorded just before its call (entry 2) was moved after it"]
    );
    assert!(check_problems(&s).is_empty());
}

#[test]
fn content_of_unexpected_shape_is_kept_with_a_diagnostic() {
    let lines = [
        r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"S","message":{"role":"user","content":{"text":"from an object"}}}"#,
        r#"{"type":"assistant","uuid":"u2","parentUuid":"u1","sessionId":"S","message":{"id":"m1","role":"assistant","content":42}}"#,
        r#"{"type":"user","uuid":"u3","parentUuid":"u2","sessionId":"S","message":{"role":"user","content":{"kind":"odd"}}}"#,
        r#"{"type":"user","uuid":"u4","parentUuid":"u3","sessionId":"S","message":{"role":"user","content":["a",7]}}"#,
    ];
    let s = import_text(&(lines.join("\n") + "\n"), Format::ClaudeCode);
    let texts: Vec<String> = messages(&s).map(Message::text).collect();
    assert_eq!(texts, ["from an object", "42", r#"{"kind":"odd"}"#, "a\n7"]);
    assert_eq!(
        s.stats.diagnostics,
        [
            "line 1: `message.content` is an object, not text or a list of content blocks; kept its `text`",
            "line 2: `message.content` is a number, not text or a list of content blocks; kept its JSON as text",
            "line 3: `message.content` is an object, not text or a list of content blocks; kept its JSON as text",
            "line 4: `message.content[1]` is a number, not text or a list of content blocks; kept its JSON as text",
        ]
    );
    // The same helper serves pi.
    let pi = [
        r#"{"type":"session","id":"s","timestamp":"2025-01-01T00:00:00Z"}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01Z","message":{"role":"user","content":{"text":"pi object"}}}"#,
    ];
    let s = import_text(&(pi.join("\n") + "\n"), Format::PiV1);
    assert_eq!(
        messages(&s).map(Message::text).collect::<Vec<_>>(),
        ["pi object"]
    );
    assert_eq!(
        s.stats.diagnostics,
        ["line 2: `content` is an object, not text or a list of content blocks; kept its `text`"]
    );
}

#[test]
fn usage_figures_that_are_not_counts_are_named_and_kept_out_of_calibration() {
    let usage_line = |uuid: &str, parent: &str, usage: &str| {
        format!(
            r#"{{"type":"assistant","uuid":"{uuid}","parentUuid":{parent},"sessionId":"S","message":{{"id":"m-{uuid}","model":"m","role":"assistant","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
        )
    };
    let lines = [
        usage_line("a", "null", r#"{"input_tokens":-3,"output_tokens":1}"#),
        usage_line("b", "\"a\"", r#"{"input_tokens":2.5,"output_tokens":1}"#),
        usage_line(
            "c",
            "\"b\"",
            r#"{"input_tokens":18446744073709551616,"output_tokens":1}"#,
        ),
        usage_line(
            "d",
            "\"c\"",
            r#"{"input_tokens":10,"output_tokens":"many"}"#,
        ),
        usage_line("e", "\"d\"", r#"{"input_tokens":10,"output_tokens":4}"#),
    ];
    let s = import_text(&(lines.join("\n") + "\n"), Format::ClaudeCode);
    let usages: Vec<Option<u64>> = s
        .inferences
        .iter()
        .map(|i| i.usage.map(|u| u.input))
        .collect();
    assert_eq!(usages, [None, None, None, None, Some(10)]);
    assert_eq!(s.stats.usage.input, 10);
    assert_eq!(s.stats.usage_raw["input_tokens"], 10);
    let tail = "this usage is not recorded and is kept out of calibration";
    assert_eq!(
        s.stats.diagnostics,
        [
            format!("line 1: usage field `input_tokens` is -3 (negative); {tail}"),
            format!("line 2: usage field `input_tokens` is 2.5 (not a whole number); {tail}"),
            format!(
                "line 3: usage field `input_tokens` is 1.8446744073709552e+19 (larger than a 64-bit count); {tail}"
            ),
            format!("line 4: usage field `output_tokens` is \"many\" (not a number); {tail}"),
        ]
    );
    // The message entries carry no usage either (calibration reads them).
    let with_usage = messages(&s).filter(|m| m.usage.is_some()).count();
    assert_eq!(with_usage, 1);
}

#[test]
fn a_claude_code_compaction_passes_the_check_and_stores_its_summary_once() {
    let lines = [
        r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"S","timestamp":"2025-06-01T10:00:00Z","message":{"role":"user","content":"fix the bug"}}"#,
        r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"S","timestamp":"2025-06-01T10:00:01Z","message":{"id":"m1","model":"m","role":"assistant","content":[{"type":"text","text":"looking"}]}}"#,
        r#"{"type":"system","subtype":"compact_boundary","uuid":"c1","parentUuid":null,"logicalParentUuid":"a1","sessionId":"S","timestamp":"2025-06-01T10:05:00Z","compactMetadata":{"trigger":"auto","preTokens":1000}}"#,
        r#"{"type":"user","uuid":"s1","parentUuid":"c1","isCompactSummary":true,"sessionId":"S","timestamp":"2025-06-01T10:05:01Z","message":{"role":"user","content":"Summary: the bug is in parse()"}}"#,
        r#"{"type":"assistant","uuid":"a2","parentUuid":"s1","sessionId":"S","timestamp":"2025-06-01T10:05:02Z","message":{"id":"m2","model":"m","role":"assistant","content":[{"type":"text","text":"fixed"}]}}"#,
    ];
    let s = import_text(&(lines.join("\n") + "\n"), Format::ClaudeCode);
    let found = capsules(&s);
    assert_eq!(found.len(), 1);
    let (_, capsule) = found[0];
    assert_eq!(capsule.markdown, "Summary: the bug is in parse()");
    assert_eq!(capsule.first_kept_entry_id, None);
    assert_eq!(capsule.tokens_before.get(), 1000);
    let rendered = soba_core::render::capsule_input(&soba_core::render::CapsuleView::from(capsule));
    let expected = soba_core::tokens::count_message(
        &soba_core::tokens::BpeCounter::new(soba_core::Encoding::O200kBase),
        &Message::user(rendered),
        soba_core::tokens::DEFAULT_IMAGE_TOKENS,
    );
    assert_eq!(capsule.tokens_after, expected.n);
    assert_eq!(
        all_text(&s).matches("the bug is in parse()").count(),
        0,
        "not repeated as a message"
    );
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

/// A Claude Code response with three parallel calls, as Claude Code 2.x
/// writes it: one line per content block sharing `message.id`, chained
/// c1 ← c2 ← c3, each result a line whose parent is its own call; the
/// next response hangs from the result written last (r2), so the chain
/// from the last line passes through one result only. Also a sidechain
/// (sub-agent) line and a prompt a rewind abandoned.
const CLAUDE_PARALLEL: &[&str] = &[
    r#"{"type":"user","uuid":"u1","parentUuid":null,"isSidechain":false,"sessionId":"P","timestamp":"2026-05-01T10:00:00Z","message":{"role":"user","content":"read the three files"}}"#,
    r#"{"type":"assistant","uuid":"c1","parentUuid":"u1","sessionId":"P","timestamp":"2026-05-01T10:00:01Z","message":{"id":"msg_p","model":"claude-opus-4-6","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"a"}}],"usage":{"input_tokens":5,"output_tokens":30,"cache_read_input_tokens":100,"cache_creation_input_tokens":10}}}"#,
    r#"{"type":"assistant","uuid":"c2","parentUuid":"c1","sessionId":"P","timestamp":"2026-05-01T10:00:01Z","message":{"id":"msg_p","model":"claude-opus-4-6","role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Read","input":{"file_path":"b"}}],"usage":{"input_tokens":5,"output_tokens":30,"cache_read_input_tokens":100,"cache_creation_input_tokens":10}}}"#,
    r#"{"type":"assistant","uuid":"c3","parentUuid":"c2","sessionId":"P","timestamp":"2026-05-01T10:00:01Z","message":{"id":"msg_p","model":"claude-opus-4-6","role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"Read","input":{"file_path":"c"}}],"usage":{"input_tokens":5,"output_tokens":30,"cache_read_input_tokens":100,"cache_creation_input_tokens":10}}}"#,
    r#"{"type":"user","uuid":"r1","parentUuid":"c1","sessionId":"P","timestamp":"2026-05-01T10:00:02Z","sourceToolAssistantUUID":"c1","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"A"}]}}"#,
    r#"{"type":"user","uuid":"x1","parentUuid":"r1","isSidechain":true,"sessionId":"P","timestamp":"2026-05-01T10:00:02Z","message":{"role":"user","content":"sub-agent task"}}"#,
    r#"{"type":"user","uuid":"r3","parentUuid":"c3","sessionId":"P","timestamp":"2026-05-01T10:00:03Z","sourceToolAssistantUUID":"c3","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","content":"C"}]}}"#,
    r#"{"type":"user","uuid":"r2","parentUuid":"c2","sessionId":"P","timestamp":"2026-05-01T10:00:04Z","sourceToolAssistantUUID":"c2","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"B"}]}}"#,
    r#"{"type":"assistant","uuid":"d1","parentUuid":"r2","sessionId":"P","timestamp":"2026-05-01T10:00:05Z","message":{"id":"msg_q","model":"claude-opus-4-6","role":"assistant","content":[{"type":"text","text":"All three read."}],"usage":{"input_tokens":5,"output_tokens":4,"cache_read_input_tokens":200,"cache_creation_input_tokens":20}}}"#,
    r#"{"type":"user","uuid":"w1","parentUuid":"d1","sessionId":"P","timestamp":"2026-05-01T10:00:06Z","message":{"role":"user","content":"abandoned by a rewind"}}"#,
    r#"{"type":"user","uuid":"w2","parentUuid":"d1","sessionId":"P","timestamp":"2026-05-01T10:00:07Z","message":{"role":"user","content":"now summarise them"}}"#,
    r#"{"type":"assistant","uuid":"d2","parentUuid":"w2","sessionId":"P","timestamp":"2026-05-01T10:00:08Z","message":{"id":"msg_r","model":"claude-opus-4-6","role":"assistant","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":300,"cache_creation_input_tokens":5}}}"#,
];

#[test]
fn claude_code_parallel_results_on_sibling_branches_all_pair() {
    let s = import_text(&(CLAUDE_PARALLEL.join("\n") + "\n"), Format::ClaudeCode);
    assert_eq!(s.stats.tool_calls, 3);
    assert_eq!(s.stats.tool_results, 3);
    assert_eq!(s.stats.unpaired_tool_calls, 0);
    assert_eq!(s.inferences.len(), 3);
    let order: Vec<String> = messages(&s)
        .map(|m| match (m.tool_uses().count(), m.tool_results().next()) {
            (0, Some(result)) => format!("R({})", result.tool_use_id),
            (0, None) => format!("{:?}:{}", m.role, m.text()),
            (n, _) => format!("A({n})"),
        })
        .collect();
    assert_eq!(
        order,
        [
            "User:read the three files",
            "A(3)",
            "R(toolu_1)",
            "R(toolu_3)",
            "R(toolu_2)",
            "Assistant:All three read.",
            "User:now summarise them",
            "Assistant:Done.",
        ]
    );
    let diagnostics = &s.stats.diagnostics;
    assert!(
        diagnostics
            .iter()
            .any(|d| d.starts_with("1 lines off the current branch")),
        "{diagnostics:?}"
    );
    assert!(
        diagnostics
            .iter()
            .any(|d| d.starts_with("1 sidechain lines (a sub-agent's own conversation) skipped")),
        "{diagnostics:?}"
    );
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

/// A request Claude Code retried after an API error (seen in Claude Code
/// 2.1.121 desktop): the retried response (a2, its call, its result and
/// the closing text a3) hangs from the attachment t1 the failed request
/// followed, but the `system` `api_error` notice for the failure, also a
/// child of t1, reaches the file only after a3, and the lines written next
/// hang from the notice. The next request carried a2…a3 all the same.
const CLAUDE_LATE_RETRY_NOTICE: &[&str] = &[
    r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"R","timestamp":"2026-05-05T07:00:00Z","message":{"role":"user","content":"fix the chat panel"}}"#,
    r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"R","timestamp":"2026-05-05T07:00:01Z","message":{"id":"msg_1","model":"claude-sonnet-4-6","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"a"}}],"usage":{"input_tokens":3,"output_tokens":20,"cache_read_input_tokens":100,"cache_creation_input_tokens":0}}}"#,
    r#"{"type":"user","uuid":"r1","parentUuid":"a1","sessionId":"R","timestamp":"2026-05-05T07:00:02Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"A"}]}}"#,
    r#"{"type":"attachment","uuid":"t1","parentUuid":"r1","sessionId":"R","timestamp":"2026-05-05T07:00:02Z","attachment":{"type":"todo_reminder","content":[]}}"#,
    r#"{"type":"assistant","uuid":"a2","parentUuid":"t1","sessionId":"R","timestamp":"2026-05-05T07:00:09Z","message":{"id":"msg_2","model":"claude-sonnet-4-6","role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"tsc"}}],"usage":{"input_tokens":3,"output_tokens":20,"cache_read_input_tokens":120,"cache_creation_input_tokens":0}}}"#,
    r#"{"type":"user","uuid":"r2","parentUuid":"a2","sessionId":"R","timestamp":"2026-05-05T07:00:10Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"no errors"}]}}"#,
    r#"{"type":"assistant","uuid":"a3","parentUuid":"r2","sessionId":"R","timestamp":"2026-05-05T07:00:11Z","message":{"id":"msg_3","model":"claude-sonnet-4-6","role":"assistant","content":[{"type":"text","text":"No type errors."}],"usage":{"input_tokens":3,"output_tokens":5,"cache_read_input_tokens":140,"cache_creation_input_tokens":0}}}"#,
    r#"{"type":"system","subtype":"api_error","uuid":"e1","parentUuid":"t1","sessionId":"R","timestamp":"2026-05-05T07:00:03Z","level":"error","retryAttempt":1,"maxRetries":10,"error":{"status":401}}"#,
    r#"{"type":"system","subtype":"stop_hook_summary","uuid":"h1","parentUuid":"e1","sessionId":"R","timestamp":"2026-05-05T07:00:12Z"}"#,
    r#"{"type":"user","uuid":"u2","parentUuid":"h1","sessionId":"R","timestamp":"2026-05-05T09:00:00Z","message":{"role":"user","content":"now the video tile"}}"#,
    r#"{"type":"assistant","uuid":"a4","parentUuid":"u2","sessionId":"R","timestamp":"2026-05-05T09:00:01Z","message":{"id":"msg_4","model":"claude-sonnet-4-6","role":"assistant","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":3,"output_tokens":2,"cache_read_input_tokens":160,"cache_creation_input_tokens":0}}}"#,
];

#[test]
fn a_retry_notice_written_late_keeps_the_retried_response_on_the_branch() {
    let s = import_text(
        &(CLAUDE_LATE_RETRY_NOTICE.join("\n") + "\n"),
        Format::ClaudeCode,
    );
    assert_eq!(s.stats.tool_calls, 2);
    assert_eq!(s.stats.tool_results, 2);
    assert_eq!(s.stats.unpaired_tool_calls, 0);
    assert_eq!(s.inferences.len(), 4);
    let texts: Vec<String> = messages(&s)
        .filter(|m| m.tool_uses().count() == 0 && m.tool_results().next().is_none())
        .map(|m| m.text())
        .collect();
    assert_eq!(
        texts,
        [
            "fix the chat panel",
            "No type errors.",
            "now the video tile",
            "Done."
        ]
    );
    let diagnostics = &s.stats.diagnostics;
    assert!(
        diagnostics.contains(&"line 8: a retry notice (system api_error) names line 4 as its parent but was written after line 7, which the conversation had reached; it is attached to line 7 so the retried response stays on the branch".to_owned()),
        "{diagnostics:?}"
    );
    assert!(
        !diagnostics
            .iter()
            .any(|d| d.contains("off the current branch")),
        "{diagnostics:?}"
    );
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

#[test]
fn the_show_check_names_a_call_the_conversation_went_on_without() {
    // Without r1 and r3 the next response follows two open calls.
    let lines: Vec<&str> = CLAUDE_PARALLEL
        .iter()
        .copied()
        .filter(|line| !line.contains(r#""uuid":"r1""#) && !line.contains(r#""uuid":"r3""#))
        .collect();
    let s = import_text(&(lines.join("\n") + "\n"), Format::ClaudeCode);
    assert_eq!(s.stats.unpaired_tool_calls, 2);
    let problems = check_problems(&s);
    assert_eq!(problems.len(), 2, "{problems:?}");
    for (problem, id) in problems.iter().zip(["toolu_1", "toolu_3"]) {
        assert!(
            problem.ends_with(&format!(
                "tool call \"{id}\" has no result before the next response on the path (the model input answers it as interrupted)"
            )),
            "{problem}"
        );
    }
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn claude_code_native_session() {
    // SOURCES.md #9: 89 responses, 96 calls and 96 results (none unpaired),
    // 89 usage records, the largest request 123,086 tokens, no compaction,
    // 0 sidechain lines.
    let Some(mut sessions) = import_raw("claude-code/bhavana-claude-session.jsonl") else {
        return;
    };
    assert_eq!(sessions.len(), 1);
    let s = sessions.remove(0);
    check(
        &s,
        &Expect {
            format: Format::ClaudeCode,
            messages: 273,
            records: &[("assistant", 150), ("user", 116), ("system", 7)],
            tool_calls: 96,
            tool_results: 96,
            unpaired: 0,
            inferences: 89,
            compactions: 0,
            peak: Some(123_086),
            usage_raw: &[],
        },
    );
    // The 12 user messages: 10 typed and 2 interruptions; the 8 lines
    // Claude Code wrote in the user's name (skill and command output) are
    // kept as injected.
    let count = |origin: MessageOrigin| {
        messages(&s)
            .filter(|m| m.role == Role::User && m.origin == origin)
            .count()
    };
    assert_eq!(
        [
            count(MessageOrigin::Typed),
            count(MessageOrigin::Marker),
            count(MessageOrigin::Injected)
        ],
        [10, 2, 8]
    );
    assert_eq!(s.stats.orphan_tool_results, 0);
    assert!(
        !s.stats.diagnostics.iter().any(|d| d.contains("sidechain")),
        "{:?}",
        s.stats.diagnostics
    );
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

/// Writes `session` as a log and returns the messages of the stretch
/// `soba -r` resumes on (the latest capsule, then what follows it).
fn resumed_messages(session: &ImportedSession) -> Vec<(Role, MessageOrigin, String)> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("imported.jsonl");
    let mut writer = soba_store::SessionWriter::create(
        &path,
        &crate::support::header("imported"),
        crate::support::options(3),
    )
    .expect("a new session file");
    for entry in &session.entries {
        writer.append_entry(entry).expect("written");
    }
    drop(writer);
    let resumed = soba_store::resume(&path).expect("resumes");
    resumed
        .stretch
        .iter()
        .filter_map(|logged| match &logged.entry.body {
            EntryBody::Message(m) => Some((m.message.role, m.message.origin, m.message.text())),
            EntryBody::Capsule(c) => Some((Role::User, MessageOrigin::Summary, c.markdown.clone())),
            _ => None,
        })
        .collect()
}

/// A Codex rollout compacted by Codex 0.12x: an empty `message` and a
/// replacement history of two user messages, the developer instructions
/// and the encrypted summary.
const CODEX_COMPACTED: &[&str] = &[
    r#"{"timestamp":"2026-04-21T10:00:00Z","type":"session_meta","payload":{"id":"C","cwd":"/w"}}"#,
    r#"{"timestamp":"2026-04-21T10:00:00Z","type":"turn_context","payload":{"model":"gpt-5.4"}}"#,
    r#"{"timestamp":"2026-04-21T10:00:01Z","type":"response_item","payload":{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions instructions> sandboxed"}]}}"#,
    r#"{"timestamp":"2026-04-21T10:00:02Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"build the payroll page"}]}}"#,
    r#"{"timestamp":"2026-04-21T10:00:03Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"ls\"}","call_id":"call_1"}}"#,
    r#"{"timestamp":"2026-04-21T10:00:04Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":200000,"cached_input_tokens":0,"output_tokens":10,"total_tokens":200010},"last_token_usage":{"input_tokens":200000,"cached_input_tokens":0,"output_tokens":10,"total_tokens":200010},"model_context_window":258400}}}"#,
    r#"{"timestamp":"2026-04-21T10:00:05Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"a.rs"}}"#,
    r#"{"timestamp":"2026-04-21T10:00:06Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"also fund the treasury"}]}}"#,
    r#"{"timestamp":"2026-04-21T10:00:07Z","type":"compacted","payload":{"message":"","replacement_history":[{"type":"message","role":"user","content":[{"type":"input_text","text":"build the payroll page"}]},{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions instructions> sandboxed"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"also fund the treasury"}]},{"type":"compaction","encrypted_content":"gAAAA"}]}}"#,
    r#"{"timestamp":"2026-04-21T10:00:08Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Funding steps: …"}]}}"#,
    r#"{"timestamp":"2026-04-21T10:00:09Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":200500,"cached_input_tokens":0,"output_tokens":20,"total_tokens":200520},"last_token_usage":{"input_tokens":500,"cached_input_tokens":0,"output_tokens":10,"total_tokens":510},"model_context_window":258400}}}"#,
];

#[test]
fn a_codex_compaction_resumes_with_the_history_codex_kept() {
    let s = import_text(&(CODEX_COMPACTED.join("\n") + "\n"), Format::CodexRollout);
    let found = capsules(&s);
    assert_eq!(found.len(), 1);
    let (_, capsule) = found[0];
    assert_eq!(capsule.quality, soba_core::Quality::Degraded);
    assert_eq!(capsule.tokens_before.get(), 200_000);
    assert_eq!(capsule.first_kept_entry_id, None);
    assert!(
        capsule.markdown.starts_with(
            "Codex compacted the conversation here. Its summary is encrypted (an opaque `compaction` item), so it cannot be shown; what Codex carried forward in the clear is the 3 messages that follow: 2 user messages and the instructions it kept verbatim."
        ),
        "{}",
        capsule.markdown
    );
    // The resumed input: the capsule, the history Codex sent next in its
    // order, then the new response.
    let resumed: Vec<(Role, String)> = resumed_messages(&s)
        .into_iter()
        .map(|(role, _, text)| (role, text))
        .collect();
    assert_eq!(
        resumed[1..],
        [
            (Role::User, "build the payroll page".to_owned()),
            (
                Role::System,
                "<permissions instructions> sandboxed".to_owned()
            ),
            (Role::User, "also fund the treasury".to_owned()),
            (Role::Assistant, "Funding steps: …".to_owned()),
        ]
    );
    assert_eq!(s.stats.tool_results, 1);
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

/// A Codex rollout whose second turn the user interrupted and rolled back
/// (`thread_rolled_back`, as Codex 0.142 writes it after Esc and an edit
/// of the last prompt): Codex rebuilds the thread without that turn and
/// without the context updates it started with, so the third turn's
/// requests carry turn 1 and turn 3 only.
fn codex_rolled_back() -> String {
    let item = |ts: u32, payload: &str| {
        format!(
            r#"{{"timestamp":"2026-07-02T09:56:{ts:02}Z","type":"response_item","payload":{payload}}}"#
        )
    };
    let event = |ts: u32, payload: &str| {
        format!(
            r#"{{"timestamp":"2026-07-02T09:56:{ts:02}Z","type":"event_msg","payload":{payload}}}"#
        )
    };
    let msg = |role: &str, kind: &str, text: &str| {
        format!(
            r#"{{"type":"message","role":"{role}","content":[{{"type":"{kind}","text":"{text}"}}]}}"#
        )
    };
    let tokens = |total: u32, last: u32| {
        format!(
            r#"{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{total},"cached_input_tokens":0,"output_tokens":10,"total_tokens":0}},"last_token_usage":{{"input_tokens":{last},"cached_input_tokens":0,"output_tokens":10,"total_tokens":0}},"model_context_window":258400}}}}"#
        )
    };
    let call = |id: &str| {
        format!(
            r#"{{"type":"function_call","name":"shell","arguments":"{{\"command\":[\"ls\"]}}","call_id":"{id}"}}"#
        )
    };
    let output = |id: &str| {
        format!(
            r#"{{"type":"function_call_output","call_id":"{id}","output":"Exit code: 0\nOutput:\nsrc"}}"#
        )
    };
    let turn = |ts: u32| {
        [
            event(
                ts,
                r#"{"type":"task_started","model_context_window":258400}"#,
            ),
            item(
                ts,
                &msg(
                    "developer",
                    "input_text",
                    "<permissions instructions> workspace-write",
                ),
            ),
            item(
                ts,
                &msg(
                    "user",
                    "input_text",
                    "<environment_context> <cwd>/w</cwd> </environment_context>",
                ),
            ),
            format!(
                r#"{{"timestamp":"2026-07-02T09:56:{ts:02}Z","type":"turn_context","payload":{{"cwd":"/w","model":"gpt-5.5"}}}}"#
            ),
        ]
    };
    let mut lines = vec![
        r#"{"timestamp":"2026-07-02T09:56:00Z","type":"session_meta","payload":{"id":"rb","cwd":"/w","cli_version":"0.142.5","model_provider":"openai"}}"#.to_owned(),
    ];
    lines.extend(turn(1));
    lines.extend([
        item(2, &msg("user", "input_text", "first ask")),
        item(3, &call("c1")),
        item(4, &output("c1")),
        event(4, &tokens(1000, 1000)),
        item(5, &msg("assistant", "output_text", "first done")),
        event(5, &tokens(2100, 1100)),
    ]);
    lines.extend(turn(10));
    lines.extend([
        item(11, &msg("user", "input_text", "second ask")),
        item(12, &call("c2")),
        item(13, &output("c2")),
        event(13, &tokens(3500, 1400)),
        item(
            14,
            &msg(
                "user",
                "input_text",
                "<turn_aborted> The user interrupted the previous turn on purpose.",
            ),
        ),
        event(14, r#"{"type":"turn_aborted","reason":"interrupted"}"#),
        event(15, r#"{"type":"thread_rolled_back","num_turns":1}"#),
    ]);
    lines.extend(turn(20));
    lines.extend([
        item(21, &msg("user", "input_text", "third ask")),
        item(22, &msg("assistant", "output_text", "third done")),
        event(22, &tokens(4700, 1200)),
    ]);
    lines.join("\n") + "\n"
}

#[test]
fn a_codex_rollback_leaves_the_rolled_back_turn_out_of_the_history() {
    let s = import_text(&codex_rolled_back(), Format::CodexRollout);
    let said: Vec<(Role, String)> = messages(&s)
        .filter(|m| m.tool_results().next().is_none())
        .map(|m| (m.role, m.text()))
        .collect();
    let system = |text: &str| (Role::System, text.to_owned());
    let user = |text: &str| (Role::User, text.to_owned());
    let assistant = |text: &str| (Role::Assistant, text.to_owned());
    assert_eq!(
        said,
        [
            system("<permissions instructions> workspace-write"),
            user("<environment_context> <cwd>/w</cwd> </environment_context>"),
            user("first ask"),
            assistant(""),
            assistant("first done"),
            system("<permissions instructions> workspace-write"),
            user("<environment_context> <cwd>/w</cwd> </environment_context>"),
            user("third ask"),
            assistant("third done"),
        ]
    );
    assert_eq!(s.stats.tool_calls, 1);
    assert_eq!(s.stats.tool_results, 1);
    assert_eq!(s.inferences.len(), 3);
    assert_eq!(
        s.stats.diagnostics,
        [
            "line 22: thread_rolled_back drops the last 1 turn(s): the 6 items of lines 13–20 are not in the history Codex sent next, so they are left out"
        ]
    );
    // The recorded total is Codex's own, the rolled-back request included.
    assert_eq!(s.stats.usage.input, 4700);
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

#[test]
fn a_codex_response_the_file_ends_after_is_named_as_carrying_no_usage() {
    // Rollouts committed mid-turn (Codex 0.125–0.144) end with a response
    // whose token_count was never written.
    let text = codex_rolled_back()
        + r#"{"timestamp":"2026-07-02T09:56:30Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"fourth ask"}]}}"#
        + "\n"
        + r#"{"timestamp":"2026-07-02T09:56:31Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"one more thing"}]}}"#
        + "\n";
    let s = import_text(&text, Format::CodexRollout);
    assert_eq!(s.inferences.len(), 4);
    assert_eq!(s.inferences[3].usage, None);
    assert_eq!(
        s.stats.diagnostics[1..],
        [
            "line 31: the last response got no new token_count (none before the file ends, or a repeat of the previous total: a turn cut short or interrupted); it carries no usage"
        ]
    );
}

#[cfg_attr(
    not(shared_traces),
    ignore = "needs ../shared/traces beside the repository"
)]
#[test]
fn codex_native_rollout() {
    // SOURCES.md #10: 157 calls and 157 outputs; one compaction at line 748
    // whose replacement history holds 10 user messages (the opening task
    // among them), 1 developer message and the encrypted summary.
    let Some(mut sessions) = import_raw("codex/soulpass-codex-session.jsonl") else {
        return;
    };
    let s = sessions.remove(0);
    assert_eq!(s.format, Format::CodexRollout);
    assert_eq!(s.stats.tool_calls, 157);
    assert_eq!(s.stats.tool_results, 157);
    assert_eq!(s.stats.unpaired_tool_calls, 0);
    assert_eq!(s.stats.compactions, 1);
    assert_eq!(s.stats.peak_prompt_tokens, Some(234_537));
    let (_, capsule) = capsules(&s)[0];
    assert_eq!(capsule.quality, soba_core::Quality::Degraded);
    assert!(
        capsule
            .markdown
            .contains("11 messages that follow: 10 user messages")
    );
    let resumed = resumed_messages(&s);
    let kept_users: Vec<&str> = resumed
        .iter()
        .filter(|(role, origin, _)| *role == Role::User && *origin == MessageOrigin::Summary)
        .map(|(_, _, text)| text.as_str())
        .collect();
    // The capsule, then the 10 user messages Codex kept (the environment
    // context among them).
    assert_eq!(kept_users.len(), 11, "{kept_users:?}");
    assert!(
        kept_users
            .iter()
            .any(|text| text.starts_with("i dont wanna use this page")),
        "the opening task is in the resumed input"
    );
    assert!(
        kept_users
            .iter()
            .any(|text| text.starts_with("give me steps to do this")),
        "the newest request is in the resumed input"
    );
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
}

/// One small generated transcript per format, each with a compaction where
/// the format records one and a result recorded before its call.
fn generated_fixtures() -> Vec<(&'static str, String)> {
    let mut pi = pi_v3_lines(6);
    pi.push(r#"{"type":"compaction","id":"k1","parentId":"e0005","timestamp":"2025-01-01T00:01:00Z","summary":"did things","tokensBefore":900,"firstKeptEntryId":"e0003"}"#.to_owned());
    pi.push(r#"{"type":"message","id":"k2","parentId":"k1","timestamp":"2025-01-01T00:01:01Z","message":{"role":"toolResult","toolCallId":"nowhere","content":"stray","isError":true}}"#.to_owned());
    let mut claude = claude_lines(5);
    claude.push(r#"{"type":"system","subtype":"compact_boundary","uuid":"c1","parentUuid":null,"logicalParentUuid":"u0004","sessionId":"cc-tree","timestamp":"2025-01-01T00:01:00Z"}"#.to_owned());
    claude.push(r#"{"type":"user","uuid":"s1","parentUuid":"c1","isCompactSummary":true,"sessionId":"cc-tree","timestamp":"2025-01-01T00:01:01Z","message":{"role":"user","content":"Summary"}}"#.to_owned());
    claude.push(r#"{"type":"user","uuid":"s2","parentUuid":"s1","sessionId":"cc-tree","timestamp":"2025-01-01T00:01:02Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"call1","content":"late"}]}}"#.to_owned());
    let chat = r#"{"format":"openai-chat","model":"m","task_id":"T","messages":[
        {"role":"user","content":"go"},
        {"role":"tool","tool_call_id":"x1","content":"early"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"x1","type":"function","function":{"name":"Bash","arguments":"{}"}}]},
        {"role":"system","content":"[compact_boundary] Conversation compacted"},
        {"role":"user","content":"This session is being continued. Summary: S"},
        {"role":"tool","tool_call_id":"x9","content":"orphan"}
    ]}"#;
    let rollout = [
        r#"{"timestamp":"2025-09-01T10:00:00Z","type":"session_meta","payload":{"id":"R","cwd":"/w"}}"#,
        r#"{"timestamp":"2025-09-01T10:00:01Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}}"#,
        r#"{"timestamp":"2025-09-01T10:00:02Z","type":"response_item","payload":{"type":"function_call_output","call_id":"k1","output":"early"}}"#,
        r#"{"timestamp":"2025-09-01T10:00:03Z","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}","call_id":"k1"}}"#,
        r#"{"timestamp":"2025-09-01T10:00:04Z","type":"compacted","payload":{"message":"codex summary"}}"#,
        r#"{"timestamp":"2025-09-01T10:00:05Z","type":"response_item","payload":{"type":"function_call_output","call_id":"gone","output":"stray"}}"#,
    ]
    .join("\n");
    let gemini = r#"{"sessionId":"G","messages":[{"id":"1","type":"user","content":"go"},{"id":"2","type":"gemini","content":"ok","tokens":{"input":5,"output":-1},"toolCalls":[{"id":"g1","name":"ls","args":{},"result":[{"functionResponse":{"id":"g1","response":{"output":"a"}}}],"status":"success"}]}]}"#.to_owned();
    let gemini_jsonl = [
        r#"{"sessionId":"GL","projectHash":"h","startTime":"2026-01-30T06:08:50.429Z"}"#,
        r#"{"id":"1","type":"user","content":"go"}"#,
        r#"{"id":"2","type":"gemini","content":"","toolCalls":[{"id":"g1","name":"ls","args":{},"status":"executing"}]}"#,
        r#"{"id":"2","type":"gemini","content":"ok","tokens":{"input":5,"output":1,"cached":0,"total":6},"toolCalls":[{"id":"g1","name":"ls","args":{},"result":[{"functionResponse":{"id":"g1","response":{"output":"a"}}}],"status":"success"}]}"#,
        r#"{"id":"3","type":"user","content":"wrong"}"#,
        r#"{"$rewindTo":"3"}"#,
        r#"{"$set":{"lastUpdated":"2026-01-30T06:09:00.000Z"}}"#,
    ]
    .join("\n");
    let openhands = r#"{"instance_id":"i","history":[{"id":1,"source":"user","action":"message","args":{"content":"go"}},{"id":3,"source":"environment","observation":"run","content":"orphan","cause":2,"tool_call_metadata":{"tool_call_id":"nowhere"}}]}"#.to_owned();
    let swe = r#"{"history":[{"role":"system","content":"sys"},{"role":"user","content":"go"},{"role":"tool","content":"early","tool_call_ids":["w1"]},{"role":"assistant","content":"t","tool_calls":[{"id":"w1","type":"function","function":{"name":"bash","arguments":"{}"}}]}],"info":{"model_stats":{"tokens_sent":1.5,"tokens_received":2}}}"#.to_owned();
    let meta = r#"{"messages":[{"role":"user","content":[{"type":"text","text":"go"}],"_metadata":{"timestamp":"2025-09-01T10:00:00Z"}},{"role":"tool","tool_call_id":"z","content":[{"type":"tool_output","text":"orphan"}],"_metadata":{"timestamp":"2025-09-01T10:00:01Z"}}],"meta":{"session_meta":{"id":"M"},"token_counts":[]}}"#.to_owned();
    vec![
        ("pi-v3.jsonl", pi.join("\n") + "\n"),
        ("claude.jsonl", claude.join("\n") + "\n"),
        ("chat.json", chat.to_owned()),
        ("rollout.jsonl", rollout + "\n"),
        ("gemini.json", gemini),
        ("gemini.jsonl", gemini_jsonl + "\n"),
        ("openhands.jsonl", openhands + "\n"),
        ("swe.traj", swe),
        ("meta.json", meta),
    ]
}

#[test]
fn every_importer_on_every_fixture_passes_the_show_check() {
    let options = ImportOptions::with_fallback_ms(0);
    let mut n_checked = 0;
    let mut failures = Vec::new();
    let mut inputs: Vec<(String, Vec<u8>)> = generated_fixtures()
        .into_iter()
        .map(|(name, text)| (name.to_owned(), text.into_bytes()))
        .collect();
    match raw_dir() {
        Some(raw) => {
            for rel in [
                "pi-mono/large-session.jsonl",
                "pi-mono/before-compaction.jsonl",
                "swe-agent/marshmallow-code__marshmallow-1867.traj",
                "swe-agent/pydicom__pydicom-1458.traj",
                "openhands/output.jsonl",
                "gemini-cli/session-2026-01-30T06-08-7befeae5.json",
                "claude-code-openai-chat/develop-1.json",
                "codex-converted/trajectory-1.json",
            ] {
                inputs.push((
                    rel.to_owned(),
                    std::fs::read(raw.join(rel)).expect("readable"),
                ));
            }
        }
        None => println!("the shared traces are absent: only the generated fixtures are checked"),
    }
    for (name, bytes) in &inputs {
        // As detected, then forced through every importer.
        let detected =
            import_bytes(bytes, Path::new(name), &options).expect("every fixture imports");
        let forced = Format::ALL
            .into_iter()
            .filter_map(|format| import_as(bytes, format, Path::new(name), &options).ok())
            .flatten();
        for session in detected.iter().cloned().chain(forced) {
            // Calls the source itself never answered (aborted responses)
            // are reported by the check (issue 34), no more than the
            // import counted as unpaired; nothing else may be.
            let (unanswered, problems): (Vec<String>, Vec<String>) = check_problems(&session)
                .into_iter()
                .partition(|p| p.contains("has no result before the next response"));
            if !problems.is_empty() || unanswered.len() as u64 > session.stats.unpaired_tool_calls {
                failures.push(format!(
                    "{name} as {}: {problems:?} {unanswered:?}",
                    session.format
                ));
            }
            n_checked += 1;
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(n_checked >= 8, "{n_checked}");
}

#[test]
fn generated_fixtures_report_their_pairing_problems() {
    let options = ImportOptions::with_fallback_ms(0);
    let mut found = Vec::new();
    for (name, text) in generated_fixtures() {
        for s in import_bytes(text.as_bytes(), Path::new(name), &options).expect("imports") {
            found.push((
                name,
                s.stats.orphan_tool_results,
                s.stats.results_before_calls,
                s.stats.reordered_tool_results,
                s.stats.compactions,
            ));
        }
    }
    assert_eq!(
        found,
        [
            ("pi-v3.jsonl", 1, 0, 0, 1),
            ("claude.jsonl", 0, 0, 0, 1),
            ("chat.json", 1, 0, 1, 1),
            ("rollout.jsonl", 1, 0, 1, 1),
            ("gemini.json", 0, 0, 0, 0),
            ("gemini.jsonl", 0, 0, 0, 0),
            ("openhands.jsonl", 1, 0, 0, 0),
            ("swe.traj", 0, 0, 1, 0),
            ("meta.json", 1, 0, 0, 0),
        ]
    );
}

/// An openai-chat assistant message making one call `id`.
fn chat_call(id: &str) -> String {
    format!(
        r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"Bash","arguments":"{{}}"}}}}]}}"#
    )
}

/// An openai-chat tool message answering call `id`.
fn chat_result(id: &str) -> String {
    format!(r#"{{"role":"tool","tool_call_id":"{id}","content":"ok {id}"}}"#)
}

/// The message order after importing an openai-chat export of `records`,
/// labelled `A(ids)`, `R(id)`, `Obs`, `U` or the role, and the session
/// (which must pass the show check).
fn chat_order(records: &[String]) -> (Vec<String>, ImportedSession) {
    let text = format!(
        r#"{{"format":"openai-chat","model":"m","task_id":"T","messages":[{}]}}"#,
        records.join(",")
    );
    let s = import_text(&text, Format::ClaudeCodeOpenAiChat);
    let order = messages(&s)
        .map(
            |m| match (m.role, m.tool_uses().next(), m.tool_results().next()) {
                (_, Some(_), _) => {
                    let ids: Vec<&str> = m.tool_uses().map(|call| call.id.as_str()).collect();
                    format!("A({})", ids.join(","))
                }
                (_, _, Some(result)) => format!("R({})", result.tool_use_id),
                (Role::User, _, _) if m.origin == MessageOrigin::Observation => "Obs".to_owned(),
                (Role::User, _, _) => "U".to_owned(),
                (role, _, _) => format!("{role:?}"),
            },
        )
        .collect();
    assert!(check_problems(&s).is_empty(), "{:?}", check_problems(&s));
    (order, s)
}

#[test]
fn results_join_their_calls_across_whatever_the_recorder_put_between() {
    // The hostile shapes a helper found: a stray result, a queued user
    // message, a duplicate result and a thinking-only message inside a
    // split batch. Every real result ends right after its call; what does
    // not answer an open call stays in place, after the batch.
    let (call, result) = (chat_call, chat_result);
    let user = r#"{"role":"user","content":"also check the docs"}"#.to_owned();
    let text = r#"{"role":"assistant","content":"thinking"}"#.to_owned();
    let go = r#"{"role":"user","content":"go"}"#.to_owned();
    let cases: Vec<(Vec<String>, &[&str], u64)> = vec![
        (
            vec![
                go.clone(),
                call("a"),
                call("b"),
                result("a"),
                call("c"),
                result("zz"),
                result("b"),
                result("c"),
            ],
            // b's result moves past c's call, c's past the stray result.
            &["U", "A(a,b)", "R(a)", "R(b)", "A(c)", "R(c)", "Obs"],
            2,
        ),
        (
            vec![
                go.clone(),
                call("a"),
                call("b"),
                user.clone(),
                result("a"),
                result("b"),
            ],
            &["U", "A(a,b)", "R(a)", "R(b)", "U"],
            2,
        ),
        (
            vec![
                go.clone(),
                call("a"),
                call("b"),
                result("a"),
                call("c"),
                result("a"),
                result("b"),
                result("c"),
            ],
            &["U", "A(a,b)", "R(a)", "R(b)", "A(c)", "R(c)", "Obs"],
            2,
        ),
        (
            vec![go, call("a"), call("b"), result("a"), text, result("b")],
            &["U", "A(a,b)", "R(a)", "R(b)", "Assistant"],
            1,
        ),
    ];
    for (records, expected, moved) in cases {
        let (order, s) = chat_order(&records);
        assert_eq!(order, expected, "{records:?}");
        assert_eq!(s.stats.reordered_tool_results, moved, "{records:?}");
    }
}

/// The billed responses as (model, input, cache read, cache write, of it
/// 1-hour, output).
fn billed(s: &ImportedSession) -> Vec<(String, u64, u64, u64, u64, u64)> {
    s.stats
        .billed
        .iter()
        .map(|b| {
            (
                b.model.clone().unwrap_or_default(),
                b.usage.input,
                b.usage.cache_read,
                b.usage.cache_write,
                b.cache_write_1h,
                b.usage.output,
            )
        })
        .collect()
}

#[test]
fn a_codex_rollout_bills_every_new_token_count_rolled_back_turns_included() {
    // The rolled-back turn's request (1,400) was billed though the history
    // leaves it out; a token_count repeating the total is no new request.
    let text = codex_rolled_back()
        + r#"{"timestamp":"2026-07-02T09:56:23Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":4700,"cached_input_tokens":0,"output_tokens":10,"total_tokens":0},"last_token_usage":{"input_tokens":1200,"cached_input_tokens":0,"output_tokens":10,"total_tokens":0},"model_context_window":258400}}}"#
        + "\n";
    let s = import_text(&text, Format::CodexRollout);
    assert_eq!(s.inferences.len(), 3);
    let with_usage: Vec<u64> = s
        .inferences
        .iter()
        .filter_map(|inference| inference.usage.map(|usage| usage.input))
        .collect();
    assert_eq!(with_usage, [1_000, 1_100, 1_200]);
    let gpt = |input| ("gpt-5.5".to_owned(), input, 0, 0, 0, 10);
    assert_eq!(billed(&s), [gpt(1_000), gpt(1_100), gpt(1_400), gpt(1_200)]);
}

/// A Claude Code file with every pattern of billing: one response written
/// as two content-block lines (the output growing from 5 to 40, 80 of its
/// 100 cache writes 1-hour), a sub-agent's response on a sidechain, a
/// response interrupted and then abandoned by a rewind (its prompt edited
/// and sent again from the tool result), the response that replaced it,
/// and a `<synthetic>` line that was never sent.
const CLAUDE_BILLING: &str = r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"B","cwd":"/w","timestamp":"2026-03-01T10:00:00.000Z","message":{"role":"user","content":"fix the bug"}}
{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"B","timestamp":"2026-03-01T10:00:01.000Z","requestId":"r1","message":{"id":"msg_1","model":"claude-opus-4-7","role":"assistant","content":[{"type":"text","text":"Looking."}],"usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":20,"ephemeral_1h_input_tokens":80}}}}
{"type":"assistant","uuid":"a2","parentUuid":"a1","sessionId":"B","timestamp":"2026-03-01T10:00:01.500Z","requestId":"r1","message":{"id":"msg_1","model":"claude-opus-4-7","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":40,"cache_creation":{"ephemeral_5m_input_tokens":20,"ephemeral_1h_input_tokens":80}}}}
{"type":"user","uuid":"t1","parentUuid":"a2","sessionId":"B","timestamp":"2026-03-01T10:00:02.000Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.rs"}]}}
{"type":"assistant","uuid":"x1","parentUuid":"t1","isSidechain":true,"sessionId":"B","timestamp":"2026-03-01T10:00:02.500Z","requestId":"rs","message":{"id":"msg_s","model":"claude-haiku-4-5","role":"assistant","content":[{"type":"text","text":"sub-agent"}],"usage":{"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":10}}}
{"type":"assistant","uuid":"a3","parentUuid":"t1","sessionId":"B","timestamp":"2026-03-01T10:00:03.000Z","requestId":"r2","message":{"id":"msg_2","model":"claude-opus-4-7","role":"assistant","content":[{"type":"text","text":"Rewriting everything"}],"usage":{"input_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":2000,"output_tokens":9}}}
{"type":"user","uuid":"i1","parentUuid":"a3","sessionId":"B","timestamp":"2026-03-01T10:00:04.000Z","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}
{"type":"user","uuid":"u2","parentUuid":"t1","sessionId":"B","timestamp":"2026-03-01T10:00:05.000Z","message":{"role":"user","content":"only fix a.rs"}}
{"type":"assistant","uuid":"a4","parentUuid":"u2","sessionId":"B","timestamp":"2026-03-01T10:00:06.000Z","requestId":"r3","message":{"id":"msg_3","model":"claude-opus-4-7","role":"assistant","content":[{"type":"text","text":"Fixed a.rs."}],"usage":{"input_tokens":11,"cache_creation_input_tokens":0,"cache_read_input_tokens":3000,"output_tokens":13}}}
{"type":"assistant","uuid":"a5","parentUuid":"a4","sessionId":"B","timestamp":"2026-03-01T10:00:07.000Z","message":{"id":"msg_x","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"No response requested."}],"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}
"#;

#[test]
fn a_claude_code_file_bills_every_response_once_off_the_branch_too() {
    let s = import_text(CLAUDE_BILLING, Format::ClaudeCode);
    // The history keeps the branch: msg_1 and msg_3.
    let on_branch: Vec<Option<&str>> = s
        .inferences
        .iter()
        .map(|inference| inference.response_id.as_deref())
        .collect();
    assert_eq!(on_branch, [Some("msg_1"), Some("msg_3")]);
    // The bill holds every response sent, once each, with the last line's
    // usage of msg_1.
    let opus = |input, read, write, long, output| {
        (
            "claude-opus-4-7".to_owned(),
            input,
            read,
            write,
            long,
            output,
        )
    };
    assert_eq!(
        billed(&s),
        [
            opus(3, 1_000, 100, 80, 40),
            ("claude-haiku-4-5".to_owned(), 50, 0, 0, 0, 10),
            opus(7, 2_000, 0, 0, 9),
            opus(11, 3_000, 0, 0, 13),
        ]
    );
    assert_eq!(
        s.stats.billed[0].timestamp.as_deref(),
        Some("2026-03-01T10:00:01.000Z")
    );
}

// ---------------------------------------------------------------------------
// Issue 34 (WALK-41 #6): `soba replay` reads SOBA's own session logs.

/// A SOBA log is read for replay as the path it holds before any
/// compaction: messages, checkpoints and model changes in path order, one
/// inference per assistant message; hygiene and capsules left out with a
/// diagnostic; and every answer of the file billed, the branch a rewind
/// left included. `soba import` still refuses it.
#[test]
fn a_soba_log_is_read_for_replay_as_its_path_with_every_answer_billed() {
    use soba_core::tokens::BpeCounter;
    use soba_core::{CheckpointKind, Encoding, TokenCount, Usage};
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s.jsonl");
    let counter = BpeCounter::new(Encoding::O200kBase);
    let mut writer = soba_store::SessionWriter::create(
        &path,
        &crate::support::header("s1"),
        crate::support::options(4),
    )
    .expect("a new session file");
    let usage = |input: u64| Usage {
        input,
        output: 7,
        ..Usage::default()
    };
    let answer = |text: &str, input: u64| {
        let mut message = Message::assistant(text);
        message.usage = Some(usage(input));
        message.model = Some("openai/gpt-5.4".to_owned());
        message
    };
    let append = |writer: &mut soba_store::SessionWriter, message: Message| {
        writer
            .append_message(message, &counter, TokenCount::new(1_000))
            .expect("appended")
    };
    writer
        .append(EntryBody::ModelChange {
            model: "openai/gpt-5.4".to_owned(),
        })
        .expect("appended");
    let task = append(&mut writer, Message::user("Fix the parser."));
    append(&mut writer, answer("First try.", 100));
    // The user rewinds to the task and asks again: the first answer was
    // billed, but is not on the path.
    writer.rewind(task.id.clone()).expect("rewound");
    append(&mut writer, answer("Second try.", 110));
    writer
        .append(EntryBody::Checkpoint {
            kind: CheckpointKind::Milestone,
            note: "parser fixed".to_owned(),
        })
        .expect("appended");
    let second = append(&mut writer, Message::user("Now the docs."));
    writer
        .append(EntryBody::Hygiene {
            pruned_through: second.id.clone(),
            reclaimed_tokens: TokenCount::new(3),
            stubbed_calls: Some(Vec::new()),
        })
        .expect("appended");
    append(&mut writer, answer("Docs done.", 130));
    drop(writer);

    let err = import_path(&path).expect_err("import refuses a SOBA log");
    assert!(err.to_string().contains("already a soba session"), "{err}");
    let mut sessions = soba_store::import::replay_path(&path).expect("replay reads it");
    assert_eq!(sessions.len(), 1);
    let session = sessions.remove(0);
    assert_eq!(session.format, Format::Soba);
    assert_eq!(
        session.original_id,
        crate::support::header("s1").id.to_string()
    );
    assert_eq!(session.cwd.as_deref(), Some("/work/project"));
    assert_eq!(session.model.as_deref(), Some("openai/gpt-5.4"));
    let kinds: Vec<String> = session
        .entries
        .iter()
        .map(|entry| match &entry.body {
            EntryBody::Message(m) => format!("{:?}:{}", m.message.role, m.message.text()),
            other => other.type_name().to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "model_change",
            "User:Fix the parser.",
            "Assistant:Second try.",
            "checkpoint",
            "User:Now the docs.",
            "Assistant:Docs done."
        ]
    );
    let answered: Vec<(usize, Option<u64>)> = session
        .inferences
        .iter()
        .map(|inference| (inference.first_entry, inference.usage.map(|u| u.input)))
        .collect();
    assert_eq!(answered, [(2, Some(110)), (5, Some(130))]);
    let billed: Vec<u64> = session.stats.billed.iter().map(|b| b.usage.input).collect();
    assert_eq!(billed, [100, 110, 130], "the rewound answer was billed too");
    assert!(
        session
            .stats
            .diagnostics
            .iter()
            .any(|note| note
                .starts_with("0 capsule(s) and 1 hygiene pass(es) of the log are left out")),
        "{:?}",
        session.stats.diagnostics
    );
    // Each entry is the parent of the next, as every importer gives them.
    for pair in session.entries.windows(2) {
        assert_eq!(pair[1].parent_id.as_ref(), Some(&pair[0].id));
    }
}

/// The attack on replaying SOBA logs (issue 34): a line written twice is
/// one answer, a usage of 2^64 − 1 tokens is not billed (nor summed into an
/// overflow), and what was left out is said.
#[test]
fn a_soba_logs_repeated_lines_and_absurd_usage_are_not_billed() {
    use soba_core::tokens::BpeCounter;
    use soba_core::{Encoding, TokenCount, Usage};
    use std::io::Write;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s.jsonl");
    let counter = BpeCounter::new(Encoding::O200kBase);
    let mut writer = soba_store::SessionWriter::create(
        &path,
        &crate::support::header("s1"),
        crate::support::options(5),
    )
    .expect("a new session file");
    writer
        .append_message(Message::user("Fix it."), &counter, TokenCount::new(1_000))
        .expect("appended");
    let mut answer = Message::assistant("Fixed.");
    answer.usage = Some(Usage {
        input: 100,
        output: 5,
        ..Usage::default()
    });
    writer
        .append_message(answer, &counter, TokenCount::new(1_000))
        .expect("appended");
    drop(writer);
    let text = std::fs::read_to_string(&path).expect("readable");
    let answer_line = text.lines().last().expect("a line").to_owned();
    let absurd = answer_line
        .replace("\"input\":100", &format!("\"input\":{}", u64::MAX))
        .replace("\"id\":\"e_0", "\"id\":\"e_f");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("opens");
    writeln!(file, "{answer_line}\n{absurd}").expect("written");
    drop(file);

    let session = soba_store::import::replay_path(&path)
        .expect("replay reads it")
        .remove(0);
    let billed: Vec<u64> = session.stats.billed.iter().map(|b| b.usage.input).collect();
    assert_eq!(billed, [100], "each id once, the absurd one not at all");
    assert!(
        session.stats.diagnostics.iter().any(|note| note
            == "1 answer(s) record an implausible usage (a figure over 10^12 tokens): not counted"),
        "{:?}",
        session.stats.diagnostics
    );
    assert!(
        session
            .inferences
            .iter()
            .all(|inference| inference.usage.is_none_or(|usage| usage.input == 100))
    );
}
