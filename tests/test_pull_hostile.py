"""`1bit pull` against a hostile hub (`tests/hubserver.py` with its hostile knobs) and a cache with
symlinks planted to lead outside: every hub answer that would become a path outside the cache is
refused with exit 1 and one line, and nothing outside the cache is created, changed or deleted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import ONEBIT
from hubserver import COMMIT, Hub

REPO = "org/m-GGUF"
FILE = "m-Q4_0.gguf"
FOLDER = "models--org--m-GGUF"
PRECIOUS = b"precious: not a model, and not the cache's"


def gguf_bytes(n: int, seed: int = 0) -> bytes:
    return b"GGUF\x03\x00\x00\x00" + (bytes(range(256)) * (n // 256 + 1))[seed:seed + n]


DATA = gguf_bytes(5000)  # an LFS file for the stand-in hub (>= 1024 bytes)
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def hub(tmp_path):
    h = Hub(tmp_path / "hub-files").start()
    h.add(REPO, FILE, DATA)
    yield h
    h.stop()


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hf-cache"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder next to the cache holding files a hostile answer names."""
    folder = tmp_path / "outside"
    (folder / "dir").mkdir(parents=True)
    (folder / "keep.gguf").write_bytes(PRECIOUS)
    (folder / "dir" / "kept.bin").write_bytes(PRECIOUS)
    return folder


def state(root: Path, skip: Path) -> dict:
    """Everything under `root` but `skip`: each entry's kind and its bytes, link target, mode and
    mtime, so a creation, a change or a deletion anywhere shows."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d != skip]
        for name in dirnames + filenames:
            p = here / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if p.is_symlink():
                seen[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                seen[rel] = ("dir", st.st_mode)
            else:
                seen[rel] = ("file", p.read_bytes(), st.st_mode, st.st_mtime_ns)
    return seen


@pytest.fixture
def untouched(tmp_path, cache, outside, hub):
    """Call it after the set-up: it asserts that nothing outside the cache changed since."""
    marks = []

    def check():
        marks.append(state(tmp_path, cache))
        if len(marks) > 1:
            assert marks[-1] == marks[0], "a pull touched something outside the cache"
            assert (outside / "keep.gguf").read_bytes() == PRECIOUS
    return check


def pull(hub: Hub, cache: Path, *args: str, spec: str = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_ETAG_TIMEOUT": "10"}
    return subprocess.run([ONEBIT, "pull", spec, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def refusal(out: subprocess.CompletedProcess, *parts: str) -> str:
    """The one line of a refused pull, checked for exit 1, no traceback and `parts`."""
    assert out.returncode == 1, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("listed", [
    "../../../../outside/m-Q4_0.gguf",
    "sub/../../../../../outside/m-Q4_0.gguf",
    "{outside}/m-Q4_0.gguf",
    "..\\..\\..\\..\\outside\\m-Q4_0.gguf",
    "C:/outside/m-Q4_0.gguf",
    "./m-Q4_0.gguf",
    "sub//m-Q4_0.gguf",
    "m-Q4_0\0.gguf",
])
def test_a_listed_path_that_is_not_plain_inside_the_repo_is_refused(hub, cache, outside,
                                                                    untouched, listed):
    listed = listed.format(outside=outside)
    hub.listed_as[FILE] = listed
    untouched()
    out = pull(hub, cache)
    refusal(out, hub.url, f"a file of {REPO} whose path is not a plain path inside the repo",
            repr(listed), f"nothing outside {cache} was touched")
    untouched()
    assert all(p.startswith("/api/") for _, p, _ in hub.requests)  # refused from the listing


@pytest.mark.parametrize("etag", [
    '"../../../outside/blob"',
    'W/"../../../outside/blob"',
    '"{outside}/blob"',
    '"../../../outside/keep.gguf"',  # an existing file: it was taken for a blob and deleted
    '"{outside}/keep.gguf"',
    '"not-a-hash"',
    '"' + "0" * 40 + '"',  # a git blob id for an LFS file
    '"' + SHA.upper() + '"',
])
def test_an_etag_that_is_not_a_sha256_is_refused(hub, cache, outside, untouched, etag):
    etag = etag.format(outside=outside)
    hub.etags[FILE] = etag
    untouched()
    out = pull(hub, cache)
    sent = etag.removeprefix("W/").strip('"')
    refusal(out, hub.url, f"for {FILE} an ETag that is not a sha256", repr(sent),
            f"nothing outside {cache} was touched")
    untouched()
    assert hub.gets(FILE) == []  # the HEAD only: no byte was fetched


def test_an_etag_of_another_file_already_cached_is_refused(hub, cache, untouched):
    other = gguf_bytes(6000, 7)
    hub.add(REPO, "m-Q8_0.gguf", other)
    assert pull(hub, cache, spec=f"{REPO}:Q8_0").returncode == 0
    other_sha = hashlib.sha256(other).hexdigest()
    hub.etags[FILE] = f'"{other_sha}"'
    untouched()
    out = pull(hub, cache, spec=f"{REPO}:Q4_0")
    refusal(out, hub.url, f"an ETag other than the sha256 {SHA} its listing gave", repr(other_sha))
    untouched()
    assert (cache / FOLDER / "blobs" / other_sha).read_bytes() == other
    assert not (cache / FOLDER / "snapshots" / COMMIT / FILE).exists()


@pytest.mark.parametrize("commit", [
    "../../../outside/snap",
    "{outside}/snap",
    "main",
    "0123456789abcdef",
    COMMIT.upper(),
    COMMIT + "/../../../../outside",
])
def test_a_commit_that_is_not_40_hex_is_refused(hub, cache, outside, untouched, commit):
    commit = commit.format(outside=outside)
    hub.commit = commit
    untouched()
    out = pull(hub, cache)
    refusal(out, hub.url, f"for {FILE} a commit (X-Repo-Commit) that is not 40 hex digits",
            repr(commit), f"nothing outside {cache} was touched")
    untouched()
    assert not (cache / FOLDER / "refs").exists() and not (cache / FOLDER / "snapshots").exists()


@pytest.mark.parametrize(("planted", "to"), [
    (FOLDER, "dir"),
    (f"{FOLDER}/blobs", "dir"),
    (f"{FOLDER}/snapshots", "dir"),
    (f"{FOLDER}/snapshots/{COMMIT}", "dir"),
    (f"{FOLDER}/refs", "dir"),
    (f"{FOLDER}/refs/main", "keep.gguf"),
    (f"{FOLDER}/blobs/{SHA}.incomplete", "keep.gguf"),
    (f".locks/{FOLDER}", "dir"),
], ids=["repo-folder", "blobs", "snapshots", "snapshot", "refs", "refs-main", "incomplete-blob",
        "locks"])
def test_a_symlink_in_the_cache_that_leads_outside_is_refused(hub, cache, outside, untouched,
                                                              planted, to):
    link = cache / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / to)
    untouched()
    out = pull(hub, cache)
    refusal(out, f"the symlink {link} leads out of the cache",
            f"nothing outside {cache} was touched", "Remove that symlink")
    untouched()
    assert link.is_symlink() and os.readlink(link) == str(outside / to)


def test_a_blob_already_in_the_cache_that_fails_the_check_is_left(hub, cache, untouched):
    blob = cache / FOLDER / "blobs" / SHA
    blob.parent.mkdir(parents=True)
    blob.write_bytes(PRECIOUS)  # not what the hub lists under its name, and no GGUF magic
    untouched()
    out = pull(hub, cache)
    refusal(out, f"{FILE}: the blob {blob} already in the cache is not a GGUF file",
            "this pull did not write it and left it as it is: delete it, then pull again")
    untouched()
    assert blob.read_bytes() == PRECIOUS


def test_a_snapshot_link_leading_outside_is_replaced_by_one_to_the_blob(hub, cache, outside,
                                                                        untouched):
    link = cache / FOLDER / "snapshots" / COMMIT / FILE
    link.parent.mkdir(parents=True)
    link.symlink_to(outside / "keep.gguf")
    untouched()
    out = pull(hub, cache, "--json")
    assert out.returncode == 0, out.stderr
    (got,) = json.loads(out.stdout)["files"]
    assert Path(got) == link and link.read_bytes() == DATA
    assert os.path.realpath(link) == str((cache / FOLDER / "blobs" / SHA).resolve())
    untouched()


def test_a_blob_linked_to_a_file_elsewhere_is_used_as_it_is(hub, cache, tmp_path):
    """`1bit lemonade register` links a blob to the user's own file: a pull takes it, with no
    download, and writes nothing next to that file."""
    own = tmp_path / "models" / "m.gguf"
    own.parent.mkdir()
    own.write_bytes(DATA)
    blob = cache / FOLDER / "blobs" / SHA
    blob.parent.mkdir(parents=True)
    blob.symlink_to(own)
    out = pull(hub, cache, "--json")
    assert out.returncode == 0, out.stderr
    assert Path(json.loads(out.stdout)["files"][0]).read_bytes() == DATA
    assert hub.gets(FILE) == [] and sorted(own.parent.iterdir()) == [own]
