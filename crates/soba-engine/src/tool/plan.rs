//! `update_plan`: the model keeps the session's plan as steps with a
//! status, as Codex's `update_plan` and Claude Code's todo list do. The
//! tool only validates and acknowledges; the call itself, logged like any
//! other, is the plan's record: `soba_core::facts` reads the newest one
//! for the capsule's done / in progress / pending / next steps.

use serde_json::{Value, json};
use soba_core::ToolInput;
use soba_core::facts::PlanStatus;

use super::{Tool, ToolContext, ToolError, ToolFuture, ToolOutcome};

/// The most steps one plan may hold.
pub const MAX_STEPS: usize = 50;

/// The `update_plan` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdatePlan;

impl Tool for UpdatePlan {
    fn name(&self) -> &'static str {
        "update_plan"
    }

    fn description(&self) -> &'static str {
        "Sets the plan of the work: every step with its status (pending, in_progress, completed), in order. Send \
         the whole plan each time: when you start a task of several steps, when a step starts or is done, and \
         when the plan changes. Keep at most one step in_progress. The plan survives context compaction."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "explanation": {"type": "string", "description": "Optional: why the plan changed"},
                "plan": {
                    "type": "array",
                    "description": "Every step of the plan, in order",
                    "items": {
                        "type": "object",
                        "properties": {
                            "step": {"type": "string", "description": "What the step is, in a few words"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["step", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["plan"],
            "additionalProperties": false
        })
    }

    fn call<'a>(&'a self, input: &'a ToolInput, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move { update_plan(input) })
    }
}

fn invalid(message: String) -> ToolOutcome {
    ToolError::InvalidArguments {
        tool: "update_plan",
        message,
    }
    .into()
}

fn update_plan(input: &ToolInput) -> ToolOutcome {
    let Some(Value::Array(steps)) = input.object().get("plan") else {
        return invalid("`plan` must be an array of {step, status} objects".to_owned());
    };
    if steps.len() > MAX_STEPS {
        return invalid(format!(
            "`plan` has {} steps; keep it to {MAX_STEPS} or fewer",
            steps.len()
        ));
    }
    let mut counts = [0usize; 3];
    for (idx, step) in steps.iter().enumerate() {
        let text = step.get("step").and_then(Value::as_str).map(str::trim);
        let status = step.get("status").and_then(Value::as_str);
        let (Some(text), Some(status)) = (text, status) else {
            return invalid(format!(
                "step {} needs a `step` text and a `status` (pending, in_progress or completed)",
                idx + 1
            ));
        };
        if text.is_empty() {
            return invalid(format!("step {} has an empty `step` text", idx + 1));
        }
        let parsed = match status {
            "pending" => PlanStatus::Pending,
            "in_progress" => PlanStatus::InProgress,
            "completed" => PlanStatus::Completed,
            other => {
                return invalid(format!(
                    "step {} has status `{other}`; use pending, in_progress or completed",
                    idx + 1
                ));
            }
        };
        counts[parsed as usize] += 1;
    }
    let [pending, in_progress, completed] = counts;
    ToolOutcome {
        content: format!(
            "plan updated: {} steps ({completed} completed, {in_progress} in progress, {pending} pending)",
            steps.len()
        ),
        is_error: false,
        effect: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: Value, content: &str, is_error: bool) {
        let outcome = update_plan(&ToolInput::from_value(input));
        assert_eq!(outcome.content, content);
        assert_eq!(outcome.is_error, is_error);
    }

    #[test]
    fn a_plan_is_counted_and_bad_steps_are_named() {
        check(
            json!({"plan": [
                {"step": "parse", "status": "completed"},
                {"step": "report", "status": "in_progress"},
                {"step": "docs", "status": "pending"}
            ]}),
            "plan updated: 3 steps (1 completed, 1 in progress, 1 pending)",
            false,
        );
        check(
            json!({"plan": [{"step": "x", "status": "done"}]}),
            "invalid arguments for update_plan: step 1 has status `done`; use pending, in_progress or completed",
            true,
        );
        check(
            json!({"plan": "a, b"}),
            "invalid arguments for update_plan: `plan` must be an array of {step, status} objects",
            true,
        );
        check(
            json!({"plan": [{"step": "  ", "status": "pending"}]}),
            "invalid arguments for update_plan: step 1 has an empty `step` text",
            true,
        );
    }
}
