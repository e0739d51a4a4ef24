//! Proptest strategies for every entry type, shared by the log tests.

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value};
use soba_core::capsule::{
    Answer, BoundaryTruncation, ImportedCapsule, LocalSections, Narrative, NativeContinuation,
    OverflowRecord, PlanItem, PlanStatus, RehydratedFile, Rehydration, SummaryScope, Verification,
};
use soba_core::entry::{SkillAction, SkillEntry, StoredTokens};
use soba_core::{
    Block, Capsule, CapsuleState, CheckpointKind, ContextEntry, ContextSource, Encoding, Entry,
    EntryBody, EntryId, IdKind, Image, ImageSource, Message, MessageEntry, MessageOrigin, Quality,
    ResultPart, Role, TokenCount, ToolInput, ToolResult, ToolUse, Trigger, Usage,
};

/// Short text with JSON escapes, controls and non-ASCII characters.
pub fn text() -> impl Strategy<Value = String> {
    "[a-z \"\\\\\n\t\u{1}é✓🦀{}]{0,12}"
}

pub fn entry_id() -> impl Strategy<Value = EntryId> {
    (any::<bool>(), any::<u128>()).prop_map(|(capsule, n)| {
        EntryId::from_uuid(
            if capsule {
                IdKind::Capsule
            } else {
                IdKind::Entry
            },
            n,
        )
    })
}

fn json_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        text().prop_map(Value::from),
    ]
}

fn tool_input() -> impl Strategy<Value = ToolInput> {
    (
        btree_map("[a-z]{1,6}", json_scalar(), 0..4),
        option::of(text()),
    )
        .prop_map(|(map, raw)| ToolInput::with_raw(map.into_iter().collect::<Map<_, _>>(), raw))
}

fn image() -> impl Strategy<Value = Image> {
    (
        "image/(png|jpeg)",
        prop_oneof![
            text().prop_map(ImageSource::Data),
            text().prop_map(ImageSource::Url)
        ],
    )
        .prop_map(|(media_type, source)| Image { media_type, source })
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        text().prop_map(Block::Text),
        (text(), option::of(text()))
            .prop_map(|(text, signature)| Block::Thinking { text, signature }),
        (text(), text(), tool_input()).prop_map(|(id, name, input)| Block::ToolUse(ToolUse {
            id,
            name,
            input
        })),
        (
            text(),
            vec(
                prop_oneof![
                    text().prop_map(ResultPart::Text),
                    image().prop_map(ResultPart::Image)
                ],
                0..3
            ),
            any::<bool>()
        )
            .prop_map(|(tool_use_id, content, is_error)| {
                Block::ToolResult(ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                })
            }),
        image().prop_map(Block::Image),
    ]
}

fn usage() -> impl Strategy<Value = Usage> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(input, cache_read, cache_write, output, reasoning)| Usage {
                input: input.into(),
                cache_read: cache_read.into(),
                cache_write: cache_write.into(),
                output: output.into(),
                reasoning: reasoning.into(),
            },
        )
}

pub fn message() -> impl Strategy<Value = Message> {
    (
        prop_oneof![
            Just(Role::System),
            Just(Role::User),
            Just(Role::Assistant),
            Just(Role::Tool)
        ],
        vec(block(), 0..4),
        prop_oneof![
            Just(MessageOrigin::Typed),
            Just(MessageOrigin::Injected),
            Just(MessageOrigin::Demonstration),
            Just(MessageOrigin::Observation),
            Just(MessageOrigin::Summary),
            Just(MessageOrigin::Marker),
        ],
        option::of(text()),
        option::of(usage()),
        option::of(any::<u64>()),
    )
        .prop_map(
            |(role, content, origin, model, usage, request_tokens_local)| Message {
                role,
                content,
                origin,
                model,
                usage,
                request_tokens_local,
            },
        )
}

fn stored_tokens() -> impl Strategy<Value = StoredTokens> {
    (any::<bool>(), any::<u64>(), any::<bool>()).prop_map(|(cl100k, n, estimated)| StoredTokens {
        encoding: if cl100k {
            Encoding::Cl100kBase
        } else {
            Encoding::O200kBase
        },
        n: TokenCount::new(n),
        estimated,
    })
}

fn context() -> impl Strategy<Value = ContextEntry> {
    (any::<bool>(), text(), "[0-9a-f]{64}", text()).prop_map(|(agents, path, sha256, text)| {
        ContextEntry {
            source: if agents {
                ContextSource::AgentsMd
            } else {
                ContextSource::CapsuleFile
            },
            path,
            sha256,
            text,
        }
    })
}

fn skill(action: impl Strategy<Value = SkillAction>) -> impl Strategy<Value = SkillEntry> {
    (text(), action, "[0-9a-f]{64}", text()).prop_map(|(name, action, sha256, text)| SkillEntry {
        name,
        action,
        sha256,
        text,
    })
}

fn trigger() -> impl Strategy<Value = Trigger> {
    prop_oneof![
        Just(Trigger::HardLimit),
        Just(Trigger::Milestone),
        Just(Trigger::PlanPivot),
        Just(Trigger::TurnComplete),
        Just(Trigger::AutoThreshold),
        Just(Trigger::User),
        Just(Trigger::ContextOverflow),
        Just(Trigger::Imported),
    ]
}

fn checkpoint_kind() -> impl Strategy<Value = CheckpointKind> {
    prop_oneof![
        Just(CheckpointKind::Milestone),
        Just(CheckpointKind::PlanPivot)
    ]
}

fn narrative() -> impl Strategy<Value = Narrative> {
    vec(text(), 8).prop_map(|s| Narrative {
        goal: s[0].clone(),
        constraints: s[1].clone(),
        done: s[2].clone(),
        in_progress: s[3].clone(),
        pending: s[4].clone(),
        decisions: s[5].clone(),
        blockers: s[6].clone(),
        next_steps: s[7].clone(),
    })
}

fn local_sections() -> impl Strategy<Value = LocalSections> {
    (
        text(),
        vec(text(), 0..3),
        vec(text(), 0..3),
        any::<u64>(),
        vec(text(), 0..3),
        vec(
            (text(), any::<bool>(), option::of(any::<i64>())).prop_map(
                |(command, passed, exit_code)| Verification {
                    command,
                    passed,
                    exit_code,
                },
            ),
            0..3,
        ),
        vec(text(), 0..3),
        vec((checkpoint_kind(), text()), 0..3),
        vec(text(), 0..3),
    )
        .prop_map(
            |(
                original_task,
                latest_instructions,
                files_read,
                files_read_more,
                files_modified,
                verification,
                unresolved_errors,
                checkpoints,
                active_skills,
            )| LocalSections {
                original_task,
                latest_instructions,
                files_read,
                files_read_more,
                files_modified,
                verification,
                unresolved_errors,
                checkpoints,
                active_skills,
                ..LocalSections::default()
            },
        )
        .prop_flat_map(|local| {
            (
                Just(local),
                text(),
                vec(text(), 0..3),
                any::<u64>(),
                vec((text(), 0..3u8), 0..3),
                text(),
                vec((text(), text()), 0..3),
            )
        })
        .prop_map(
            |(mut local, goal, constraints, constraints_more, plan, plan_explanation, answers)| {
                local.goal = goal;
                local.constraints = constraints;
                local.constraints_more = constraints_more;
                local.plan = plan
                    .into_iter()
                    .map(|(text, status)| PlanItem {
                        text,
                        status: match status {
                            0 => PlanStatus::Pending,
                            1 => PlanStatus::InProgress,
                            _ => PlanStatus::Completed,
                        },
                    })
                    .collect();
                local.plan_explanation = plan_explanation;
                local.answers = answers
                    .into_iter()
                    .map(|(request, text)| Answer { request, text })
                    .collect();
                local
            },
        )
}

fn capsule_state() -> impl Strategy<Value = CapsuleState> {
    (
        text(),
        btree_map(text(), 0.5f64..2.0, 0..3),
        (any::<bool>(), option::of(any::<bool>())),
        vec(skill(Just(SkillAction::Activate)), 0..2),
        option::of(context()),
        vec(text(), 0..2),
    )
        .prop_map(
            |(
                model,
                calibration,
                (auto_compact, auto_compact_override),
                skills,
                pinned_agents_md,
                pinned_system,
            )| {
                CapsuleState {
                    model,
                    calibration: calibration.into_iter().collect(),
                    auto_compact,
                    auto_compact_override,
                    // Grants in a capsule round-trip like the override; a
                    // fixed value keeps the strategy's tuple small.
                    approvals: auto_compact_override.map(|_| soba_core::ApprovalGrants {
                        tools: ["write_file".to_owned()].into_iter().collect(),
                        bash_words: ["cargo".to_owned()].into_iter().collect(),
                    }),
                    skills,
                    pinned_agents_md,
                    pinned_system,
                }
            },
        )
}

pub fn capsule(
    first_kept: impl Strategy<Value = Option<EntryId>>,
) -> impl Strategy<Value = Capsule> {
    let header = (
        trigger(),
        any::<bool>(),
        first_kept,
        option::of(
            (
                entry_id(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
            )
                .prop_map(|(entry_id, head_chars, tail_chars, omitted_chars, kept)| {
                    BoundaryTruncation {
                        entry_id,
                        head_chars,
                        tail_chars,
                        omitted_chars,
                        kept_tokens: TokenCount::new(kept),
                    }
                }),
        ),
        any::<u64>(),
        any::<u64>(),
        text(),
        option::of(entry_id()),
    );
    let extras = (
        capsule_state(),
        option::of(text()),
        option::of((text(), text(), text(), text()).prop_map(
            |(provider, model, endpoint_fingerprint, item)| NativeContinuation {
                provider,
                model,
                endpoint_fingerprint,
                item,
            },
        )),
        option::of((option::of(any::<u64>()), any::<u64>()).prop_map(
            |(stated_prompt, request_tokens_local)| OverflowRecord {
                stated_prompt,
                request_tokens_local,
            },
        )),
        option::of(
            (text(), text())
                .prop_map(|(agent, original_id)| ImportedCapsule { agent, original_id }),
        ),
        narrative(),
        option::of(text()),
        local_sections(),
        text(),
    );
    let scope = option::of(
        (
            option::of(entry_id()),
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(from_entry_id, partial, chunks, summarized, facts_only)| {
                SummaryScope {
                    from_entry_id,
                    partial,
                    chunks,
                    summarized_tokens: TokenCount::new(summarized),
                    facts_only_tokens: TokenCount::new(facts_only),
                }
            }),
    );
    let rehydrated = (
        proptest::collection::vec(
            (text(), text(), any::<u64>(), any::<u64>()).prop_map(
                |(path, text, total_lines, shown)| RehydratedFile {
                    path,
                    text,
                    total_lines,
                    shown_lines: shown.min(total_lines),
                },
            ),
            0..3,
        ),
        proptest::collection::vec(text(), 0..3),
    )
        .prop_map(|(files, paths_only)| Rehydration { files, paths_only });
    (header, extras, scope, rehydrated).prop_map(
        |(
            (
                trigger,
                degraded,
                first_kept_entry_id,
                boundary_truncation,
                before,
                after,
                summarizer,
                previous,
            ),
            (
                state,
                instructions,
                native,
                overflow,
                imported,
                narrative,
                earlier_narrative,
                local,
                markdown,
            ),
            scope,
            rehydrated,
        )| Capsule {
            rehydrated,
            trigger,
            quality: if degraded {
                Quality::Degraded
            } else {
                Quality::Full
            },
            first_kept_entry_id,
            boundary_truncation,
            tokens_before: TokenCount::new(before),
            tokens_after: TokenCount::new(after),
            summarizer,
            previous_capsule_id: previous,
            state,
            instructions,
            native,
            overflow,
            imported,
            scope,
            narrative,
            earlier_narrative,
            local,
            markdown,
        },
    )
}

pub fn body() -> impl Strategy<Value = EntryBody> {
    prop_oneof![
        (message(), option::of(stored_tokens()))
            .prop_map(|(message, tokens)| EntryBody::Message(MessageEntry { message, tokens })),
        context().prop_map(EntryBody::Context),
        capsule(option::of(entry_id())).prop_map(|capsule| EntryBody::Capsule(Box::new(capsule))),
        (entry_id(), any::<u64>(), option::of(vec(text(), 0..3))).prop_map(
            |(pruned_through, n, stubbed_calls)| EntryBody::Hygiene {
                pruned_through,
                reclaimed_tokens: TokenCount::new(n),
                stubbed_calls,
            }
        ),
        (checkpoint_kind(), text()).prop_map(|(kind, note)| EntryBody::Checkpoint { kind, note }),
        entry_id().prop_map(|target| EntryBody::Leaf { target }),
        text().prop_map(|model| EntryBody::ModelChange { model }),
        (
            option::of(any::<bool>()),
            option::of((
                proptest::collection::btree_set("[a-z_]{1,8}", 0..3),
                proptest::collection::btree_set("[a-z.-]{1,8}", 0..3),
            ))
        )
            .prop_map(|(auto_compact, approvals)| EntryBody::ConfigChange {
                auto_compact,
                approvals: approvals
                    .map(|(tools, bash_words)| soba_core::ApprovalGrants { tools, bash_words }),
            }),
        skill(prop_oneof![
            Just(SkillAction::Activate),
            Just(SkillAction::Deactivate)
        ])
        .prop_map(EntryBody::Skill),
        "x_[a-z]{1,8}".prop_map(|type_name| EntryBody::Unknown { type_name }),
    ]
}

pub fn entry() -> impl Strategy<Value = Entry> {
    (entry_id(), option::of(entry_id()), text(), body()).prop_map(
        |(id, parent_id, timestamp, body)| Entry {
            id,
            parent_id,
            timestamp,
            body,
        },
    )
}

/// Returns one deterministic capsule keeping from `first_kept`.
pub fn sample_capsule(first_kept: Option<EntryId>) -> Capsule {
    capsule(Just(first_kept))
        .new_tree(&mut TestRunner::deterministic())
        .expect("a capsule")
        .current()
}
