"""The running kernel and the drivers the device routes need, against the pin manifest: read from
`/proc` and `/sys/module` under `devices.SYS` (a fake tree in tests), `modinfo` on a real root."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from lemonade_onebit import devices


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def kernel_release() -> str | None:
    release = _read(devices.SYS / "proc/sys/kernel/osrelease")
    if release:
        return release
    words = (_read(devices.SYS / "proc/version") or "").split()  # "Linux version 6.8.0 ..."
    return words[2] if len(words) > 2 else None


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def module_version(module: str) -> tuple[bool, str | None]:
    """Whether the module is loaded, and its version where it says one."""
    root = devices.SYS / "sys/module" / module
    if not root.is_dir():
        return False, None
    version = _read(root / "version")
    if version is None and devices.SYS == Path("/") and shutil.which("modinfo"):
        try:
            out = subprocess.run(["modinfo", "-F", "version", module], capture_output=True,
                                 text=True, timeout=5)
            version = out.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            pass
    return True, version


def report(manifest: dict) -> dict:
    """Kernel and driver state; each driver says what the routes that need it can expect."""
    release = kernel_release()
    running = version_tuple(release)
    kernel = manifest.get("kernel", {})
    found: list[dict] = []
    out = {"kernel": {"release": release, "upstream": kernel.get("upstream")}, "drivers": found}
    for driver in manifest.get("drivers", []):
        loaded, version = module_version(driver["module"])
        minimum = driver.get("minimum_kernel")
        too_old = bool(minimum and running and running < (version_tuple(minimum) or ()))
        if not loaded:
            routes = driver["routes"]
            state = (f"not loaded: the {', '.join(routes)} route{'s' if len(routes) > 1 else ''} "
                     f"need{'' if len(routes) > 1 else 's'} it")
        elif too_old:
            state = f"loaded, but kernel {release} is older than {minimum} ({driver['why']})"
        else:
            state = "loaded"
        found.append({"module": driver["module"], "what": driver["what"],
                               "routes": driver["routes"], "loaded": loaded, "version": version,
                               "minimum_kernel": minimum, "too_old": too_old, "state": state})
    return out
