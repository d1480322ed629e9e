"""The `1bit` command line: a thin layer that parses, validates and hands typed values on."""

from __future__ import annotations

import argparse
import os
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

    b = sub.add_parser(
        "bench", help="A/B serve configurations on one model",
        description="A/B `1bit serve` configurations: a fresh serve per config and round, "
        "interleaved; prompt and decode tok/s from llama-server timings, best / median, with "
        "the change against the first config.")
    b.add_argument("-m", "--model", required=True)
    b.add_argument("--config", action="append", required=True, metavar="NAME=ARGS",
                   help="a config: `1bit serve` arguments (after `--`: executor flags); repeat")
    b.add_argument("--rounds", type=_positive_int, default=3)
    b.add_argument("--prompt-reps", type=_positive_int, default=5)
    b.add_argument("--decode-reps", type=_positive_int, default=3)
    b.add_argument("--decode-tokens", type=_positive_int, default=256)
    b.add_argument("--json", metavar="F", help="write every sample to F")
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return 2
    if extra and ns.command != "serve":
        parser.error("arguments after `--` are for `1bit serve` only")
    try:
        if ns.command == "version":
            return _version(ns.pins)
        if ns.command == "bench":
            from lemonade_onebit.bench import run_bench

            return run_bench(ns.model, ns.config, ns.rounds, ns.prompt_reps, ns.decode_reps,
                             ns.decode_tokens, ns.json, ns.lock, ns.log_dir)
        if ns.command == "devices":
            from lemonade_onebit.report import devices_report

            return devices_report(ns.json)
        if ns.command == "serve":
            from lemonade_onebit.serve import run

            return run(serve_config(ns, extra))
    except UsageError as exc:
        print(f"1bit {ns.command}: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:
        print(f"1bit {ns.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `1bit devices | head`: the reader left, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 2


def _version(pins: bool) -> int:
    print(f"1bit {__version__}")
    if pins:
        from lemonade_onebit.pins import PINS

        for pin in PINS:
            print(f"{pin.name} {pin.version} ({pin.licence}; {pin.source})")
    return 0
