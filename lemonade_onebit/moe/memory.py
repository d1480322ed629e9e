"""What memory this machine offers a model now: free GPU memory, available RAM, and how much the
executor may lock. Read from `nvidia-smi`, amdgpu's sysfs files and /proc; nothing is loaded."""

from __future__ import annotations

import glob
import math
import os
import resource
from pathlib import Path

from lemonade_onebit.moe.plan import GiB, Memory

BUDGET_ENV = "ONEBIT_GPU_BUDGET_GIB"  # plan for this much GPU memory instead of what is free
CAP_IPC_LOCK = 14


def machine_memory(device: str, budget_gib: float | None = None,
                   ram_gib: float | None = None) -> Memory:
    """The memory a plan for `device` works with; `budget_gib` (else $ONEBIT_GPU_BUDGET_GIB)
    stands for the GPU's free memory and `ram_gib` for the available RAM."""
    ram = int(ram_gib * GiB) if ram_gib is not None else ram_available()
    if device == "cpu":
        return Memory(None, ram, lockable_bytes())
    if budget_gib is not None:
        return Memory(int(budget_gib * GiB), ram, lockable_bytes(), "of GPU budget (--budget-gib)")
    budget = budget_bytes()
    if budget is not None:
        return Memory(budget, ram, lockable_bytes(), f"of GPU budget (${BUDGET_ENV})")
    free, source = gpu_free(device)
    return Memory(free, ram, lockable_bytes(), source)


def budget_bytes() -> int | None:
    """$ONEBIT_GPU_BUDGET_GIB in bytes; None when unset or not a positive number."""
    try:
        gib = float(os.environ.get(BUDGET_ENV, ""))
    except ValueError:
        return None
    return int(gib * GiB) if math.isfinite(gib) and gib > 0 else None


def ram_available() -> int:
    try:
        for row in Path("/proc/meminfo").read_text().splitlines():
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def lockable_bytes() -> int | None:
    """How much this process (and the executor it starts) may mlock; None for no limit."""
    try:
        for row in Path("/proc/self/status").read_text().splitlines():
            if row.startswith("CapEff:") and int(row.split()[1], 16) >> CAP_IPC_LOCK & 1:
                return None
    except (OSError, ValueError, IndexError):
        pass
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def gpu_free(device: str) -> tuple[int | None, str]:
    """Free memory of the GPUs the route runs on, summed, and where it was read; None unknown."""
    if device in ("cuda", "vulkan"):
        free = _nvidia_free()
        if free is not None:
            return free, "free on the GPU (nvidia-smi)"
    if device in ("rocm", "vulkan", "hrx"):
        free = _amdgpu_free()
        if free is not None:
            return free, "free on the GPU (amdgpu sysfs)"
    return None, "free on the GPU"


def _nvidia_free() -> int | None:
    from lemonade_onebit.devices import nvidia_memory

    gpus = nvidia_memory()
    return sum(gpu.free for gpu in gpus) if gpus else None


def _amdgpu_free() -> int | None:
    from lemonade_onebit.devices import SYS

    free, found = 0, False
    for total_file in sorted(glob.glob(str(SYS / "sys/class/drm/card*/device/mem_info_vram_total"))):
        used_file = total_file.replace("vram_total", "vram_used")
        try:
            free += int(Path(total_file).read_text()) - int(Path(used_file).read_text())
            found = True
        except (OSError, ValueError):
            continue
    return free if found else None
