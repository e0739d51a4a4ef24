//! Helpers shared by the binary tests: a sandbox with its own `SOBA_HOME`,
//! workspace and an empty environment (never the real one), synthetic
//! transcripts, and the shared traces folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A temporary `SOBA_HOME` plus a workspace, for running the binary.
pub struct Sandbox {
    _dir: tempfile::TempDir,
    /// `SOBA_HOME`.
    pub home: PathBuf,
    /// The workspace root (canonical).
    pub ws: PathBuf,
    /// Extra environment variables for every command.
    pub env: Vec<(String, String)>,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        let home = root.join("home");
        let ws = root.join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        Sandbox {
            _dir: dir,
            home,
            ws,
            env: Vec::new(),
        }
    }

    /// Returns the binary with a clean environment: `SOBA_HOME`, `HOME`
    /// and `PATH` only (plus [`Sandbox::env`]), run in the workspace.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_soba"));
        command
            .env_clear()
            .env("SOBA_HOME", &self.home)
            .env("HOME", self.home.parent().unwrap())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&self.ws)
            .args(args);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("the soba binary runs")
    }

    /// Runs with a deadline: fails the test (killing the process) instead of
    /// hanging when soba does not exit within `seconds`. stdin is a pipe
    /// held open and never written, so a read of `/dev/stdin` would block.
    pub fn run_within(&self, seconds: u64, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the soba binary runs");
        let _stdin = child.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        while child
            .try_wait()
            .expect("the child can be waited for")
            .is_none()
        {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("soba {args:?} did not finish within {seconds} s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().expect("the output is collected")
    }

    /// Runs and asserts the exit code, printing both streams on failure.
    pub fn run_ok(&self, args: &[&str]) -> Output {
        let output = self.run(args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "soba {args:?}\nstdout: {}\nstderr: {}",
            text(&output.stdout),
            text(&output.stderr)
        );
        output
    }

    pub fn write_user_config(&self, config: &Value) {
        std::fs::write(
            self.home.join("config.json"),
            serde_json::to_string_pretty(config).unwrap(),
        )
        .unwrap();
    }

    pub fn write_project_config(&self, config: &Value) {
        let dir = self.ws.join(".soba");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.json"),
            serde_json::to_string_pretty(config).unwrap(),
        )
        .unwrap();
    }

    /// Returns `$SOBA_HOME/sessions/<project-slug>`.
    pub fn sessions_dir(&self) -> PathBuf {
        self.home
            .join("sessions")
            .join(soba_workspace::paths::project_slug(&self.ws))
    }

    /// Returns the session logs, sorted.
    pub fn session_files(&self) -> Vec<PathBuf> {
        let Ok(read_dir) = std::fs::read_dir(self.sessions_dir()) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = read_dir
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                name.ends_with(".jsonl") && !name.ends_with(".flight.jsonl")
            })
            .collect();
        files.sort();
        files
    }

    /// Writes a file in the workspace and returns its path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("soba prints UTF-8")
}

/// Returns the last non-empty line.
pub fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// Returns `shared/traces/raw`, or `None` (printing why) when it is absent.
pub fn raw_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/raw");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipped: ../shared/traces not found");
        None
    }
}

/// A small pi v1 session: 4 message records (a user message, an assistant
/// message with two tool calls, one result, a closing assistant message),
/// one malformed line. Usage: input 10+5, output 20+7, cacheRead 100+300,
/// cacheWrite 50; prompts 160 and 305.
pub fn pi_session(user_text: &str) -> String {
    let lines = [
        serde_json::json!({"type":"session","id":"pi-sess-1","timestamp":"2025-02-01T10:00:00.000Z","cwd":"/work/app","provider":"anthropic","modelId":"claude-sonnet-4-5","thinkingLevel":"off"}),
        serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:01.000Z","message":{"role":"user","content":user_text,"timestamp":1}}),
        serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Reading the code."},{"type":"toolCall","id":"toolu_1","name":"read","arguments":{"path":"src/main.rs"}},{"type":"toolCall","id":"toolu_2","name":"bash","arguments":{"command":"cargo test"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":10,"output":20,"cacheRead":100,"cacheWrite":50},"stopReason":"toolUse","timestamp":2}}),
        serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:03.000Z","message":{"role":"toolResult","toolCallId":"toolu_1","toolName":"read","content":[{"type":"text","text":"fn main() { println!(\"hi\"); }"}],"isError":false,"timestamp":3}}),
        serde_json::json!({"type":"message","timestamp":"2025-02-01T10:00:04.000Z","message":{"role":"assistant","content":[{"type":"text","text":"The code prints hi; nothing to fix."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":5,"output":7,"cacheRead":300,"cacheWrite":0},"stopReason":"stop","timestamp":4}}),
    ];
    let mut out: Vec<String> = lines.iter().map(Value::to_string).collect();
    out.insert(3, "{this line is not json".to_owned());
    out.join("\n") + "\n"
}

/// A long pi session: `turns` user turns of `words` words each, each
/// answered by a text-only assistant message.
pub fn long_pi_session(turns: usize, words: usize, secret: &str) -> String {
    let mut lines = vec![serde_json::json!({"type":"session","id":"pi-long","timestamp":"2025-02-01T10:00:00.000Z","cwd":"/work/app","provider":"anthropic","modelId":"claude-sonnet-4-5","thinkingLevel":"off"}).to_string()];
    for turn in 0..turns {
        let body: Vec<String> = (0..words).map(|i| format!("w{turn}x{i}")).collect();
        let user = if turn == 0 {
            format!(
                "Build the parser. Credentials: {secret}. {}",
                body.join(" ")
            )
        } else {
            format!("Turn {turn}: {}", body.join(" "))
        };
        lines.push(serde_json::json!({"type":"message","timestamp":format!("2025-02-01T10:{:02}:01.000Z", turn % 60),"message":{"role":"user","content":user,"timestamp":1}}).to_string());
        lines.push(serde_json::json!({"type":"message","timestamp":format!("2025-02-01T10:{:02}:02.000Z", turn % 60),"message":{"role":"assistant","content":[{"type":"text","text":format!("Done with turn {turn}.")}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0},"stopReason":"stop","timestamp":2}}).to_string());
    }
    lines.join("\n") + "\n"
}

/// Rewrites the session log at `log` so that its second entry's id shares
/// its first six random hex digits with the first entry's (every mention of
/// the id rewritten alike), as ids minted close together may: the
/// session's short ids then need seven digits, not the minimum four.
pub fn crowd_entry_ids(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap();
    let ids: Vec<String> = text
        .lines()
        .skip(1)
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|value| value["id"].as_str().map(str::to_owned))
        .take(2)
        .collect();
    let (first, second) = (&ids[0], &ids[1]);
    let (prefix, hex) = second.split_at(second.find('_').unwrap() + 1);
    let first_hex = &first[first.find('_').unwrap() + 1..];
    // The random digits start after the 48-bit time and the version digit.
    let crowded = format!("{prefix}{}{}{}", &hex[..13], &first_hex[13..19], &hex[19..]);
    std::fs::write(log, text.replace(second.as_str(), &crowded)).unwrap();
}
