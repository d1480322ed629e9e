"""`1bit devices`: what this machine has, and for each route whether its executor is installed."""

from __future__ import annotations

import json

from lemonade_onebit.backends import launchers
from lemonade_onebit.backends.executors import resolve_executor
from lemonade_onebit.config import ServeConfig
from lemonade_onebit.devices import detect
from lemonade_onebit.errors import RunError


def routes() -> list[dict]:
    out = []
    for cls in launchers():
        launcher = cls()
        try:
            executor = resolve_executor(launcher, ServeConfig(model=""))
        except RunError:
            executor = None
        out.append({
            "device": cls.info.device,
            "launcher": cls.info.name,
            "models": sorted(cls.info.model_kinds),
            "available": launcher.available(),
            "executor": executor,
            "installed": executor is not None,
        })
    return out


def rpc_report(endpoints: str, as_json: bool) -> int:
    """What each named RPC worker offers: protocol, devices, free memory."""
    from lemonade_onebit.rpc import check_workers, parse_endpoints

    workers = check_workers(parse_endpoints(endpoints))
    if as_json:
        print(json.dumps({"rpc": [w.as_json() for w in workers]}, indent=2))
    else:
        print("RPC workers:")
        for worker in workers:
            print(f"  {worker.describe()}")
    return 0


def gpu_memory() -> list[dict]:
    """Each GPU the cuda route can use, by the number `--device cuda:N` takes, with its memory
    now (NVIDIA's driver reports it)."""
    from lemonade_onebit.devices import nvidia_memory

    return [{"device": f"cuda:{m.ordinal}", "name": m.name, "total_mib": m.total >> 20,
             "free_mib": m.free >> 20} for m in nvidia_memory()]


def devices_report(as_json: bool) -> int:
    from lemonade_onebit import drivers, pins

    found = [d.as_dict() for d in detect()]
    gpus = gpu_memory()
    table = routes()
    system = drivers.report(pins.load())
    if as_json:
        print(json.dumps({"devices": found, "gpus": gpus, "routes": table, **system}, indent=2))
        return 0
    kernel = system["kernel"]
    print(f"kernel: {kernel['release'] or 'unknown'} (the upstream engine pins {kernel['upstream']})")
    for d in system["drivers"]:
        version = f" {d['version']}" if d["version"] else ""
        print(f"  {d['module']:<8}{version}: {d['state']}")
    print("devices:")
    for d in found:
        print(f"  {d['kind']:<14} {d['name']}")
    if gpus:
        print("gpus (--device cuda:N picks them):")
        for g in gpus:
            print(f"  {g['device']:<7} {g['name']}  {g['free_mib'] / 1024:.1f} GiB free of "
                  f"{g['total_mib'] / 1024:.1f} GiB")
    print("routes:")
    for r in table:
        here = "yes" if r["available"] else "no "
        where = r["executor"] or "not installed"
        print(f"  {r['device']:<7} device here: {here}  executor: {where}")
    return 0
