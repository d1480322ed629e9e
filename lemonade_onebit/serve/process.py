"""The one process-spawning helper: argv lists only, own process group, dies with its parent."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1


def _death_signal_setter():
    """A pre-exec hook that asks the kernel to SIGKILL the child when this process dies.

    Everything it needs is looked up before fork, so the child only makes two system calls.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def spawn(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `argv` in its own session, output merged into one pipe, no stdin."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_death_signal_setter(),
    )


def terminate(proc: subprocess.Popen, grace: float = 5.0) -> int:
    """SIGTERM the child's process group, wait `grace` seconds, then SIGKILL it."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    if proc.poll() is None:
        _signal_group(proc, signal.SIGKILL)
    rc = proc.wait()
    _signal_group(proc, signal.SIGKILL)  # anything the child left in its group
    return rc


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
