"""What a command writes to stderr: whole lines, each in one write, and errors as one line.

Serve shares its stderr with the executor whose output it relays (and Lemonade reads both from one
pipe), so a line written in two calls can be split by another process's line.
"""

from __future__ import annotations

import os
import sys

from lemonade_onebit.errors import RunError, UsageError


def line(text: str) -> None:
    """Write `text` and its newline to stderr in one system call."""
    data = (text.rstrip("\n") + "\n").encode("utf-8", "replace")
    try:
        sys.stderr.flush()
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):  # no real stderr (embedded, captured)
        sys.stderr.write(data.decode("utf-8", "replace"))
        return
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return


def reported(prog: str, command) -> int:
    """Run `command`; a user error is one line and exit 2, a runtime failure one line and exit 1,
    never a traceback. Shared by every console script of the package."""
    try:
        return command()
    except UsageError as exc:
        line(f"{prog}: {exc}")
        return 2
    except RunError as exc:
        line(f"{prog}: error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `1bit devices | head`: the reader left, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
