"""One executor process: spawn, output relay, readiness, exit, signals.

The state has one writer, `_on`, which moves it along `TRANSITIONS` under the lock and publishes
an immutable `Status`; readers (the HTTP front, any thread) take that snapshot without locking.
Exit is seen by a thread blocked in `wait()`, apart from the thread that relays the output: an
executor whose grandchild keeps the pipe open is still seen to exit, and its last lines are
waited for at most `DRAIN_GRACE_S`. Starting, stopping and restarting are the pool's
(`serve/pool.py`): a supervisor is one process, and a restart is a new supervisor.
"""

from __future__ import annotations

import collections
import enum
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lemonade_onebit.console import line as write_line
from lemonade_onebit.errors import RunError
from lemonade_onebit.serve.process import signal_group, spawn

if TYPE_CHECKING:
    import asyncio

READY_POLL_S = 0.01
LOG_TAIL_LINES = 20
DRAIN_GRACE_S = 0.5  # after exit, how long the last output may take (llama-swap waits the same way)

# llama.cpp's log prefix (`0.00.009.180 E `): time and level. Its level says which lines are
# errors; lines without it (other executors, an abort, older builds) are read by their words.
LLAMA_LOG = re.compile(r"^\d+(?:\.\d+){3} ([A-Z]) ")
LLAMA_LEVELS = {"E": "error", "W": "warning", "I": "info", "D": "debug"}
TELLING_WORDS = ("error", "fail", "unable", "invalid", "cannot", "can't", "abort", "out of memory",
                 "assert", "exception", "terminate", "segmentation fault", "fatal", "panic",
                 "not found", "no such", "denied")
# Lines that carry such words in passing: requests' logs, slots, the listening banner, a
# traceback's chaining, a backtrace's frames.
INFORMATIONAL = ("srv  log_server_r", "srv    log_server_r", "srv  send_error", "srv    send_error",
                 "srv    operator(): got exception", "srv  update_slots", "srv  params_from_",
                 "srv    params_from_", "slot ", "que ", "srv  llama_server: listening on",
                 "main: server is listening", "main: HTTP server is listening",
                 "During handling of the above exception", "The above exception was the direct")
BACKTRACE_FRAME = re.compile(r"^#\d+\s|\(\+0x[0-9a-f]+\) \[0x[0-9a-f]+\]$")
BURST_GAP = 3  # lines between two error lines of one burst


class State(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"


# (state, event) -> next state; an event with no entry leaves the state as it is.
TRANSITIONS = {
    (State.LOADING, "ready"): State.READY,
    (State.LOADING, "fail"): State.FAILED,
    (State.READY, "fail"): State.FAILED,
    (State.LOADING, "stop"): State.STOPPING,
    (State.READY, "stop"): State.STOPPING,
    (State.LOADING, "exit"): State.FAILED,
    (State.READY, "exit"): State.FAILED,
    (State.STOPPING, "exit"): State.STOPPED,
}


@dataclass(frozen=True)
class Status:
    state: State
    failure: str | None = None  # why, when FAILED


@dataclass(frozen=True)
class ExecutorSpec:
    argv: list[str]
    env: dict[str, str]
    port: int
    readiness: str  # path polled until it answers 200


class Supervisor:
    """One executor child: loading → ready, or → failed with a reason; stopping → stopped."""

    def __init__(self, spec: ExecutorSpec, load_timeout: float) -> None:
        self.spec = spec
        self.load_timeout = load_timeout
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self.started_at: float | None = None  # time.monotonic() of the spawn
        self._status = Status(State.LOADING)
        self._lock = threading.Lock()
        self._gone = threading.Event()  # the process has exited (or never started)
        self._drained = threading.Event()
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._last_output = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nudge: asyncio.Event | None = None  # made when a loop is attached
        self._on_exit: Callable[[Supervisor], None] | None = None

    @property
    def status(self) -> Status:
        return self._status

    @property
    def failure(self) -> str | None:
        return self._status.failure

    @property
    def exited(self) -> bool:
        return self._gone.is_set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.spec.port}"

    def _on(self, event: str, failure: str | None = None) -> bool:
        """The one place the state changes; True when `event` moved it."""
        with self._lock:
            to = TRANSITIONS.get((self._status.state, event))
            if to is not None:
                self._status = Status(to, failure if to is State.FAILED else None)
        if to is not None:
            self._wake()
        return to is not None

    def start(self) -> None:
        """Spawn the executor. No event loop is needed yet, so serve can start the executor
        first and set up its HTTP front while the model loads."""
        self.started_at = time.monotonic()
        try:
            self.proc = spawn(self.spec.argv, self.spec.env)
        except OSError as exc:
            reason = f"cannot start {self.spec.argv[0]}: {exc.strerror}"
            self._on("fail", reason)
            self._gone.set()
            raise RunError(reason) from exc
        threading.Thread(target=self._drain, name="executor-output", daemon=True).start()
        threading.Thread(target=self._wait_exit, name="executor-exit", daemon=True).start()

    def attach(self, loop: asyncio.AbstractEventLoop,
               on_exit: Callable[[Supervisor], None] | None = None) -> None:
        """From now on changes are reported on `loop`, and an exit nobody asked for is handed
        to `on_exit` there (at once, if it came before). (asyncio is imported only here: serve
        starts the executor before paying for it.)"""
        import asyncio

        self._nudge = asyncio.Event()
        with self._lock:
            self._loop, self._on_exit = loop, on_exit
        if on_exit is not None and self.exited and self._status.state is State.FAILED:
            loop.call_soon(on_exit, self)

    def _wake(self) -> None:
        loop, nudge = self._loop, self._nudge
        if loop is None or nudge is None:
            return
        try:
            loop.call_soon_threadsafe(nudge.set)
        except RuntimeError:  # the loop is already closed: serve is exiting
            pass

    def _drain(self) -> None:
        """Relay the child's output to stderr and keep its last lines; nothing else."""
        assert self.proc is not None and self.proc.stdout is not None
        program = os.path.basename(self.spec.argv[0])
        try:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self._tail.append(line)
                self._last_output = time.monotonic()
                if self._status.state is State.LOADING:
                    # New output while loading ("server is listening", "model loaded"): poll
                    # now rather than at the next tick.
                    self._wake()
                # whole lines only: serve's own lines share this stderr
                write_line(line, **executor_record(line, program))
        finally:
            self._drained.set()

    def _wait_exit(self) -> None:
        assert self.proc is not None
        rc = self.proc.wait()
        signal_group(self.proc.pid, signal.SIGKILL)  # what it left in its group goes with it
        if self._status.state is not State.STOPPING:
            self._drained.wait(DRAIN_GRACE_S)  # its last lines say why it exited
        self.returncode = rc
        program = os.path.basename(self.spec.argv[0])  # the route line gave its path
        unasked = self._on("exit", exit_reason(program, rc, self.telling_line()))
        unasked = unasked and self._status.state is State.FAILED
        self._gone.set()
        self._wake()
        with self._lock:
            loop, on_exit = self._loop, self._on_exit
        if unasked and loop is not None and on_exit is not None:
            try:
                loop.call_soon_threadsafe(on_exit, self)
            except RuntimeError:  # the loop is already closed: serve is exiting
                pass

    @property
    def tail(self) -> list[str]:
        """The child's last lines, oldest first."""
        return list(self._tail)

    def telling_line(self) -> str | None:
        """The line of the child's last ones that says what went wrong, or None."""
        return telling_line(self.tail)

    async def wait_ready(self, session) -> None:
        """Poll readiness; fail at once on exit, or when the child stalls past the load timeout."""
        import asyncio

        import aiohttp

        nudge = self._nudge
        assert nudge is not None, "attach() a loop first"
        url = self.base_url + self.spec.readiness
        probe = aiohttp.ClientTimeout(total=2)
        while True:
            status = self._status
            if status.state is State.READY:
                return
            if status.state is not State.LOADING:
                raise RunError(status.failure or f"{self.spec.argv[0]} was stopped while loading")
            try:
                async with session.get(url, timeout=probe) as resp:
                    await resp.read()
                    if resp.status == 200 and self._on("ready"):
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() - self._last_output > self.load_timeout:
                reason = (f"{self.spec.argv[0]} made no progress for {self.load_timeout:g} s "
                          "while loading")
                if self._on("fail", reason):
                    raise RunError(reason)
                continue
            if not nudge.is_set():
                try:
                    await asyncio.wait_for(nudge.wait(), READY_POLL_S)
                except asyncio.TimeoutError:
                    pass
            nudge.clear()

    def terminate(self) -> None:
        """Ask the executor's group to stop (SIGTERM); the pool decides when to kill."""
        self._on("stop")
        if self.proc is not None and not self.exited:
            signal_group(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and not self.exited:
            signal_group(self.proc.pid, signal.SIGKILL)

    def wait_gone(self, timeout: float) -> bool:
        """Block until the process has exited, at most `timeout` seconds."""
        return self._gone.wait(timeout)


def executor_record(line: str, program: str) -> dict[str, str]:
    """What `--log-format json` makes of one executor line: its level from llama.cpp's prefix
    (which is left out of the message), `info` for a line without one."""
    prefix = LLAMA_LOG.match(line)
    if prefix is None:
        return {"message": line, "level": "info", "source": program}
    level = LLAMA_LEVELS.get(prefix.group(1), "info")
    return {"message": line[prefix.end():], "level": level, "source": program}


def telling_line(lines: list[str]) -> str | None:
    """The line that says what went wrong, or None. Errors come in bursts whose first line is
    the cause and whose last ones are wrap-ups (`failed to load model`, `exiting due to model
    loading error`): the first line of the last burst is the one. Informational and indented
    lines never count (a traceback's frames quote code; its final line is not indented)."""
    read: list[tuple[str, bool]] = []  # (text, telling) of the lines that count
    for line in lines:
        if not line.strip() or line[0].isspace():
            continue
        prefix = LLAMA_LOG.match(line)
        text = line[prefix.end():].strip() if prefix else line.strip()
        if text.startswith(INFORMATIONAL) or BACKTRACE_FRAME.search(text):
            continue
        if prefix:
            telling = prefix.group(1) == "E"
        else:
            low = text.lower()
            telling = any(word in low for word in TELLING_WORDS)
        read.append((text, telling))
    found, gap = None, 0
    for text, telling in reversed(read):
        if telling:
            found, gap = text, 0
        elif found is not None:
            gap += 1
            if gap > BURST_GAP:
                break
    return found


def exit_reason(program: str, returncode: int, telling: str | None) -> str:
    """One line: how the executor ended (its code, or the signal that killed it) and the line
    that says why; without one, where to look."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "a signal"
        how = f"{program} was killed by {name} (signal {-returncode})"
        if -returncode == signal.SIGKILL:
            how += ", as the kernel's OOM killer or `kill -9` does"
    else:
        how = f"{program} exited with code {returncode}"
    if telling:
        return f"{how}: {telling}"
    return f"{how}; no line of its output says why (its log is above)"
