"""`1bit delete` on real Hugging Face cache layouts (blobs, snapshots, refs) built on disk: every
revision of the entry, its mmproj and shards, `.incomplete` blobs, model folders, and the files
other revisions or variants still need."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import ONEBIT

from lemonade_onebit.portable import try_lock

OLD, MAIN = "a" * 40, "b" * 40
GEMMA = "ggml-org/gemma-3-4b-it-GGUF"  # Gemma-3-4b-it-1bit: Q4_K_M with mmproj-model-f16.gguf
QWEN = "unsloth/Qwen3-0.6B-GGUF"  # Qwen3-0.6B-1bit: Q4_K_M


class Repo:
    """One repo in the cache's layout; blobs are sparse files, so sizes can be GBs for free."""

    def __init__(self, cache: Path, repo: str) -> None:
        self.folder = cache / ("models--" + repo.replace("/", "--"))
        self.locks = cache / ".locks" / self.folder.name

    def blob(self, etag: str, size: int, incomplete: bool = False) -> Path:
        path = self.folder / "blobs" / (etag + (".incomplete" if incomplete else ""))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.truncate(size)
        return path

    def link(self, commit: str, path: str, etag: str, size: int = 1000) -> Path:
        blob = self.blob(etag, size)
        link = self.folder / "snapshots" / commit / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
        return link

    def main(self, commit: str) -> None:
        (self.folder / "refs").mkdir(parents=True, exist_ok=True)
        (self.folder / "refs" / "main").write_text(commit)


@pytest.fixture
def cache(tmp_path) -> Path:
    path = tmp_path / "hub"
    path.mkdir()
    return path


@pytest.fixture
def env(tmp_path, cache) -> dict:
    return {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
            "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def delete(name: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([ONEBIT, "delete", name], capture_output=True, text=True, env=env,
                          timeout=60)


def test_delete_removes_every_revision_the_mmproj_the_incomplete_blob_and_the_repo(cache, env):
    repo = Repo(cache, GEMMA)
    for commit in (OLD, MAIN):  # both revisions link one blob
        repo.link(commit, "gemma-3-4b-it-Q4_K_M.gguf", "model", 1_000_000_000)
    repo.link(MAIN, "mmproj-model-f16.gguf", "mmproj", 300_000_000)
    repo.main(MAIN)
    repo.blob("next", 20_000_000, incomplete=True)
    out = delete("Gemma-3-4b-it-1bit", env)
    assert out.returncode == 0, out.stderr
    assert "1bit delete: Gemma-3-4b-it-1bit: removed 3 file(s), 1.32 GB" in out.stderr
    assert not repo.folder.exists()
    out = delete("Gemma-3-4b-it-1bit", env)
    assert out.returncode == 0 and "Gemma-3-4b-it-1bit is not downloaded" in out.stderr


def test_delete_keeps_another_variant_of_the_same_revision(cache, env):
    repo = Repo(cache, QWEN)
    repo.link(OLD, "Qwen3-0.6B-Q4_K_M.gguf", "q4", 2_000_000_000)
    repo.link(MAIN, "Qwen3-0.6B-Q4_K_M.gguf", "q4", 2_000_000_000)
    q8 = repo.link(MAIN, "Qwen3-0.6B-Q8_0.gguf", "q8", 3000)
    repo.main(MAIN)
    out = delete("Qwen3-0.6B-1bit", env)
    assert out.returncode == 0, out.stderr
    assert "removed 1 file(s), 2.00 GB" in out.stderr
    assert not (repo.folder / "snapshots" / OLD).exists()
    assert not (repo.folder / "blobs" / "q4").exists()
    assert sorted(p.name for p in (repo.folder / "snapshots" / MAIN).iterdir()) == [q8.name]
    assert q8.stat().st_size == 3000 and (repo.folder / "refs" / "main").read_text() == MAIN


def test_delete_keeps_a_blob_a_kept_revision_still_links(cache, env):
    repo = Repo(cache, QWEN)
    repo.link(OLD, "Qwen3-0.6B-Q4_K_M.gguf", "shared", 5000)
    kept = repo.link(MAIN, "model.gguf", "shared", 5000)  # the same bytes under another name
    repo.main(MAIN)
    out = delete("Qwen3-0.6B-1bit", env)
    assert out.returncode == 0, out.stderr
    assert "removed 1 file(s), 0.00 GB" in out.stderr
    assert not (repo.folder / "snapshots" / OLD).exists()
    assert kept.stat().st_size == 5000 and (repo.folder / "blobs" / "shared").is_file()


def test_delete_removes_a_shard_set_an_interrupted_pull_left_short(cache, env):
    repo = Repo(cache, QWEN)
    repo.link(MAIN, "Qwen3-0.6B-Q4_K_M-00001-of-00002.gguf", "shard1", 4000)
    repo.main(MAIN)
    repo.blob("shard2", 1500, incomplete=True)
    repo.locks.mkdir(parents=True)
    (repo.locks / "shard2.lock").touch()  # left by the pull, held by no one now
    out = delete("Qwen3-0.6B-1bit", env)
    assert out.returncode == 0, out.stderr
    assert "removed 2 file(s)" in out.stderr
    assert not repo.folder.exists()


def test_delete_refuses_while_a_pull_writes_the_repo(cache, env):
    repo = Repo(cache, QWEN)
    model = repo.link(MAIN, "Qwen3-0.6B-Q4_K_M.gguf", "q4", 4000)
    part = repo.blob("q8", 1500, incomplete=True)
    repo.locks.mkdir(parents=True)
    with open(repo.locks / "q8.lock", "a") as held:
        assert try_lock(held)
        out = delete("Qwen3-0.6B-1bit", env)
    assert out.returncode == 1 and "a pull is writing q8.incomplete; wait for it" in out.stderr
    assert model.is_file() and part.is_file()


def test_delete_removes_a_model_folder_entry(cache, env, tmp_path):
    site = tmp_path / "site"  # a plugin package adding an onnx-style entry: a repo, no variant
    (site / "tiny_catalog-1.0.dist-info").mkdir(parents=True)
    (site / "tiny_catalog-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tiny-catalog\nVersion: 1.0\n")
    (site / "tiny_catalog-1.0.dist-info" / "entry_points.txt").write_text(
        "[lemonade_onebit.catalog]\ntiny = tiny_catalog:ENTRIES\n")
    (site / "tiny_catalog.py").write_text(textwrap.dedent("""
        ENTRIES = {"Tiny-Onnx-1bit": {"checkpoint": "org/tiny-onnx", "recipe": "onebit",
                                      "labels": ["chat"], "size": 0.01}}
    """))
    repo = Repo(cache, "org/tiny-onnx")
    for path in ("model.onnx", "genai_config.json", "tokenizer/tokenizer.json"):
        repo.link(MAIN, path, path.replace("/", "-"), 100_000_000)
    repo.main(MAIN)
    path = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    out = delete("Tiny-Onnx-1bit", {**env, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr
    assert "1bit delete: Tiny-Onnx-1bit: removed 3 file(s), 0.30 GB" in out.stderr
    assert not repo.folder.exists()


def test_delete_of_an_entry_not_in_the_cache_leaves_the_repo_alone(cache, env):
    repo = Repo(cache, GEMMA)
    other = repo.link(MAIN, "gemma-3-4b-it-Q8_0.gguf", "q8", 3000)
    repo.main(MAIN)
    out = delete("Gemma-3-4b-it-1bit", env)
    assert out.returncode == 0 and "Gemma-3-4b-it-1bit is not downloaded" in out.stderr
    assert other.stat().st_size == 3000


def test_delete_of_a_damaged_repo_folder_says_which_folder_to_remove(cache, env):
    repo = Repo(cache, GEMMA)
    link = repo.link(MAIN, "gemma-3-4b-it-Q4_K_M.gguf", "model", 3000)
    (repo.folder / "blobs" / "model").unlink()  # the link now points nowhere
    out = delete("Gemma-3-4b-it-1bit", env)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"{repo.folder} is not a cache folder huggingface_hub can read" in out.stderr
    assert "Blob missing" in out.stderr and link.is_symlink()
