"""`1bit serve`'s command line, generated from the launcher registry, and the `ServeConfig` it
yields. `--device` choices, the executor-path flags, which route honours each option and the
route list in `--help` all come from the launchers' descriptors, so a launcher another package
registers gets its device and its executor flag here with no edit to this package."""

from __future__ import annotations

import argparse
import shlex

from lemonade_onebit.config import BUILTIN_OPTIONS, KINDS, ROUTE_OPTIONS, RouteOption, ServeConfig
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


def counts(example: str, rule: str):
    """An argparse type: a comma-separated list of whole numbers, each at least 1."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list like {example}") from None
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: {rule}")
        return values

    return parse


positive_int = number(int, "a whole number", lambda v: v > 0, "must be greater than 0")
port_number = number(int, "a whole number", lambda v: 0 < v <= 65535, "is not a port (1-65535)")
probability = number(float, "a number", lambda v: 0.0 <= v <= 1.0, "must be between 0 and 1")
seconds = number(float, "a number of seconds", lambda v: v > 0, "must be greater than 0")


def count_or_auto(text: str) -> int | None:
    """A whole number > 0, or `auto` (None: the default, which each route sizes its own way)."""
    return None if text == "auto" else positive_int(text)


def device_choice(devices: list[str]):
    """`--device ROUTE`, or `ROUTE:N[,M...]` on a route whose GPUs serve picks, as (route, GPUs)."""
    def parse(text: str) -> tuple[str, tuple[int, ...]]:
        from lemonade_onebit.serve.gpus import DEVICE_NAMES, parse_pick

        route, sep, pick = text.partition(":")
        if route not in ("auto", *devices):
            raise argparse.ArgumentTypeError(
                f"invalid choice: {route!r} (choose from auto, {', '.join(devices)})")
        if not sep:
            return route, ()
        if route not in DEVICE_NAMES:
            raise argparse.ArgumentTypeError(
                f"{text}: GPUs are picked by number on the {', '.join(DEVICE_NAMES)} route; for "
                f"{route}, give its driver's own variable (HIP_VISIBLE_DEVICES, "
                "GGML_VK_VISIBLE_DEVICES) or llama-server's own `-- --device` flag")
        try:
            return route, parse_pick(pick)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text}: {exc}") from None

    return parse


def _registry():
    from lemonade_onebit.backends import launchers

    return launchers()


def route_options() -> tuple[RouteOption, ...]:
    """The built-in route options, then those the installed launchers declare, each once."""
    options = {o.name: o for o in BUILTIN_OPTIONS}
    flags = {flag: o.name for o in BUILTIN_OPTIONS for flag in o.flags}
    for cls in _registry():
        for option in cls.info.own_options:
            if options.get(option.name) == option:
                continue  # two launchers sharing one declaration
            taken = [f for f in option.flags if f in flags]
            if option.name in options or taken or option.kind not in KINDS:
                raise UsageError(
                    f"the {cls.info.name} launcher declares the route option {option.name} "
                    f"({', '.join(option.flags)}), which "
                    + (f"has an unknown kind {option.kind!r}" if option.kind not in KINDS else
                       f"clashes with {', '.join(taken) or option.name}")
                    + "; update or uninstall the package that provides it")
            options[option.name] = option
            flags.update(dict.fromkeys(option.flags, option.name))
    return tuple(options.values())


_KIND_ARGS = {
    "text": lambda o: {"metavar": o.metavar or "VALUE"},
    "count": lambda o: {"type": positive_int, "metavar": o.metavar or "N"},
    "count-or-auto": lambda o: {"type": count_or_auto, "metavar": o.metavar or "N|auto"},
    "probability": lambda o: {"type": probability, "metavar": o.metavar or "P"},
    "switch": lambda o: {"action": "store_true"},
    "choice": lambda o: {"choices": o.choices},
}


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
    s.add_argument("--device", type=device_choice(devices), default=("auto", ()),
                   metavar="DEVICE",
                   help="where to run it: auto (the fastest route this machine has) or one of "
                   f"{', '.join(devices)}; the routes are listed below. cuda:N or cuda:N,M picks "
                   "GPUs (`1bit devices` numbers them): one when the model fits on one, else a "
                   "layer split over them by free memory")
    s.add_argument("--alias", metavar="NAME", help="the model id clients see")
    g = s.add_argument_group("executor paths (else the variable named, then the project's "
                             "install, then PATH)")
    for flag, infos in executor_flags().items():
        env = sorted({i.executor_env for i in infos})
        g.add_argument(flag, metavar="PATH", dest=_dest(flag), default=None,
                       help=f"{infos[0].executor} for the {', '.join(i.device for i in infos)} "
                       f"route{'s' if len(infos) > 1 else ''} (${', $'.join(env)})")
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
    s.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="stderr lines as text (default), or one JSON object each (time, level, "
                   "message, source, fields) for a service manager; the executor's lines too")
    # Last, so an option a launcher declares cannot take one of serve's own flags.
    r = s.add_argument_group("route options (a route that cannot honour one refuses it)")
    for option in route_options():
        honour = [cls.info.device for cls in routes if cls.info.honours(option.name)]
        try:
            r.add_argument(*option.flags, dest=_option_dest(option.name),
                           help=f"{option.help} ({', '.join(honour) or 'no route here'})",
                           **_KIND_ARGS[option.kind](option))
        except argparse.ArgumentError as exc:
            raise UsageError(f"the route option {option.name} that the {', '.join(honour)} "
                             f"launcher declares clashes with one of serve's own flags ({exc}); "
                             "update or uninstall the package that provides it") from None
    s.epilog = "routes:\n" + "\n".join(
        f"  {cls.info.device:<8} {', '.join(sorted(cls.info.model_kinds))}: {cls.info.summary}"
        for cls in routes)
    s.formatter_class = argparse.RawDescriptionHelpFormatter


def _dest(flag: str) -> str:
    return "executor:" + flag


def _option_dest(name: str) -> str:
    return name if name in ROUTE_OPTIONS else "option:" + name


def serve_config(ns: argparse.Namespace, extra: list[str]) -> ServeConfig:
    executors = tuple((flag, getattr(ns, _dest(flag))) for flag in executor_flags()
                      if getattr(ns, _dest(flag), None))
    return ServeConfig(
        model=ns.model, port=ns.port, host=ns.host, device=ns.device[0], gpus=ns.device[1],
        alias=ns.alias,
        executors=executors, **{name: getattr(ns, name) for name in ROUTE_OPTIONS},
        values=tuple((o.name, getattr(ns, _option_dest(o.name))) for o in route_options()
                     if o.name not in ROUTE_OPTIONS and getattr(ns, _option_dest(o.name))
                     not in (None, False)),
        laya=ns.laya, route_policy=ns.route_policy, recipes=ns.recipes,
        no_recipes=ns.no_recipes, api_key=ns.api_key, extra_args=tuple(extra),
        load_timeout=ns.load_timeout, executor_timeout=ns.executor_timeout,
        max_body=ns.max_body_mb * 1024 * 1024,
        log_format=ns.log_format,
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
