"""Where a pull's time goes: `fetch` (the transfer of `1bit pull`) called in-process on a 100 MB
file from the local hub server (`tests/hubserver.py`, in its own process), this checkout's
against another's, interleaved. For each: when the last byte was in the file (from the progress
callback), the CPU time of the receiving thread, and how long after the last byte the sha256 was
done (when `fetch` returns). Usage:

    .venv/bin/python bench/pull_phases.py [--rounds 9] [--mb 100] [--before-tree DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUB = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from hubserver import Hub
hub = Hub(Path(sys.argv[2], "hub")).start()
hub.add("bench/phases", "f.gguf", Path(sys.argv[2], "f.gguf"))
print(hub.url, flush=True)
sys.stdin.read()
"""


def load(name: str, tree: Path):
    spec = importlib.util.spec_from_file_location(
        name, tree / "lemonade_onebit" / "catalog" / "download.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Clock:
    """A progress bar that notes when the count reached the file's size."""

    def __init__(self, size: int) -> None:
        self.size, self.count, self.done = size, 0, None

    def update(self, n: int) -> None:
        self.count += n
        if self.count >= self.size and self.done is None:
            self.done = time.perf_counter()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--before-tree", metavar="DIR", help="another checkout, e.g. a `git "
                        "worktree` of an earlier commit")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sides = {"now": load("download_now", ROOT)}
    if args.before_tree:
        sides["before"] = load("download_before", Path(args.before_tree).resolve())
    work = Path(tempfile.mkdtemp(prefix="1bit-pull-phases-"))
    hub = None
    rows: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in sides}
    try:
        source = work / "f.gguf"
        source.write_bytes(b"GGUF" + os.urandom(args.mb * 1_000_000 - 4))
        sha, size = hashlib.sha256(source.read_bytes()).hexdigest(), source.stat().st_size
        hub = subprocess.Popen([sys.executable, "-c", HUB, str(ROOT / "tests"), str(work)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        url = hub.stdout.readline().strip() + "/bench/phases/resolve/main/f.gguf"
        names = list(sides)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                blob = work / "blob"
                blob.unlink(missing_ok=True)
                clock = Clock(size)
                cpu, start = time.thread_time(), time.perf_counter()
                got = sides[name].fetch(url, blob, work / "lock", size, sha, {}, clock)
                end, cpu = time.perf_counter(), time.thread_time() - cpu
                assert got == sha and clock.done is not None
                rows[name].append(((clock.done - start) * 1e3, cpu * 1e3,
                                   (end - clock.done) * 1e3, (end - start) * 1e3))
    finally:
        if hub is not None:
            hub.stdin.close()
            hub.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"| fetch of a {args.mb} MB file | last byte in the file (ms) | receiving thread CPU "
          f"(ms) | sha256 done after the last byte (ms) | total (ms) | MB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in rows.items():
        med = [statistics.median(x[j] for x in rs) for j in range(4)]
        print(f"| {name} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} | {med[3]:.0f} | "
              f"{size / med[3] / 1e3:.0f} |")
    print(f"\n{args.rounds} rounds interleaved, medians.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
