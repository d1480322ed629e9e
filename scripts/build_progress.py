"""Show a long build's progress from its output: one percentage line, the full log kept in a file.

Usage: some-build 2>&1 | python build_progress.py LOGFILE LABEL
"""

from __future__ import annotations

import re
import sys
import time

PERCENT = re.compile(rb"\[\s*(\d+)%\]")


def main() -> int:
    log_path, label = sys.argv[1], sys.argv[2]
    tty = sys.stdout.isatty()
    shown, best, start = -1, 0, time.monotonic()
    with open(log_path, "wb") as log:
        for line in sys.stdin.buffer:
            log.write(line)
            match = PERCENT.search(line)
            if match:
                best = max(best, int(match.group(1)))
            step = best if tty else best - best % 5
            if step > shown:
                shown = step
                elapsed = int(time.monotonic() - start)
                text = f"{label}: {step:3d}% ({elapsed // 60}m{elapsed % 60:02d}s)"
                sys.stdout.write(("\r" + text) if tty else (text + "\n"))
                sys.stdout.flush()
    if tty:
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
