"""What a command writes to stderr: whole lines, each in one write, and errors as one line.

Serve shares its stderr with the executor whose output it relays (and Lemonade reads both from one
pipe), so a line written in two calls can be split by another process's line.

With `set_log_format("json")` (`1bit serve --log-format json`) every line is one JSON object
instead: `time` (UTC, RFC 3339, ms), `level`, `message`, `source` and the fields the caller gave;
Python's own `logging` and warnings come out the same way, so a service manager reads only JSON.
"""

from __future__ import annotations

import os
import sys

from lemonade_onebit.errors import RunError, UsageError

_json_dumps = None  # json.dumps once the format is json: text mode never imports json


def set_log_format(fmt: str) -> None:
    """`text` (the default) or `json`, for every later line of this process."""
    global _json_dumps
    if fmt != "json":
        _json_dumps = None
        return
    import json
    import logging

    _json_dumps = json.dumps
    root = logging.getLogger()
    if not any(getattr(h, "onebit_json", False) for h in root.handlers):
        root.addHandler(_json_logging(logging))
    logging.captureWarnings(True)


_LOGGING_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "ERROR": "error",
                   "CRITICAL": "error"}


def _json_logging(logging):
    """A handler that writes Python `logging` records (a library's warning, a handler's
    traceback) as JSON lines; made here, so that text mode never imports `logging`."""

    class JsonLogging(logging.Handler):
        onebit_json = True

        def emit(self, record) -> None:
            fields = {}
            if record.exc_info:
                import traceback

                fields["traceback"] = "".join(traceback.format_exception(*record.exc_info))
            line(record.getMessage(), level=_LOGGING_LEVELS.get(record.levelname, "info"),
                 source=record.name, **fields)

    return JsonLogging()


def json_record(message: str, level: str = "info", **fields) -> str:
    import time

    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    record = {"time": stamp, "level": level, "message": message, **fields}
    dumps = _json_dumps
    if dumps is None:
        import json

        dumps = json.dumps
    return dumps(record, ensure_ascii=False, default=str)


def line(text: str, *, message: str | None = None, level: str = "info", **fields) -> None:
    """Write `text` and its newline to stderr in one system call; in the json format, a record
    of `message` (else `text`), `level` and `fields` instead."""
    if _json_dumps is not None:
        text = json_record(text if message is None else message, level, **fields)
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


def say(prog: str, message: str, level: str = "info", **fields) -> None:
    """`PROG: MESSAGE` as text; in the json format, `source` is `prog`."""
    line(f"{prog}: {message}", message=message, level=level, source=prog, **fields)


def reported(prog: str, command) -> int:
    """Run `command`; a user error is one line and exit 2, a runtime failure one line and exit 1,
    never a traceback. Shared by every console script of the package."""
    try:
        return command()
    except UsageError as exc:
        line(f"{prog}: {exc}", message=str(exc), level="error", source=prog)
        return 2
    except RunError as exc:
        line(f"{prog}: error: {exc}", message=str(exc), level="error", source=prog)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `1bit devices | head`: the reader left, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

