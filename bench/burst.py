"""How close together a burst of concurrent requests reaches the executor, direct and through
`1bit serve`, measured in one run, interleaved.

llama-server takes waiting requests into its slots at the top of each decode step. When the first
requests of a burst reach it a few milliseconds apart, one slot starts alone and the rest a step or
more later; with equal-length replies the slots then stay out of step for the whole burst, and on a
GPU such bursts run about 15% slower (`docs/cuda-route.md`). What a proxy can control is the spread
of arrival times it adds, measured here with a recording executor: a minimal llama-server stand-in
(`/health`, streamed `/v1/chat/completions`) that notes when each request's first byte arrives, on
the clock every process on the machine shares.

    .venv/bin/python bench/burst.py [--streams 32] [--bursts 30] [--json F]

Reports, for each side, the medians over bursts of the time from the first arrival to the 4th
(llama-server's default slot count) and to the last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SSE = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
       b'data: {"choices":[],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n')


# -- the recording executor (stands for llama-server; serve starts it as its executor) ----------

class _Recorder(asyncio.Protocol):
    log = None

    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""
        self.stamped = False

    def data_received(self, data):
        now = time.monotonic()
        self.buf += data
        if self.buf.startswith(b"POST") and not self.stamped:
            self.stamped = True
            _Recorder.log.write(f"{now}\n")
            _Recorder.log.flush()
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        if self.buf.startswith(b"GET"):
            body = b'{"status":"ok"}'
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                                 % (len(body), body))
            self.transport.close()
            return
        length = 0
        for line in self.buf[:head_end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buf) - head_end - 4 < length:
            return
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                             b"%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE))
        self.transport.close()


def run_executor(argv: list[str]) -> int:
    port = int(argv[argv.index("--port") + 1])
    _Recorder.log = open(os.environ["BURST_LOG"], "a")

    async def main():
        server = await asyncio.get_running_loop().create_server(
            _Recorder, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
    return 0


# -- the client --------------------------------------------------------------------------------

async def burst(session, url: str, n: int, log: Path) -> list[float]:
    seen = log.stat().st_size if log.exists() else 0
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stream": True}

    async def one():
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()

    await asyncio.gather(*(one() for _ in range(n)))
    with open(log, "rb") as f:
        f.seek(seen)
        stamps = sorted(float(x) for x in f.read().split())
    assert len(stamps) == n, f"{url}: {len(stamps)} of {n} requests arrived"
    return [s - stamps[0] for s in stamps]


async def measure(urls: dict[str, str], logs: dict[str, Path], n: int, bursts: int) -> dict:
    import aiohttp

    got: dict[str, list[list[float]]] = {name: [] for name in urls}
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        for name in urls:  # warm-up
            await burst(session, urls[name], n, logs[name])
        names = list(urls)
        for i in range(bursts):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                got[name].append(await burst(session, urls[name], n, logs[name]))
                await asyncio.sleep(0.05)
    return got


def main() -> int:
    if "--port" in sys.argv and "-m" in sys.argv:  # started by serve, or below, as the executor
        return run_executor(sys.argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--bursts", type=int, default=30)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "burst.json"))
    parser.add_argument("--serve-tree", action="append", default=[], metavar="NAME=DIR",
                        help="another side: serve from the checkout DIR (e.g. a `git worktree` "
                             "of an earlier commit), measured in the same run")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from lemonade_onebit.bench.common import exit_on_sigterm, start, stop, wait_health
    from lemonade_onebit.serve import free_port

    tmp = Path(tempfile.mkdtemp(prefix="burst-"))
    executor = tmp / "llama-server"  # serve starts its executor by path: a script with our Python
    executor.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(__file__)!r}\n"
                        f"runpy.run_path(sys.argv[0], run_name='__main__')\n")
    executor.chmod(0o755)
    model = tmp / "model.gguf"
    model.write_bytes(b"GGUF")
    trees = {"serve": ROOT}
    for spec in args.serve_tree:
        name, _, tree = spec.partition("=")
        trees[name] = Path(tree).resolve()
    names = ["direct", *trees]
    logs = {name: tmp / f"{name}.log" for name in names}
    ports = {name: free_port() for name in names}
    out = open(tmp / "processes.log", "wb")
    exit_on_sigterm()
    procs = [start([str(executor), "-m", str(model), "--port", str(ports["direct"])], out,
                   env={**os.environ, "BURST_LOG": str(logs["direct"])})]
    for name, tree in trees.items():
        path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "BURST_LOG": str(logs[name]), "PYTHONPATH": path}
        procs.append(start(
            [sys.executable, "-m", "lemonade_onebit", "serve", "-m", str(model), "--device", "cpu",
             "--llama-server", str(executor), "--port", str(ports[name])], out, env=env, cwd=tree))
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    try:
        for url, proc in zip(urls.values(), procs):
            wait_health(url, proc, log=tmp / "processes.log")
        got = asyncio.run(measure(urls, logs, args.streams, args.bursts))
    finally:
        for proc in procs:
            stop(proc)

    summary = {}
    for name, bursts in got.items():
        summary[name] = {
            "to_4th_ms": statistics.median(b[min(3, len(b) - 1)] for b in bursts) * 1e3,
            "to_last_ms": statistics.median(b[-1] for b in bursts) * 1e3,
        }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"streams": args.streams, "summary": summary,
                                           "bursts": got}, indent=1))
    print(f"{args.streams} concurrent streams, {args.bursts} bursts per side, interleaved; "
          "time from the first request's arrival at the executor (medians):")
    print("| side | to the 4th | to the last |\n|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['to_4th_ms']:.2f} ms | {s['to_last_ms']:.2f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
