"""Which launcher serves a model: pure functions over the registry's descriptors."""

from __future__ import annotations

from dataclasses import replace

from lemonade_onebit.backends.base import Launcher
from lemonade_onebit.config import BUILTIN_OPTIONS, ROUTE_OPTIONS, ServeConfig
from lemonade_onebit.errors import UsageError


def stamp_route(config: ServeConfig, stamp: int | None) -> tuple[ServeConfig, str | None]:
    """A Hadamard-stamped Q4_0 file runs only on the lean ROCm route: force it, or refuse."""
    if stamp is None:
        return config, None
    if config.device not in ("auto", "rocm"):
        raise UsageError(
            f"this file is stamped onebit.hadamard_q4_0={stamp}: it runs only on "
            f"--device rocm --lean, not --device {config.device}"
        )
    why = f"onebit.hadamard_q4_0={stamp} stamp: rocm --lean"
    return replace(config, device="rocm", lean=True), why


def choose_launcher(
    kind: str, device: str, registered: tuple[type[Launcher], ...]
) -> tuple[type[Launcher], str]:
    """The launcher for a model kind on a device, and why it was chosen."""
    for_kind = [cls for cls in registered if kind in cls.info.model_kinds]
    if device != "auto":
        for cls in for_kind:
            if cls.info.device == device:
                return cls, f"--device {device}"
        known = sorted({cls.info.device for cls in registered})
        if any(cls.info.device == device for cls in registered):
            raise UsageError(f"--device {device} cannot serve a {kind} model")
        raise UsageError(
            f"--device {device}: no launcher for this route is installed "
            f"(installed routes: {', '.join(known) or 'none'})"
        )
    candidates = [cls for cls in for_kind if cls.info.auto_for(kind)]
    usable = [cls for cls in candidates if cls().available()]
    if not usable:
        raise UsageError(f"no installed route serves a {kind} model on this machine")
    best = usable[0]  # the registry is sorted by auto_rank, fastest first
    skipped = [cls.info.device for cls in candidates if cls not in usable]
    why = f"auto picked {best.info.device} for {kind}"
    if skipped:
        why += f" (not on this machine: {', '.join(skipped)})"
    return best, why


def refusals(config: ServeConfig, launcher: type[Launcher],
             registered: tuple[type[Launcher], ...] = ()) -> list[str]:
    """Every option the chosen route cannot honour, each with its reason (`registered` names the
    options other launchers declare)."""
    info = launcher.info
    out = []
    if config.mtp and config.dflash:
        out.append("--mtp and --dflash: pick one")
    for name in ("mtp_max", "mtp_p_min"):
        if config.given(name) and not (config.mtp or config.dflash):
            out.append(f"{ROUTE_OPTIONS[name]} needs --mtp or --dflash")
    if config.route_policy and not config.laya:
        out.append("--route-policy needs --laya")
    if config.recipes and config.no_recipes:
        out.append("--recipes and --no-recipes: pick one")
    if config.embedding and config.reranking:
        out.append("--embedding and --reranking: pick one")
    declared = {o.name: o for cls in registered for o in cls.info.own_options}
    for option in (*BUILTIN_OPTIONS, *declared.values()):
        if not config.given(option.name):
            continue
        if option.name in info.refusals:
            out.append(f"{option.flag}: {info.refusals[option.name]}")
        elif not info.honours(option.name):
            why = f": it needs {option.needs}" if option.needs else ""
            out.append(f"{option.flag} is not supported on the {info.device} route{why}")
    for flag, _ in config.executors:
        if flag != info.executor_flag:
            out.append(f"{flag} names an executor the {info.device} route does not use")
    return out


def check_route(config: ServeConfig, launcher: type[Launcher],
                registered: tuple[type[Launcher], ...] = ()) -> None:
    problems = refusals(config, launcher, registered)
    if problems:
        raise UsageError("; ".join(problems))
