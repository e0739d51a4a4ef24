//! Files come back after a compaction (issue 32, item 3): the request after
//! a capsule carries the capsule, then the current content of the files
//! modified before it, read from the workspace when the capsule was made
//! and rebuilt from the log on resume.

use serde_json::json;
use soba_core::capsule::Rehydration;
use soba_core::config::CompactionConfig;
use soba_core::{Block, EntryBody, Message};
use soba_engine::barrier::{Forced, Preflight};
use soba_engine::event::Outcome;
use tokio_util::sync::CancellationToken;

use crate::harness::small_config;
use crate::rig::{Rig, RigOptions, Step};

fn options() -> RigOptions {
    RigOptions {
        compaction: CompactionConfig {
            // Only the `/compact` below compacts.
            auto: false,
            ..small_config()
        },
        n_files: 12,
        record_requests: true,
        ..RigOptions::default()
    }
}

/// The text blocks of the capsule's message in the newest request.
fn capsule_blocks(rig: &Rig) -> Vec<String> {
    let requests = rig.client.requests.lock().unwrap();
    let request = requests.last().expect("a request was sent");
    let capsule = request
        .messages
        .iter()
        .find(|message| message.text().starts_with("[Context capsule"))
        .expect("the request carries the capsule");
    capsule
        .content
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The model input as the session would send it: the capsule's message,
/// then every message after it.
async fn model_input(rig: &Rig) -> (Message, Vec<Message>) {
    let core = rig.core.lock().await;
    let view = core.live().view();
    let capsule = view
        .capsule
        .and_then(|capsule| capsule.rendered.cloned())
        .expect("a rendered capsule");
    let messages = view
        .messages
        .iter()
        .map(|message| message.message.clone())
        .collect();
    (capsule, messages)
}

#[tokio::test]
async fn the_request_after_a_capsule_carries_the_current_files_and_resume_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let (before, written_rehydration) = {
        let rig = Rig::open(dir.path(), options());
        let mut steps = vec![
            Step::call(
                "write_file",
                json!({"path": "src/app.py", "content": "print('v1')\n"}),
            ),
            Step::call(
                "write_file",
                json!({"path": "src/util.py", "content": "def util():\n    return 1\n"}),
            ),
            Step::call(
                "write_file",
                json!({"path": "src/gone.py", "content": "x = 1\n"}),
            ),
        ];
        steps.extend((0..8).map(|idx| Step::read(&format!("data/file{idx:02}.txt"))));
        steps.push(Step::text("done"));
        rig.client.push(steps);
        rig.agent.run_turn("build the app", &cancel).await.unwrap();

        // Edited after the compacted span's last write, and one deleted:
        // the disk wins, the gone file is skipped.
        let ws = rig.agent.tool_context.workspace().root().to_path_buf();
        std::fs::write(ws.join("src/app.py"), "print('v2, edited by hand')\n").unwrap();
        std::fs::remove_file(ws.join("src/gone.py")).unwrap();

        let result = rig
            .agent
            .barrier
            .preflight(Some(Forced::User { instructions: None }), &cancel)
            .await
            .unwrap();
        let Preflight::Compacted(end) = result else {
            panic!("/compact completes: {result:?}")
        };
        assert_eq!(end.outcome, Outcome::Completed);

        let rehydration: Rehydration = {
            let core = rig.core.lock().await;
            let capsule = core
                .path()
                .iter()
                .rev()
                .find_map(|entry| match &entry.body {
                    EntryBody::Capsule(capsule) => Some(capsule.clone()),
                    _ => None,
                })
                .expect("a capsule entry");
            capsule.rehydrated.clone()
        };
        let shown: Vec<(&str, &str)> = rehydration
            .files
            .iter()
            .map(|file| (file.path.as_str(), file.text.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("src/util.py", "def util():\n    return 1"),
                ("src/app.py", "print('v2, edited by hand')"),
            ],
            "newest change first, the disk's content, the gone file skipped"
        );
        assert!(rehydration.paths_only.is_empty());

        rig.client.push([Step::text("continuing")]);
        rig.agent.run_turn("go on", &cancel).await.unwrap();
        let blocks = capsule_blocks(&rig);
        assert_eq!(blocks.len(), 3, "{blocks:#?}");
        assert!(blocks[0].starts_with("[Context capsule · user]"));
        assert!(blocks[1].starts_with("[File after the compaction · src/util.py]\n"));
        assert!(blocks[2].starts_with("[File after the compaction · src/app.py]\n"));
        assert!(blocks[2].contains("\n```\nprint('v2, edited by hand')\n```"));
        (model_input(&rig).await, rehydration)
    };

    // The disk changes again; the resumed session does not read it.
    let ws = dir.path().join("workspace");
    std::fs::write(ws.join("src/app.py"), "print('v3')\n").unwrap();
    std::fs::remove_file(ws.join("src/util.py")).unwrap();
    let rig = Rig::open(dir.path(), options());
    let after = model_input(&rig).await;
    assert_eq!(after, before, "resume rebuilds the identical input");
    let text = after.0.text();
    assert!(text.contains("print('v2, edited by hand')"));
    assert!(!text.contains("v3"));
    assert_eq!(written_rehydration.files.len(), 2);
}
