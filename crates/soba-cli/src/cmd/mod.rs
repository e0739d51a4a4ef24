//! One `cmd_*` function per subcommand, and the dispatcher (`soba` alone
//! runs the TUI crate, `soba_tui::run`).

mod budget;
pub(crate) mod capsule;
mod compact;
mod completions;
mod config;
mod demo;
mod import;
mod replay;
mod run;
pub(crate) mod sessions;
mod show;
mod stats;

use crate::cli::{AgentArgs, Cli, Command, GlobalArgs};
use crate::error::{CliError, CliResult};

/// Runs the parsed command line.
///
/// The agent's options (`--model`, `--auto-approve`, `--allow`) may come
/// before a subcommand that takes them (`soba --model ollama/x run …`); the
/// subcommand's own spelling wins. Before any other subcommand they are a
/// usage error rather than silently dropped.
pub fn dispatch(mut cli: Cli) -> CliResult {
    if let Some(command) = &mut cli.command {
        lift_agent_args(&cli.agent, command)?;
    }
    match cli.command {
        Some(command) => match command {
            Command::Budget(args) => budget::cmd_budget(&args, &cli.global),
            Command::Demo(args) => demo::cmd_demo(&args, &cli.global),
            Command::Run(args) => run::cmd_run(&args, &cli.global),
            Command::Import(args) => import::cmd_import(&args, &cli.global),
            Command::Sessions(args) => sessions::cmd_sessions(&args, &cli.global),
            Command::Show(args) => show::cmd_show(&args, &cli.global),
            Command::Stats(args) => stats::cmd_stats(&args, &cli.global),
            Command::Compact(args) => compact::cmd_compact(&args, &cli.global),
            Command::Capsule(args) => capsule::cmd_capsule(&args, &cli.global),
            Command::Config(args) => config::cmd_config(&args, &cli.global),
            Command::Completions(args) => completions::cmd_completions(&args),
            Command::Replay(args) => replay::cmd_replay(&args, &cli.global),
        },
        None => interactive(&cli.agent, &cli.global),
    }
}

/// Runs the interactive agent (`soba` alone, `soba-tui`) and prints, once
/// the terminal is restored, how to resume the session.
fn interactive(agent: &AgentArgs, global: &GlobalArgs) -> CliResult {
    let ended = soba_tui::run(
        &global.options(),
        &soba_tui::Args {
            model: agent.model.clone(),
            auto_approve: agent.auto_approve,
            allow: agent.allow.clone(),
            continue_session: agent.continue_session,
            resume: agent.resume.clone(),
        },
    )?;
    if let Some(line) = ended.exit_line {
        crate::output::errln!("{line}");
    }
    ended.outcome
}

/// Moves the agent options given before the subcommand into it (see
/// [`dispatch`]).
fn lift_agent_args(agent: &AgentArgs, command: &mut Command) -> CliResult {
    fn model(from: &AgentArgs, into: &mut Option<String>) {
        if into.is_none() {
            into.clone_from(&from.model);
        }
    }
    let (takes_model, takes_approvals) = match command {
        Command::Run(args) => {
            model(agent, &mut args.model);
            args.auto_approve |= agent.auto_approve;
            args.allow.extend(agent.allow.iter().cloned());
            args.continue_session |= agent.continue_session;
            if args.resume.is_none() {
                args.resume = agent.resume.clone().filter(|id| !id.is_empty());
            }
            (true, true)
        }
        Command::Budget(args) => {
            model(agent, &mut args.model);
            (true, false)
        }
        Command::Compact(args) => {
            model(agent, &mut args.model);
            (true, false)
        }
        Command::Capsule(args) => {
            model(agent, &mut args.model);
            (true, false)
        }
        _ => (false, false),
    };
    let misplaced = [
        (agent.model.is_some() && !takes_model, "--model"),
        (
            (agent.auto_approve || !agent.allow.is_empty()) && !takes_approvals,
            "--auto-approve/--allow",
        ),
        (
            (agent.continue_session || agent.resume.is_some()) && !takes_approvals
                || agent.resume.as_deref() == Some(""),
            "-c/--continue and -r/--resume",
        ),
    ];
    match misplaced.iter().find(|(given, _)| *given) {
        Some((_, flag)) => Err(CliError::usage(format!(
            "{flag} given before this subcommand, which does not take it"
        ))
        .hint(
            "--model goes with run, budget, compact and capsule; -c and -r ID go with run \
             (`soba run -c \"…\"`) or alone (`soba -c`, `soba -r` to pick a session)",
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn lifted(argv: &[&str]) -> Result<Command, String> {
        let mut cli = Cli::try_parse_from(argv).map_err(|err| err.to_string())?;
        let mut command = cli.command.take().expect("a subcommand");
        lift_agent_args(&cli.agent, &mut command).map_err(|err| err.message)?;
        Ok(command)
    }

    #[test]
    fn agent_options_before_the_subcommand_apply_to_it() {
        let Ok(Command::Run(run)) = lifted(&[
            "soba", "--model", "ollama/x", "--allow", "bash", "run", "hi", "--allow", "edit",
        ]) else {
            panic!("not run");
        };
        assert_eq!(run.model.as_deref(), Some("ollama/x"));
        assert_eq!(run.allow, ["edit", "bash"]);
        let Ok(Command::Run(run)) =
            lifted(&["soba", "--model", "a/b", "run", "--model", "c/d", "hi"])
        else {
            panic!("not run");
        };
        assert_eq!(
            run.model.as_deref(),
            Some("c/d"),
            "the subcommand's own spelling wins"
        );
        let Ok(Command::Compact(compact)) = lifted(&["soba", "--model", "ollama/x", "compact"])
        else {
            panic!("not compact");
        };
        assert_eq!(compact.model.as_deref(), Some("ollama/x"));
    }

    #[test]
    fn agent_options_before_other_subcommands_are_refused() {
        assert_eq!(
            lifted(&["soba", "--model", "ollama/x", "sessions"])
                .err()
                .as_deref(),
            Some("--model given before this subcommand, which does not take it")
        );
        assert_eq!(
            lifted(&["soba", "-c", "sessions"]).err().as_deref(),
            Some(
                "-c/--continue and -r/--resume given before this subcommand, which does not take it"
            )
        );
        let Ok(Command::Run(run)) = lifted(&["soba", "-r", "01ab", "run", "hi"]) else {
            panic!("not run");
        };
        assert_eq!(run.resume.as_deref(), Some("01ab"));
    }
}
