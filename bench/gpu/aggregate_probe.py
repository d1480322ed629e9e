"""Where the aggregate tok/s of many concurrent streams goes when a proxy sits in front of
llama-server: the same batches of concurrent streams sent, interleaved, to

- `direct`         llama-server A;
- `proxy-tcp`      a bare byte-forwarding proxy (its own process) in front of A;
- `serve`          `1bit serve` (on uvloop, as installed) in front of its own llama-server;
- `serve-asyncio`  the same on asyncio's own event loop.

Each batch records every stream's response-head, first-token and end times from the batch's start,
and the CPU seconds each process used, so a loss shows as a late start, a slow middle or a late
end. llama-server answers a request's head when a slot takes it, so the heads show the slots' waves.

    python bench/gpu/aggregate_probe.py --llama-server BIN --model M.gguf --device cuda \
        [--reps 10] [--json out.json]
    python bench/gpu/aggregate_probe.py --summarise out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from lemonade_onebit.backends import launcher_for  # noqa: E402
from lemonade_onebit.bench.common import wait_health  # noqa: E402
from lemonade_onebit.catalog.resolve import resolve_model  # noqa: E402
from lemonade_onebit.config import ServeConfig  # noqa: E402
from lemonade_onebit.serve import free_port  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
BATCHES = tuple(tuple(int(x) for x in b.split("x"))
                for b in os.environ.get("PROBE_BATCHES", "1x64,8x64,32x64,8x256").split(","))


# -- the bare proxy ------------------------------------------------------------------------------

class _Pipe(asyncio.Protocol):
    def __init__(self) -> None:
        self.peer: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.early = bytearray()

    def connection_made(self, transport):
        self.transport = transport
        transport.set_write_buffer_limits(0)

    def data_received(self, data):
        if self.peer is None:
            self.early += data
        else:
            self.peer.write(data)

    def connection_lost(self, exc):
        if self.peer is not None:
            self.peer.close()


async def _proxy(listen_port: int, target: str) -> None:
    loop = asyncio.get_running_loop()

    async def connect_upstream(client: _Pipe) -> None:
        if target.startswith("/"):
            transport, upstream = await loop.create_unix_connection(_Pipe, target)
        else:
            host, port = target.rsplit(":", 1)
            transport, upstream = await loop.create_connection(_Pipe, host, int(port))
        upstream.peer = client.transport
        client.peer = transport
        if client.early:
            transport.write(bytes(client.early))
            client.early.clear()

    class Client(_Pipe):
        def connection_made(self, transport):
            super().connection_made(transport)
            loop.create_task(connect_upstream(self))

    server = await loop.create_server(Client, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


# -- the client ----------------------------------------------------------------------------------

# side -> the llama-server process that does its work
EXECUTOR = {"direct": "llama-a", "proxy-tcp": "llama-a", "serve": "llama-serve",
            "serve-asyncio": "llama-serve-asyncio"}


async def one_stream(session: aiohttp.ClientSession, url: str, tokens: int, t0: float) -> dict:
    body = {"messages": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    first = None
    raw = bytearray()
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        head = time.perf_counter() - t0
        async for chunk in resp.content.iter_any():
            if first is None and b'"content"' in chunk:
                first = time.perf_counter() - t0
            raw += chunk
    end = time.perf_counter() - t0
    events = [e for e in bytes(raw).split(b"\n\n") if e.startswith(b"data: {")]
    got = json.loads(events[-1][6:])["usage"]["completion_tokens"]
    return {"head": head, "first": first, "end": end, "tokens": got}


def cpu_seconds(procs: dict[str, psutil.Process]) -> dict[str, float]:
    out = {}
    for name, proc in procs.items():
        try:
            t = proc.cpu_times()
            out[name] = t.user + t.system
        except psutil.Error:
            out[name] = float("nan")
    return out


def thread_times(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


async def run(urls: dict[str, str], procs: dict[str, psutil.Process], reps: int) -> list[dict]:
    records = []
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=600)
    names = list(urls)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for name in names:  # warm-up
            await one_stream(session, urls[name], 8, time.perf_counter())
        for rep in range(reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for n, tokens in BATCHES:
                for name in order:
                    before = cpu_seconds(procs)
                    llama = procs[EXECUTOR[name]]
                    threads0 = thread_times(llama)
                    t0 = time.perf_counter()
                    streams = await asyncio.gather(
                        *(one_stream(session, urls[name], tokens, t0) for _ in range(n)))
                    wall = time.perf_counter() - t0
                    after = cpu_seconds(procs)
                    threads1 = thread_times(llama)
                    deltas = sorted((threads1[k] - v for k, v in threads0.items() if k in threads1),
                                    reverse=True)
                    records.append({
                        "rep": rep, "side": name, "n": n, "tokens": tokens, "wall": wall,
                        "tps": sum(s["tokens"] for s in streams) / wall,
                        "streams": streams,
                        "cpu": {k: after[k] - before[k] for k in before},
                        "llama_top_threads": deltas[:4],
                    })
            print(f"rep {rep + 1}/{reps} done", file=sys.stderr, flush=True)
    return records


SLOTS = 4  # llama-server's default parallel slots
WAVE_GAP = 0.02  # s: response heads further apart than this came in different waves of the slots


def out_of_step(records: list[dict], names: list[str]) -> list[str]:
    """Per side, the bursts of 32 (after the first rep) whose heads came in more waves than
    32 / SLOTS: a slot ran apart from the others. With their median tok/s and the others'."""
    lines = []
    for name in names:
        rs = [r for r in records if r["side"] == name and r["n"] == 32 and r["rep"] > 0]
        if not rs:
            continue
        apart, together = [], []
        for r in rs:
            heads = sorted(s["head"] for s in r["streams"])
            waves = 1 + sum(1 for a, b in zip(heads, heads[1:]) if b - a > WAVE_GAP)
            (apart if waves > 32 // SLOTS else together).append(r["tps"])
        tps = [f"{label} {statistics.median(xs):.0f} tok/s" for label, xs in
               (("out of step", apart), ("in step", together)) if xs]
        lines.append(f"32-stream bursts out of step, {name}: {len(apart)} of {len(rs)} "
                     f"(median {', '.join(tps)})")
    return lines


def summarise(records: list[dict], names: list[str]) -> str:
    lines = ["| batch | " + " | ".join(f"{n} tok/s" for n in names) + " | "
             + " | ".join(f"{n}/direct" for n in names[1:]) + " |",
             "|---" * (2 * len(names)) + "|"]
    detail = []
    for n, tokens in BATCHES:
        med = {}
        ratios = {}
        for name in names:
            rs = [r for r in records if r["side"] == name and r["n"] == n and r["tokens"] == tokens]
            med[name] = statistics.median(r["tps"] for r in rs)
        for name in names[1:]:
            base = "direct"
            pairs = []
            for rep in {r["rep"] for r in records}:
                a = [r["tps"] for r in records if r["rep"] == rep and r["side"] == name
                     and r["n"] == n and r["tokens"] == tokens]
                b = [r["tps"] for r in records if r["rep"] == rep and r["side"] == base
                     and r["n"] == n and r["tokens"] == tokens]
                pairs.append(a[0] / b[0])
            ratios[name] = statistics.median(pairs)
        lines.append(f"| {n}x{tokens} | " + " | ".join(f"{med[x]:.1f}" for x in names) + " | "
                     + " | ".join(f"{ratios[x]:.3f}" for x in names[1:]) + " |")
        for name in names:
            rs = [r for r in records if r["side"] == name and r["n"] == n and r["tokens"] == tokens]
            firsts = [max(s["first"] for s in r["streams"]) for r in rs]
            heads = [max(s["head"] for s in r["streams"]) for r in rs]
            ends = [r["wall"] for r in rs]
            cpu = {k: statistics.median(r["cpu"][k] / r["wall"] for r in rs) for k in rs[0]["cpu"]}
            top = statistics.median(r["llama_top_threads"][0] / r["wall"] for r in rs)
            detail.append(
                f"{n}x{tokens} {name:10s} last head {statistics.median(heads) * 1e3:7.1f} ms, "
                f"last first token {statistics.median(firsts) * 1e3:7.1f} ms, "
                f"wall {statistics.median(ends) * 1e3:7.1f} ms; llama busiest thread {top:.2f}; "
                + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    return "\n".join(lines + [""] + detail + [""] + out_of_step(records, names))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proxy", nargs=2, metavar=("PORT", "TARGET"), help=argparse.SUPPRESS)
    parser.add_argument("--llama-server")
    parser.add_argument("--model")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", default="aggregate-probe.json")
    parser.add_argument("--summarise", metavar="F", help="only summarise the records in F")
    args = parser.parse_args()
    if args.summarise:
        records = json.loads(Path(args.summarise).read_text())
        print(summarise(records, list(dict.fromkeys(r["side"] for r in records))))
        return 0
    if args.proxy:
        asyncio.run(_proxy(int(args.proxy[0]), args.proxy[1]))
        return 0

    launcher = launcher_for(args.device)()
    args.llama_server = args.llama_server or launcher.installed_executor()
    tmp = Path(tempfile.mkdtemp(prefix="probe-"))
    port_a, port_p, port_s, port_n = (free_port() for _ in range(4))
    argv_a = launcher.argv(args.llama_server, resolve_model(args.model), port_a,
                           ServeConfig(model=args.model))
    serve_args = ["serve", "-m", args.model, "--device", args.device,
                  "--llama-server", args.llama_server, "--port"]
    # The same serve on asyncio's own loop: uvloop made unimportable.
    no_uvloop = ("import sys; sys.modules['uvloop'] = None; "
                 "from lemonade_onebit.cli import main; sys.exit(main())")
    starts = {
        "a": argv_a,
        "proxy": [sys.executable, __file__, "--proxy", str(port_p), f"127.0.0.1:{port_a}"],
        # llama-server's own 4 slots behind serve too, as on the direct side (SLOTS)
        "serve": [str(Path(sys.executable).parent / "1bit"), *serve_args, str(port_s),
                  "--", "-np", "-1"],
        "serve-asyncio": [sys.executable, "-c", no_uvloop, *serve_args, str(port_n),
                          "--", "-np", "-1"],
    }
    procs = {}
    try:
        for name, argv in starts.items():
            procs[name] = subprocess.Popen(argv, stdout=open(tmp / f"{name}.log", "wb"),
                                           stderr=subprocess.STDOUT)
        urls = {"direct": f"http://127.0.0.1:{port_a}",
                "proxy-tcp": f"http://127.0.0.1:{port_p}",
                "serve": f"http://127.0.0.1:{port_s}",
                "serve-asyncio": f"http://127.0.0.1:{port_n}"}
        for (name, proc), url in zip(procs.items(), urls.values()):
            wait_health(url, proc, log=tmp / f"{name}.log")
        ps = {"llama-a": psutil.Process(procs["a"].pid),
              "llama-serve": psutil.Process(procs["serve"].pid).children()[0],
              "llama-serve-asyncio": psutil.Process(procs["serve-asyncio"].pid).children()[0],
              "serve": psutil.Process(procs["serve"].pid),
              "serve-asyncio": psutil.Process(procs["serve-asyncio"].pid),
              "proxy-tcp": psutil.Process(procs["proxy"].pid),
              "client": psutil.Process()}
        print(f"cores: {os.cpu_count()}; llama-a argv: {argv_a}", file=sys.stderr)
        records = asyncio.run(run(urls, ps, args.reps))
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(timeout=15)
    Path(args.json).write_text(json.dumps(records))
    print(summarise(records, list(urls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
