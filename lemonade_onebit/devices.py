"""What accelerators this machine has, read from the kernel's device files and sysfs.

Detection only reads files (and asks `vulkaninfo`/`nvidia-smi` when they are installed); it never
loads a driver. `1bit devices`, `--device auto` and each launcher's `available()` read it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

SYS = Path(os.environ.get("ONEBIT_SYSFS_ROOT", "/"))  # tests point this at a fake tree


@dataclass(frozen=True)
class Device:
    kind: str  # npu | amd-gpu | nvidia-gpu | vulkan | apple-silicon | cpu
    name: str
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def xdna_npus() -> list[Device]:
    found = []
    for accel in sorted(glob.glob(str(SYS / "dev/accel/accel*"))):
        name = os.path.basename(accel)
        driver = SYS / "sys/class/accel" / name / "device/driver"
        if os.path.basename(os.path.realpath(driver)) == "amdxdna":
            found.append(Device("npu", f"AMD XDNA NPU ({name})", {"path": accel}))
    return found


def amd_gpus() -> list[Device]:
    if not (SYS / "dev/kfd").exists():
        return []
    found = []
    for props in sorted(glob.glob(str(SYS / "sys/class/kfd/kfd/topology/nodes/*/properties"))):
        values = dict(
            line.split(" ", 1) for line in _read(Path(props)).splitlines() if " " in line
        )
        version = int(values.get("gfx_target_version", "0") or 0)
        if version:  # CPU nodes report 0
            major, minor, step = version // 10000, (version // 100) % 100, version % 100
            target = f"gfx{major}{minor:x}{step:x}"
            found.append(Device("amd-gpu", f"AMD GPU {target}", {"gfx_target": target}))
    return found


def nvidia_gpus() -> list[Device]:
    found = []
    for info in sorted(glob.glob(str(SYS / "proc/driver/nvidia/gpus/*/information"))):
        model = next((row.split(":", 1)[1].strip() for row in _read(Path(info)).splitlines()
                      if row.startswith("Model:")), "NVIDIA GPU")
        found.append(Device("nvidia-gpu", model))
    if not found and SYS == Path("/") and shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "-L"])
        found = [Device("nvidia-gpu", line.split(":", 1)[1].split("(")[0].strip())
                 for line in out.splitlines() if line.startswith("GPU ")]
    return found


def vulkan_devices() -> list[Device]:
    if SYS != Path("/") or not shutil.which("vulkaninfo"):
        return []
    found = []
    for line in _run(["vulkaninfo", "--summary"]).splitlines():
        line = line.strip()
        if line.startswith("deviceName"):
            name = line.split("=", 1)[1].strip()
            if "llvmpipe" not in name.lower():  # a software rasteriser is no accelerator
                found.append(Device("vulkan", name))
    return found


def apple_silicon() -> list[Device]:
    if sys.platform == "darwin" and os.uname().machine == "arm64":
        return [Device("apple-silicon", "Apple Silicon")]
    return []


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_name() -> str:
    for line in _read(SYS / "proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return os.uname().machine


@lru_cache(maxsize=1)
def detect() -> tuple[Device, ...]:
    cpu = Device("cpu", _cpu_name(), {"cores": os.cpu_count()})
    return (*xdna_npus(), *amd_gpus(), *nvidia_gpus(), *vulkan_devices(), *apple_silicon(), cpu)


def has(kind: str) -> bool:
    return any(d.kind == kind for d in detect())
