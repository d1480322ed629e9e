"""Launchers as data: the entry-point registry, route choice, executor lookup, the CPU argv."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lemonade_onebit.backends import GROUP, launcher_for, launchers
from lemonade_onebit.backends.executors import resolve_executor
from lemonade_onebit.backends.llamacpp import CpuLauncher
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.modelref import ModelRef
from lemonade_onebit.route import choose_launcher, refusals

MODEL = ModelRef("gguf", Path("/models/m.gguf"), "m")


def test_cpu_launcher_comes_from_the_entry_point_group():
    from importlib.metadata import entry_points

    assert any(ep.value.endswith(":CpuLauncher") for ep in entry_points(group=GROUP))
    assert CpuLauncher in launchers()
    assert launcher_for("cpu") is CpuLauncher


NOT_HERE = "not on this machine"


@pytest.mark.parametrize(
    ("kinds", "device", "why"),
    [
        ((), "cpu", f"auto picked cpu for gguf ({NOT_HERE}: hrx, cuda, vulkan, rocm)"),
        (("nvidia-gpu",), "cuda", f"auto picked cuda for gguf ({NOT_HERE}: hrx, vulkan, rocm)"),
        (("amd-gpu",), "hrx", f"auto picked hrx for gguf ({NOT_HERE}: cuda)"),
        (("npu",), "cpu", f"auto picked cpu for gguf ({NOT_HERE}: hrx, cuda, vulkan, rocm)"),
    ],
    ids=["cpu-only", "nvidia", "amd", "npu"],
)
def test_auto_picks_the_fastest_gguf_route_the_machine_has(fake_sysfs, kinds, device, why):
    fake_sysfs(*kinds)
    cls, said = choose_launcher("gguf", "auto", launchers())
    assert (cls.info.device, said) == (device, why)


def test_auto_serves_an_npu_folder_only_where_there_is_an_npu(fake_sysfs):
    fake_sysfs("npu")
    assert choose_launcher("npu", "auto", launchers())[0] is launcher_for("npu")
    fake_sysfs()
    with pytest.raises(UsageError, match="no installed route serves a npu model on this machine"):
        choose_launcher("npu", "auto", launchers())


def test_device_for_another_kind_is_refused():
    with pytest.raises(UsageError, match="cannot serve a onnx model"):
        choose_launcher("onnx", "cpu", launchers())


def test_cpu_argv_minimal():
    argv = CpuLauncher().argv("/bin/llama-server", MODEL, 4321, ServeConfig(model="m"))
    assert argv == ["/bin/llama-server", "-m", "/models/m.gguf", "--host", "127.0.0.1",
                    "--port", "4321", "--device", "none", "--jinja", "--metrics", "--alias", "m"]


def test_cpu_argv_every_option():
    config = ServeConfig(model="m", ctx_size=4096, flash_attn="on", parallel=2, mtp="/h.gguf",
                         mtp_max=4, mtp_p_min=0.5, mmproj="/p.gguf", embedding=True,
                         extra_args=("--temp", "0.2"))
    argv = CpuLauncher().argv("/bin/ls", MODEL, 1, config)
    tail = argv[argv.index("--alias") + 2:]
    assert tail == ["-c", "4096", "-fa", "on", "-np", "2",
                    "--spec-type", "draft-mtp", "-md", "/h.gguf", "-ngld", "99",
                    "--spec-draft-n-max", "4", "--spec-draft-p-min", "0.5",
                    "--mmproj", "/p.gguf", "--embeddings", "--temp", "0.2"]


def test_cpu_argv_dflash_and_reranking():
    config = ServeConfig(model="m", dflash="/d.gguf", reranking=True)
    argv = CpuLauncher().argv("/bin/ls", MODEL, 1, config)
    assert argv[-7:] == ["--spec-type", "draft-dflash", "-md", "/d.gguf", "-ngld", "99",
                         "--reranking"]


def test_refusals_are_pure_and_complete():
    config = ServeConfig(model="m", lean=True, mtp="/h", dflash="/d", executors=(("--onnx-server", "/x"),))
    found = refusals(config, CpuLauncher)
    assert "--mtp and --dflash: pick one" in found
    assert any(r.startswith("--lean:") for r in found)
    assert any(r.startswith("--onnx-server names") for r in found)
    assert refusals(ServeConfig(model="m", ctx_size=8, parallel=2), CpuLauncher) == []


def _exe(path: Path) -> str:
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_executor_lookup_order(tmp_path, monkeypatch):
    flag = _exe(tmp_path / "from-flag")
    env = _exe(tmp_path / "from-env")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    _exe(on_path / "llama-server")
    launcher = CpuLauncher()
    monkeypatch.setenv("ONEBIT_LLAMA_SERVER", env)
    assert resolve_executor(launcher, ServeConfig(model="m", executors=(("--llama-server", flag),))) == flag
    assert resolve_executor(launcher, ServeConfig(model="m")) == env
    monkeypatch.delenv("ONEBIT_LLAMA_SERVER")
    installed = launcher.installed_executor()
    assert installed and os.access(installed, os.X_OK)
    assert resolve_executor(launcher, ServeConfig(model="m")) == installed
    monkeypatch.setattr(CpuLauncher, "installed_executor", lambda self: None)
    monkeypatch.setenv("PATH", str(on_path))
    assert resolve_executor(launcher, ServeConfig(model="m")) == str(on_path / "llama-server")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RunError, match="pass --llama-server PATH"):
        resolve_executor(launcher, ServeConfig(model="m"))


def _declaring(*options):
    from dataclasses import replace

    class Declaring(CpuLauncher):
        info = replace(CpuLauncher.info, name="declaring", device="declaring",
                       own_options=options)

    return Declaring


@pytest.mark.parametrize("option, clash", [
    (("ctx2", ("-c",), "a second -c"), "clashes with -c"),
    (("ctx_size", ("--ctx-two",), "a second ctx_size"), "clashes with ctx_size"),
    (("odd", ("--odd",), "odd", "fraction"), "unknown kind 'fraction'"),
])
def test_a_launcher_option_that_clashes_is_refused_with_who_declared_it(monkeypatch, option,
                                                                         clash):
    from lemonade_onebit.config import RouteOption
    from lemonade_onebit.serve import options

    monkeypatch.setattr(options, "_registry", lambda: (CpuLauncher, _declaring(RouteOption(*option))))
    with pytest.raises(UsageError, match=f"declaring launcher .* {clash}.*uninstall"):
        options.route_options()


def test_a_launcher_option_on_a_serve_flag_is_refused(monkeypatch):
    import argparse

    from lemonade_onebit.config import RouteOption
    from lemonade_onebit.serve import options

    monkeypatch.setattr(options, "_registry",
                        lambda: (CpuLauncher, _declaring(RouteOption("key", ("--api-key",), "k"))))
    with pytest.raises(UsageError, match="clashes with one of serve's own flags"):
        options.add_serve_arguments(argparse.ArgumentParser())


def test_a_launcher_option_reaches_only_its_route(monkeypatch):
    from lemonade_onebit.config import RouteOption
    from lemonade_onebit.serve import options

    declaring = _declaring(RouteOption("lanes", ("--lanes",), "lanes", "count"))
    monkeypatch.setattr(options, "_registry", lambda: (CpuLauncher, declaring))
    config = options.parse_serve_args("m.gguf", ["--lanes", "4"])
    assert config.option("lanes") == 4 and config.given("lanes")
    assert refusals(config, declaring, (CpuLauncher, declaring)) == []
    assert refusals(config, CpuLauncher, (CpuLauncher, declaring)) == [
        "--lanes is not supported on the cpu route"]
    assert not options.parse_serve_args("m.gguf", []).given("lanes")
    with pytest.raises(UsageError, match="'0' must be greater than 0"):
        options.parse_serve_args("m.gguf", ["--lanes", "0"])
