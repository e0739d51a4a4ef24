//! Conversions between the wire records and `soba-core`'s domain types,
//! both ways, with the issues a record that does not fit its type gives.

use super::decode::{json_kind, optional_id, parse_id, parse_name, unknown_value};
use super::*;

impl BodyRecord {
    /// Builds the wire body of a domain body; fails on a non-finite
    /// calibration factor, which JSON cannot hold.
    pub fn from_body(body: &EntryBody) -> Result<Self, String> {
        Ok(match body {
            EntryBody::Message(entry) => BodyRecord::Message(MessageRecord::from_entry(entry)),
            EntryBody::Context(context) => {
                BodyRecord::Context(ContextRecord::from_context(context))
            }
            EntryBody::Capsule(capsule) => {
                BodyRecord::Capsule(Box::new(CapsuleRecord::from_capsule(capsule)?))
            }
            EntryBody::Hygiene {
                pruned_through,
                reclaimed_tokens,
                stubbed_calls,
            } => BodyRecord::Hygiene(HygieneRecord {
                pruned_through_entry_id: pruned_through.as_str().to_owned(),
                reclaimed_tokens: reclaimed_tokens.get(),
                stubbed_calls: stubbed_calls.clone(),
            }),
            EntryBody::Checkpoint { kind, note } => BodyRecord::Checkpoint(CheckpointRecord {
                kind: kind.as_str().to_owned(),
                note: note.clone(),
            }),
            EntryBody::Leaf { target } => BodyRecord::Leaf(LeafRecord {
                target_id: target.as_str().to_owned(),
            }),
            EntryBody::ModelChange { model } => BodyRecord::ModelChange(ModelChangeRecord {
                model: model.clone(),
            }),
            EntryBody::ConfigChange {
                auto_compact,
                approvals,
            } => BodyRecord::ConfigChange(ConfigChangeRecord {
                auto_compact: *auto_compact,
                approvals: approvals.as_ref().map(ApprovalGrantsRecord::from_grants),
            }),
            EntryBody::Skill(skill) => BodyRecord::Skill(SkillRecord {
                name: skill.name.clone(),
                action: skill_action_name(skill.action).to_owned(),
                sha256: skill.sha256.clone(),
                text: skill.text.clone(),
            }),
            EntryBody::Unknown { type_name } => BodyRecord::Unknown {
                type_name: type_name.clone(),
            },
            EntryBody::Damaged { type_name, .. } => {
                return Err(format!(
                    "a damaged {type_name:?} entry is a placeholder read from a log, never written"
                ));
            }
        })
    }

    /// Converts the wire body to the domain body, checking names and ids.
    /// Repairs (an unknown enum value read as forward-compatible data) go
    /// to `issues`; the error is why the body cannot be used at all.
    pub fn into_body(self, issues: &mut Vec<FieldIssue>) -> Result<EntryBody, FieldIssue> {
        Ok(match self {
            BodyRecord::Message(record) => EntryBody::Message(record.into_entry(issues)?),
            BodyRecord::Context(record) => EntryBody::Context(record.into_context()?),
            BodyRecord::Capsule(record) => {
                EntryBody::Capsule(Box::new(record.into_capsule(issues)?))
            }
            BodyRecord::Hygiene(record) => EntryBody::Hygiene {
                pruned_through: parse_id("prunedThroughEntryId", &record.pruned_through_entry_id)?,
                reclaimed_tokens: TokenCount::new(record.reclaimed_tokens),
                stubbed_calls: record.stubbed_calls,
            },
            BodyRecord::Checkpoint(record) => EntryBody::Checkpoint {
                kind: parse_name("kind", &record.kind, CheckpointKind::parse)?,
                note: record.note,
            },
            BodyRecord::Leaf(record) => EntryBody::Leaf {
                target: parse_id("targetId", &record.target_id)?,
            },
            BodyRecord::ModelChange(record) => EntryBody::ModelChange {
                model: record.model,
            },
            BodyRecord::ConfigChange(record) => EntryBody::ConfigChange {
                auto_compact: record.auto_compact,
                approvals: record.approvals.map(ApprovalGrantsRecord::into_grants),
            },
            BodyRecord::Skill(record) => EntryBody::Skill(SkillEntry {
                name: record.name,
                action: parse_name("action", &record.action, parse_skill_action)?,
                sha256: record.sha256,
                text: record.text,
            }),
            BodyRecord::Unknown { type_name } => EntryBody::Unknown { type_name },
        })
    }
}

/// Returns the wire name of a skill action.
pub fn skill_action_name(action: SkillAction) -> &'static str {
    match action {
        SkillAction::Activate => "activate",
        SkillAction::Deactivate => "deactivate",
    }
}

/// Parses the wire name of a skill action.
pub fn parse_skill_action(name: &str) -> Option<SkillAction> {
    match name {
        "activate" => Some(SkillAction::Activate),
        "deactivate" => Some(SkillAction::Deactivate),
        _ => None,
    }
}

impl MessageRecord {
    /// Builds the record of a message entry.
    pub fn from_entry(entry: &MessageEntry) -> Self {
        let message = &entry.message;
        MessageRecord {
            role: message.role.as_str().to_owned(),
            origin: (message.origin != MessageOrigin::Typed)
                .then(|| message.origin.as_str().to_owned()),
            content: message
                .content
                .iter()
                .map(BlockRecord::from_block)
                .collect(),
            model: message.model.clone(),
            usage: message.usage.map(|usage| UsageRecord {
                input: usage.input,
                cache_read: usage.cache_read,
                cache_write: usage.cache_write,
                output: usage.output,
                reasoning: usage.reasoning,
            }),
            request_tokens_local: message.request_tokens_local,
            tokens: entry.tokens.map(|tokens| TokensRecord {
                encoding: tokens.encoding.as_str().to_owned(),
                n: tokens.n.get(),
                estimated: tokens.estimated,
            }),
        }
    }

    /// Converts the record to a message entry. A count in a vocabulary this
    /// version does not know is dropped (it would be re-counted anyway); an
    /// unknown `origin` reads as `injected` (not a real user message), with
    /// an issue.
    pub fn into_entry(self, issues: &mut Vec<FieldIssue>) -> Result<MessageEntry, FieldIssue> {
        let role = parse_name("role", &self.role, Role::parse)?;
        let origin = match &self.origin {
            Some(name) => MessageOrigin::parse(name).unwrap_or_else(|| {
                issues.push(FieldIssue::new(
                    "origin",
                    format!(
                        "{}; read as \"injected\" (not a real user message)",
                        unknown_value(name)
                    ),
                ));
                MessageOrigin::Injected
            }),
            None => MessageOrigin::Typed,
        };
        let mut content = self
            .content
            .into_iter()
            .enumerate()
            .map(|(idx, block)| {
                block.into_block().map_err(|problem| FieldIssue {
                    field: format!("content[{idx}]"),
                    ..problem
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The list grew by doubling while it was read (and the blocks took
        // the records' room in place): most messages hold one or two
        // blocks, and a long history held in memory would carry the spare
        // room of every one.
        content.shrink_to_fit();
        let message = Message {
            role,
            content,
            origin,
            model: self.model,
            usage: self.usage.map(|usage| Usage {
                input: usage.input,
                cache_read: usage.cache_read,
                cache_write: usage.cache_write,
                output: usage.output,
                reasoning: usage.reasoning,
            }),
            request_tokens_local: self.request_tokens_local,
        };
        let tokens = self.tokens.and_then(|tokens| {
            Encoding::parse(&tokens.encoding).map(|encoding| StoredTokens {
                encoding,
                n: TokenCount::new(tokens.n),
                estimated: tokens.estimated,
            })
        });
        Ok(MessageEntry { message, tokens })
    }
}

impl BlockRecord {
    /// Builds the record of a block.
    pub fn from_block(block: &Block) -> Self {
        match block {
            Block::Text(text) => BlockRecord::Text { text: text.clone() },
            Block::Thinking { text, signature } => BlockRecord::Thinking {
                thinking: text.clone(),
                signature: signature.clone(),
            },
            Block::ToolUse(call) => BlockRecord::ToolUse {
                id: call.id.clone(),
                name: call.name.clone(),
                input: Value::Object(call.input.object().clone()),
                raw_input: call.input.raw().map(str::to_owned),
            },
            Block::ToolResult(result) => BlockRecord::ToolResult {
                tool_use_id: result.tool_use_id.clone(),
                content: result
                    .content
                    .iter()
                    .map(|part| match part {
                        ResultPart::Text(text) => ResultPartRecord::Text { text: text.clone() },
                        ResultPart::Image(image) => {
                            ResultPartRecord::Image(ImageRecord::from_image(image))
                        }
                    })
                    .collect(),
                is_error: result.is_error,
            },
            Block::Image(image) => BlockRecord::Image(ImageRecord::from_image(image)),
        }
    }

    /// Converts the record to a block. A non-object `input` is wrapped as
    /// `{"value": …}` with its text kept as the raw input.
    pub fn into_block(self) -> Result<Block, FieldIssue> {
        Ok(match self {
            BlockRecord::Text { text } => Block::Text(text),
            BlockRecord::Thinking {
                thinking,
                signature,
            } => Block::Thinking {
                text: thinking,
                signature,
            },
            BlockRecord::ToolUse {
                id,
                name,
                input,
                raw_input,
            } => {
                let input = match input {
                    Value::Object(map) => ToolInput::with_raw(map, raw_input),
                    other => {
                        let wrapped = ToolInput::from_value(other);
                        match raw_input {
                            Some(raw) => ToolInput::with_raw(wrapped.object().clone(), Some(raw)),
                            None => wrapped,
                        }
                    }
                };
                Block::ToolUse(ToolUse { id, name, input })
            }
            BlockRecord::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Block::ToolResult(ToolResult {
                tool_use_id,
                content: content
                    .into_iter()
                    .map(|part| match part {
                        ResultPartRecord::Text { text } => Ok(ResultPart::Text(text)),
                        ResultPartRecord::Image(image) => image.into_image().map(ResultPart::Image),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                is_error,
            }),
            BlockRecord::Image(image) => Block::Image(image.into_image()?),
        })
    }
}

impl ImageRecord {
    /// Builds the record of an image.
    pub fn from_image(image: &Image) -> Self {
        let (data, url) = match &image.source {
            ImageSource::Data(data) => (Some(data.clone()), None),
            ImageSource::Url(url) => (None, Some(url.clone())),
        };
        ImageRecord {
            media_type: image.media_type.clone(),
            data,
            url,
        }
    }

    /// Converts the record to an image; exactly one of `data` and `url` must be set.
    pub fn into_image(self) -> Result<Image, FieldIssue> {
        let source = match (self.data, self.url) {
            (Some(data), None) => ImageSource::Data(data),
            (None, Some(url)) => ImageSource::Url(url),
            _ => {
                return Err(FieldIssue::new(
                    "",
                    "an image needs exactly one of `data` and `url`",
                ));
            }
        };
        Ok(Image {
            media_type: self.media_type,
            source,
        })
    }
}

impl ContextRecord {
    /// Builds the record of a context entry.
    pub fn from_context(context: &ContextEntry) -> Self {
        ContextRecord {
            source: context.source.as_str().to_owned(),
            path: context.path.clone(),
            sha256: context.sha256.clone(),
            text: context.text.clone(),
        }
    }

    /// Converts the record to a context entry.
    pub fn into_context(self) -> Result<ContextEntry, FieldIssue> {
        Ok(ContextEntry {
            source: parse_name("source", &self.source, ContextSource::parse)?,
            path: self.path,
            sha256: self.sha256,
            text: self.text,
        })
    }
}

impl CapsuleRecord {
    /// Builds the record of a capsule; fails on a non-finite calibration factor.
    pub fn from_capsule(capsule: &Capsule) -> Result<Self, String> {
        let mut calibration = Map::new();
        for (model, factor) in &capsule.state.calibration {
            let number = serde_json::Number::from_f64(*factor).ok_or_else(|| {
                format!("calibration factor {factor} of {model} is not a finite number")
            })?;
            calibration.insert(model.clone(), Value::Number(number));
        }
        let state = &capsule.state;
        let narrative = &capsule.narrative;
        let local = &capsule.local;
        Ok(CapsuleRecord {
            trigger: capsule.trigger.as_str().to_owned(),
            quality: capsule.quality.as_str().to_owned(),
            first_kept_entry_id: capsule
                .first_kept_entry_id
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            boundary_truncation: capsule.boundary_truncation.as_ref().map(|cut| {
                BoundaryTruncationRecord {
                    entry_id: cut.entry_id.as_str().to_owned(),
                    head_chars: cut.head_chars,
                    tail_chars: cut.tail_chars,
                    omitted_chars: cut.omitted_chars,
                    kept_tokens: cut.kept_tokens.get(),
                }
            }),
            tokens_before: capsule.tokens_before.get(),
            tokens_after: capsule.tokens_after.get(),
            summarizer: capsule.summarizer.clone(),
            previous_capsule_id: capsule
                .previous_capsule_id
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            state: CapsuleStateRecord {
                model: state.model.clone(),
                calibration,
                auto_compact: state.auto_compact,
                auto_compact_override: state.auto_compact_override,
                approvals: state
                    .approvals
                    .as_ref()
                    .map(ApprovalGrantsRecord::from_grants),
                skills: state
                    .skills
                    .iter()
                    .map(|skill| StateSkillRecord {
                        name: skill.name.clone(),
                        sha256: skill.sha256.clone(),
                        text: skill.text.clone(),
                    })
                    .collect(),
                pinned: PinnedRecord {
                    agents_md: state
                        .pinned_agents_md
                        .as_ref()
                        .map(ContextRecord::from_context),
                    system: state.pinned_system.clone(),
                },
            },
            instructions: capsule.instructions.clone(),
            native: capsule.native.as_ref().map(|native| NativeRecord {
                provider: native.provider.clone(),
                model: native.model.clone(),
                endpoint_fingerprint: native.endpoint_fingerprint.clone(),
                item: native.item.clone(),
            }),
            overflow: capsule.overflow.map(|overflow| OverflowRecordWire {
                stated_prompt: overflow.stated_prompt,
                request_tokens_local: overflow.request_tokens_local,
            }),
            imported: capsule
                .imported
                .as_ref()
                .map(|imported| ImportedCapsuleRecord {
                    agent: imported.agent.clone(),
                    original_id: imported.original_id.clone(),
                }),
            summary_scope: capsule.scope.as_ref().map(|scope| {
                serde_json::json!(SummaryScopeRecord {
                    from_entry_id: scope
                        .from_entry_id
                        .as_ref()
                        .map(|id| id.as_str().to_owned()),
                    partial: scope.partial,
                    chunks: scope.chunks,
                    summarized_tokens: scope.summarized_tokens.get(),
                    facts_only_tokens: scope.facts_only_tokens.get(),
                })
            }),
            narrative: NarrativeRecord {
                goal: narrative.goal.clone(),
                constraints: narrative.constraints.clone(),
                done: narrative.done.clone(),
                in_progress: narrative.in_progress.clone(),
                pending: narrative.pending.clone(),
                decisions: narrative.decisions.clone(),
                blockers: narrative.blockers.clone(),
                next_steps: narrative.next_steps.clone(),
            },
            earlier_narrative: capsule.earlier_narrative.clone(),
            rehydrated: (!capsule.rehydrated.is_empty()).then(|| {
                serde_json::json!(RehydratedRecord {
                    files: capsule
                        .rehydrated
                        .files
                        .iter()
                        .map(|file| RehydratedFileRecord {
                            path: file.path.clone(),
                            text: file.text.clone(),
                            total_lines: file.total_lines,
                            shown_lines: file.shown_lines,
                        })
                        .collect(),
                    paths_only: capsule.rehydrated.paths_only.clone(),
                })
            }),
            local: LocalSectionsRecord {
                original_task: local.original_task.clone(),
                latest_instructions: local.latest_instructions.clone(),
                files_read: local.files_read.clone(),
                files_read_more: local.files_read_more,
                files_modified: local.files_modified.clone(),
                verification: local
                    .verification
                    .iter()
                    .map(|check| VerificationRecord {
                        command: check.command.clone(),
                        passed: check.passed,
                        exit_code: check.exit_code,
                    })
                    .collect(),
                unresolved_errors: local.unresolved_errors.clone(),
                goal: local.goal.clone(),
                constraints: local.constraints.clone(),
                constraints_more: local.constraints_more,
                plan: local
                    .plan
                    .iter()
                    .map(|item| PlanStepRecord {
                        step: item.text.clone(),
                        status: item.status.as_str().to_owned(),
                    })
                    .collect(),
                plan_explanation: local.plan_explanation.clone(),
                answers: local
                    .answers
                    .iter()
                    .map(|answer| AnswerRecord {
                        request: answer.request.clone(),
                        text: answer.text.clone(),
                    })
                    .collect(),
                failing_before_edits: local.failing_before_edits.clone(),
                files_edit_failed: local.files_edit_failed.clone(),
                checkpoints: local
                    .checkpoints
                    .iter()
                    .map(|(kind, note)| CheckpointRecord {
                        kind: kind.as_str().to_owned(),
                        note: note.clone(),
                    })
                    .collect(),
                active_skills: local.active_skills.clone(),
            },
            markdown: capsule.markdown.clone(),
        })
    }

    /// Converts the record to a capsule. Skills in `state` are active ones.
    /// What does not fit but leaves the capsule usable is repaired, with an
    /// issue: an unknown `trigger` or `quality` reads as `unknown`, a
    /// calibration factor that is not a number, a pinned `AGENTS.md` or a
    /// checkpoint of unknown kind and an unreadable `previousCapsuleId` or
    /// `boundaryTruncation` are left out. An unreadable `firstKeptEntryId`
    /// makes the capsule unusable (its retained tail is unknown).
    pub fn into_capsule(self, issues: &mut Vec<FieldIssue>) -> Result<Capsule, FieldIssue> {
        let mut calibration = Vec::with_capacity(self.state.calibration.len());
        for (model, factor) in self.state.calibration {
            match factor.as_f64() {
                Some(factor) => calibration.push((model, factor)),
                None => issues.push(FieldIssue::new(
                    format!("state.calibration.{model}"),
                    format!(
                        "expected a number, found {}; left out (the model's factor starts from its seed)",
                        json_kind(&factor)
                    ),
                )),
            }
        }
        let pinned_agents_md = match self.state.pinned.agents_md.map(ContextRecord::into_context) {
            Some(Ok(context)) => Some(context),
            Some(Err(problem)) => {
                issues.push(FieldIssue::new(
                    "state.pinned.agentsMd",
                    format!("{problem}; left out"),
                ));
                None
            }
            None => None,
        };
        let mut checkpoints = Vec::with_capacity(self.local.checkpoints.len());
        for (idx, record) in self.local.checkpoints.into_iter().enumerate() {
            match CheckpointKind::parse(&record.kind) {
                Some(kind) => checkpoints.push((kind, record.note)),
                None => issues.push(FieldIssue::new(
                    format!("local.checkpoints[{idx}].kind"),
                    format!(
                        "{}; the checkpoint is left out",
                        unknown_value(&record.kind)
                    ),
                )),
            }
        }
        let boundary_truncation = match self.boundary_truncation {
            Some(cut) => match parse_id("boundaryTruncation.entryId", &cut.entry_id) {
                Ok(entry_id) => Some(BoundaryTruncation {
                    entry_id,
                    head_chars: cut.head_chars,
                    tail_chars: cut.tail_chars,
                    omitted_chars: cut.omitted_chars,
                    kept_tokens: TokenCount::new(cut.kept_tokens),
                }),
                Err(problem) => {
                    issues.push(FieldIssue {
                        problem: format!(
                            "{}; left out (the first kept message is sent whole)",
                            problem.problem
                        ),
                        ..problem
                    });
                    None
                }
            },
            None => None,
        };
        let trigger = Trigger::parse(&self.trigger).unwrap_or_else(|| {
            issues.push(FieldIssue::new(
                "trigger",
                format!(
                    "{}; read as \"unknown\" (neither soft nor forced)",
                    unknown_value(&self.trigger)
                ),
            ));
            Trigger::Unknown
        });
        let quality = Quality::parse(&self.quality).unwrap_or_else(|| {
            issues.push(FieldIssue::new(
                "quality",
                format!("{}; read as \"unknown\"", unknown_value(&self.quality)),
            ));
            Quality::Unknown
        });
        let previous_capsule_id = optional_id(
            "previousCapsuleId",
            self.previous_capsule_id.as_deref(),
            issues,
        );
        // The scope only describes what the narrative covers: a damaged
        // one is left out and the capsule kept; a bad id alone leaves the
        // figures, which tell the model its narrative is partial.
        let scope = match self
            .summary_scope
            .map(serde_json::from_value::<SummaryScopeRecord>)
        {
            None => None,
            Some(Err(err)) => {
                issues.push(FieldIssue::new(
                    "summaryScope",
                    format!("{err}; left out, the capsule is kept"),
                ));
                None
            }
            Some(Ok(record)) => {
                let from_entry_id = optional_id(
                    "summaryScope.fromEntryId",
                    record.from_entry_id.as_deref(),
                    issues,
                );
                Some(SummaryScope {
                    from_entry_id,
                    partial: record.partial,
                    chunks: record.chunks,
                    summarized_tokens: TokenCount::new(record.summarized_tokens),
                    facts_only_tokens: TokenCount::new(record.facts_only_tokens),
                })
            }
        };
        // The files only add to the model input: a damaged record is left
        // out and the capsule kept.
        let rehydrated = match self
            .rehydrated
            .map(serde_json::from_value::<RehydratedRecord>)
        {
            None => Rehydration::default(),
            Some(Err(err)) => {
                issues.push(FieldIssue::new(
                    "rehydrated",
                    format!("{err}; left out, the capsule is kept without the files after it"),
                ));
                Rehydration::default()
            }
            Some(Ok(record)) => Rehydration {
                files: record
                    .files
                    .into_iter()
                    .map(|file| RehydratedFile {
                        path: file.path,
                        text: file.text,
                        total_lines: file.total_lines,
                        shown_lines: file.shown_lines.min(file.total_lines),
                    })
                    .collect(),
                paths_only: record.paths_only,
            },
        };
        Ok(Capsule {
            rehydrated,
            trigger,
            quality,
            first_kept_entry_id: self
                .first_kept_entry_id
                .as_deref()
                .map(|id| parse_id("firstKeptEntryId", id))
                .transpose()?,
            boundary_truncation,
            tokens_before: TokenCount::new(self.tokens_before),
            tokens_after: TokenCount::new(self.tokens_after),
            summarizer: self.summarizer,
            previous_capsule_id,
            state: CapsuleState {
                model: self.state.model,
                calibration,
                auto_compact: self.state.auto_compact,
                auto_compact_override: self.state.auto_compact_override,
                approvals: self.state.approvals.map(ApprovalGrantsRecord::into_grants),
                skills: self
                    .state
                    .skills
                    .into_iter()
                    .map(|skill| SkillEntry {
                        name: skill.name,
                        action: SkillAction::Activate,
                        sha256: skill.sha256,
                        text: skill.text,
                    })
                    .collect(),
                pinned_agents_md,
                pinned_system: self.state.pinned.system,
            },
            instructions: self.instructions,
            native: self.native.map(|native| NativeContinuation {
                provider: native.provider,
                model: native.model,
                endpoint_fingerprint: native.endpoint_fingerprint,
                item: native.item,
            }),
            overflow: self.overflow.map(|overflow| OverflowRecord {
                stated_prompt: overflow.stated_prompt,
                request_tokens_local: overflow.request_tokens_local,
            }),
            imported: self.imported.map(|imported| ImportedCapsule {
                agent: imported.agent,
                original_id: imported.original_id,
            }),
            scope,
            narrative: Narrative {
                goal: self.narrative.goal,
                constraints: self.narrative.constraints,
                done: self.narrative.done,
                in_progress: self.narrative.in_progress,
                pending: self.narrative.pending,
                decisions: self.narrative.decisions,
                blockers: self.narrative.blockers,
                next_steps: self.narrative.next_steps,
            },
            earlier_narrative: self.earlier_narrative,
            local: LocalSections {
                original_task: self.local.original_task,
                latest_instructions: self.local.latest_instructions,
                files_read: self.local.files_read,
                files_read_more: self.local.files_read_more,
                files_modified: self.local.files_modified,
                verification: self
                    .local
                    .verification
                    .into_iter()
                    .map(|check| Verification {
                        command: check.command,
                        passed: check.passed,
                        exit_code: check.exit_code,
                    })
                    .collect(),
                unresolved_errors: self.local.unresolved_errors,
                checkpoints,
                active_skills: self.local.active_skills,
                goal: self.local.goal,
                constraints: self.local.constraints,
                constraints_more: self.local.constraints_more,
                plan: self
                    .local
                    .plan
                    .into_iter()
                    .map(|step| PlanItem {
                        text: step.step,
                        status: PlanStatus::parse(&step.status),
                    })
                    .collect(),
                plan_explanation: self.local.plan_explanation,
                answers: self
                    .local
                    .answers
                    .into_iter()
                    .map(|answer| Answer {
                        request: answer.request,
                        text: answer.text,
                    })
                    .collect(),
                failing_before_edits: self.local.failing_before_edits,
                files_edit_failed: self.local.files_edit_failed,
            },
            markdown: self.markdown,
        })
    }
}
