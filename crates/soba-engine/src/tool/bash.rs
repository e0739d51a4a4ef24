//! `bash`: runs `bash -c` in the workspace root in its own process group,
//! with a timeout and cancellation that kill the whole group, and keeps the
//! first and last 512 KiB of the combined output (SPEC §11.1). Unix only,
//! like the rest of the tool set.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use soba_core::ToolInput;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::unix::pipe;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::{
    BASH_CAPTURE_BYTES, BASH_MAX_TIMEOUT_MS, Tool, ToolContext, ToolError, ToolFuture, ToolOutcome,
};

/// How long output is still read after the command exits, for processes it
/// left in the background that hold the pipe; and how long a killed group
/// gets to be reaped and drained.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// The `bash` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bash;

impl Tool for Bash {
    fn name(&self) -> &'static str {
        "bash"
    }

    fn description(&self) -> &'static str {
        "Runs a command with `bash -c` in the workspace root and returns its combined stdout and stderr followed by \
         an `exit code N` line. Stdin is empty, so interactive programs cannot prompt. The command and everything it \
         starts are killed after the timeout (120000 ms unless configured; `timeoutMs` sets it per call, at most \
         600000). Of long output only the first and last 512 KiB are kept."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command to run"},
                "timeoutMs": {"type": "integer", "minimum": 1, "maximum": BASH_MAX_TIMEOUT_MS, "description": "Timeout in milliseconds (at most 600000)"}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn needs_approval(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(self.name(), input);
            let (command, timeout_ms) =
                match (args.string("command"), args.optional_positive("timeoutMs")) {
                    (Ok(command), Ok(timeout_ms)) => (command, timeout_ms),
                    (Err(error), _) | (_, Err(error)) => return error.into(),
                };
            if command.trim().is_empty() {
                return ToolError::InvalidArguments {
                    tool: "bash",
                    message: "`command` is empty".to_owned(),
                }
                .into();
            }
            let timeout = match timeout_ms {
                Some(ms) if ms > BASH_MAX_TIMEOUT_MS => {
                    return ToolError::InvalidArguments {
                        tool: "bash",
                        message: format!("`timeoutMs` must be at most {BASH_MAX_TIMEOUT_MS} (10 minutes), got {ms}"),
                    }
                    .into();
                }
                Some(ms) => Duration::from_millis(ms),
                None => ctx.config().bash_timeout(),
            };
            run(command, ctx.workspace().root(), timeout, ctx.cancel()).await
        })
    }
}

/// How the wait for a command ended.
enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

/// Runs `command` and formats its outcome.
async fn run(
    command: &str,
    cwd: &Path,
    timeout: Duration,
    cancel: &CancellationToken,
) -> ToolOutcome {
    // One pipe for stdout and stderr keeps their interleaving as written.
    let (reader, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(error) => return ToolOutcome::error(format!("cannot create a pipe for bash: {error}")),
    };
    let writer_for_stderr = match writer.try_clone() {
        Ok(clone) => clone,
        Err(error) => return ToolOutcome::error(format!("cannot create a pipe for bash: {error}")),
    };
    let mut builder = tokio::process::Command::new("bash");
    builder
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_for_stderr)
        .kill_on_drop(true);
    builder.process_group(0);
    default_file_size_signal(&mut builder);
    let spawned = builder.spawn();
    // The builder holds our copies of the write end; closing them lets the
    // reader see end-of-file once the command and its children are done.
    drop(builder);
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return ToolOutcome::error(format!("cannot run bash: {error}")),
    };
    let group = child.id();
    let mut output = match output_reader(reader) {
        Ok(output) => output,
        Err(error) => {
            return ToolOutcome::error(format!("cannot read the output of bash: {error}"));
        }
    };

    let mut capture = Capture::new(BASH_CAPTURE_BYTES);
    let mut buffer = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + timeout;
    let mut status: Option<ExitStatus> = None;
    let mut drain_until = deadline;
    let mut at_eof = false;
    let ending = loop {
        if let (Some(exit), true) = (status, at_eof) {
            break Ending::Exited(exit);
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => break Ending::Cancelled,
            () = sleep_until(deadline), if status.is_none() => break Ending::TimedOut,
            () = sleep_until(drain_until), if status.is_some() => {
                if let Some(exit) = status {
                    break Ending::Exited(exit);
                }
            }
            read = output.read(&mut buffer), if !at_eof => match read {
                Ok(0) | Err(_) => at_eof = true,
                Ok(n_read) => capture.push(&buffer[..n_read]),
            },
            waited = child.wait(), if status.is_none() => match waited {
                Ok(exit) => {
                    status = Some(exit);
                    drain_until = Instant::now() + DRAIN_GRACE;
                }
                Err(error) => {
                    kill_group(group, &mut child);
                    return ToolOutcome::error(format!("cannot wait for bash: {error}"));
                }
            },
        }
    };

    if matches!(ending, Ending::TimedOut | Ending::Cancelled) {
        kill_group(group, &mut child);
        let _reaped = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
        if !at_eof {
            at_eof = drain(&mut output, &mut capture, &mut buffer).await;
        }
    }

    let mut text = capture.render();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let is_error = match ending {
        Ending::Exited(exit) => {
            let failed = describe_exit(exit, &mut text);
            if !at_eof {
                text.push_str("\n(processes left in the background still hold the output; what they write later is not captured)");
            }
            failed
        }
        Ending::TimedOut => {
            text.push_str(&format!(
                "timed out after {} ms; the command and its children were killed",
                timeout.as_millis()
            ));
            true
        }
        Ending::Cancelled => {
            text.push_str("cancelled; the command and its children were killed");
            true
        }
    };
    ToolOutcome {
        content: text,
        is_error,
        effect: None,
    }
}

/// Appends `exit code N` (or the killing signal) and returns whether it is a
/// failure.
fn describe_exit(exit: ExitStatus, text: &mut String) -> bool {
    if let Some(code) = exit.code() {
        text.push_str(&format!("exit code {code}"));
        return code != 0;
    }
    match exit.signal() {
        Some(signal) => text.push_str(&format!("killed by signal {signal}")),
        None => text.push_str("exited without a status"),
    }
    true
}

/// Reads what is left in the pipe for up to [`DRAIN_GRACE`]; returns whether
/// end-of-file was reached.
async fn drain(
    output: &mut (impl AsyncRead + Unpin),
    capture: &mut Capture,
    buffer: &mut [u8],
) -> bool {
    let until = Instant::now() + DRAIN_GRACE;
    loop {
        match tokio::time::timeout_at(until, output.read(buffer)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(n_read)) => capture.push(&buffer[..n_read]),
            Err(_elapsed) => return false,
        }
    }
}

/// Wraps the read end of the pipe for tokio (which makes it non-blocking).
fn output_reader(reader: std::io::PipeReader) -> std::io::Result<pipe::Receiver> {
    pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
}

/// Kills the command's process group (the command and everything it
/// started that did not leave the group), then the command itself.
fn kill_group(group: Option<u32>, child: &mut tokio::process::Child) {
    if let Some(group) = group {
        kill_process_group(group);
    }
    // The group kill already covers the child; this also works where it
    // could not be sent. An error only means the child is gone.
    let _already_gone = child.start_kill();
}

/// soba ignores SIGXFSZ (a write past `ulimit -f` is an error it reports,
/// not a kill); the commands it runs get the usual default back.
#[allow(unsafe_code)]
fn default_file_size_signal(builder: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls `signal`, which is async-signal-safe and touches no memory.
    unsafe {
        builder.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            Ok(())
        });
    }
}

#[allow(unsafe_code)]
fn kill_process_group(group: u32) {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return;
    };
    if group <= 1 {
        // 0 or 1 would address our own group or every process.
        return;
    }
    // SAFETY: killpg takes two integers and touches no memory of ours. The
    // group id is the pid of a child we spawned with process_group(0) and
    // have not reaped yet, so it cannot name another process group.
    let _result = unsafe { libc::killpg(group, libc::SIGKILL) };
}

/// Keeps the first and last `limit` bytes of a stream and counts the rest.
#[derive(Debug)]
pub(crate) struct Capture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capture {
    pub(crate) fn new(limit: usize) -> Self {
        Capture {
            limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.limit - self.head.len();
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        // Only the last `limit` bytes of `rest` can survive.
        let rest = &rest[rest.len().saturating_sub(self.limit)..];
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(self.limit);
        self.tail.drain(..excess);
    }

    /// Returns how many bytes were dropped between the head and the tail.
    pub(crate) fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// Returns the kept text, with a marker naming the dropped bytes.
    pub(crate) fn render(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        let dropped = self.dropped();
        if dropped > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("[… {dropped} bytes of output dropped …]\n"));
        }
        let (front, back) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(front);
        tail.extend_from_slice(back);
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: usize, chunks: &[&str], expected: &str, dropped: u64) {
        let mut capture = Capture::new(limit);
        for chunk in chunks {
            capture.push(chunk.as_bytes());
        }
        assert_eq!(capture.render(), expected);
        assert_eq!(capture.dropped(), dropped);
    }

    #[test]
    fn capture_keeps_head_and_tail() {
        check(4, &["abc"], "abc", 0);
        check(4, &["abcd", "efgh"], "abcdefgh", 0);
        check(
            4,
            &["abcdefghij"],
            "abcd\n[… 2 bytes of output dropped …]\nghij",
            2,
        );
        check(
            4,
            &["ab", "cd", "e", "f", "g", "h", "i", "j", "k"],
            "abcd\n[… 3 bytes of output dropped …]\nhijk",
            3,
        );
        check(
            3,
            &["ab\n", "0123456789", "xyz"],
            "ab\n[… 10 bytes of output dropped …]\nxyz",
            10,
        );
    }
}
