"""The `1bit` command line: a thin layer that parses, validates and hands typed values on."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from lemonade_onebit import __version__
from lemonade_onebit.config import DEVICES, ServeConfig
from lemonade_onebit.errors import RunError, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: usage line, exit 2
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _number(convert, what: str, valid, rule: str):
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


_positive_int = _number(int, "a whole number", lambda v: v > 0, "must be greater than 0")
_port = _number(int, "a whole number", lambda v: 0 < v <= 65535, "is not a port (1-65535)")
_probability = _number(float, "a number", lambda v: 0.0 <= v <= 1.0, "must be between 0 and 1")
def _token_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 128,512,2048") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every length must be greater than 0")
    return counts


_seconds = _number(float, "a number of seconds", lambda v: v > 0, "must be greater than 0")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="1bit",
        description="Run local LLMs on the fastest device of this machine behind one "
        "OpenAI-compatible API.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    version = sub.add_parser("version", help="print the version")
    version.add_argument("--pins", action="store_true", help="also list every pinned executor")

    devices = sub.add_parser("devices", help="devices found and the executor of each route")
    devices.add_argument("--json", action="store_true", help="machine-readable output")

    pull = sub.add_parser(
        "pull", help="download a model into the Hugging Face cache",
        description="Download a catalog model, or ORG/REPO[:VARIANT] (a quant such as Q4_K_M or "
        "a file; sharded GGUFs come whole), into the Hugging Face cache (HF_HUB_CACHE, else "
        "HF_HOME/hub). An interrupted pull continues where it stopped; each file is checked "
        "against the hub's sha256. HF_TOKEN and HF_ENDPOINT are honoured.")
    pull.add_argument("model", metavar="NAME|ORG/REPO[:VARIANT]")
    pull.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    pull.add_argument("--json", action="store_true", help="print the files as JSON")

    listing = sub.add_parser("list", help="catalog models and whether they are downloaded")
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    delete = sub.add_parser("delete", help="remove a downloaded catalog model's files")
    delete.add_argument("model", metavar="NAME")

    lem = sub.add_parser(
        "lemonade", help="put the catalog and the shim into Lemonade",
        description="register: point a running Lemonade's llama.cpp variant at "
        "onebit-llama-server and register every catalog model as user.<Name> (downloading it). "
        "export: write the same /api/v1/pull bodies as JSON files for `lemonade import`.")
    lem_sub = lem.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser,
                                 required=True)
    reg = lem_sub.add_parser("register", help="register the catalog in a running Lemonade")
    reg.add_argument("--url", default="http://localhost:13305",
                     help="Lemonade's address (http://localhost:13305)")
    reg.add_argument("--no-download", action="store_true",
                     help="register only (/api/v1/models/register); download later in Lemonade")
    exp = lem_sub.add_parser("export", help="write /api/v1/pull bodies for `lemonade import`")
    exp.add_argument("folder", metavar="DIR")
    for p in (reg, exp):
        p.add_argument("--variant", choices=("cpu", "vulkan", "rocm", "cuda"), default="cpu",
                       help="the llama.cpp variant Lemonade runs the models on (cpu)")
        p.add_argument("--only", action="append", metavar="NAME",
                       help="only this catalog model; repeat")

    route = sub.add_parser(
        "route", help="the Laya class of a request, and the device it goes to",
        description="Laya: a request of 1,024 characters or more is long_doc; shorter ones are "
        "code, prose or short, with a confidence. The policy maps the class to a device.")
    what = route.add_mutually_exclusive_group(required=True)
    what.add_argument("--classify", metavar="TEXT", help="classify TEXT")
    what.add_argument("--eval", metavar="FILE",
                      help='accuracy, confusion and latency on {"cases":[{"class","text"}]}')
    what.add_argument("--export-lemonade", nargs="?", const="", metavar="FILE",
                      help="write a Lemonade collection.router model over -1bit models")
    route.add_argument("--route-policy", metavar="FILE", help="policy file (the shipped one)")
    route.add_argument("--json", action="store_true", help="machine-readable output")

    b = sub.add_parser(
        "bench", help="A/B serve configurations on one model",
        description="A/B `1bit serve` configurations: a fresh serve per config and round, "
        "interleaved. By default prompt and decode tok/s from llama-server timings, best / median, "
        "with the change against the first config; --e2e: time to first token and end-to-end "
        "time by prompt length; --swap: start to first token, cold and warm, against the "
        "executor started alone.",
        epilog="example: 1bit bench -m SmolLM2-135M-Instruct-1bit --config base= "
        "--config norepack='-- --no-repack' --rounds 3")
    b.add_argument("-m", "--model", required=True)
    b.add_argument("--config", action="append", required=True, metavar="NAME=ARGS",
                   help="a config: `1bit serve` arguments (after `--`: executor flags); repeat; "
                   "the first is the baseline")
    mode = b.add_mutually_exclusive_group()
    mode.add_argument("--e2e", action="store_true",
                      help="TTFT, decode and end-to-end time by prompt length (streamed)")
    mode.add_argument("--swap", action="store_true",
                      help="start to first token, cold and warm, and serve's share of it")
    b.add_argument("--rounds", type=_positive_int, default=3)
    b.add_argument("--prompt-reps", type=_positive_int, default=5, metavar="N",
                   help="prompt-speed requests per run (5)")
    b.add_argument("--decode-reps", type=_positive_int, default=3, metavar="N",
                   help="passes over the three decode prompts per run (3)")
    b.add_argument("--decode-tokens", type=_positive_int, default=256, metavar="N",
                   help="tokens generated per decode or --e2e request (256)")
    b.add_argument("--prompt-tokens", type=_token_counts, default=(128, 512, 2048),
                   metavar="N,N,...", help="--e2e prompt lengths, exact tokens (128,512,2048)")
    b.add_argument("--e2e-reps", type=_positive_int, default=3, metavar="N",
                   help="--e2e requests per prompt length per run; medians are reported (3)")
    b.add_argument("--json", metavar="F", help="write every sample to F")
    b.add_argument("--plot", metavar="FILE.png", help="draw the results (needs matplotlib)")
    b.add_argument("--lock", metavar="F", help="refuse to run while another bench holds F")
    b.add_argument("--log-dir", metavar="DIR", help="serve logs, one per config and round")

    s = sub.add_parser(
        "serve",
        help="serve one model behind the OpenAI API",
        description="Serve one model behind an OpenAI-compatible API. Arguments after `--` go to "
        "the executor unchanged.",
    )
    s.add_argument("-m", "--model", required=True,
                   help="a .gguf/.1bp file, a model folder, a catalog name or an MLX HF id")
    s.add_argument("-p", "--port", type=_port, default=8000, help="port to listen on (8000)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (127.0.0.1; 0.0.0.0 exposes it to the network)")
    s.add_argument("--device", choices=DEVICES, default="auto",
                   help="where to run it; auto picks the fastest route this machine has")
    s.add_argument("-c", "--ctx-size", type=_positive_int, metavar="N", help="context size")
    s.add_argument("-fa", "--flash-attn", choices=("on", "off", "auto"), help="flash attention")
    s.add_argument("--alias", metavar="NAME", help="the model id clients see")
    g = s.add_argument_group("executor paths (else $ONEBIT_*, then the project's install, then PATH)")
    g.add_argument("--llama-server", metavar="PATH")
    g.add_argument("--zinc", metavar="PATH")
    g.add_argument("--ds4", metavar="PATH")
    g.add_argument("--mlx-server", metavar="PATH")
    g.add_argument("--onnx-server", metavar="PATH")
    g.add_argument("--hrx-libhsa", metavar="PATH", help="libhsa for the HRX route")
    s.add_argument("--lean", action="store_true", help="ROCmFP4/ROCmI4/H32 files (vulkan, rocm)")
    s.add_argument("--parallel", type=_positive_int, metavar="N", help="parallel request slots")
    s.add_argument("--mtp", metavar="HEAD.gguf", help="multi-token-prediction head")
    s.add_argument("--dflash", metavar="DRAFT.gguf", help="DFlash draft model")
    s.add_argument("--mtp-max", type=_positive_int, metavar="N", help="most tokens drafted")
    s.add_argument("--mtp-p-min", type=_probability, metavar="P", help="least draft probability")
    s.add_argument("--mmproj", metavar="F", help="multimodal projector")
    s.add_argument("--embedding", action="store_true", help="serve /v1/embeddings")
    s.add_argument("--reranking", action="store_true", help="serve /v1/rerank")
    s.add_argument("--laya", action="store_true", help="route each conversation by its class")
    s.add_argument("--route-policy", metavar="FILE", help="Laya policy file")
    s.add_argument("--recipes", metavar="FILE", help="use this recipe file instead of the shipped set")
    s.add_argument("--no-recipes", action="store_true", help="apply no recipe")
    s.add_argument("--api-key", metavar="KEY", help="require `Authorization: Bearer KEY`")
    s.add_argument("--load-timeout", type=_seconds, default=600.0, metavar="S",
                   help="fail the load when the executor shows no progress for S seconds (600)")
    s.add_argument("--executor-timeout", type=_seconds, default=600.0, metavar="S",
                   help="answer 502 when the executor sends nothing for S seconds (600)")
    s.add_argument("--max-body-mb", type=_positive_int, default=16, metavar="N",
                   help="largest request body accepted, in MiB (16)")
    return parser


def serve_config(ns: argparse.Namespace, extra: list[str]) -> ServeConfig:
    return ServeConfig(
        model=ns.model, port=ns.port, host=ns.host, device=ns.device, ctx_size=ns.ctx_size,
        flash_attn=ns.flash_attn, alias=ns.alias, llama_server=ns.llama_server, zinc=ns.zinc,
        ds4=ns.ds4, mlx_server=ns.mlx_server, onnx_server=ns.onnx_server,
        hrx_libhsa=ns.hrx_libhsa, lean=ns.lean, parallel=ns.parallel, mtp=ns.mtp,
        dflash=ns.dflash, mtp_max=ns.mtp_max, mtp_p_min=ns.mtp_p_min, mmproj=ns.mmproj,
        embedding=ns.embedding, reranking=ns.reranking, laya=ns.laya,
        route_policy=ns.route_policy, recipes=ns.recipes, no_recipes=ns.no_recipes,
        api_key=ns.api_key, extra_args=tuple(extra), load_timeout=ns.load_timeout,
        executor_timeout=ns.executor_timeout, max_body=ns.max_body_mb * 1024 * 1024,
    )


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and those after `--` (the executor's, passed unchanged)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def parse_serve_args(model: str, args: list[str]) -> ServeConfig:
    """`1bit serve -m MODEL ARGS` parsed as serve would, for tools that plan a serve without
    running one (`1bit bench --swap`); a bad argument is a UsageError."""
    ours, extra = split_extra(["serve", "-m", model, *args])
    try:
        ns = build_parser().parse_args(ours)
    except SystemExit:
        raise UsageError(f"{shlex.join(args)}: not valid `1bit serve` arguments") from None
    return serve_config(ns, extra)


def main(argv: list[str] | None = None) -> int:
    argv, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return 2
    if extra and ns.command != "serve":
        parser.error("arguments after `--` are for `1bit serve` only")
    return reported(f"1bit {ns.command}", lambda: _dispatch(ns, extra))


def reported(prog: str, command) -> int:
    """Run `command`; a user error is one line and exit 2, a runtime failure one line and exit 1,
    never a traceback. Shared by `1bit` and `onebit-llama-server`."""
    try:
        return command()
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `1bit devices | head`: the reader left, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(ns: argparse.Namespace, extra: list[str]) -> int:
    if ns.command == "version":
        return _version(ns.pins)
    if ns.command == "bench":
        from lemonade_onebit.bench import BenchOptions, run_bench

        return run_bench(BenchOptions(
            model=ns.model, configs=ns.config,
            mode="e2e" if ns.e2e else "swap" if ns.swap else "ab", rounds=ns.rounds,
            prompt_reps=ns.prompt_reps, decode_reps=ns.decode_reps,
            decode_tokens=ns.decode_tokens, prompt_tokens=ns.prompt_tokens,
            e2e_reps=ns.e2e_reps, json=ns.json, lock=ns.lock, log_dir=ns.log_dir,
            plot=ns.plot))
    if ns.command in ("pull", "list", "delete"):
        from lemonade_onebit.catalog import commands

        if ns.command == "pull":
            return commands.pull_command(ns.model, ns.quiet, ns.json)
        if ns.command == "list":
            return commands.list_command(ns.json)
        return commands.delete_command(ns.model)
    if ns.command == "lemonade":
        from lemonade_onebit.catalog import lemonade

        if ns.action == "export":
            return lemonade.export_command(ns.folder, ns.variant, ns.only)
        return lemonade.register_command(ns.url, ns.variant, ns.only, not ns.no_download)
    if ns.command == "route":
        from lemonade_onebit.laya import commands as laya

        if ns.classify is not None:
            return laya.classify_command(ns.classify, ns.route_policy, ns.json)
        if ns.eval is not None:
            return laya.eval_command(ns.eval, ns.json)
        return laya.export_lemonade_command(ns.export_lemonade or None)
    if ns.command == "devices":
        from lemonade_onebit.report import devices_report

        return devices_report(ns.json)
    if ns.command == "serve":
        from lemonade_onebit.serve import run

        return run(serve_config(ns, extra))
    return 2


def _version(pins: bool) -> int:
    print(f"1bit {__version__}")
    if pins:
        from lemonade_onebit.pins import PINS

        for pin in PINS:
            print(f"{pin.name} {pin.version} ({pin.licence}; {pin.source})")
    return 0
