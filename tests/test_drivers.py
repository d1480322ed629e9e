"""`1bit devices` reports the running kernel and each route's driver against the pin manifest,
read from fake /proc and /sys/module trees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemonade_onebit import devices, drivers, pins


def tree(root: Path, release: str | None, modules: dict[str, str | None]) -> Path:
    if release:
        (root / "proc/sys/kernel").mkdir(parents=True)
        (root / "proc/sys/kernel/osrelease").write_text(release + "\n")
    for module, version in modules.items():
        (root / "sys/module" / module).mkdir(parents=True)
        if version:
            (root / "sys/module" / module / "version").write_text(version + "\n")
    return root


@pytest.fixture
def host(tmp_path, monkeypatch):
    def make(release, modules):
        monkeypatch.setattr(devices, "SYS", tree(tmp_path, release, modules))
        return {d["module"]: d for d in drivers.report(pins.load())["drivers"]}
    return make


def test_a_new_kernel_with_the_npu_driver(host):
    found = host("7.3.0-rc4-onebit", {"amdxdna": None, "nvidia": "580.95.05"})
    assert found["amdxdna"]["loaded"] and not found["amdxdna"]["too_old"]
    assert found["amdxdna"]["state"] == "loaded"
    assert found["nvidia"]["version"] == "580.95.05"
    assert found["amdgpu"]["state"] == "not loaded: the rocm, hrx, zinc routes need it"


def test_an_npu_driver_on_a_kernel_older_than_its_minimum_says_so(host):
    found = host("6.8.0-45-generic", {"amdxdna": "2.19.0"})
    npu = found["amdxdna"]
    assert npu["loaded"] and npu["too_old"] and npu["version"] == "2.19.0"
    assert npu["state"].startswith("loaded, but kernel 6.8.0-45-generic is older than 6.14")


def test_no_kernel_information_is_unknown_not_a_crash(host, tmp_path):
    found = host(None, {})
    assert drivers.kernel_release() is None
    assert all(not d["loaded"] and not d["too_old"] for d in found.values())


def test_devices_shows_kernel_and_drivers(fake_sysfs, capsys):
    from lemonade_onebit.cli import main

    root = Path(fake_sysfs()["ONEBIT_SYSFS_ROOT"])
    tree(root, "7.3.0", {"amdgpu": None})
    assert main(["devices", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["kernel"] == {"release": "7.3.0", "upstream": "v7.3-rc4"}
    assert {d["module"]: d["loaded"] for d in found["drivers"]} == {
        "amdxdna": False, "amdgpu": True, "nvidia": False}
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    assert "kernel: 7.3.0 (the upstream engine pins v7.3-rc4)" in text
    assert "amdgpu  : loaded" in text and "amdxdna : not loaded: the npu route needs it" in text


@pytest.mark.parametrize("text, parsed", [("6.18.44-fc", (6, 18, 44)), ("7.3-rc4", (7, 3)),
                                          ("weird", None), (None, None)])
def test_version_tuple(text, parsed):
    assert drivers.version_tuple(text) == parsed
