//! The hostile-input campaign (`tests/hostile/`, issue 13): every case of
//! every class manifest runs against the real `soba` binary in its own
//! sandbox, with a timeout and a memory limit, and is judged by semantic
//! assertions (exit codes, what the output contains or must not contain,
//! no raw control bytes, files that must or must not exist, exported
//! capsules that must load again, follow-up commands). The test prints a
//! tally per class and every failure's reason, and fails when any case
//! fails; cases a machine cannot run (no tmpfs mount, no `setpriv`) are
//! reported as SKIPPED with the reason.
//!
//! `SOBA_BIN=/path/to/soba` runs the campaign against another binary,
//! `SOBA_HOSTILE_FILTER=text` runs only the cases whose name contains it,
//! `SOBA_HOSTILE_REPORT_ONLY=1` prints the tally without failing.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// The campaign's folder.
fn campaign_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/hostile")
}

/// The binary under test: `SOBA_BIN`, else the one cargo built.
fn binary() -> PathBuf {
    std::env::var_os("SOBA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_soba")))
}

const MODEL: &str = "anthropic/claude-sonnet-4-5";
const DEFAULT_TIMEOUT_MS: u64 = 15_000;
const DEFAULT_MEMORY_MB: u64 = 1_536;

/// One case's verdict.
#[derive(Debug)]
enum Verdict {
    Passed,
    Failed(String),
    Skipped(String),
}

/// One case with the manifest it came from.
struct Case {
    class: u64,
    name: String,
    spec: Value,
}

/// Reads every manifest in `tests/hostile/cases/`.
fn load_cases() -> (BTreeMap<u64, String>, Vec<Case>) {
    let dir = campaign_dir().join("cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/hostile/cases exists")
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    let mut titles = BTreeMap::new();
    let mut cases = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable manifest");
        let manifest: Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{}: not JSON: {err}", file.display()));
        let class = manifest["class"].as_u64().expect("a class number");
        titles.insert(
            class,
            manifest["title"].as_str().unwrap_or_default().to_owned(),
        );
        let defaults = manifest.get("defaults").cloned().unwrap_or(json!({}));
        for spec in manifest["cases"].as_array().expect("a cases array") {
            let mut merged = defaults.clone();
            merge(&mut merged, spec);
            let name = merged["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: a case without a name", file.display()))
                .to_owned();
            cases.push(Case {
                class,
                name,
                spec: merged,
            });
        }
    }
    (titles, cases)
}

/// Deep-merges `patch` into `base`: objects key by key, anything else
/// replaced; a `null` in the patch removes the key.
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    base.remove(key);
                } else if let Some(slot) = base.get_mut(key) {
                    merge(slot, value);
                } else {
                    base.insert(key.clone(), value.clone());
                }
            }
        }
        (base, patch) => *base = patch.clone(),
    }
}

/// Like [`merge`] but keeps explicit `null`s (for entry fields).
fn merge_keep_null(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                if let Some(slot) = base.get_mut(key) {
                    merge_keep_null(slot, value);
                } else {
                    base.insert(key.clone(), value.clone());
                }
            }
        }
        (base, patch) => *base = patch.clone(),
    }
}

/// A case's sandbox: `root/` with `home/` (SOBA_HOME), `ws/` (the
/// workspace), `outside/` and `tmp/` (TMPDIR).
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    vars: BTreeMap<String, String>,
    mounts: Vec<PathBuf>,
    run_as_nobody: bool,
    /// The first session the case built, for `loads` checks.
    first_session: Option<String>,
    /// Processes a `holdLock` step started, ended with the case.
    holders: Vec<std::process::Child>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for holder in &mut self.holders {
            let _ = holder.kill();
            let _ = holder.wait();
        }
        for mount in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(mount).status();
        }
    }
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("soba-hostile-")
            .tempdir()
            .expect("a temporary directory");
        let root = std::fs::canonicalize(dir.path()).expect("a canonical root");
        for sub in ["home", "ws", "outside", "tmp"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let ws = root.join("ws");
        let sessions = root
            .join("home/sessions")
            .join(soba_workspace::paths::project_slug(&ws));
        let mut vars = BTreeMap::new();
        vars.insert("root".to_owned(), root.display().to_string());
        vars.insert("ws".to_owned(), ws.display().to_string());
        vars.insert("home".to_owned(), root.join("home").display().to_string());
        vars.insert("sessions".to_owned(), sessions.display().to_string());
        vars.insert("model".to_owned(), MODEL.to_owned());
        let today: String = jiff::Timestamp::now()
            .to_string()
            .chars()
            .take(10)
            .collect();
        vars.insert("today".to_owned(), today);
        Sandbox {
            _dir: dir,
            root,
            vars,
            mounts: Vec::new(),
            run_as_nobody: false,
            first_session: None,
            holders: Vec::new(),
        }
    }

    /// Replaces `{name}` placeholders.
    fn expand(&self, text: &str) -> String {
        let mut out = text.to_owned();
        if !out.contains('{') {
            return out;
        }
        for (name, value) in &self.vars {
            out = out.replace(&format!("{{{name}}}"), value);
        }
        // `{file:rel}` inserts a file written by an earlier step (large
        // generated text inside a session entry).
        while let Some(start) = out.find("{file:") {
            let Some(len) = out[start..].find('}') else {
                break;
            };
            let rel = out[start + 6..start + len].to_owned();
            let body = std::fs::read_to_string(self.root.join(&rel)).unwrap_or_default();
            out.replace_range(start..start + len + 1, &body);
        }
        // `{only:dir}` is the one session log in a folder.
        while let Some(start) = out.find("{only:") {
            let Some(len) = out[start..].find('}') else {
                break;
            };
            let dir = self.root.join(&out[start + 6..start + len]);
            let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.to_string_lossy();
                    name.ends_with(".jsonl") && !name.ends_with(".flight.jsonl")
                })
                .collect();
            if logs.is_empty() {
                logs = std::fs::read_dir(&dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .collect();
            }
            logs.sort();
            let found = logs
                .first()
                .map_or_else(|| dir.join("NO-SESSION-LOG"), Clone::clone);
            out.replace_range(start..start + len + 1, &found.display().to_string());
        }
        out
    }

    /// Expands placeholders in every string of a JSON value.
    fn expand_value(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.expand(text)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.expand_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.expand_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A sandbox path: relative ones are under the root.
    fn path(&self, rel: &str) -> PathBuf {
        let expanded = self.expand(rel);
        let path = Path::new(&expanded);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        }
    }
}

/// Decodes a content spec: `text`, `hex`, `jsonl` (values serialised one a
/// line, strings verbatim) or `json`; `repeat` repeats it; `prefix` and
/// `suffix` wrap the repeated part.
fn content(sandbox: &Sandbox, step: &Value) -> Result<Vec<u8>, String> {
    let mut body: Vec<u8> = if let Some(text) = step.get("text").and_then(Value::as_str) {
        sandbox.expand(text).into_bytes()
    } else if let Some(hex) = step.get("hex").and_then(Value::as_str) {
        decode_hex(hex)?
    } else if let Some(lines) = step.get("jsonl").and_then(Value::as_array) {
        let mut out = String::new();
        for line in lines {
            match line {
                Value::String(raw) => out.push_str(&sandbox.expand(raw)),
                other => out.push_str(&sandbox.expand_value(other).to_string()),
            }
            out.push('\n');
        }
        out.into_bytes()
    } else if let Some(value) = step.get("json") {
        sandbox.expand_value(value).to_string().into_bytes()
    } else {
        Vec::new()
    };
    if let Some(n) = step.get("repeat").and_then(Value::as_u64) {
        body = body.repeat(n as usize);
    }
    let mut out = Vec::new();
    if let Some(prefix) = step.get("prefix").and_then(Value::as_str) {
        out.extend(sandbox.expand(prefix).into_bytes());
    }
    if let Some(hex) = step.get("prefixHex").and_then(Value::as_str) {
        out.extend(decode_hex(hex)?);
    }
    out.extend(body);
    if let Some(suffix) = step.get("suffix").and_then(Value::as_str) {
        out.extend(sandbox.expand(suffix).into_bytes());
    }
    Ok(out)
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd hex length in {hex:?}"));
    }
    digits
        .chunks(2)
        .map(|pair| {
            u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("zz"), 16)
                .map_err(|_| format!("bad hex {hex:?}"))
        })
        .collect()
}

/// The id of entry `n` (1-based) of session number `s`.
fn entry_id(s: usize, n: usize, capsule: bool) -> String {
    format!(
        "{}019a0000000070008{:03x}{:012x}",
        if capsule { "ck_" } else { "e_" },
        s,
        n
    )
}

fn session_uuid(s: usize) -> String {
    format!("019a0000-0000-7000-8000-{:012x}", 0xabc000 + s)
}

/// Builds a session log from shorthand entries (see the README) and
/// writes it into the sessions folder (or `path`).
fn build_session(sandbox: &mut Sandbox, step: &Value, index: usize) -> Result<(), String> {
    let name = step["session"].as_str().ok_or("session needs a name")?;
    let id = step
        .get("id")
        .and_then(Value::as_str)
        .map_or_else(|| session_uuid(index), str::to_owned);
    let entries = step
        .get("entries")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // First pass: ids, so later placeholders may name any entry.
    let mut ids = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let is_capsule = entry.get("capsule").is_some();
        let id = entry
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| entry_id(index, i + 1, is_capsule), str::to_owned);
        ids.push(id);
    }
    sandbox.vars.insert(format!("{name}.id"), id.clone());
    for (i, entry_id) in ids.iter().enumerate() {
        sandbox
            .vars
            .insert(format!("{name}.e{}", i + 1), entry_id.clone());
    }
    let dir = step
        .get("dir")
        .and_then(Value::as_str)
        .map_or_else(|| sandbox.path("{sessions}"), |d| sandbox.path(d));
    let path = dir.join(format!("{id}.jsonl"));
    sandbox
        .vars
        .insert(format!("{name}.path"), path.display().to_string());
    if sandbox.first_session.is_none() {
        sandbox.first_session = Some(id.clone());
    }
    let mut header = json!({"type":"session","schemaVersion":1,"id":id,"createdAt":"2025-01-01T00:00:00.000Z","cwd":sandbox.vars["ws"],"os":"linux","memory":[]});
    if let Some(patch) = step.get("header") {
        merge(&mut header, &sandbox.expand_value(patch));
    }
    let mut lines = vec![header.to_string()];
    let mut parent: Value = Value::Null;
    for (i, entry) in entries.iter().enumerate() {
        if let Some(raw) = entry.get("raw").and_then(Value::as_str) {
            lines.push(sandbox.expand(raw));
            continue;
        }
        let stamp = format!("2025-01-01T00:{:02}:{:02}.000Z", (i / 60) % 60, i % 60);
        let mut line =
            json!({"type": "message", "id": ids[i], "parentId": parent, "timestamp": stamp});
        let body = shorthand_body(entry)?;
        merge_keep_null(&mut line, &body);
        if let Some(p) = entry.get("parent") {
            line["parentId"] = sandbox.expand_value(p);
        }
        if let Some(patch) = entry.get("patch") {
            merge_keep_null(&mut line, &sandbox.expand_value(patch));
        }
        if let Some(drop) = entry.get("drop").and_then(Value::as_array) {
            for key in drop.iter().filter_map(Value::as_str) {
                if let Some(map) = line.as_object_mut() {
                    map.remove(key);
                }
            }
        }
        let line = sandbox.expand_value(&line);
        if line["type"] == "leaf" {
            parent = line["parentId"].clone();
            parent = line.get("targetId").cloned().unwrap_or(parent);
        } else {
            parent = Value::String(ids[i].clone());
        }
        lines.push(line.to_string());
    }
    let mut text = lines.join("\n");
    if !step.get("torn").and_then(Value::as_bool).unwrap_or(false) {
        text.push('\n');
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// The body of one shorthand entry.
fn shorthand_body(entry: &Value) -> Result<Value, String> {
    let text_block = |text: &Value| json!([{"type":"text","text":text}]);
    if let Some(text) = entry.get("user") {
        return Ok(json!({"role":"user","content":text_block(text)}));
    }
    if let Some(text) = entry.get("system") {
        return Ok(json!({"role":"system","content":text_block(text)}));
    }
    if let Some(text) = entry.get("assistant") {
        let mut content = if text.is_null() {
            vec![]
        } else {
            vec![json!({"type":"text","text":text})]
        };
        if let Some(calls) = entry.get("calls").and_then(Value::as_array) {
            for call in calls {
                content.push(json!({"type":"tool_use","id":call["id"],"name":call["name"],"input":call.get("input").cloned().unwrap_or(json!({}))}));
            }
        }
        return Ok(
            json!({"role":"assistant","content":content,"model":MODEL,"usage":{"input":100,"cacheRead":0,"cacheWrite":0,"output":20,"reasoning":0},"requestTokensLocal":80}),
        );
    }
    if let Some(result) = entry.get("result") {
        return Ok(
            json!({"role":"tool","content":[{"type":"tool_result","toolUseId":result["id"],"content":[{"type":"text","text":result["text"]}],"isError":result.get("isError").cloned().unwrap_or(json!(false))}]}),
        );
    }
    if let Some(model) = entry.get("modelChange") {
        return Ok(json!({"type":"model_change","model":model}));
    }
    if let Some(target) = entry.get("leaf") {
        return Ok(json!({"type":"leaf","targetId":target}));
    }
    if let Some(check) = entry.get("checkpoint") {
        return Ok(
            json!({"type":"checkpoint","kind":check.get("kind").cloned().unwrap_or(json!("milestone")),"note":check.get("note").cloned().unwrap_or(json!("done"))}),
        );
    }
    if let Some(context) = entry.get("context") {
        let text = context["text"].as_str().unwrap_or_default();
        use sha2::Digest;
        let sha: String = sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        return Ok(
            json!({"type":"context","source":context.get("source").cloned().unwrap_or(json!("capsule_file")),"path":context["path"],"sha256":sha,"text":text}),
        );
    }
    if let Some(capsule) = entry.get("capsule") {
        let mut body = json!({
            "type":"capsule","trigger":"user","quality":"full","firstKeptEntryId":null,
            "tokensBefore":40000,"tokensAfter":2000,"summarizer":"deterministic","previousCapsuleId":null,
            "state":{"model":MODEL,"calibration":{MODEL:1.25},"autoCompact":true,"skills":[],"pinned":{"agentsMd":null,"system":[]}},
            "narrative":{"goal":"Fix the parser.","constraints":"","done":"","inProgress":"","pending":"","decisions":"","blockers":"","nextSteps":""},
            "local":{"originalTask":"Fix the parser.","latestInstructions":[],"filesRead":[],"filesReadMore":0,"filesModified":[],"verification":[],"unresolvedErrors":[],"checkpoints":[],"activeSkills":[]},
            "markdown":"## Goal\nFix the parser.\n"
        });
        merge_keep_null(&mut body, capsule);
        return Ok(body);
    }
    if let Some(json) = entry.get("json") {
        return Ok(json.clone());
    }
    Err(format!("unknown shorthand entry {entry}"))
}

/// Probes once whether this machine can mount a tmpfs.
fn can_mount() -> Result<(), String> {
    static PROBE: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let mut probe = PROBE.lock().unwrap();
    probe
        .get_or_insert_with(|| {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
                .arg(dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                let _ = Command::new("umount").arg(dir.path()).status();
                Ok(())
            } else {
                Err("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)".to_owned())
            }
        })
        .clone()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Returns whether uid 65534 can execute the binary under test, asked once
/// (`setpriv … sh -c 'exec soba --version'`): a binary below a folder other users
/// cannot enter (a clone under `/root`, a `mktemp -d` of mode 700) cannot
/// run as nobody, so the cases that drop root are skipped with the reason
/// instead of failing on exit 126.
fn nobody_can_run() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(|| nobody_can_run_at(&binary())).clone()
}

/// Asks whether uid 65534 can execute `program` (see [`nobody_can_run`]).
fn nobody_can_run_at(program: &Path) -> Result<(), String> {
    // Through `sh`, as the cases run: setpriv itself keeps root's saved
    // uid and can still exec what uid 65534 cannot reach.
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["sh", "-c", "exec \"$0\" --version"])
        .arg(program)
        .stdin(Stdio::null())
        .output();
    match output {
        Err(err) => Err(format!("needs setpriv to drop root: {err}")),
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "uid 65534 cannot run {} (exit {}: {}): a folder above it is closed to other users; run the suite from a folder they can enter",
            program.display(),
            out.status
                .code()
                .map_or_else(|| "by a signal".to_owned(), |code| code.to_string()),
            shorten(&out.stderr)
        )),
    }
}

/// The suite run as root from a folder other users cannot enter (a clone
/// under `/root`, a `mktemp -d`) skips the cases that drop root, with the
/// reason, instead of failing them on exit 126; from an open folder it
/// runs them.
#[test]
fn cases_that_drop_root_are_skipped_when_the_binary_sits_in_a_closed_folder() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: only root drops to uid 65534 (this run is not root)");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs setpriv to drop root, and this machine has none");
        return;
    }
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let closed = open.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    for folder in [open.path(), &closed] {
        let program = folder.join("prog");
        std::fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    if let Err(reason) = nobody_can_run_at(&open.path().join("prog")) {
        // The temporary folder itself sits below a closed one: the case
        // cannot be set up here.
        eprintln!("skipped: uid 65534 cannot reach the temporary folder ({reason})");
        return;
    }
    let reason = nobody_can_run_at(&closed.join("prog")).unwrap_err();
    assert!(
        reason.contains("a folder above it is closed to other users"),
        "{reason}"
    );
}

/// Runs one setup step.
fn setup_step(sandbox: &mut Sandbox, step: &Value, index: &mut usize) -> Result<(), Verdict> {
    let fail = |msg: String| Verdict::Failed(format!("setup: {msg}"));
    if let Some(rel) = step.get("file").and_then(Value::as_str) {
        let path = sandbox.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(format!("mkdir: {e}")))?;
        }
        let bytes = content(sandbox, step).map_err(fail)?;
        std::fs::write(&path, bytes).map_err(|e| fail(format!("write {}: {e}", path.display())))?;
    } else if let Some(rel) = step.get("symlink").and_then(Value::as_str) {
        let path = sandbox.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(format!("mkdir: {e}")))?;
        }
        let target = sandbox.expand(step["to"].as_str().unwrap_or_default());
        let target = if target.starts_with('/') || step.get("relative").is_some() {
            PathBuf::from(target)
        } else {
            sandbox.root.join(target)
        };
        std::os::unix::fs::symlink(&target, &path).map_err(|e| fail(format!("symlink: {e}")))?;
    } else if let Some(rel) = step.get("fifo").and_then(Value::as_str) {
        let path = sandbox.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(format!("mkdir: {e}")))?;
        }
        let ok = Command::new("mkfifo")
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(Verdict::Skipped("mkfifo is not available".to_owned()));
        }
    } else if let Some(rel) = step.get("sparse").and_then(Value::as_str) {
        let path = sandbox.path(rel);
        let file = std::fs::File::create(&path).map_err(|e| fail(format!("sparse: {e}")))?;
        file.set_len(step["size"].as_u64().unwrap_or(1 << 31))
            .map_err(|e| fail(format!("sparse: {e}")))?;
    } else if let Some(rel) = step.get("hardlink").and_then(Value::as_str) {
        std::fs::hard_link(
            sandbox.path(step["to"].as_str().unwrap_or_default()),
            sandbox.path(rel),
        )
        .map_err(|e| fail(format!("hard link: {e}")))?;
    } else if let Some(rel) = step.get("rename").and_then(Value::as_str) {
        // Another program replacing a file (an editor saving by rename).
        let to = sandbox.path(step["to"].as_str().unwrap_or_default());
        std::fs::rename(sandbox.path(rel), to).map_err(|e| fail(format!("rename: {e}")))?;
    } else if let Some(rel) = step.get("copy").and_then(Value::as_str) {
        let to = sandbox.path(step["to"].as_str().unwrap_or_default());
        std::fs::copy(sandbox.path(rel), to).map_err(|e| fail(format!("copy: {e}")))?;
    } else if let Some(rel) = step.get("remove").and_then(Value::as_str) {
        std::fs::remove_file(sandbox.path(rel)).map_err(|e| fail(format!("remove: {e}")))?;
    } else if let Some(rel) = step.get("truncate").and_then(Value::as_str) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(sandbox.path(rel))
            .map_err(|e| fail(format!("truncate: {e}")))?;
        file.set_len(step["size"].as_u64().unwrap_or(0))
            .map_err(|e| fail(format!("truncate: {e}")))?;
    } else if let Some(rel) = step.get("append").and_then(Value::as_str) {
        let bytes = content(sandbox, step).map_err(fail)?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(sandbox.path(rel))
            .map_err(|e| fail(format!("append: {e}")))?;
        file.write_all(&bytes)
            .map_err(|e| fail(format!("append: {e}")))?;
    } else if let Some(rel) = step.get("holdLock").and_then(Value::as_str) {
        // Another process holding the file's `flock` lock until the case
        // ends: `flock(1)` takes it, then says so.
        let path = sandbox.path(rel);
        let mut holder = Command::new("flock")
            .arg("-x")
            .arg(&path)
            .args(["sh", "-c", "echo held; exec sleep 120"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|_| Verdict::Skipped("flock(1) is not available".to_owned()))?;
        let mut line = String::new();
        let read = holder
            .stdout
            .take()
            .map(|stdout| std::io::BufReader::new(stdout).read_line(&mut line));
        sandbox.holders.push(holder);
        if !matches!(read, Some(Ok(n)) if n > 0) {
            return Err(fail("flock did not take the lock".to_owned()));
        }
    } else if let Some(rel) = step.get("mkdir").and_then(Value::as_str) {
        std::fs::create_dir_all(sandbox.path(rel)).map_err(|e| fail(format!("mkdir: {e}")))?;
    } else if let Some(rel) = step.get("chmod").and_then(Value::as_str) {
        use std::os::unix::fs::PermissionsExt;
        let mode = u32::from_str_radix(step["mode"].as_str().unwrap_or("644"), 8)
            .map_err(|e| fail(format!("mode: {e}")))?;
        std::fs::set_permissions(sandbox.path(rel), std::fs::Permissions::from_mode(mode))
            .map_err(|e| fail(format!("chmod: {e}")))?;
    } else if step.get("session").is_some() {
        *index += 1;
        build_session(sandbox, step, *index).map_err(fail)?;
    } else if let Some(rel) = step.get("tmpfs").and_then(Value::as_str) {
        can_mount().map_err(Verdict::Skipped)?;
        let path = sandbox.path(rel);
        std::fs::create_dir_all(&path).map_err(|e| fail(format!("mkdir: {e}")))?;
        let size = step.get("sizeKb").and_then(Value::as_u64).unwrap_or(256);
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}k"), "tmpfs"])
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(Verdict::Skipped(format!("cannot mount a tmpfs on {rel}")));
        }
        sandbox.mounts.push(path);
    } else if let Some(rel) = step.get("fill").and_then(Value::as_str) {
        // Fills the file system holding `rel` until it is full.
        let path = sandbox.path(rel);
        let mut file = std::fs::File::create(&path).map_err(|e| fail(format!("fill: {e}")))?;
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        while file.write_all(&chunk[..1]).is_ok() {}
    } else if let Some(rel) = step.get("readonly").and_then(Value::as_str) {
        let path = sandbox.path(rel);
        let ok = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(Verdict::Skipped(format!("cannot remount {rel} read-only")));
        }
    } else if let Some(args) = step.get("run") {
        let result = run_command(sandbox, step, args).map_err(fail)?;
        if let Some(expect) = step.get("expect")
            && let Some(problem) = judge(sandbox, &result, expect, "setup run")
        {
            return Err(fail(problem));
        }
    } else if let Some(name) = step.get("var").and_then(Value::as_str) {
        let value = sandbox.expand(step["value"].as_str().unwrap_or_default());
        sandbox.vars.insert(name.to_owned(), value);
    } else {
        return Err(fail(format!("unknown step {step}")));
    }
    Ok(())
}

/// What one run of the binary did.
struct RunResult {
    args: Vec<String>,
    code: Option<i32>,
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    timed_out: bool,
    elapsed: Duration,
    timeout: Duration,
}

/// Runs the binary with `spec`'s `env`, `cwd`, `stdin`, `timeoutMs`,
/// `memoryMb` and `signal`.
fn run_command(sandbox: &Sandbox, spec: &Value, args: &Value) -> Result<RunResult, String> {
    let args: Vec<String> = args
        .as_array()
        .ok_or("args must be a list")?
        .iter()
        .map(|arg| sandbox.expand(arg.as_str().unwrap_or_default()))
        .collect();
    let memory_mb = spec
        .get("memoryMb")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_MEMORY_MB);
    let timeout = Duration::from_millis(
        spec.get("timeoutMs")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_TIMEOUT_MS),
    );
    let mut command = if sandbox.run_as_nobody {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
        ]);
        c
    } else {
        Command::new("sh")
    };
    command
        .arg("-c")
        .arg(format!(
            "ulimit -v {} 2>/dev/null; exec \"$0\" \"$@\"",
            memory_mb * 1024
        ))
        .arg(binary())
        .args(&args);
    command
        .env_clear()
        .env("SOBA_HOME", sandbox.path("home"))
        .env("HOME", &sandbox.root)
        .env("TMPDIR", sandbox.path("tmp"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(sandbox.path(spec.get("cwd").and_then(Value::as_str).unwrap_or("ws")));
    if let Some(env) = spec.get("env").and_then(Value::as_object) {
        for (name, value) in env {
            match value {
                Value::String(text) => {
                    command.env(name, sandbox.expand(text));
                }
                Value::Object(obj) if obj.contains_key("hex") => {
                    use std::os::unix::ffi::OsStrExt;
                    let bytes = decode_hex(obj["hex"].as_str().unwrap_or_default())?;
                    command.env(name, std::ffi::OsStr::from_bytes(&bytes));
                }
                Value::Null => {
                    command.env_remove(name);
                }
                other => {
                    command.env(name, other.to_string());
                }
            }
        }
    }
    let stdin_text = spec
        .get("stdin")
        .and_then(Value::as_str)
        .map(|s| sandbox.expand(s));
    let hold_stdin = spec
        .get("stdinHold")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    command.stdin(if stdin_text.is_some() || hold_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = command.spawn().map_err(|e| format!("cannot spawn: {e}"))?;
    let mut held = None;
    if let Some(mut stdin) = child.stdin.take() {
        if let Some(text) = stdin_text {
            std::thread::spawn(move || {
                let _ = stdin.write_all(text.as_bytes());
            });
        } else {
            held = Some(stdin);
        }
    }
    let collected: [std::sync::Arc<Mutex<Vec<u8>>>; 2] = Default::default();
    let mut readers = Vec::new();
    for (pipe, sink) in [
        (
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            collected[0].clone(),
        ),
        (
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            collected[1].clone(),
        ),
    ] {
        if let Some(mut pipe) = pipe {
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match pipe.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut sink = sink.lock().unwrap();
                            // Output beyond 4 MiB is not kept (a runaway print).
                            if sink.len() < 4 << 20 {
                                sink.extend_from_slice(&buf[..n]);
                            }
                        }
                    }
                }
            }));
        }
    }
    let signal = spec.get("signal");
    let mut signalled = false;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if let Some(signal) = signal
            && !signalled
        {
            let after =
                Duration::from_millis(signal.get("afterMs").and_then(Value::as_u64).unwrap_or(0));
            let ready = match signal.get("whenOutput").and_then(Value::as_str) {
                Some(wanted) => {
                    let out = collected[0].lock().unwrap();
                    let err = collected[1].lock().unwrap();
                    contains(&out, wanted) || contains(&err, wanted)
                }
                None => true,
            };
            if ready && start.elapsed() >= after {
                let name = signal["name"].as_str().unwrap_or("TERM");
                let _ = Command::new("kill")
                    .arg(format!("-{name}"))
                    .arg(child.id().to_string())
                    .status();
                signalled = true;
            }
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            timed_out = true;
            break child.wait().map_err(|e| e.to_string())?;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(held);
    let elapsed = start.elapsed();
    for reader in readers {
        // A grandchild may keep a pipe open; do not wait for it forever.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !reader.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let stdout = collected[0].lock().unwrap().clone();
    let stderr = collected[1].lock().unwrap().clone();
    Ok(RunResult {
        args,
        code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        timed_out,
        elapsed,
        timeout,
    })
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    String::from_utf8_lossy(haystack).contains(needle)
}

/// The first raw control byte, C1 control or bidi override in `bytes`.
fn control_byte(bytes: &[u8]) -> Option<String> {
    for (i, &b) in bytes.iter().enumerate() {
        if (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f {
            return Some(format!("byte 0x{b:02x} at offset {i}"));
        }
    }
    let text = String::from_utf8_lossy(bytes);
    for (i, c) in text.char_indices() {
        let bad = matches!(c as u32, 0x80..=0x9f | 0x202a..=0x202e | 0x2066..=0x2069 | 0x200e | 0x200f | 0x061c);
        if bad {
            return Some(format!("U+{:04X} at offset {i}", c as u32));
        }
    }
    None
}

fn strings(expect: &Value, key: &str) -> Vec<String> {
    match expect.get(key) {
        Some(Value::String(one)) => vec![one.clone()],
        Some(Value::Array(many)) => many
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn shorten(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let escaped: String = text.chars().flat_map(char::escape_default).collect();
    if escaped.chars().count() > 300 {
        format!("{}…", escaped.chars().take(300).collect::<String>())
    } else {
        escaped
    }
}

/// Judges a run against `expect`; returns the first problem found.
fn judge(sandbox: &Sandbox, run: &RunResult, expect: &Value, what: &str) -> Option<String> {
    if let Some(any) = expect.get("anyOf").and_then(Value::as_array) {
        let mut problems = Vec::new();
        for alternative in any {
            let mut merged = expect.clone();
            if let Some(map) = merged.as_object_mut() {
                map.remove("anyOf");
            }
            merge(&mut merged, alternative);
            match judge(sandbox, run, &merged, what) {
                None => return None,
                Some(problem) => problems.push(problem),
            }
        }
        return Some(format!("no alternative holds: {}", problems.join(" | ")));
    }
    let shown = format!(
        "{what} `soba {}`",
        run.args.join(" ").replace(&sandbox.vars["root"], "<root>")
    );
    let streams = || {
        format!(
            " [exit {:?}; stderr: {}; stdout: {}]",
            run.code,
            shorten(&run.stderr),
            shorten(&run.stdout)
        )
    };
    if run.timed_out {
        return Some(format!(
            "{shown}: did not finish within {} ms (killed; a hang){}",
            run.timeout.as_millis(),
            streams()
        ));
    }
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    if run.code == Some(101) || stderr.contains("panicked at") {
        return Some(format!("{shown}: panicked{}", streams()));
    }
    let expects_signal = expect
        .get("signalled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(signal) = run.signal
        && !expects_signal
    {
        return Some(format!(
            "{shown}: died of signal {signal}{} (6 = abort, e.g. out of memory)",
            streams()
        ));
    }
    let allowed: Option<Vec<i64>> = match expect.get("exit") {
        Some(Value::Number(n)) => n.as_i64().map(|n| vec![n]),
        Some(Value::Array(codes)) => Some(codes.iter().filter_map(Value::as_i64).collect()),
        _ => None,
    };
    let code = run.code.map(i64::from);
    match &allowed {
        Some(codes) if run.signal.is_none() && !code.is_some_and(|c| codes.contains(&c)) => {
            return Some(format!(
                "{shown}: exit {code:?}, expected {codes:?}{}",
                streams()
            ));
        }
        None if run.signal.is_none() && code == Some(255) => {
            return Some(format!(
                "{shown}: exit 255 (an internal error on outside input){}",
                streams()
            ));
        }
        _ => {}
    }
    let checks: [(&str, &str, bool); 6] = [
        ("stdoutContains", &stdout, true),
        ("stdoutNotContains", &stdout, false),
        ("stderrContains", &stderr, true),
        ("stderrNotContains", &stderr, false),
        ("outputContains", "", true),
        ("outputNotContains", "", false),
    ];
    let both = format!("{stdout}\n{stderr}");
    for (key, text, want) in checks {
        let text = if key.starts_with("output") {
            both.as_str()
        } else {
            text
        };
        for needle in strings(expect, key) {
            let needle = sandbox.expand(&needle);
            if text.contains(&needle) != want {
                return Some(format!(
                    "{shown}: {} {needle:?}{}",
                    if want {
                        format!("{} lacks", key.trim_end_matches("Contains"))
                    } else {
                        format!("{} contains", key.trim_end_matches("NotContains"))
                    },
                    streams()
                ));
            }
        }
    }
    for (key, text) in [
        ("stdoutMatches", &stdout),
        ("stderrMatches", &stderr),
        ("outputMatches", &both),
    ] {
        for pattern in strings(expect, key) {
            let re = match regex::Regex::new(&pattern) {
                Ok(re) => re,
                Err(err) => return Some(format!("bad pattern {pattern:?}: {err}")),
            };
            if !re.is_match(text) {
                return Some(format!("{shown}: {key} /{pattern}/ failed{}", streams()));
            }
        }
    }
    if expect
        .get("noControlBytes")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        for (name, bytes) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
            if let Some(found) = control_byte(bytes) {
                return Some(format!("{shown}: raw {found} on {name}{}", streams()));
            }
        }
    }
    if let Some(max) = expect.get("maxMs").and_then(Value::as_u64)
        && run.elapsed > Duration::from_millis(max)
    {
        return Some(format!(
            "{shown}: took {} ms, more than {max}",
            run.elapsed.as_millis()
        ));
    }
    if let Some(checks) = expect.get("json").and_then(Value::as_array) {
        let parsed: Value = serde_json::from_str(&stdout).unwrap_or_else(|_| {
            Value::Array(
                stdout
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
                    .collect(),
            )
        });
        for check in checks {
            let pointer = check["pointer"].as_str().unwrap_or("");
            let found = parsed.pointer(pointer);
            if let Some(problem) = judge_json(found, check) {
                return Some(format!("{shown}: json {pointer}: {problem}{}", streams()));
            }
        }
    }
    if let Some(files) = expect.get("files").and_then(Value::as_array) {
        for file in files {
            if let Some(problem) = judge_file(sandbox, file) {
                return Some(format!("after {shown}: {problem}"));
            }
        }
    }
    for rel in strings(expect, "noEmptyFilesUnder") {
        let mut stack = vec![sandbox.path(&rel)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match std::fs::symlink_metadata(&path) {
                    Ok(meta) if meta.is_dir() => stack.push(path),
                    // The lock file imports take turns on is empty by design.
                    Ok(meta)
                        if meta.is_file()
                            && meta.len() == 0
                            && path.file_name().is_none_or(|name| name != ".import.lock") =>
                    {
                        return Some(format!(
                            "after {shown}: an empty file was left: {}",
                            path.display()
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(checks) = expect.get("dirNamesNotContain").and_then(Value::as_array) {
        for check in checks {
            let dir = sandbox.path(check["dir"].as_str().unwrap_or_default());
            let needle = check["text"].as_str().unwrap_or_default();
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.contains(needle) {
                    return Some(format!(
                        "after {shown}: a file name holds {needle:?}: {name}"
                    ));
                }
            }
        }
    }
    for rel in strings(expect, "dirEmpty") {
        let dir = sandbox.path(&rel);
        let left: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if !left.is_empty() {
            return Some(format!("after {shown}: {rel}/ is not empty: {left:?}"));
        }
    }
    None
}

fn judge_json(found: Option<&Value>, check: &Value) -> Option<String> {
    if let Some(exists) = check.get("exists").and_then(Value::as_bool) {
        if found.is_some() != exists {
            return Some(format!("exists is {}, expected {exists}", found.is_some()));
        }
        if !exists {
            return None;
        }
    }
    let Some(found) = found else {
        return Some("absent".to_owned());
    };
    if let Some(want) = check.get("equals")
        && found != want
    {
        return Some(format!("{found}, expected {want}"));
    }
    if let Some(want) = check.get("notEquals")
        && found == want
    {
        return Some(format!("{found}, expected anything else"));
    }
    if let Some(min) = check.get("gte").and_then(Value::as_f64)
        && found.as_f64().is_none_or(|n| n < min)
    {
        return Some(format!("{found}, expected ≥ {min}"));
    }
    if let Some(max) = check.get("lte").and_then(Value::as_f64)
        && found.as_f64().is_none_or(|n| n > max)
    {
        return Some(format!("{found}, expected ≤ {max}"));
    }
    if let Some(len) = check.get("len").and_then(Value::as_u64) {
        let actual = match found {
            Value::Array(a) => a.len(),
            Value::Object(o) => o.len(),
            Value::String(s) => s.len(),
            _ => usize::MAX,
        };
        if actual as u64 != len {
            return Some(format!("length {actual}, expected {len}"));
        }
    }
    if let Some(needle) = check.get("contains").and_then(Value::as_str)
        && !found.to_string().contains(needle)
    {
        return Some(format!("{found} lacks {needle:?}"));
    }
    if let Some(needle) = check.get("notContains").and_then(Value::as_str)
        && found.to_string().contains(needle)
    {
        return Some(format!("contains {needle:?}"));
    }
    None
}

fn judge_file(sandbox: &Sandbox, file: &Value) -> Option<String> {
    let rel = sandbox.expand(file["path"].as_str().unwrap_or_default());
    let rel = rel.as_str();
    let path = sandbox.path(rel);
    let exists = std::fs::symlink_metadata(&path).is_ok();
    if let Some(want) = file.get("exists").and_then(Value::as_bool)
        && exists != want
    {
        return Some(format!(
            "{rel} {}",
            if want {
                "does not exist"
            } else {
                "exists (it must not)"
            }
        ));
    }
    if !exists {
        return None;
    }
    let bytes = std::fs::read(&path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    for needle in strings(file, "contains") {
        let needle = sandbox.expand(&needle);
        if !text.contains(&needle) {
            return Some(format!("{rel} lacks {needle:?}"));
        }
    }
    for needle in strings(file, "notContains") {
        let needle = sandbox.expand(&needle);
        if text.contains(&needle) {
            return Some(format!("{rel} contains {needle:?}"));
        }
    }
    if let Some(min) = file.get("sizeGt").and_then(Value::as_u64)
        && (bytes.len() as u64) <= min
    {
        return Some(format!(
            "{rel} has {} bytes, expected more than {min}",
            bytes.len()
        ));
    }
    if let Some(want) = file.get("equalsText").and_then(Value::as_str)
        && text != sandbox.expand(want)
    {
        return Some(format!("{rel} changed: {}", shorten(&bytes)));
    }
    if let Some(want) = file.get("countOf").and_then(Value::as_object) {
        for (needle, n) in want {
            let actual = text.matches(needle.as_str()).count() as u64;
            if Some(actual) != n.as_u64() {
                return Some(format!(
                    "{rel} holds {needle:?} {actual} times, expected {n}"
                ));
            }
        }
    }
    if file.get("loads").and_then(Value::as_bool).unwrap_or(false) {
        let Some(session) = sandbox.first_session.clone() else {
            return Some("a loads check needs a session in the setup".to_owned());
        };
        let args = json!([
            "capsule",
            "load",
            path.display().to_string(),
            "--session",
            session,
            "--model",
            MODEL
        ]);
        match run_command(sandbox, &json!({}), &args) {
            Ok(run) if run.code == Some(0) && !run.timed_out => {}
            Ok(run) => {
                return Some(format!(
                    "{rel} does not load again: exit {:?}: {}",
                    run.code,
                    shorten(&run.stderr)
                ));
            }
            Err(err) => return Some(err),
        }
    }
    None
}

/// Runs one case in its own sandbox.
fn run_case(case: &Case) -> Verdict {
    let spec = &case.spec;
    if let Some(reason) = spec.get("skip").and_then(Value::as_str) {
        return Verdict::Skipped(reason.to_owned());
    }
    let mut sandbox = Sandbox::new();
    let mut index = 0;
    for step in spec
        .get("setup")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Err(verdict) = setup_step(&mut sandbox, step, &mut index) {
            return verdict;
        }
    }
    if spec
        .get("asNobody")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        && is_root()
    {
        // Root ignores permission bits: run as nobody over a sandbox it owns.
        if let Err(reason) = nobody_can_run() {
            return Verdict::Skipped(reason);
        }
        let ok = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&sandbox.root)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Verdict::Skipped("needs chown to drop root".to_owned());
        }
        sandbox.run_as_nobody = true;
        // The permission steps apply to the chowned files.
        for step in spec
            .get("afterChown")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Err(verdict) = setup_step(&mut sandbox, step, &mut index) {
                return verdict;
            }
        }
    } else {
        for step in spec
            .get("afterChown")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Err(verdict) = setup_step(&mut sandbox, step, &mut index) {
                return verdict;
            }
        }
    }
    let Some(args) = spec.get("args") else {
        return Verdict::Failed("the case has no args".to_owned());
    };
    let (run, others, churned) = run_together(&sandbox, spec, args);
    let run = match run {
        Ok(run) => run,
        Err(err) => return Verdict::Failed(err),
    };
    let expect = spec.get("expect").cloned().unwrap_or(json!({}));
    if let Some(problem) = judge(&sandbox, &run, &expect, "") {
        return Verdict::Failed(problem);
    }
    for (i, (other, run)) in together(spec).iter().zip(others).enumerate() {
        let run = match run {
            Ok(run) => run,
            Err(err) => return Verdict::Failed(err),
        };
        let expect = other.get("expect").cloned().unwrap_or(json!({}));
        if let Some(problem) = judge(&sandbox, &run, &expect, &format!("together #{}", i + 1)) {
            return Verdict::Failed(problem);
        }
    }
    if spec.get("churn").is_some() && churned == 0 {
        return Verdict::Failed("churn: no change was made while the command ran".to_owned());
    }
    for (i, then) in spec
        .get("then")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut merged = Map::new();
        for key in ["env", "cwd", "memoryMb"] {
            if let Some(v) = spec.get(key) {
                merged.insert(key.to_owned(), v.clone());
            }
        }
        let mut then_spec = Value::Object(merged);
        merge(&mut then_spec, then);
        let run = match run_command(&sandbox, &then_spec, &then["args"]) {
            Ok(run) => run,
            Err(err) => return Verdict::Failed(err),
        };
        let expect = then.get("expect").cloned().unwrap_or(json!({}));
        if let Some(problem) = judge(&sandbox, &run, &expect, &format!("then #{}", i + 1)) {
            return Verdict::Failed(problem);
        }
    }
    Verdict::Passed
}

/// Returns a case's `together` commands, each merged over the case's
/// `env`, `cwd` and `memoryMb`.
fn together(spec: &Value) -> Vec<Value> {
    spec.get("together")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|other| {
            let mut merged = Map::new();
            for key in ["env", "cwd", "memoryMb", "timeoutMs"] {
                if let Some(v) = spec.get(key) {
                    merged.insert(key.to_owned(), v.clone());
                }
            }
            let mut merged = Value::Object(merged);
            merge(&mut merged, other);
            merged
        })
        .collect()
}

type Outcome = Result<RunResult, String>;

/// Runs the case's command, its `together` commands at the same moment
/// (two processes on one session or file), and its `churn` steps in a
/// loop while they run (another program changing files under them).
/// Returns the command's outcome, the others' in order, and how many
/// churn steps were made.
fn run_together(sandbox: &Sandbox, spec: &Value, args: &Value) -> (Outcome, Vec<Outcome>, usize) {
    let others = together(spec);
    let churn: Vec<Value> = spec
        .get("churn")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let start = std::sync::Barrier::new(others.len() + 1);
    std::thread::scope(|scope| {
        let churner = (!churn.is_empty()).then(|| {
            scope.spawn(|| {
                let (mut tried, mut made) = (0, 0);
                while !done.load(Ordering::SeqCst) {
                    // A step that cannot be made now (the file it moves is
                    // elsewhere) is passed over.
                    if churn_step(sandbox, &churn[tried % churn.len()]) {
                        made += 1;
                    }
                    tried += 1;
                    std::thread::yield_now();
                }
                made
            })
        });
        let handles: Vec<_> = others
            .iter()
            .map(|other| {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    run_command(sandbox, other, &other["args"])
                })
            })
            .collect();
        start.wait();
        let run = run_command(sandbox, spec, args);
        let outcomes = handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("a together command's thread panicked".to_owned()))
            })
            .collect();
        done.store(true, Ordering::SeqCst);
        let made = churner.map_or(0, |handle| handle.join().unwrap_or(0));
        (run, outcomes, made)
    })
}

/// Makes one churn step (`rename`, `copy`, `append`, `remove`) as another
/// program would while a command runs; returns whether it was made.
fn churn_step(sandbox: &Sandbox, step: &Value) -> bool {
    let to = || sandbox.path(step["to"].as_str().unwrap_or_default());
    if let Some(rel) = step.get("rename").and_then(Value::as_str) {
        std::fs::rename(sandbox.path(rel), to()).is_ok()
    } else if let Some(rel) = step.get("copy").and_then(Value::as_str) {
        std::fs::copy(sandbox.path(rel), to()).is_ok()
    } else if let Some(rel) = step.get("append").and_then(Value::as_str) {
        let Ok(bytes) = content(sandbox, step) else {
            return false;
        };
        std::fs::OpenOptions::new()
            .append(true)
            .open(sandbox.path(rel))
            .and_then(|mut file| file.write_all(&bytes))
            .is_ok()
    } else if let Some(rel) = step.get("remove").and_then(Value::as_str) {
        std::fs::remove_file(sandbox.path(rel)).is_ok()
    } else {
        false
    }
}

/// The whole campaign: a tally per class, every failure's reason.
#[test]
fn hostile_campaign() {
    let (titles, mut cases) = load_cases();
    let mut names = std::collections::HashSet::new();
    for case in &cases {
        assert!(
            names.insert(case.name.clone()),
            "duplicate case name {}",
            case.name
        );
    }
    let total = cases.len();
    assert!(total >= 170, "the campaign has only {total} cases");
    if let Ok(filter) = std::env::var("SOBA_HOSTILE_FILTER") {
        cases.retain(|case| case.name.contains(&filter) || case.class.to_string() == filter);
    }
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let verdicts: Mutex<Vec<(usize, Verdict, Duration)>> = Mutex::new(Vec::new());
    let threads = std::env::var("SOBA_HOSTILE_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(6);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(case) = cases.get(i) else { break };
                    let t = Instant::now();
                    let verdict = run_case(case);
                    verdicts.lock().unwrap().push((i, verdict, t.elapsed()));
                }
            });
        }
    });
    let mut verdicts = verdicts.into_inner().unwrap();
    verdicts.sort_by_key(|(i, _, _)| *i);
    let mut report = String::new();
    let mut tally: BTreeMap<u64, (usize, usize, usize)> = BTreeMap::new();
    let mut failures: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut skips: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (i, verdict, _) in &verdicts {
        let case = &cases[*i];
        let slot = tally.entry(case.class).or_default();
        match verdict {
            Verdict::Passed => slot.0 += 1,
            Verdict::Failed(why) => {
                slot.1 += 1;
                failures
                    .entry(case.class)
                    .or_default()
                    .push(format!("{}: {why}", case.name));
            }
            Verdict::Skipped(why) => {
                slot.2 += 1;
                skips
                    .entry(case.class)
                    .or_default()
                    .push(format!("{}: {why}", case.name));
            }
        }
    }
    report.push_str(&format!(
        "hostile campaign: {} cases run against {} in {:.1} s\n",
        verdicts.len(),
        binary().display(),
        started.elapsed().as_secs_f64()
    ));
    let (mut p, mut f, mut s) = (0, 0, 0);
    for (class, (passed, failed, skipped)) in &tally {
        report.push_str(&format!(
            "class {class} {:<48} passed {passed:>3}  failed {failed:>3}  skipped {skipped:>3}\n",
            titles.get(class).map_or("", String::as_str)
        ));
        p += passed;
        f += failed;
        s += skipped;
    }
    report.push_str(&format!("total passed {p}, failed {f}, skipped {s}\n"));
    let mut slowest: Vec<(Duration, &str)> = verdicts
        .iter()
        .map(|(i, _, took)| (*took, cases[*i].name.as_str()))
        .collect();
    slowest.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let slowest: Vec<String> = slowest
        .iter()
        .take(5)
        .map(|(took, name)| format!("{name} {:.1} s", took.as_secs_f64()))
        .collect();
    report.push_str(&format!("slowest: {}\n", slowest.join(", ")));
    for (class, list) in &failures {
        report.push_str(&format!("\nFAILED in class {class}:\n"));
        for line in list {
            report.push_str(&format!("  {line}\n"));
        }
    }
    for (class, list) in &skips {
        report.push_str(&format!("\nSKIPPED in class {class}:\n"));
        for line in list {
            report.push_str(&format!("  {line}\n"));
        }
    }
    println!("{report}");
    if let Ok(path) = std::env::var("SOBA_HOSTILE_REPORT") {
        let _ = std::fs::write(path, &report);
    }
    if std::env::var_os("SOBA_HOSTILE_REPORT_ONLY").is_none() {
        assert!(f == 0, "{f} hostile cases failed:\n{report}");
    }
}
