//! `soba demo` (the README's first command): the whole engine offline on
//! the generated session, crossing hygieneLimit and autoLimit.

use std::process::Command;

#[test]
fn demo_runs_the_engine_and_prints_the_timeline() {
    let keep = tempfile::tempdir().unwrap();
    let dir = keep.path().join("demo");
    let output = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["demo", "--keep"])
        .arg(&dir)
        .env("SOBA_HOME", keep.path().join("home"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(
            "hardLimit 159,808 · autoLimit 80,000 · hygieneLimit 50,000 · keepRecent 20,000"
        ),
        "{stdout}"
    );
    // Every hygiene pass is named; the working-set trigger and the intents fire.
    assert!(stdout.contains("hygiene: "), "{stdout}");
    assert!(stdout.contains("Compacted (auto_threshold): "), "{stdout}");
    assert!(
        stdout.contains("Compacted (milestone): ")
            || stdout.contains("Compacted (turn_complete): ")
    );
    assert!(stdout.contains("result: 37 turns, 0 failed"), "{stdout}");
    // Issue 36: it says what it shows before it runs, explains its words
    // once, says what each capsule kept and how to look at the result.
    assert!(
        stdout.contains("compacts the conversation into a capsule, and what the capsule kept."),
        "{stdout}"
    );
    assert!(stdout.contains("· softGate 32,000\nlegend:\n"), "{stdout}");
    for word in [
        "effective",
        "hygiene",
        "turn_complete",
        "read_cost",
        "auto_threshold",
    ] {
        assert!(
            stdout.contains(&format!("\n  {word} ")) || stdout.contains(&format!("\n    {word} ")),
            "{word}: {stdout}"
        );
    }
    assert_eq!(
        stdout
            .matches("\n          kept: the original task · ")
            .count(),
        stdout.matches("Compacted (").count(),
        "{stdout}"
    );
    let workspace = std::fs::canonicalize(dir.join("workspace")).unwrap();
    let tail: Vec<&str> = stdout.lines().rev().take(4).collect();
    assert_eq!(
        tail[3],
        "look at it from its workspace, where soba finds the session by itself:"
    );
    assert_eq!(tail[2], format!("  cd {}", dir.join("workspace").display()));
    assert!(
        tail[1].starts_with("  soba sessions · soba show · "),
        "{stdout}"
    );
    // The kept session is in the workspace's default sessions folder.
    let sessions_dir = keep
        .path()
        .join("home/sessions")
        .join(soba_workspace::paths::project_slug(&workspace));
    // The kept log opens cleanly and holds the capsules the timeline names.
    let sessions: Vec<_> = std::fs::read_dir(&sessions_dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "jsonl")
                && !path.to_string_lossy().ends_with(".flight.jsonl")
        })
        .collect();
    assert_eq!(sessions.len(), 1);
    let log = soba_store::reader::read_log(&sessions[0]).unwrap();
    assert!(log.diagnostics().is_empty());
    let capsules = log
        .entries()
        .iter()
        .filter(|logged| logged.entry.body.type_name() == "capsule")
        .count();
    let completed = stdout.matches("Compacted (").count();
    assert_eq!(capsules, completed);
    // Issue 36 item 8: every capsule id is printed with the length that
    // makes it unique in the session (what `soba show` uses), once each
    // in the timeline and the newest once more, spelled the same.
    let short = soba_core::id::shortest_unique_len(log.entries().iter().map(|l| &l.entry.id));
    let mut newest = None;
    for logged in log.entries() {
        if matches!(logged.entry.body, soba_core::EntryBody::Capsule(_)) {
            let shown = logged.entry.id.short_with(short);
            assert_eq!(
                stdout.matches(&format!("· {shown}\n")).count(),
                1,
                "{shown}: {stdout}"
            );
            newest = Some(shown);
        }
    }
    let newest = newest.unwrap();
    assert!(
        stdout.contains(&format!(
            "\nnewest capsule {newest} kept: the original task · "
        )),
        "{stdout}"
    );
    // The counts match what the capsule lists: 8 milestones under
    // Checkpoints and the pivot under Decisions (the walk read "9
    // checkpoints" over a list of 8), and the answers it carries.
    let newest_line = stdout
        .lines()
        .find(|line| line.starts_with("newest capsule "))
        .unwrap();
    assert!(
        newest_line.contains(" · 4 answers · 8 milestones · 1 plan pivot · 10 plan steps · "),
        "{newest_line}"
    );
    let capsule = log
        .entries()
        .iter()
        .rev()
        .find_map(|logged| match &logged.entry.body {
            soba_core::EntryBody::Capsule(capsule) => Some(capsule.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(capsule.markdown.matches("\n- milestone: ").count(), 8);
    assert_eq!(capsule.markdown.matches("\n### to ").count(), 4);
    assert!(
        tail[0].starts_with(&format!("  soba capsule export {newest} ")),
        "{stdout}"
    );
    // Every capsule records the session's verification command, and each
    // records every checkpoint summarized before its boundary: they hold
    // more and more of the session's checkpoints, most of them in the end.
    let mut checkpoints_seen = 0;
    let mut recorded = Vec::new();
    for logged in log.entries() {
        match &logged.entry.body {
            soba_core::EntryBody::Checkpoint { .. } => checkpoints_seen += 1,
            soba_core::EntryBody::Capsule(capsule) => {
                assert!(
                    capsule
                        .local
                        .verification
                        .iter()
                        .any(|v| v.command == "sh run_tests.sh"),
                    "{}",
                    capsule.markdown
                );
                recorded.push((capsule.local.checkpoints.len(), checkpoints_seen));
            }
            _ => {}
        }
    }
    assert!(
        recorded.windows(2).all(|w| w[0].0 <= w[1].0),
        "{recorded:?}"
    );
    let (last, seen) = *recorded.last().unwrap();
    assert!(seen >= 8 && last + 2 >= seen, "{recorded:?}");
    // The latest instructions are not spent on "continue": only the newest
    // may be one (the scenario types it at every feature's second turn).
    for logged in log.entries() {
        if let soba_core::EntryBody::Capsule(capsule) = &logged.entry.body {
            let instructions = &capsule.local.latest_instructions;
            assert!(
                instructions
                    .iter()
                    .skip(1)
                    .all(|text| !soba_core::facts::is_go_on(text)),
                "{instructions:?}"
            );
        }
    }

    // The kept session works with the commands the guide names: the demo
    // model is known, and its capsules are built deterministically (the
    // demo model has no API).
    let soba = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_soba"))
            .args(args)
            .current_dir(dir.join("workspace"))
            .env("SOBA_HOME", keep.path().join("home"))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "soba {args:?}: {text}");
        text
    };
    let id = sessions[0]
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // Issue 36 item 2: the result line counts the skipped compactions
    // `soba stats` counts on the kept session, and names the ones that
    // would not pay off.
    let result = stdout
        .lines()
        .find(|line| line.starts_with("result: "))
        .unwrap();
    let stats: serde_json::Value = serde_json::from_str(&soba(&["stats", "--json"])).unwrap();
    let column = |outcome: &str| -> u64 {
        stats["byTrigger"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|counts| counts[outcome].as_u64())
            .sum()
    };
    let (records, _) = soba_store::flight::read_flight_records(
        sessions[0].with_file_name(format!("{id}.flight.jsonl")),
    )
    .unwrap();
    let not_paying = records
        .iter()
        .filter(|record| record.reason.as_deref() == Some("pre_roi"))
        .count() as u64;
    assert!(not_paying > 0 && column("skipped") > not_paying, "{result}");
    assert!(
        result.ends_with(&format!(
            " · {} compactions skipped ({not_paying} because they would not pay off, {} not due yet) · {} other barrier outcomes",
            column("skipped"),
            column("skipped") - not_paying,
            column("failed") + column("cancelled") + column("stale")
        )),
        "{result}"
    );
    assert_eq!(column("completed"), completed as u64, "{result}");
    let budget = soba(&["budget", "--session", &id]);
    assert!(budget.contains("159,808"), "{budget}");
    // From the kept workspace, with no flag: the session is found.
    let listed = soba(&["sessions"]);
    assert!(listed.contains(&id[..8]), "{listed}");
    let shown = soba(&["show"]);
    assert!(shown.contains(&format!("session   {id}")), "{shown}");
    assert_eq!(soba(&["budget"]), budget);
    let capsules = soba(&["capsule"]);
    assert!(
        capsules.contains(&format!("* {newest}  turn_complete"))
            || capsules.contains(&format!("* {newest}  ")),
        "{capsules}"
    );
    let created = soba(&["capsule", "create", "handoff"]);
    assert!(created.contains(".soba/capsules/"), "{created}");
    let compacted = soba(&["compact"]);
    assert!(compacted.contains("Compacted (user)"), "{compacted}");
}

/// The same seed gives the same session: two runs print the same token
/// counts (the temporary directory's name, which tool results quote, keeps
/// one token count whatever its digits).
#[test]
fn two_demo_runs_give_the_same_counts() {
    let home = tempfile::tempdir().unwrap();
    let strip = |text: &str| -> Vec<String> {
        text.lines()
            .map(|line| {
                line.split_whitespace()
                    .filter(|word| {
                        !word.starts_with("ck_")
                            && !word.contains("soba-demo-")
                            && !word.contains(".jsonl")
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let run = || {
        let output = Command::new(env!("CARGO_BIN_EXE_soba"))
            .arg("demo")
            .env("SOBA_HOME", home.path())
            .output()
            .unwrap();
        assert!(output.status.success());
        strip(&String::from_utf8_lossy(&output.stdout))
    };
    let (first, second) = (run(), run());
    assert!(first.iter().any(|line| line.contains("Compacted (")));
    assert_eq!(first, second);
}

/// Starts `soba demo` with its temporary directory under `tmp`, waits for
/// the line naming the directory, sends `signal` and returns the exit code.
fn demo_stopped_by(signal: &str, tmp: &std::path::Path) -> (Option<i32>, String) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_soba"))
        .arg("demo")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TMPDIR", tmp)
        .env("SOBA_HOME", tmp.join("../home"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("directory: ") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the demo ended before naming its directory"
        );
    }
    let dir = line["directory: ".len()..]
        .split(" (")
        .next()
        .unwrap()
        .to_owned();
    assert!(std::path::Path::new(&dir).starts_with(tmp), "{dir}");
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Drain stdout so the demo never blocks on a full pipe.
    std::io::copy(&mut stdout, &mut std::io::sink()).unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn sigterm_sigint_and_sighup_remove_the_temporary_directory() {
    for (signal, code, name) in [
        ("-TERM", 143, "terminated"),
        ("-INT", 130, "interrupted"),
        ("-HUP", 129, "hung up (its terminal was closed)"),
    ] {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let (exit, stderr) = demo_stopped_by(signal, &tmp);
        assert_eq!(exit, Some(code), "{signal}: {stderr}");
        assert_eq!(
            stderr,
            format!("error: soba demo {name}\nhint: the temporary directory was removed\n"),
            "{signal}"
        );
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
        assert!(left.is_empty(), "{signal}: left behind {left:?}");
    }
}
