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


@dataclass(frozen=True)
class Memory:
    """One accelerator's memory as its driver reports it now, in bytes; `ordinal`: its number as
    the runtime counts the devices it can see (CUDA0 is the first GPU CUDA_VISIBLE_DEVICES lists),
    None where unknown."""

    name: str
    total: int
    free: int
    ordinal: int | None = None


def _nvidia_smi() -> str | None:
    """`nvidia-smi`: the one on PATH; under a fake root (tests), only the root's own stand-in."""
    if SYS == Path("/"):
        return shutil.which("nvidia-smi")
    fake = SYS / "usr/bin/nvidia-smi"
    return str(fake) if os.access(fake, os.X_OK) else None


def _visible(index: str) -> bool:
    """Whether CUDA_VISIBLE_DEVICES (a list of indices, when set) lets CUDA see this GPU."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return True
    names = [part.strip() for part in listed.split(",") if part.strip()]
    if not all(name.lstrip("-").isdigit() for name in names):
        return True  # UUIDs or MIG names: not matched here, every GPU counts
    visible = []
    for name in names:
        if int(name) < 0:
            break  # CUDA stops at the first invalid index
        visible.append(name)
    return index in visible


def nvidia_memory() -> list[Memory]:
    """Total and free memory of each NVIDIA GPU CUDA can see, read now (not cached): free memory
    changes as other programs load. A GPU whose driver reports no number (unified-memory parts
    answer `[N/A]`) is left out."""
    smi = _nvidia_smi()
    if smi is None:
        return []
    out = _run([smi, "--query-gpu=index,name,memory.total,memory.free",
                "--format=csv,noheader,nounits"])
    found = []
    for row in out.splitlines():
        parts = [part.strip() for part in row.split(",")]
        if len(parts) < 4:
            continue
        index, name, total, free = parts[0], ",".join(parts[1:-2]), parts[-2], parts[-1]
        if not (total.isdigit() and free.isdigit()) or not _visible(index):
            continue
        found.append(Memory(name, int(total) << 20, int(free) << 20, _ordinal(index)))
    if any(m.ordinal is None for m in found):  # not listed by index: CUDA counts in smi order
        found = [Memory(m.name, m.total, m.free, k) for k, m in enumerate(found)]
    return sorted(found, key=lambda m: m.ordinal or 0)


def _ordinal(index: str) -> int | None:
    """The CUDA device number of the GPU nvidia-smi numbers `index`: its place in
    CUDA_VISIBLE_DEVICES when that lists indices, else the index itself (both count in PCI bus
    order only under CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's own default puts the fastest first,
    which is the same order on a host of one GPU model)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return int(index) if index.isdigit() else None
    names = [part.strip() for part in listed.split(",") if part.strip()]
    return names.index(index) if index in names else None


def device_memory(kinds: tuple[str, ...]) -> list[Memory]:
    """The memory of the accelerators of these kinds whose drivers report it (NVIDIA GPUs, through
    `nvidia-smi`); empty when none does."""
    return nvidia_memory() if "nvidia-gpu" in kinds else []


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
