#!/usr/bin/env python3
"""The overflow turn's message for scripts/real-model-check: just enough
note lines that the session's input outgrows the server's window by a
margin, while the message alone stays small enough that a compacted history
plus the message fits again (so the recovery can succeed).

    real-model-overflow.py SESSION_LOG CTX

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
MARGIN = 700


def main():
    log, ctx = sys.argv[1], int(sys.argv[2])
    assistants = [e for e in report.lines(log) if e.get("type") == "message" and e.get("role") == "assistant"]
    history, ratios = 0, []
    for prompt, output, local in report.served(assistants):
        history = prompt + output
        if local:
            ratios.append(prompt / local)
    ratio = statistics.median(ratios) if ratios else 1.0
    wanted = max(ctx - history + MARGIN, MARGIN)
    lines = math.ceil(wanted / (LOCAL_TOKENS_PER_LINE * ratio))
    print(f"The notes follow; tell me the last note.")
    for k in range(1, lines + 1):
        print(LINE.format(k=k))
    print(f"history {history} server tokens, ratio {ratio:.3f}, {lines} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
