#!/usr/bin/env python3
"""The report of scripts/real-model-check for one model: reads the session
log, its flight records, the turns' `soba run --json` events and stderr,
prints the figures and exits 1 on any failure the check names."""

import argparse
import glob
import json
import os
import re
import statistics
import sys


def lines(path):
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    yield {"type": "unparsable", "text": line[:200]}


def served(assistants):
    """(server prompt tokens, output tokens, local request tokens or None)
    of each assistant message the server reported usage for."""
    for message in assistants:
        usage = message.get("usage") or {}
        prompt = usage.get("input", 0) + usage.get("cacheRead", 0) + usage.get("cacheWrite", 0)
        if prompt:
            yield prompt, usage.get("output", 0), message.get("requestTokensLocal")


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--name", "--run", "--home", "--session", "--ctx", "--wall", "--overflow-turn", "--failures"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    failures = [f for f in args.failures.splitlines() if f.strip()]
    ctx = int(args.ctx)

    logs = glob.glob(os.path.join(args.home, "**", args.session + ".jsonl"), recursive=True)
    if not logs:
        print(f"no session log for {args.session} under {args.home}")
        return 1
    entries = list(lines(logs[0]))
    flights = []
    for path in glob.glob(os.path.join(args.home, "**", args.session + ".flight.jsonl"), recursive=True):
        flights.extend(lines(path))

    turns = sorted(glob.glob(os.path.join(args.run, "turn*.jsonl")), key=lambda p: int(p.split("turn")[-1].split(".")[0]))
    events_by_turn = {int(p.split("turn")[-1].split(".")[0]): list(lines(p)) for p in turns}
    events = [event for turn in sorted(events_by_turn) for event in events_by_turn[turn]]
    stderr = ""
    for path in glob.glob(os.path.join(args.run, "turn*.err")):
        with open(path, encoding="utf-8", errors="replace") as handle:
            stderr += handle.read()

    assistants = [e for e in entries if e.get("type") == "message" and e.get("role") == "assistant"]
    prompt_tokens = []
    ratios = []
    for prompt, _, local in served(assistants):
        prompt_tokens.append(prompt)
        if local:
            ratios.append(prompt / local)
    hard_limits = {f["limits"]["hardLimit"] for f in flights if "limits" in f}
    hard_limit = min(hard_limits) if hard_limits else None

    compactions = [f for f in flights if f.get("level") == "compaction"]
    hygiene = [e for e in events if e.get("type") == "hygiene"]
    by_trigger = {}
    for record in compactions:
        key = f'{record.get("trigger")} {record.get("outcome")}'
        by_trigger[key] = by_trigger.get(key, 0) + 1
    completed = [r for r in compactions if r.get("outcome") == "completed"]
    llm = [r for r in completed if (r.get("summarizer") or {}).get("model", "deterministic") != "deterministic"]
    deterministic = [r for r in completed if r not in llm]
    degraded = [r for r in completed if r.get("quality") != "full"]
    reasons = {}
    for record in compactions:
        if record.get("reason"):
            reasons[record["reason"]] = reasons.get(record["reason"], 0) + 1
    ends = [e for e in events if e.get("type") == "compaction_end"]
    overflow = [e for e in ends if e.get("trigger") == "context_overflow"]
    tools = [e for e in events if e.get("type") == "tool_result"]
    turn_ends = [e for e in events if e.get("type") == "turn_end"]
    warnings = [e.get("message", "") for e in events if e.get("type") == "warning"]

    # Failures the check names.
    if "panicked at" in stderr:
        failures.append("a panic on stderr")
    # SOBA's own bound: every request's measured input (the effective
    # tokens its last preflight left: local count x calibration) within the
    # hardLimit in force when it was sent (the newest flight record before
    # it: the overflow phase is told a larger window on purpose). The raw
    # local count may exceed it when calibration learned a factor below 1.
    local_counts = [m.get("requestTokensLocal") for m in assistants if m.get("requestTokensLocal")]
    records = sorted(((f.get("timestamp", ""), f) for f in flights if "limits" in f), key=lambda pair: pair[0])
    over = []
    for message in assistants:
        before = [record for stamp, record in records if stamp <= message.get("timestamp", "")]
        if not message.get("requestTokensLocal") or not before:
            continue
        record = before[-1]
        effective, limit = record.get("tokensAfter", 0), record["limits"]["hardLimit"]
        if effective > limit:
            over.append(f"{effective} > {limit}")
    if over:
        failures.append(f"{len(over)} requests over the hardLimit in force (local count): {over}")
    # The real bound: what the server measured, plus the reply, within its
    # window (a request over it comes back as llama.cpp's context error and
    # must be recovered, not answered).
    over = [p for p in prompt_tokens if p > ctx]
    if over:
        failures.append(f"{len(over)} requests over the server's window {ctx}: {over}")
    if not completed:
        failures.append("no compaction completed: the session never exercised compaction")
    uses, results = set(), set()
    for entry in entries:
        for block in entry.get("content") or []:
            if block.get("type") == "tool_use":
                uses.add(block.get("id"))
            if block.get("type") == "tool_result":
                results.add(block.get("toolUseId"))
    if uses - results:
        failures.append(f"unpaired tool calls: {sorted(uses - results)}")
    for record in llm:
        if record.get("quality") == "full" and record.get("reclaimed", 0) <= 0:
            failures.append(f"capsule {record.get('checkpointId')} accepted without reclaiming anything")

    resume = resume_check(args.run, events_by_turn, int(args.overflow_turn))
    failures.extend(resume["failures"])
    rejected = rejected_summaries(args.home)
    calibration = ""
    budget_path = os.path.join(args.run, "budget.txt")
    if os.path.exists(budget_path):
        with open(budget_path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("calibration"):
                    calibration = line.split(None, 1)[1].strip()

    name = args.name
    print(f"== real-model check: {name} (server window {ctx})")
    print(f"turns                 {len(turn_ends)} ({', '.join(e.get('outcome', '?') for e in turn_ends)})")
    print(f"requests              {len(assistants)}")
    if prompt_tokens:
        print(f"prompt tokens/request min {min(prompt_tokens)}, median {int(statistics.median(prompt_tokens))}, max {max(prompt_tokens)} (server-measured)")
    print(f"hardLimit             {hard_limit if hard_limit is not None else '-'} (SOBA's, from the flight records; {sorted(hard_limits)})")
    if local_counts:
        print(f"local count/request   min {min(local_counts)}, median {int(statistics.median(local_counts))}, max {max(local_counts)} (o200k; SOBA bounds it times calibration)")
    print(f"tool calls run        {len(tools)} ({', '.join(sorted({t.get('name', '?') for t in tools})) or 'none'})")
    considered = [f for f in flights if f.get("level") == "hygiene"]
    why = {}
    for record in considered:
        if record.get("outcome") != "completed":
            key = (record.get("reason") or "?").split(" < ")[0]
            why[key] = why.get(key, 0) + 1
    print(f"hygiene passes        {len(hygiene)} of {len(considered)} considered; skipped: {'; '.join(f'{n} × {k}' for k, n in why.items()) or 'none'}")
    print("compactions by trigger and outcome:")
    for key in sorted(by_trigger):
        print(f"  {key:<32} {by_trigger[key]}")
    print(f"summaries accepted    {len(llm)} by the LLM summarizer")
    print(f"deterministic capsules {len(deterministic)} (fallbacks or no summary), {len(degraded)} degraded")
    if reasons:
        print("reasons given:")
        for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {count} × {reason[:140]}")
    for capsule in (e for e in entries if e.get("type") == "capsule" and e.get("summarizer") not in (None, "deterministic")):
        print(f"  accepted, {capsule.get('id')}: {json.dumps(capsule.get('narrative'))[:600]}")
    print(f"summaries rejected    {len(rejected)} (in soba's log)")
    for guard, chars, text in rejected:
        print(f"  guard {guard}, {chars} chars: {text[:600]}")
    if calibration:
        print(f"calibration learned   {calibration} (soba budget --session)")
    if ratios:
        print(f"server/local ratio    median {statistics.median(ratios):.3f} over {len(ratios)} requests (what calibration learns from; o200k local count)")
    print(f"overflow recoveries   {len(overflow)} ({', '.join(e.get('outcome', '?') for e in overflow) or 'none'})")
    if warnings:
        print(f"warnings              {len(warnings)}: {warnings[0][:120]}")
    print(f"resume                {resume['checked']} turn boundaries byte-identical (first request of a resumed turn starts with the previous turn's last request: messages and tools), {len(resume['skipped'])} skipped: {'; '.join(resume['skipped']) or 'none'}")
    print(f"wall time             {args.wall} s")
    missing = [name for name, count in (("hygiene", len(hygiene)), ("an LLM summary", len(llm) + len(rejected)),
               ("overflow recovery", len(overflow)), ("a tool call", len(tools))) if not count]
    soft = [r for r in compactions if r.get("trigger") in ("auto_threshold", "turn_complete", "milestone", "plan_pivot", "cache_expired", "read_cost")]
    soft_tried = [r for r in soft if r.get("outcome") in ("completed", "failed")]
    soft_done = [r for r in soft if r.get("outcome") == "completed"]
    print(f"soft compaction       {len(soft_tried)} past the pre-ROI gate, {len(soft_done)} completed"
          + (" (a soft compaction whose summary a guard rejects fails and appends nothing, by design)" if len(soft_tried) > len(soft_done) else ""))
    if not soft_done:
        missing.append("a soft compaction that completed" if soft_tried else "soft compaction")
    print(f"not exercised         {', '.join(missing) or 'nothing: every mechanism ran'}")
    if failures:
        print("FAILED:")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print("passed")
    return 0


def agent_requests(run):
    """The recorded chat requests of the agent, by turn (the summarizer's,
    with their own system prompt, left out)."""
    path = os.path.join(run, "requests.jsonl")
    if not os.path.exists(path):
        return {}
    chats = [r for r in lines(path) if r.get("path", "").endswith("/chat/completions") and isinstance(r.get("body"), dict)]
    if not chats:
        return {}
    system = (chats[0]["body"].get("messages") or [None])[0]
    by_turn = {}
    for request in chats:
        messages = request["body"].get("messages") or []
        if messages and messages[0] == system:
            by_turn.setdefault(request["turn"], []).append(request["body"])
    return by_turn


def changed_between(before, after):
    """Whether a compaction or hygiene pass changed the input between the
    last request of one turn and the first of the next."""
    tail = before
    for index in range(len(before) - 1, -1, -1):
        if before[index].get("type") == "assistant_message":
            tail = before[index + 1:]
            break
    head = []
    for event in after:
        if event.get("type") in ("assistant_message", "text_delta"):
            break
        head.append(event)
    for event in tail + head:
        if event.get("type") == "hygiene":
            return "hygiene"
        if event.get("type") == "compaction_end" and event.get("outcome") == "completed":
            return f"{event.get('trigger')} compaction"
    return None


def resume_check(run, events_by_turn, overflow_turn):
    """Every turn after the first is a new `soba run -c` process: its first
    request must start with exactly what the previous process last sent."""
    by_turn = agent_requests(run)
    result = {"checked": 0, "skipped": [], "failures": []}
    if not by_turn:
        result["failures"].append("no recorded requests: the recording proxy saw nothing")
        return result
    for turn in sorted(by_turn):
        if turn < 2 or turn - 1 not in by_turn:
            continue
        if turn == overflow_turn:
            result["skipped"].append(f"turn {turn} (told another window)")
            continue
        change = changed_between(events_by_turn.get(turn - 1, []), events_by_turn.get(turn, []))
        if change:
            result["skipped"].append(f"turn {turn} ({change})")
            continue
        last, first = by_turn[turn - 1][-1], by_turn[turn][0]
        before, after = last.get("messages") or [], first.get("messages") or []
        if first.get("tools") != last.get("tools"):
            result["failures"].append(f"turn {turn}: the resumed request's tools differ from the live one's")
        elif after[: len(before)] != before:
            index = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
            result["failures"].append(
                f"turn {turn}: the resumed request differs from the live one at message {index}: "
                f"live {json.dumps(before[index] if index < len(before) else None)[:200]} "
                f"resumed {json.dumps(after[index] if index < len(after) else None)[:200]}"
            )
        else:
            result["checked"] += 1
    return result


def rejected_summaries(home):
    """The summaries soba's log says a guard rejected: (guard, chars, text
    as the log escaped it)."""
    found = []
    pattern = re.compile(r'summary rejected guard=(\S+) chars=(\d+) summary=(".*")\s*$')
    for path in sorted(glob.glob(os.path.join(home, "logs", "soba.log*"))):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                match = pattern.search(line)
                if match:
                    found.append((match.group(1), match.group(2), match.group(3)))
    return found


if __name__ == "__main__":
    sys.exit(main())
