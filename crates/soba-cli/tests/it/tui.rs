//! The interactive agent end to end: the real `soba` binary in tmux
//! against the fake provider server. The TUI's frames are snapshot-tested
//! in its own crate (`crates/soba-tui/tests/it/tui.rs`).

mod e2e {
    //! The real binary in tmux (SPEC §17: poll `capture-pane` up to a 10 s
    //! deadline, never sleep-then-assert) against the fake provider: type a
    //! prompt, approve a tool call, see a barrier and its result line, type
    //! while a turn runs and see it queued then sent, `/compact`, quit,
    //! resume with `soba -c` and see the same history.

    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::json;
    use soba_core::Usage;
    use soba_provider::fake::{Dialect, FakeServer, Reply, Script};

    use crate::support::Sandbox;

    const DEADLINE: Duration = Duration::from_secs(10);

    /// A tmux server on a private socket, killed on drop.
    struct Tmux {
        socket: String,
    }

    impl Tmux {
        fn available() -> bool {
            Command::new("tmux")
                .arg("-V")
                .output()
                .is_ok_and(|out| out.status.success())
        }

        fn new() -> Self {
            Tmux {
                socket: format!("soba-tui-test-{}", std::process::id()),
            }
        }

        fn run(&self, args: &[&str]) -> String {
            let output = Command::new("tmux")
                .arg("-L")
                .arg(&self.socket)
                .args(args)
                .output()
                .expect("tmux runs");
            String::from_utf8_lossy(&output.stdout).into_owned()
        }

        fn start(&self, name: &str, command: &str) {
            self.run(&[
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "120",
                "-y",
                "40",
                command,
            ]);
        }

        fn keys(&self, name: &str, keys: &[&str]) {
            let mut args = vec!["send-keys", "-t", name];
            args.extend_from_slice(keys);
            self.run(&args);
        }

        fn type_text(&self, name: &str, text: &str) {
            self.run(&["send-keys", "-t", name, "-l", text]);
        }

        fn capture(&self, name: &str) -> String {
            self.run(&["capture-pane", "-p", "-t", name])
        }

        /// Polls the pane until `check` holds, up to [`DEADLINE`].
        fn wait_for(&self, name: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
            let started = Instant::now();
            loop {
                let screen = self.capture(name);
                if check(&screen) {
                    return screen;
                }
                assert!(
                    started.elapsed() < DEADLINE,
                    "waited {DEADLINE:?} for {what}; the screen:\n{screen}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }

        fn wait_text(&self, name: &str, text: &str) -> String {
            self.wait_for(name, &format!("{text:?}"), |screen| screen.contains(text))
        }
    }

    impl Drop for Tmux {
        fn drop(&mut self) {
            // Only this test's private tmux server.
            let _ = Command::new("tmux")
                .args(["-L", &self.socket, "kill-server"])
                .output();
        }
    }

    /// A main-model answer whose reported prompt is the BPE count of the
    /// request body, so calibration stays near 1 and the usage is
    /// plausible (bytes / 4 under-counts digit-dense output such as `seq`'s,
    /// which the calibration rightly takes for silent truncation).
    fn answer(reply: Reply, frame_delay: Duration) -> Script {
        Script::Compute(Arc::new(move |request| {
            use soba_core::tokens::{BpeCounter, Encoding, TokenCounter};
            let prompt = BpeCounter::new(Encoding::O200kBase)
                .count_text(&request.body.to_string())
                .n
                .get();
            Script::stream(
                Dialect::Chat,
                &reply.clone().with_usage(Usage {
                    input: prompt,
                    output: 20,
                    ..Usage::default()
                }),
            )
            .with_frame_delay(frame_delay)
        }))
    }

    fn summary() -> Script {
        let text = "## Goal\nCount the numbers and report them.\n## Constraints\n(none)\n## Done\nListed 1..3000 with seq.\n\
                    ## In progress\n(none)\n## Pending\n(none)\n## Decisions\n(none)\n## Blockers\n(none)\n## Next steps\nAnswer the user.\n\
                    END-OF-SUMMARY";
        let mut reply = Reply::text(text);
        reply.chunk_chars = 20;
        Script::stream(Dialect::Anthropic, &reply).with_frame_delay(Duration::from_millis(60))
    }

    fn soba_command(sandbox: &Sandbox, args: &str) -> String {
        let mut env = format!(
            "env -i SOBA_HOME='{}' HOME='{}' PATH='{}' TERM=xterm-256color FAKE_KEY=sk-fake",
            sandbox.home.display(),
            sandbox.home.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default(),
        );
        env.push_str(&format!(
            " sh -c 'cd \"{}\" && exec \"{}\" {args}'; echo soba-exited-$?; sleep 60",
            sandbox.ws.display(),
            env!("CARGO_BIN_EXE_soba")
        ));
        env
    }

    /// Returns the conversation pane (left of the sidebar, above the
    /// status line) of a 120 × 40 screen.
    fn conversation(screen: &str) -> Vec<String> {
        screen
            .lines()
            .take(34)
            .map(|line| {
                line.chars()
                    .take(88)
                    .collect::<String>()
                    .trim_end()
                    .to_owned()
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn type_approve_compact_queue_quit_and_resume() {
        if !Tmux::available() {
            eprintln!(
                "skipped: tmux is not installed (the TUI end-to-end test drives the binary in tmux)"
            );
            return;
        }
        let server = FakeServer::start().await.unwrap();
        let sandbox = Sandbox::new();
        sandbox.write_user_config(&json!({
            "model": "fake/test-model",
            "providers": {
                "fake": {"api": "openai-chat", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"},
                "fakesum": {"api": "anthropic-messages", "baseUrl": server.url(), "apiKeyEnv": "FAKE_KEY"}
            },
            "models": {
                "fake/test-model": {"contextWindow": 24000, "maxOutputTokens": 2000},
                "fakesum/summarizer": {"contextWindow": 7500, "maxOutputTokens": 2000}
            },
            "compaction": {
                "summarizer": {"model": "fakesum/summarizer"},
                "safetyReserveTokens": 1000,
                "keepRecentTokens": 256,
                "minTokensForAutoCompact": 300,
                "minReclaimableTokens": 50,
                "timeoutMs": 8000
            }
        }));
        let slow = Duration::from_millis(60);
        // Turn 1: a bash call needing approval, then an answer.
        server.push_for(
            "/chat/completions",
            answer(
                // Long, so the span of the next barrier takes more than one
                // summarizer chunk and its progress moves.
                Reply::text(format!(
                    "Counting. {}",
                    "Each number will sit on its own line of the output. ".repeat(250)
                ))
                .with_tool_call(
                    "call_1",
                    "bash",
                    json!({"command": "seq 1 3000"}),
                ),
                Duration::ZERO,
            ),
        );
        server.push_for(
            "/chat/completions",
            answer(Reply::text("Done counting: 1 to 3000."), Duration::ZERO),
        );
        // Turn 2 (after a turn_complete barrier), streamed slowly, and turn 3 (queued).
        let mut long = Reply::text(format!(
            "They run from 1 to 3000, one per line. {}",
            "The sequence is strictly increasing. ".repeat(60)
        ));
        long.chunk_chars = 120;
        server.push_for("/chat/completions", answer(long, slow));
        server.push_for(
            "/chat/completions",
            answer(Reply::text("Stopped as asked."), Duration::ZERO),
        );
        // One per chunk: the summarizer's window (7,500 tokens divided by its
        // calibration seed, less its output and prompt) takes part of the
        // span per request, so the first barrier runs in several chunks.
        for _ in 0..16 {
            server.push_for("/v1/messages", summary());
        }

        let tmux = Tmux::new();
        // Opened and left without a word: no file stays, no resume hint.
        tmux.start("unused", &soba_command(&sandbox, ""));
        tmux.wait_text("unused", "message · /help");
        // Typed all at once (not a bracketed paste): a walk's 4,389
        // characters went in at a frame each and stalled the box.
        let burst: Vec<String> = (0..800).map(|n| format!("w{n}")).collect();
        tmux.type_text("unused", &burst.join(" "));
        tmux.wait_text("unused", "w798 w799");
        tmux.keys("unused", &["C-u"]);
        tmux.wait_for("unused", "an empty box", |screen| !screen.contains("w799"));
        tmux.keys("unused", &["C-c"]);
        tmux.keys("unused", &["C-c"]);
        let left = tmux.wait_text("unused", "soba-exited-0");
        assert!(!left.contains("saved —"), "{left}");
        assert!(sandbox.session_files().is_empty());
        tmux.start("live", &soba_command(&sandbox, ""));
        tmux.wait_text("live", "message · /help");
        tmux.type_text("live", "list the numbers");
        tmux.keys("live", &["Enter"]);
        tmux.wait_text("live", "Allow bash?");
        // A letter typed sooner than 400 ms after the prompt appeared goes
        // to the input box (type-ahead must not answer it); a person reads
        // the prompt first.
        std::thread::sleep(Duration::from_millis(600));
        tmux.keys("live", &["y"]);
        tmux.wait_text("live", "Done counting: 1 to 3000.");
        let screen = tmux.wait_text("live", "message · /help");
        assert!(screen.contains("▸ bash: seq 1 3000 (exit 0, "), "{screen}");
        // Each response carried usage: the sidebar's figure is based on it.
        assert!(screen.contains("source   provider_usage"), "{screen}");
        // Ctrl-O shows the tool's output, bounded; PageUp scrolls to it.
        tmux.keys("live", &["C-o"]);
        tmux.wait_for("live", "the expanded output", |screen| {
            screen.contains("│ 200\n") || screen.contains("│ 200 ")
        });
        tmux.wait_text("live", "more lines");
        tmux.keys("live", &["PageUp"]);
        tmux.keys("live", &["PageUp"]);
        tmux.wait_for("live", "the output scrolled up", |screen| {
            !screen.contains("Done counting") && screen.contains("│ 170 ")
        });
        tmux.keys("live", &["C-o"]);
        tmux.keys("live", &["PageDown", "PageDown"]);
        tmux.wait_for("live", "folded tool output", |screen| {
            !screen.contains("more lines") && screen.contains("Done counting: 1 to 3000.")
        });

        // Turn 2 starts with a turn_complete barrier; type while it runs.
        tmux.type_text("live", "summarize them");
        tmux.keys("live", &["Enter"]);
        tmux.wait_text("live", "Compacting context before response · ");
        tmux.type_text("live", "and then stop");
        tmux.keys("live", &["Enter"]);
        tmux.wait_text("live", "⏸ queued: and then stop");
        // Progress is live: the span is summarized in chunks.
        let progress =
            regex::Regex::new(r"Compacting context before response · [1-9][0-9]?%").unwrap();
        let barrier = tmux.wait_for("live", "barrier progress above 0%", |screen| {
            progress.is_match(screen)
        });
        let result = tmux.wait_text("live", "Compacted (turn_complete): ");
        tmux.wait_text("live", "They run from 1 to 3000, one per line.");
        // The queued message becomes the next turn when the current one ends.
        let sent = tmux.wait_text("live", "Stopped as asked.");
        assert!(sent.contains("› and then stop"), "{sent}");
        assert!(!sent.contains("queued: and then stop"), "{sent}");
        tmux.wait_text("live", "message · /help");

        // An idle /compact: its own barrier line, then one result line.
        tmux.type_text("live", "/compact keep the numbers");
        tmux.keys("live", &["Enter"]);
        let compact_barrier = tmux.wait_text("live", "Compacting context · ");
        let compact_result = tmux.wait_text("live", "Compacted (user): ");
        let before_quit = tmux.wait_text("live", "message · /help");

        // Quit with Ctrl-C twice, then resume the same session.
        tmux.keys("live", &["C-c"]);
        tmux.keys("live", &["C-c"]);
        let left = tmux.wait_text("live", "soba-exited-0");
        // The terminal is restored, then one line says how to come back.
        let hint = left
            .lines()
            .find(|line| line.starts_with("session "))
            .unwrap_or_default()
            .trim_end();
        assert!(
            regex::Regex::new(
                r"^session [0-9a-f]{8}… saved — resume with `soba -c` \(or `soba -r [0-9a-f]{8}`\)$"
            )
            .unwrap()
            .is_match(hint),
            "{left}"
        );
        tmux.start("resumed", &soba_command(&sandbox, "-c"));
        tmux.wait_text("resumed", "message · /help");
        let resumed = tmux.wait_for("resumed", "the same history", |screen| {
            conversation(screen) == conversation(&before_quit)
        });
        assert_eq!(conversation(&resumed), conversation(&before_quit));
        // The input history came along: Up recalls the last line sent.
        tmux.keys("resumed", &["Up"]);
        tmux.wait_text("resumed", "│/compact keep the numbers");
        tmux.keys("resumed", &["Up"]);
        tmux.wait_text("resumed", "│and then stop");
        tmux.keys("resumed", &["C-c"]);
        tmux.keys("resumed", &["C-c"]);
        tmux.wait_text("resumed", "soba-exited-0");

        let barrier_line = |screen: &str, marker: &str| {
            screen
                .lines()
                .find(|line| line.contains(marker))
                .unwrap_or_default()
                .trim()
                .to_owned()
        };
        println!("barrier: {}", barrier_line(&barrier, "Compacting context"));
        println!("result:  {}", barrier_line(&result, "Compacted ("));
        println!(
            "barrier: {}",
            barrier_line(&compact_barrier, "Compacting context")
        );
        println!("result:  {}", barrier_line(&compact_result, "Compacted ("));
        assert_eq!(
            sandbox.session_files().len(),
            1,
            "-c resumed the same session"
        );
        drop(server);
    }
}
