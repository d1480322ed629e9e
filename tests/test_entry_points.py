"""All four entry-point groups, discovered from installed wheels and not from the source tree:
this package's own wheel (its built-in recipes and catalog come through the same groups), plus a
small plugin package that adds one of each, including a device with its own executor flag that
`1bit serve` then serves, with no edit to this package."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

EXTRA = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "onebit-extra"
        version = "1.0"

        [tool.setuptools]
        packages = ["onebit_extra"]

        [tool.setuptools.package-data]
        onebit_extra = ["*.json"]

        [project.entry-points."lemonade_onebit.launchers"]
        extra = "onebit_extra:ExtraLauncher"

        [project.entry-points."lemonade_onebit.recipes"]
        extra = "onebit_extra:recipe_file"

        [project.entry-points."lemonade_onebit.catalog"]
        extra = "onebit_extra:CATALOG"

        [project.entry-points."lemonade.plugins"]
        extra = "onebit_extra:PLUGIN"
    """,
    "onebit_extra/__init__.py": """
        from pathlib import Path

        from lemonade_onebit.backends.base import Launcher, LauncherInfo
        from lemonade_onebit.config import RouteOption


        class ExtraLauncher(Launcher):
            # A device of its own whose executor speaks the llama-server command line, with a
            # route option of its own.

            info = LauncherInfo(name="extra", device="extra", model_kinds=frozenset({"gguf"}),
                                executor="extra-server", executor_env="ONEBIT_EXTRA",
                                executor_flag="--extra-server", summary="the extra chip's server",
                                options=frozenset({"ctx_size"}), needs=("extra-chip",),
                                own_options=(RouteOption("extra_lanes", ("--extra-lanes",),
                                                         "lanes of the extra chip", "count"),),
                                llama_server_api=True, auto_kinds=frozenset(), auto_rank=-1)

            def argv(self, executor, model, port, config):
                argv = [executor, "-m", str(model.path), "--host", "127.0.0.1", "--port",
                        str(port), "--device", "none"]
                if config.ctx_size is not None:
                    argv += ["-c", str(config.ctx_size)]
                if config.option("extra_lanes"):
                    argv += ["--parallel", str(config.option("extra_lanes"))]
                return argv + list(config.extra_args)


        def recipe_file():
            return str(Path(__file__).with_name("recipes.json"))


        CATALOG = {"Extra-1bit": {"checkpoint": "org/extra-GGUF:Q4_0", "recipe": "onebit",
                                  "labels": ["chat"], "size": 0.5}}
        PLUGIN = {"name": "extra"}
    """,
    "onebit_extra/recipes.json": "[]",
}

PROBE = """
import json, sys
sys.path[:0] = [TARGET]
import lemonade_onebit
from lemonade_onebit import plugins
from lemonade_onebit.backends import launchers
from lemonade_onebit.recipes import recipe_files
from lemonade_onebit.catalog.entries import raw_catalog
print(json.dumps({
    "package": lemonade_onebit.__file__,
    "groups": {g: sorted(ep.name for ep in plugins.group(g)) for g in plugins.GROUPS},
    "launchers": [c.info.device for c in launchers()],
    "recipe_files": [str(p) for p in recipe_files()],
    "catalog": sorted(raw_catalog()),
    "plugins": {ep.name: type(ep.load()).__name__ for ep in plugins.group("lemonade.plugins")},
}))
"""


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheels")
    extra = write_package(tmp / "extra-src", EXTRA)
    wheels, target = tmp / "dist", tmp / "target"
    for src in (ROOT, extra):
        subprocess.run([PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(wheels), str(src)], check=True, capture_output=True)
    subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *map(str, wheels.glob("*.whl"))], check=True, capture_output=True)
    return target


def site_folders() -> list[str]:
    """Every site folder of the test's own python (a venv layered over another python's packages
    has two), to put after the installed target for the dependencies. The child runs with -S: no
    site processing, so no .pth file puts the source tree's editable install on its path."""
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]


def test_every_group_is_discovered_from_the_installed_wheels(installed, tmp_path):
    code = PROBE.replace("TARGET", repr(str(installed)))
    out = subprocess.run([PY, "-S", "-c", f"import sys; sys.path += {site_folders()!r}\n" + code],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path),
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["package"].startswith(str(installed))  # the wheel, not the source tree
    assert "cpu" in found["groups"]["lemonade_onebit.launchers"]
    assert "extra" in found["groups"]["lemonade_onebit.launchers"]
    assert found["groups"]["lemonade_onebit.recipes"] == ["extra", "onebit"]
    assert found["groups"]["lemonade_onebit.catalog"] == ["extra", "onebit"]
    assert found["groups"]["lemonade.plugins"] == ["extra", "onebit"]
    assert "extra" in found["launchers"] and "cpu" in found["launchers"]
    assert found["recipe_files"][0].startswith(str(installed))  # the shipped set, from the wheel
    assert found["recipe_files"][1].endswith("onebit_extra/recipes.json")
    assert "Extra-1bit" in found["catalog"] and "Qwen3-4B-Instruct-2507-1bit" in found["catalog"]
    assert found["plugins"] == {"extra": "dict", "onebit": "OnebitPlugin"}


def test_the_onebit_plugin_object_describes_recipe_launchers_and_catalog():
    from importlib.metadata import entry_points

    plugin = entry_points(group="lemonade.plugins")["onebit"].load()
    assert plugin.recipe["name"] == "onebit" and plugin.recipe["readiness"] == "/health"
    assert plugin.recipe["serve"][:2] == ["1bit", "serve"]
    assert "cpu" in [c.info.device for c in plugin.launchers()]
    catalog = plugin.catalog()
    assert catalog["Qwen3-4B-Instruct-2507-1bit"]["recipe"] == "onebit"
    assert plugin.llama_server_shim == "onebit-llama-server"
    assert plugin.recipe["llama_server_shims"]["cpu"] == "onebit-llama-server-cpu"
    assert plugin.recipe["devices"][0] == "auto" and "cpu" in plugin.recipe["devices"]


def run_installed(installed: Path, tmp_path: Path, args: list[str], **kw) -> subprocess.Popen:
    """`1bit ARGS` from the installed wheels only (no source tree, no editable install)."""
    code = (f"import sys; sys.path[:0] = [{str(installed)!r}]; sys.path += {site_folders()!r}\n"
            "from lemonade_onebit.cli import main\nsys.exit(main(sys.argv[1:]))")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    return subprocess.Popen([PY, "-S", "-c", code, *args], cwd=tmp_path, env=env, **kw)


@pytest.mark.executor
def test_a_plugin_device_with_its_own_executor_flag_serves_a_chat(installed, tmp_path, smollm2,
                                                                  llama_server):
    from conftest import free_port, http, sse_events

    help_text = run_installed(installed, tmp_path, ["serve", "--help"], stdout=subprocess.PIPE,
                              text=True).communicate(timeout=60)[0]
    assert "--extra-server PATH" in help_text and "the extra chip's server" in help_text
    assert re.search(r"--extra-lanes N\s+lanes of the extra chip \(extra\)", help_text)
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = run_installed(installed, tmp_path, [
            "serve", "-m", str(smollm2), "--device", "extra", "--extra-server", llama_server,
            "--port", str(port), "-c", "2048", "--extra-lanes", "3"], stdout=out,
            stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            assert proc.poll() is None, log.read_text()
            try:
                if http("GET", url + "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            import time

            time.sleep(0.1)
        body = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 8, "temperature": 0}
        status, raw = http("POST", url + "/v1/chat/completions", body)
        assert status == 200, raw
        assert json.loads(raw)["choices"][0]["message"]["content"]
        status, raw = http("POST", url + "/v1/chat/completions", {**body, "stream": True})
        assert status == 200 and sse_events(raw)[-1] == b"[DONE]"
        models = json.loads(http("GET", url + "/v1/models")[1])["data"]
        assert models[0]["device"] == "extra"
        assert f"on extra ({llama_server})" in log.read_text()
        # The plugin's own option reached its executor: three slots.
        assert json.loads(http("GET", url + "/props")[1])["total_slots"] == 3
        # A route option the plugin's route does not declare is refused with the reason, and
        # so is the plugin's option on a route that does not declare it.
        for device, option, value in (("extra", "--parallel", "2"), ("cpu", "--extra-lanes", "2")):
            refused = run_installed(installed, tmp_path, [
                "serve", "-m", str(smollm2), "--device", device, "--extra-server", llama_server,
                option, value], stderr=subprocess.PIPE, text=True)
            assert refused.wait(timeout=60) == 2
            assert f"{option} is not supported on the {device} route" in refused.stderr.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
