"""What every bench mode shares: configs, a fresh `1bit serve` per run, HTTP, the lock, progress."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from lemonade_onebit import httpclient
from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.portable import try_lock
from lemonade_onebit.serve.process import exit_on_sigterm  # noqa: F401  (the benchmarks take it from here)

# Every request: no prompt cache, no thinking, so configs and runs compare.
COMMON = {"cache_prompt": False, "chat_template_kwargs": {"enable_thinking": False}}
# The errors a run can end in; each stops the bench with the config's log.
RUN_ERRORS = (httpclient.HTTPError, KeyError, OSError, ValueError)


@dataclass
class Config:
    name: str
    args: list[str]
    data: dict[str, list] = field(default_factory=dict)

    def samples(self, key: str) -> list:
        return self.data.setdefault(key, [])

    def as_json(self) -> dict:
        return {"name": self.name, "args": self.args, **self.data}


def parse_configs(specs: list[str]) -> list[Config]:
    configs, seen = [], set()
    for spec in specs:
        name, sep, args = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--config {spec!r}: expected NAME=ARGS (ARGS may be empty)")
        if name in seen:
            raise UsageError(f"--config {name}: the name is used twice")
        seen.add(name)
        try:
            configs.append(Config(name, shlex.split(args)))
        except ValueError as exc:
            raise UsageError(f"--config {name}: {exc}") from None
    if not configs:
        raise UsageError("give at least one --config NAME=ARGS")
    return configs


def shown_args(args: list[str]) -> str:
    return f"`{shlex.join(args)}`" if args else "(none)"


def post(url: str, path: str, body: dict, headers: dict | None = None,
         timeout: float = 600) -> dict:
    return httpclient.post_json(url + path, body, timeout=timeout, headers=headers)


def wait_health(url: str, proc: subprocess.Popen, path: str = "/health", timeout: float = 600,
                interval: float = 0.05, log: Path | None = None, what: str = "") -> None:
    """Poll `path` until it answers 200; stop at once, with the log's last line, if the
    process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            where = ""
            if log is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                where = f": {' '.join(tail)} (log: {log})"
            program = proc.args[0] if isinstance(proc.args, (list, tuple)) else proc.args
            raise RunError(f"{what or Path(str(program)).name} exited {proc.returncode}{where}")
        try:
            if httpclient.request("GET", url + path, timeout=2).status == 200:
                return
        except (httpclient.Unreachable, httpclient.HTTPError):
            pass
        time.sleep(interval)
    raise RunError(f"{url} not ready in {timeout:g} s" + (f" (log: {log})" if log else ""))


class Run:
    """One process (a `1bit serve`, or an executor started directly) with its log in a file."""

    def __init__(self, argv: list[str], port: int, log: Path, env: dict | None = None,
                 ready_path: str = "/health", what: str = "") -> None:
        self.what = what or Path(argv[0]).name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.ready_path = ready_path
        self._out = open(log, "wb")
        self.started = time.perf_counter()
        self.proc = start(argv, self._out, env)

    @classmethod
    def serve(cls, model: str, args: list[str], log: Path) -> Run:
        from lemonade_onebit.serve import free_port

        port = free_port()
        return cls([sys.executable, "-m", "lemonade_onebit", "serve", "-m", model,
                    "--port", str(port), *args], port, log, what="serve")

    def wait_ready(self, interval: float = 0.05) -> float:
        """Seconds from the start to the first 200 on the readiness path."""
        wait_health(self.url, self.proc, self.ready_path, interval=interval, log=self.log,
                    what=self.what)
        return time.perf_counter() - self.started

    def stop(self) -> None:
        stop(self.proc)
        self._out.close()


def start(argv: list[str], out, env: dict | None = None, cwd=None) -> subprocess.Popen:
    """A benchmark's child: serve's own spawn (own process group, killed by the kernel when the
    benchmark dies, even by SIGKILL), output to `out`."""
    from lemonade_onebit.serve.process import spawn

    return spawn(argv, env, stdout=out, cwd=None if cwd is None else str(cwd))


def stop(proc: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM the child's process group, SIGKILL it after `grace` seconds."""
    import signal

    from lemonade_onebit.serve.process import signal_group

    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    signal_group(proc.pid, signal.SIGKILL)  # what it left in its group
    proc.wait()


def take_lock(path: str):
    handle = open(path, "a")
    if not try_lock(handle):
        handle.close()
        raise RunError(f"another bench holds the lock {path}: wait for it, or use another --lock")
    return handle


class Progress:
    """A tqdm bar on a terminal, redrawn at every step (steps are seconds apart) with the time
    left from the average step so far; on a pipe or in a log, only the summary lines."""

    def __init__(self, total: int, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.bar = tqdm(total=max(total, 1), file=self.stream, disable=not self.stream.isatty(),
                        leave=False, mininterval=0, smoothing=0, unit="step")

    def step(self, label: str = "") -> None:
        if label:
            self.bar.set_postfix_str(label, refresh=False)
        self.bar.update(1)

    def note(self, line: str) -> None:
        self.bar.write(f"1bit bench: {line}", file=self.stream)

    def close(self) -> None:
        self.bar.close()
