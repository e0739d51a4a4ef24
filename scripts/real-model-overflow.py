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
import statistics
import sys

_spec = importlib.util.spec_from_file_location("report", os.path.join(os.path.dirname(os.path.abspath(__file__)), "real-model-report.py"))
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

LINE = "Note {k}: the deployment checklist item {k} says to verify the service health endpoint, rotate the logs and record the build number in the release notes before tagging."
# Local (o200k) tokens of one LINE, as measured on the Qwen run: 120 lines
# came to 4,243 server tokens at a ratio of 1.176.
LOCAL_TOKENS_PER_LINE = 30
# What the grow turn leaves free of the server's window (its answer and any
# tool output take some of it); the overflow message is larger than it.
GAP = 800
OVERFLOW_LINES = 50


def main():
    log, ctx, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    assistants = [e for e in report.lines(log) if e.get("type") == "message" and e.get("role") == "assistant"]
    history, ratios = 0, []
    for prompt, output, local in report.served(assistants):
        history = prompt + output
        if local:
            ratios.append(prompt / local)
    ratio = statistics.median(ratios) if ratios else 1.0
    if mode == "grow":
        wanted = max(ctx - history - GAP, 0)
        lines = max(math.ceil(wanted / (LOCAL_TOKENS_PER_LINE * ratio)), 1)
        print("Here are more notes to keep; reply with one short sentence.")
    else:
        lines = OVERFLOW_LINES
        print("The last notes follow; tell me the last note.")
    for k in range(1, lines + 1):
        print(LINE.format(k=k))
    print(f"{mode}: history {history} server tokens, ratio {ratio:.3f}, {lines} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
