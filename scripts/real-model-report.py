#!/usr/bin/env python3
"""The report of scripts/real-model-check for one model: reads the session
log, its flight records, the turns' `soba run --json` events and stderr,
prints the figures and exits 1 on any failure the check names."""

import argparse
import glob
import json
import os
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


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--name", "--run", "--home", "--session", "--ctx", "--wall", "--failures"):
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
    events = [event for turn in turns for event in lines(turn)]
    stderr = ""
    for path in glob.glob(os.path.join(args.run, "turn*.err")):
        with open(path, encoding="utf-8", errors="replace") as handle:
            stderr += handle.read()

    assistants = [e for e in entries if e.get("type") == "message" and e.get("role") == "assistant"]
    prompt_tokens = []
    ratios = []
    for message in assistants:
        usage = message.get("usage") or {}
        prompt = usage.get("input", 0) + usage.get("cacheRead", 0) + usage.get("cacheWrite", 0)
        if prompt:
            prompt_tokens.append(prompt)
            local = message.get("requestTokensLocal")
            if local:
                ratios.append(prompt / local)
    hard_limits = {f["limits"]["hardLimit"] for f in flights if "limits" in f}
    hard_limit = min(hard_limits) if hard_limits else None

    compactions = [f for f in flights if f.get("level") == "compaction"]
    hygiene = [f for f in flights if f.get("level") == "hygiene" and f.get("outcome") == "completed"]
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
    # SOBA's own bound: every request's local count within hardLimit (the
    # overflow turn is told a larger window on purpose, so its requests are
    # judged by the server instead).
    local_counts = [m.get("requestTokensLocal") for m in assistants if m.get("requestTokensLocal")]
    if hard_limit is not None:
        over = [n for n in local_counts if n > max(hard_limits)]
        if over:
            failures.append(f"{len(over)} requests over hardLimit {max(hard_limits)} (local count): {over}")
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

    name = args.name
    print(f"== real-model check: {name} (server window {ctx})")
    print(f"turns                 {len(turn_ends)} ({', '.join(e.get('outcome', '?') for e in turn_ends)})")
    print(f"requests              {len(assistants)}")
    if prompt_tokens:
        print(f"prompt tokens/request min {min(prompt_tokens)}, median {int(statistics.median(prompt_tokens))}, max {max(prompt_tokens)} (server-measured)")
    print(f"hardLimit             {hard_limit if hard_limit is not None else '-'} (SOBA's, from the flight records; {sorted(hard_limits)})")
    if local_counts:
        print(f"local count/request   min {min(local_counts)}, median {int(statistics.median(local_counts))}, max {max(local_counts)} (o200k, what SOBA bounds)")
    print(f"tool calls run        {len(tools)} ({', '.join(sorted({t.get('name', '?') for t in tools})) or 'none'})")
    print(f"hygiene passes        {len(hygiene)}")
    print("compactions by trigger and outcome:")
    for key in sorted(by_trigger):
        print(f"  {key:<32} {by_trigger[key]}")
    print(f"summaries accepted    {len(llm)} by the LLM summarizer")
    print(f"deterministic capsules {len(deterministic)} (fallbacks or no summary), {len(degraded)} degraded")
    if reasons:
        print("reasons given:")
        for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {count} × {reason[:140]}")
    if ratios:
        print(f"server/local ratio    median {statistics.median(ratios):.3f} over {len(ratios)} requests (what calibration learns from; o200k local count)")
    print(f"overflow recoveries   {len(overflow)} ({', '.join(e.get('outcome', '?') for e in overflow) or 'none'})")
    if warnings:
        print(f"warnings              {len(warnings)}: {warnings[0][:120]}")
    print(f"wall time             {args.wall} s")
    if failures:
        print("FAILED:")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
