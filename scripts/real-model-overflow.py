#!/usr/bin/env python3
"""The overflow phase's messages for scripts/real-model-check. SOBA is told
a window twice the server's, so its own limits never stop the history
outgrowing the server; the server's context-size error then forces the
recovery. A recovery can only succeed when the newest message is small (it
must fit the server's real window after a compaction), so the phase takes
two turns:

    real-model-overflow.py SESSION_LOG CTX grow      # fills the window to CTX - GAP
    real-model-overflow.py SESSION_LOG CTX overflow  # a small message past it

Sizes come from the session itself: the last response's prompt plus its
output is the history the server will see (server tokens), and the median
server/local ratio turns a note line's local size into server tokens.
"""

import importlib.util
import math
import os
import sys

_spec = importlib.util.spec_from_file_location("report", os.path.join(os.path.dirname(os.path.abspath(__file__)), "real-model-report.py"))
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

LINE = "Note {k}: the deployment checklist item {k} says to verify the service health endpoint, rotate the logs and record the build number in the release notes before tagging."
# Local (o200k) tokens of one LINE when the session has no pasted notes to
# measure it from (the Qwen run: 120 lines, 4,243 server tokens, ratio 1.176).
LOCAL_TOKENS_PER_LINE = 30
# What the grow turn leaves free of the server's window (room for its short
# answer and for an error in the estimate); the overflow message is this
# plus a margin in server tokens, so it overflows whatever the answer took,
# and stays small enough to fit the real window after a compaction.
GAP = 900
MARGIN = 300


def local_per_line(entries):
    """Local tokens per note line, from a pasted-notes message SOBA counted."""
    for entry in entries:
        if entry.get("type") != "message" or entry.get("role") != "user":
            continue
        text = "".join(block.get("text", "") for block in entry.get("content") or [] if isinstance(block, dict))
        notes = sum(1 for line in text.splitlines() if line.startswith("Note "))
        n = (entry.get("tokens") or {}).get("n")
        if notes >= 10 and n:
            return n / notes
    return LOCAL_TOKENS_PER_LINE


def main():
    log, ctx, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    entries = list(report.lines(log))
    assistants = [e for e in entries if e.get("type") == "message" and e.get("role") == "assistant"]
    history, ratio = 0, 1.0
    for prompt, output, local in report.served(assistants):
        history = prompt + output
        if local:
            ratio = prompt / local  # the newest request's: the content most like what follows
    per_line = local_per_line(entries) * ratio  # server tokens per line
    if mode == "grow":
        lines = max(math.floor((ctx - history - GAP) / per_line), 1)
        print("Here are more notes to keep; reply with one short sentence.")
    else:
        lines = math.ceil((GAP + MARGIN) / per_line)
        print("The last notes follow; tell me the last note.")
    for k in range(1, lines + 1):
        print(LINE.format(k=k))
    print(f"{mode}: history {history} server tokens, ratio {ratio:.3f}, {per_line:.1f} server tokens a line, {lines} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
