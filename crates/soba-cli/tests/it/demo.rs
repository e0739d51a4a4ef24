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
    // The kept log opens cleanly and holds the capsules the timeline names.
    let sessions: Vec<_> = std::fs::read_dir(dir.join("sessions"))
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
}
