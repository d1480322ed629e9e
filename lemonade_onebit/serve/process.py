"""The one process-spawning helper: argv lists only, own process group, dies with serve.

No `preexec_fn`: Python documents it as unsafe once threads run, and serve starts executors while
its drain and exit threads run. The kernel's parent-death signal is set instead by `setpriv`
(util-linux), which execs the executor, so the executor stays serve's direct child and costs about
a millisecond more to start. Where `setpriv` is missing, a `python -S` one-liner does the same.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
from functools import lru_cache
from typing import IO

# prctl(PR_SET_PDEATHSIG, SIGKILL), then exec; exit when serve died before prctl took effect.
_EXEC_WITH_DEATH_SIGNAL = (
    "import ctypes,os,sys\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@lru_cache(maxsize=1)
def _setpriv() -> str | None:
    """`setpriv`, if it knows `--pdeathsig` (util-linux 2.33+): its binary names the option."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        with open(path, "rb") as binary:
            return path if b"pdeathsig" in binary.read() else None
    except OSError:
        return None


def _death_signal_prefix() -> list[str]:
    """The argv prefix after which the child gets SIGKILL when the thread that spawned it dies
    (Linux ties PR_SET_PDEATHSIG to the thread): spawn from the main thread."""
    if not sys.platform.startswith("linux"):
        return []
    setpriv = _setpriv()
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "KILL", "--"]
    return [sys.executable, "-S", "-c", _EXEC_WITH_DEATH_SIGNAL, str(os.getpid())]


def spawn(argv: list[str], env: dict[str, str] | None = None,
          stdout: int | IO[bytes] = subprocess.PIPE, cwd: str | None = None) -> subprocess.Popen:
    """Start `argv` in its own session, output merged into `stdout` (a pipe unless given), no
    stdin, killed by the kernel when the process that started it dies (even by SIGKILL)."""
    program = shutil.which(argv[0], path=(env if env is not None else os.environ).get("PATH"))
    if program is None:  # say so here: behind the wrapper it would be the wrapper's exit code
        code = errno.EACCES if os.path.exists(argv[0]) else errno.ENOENT
        raise OSError(code, os.strerror(code), argv[0])
    return subprocess.Popen(
        [*_death_signal_prefix(), program, *argv[1:]],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group an executor leads (itself and whatever it started)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exit_on_sigterm() -> None:
    """SIGTERM ends a command the way Ctrl-C does, so its `finally` stops what it started (a
    benchmark's serves, a registry check's)."""
    import signal

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def merged_env(extra: dict[str, str]) -> dict[str, str]:
    """The executor's environment: ours, plus extras only where the user set nothing."""
    env = dict(os.environ)
    for key, value in extra.items():
        env.setdefault(key, value)
    return env

