"""All four entry-point groups, discovered from installed wheels and not from the source tree:
this package's own wheel, plus a small plugin package that adds one of each."""

from __future__ import annotations

import json
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


        class ExtraLauncher(Launcher):
            info = LauncherInfo(name="extra", device="extra", model_kinds=frozenset({"gguf"}),
                                executor="extra-server", executor_option=None,
                                executor_env="ONEBIT_EXTRA", needs=("extra-chip",),
                                auto_kinds=frozenset(), auto_rank=-1)


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


def test_every_group_is_discovered_from_the_installed_wheels(installed, tmp_path):
    # -S: no site processing, so the source tree's editable install is not on the path; the
    # venv's site-packages is added after the target only for the dependencies.
    site = next(p for p in sys.path if p.endswith("site-packages"))
    code = PROBE.replace("TARGET", repr(str(installed))) + ""
    out = subprocess.run([PY, "-S", "-c", f"import sys; sys.path.append({site!r})\n" + code],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path),
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["package"].startswith(str(installed))  # the wheel, not the source tree
    assert "cpu" in found["groups"]["lemonade_onebit.launchers"]
    assert "extra" in found["groups"]["lemonade_onebit.launchers"]
    assert found["groups"]["lemonade_onebit.recipes"] == ["extra"]
    assert found["groups"]["lemonade_onebit.catalog"] == ["extra"]
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
