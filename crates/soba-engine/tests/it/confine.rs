//! File tools cannot race out of the workspace (issue 33): while a thread
//! swaps a workspace folder with a symlink to a folder outside, as fast as
//! it can, each file tool is called in a loop on a path through that folder,
//! and nothing outside is ever returned, written or changed. Special files
//! (FIFO, socket, a 1 GiB sparse file, a directory) are refused without
//! blocking, without reading them whole and without growing the disk.

use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use soba_core::ToolInput;
use soba_engine::tool::{ToolConfig, ToolContext, ToolOutcome, ToolRegistry, Workspace};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// Swaps each tool is raced against, at least.
const MIN_SWAPS: u64 = 10_000;
/// Calls of each tool, at least (the swapper is faster than the tools).
const MIN_CALLS: u64 = 3_000;

const OUTSIDE_TEXT: &str = "OUTSIDE-SECRET\n";
const EDIT_TEXT: &str = "A\n";

/// A workspace `ws/` with a folder `sub/`, and a folder `outside/` beside
/// it with files of the same names (and one more) holding other text.
struct Scene {
    _dir: TempDir,
    root: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
}

impl Scene {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(root.join("sub/file.txt"), "inside\n").unwrap();
        fs::write(root.join("sub/edit.txt"), EDIT_TEXT).unwrap();
        fs::write(outside.join("file.txt"), OUTSIDE_TEXT).unwrap();
        fs::write(outside.join("edit.txt"), EDIT_TEXT).unwrap();
        fs::write(outside.join("only_outside.txt"), OUTSIDE_TEXT).unwrap();
        let workspace = Workspace::new(&root).unwrap();
        Scene {
            _dir: dir,
            root,
            outside,
            ctx: ToolContext::new(workspace, ToolConfig::default(), CancellationToken::new()),
        }
    }

    async fn call(&self, tool: &str, args: Value) -> ToolOutcome {
        ToolRegistry::builtin()
            .get(tool)
            .unwrap()
            .call(&ToolInput::from_value(args), &self.ctx)
            .await
    }

    /// The outside folder's names and contents, sorted.
    fn outside_state(&self) -> Vec<(String, String)> {
        let mut state: Vec<(String, String)> = fs::read_dir(&self.outside)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let text = fs::read_to_string(entry.path()).unwrap_or_default();
                (entry.file_name().to_string_lossy().into_owned(), text)
            })
            .collect();
        state.sort();
        state
    }

    /// Puts the outside folder back as it was; returns whether it had
    /// changed (an escape).
    fn restore_outside(&self, before: &[(String, String)]) -> bool {
        let now = self.outside_state();
        if now == before {
            return false;
        }
        for (name, _) in &now {
            if !before.iter().any(|(kept, _)| kept == name) {
                fs::remove_file(self.outside.join(name)).unwrap();
            }
        }
        for (name, text) in before {
            fs::write(self.outside.join(name), text).unwrap();
        }
        true
    }
}

/// Flips `root/sub` between the real folder and a symlink to `outside`
/// (an atomic `renameat2(RENAME_EXCHANGE)`, so `sub` always exists; as fast
/// as it can) until stopped, counting flips.
struct Swapper {
    stop: Arc<AtomicBool>,
    n_swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
    root: PathBuf,
}

impl Swapper {
    fn start(root: &Path, outside: &Path) -> Self {
        let sub = root.join("sub");
        let link = root.join(".sub.swap");
        symlink(outside, &link).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let n_swaps = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, n_swaps) = (stop.clone(), n_swaps.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &sub,
                        rustix::fs::CWD,
                        &link,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    n_swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Swapper {
            stop,
            n_swaps,
            thread: Some(thread),
            root: root.to_path_buf(),
        }
    }

    fn swaps(&self) -> u64 {
        self.n_swaps.load(Ordering::Relaxed)
    }

    /// Stops the thread and leaves `sub` as the real folder.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        let sub = self.root.join("sub");
        if sub.is_symlink() {
            fs::rename(&sub, self.root.join(".sub.out")).unwrap();
            fs::rename(self.root.join(".sub.swap"), &sub).unwrap();
        }
        assert!(sub.is_dir() && !sub.is_symlink());
        self.swaps()
    }

    fn is_running(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|thread| !thread.is_finished())
    }
}

/// Calls `tool` in a loop while `sub` is swapped, at least [`MIN_SWAPS`]
/// swaps and [`MIN_CALLS`] calls; `escaped` judges each outcome (content
/// from outside) and the outside folder is checked after every call (bytes
/// written or changed outside). Returns the number of escapes.
async fn race(
    scene: &Scene,
    tool: &str,
    args: impl Fn(u64) -> Value,
    escaped: impl Fn(&ToolOutcome) -> bool,
) -> u64 {
    let before = scene.outside_state();
    let swapper = Swapper::start(&scene.root, &scene.outside);
    let mut n_calls = 0u64;
    let mut n_escapes = 0u64;
    let mut n_ok = 0u64;
    while n_calls < MIN_CALLS || swapper.swaps() < MIN_SWAPS {
        assert!(swapper.is_running(), "the swapper stopped");
        let outcome = scene.call(tool, args(n_calls)).await;
        n_calls += 1;
        if !outcome.is_error {
            n_ok += 1;
        }
        let read_outside = escaped(&outcome);
        let changed_outside = scene.restore_outside(&before);
        if read_outside || changed_outside {
            n_escapes += 1;
        }
    }
    let n_swaps = swapper.finish();
    eprintln!("{tool}: {n_calls} calls ({n_ok} ok), {n_swaps} swaps, {n_escapes} escapes");
    assert!(!scene.restore_outside(&before));
    n_escapes
}

fn shows_outside(outcome: &ToolOutcome) -> bool {
    outcome.content.contains("OUTSIDE-SECRET") || outcome.content.contains("only_outside")
}

#[tokio::test]
async fn read_file_never_returns_a_file_from_outside() {
    let scene = Scene::new();
    let escapes = race(
        &scene,
        "read_file",
        |_| json!({"path": "sub/file.txt"}),
        shows_outside,
    )
    .await;
    assert_eq!(escapes, 0);
}

#[tokio::test]
async fn write_file_never_writes_outside() {
    let scene = Scene::new();
    let escapes = race(
        &scene,
        "write_file",
        // A new name and an existing one (whose outside twin must not change).
        |n| {
            let name = if n % 2 == 0 { "new.txt" } else { "file.txt" };
            json!({"path": format!("sub/{name}"), "content": "written\n"})
        },
        shows_outside,
    )
    .await;
    assert_eq!(escapes, 0);
}

#[tokio::test]
async fn edit_file_never_reads_or_changes_a_file_outside() {
    let scene = Scene::new();
    let escapes = race(
        &scene,
        "edit_file",
        // Toggles A and B inside; the outside twin holds A and must keep it.
        |n| {
            let (old, new) = if n % 2 == 0 { ("A", "B") } else { ("B", "A") };
            json!({"path": "sub/edit.txt", "oldString": old, "newString": new})
        },
        shows_outside,
    )
    .await;
    assert_eq!(escapes, 0);
}

#[tokio::test]
async fn list_files_never_lists_a_folder_outside() {
    let scene = Scene::new();
    let escapes = race(
        &scene,
        "list_files",
        |n| {
            if n % 2 == 0 {
                json!({"path": "sub"})
            } else {
                json!({})
            }
        },
        shows_outside,
    )
    .await;
    assert_eq!(escapes, 0);
}

#[tokio::test]
async fn search_never_reads_a_file_outside() {
    let scene = Scene::new();
    let escapes = race(
        &scene,
        "search",
        |n| {
            if n % 2 == 0 {
                json!({"pattern": "SECRET|inside", "path": "sub"})
            } else {
                json!({"pattern": "SECRET|inside"})
            }
        },
        shows_outside,
    )
    .await;
    assert_eq!(escapes, 0);
}

// ------------------------------------------------------------ special files

/// Runs a tool call, failing the test if it does not return within ten
/// seconds (a FIFO opened for reading waits for a writer forever).
async fn promptly(scene: &Scene, tool: &str, args: Value) -> ToolOutcome {
    tokio::time::timeout(Duration::from_secs(10), scene.call(tool, args))
        .await
        .expect("the tool call returned without waiting for a writer")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_sockets_are_refused_without_blocking() {
    let scene = Scene::new();
    mkfifo(&scene.root.join("fifo"));
    let _socket = std::os::unix::net::UnixListener::bind(scene.root.join("socket")).unwrap();
    for (name, kind) in [("fifo", "a FIFO (named pipe)"), ("socket", "a socket")] {
        let refused = format!(
            "`{name}` is {kind}, not a regular file; file tools read and write regular files only (use bash for special files)"
        );
        for (tool, args) in [
            ("read_file", json!({"path": name})),
            (
                "edit_file",
                json!({"path": name, "oldString": "a", "newString": "b"}),
            ),
            ("write_file", json!({"path": name, "content": "x"})),
        ] {
            let outcome = promptly(&scene, tool, args).await;
            assert_eq!(outcome.content, refused, "{tool} {name}");
            assert!(outcome.is_error);
        }
    }
    // Still special files, never replaced by a write.
    use std::os::unix::fs::FileTypeExt;
    assert!(
        fs::symlink_metadata(scene.root.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        fs::symlink_metadata(scene.root.join("socket"))
            .unwrap()
            .file_type()
            .is_socket()
    );
}

#[tokio::test]
async fn a_huge_sparse_file_is_refused_by_edit_file_without_growing_the_disk() {
    let scene = Scene::new();
    let path = scene.root.join("sparse.bin");
    let file = fs::File::create(&path).unwrap();
    file.set_len(1 << 30).unwrap();
    drop(file);
    let blocks_before = fs::metadata(&path).unwrap().blocks();
    let outcome = scene
        .call(
            "edit_file",
            json!({"path": "sparse.bin", "oldString": "\u{0}", "newString": "x"}),
        )
        .await;
    assert_eq!(
        outcome.content,
        "`sparse.bin` is 1073741824 bytes; edit_file edits files of at most 4 MiB (4194304 bytes): use bash tools (such as `sed -i`) for huge files"
    );
    assert!(outcome.is_error);
    let outcome = scene.call("read_file", json!({"path": "sparse.bin"})).await;
    assert_eq!(
        outcome.content,
        "`sparse.bin` is 1073741824 bytes, over the 4 MiB limit for reading a whole file; pass offset and limit to read a line range, or use search"
    );
    let after = fs::metadata(&path).unwrap();
    assert_eq!(after.blocks(), blocks_before);
    assert_eq!(after.len(), 1 << 30);
}

#[tokio::test]
async fn directories_are_refused_by_every_file_tool() {
    let scene = Scene::new();
    let refused = "`sub` is a directory; use list_files to see what it holds";
    for (tool, args) in [
        ("read_file", json!({"path": "sub"})),
        (
            "edit_file",
            json!({"path": "sub", "oldString": "a", "newString": "b"}),
        ),
        ("write_file", json!({"path": "sub", "content": "x"})),
    ] {
        let outcome = scene.call(tool, args).await;
        assert_eq!(outcome.content, refused, "{tool}");
        assert!(outcome.is_error);
    }
}

#[tokio::test]
async fn edits_keep_permissions_and_never_change_another_hard_link() {
    use std::os::unix::fs::PermissionsExt;
    let scene = Scene::new();
    let script = scene.root.join("run.sh");
    fs::write(&script, "echo one\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let outcome = scene
        .call(
            "edit_file",
            json!({"path": "run.sh", "oldString": "one", "newString": "two"}),
        )
        .await;
    assert_eq!(outcome.content, "replaced 1 occurrence in run.sh");
    assert_eq!(fs::read_to_string(&script).unwrap(), "echo two\n");
    assert_eq!(fs::metadata(&script).unwrap().mode() & 0o7777, 0o755);
    // A second hard link (here outside) is refused and keeps its text.
    let twin = scene.outside.join("twin.sh");
    fs::hard_link(&script, &twin).unwrap();
    let outcome = scene
        .call("write_file", json!({"path": "run.sh", "content": "x"}))
        .await;
    assert!(
        outcome.content.contains("2 hard links"),
        "{}",
        outcome.content
    );
    assert_eq!(fs::read_to_string(&twin).unwrap(), "echo two\n");
}
