"""`1bit serve`'s command line, generated from the launcher registry, and the `ServeConfig` it
yields. `--device` choices, the executor-path flags, which route honours each option and the
route list in `--help` all come from the launchers' descriptors, so a launcher another package
registers gets its device and its executor flag here with no edit to this package."""

from __future__ import annotations

import argparse
import shlex

from lemonade_onebit.config import ROUTE_OPTIONS, ServeConfig
from lemonade_onebit.errors import UsageError


def number(convert, what: str, valid, rule: str):
    """An argparse type: `convert` the text, then check it, each failure with a plain message."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"{text!r} {rule}")
        return value

    return parse


positive_int = number(int, "a whole number", lambda v: v > 0, "must be greater than 0")
port_number = number(int, "a whole number", lambda v: 0 < v <= 65535, "is not a port (1-65535)")
probability = number(float, "a number", lambda v: 0.0 <= v <= 1.0, "must be between 0 and 1")
seconds = number(float, "a number of seconds", lambda v: v > 0, "must be greater than 0")

# Route options: (flags, argparse keywords, what it is). Which routes honour each is added from
# the registry.
_ROUTE_ARGS: dict[str, tuple[tuple[str, ...], dict, str]] = {
    "ctx_size": (("-c", "--ctx-size"), {"type": positive_int, "metavar": "N"}, "context size"),
    "flash_attn": (("-fa", "--flash-attn"), {"choices": ("on", "off", "auto")}, "flash attention"),
    "lean": (("--lean",), {"action": "store_true"}, "ROCmFP4/ROCmI4/H32 files"),
    "parallel": (("--parallel",), {"type": positive_int, "metavar": "N"}, "parallel request slots"),
    "mtp": (("--mtp",), {"metavar": "HEAD.gguf"}, "multi-token-prediction head"),
    "dflash": (("--dflash",), {"metavar": "DRAFT.gguf"}, "DFlash draft model"),
    "mtp_max": (("--mtp-max",), {"type": positive_int, "metavar": "N"}, "most tokens drafted"),
    "mtp_p_min": (("--mtp-p-min",), {"type": probability, "metavar": "P"},
                  "least draft probability"),
    "mmproj": (("--mmproj",), {"metavar": "F"}, "multimodal projector"),
    "embedding": (("--embedding",), {"action": "store_true"}, "serve /v1/embeddings"),
    "reranking": (("--reranking",), {"action": "store_true"}, "serve /v1/rerank"),
    "hrx_libhsa": (("--hrx-libhsa",), {"metavar": "PATH"}, "libhsa for the HRX route"),
}
assert set(_ROUTE_ARGS) == set(ROUTE_OPTIONS)


def _registry():
    from lemonade_onebit.backends import launchers

    return launchers()


def executor_flags() -> dict[str, list]:
    """Each executor-path flag and the launchers that read it, in registry order."""
    flags: dict[str, list] = {}
    for cls in _registry():
        if cls.info.executor_flag:
            flags.setdefault(cls.info.executor_flag, []).append(cls.info)
    return flags


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    routes = _registry()
    devices = [cls.info.device for cls in routes]
    s.add_argument("-m", "--model", required=True,
                   help="a .gguf/.1bp file, a model folder, a catalog name or an MLX HF id")
    s.add_argument("-p", "--port", type=port_number, default=8000, help="port to listen on (8000)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (127.0.0.1; 0.0.0.0 exposes it to the network)")
    s.add_argument("--device", choices=("auto", *devices), default="auto", metavar="DEVICE",
                   help="where to run it: auto (the fastest route this machine has) or one of "
                   f"{', '.join(devices)}; the routes are listed below")
    s.add_argument("--alias", metavar="NAME", help="the model id clients see")
    g = s.add_argument_group("executor paths (else the variable named, then the project's "
                             "install, then PATH)")
    for flag, infos in executor_flags().items():
        env = sorted({i.executor_env for i in infos})
        g.add_argument(flag, metavar="PATH", dest=_dest(flag), default=None,
                       help=f"{infos[0].executor} for the {', '.join(i.device for i in infos)} "
                       f"route{'s' if len(infos) > 1 else ''} (${', $'.join(env)})")
    r = s.add_argument_group("route options (a route that cannot honour one refuses it)")
    for name, (flags, kw, what) in _ROUTE_ARGS.items():
        honour = [cls.info.device for cls in routes if name in cls.info.options]
        r.add_argument(*flags, dest=name, help=f"{what} ({', '.join(honour) or 'no route here'})",
                       **kw)
    s.add_argument("--laya", action="store_true", help="route each conversation by its class")
    s.add_argument("--route-policy", metavar="FILE", help="Laya policy file")
    s.add_argument("--recipes", metavar="FILE", help="use this recipe file instead of the shipped set")
    s.add_argument("--no-recipes", action="store_true", help="apply no recipe")
    s.add_argument("--api-key", metavar="KEY", help="require `Authorization: Bearer KEY`")
    s.add_argument("--load-timeout", type=seconds, default=600.0, metavar="S",
                   help="fail the load when the executor shows no progress for S seconds (600)")
    s.add_argument("--executor-timeout", type=seconds, default=600.0, metavar="S",
                   help="answer 502 when the executor sends nothing for S seconds (600)")
    s.add_argument("--max-body-mb", type=positive_int, default=16, metavar="N",
                   help="largest request body accepted, in MiB (16)")
    s.epilog = "routes:\n" + "\n".join(
        f"  {cls.info.device:<8} {', '.join(sorted(cls.info.model_kinds))}: {cls.info.summary}"
        for cls in routes)
    s.formatter_class = argparse.RawDescriptionHelpFormatter


def _dest(flag: str) -> str:
    return "executor:" + flag


def serve_config(ns: argparse.Namespace, extra: list[str]) -> ServeConfig:
    executors = tuple((flag, getattr(ns, _dest(flag))) for flag in executor_flags()
                      if getattr(ns, _dest(flag), None))
    return ServeConfig(
        model=ns.model, port=ns.port, host=ns.host, device=ns.device, alias=ns.alias,
        executors=executors, **{name: getattr(ns, name) for name in ROUTE_OPTIONS},
        laya=ns.laya, route_policy=ns.route_policy, recipes=ns.recipes,
        no_recipes=ns.no_recipes, api_key=ns.api_key, extra_args=tuple(extra),
        load_timeout=ns.load_timeout, executor_timeout=ns.executor_timeout,
        max_body=ns.max_body_mb * 1024 * 1024,
    )


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and those after `--` (the executor's, passed unchanged)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


class _Quiet(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def parse_serve_args(model: str, args: list[str]) -> ServeConfig:
    """`1bit serve -m MODEL ARGS` parsed as serve would, for tools that plan a serve without
    running one (`1bit bench --swap`); a bad argument is a UsageError."""
    ours, extra = split_extra(["-m", model, *args])
    parser = _Quiet(prog="1bit serve", add_help=False)
    add_serve_arguments(parser)
    try:
        ns = parser.parse_args(ours)
    except UsageError as exc:
        raise UsageError(f"{shlex.join(args)}: not valid `1bit serve` arguments ({exc})") from None
    return serve_config(ns, extra)
