//! Files soba did not write that are not regular files (issue 13, class 4)
//! and writes at chosen paths that links could redirect (class 6): every
//! entry point refuses a FIFO, `/dev/zero` and `/dev/stdin` behind a
//! symlink, a directory and an oversized file promptly, with a message
//! naming the path and its kind; exports never follow links out of the
//! workspace.

use std::path::{Path, PathBuf};

use crate::support::{Sandbox, long_pi_session, pi_session, text};

/// The longest any of these commands may take: a hang fails the test.
const DEADLINE_S: u64 = 20;

/// Something that is not a readable regular file.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    Fifo,
    DevZero,
    DevStdin,
    Directory,
    /// A sparse regular file of this many bytes.
    Oversized(u64),
}

impl Hostile {
    /// Creates it at `path` (its folder created).
    fn make(self, path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        match self {
            Hostile::Fifo => {
                let status = std::process::Command::new("mkfifo")
                    .arg(path)
                    .status()
                    .unwrap();
                assert!(status.success());
            }
            Hostile::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
            Hostile::DevStdin => std::os::unix::fs::symlink("/dev/stdin", path).unwrap(),
            Hostile::Directory => std::fs::create_dir_all(path).unwrap(),
            Hostile::Oversized(bytes) => {
                std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
            }
        }
    }

    /// The message soba gives for it at `path`, past `error: ` (for
    /// `Oversized`, the size limit is named by the caller).
    fn refusal(self, path: &Path) -> String {
        let kind = match self {
            Hostile::Fifo => "a FIFO (named pipe)",
            Hostile::DevZero => "a character device",
            // The test's stdin is a pipe (`run_within`).
            Hostile::DevStdin => "a FIFO (named pipe)",
            Hostile::Directory => "a directory",
            Hostile::Oversized(_) => unreachable!("no kind for a regular file"),
        };
        format!(
            "{} is {kind}, not a regular file: soba reads only regular files here; copy the content into a file and use that",
            path.display()
        )
    }
}

const SPECIAL: [Hostile; 4] = [
    Hostile::Fifo,
    Hostile::DevZero,
    Hostile::DevStdin,
    Hostile::Directory,
];

/// Runs `args` with the deadline and returns (exit code, stderr).
fn run(sandbox: &Sandbox, args: &[&str]) -> (Option<i32>, String) {
    let output = sandbox.run_within(DEADLINE_S, args);
    (output.status.code(), text(&output.stderr))
}

/// Removes whatever is at `path` (a link is removed, not followed).
fn fresh(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
}

#[test]
fn import_and_replay_refuse_special_files_promptly() {
    let sandbox = Sandbox::new();
    let path = sandbox.ws.join("trace.jsonl");
    for hostile in [Hostile::Fifo, Hostile::DevZero, Hostile::DevStdin] {
        fresh(&path);
        hostile.make(&path);
        for command in ["import", "replay"] {
            let (code, stderr) = run(&sandbox, &[command, path.to_str().unwrap()]);
            assert_eq!(code, Some(1), "{command} {hostile:?}: {stderr}");
            let expected = hostile.refusal(&path);
            assert!(
                stderr.contains(&expected),
                "{command} {hostile:?}: {stderr}"
            );
        }
    }
    fresh(&path);
    Hostile::Oversized((1 << 30) + 1).make(&path);
    for command in ["import", "replay"] {
        let (code, stderr) = run(&sandbox, &[command, path.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{} is larger than 1 GiB, the most soba reads here: use a smaller file",
                path.display()
            )),
            "{command}: {stderr}"
        );
    }
    // A folder of special files imports nothing, at once, and names each.
    let folder = sandbox.ws.join("traces");
    Hostile::Fifo.make(&folder.join("a.jsonl"));
    Hostile::DevZero.make(&folder.join("b.jsonl"));
    let (code, stderr) = run(&sandbox, &["import", folder.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    let hint = "hint: supported formats: pi-v1, pi-v3, swe-agent-1, swe-agent-0, openhands, gemini-cli, claude-code-openai-chat, codex-messages-meta, gemini-cli-jsonl, claude-code, codex-rollout, opencode, opencode-storage, opencode-db";
    assert_eq!(
        stderr,
        format!(
            "{dir}/a.jsonl: skipped: a FIFO (named pipe), not a regular file (only regular files are imported)\n\
             {dir}/b.jsonl: skipped: a link to a character device, not a regular file (only regular files are imported)\n\
             error: no importable transcript in {dir} (2 files skipped, see above)\n{hint}\n",
            dir = folder.display()
        )
    );
}

#[test]
fn a_folder_import_names_every_special_file_it_skips() {
    let sandbox = Sandbox::new();
    let folder = sandbox.ws.join("in");
    Hostile::Fifo.make(&folder.join("a.jsonl"));
    sandbox.write("in/b.jsonl", &pi_session("hello"));
    Hostile::DevZero.make(&folder.join("c.jsonl"));
    std::os::unix::fs::symlink(sandbox.ws.join("nowhere"), folder.join("d.jsonl")).unwrap();
    std::os::unix::fs::symlink(&sandbox.ws, folder.join("e")).unwrap();
    let output = sandbox.run_within(DEADLINE_S, &["import", "in"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr,
        "in/a.jsonl: skipped: a FIFO (named pipe), not a regular file (only regular files are imported)\n\
         in/c.jsonl: skipped: a link to a character device, not a regular file (only regular files are imported)\n\
         in/d.jsonl: skipped: a link whose target does not exist\n\
         in/e: skipped: a link to a folder (the walk does not follow linked folders)\n\
         4 files skipped (see above)\n"
    );
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("in/b.jsonl (pi-v1"), "{stdout}");
    assert!(stdout.contains("\n1 of 1 sessions written to "), "{stdout}");
}

#[test]
fn capsule_load_refuses_special_files_promptly() {
    let sandbox = Sandbox::new();
    let path = sandbox.ws.join("in.capsule.md");
    for hostile in SPECIAL {
        fresh(&path);
        hostile.make(&path);
        let (code, stderr) = run(&sandbox, &["capsule", "load", "in.capsule.md"]);
        assert_eq!(code, Some(1), "{hostile:?}: {stderr}");
        // A workspace file is read beneath the workspace root: a link to a
        // device leads outside it and is refused as such.
        let why = match hostile {
            Hostile::Fifo | Hostile::Directory => format!(
                "`in.capsule.md` is {}, not a regular file: soba reads only regular files here; put the content in a regular file",
                if matches!(hostile, Hostile::Fifo) {
                    "a FIFO (named pipe)"
                } else {
                    "a directory"
                }
            ),
            _ => {
                // `/dev/stdin` leads to a pipe no path names: "dangling".
                assert!(
                    stderr.contains("symlink")
                        && stderr.contains("replace the link with a copy of the file"),
                    "{hostile:?}: {stderr}"
                );
                continue;
            }
        };
        assert_eq!(
            stderr,
            format!(
                "error: cannot load {}: {why}\nhint: a capsule file is a regular `.capsule.md` file\n",
                path.display()
            ),
            "{hostile:?}"
        );
    }
    fresh(&path);
    Hostile::Oversized((1 << 20) + 1).make(&path);
    let (code, stderr) = run(&sandbox, &["capsule", "load", "in.capsule.md"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "error: cannot load {}: capsule file is 1048577 bytes, over the 1048576-byte limit: shorten it\n",
            path.display()
        )
    );
}

#[test]
fn config_files_must_be_regular_files() {
    for project in [false, true] {
        let sandbox = Sandbox::new();
        let path = if project {
            sandbox.ws.join(".soba/config.json")
        } else {
            sandbox.home.join("config.json")
        };
        for hostile in SPECIAL {
            fresh(&path);
            hostile.make(&path);
            let (code, stderr) = run(&sandbox, &["config", "show"]);
            assert_eq!(code, Some(1), "{hostile:?}: {stderr}");
            assert_eq!(
                stderr,
                format!(
                    "error: {}\nhint: a config file must be a regular JSON file: replace {} with one, or remove it\n",
                    hostile.refusal(&path),
                    path.display()
                ),
                "project {project}, {hostile:?}"
            );
        }
        fresh(&path);
        Hostile::Oversized((1 << 20) + 1).make(&path);
        let (code, stderr) = run(&sandbox, &["config", "show"]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr
                == format!(
                    "error: {} is larger than 1 MiB, the most soba reads here: use a smaller file\nhint: a config file holds a few settings: shorten {}\n",
                    path.display(),
                    path.display()
                ),
            "{stderr}"
        );
        // A dangling link is a missing file, as before.
        fresh(&path);
        std::os::unix::fs::symlink(sandbox.ws.join("nowhere.json"), &path).unwrap();
        let (code, stderr) = run(&sandbox, &["config", "show"]);
        assert_eq!(code, Some(0), "{stderr}");
    }
}

#[test]
fn a_session_path_that_is_a_fifo_is_not_opened() {
    let sandbox = Sandbox::new();
    let path = sandbox.ws.join("x.jsonl");
    Hostile::Fifo.make(&path);
    let (code, stderr) = run(&sandbox, &["show", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("x.jsonl is a FIFO (named pipe), not a session file"),
        "{stderr}"
    );
}

/// The attack of session 23: one FIFO among the flight records made
/// `soba stats` fail for every session; it is skipped with a warning.
#[test]
fn stats_skips_a_flight_record_that_is_not_a_file() {
    let sandbox = Sandbox::new();
    compacted_session(&sandbox);
    let planted = sandbox
        .sessions_dir()
        .join("0194c2d0-e4c0-7000-8000-000000000009.flight.jsonl");
    Hostile::Fifo.make(&planted);
    let output = sandbox.run_within(DEADLINE_S, &["stats"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("warning: skipped {}", planted.display()))
            && stderr.contains("FIFO"),
        "{stderr}"
    );
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("in 1 session (1 unreadable file skipped)"),
        "{stdout}"
    );
}

/// Imports a session, compacts it and returns (session id, ck short id).
fn compacted_session(sandbox: &Sandbox) -> (String, String) {
    let file = sandbox.write("trace.jsonl", &long_pi_session(6, 600, "none"));
    let output = sandbox.run_ok(&["import", file.to_str().unwrap(), "--json"]);
    let reports: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let id = reports[0]["sessionId"].as_str().unwrap().to_owned();
    let compacted = text(
        &sandbox
            .run_ok(&[
                "compact",
                "--session",
                &id,
                "--model",
                "anthropic/claude-sonnet-4-5",
                "--set",
                "compaction.keepRecentTokens=256",
            ])
            .stdout,
    );
    let ck = compacted
        .lines()
        .next()
        .unwrap()
        .split(" · ")
        .find(|part| part.starts_with("ck_"))
        .unwrap()
        .trim()
        .to_owned();
    (id, ck)
}

/// Returns the files in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn capsule_export_never_writes_through_links() {
    let sandbox = Sandbox::new();
    let (id, ck) = compacted_session(&sandbox);
    let outside = tempfile::tempdir().unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    let export = |path: &str, force: bool| {
        let mut args = vec!["capsule", "export", &ck, path, "--session", &id];
        if force {
            args.push("--force");
        }
        run(&sandbox, &args)
    };
    // A symlinked folder.
    std::os::unix::fs::symlink(&outside, sandbox.ws.join("out")).unwrap();
    for given in ["out/a.capsule.md", "out/new/a.capsule.md"] {
        let (code, stderr) = export(given, false);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: {} leads outside the workspace {} through a symbolic link (to {})\nhint: give a path inside the workspace, or an absolute path to write elsewhere\n",
                sandbox.ws.join(given).display(),
                sandbox.ws.display(),
                outside.display()
            )
        );
    }
    // A dangling symlink as the file, with and without --force.
    let victim = outside.join("victim");
    std::os::unix::fs::symlink(&victim, sandbox.ws.join("dangling.capsule.md")).unwrap();
    for force in [false, true] {
        let (code, stderr) = export("dangling.capsule.md", force);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: {} is a symbolic link; soba does not write through links\nhint: remove the link or choose another path; soba never follows it\n",
                sandbox.ws.join("dangling.capsule.md").display()
            )
        );
    }
    // `..` climbing out.
    let (code, stderr) = export("../escape.capsule.md", false);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ../escape.capsule.md is outside the workspace"),
        "{stderr}"
    );
    assert_eq!(files_in(&outside), Vec::<PathBuf>::new());
    assert!(
        !sandbox
            .ws
            .parent()
            .unwrap()
            .join("escape.capsule.md")
            .exists()
    );
    // A plain relative export still works.
    let (code, stderr) = export("kept/a.capsule.md", false);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(sandbox.ws.join("kept/a.capsule.md").is_file());
}

#[test]
fn capsule_create_stays_in_the_workspace_and_names_files_from_the_redacted_title() {
    let sandbox = Sandbox::new();
    let (id, _) = compacted_session(&sandbox);
    let create = |title: &str| {
        run(
            &sandbox,
            &[
                "capsule",
                "create",
                title,
                "--session",
                &id,
                "--model",
                "anthropic/claude-sonnet-4-5",
            ],
        )
    };
    let (code, stderr) = create("Deploy key AKIAIOSFODNN7EXAMPLE rotated");
    assert_eq!(code, Some(0), "{stderr}");
    let files = files_in(&sandbox.ws.join(".soba/capsules"));
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_str().unwrap();
    assert!(
        name.ends_with("-deploy-key-redacted-aws-access-key-rotated.capsule.md"),
        "{name}"
    );
    assert!(!name.to_lowercase().contains("akia"), "{name}");
    // A cloned repository's `.soba/capsules` linked elsewhere is refused.
    std::fs::remove_dir_all(sandbox.ws.join(".soba/capsules")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), sandbox.ws.join(".soba/capsules")).unwrap();
    let (code, stderr) = create("Second handoff");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("leads outside the workspace")
            && stderr.contains("through a symbolic link"),
        "{stderr}"
    );
    assert_eq!(files_in(outside.path()), Vec::<PathBuf>::new());
}

#[test]
fn replay_html_is_never_written_through_a_link() {
    let sandbox = Sandbox::new();
    let trace = sandbox.write("trace.jsonl", &pi_session("hello"));
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.html");
    std::os::unix::fs::symlink(&victim, sandbox.ws.join("report.html")).unwrap();
    let (code, stderr) = run(
        &sandbox,
        &["replay", trace.to_str().unwrap(), "--html", "report.html"],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("report.html is a symbolic link; soba does not write through links"),
        "{stderr}"
    );
    assert!(!victim.exists());
}
