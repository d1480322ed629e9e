"""The pull benchmarks in bench/ run end to end at a small size (their figures are in docs/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str, env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is the benchmark's reference")
def test_pull_speed_compares_pull_with_curl(tmp_path):
    out = run("bench/pull_speed.py", "--mb", "3", "--rounds", "2", "--json", str(tmp_path / "r.json"))
    assert "| transfer rate (MB/s) |" in out and "pull / curl" in out
    assert (tmp_path / "r.json").is_file()


def test_pull_phases_times_the_transfer_against_another_checkout(tmp_path):
    out = run("bench/pull_phases.py", "--mb", "3", "--rounds", "2", "--before-tree", str(ROOT),
              env={**os.environ, "TMPDIR": str(tmp_path)})
    rows = [line for line in out.splitlines() if line.startswith(("| now |", "| before |"))]
    assert len(rows) == 2
    assert list(tmp_path.iterdir()) == []  # its hub, files and blobs go with it


@pytest.mark.executor
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_overhead_benchmark_stops_what_it_started_however_it_is_stopped(tmp_path, how):
    """Its direct llama-server and its `1bit serve` (and that serve's llama-server) go with it."""
    import signal
    import time

    import psutil

    proc = subprocess.Popen([sys.executable, "bench/overhead.py", "--rounds", "1",
                             "--readme", str(tmp_path / "README.md"),
                             "--json", str(tmp_path / "r.json")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    started: list[psutil.Process] = []
    while time.monotonic() < deadline and proc.poll() is None:
        started = me.children(recursive=True)
        if sum(p.name() == "llama-server" for p in started) == 2:
            break
        time.sleep(0.1)
    assert sum(p.name() == "llama-server" for p in started) == 2, [p.name() for p in started]
    proc.send_signal(getattr(signal, how))
    proc.wait(timeout=60)  # each child gets its grace in turn
    gone, alive = psutil.wait_procs(started, timeout=20)
    assert not alive, [p.name() for p in alive]
