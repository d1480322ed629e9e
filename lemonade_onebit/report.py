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


def devices_report(as_json: bool) -> int:
    found = [d.as_dict() for d in detect()]
    table = routes()
    if as_json:
        print(json.dumps({"devices": found, "routes": table}, indent=2))
        return 0
    print("devices:")
    for d in found:
        print(f"  {d['kind']:<14} {d['name']}")
    print("routes:")
    for r in table:
        here = "yes" if r["available"] else "no "
        where = r["executor"] or "not installed"
        print(f"  {r['device']:<7} device here: {here}  executor: {where}")
    return 0
