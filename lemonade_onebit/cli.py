"""The `1bit` command line: a thin layer that parses, validates and hands typed values on."""

from __future__ import annotations

import argparse
import sys

from lemonade_onebit import __version__
from lemonade_onebit.console import reported
from lemonade_onebit.errors import UsageError
from lemonade_onebit.lemonade import DEFAULT_URL, VARIANT_ROUTES
from lemonade_onebit.serve.options import (
    add_serve_arguments,
    counts,
    port_number,
    positive_int,
    serve_config,
    split_extra,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: usage line, exit 2
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


_token_counts = counts("128,512,2048", "every length must be greater than 0")
_stream_counts = counts("1,8,32", "every level must be at least 1 stream")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="1bit",
        description="Run local LLMs on the fastest device of this machine behind one "
        "OpenAI-compatible API.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    version = sub.add_parser("version", help="print the version")
    version.add_argument("--pins", action="store_true",
                         help="also list every pinned executor and model, with its sha256")
    version.add_argument("--json", action="store_true", help="machine-readable output (with --pins)")

    pins = sub.add_parser(
        "pins", help="check the pins against their upstreams, move one, regenerate from them",
        description="The pins live in lemonade_onebit/pins.json (thirdparty/pins.json). check: "
        "the newest release of each on the package index pip is configured with "
        "(PIP_INDEX_URL, else `pip config`), and the newest tag of git upstreams; exits 1 when "
        "one moved. bump NAME: move a pin (to the newest, or --to VERSION) and regenerate "
        "constraints.txt and thirdparty/README.md. sync: regenerate them (--check: exit 1 when "
        "they differ).")
    pins.add_argument("action", choices=("check", "bump", "sync"))
    pins.add_argument("name", nargs="?", metavar="NAME", help="the pin to bump")
    pins.add_argument("--to", metavar="VERSION", help="bump to this version")
    pins.add_argument("--index", metavar="URL", help="the simple index to ask")
    pins.add_argument("--check", action="store_true", help="sync: only say whether they differ")
    pins.add_argument("--json", action="store_true", help="check: machine-readable output")

    devices = sub.add_parser("devices", help="devices found and the executor of each route")
    devices.add_argument("--json", action="store_true", help="machine-readable output")
    devices.add_argument("--rpc", metavar="HOST:PORT,...",
                         help="instead, ask these RPC workers what they offer")

    worker = sub.add_parser(
        "rpc-worker", help="a llama.cpp RPC worker for `1bit serve --rpc HOST:PORT,...`",
        description="Run llama.cpp's ggml-rpc-server for one device, so a `1bit serve --rpc` on "
        "this or another machine places model layers on it. The RPC protocol has no "
        "authentication and no encryption: it binds 127.0.0.1 unless --host says otherwise; "
        "cross machines through an SSH tunnel (ssh -L 50052:127.0.0.1:50052 HOST) or WireGuard.")
    worker.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    worker.add_argument("--port", type=port_number, default=50052, help="port (50052)")
    worker.add_argument("--device", metavar="DEVICE",
                        help="cpu, cuda, rocm or vulkan, :N for another GPU (else the worker's "
                        "first GPU, then the CPU)")
    worker.add_argument("--threads", type=positive_int, metavar="N", help="CPU threads")
    worker.add_argument("--cache", action="store_true",
                        help="keep tensors it was sent in a local cache ($LLAMA_CACHE/rpc)")
    worker.add_argument("--rpc-server", metavar="PATH", help="the ggml-rpc-server to run")

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
        "lemonade", help="put the catalog and the shim into Lemonade, and take them out",
        description="register: point a running Lemonade's llama.cpp variant at this package's "
        "shim (onebit-llama-server-VARIANT), link the catalog files this machine has into "
        "Lemonade's HF cache (no copy, no network) and register every catalog model as "
        "user.<Name> (Lemonade lists it as <Name>). unregister: undo what register did. "
        "status: what is registered, where each *_bin points, and whether each model loads "
        "through 1bit. export: write the /api/v1/pull bodies as JSON files for `lemonade import`.")
    lem_sub = lem.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser,
                                 required=True)
    reg = lem_sub.add_parser("register", help="register the catalog in a running Lemonade")
    unreg = lem_sub.add_parser("unregister", help="undo register: models, *_bin, cache links")
    status = lem_sub.add_parser("status", help="what is registered and how each model runs")
    exp = lem_sub.add_parser("export", help="write /api/v1/pull bodies for `lemonade import`")
    exp.add_argument("folder", metavar="DIR")
    for p in (reg, unreg, status):
        p.add_argument("--url", default=DEFAULT_URL,
                       help=f"Lemonade's address ({DEFAULT_URL})")
    for p in (reg, status):
        p.add_argument("--hf-cache", metavar="DIR",
                       help="Lemonade's Hugging Face cache (else $HF_HUB_CACHE, $HF_HOME/hub, "
                       "~/.cache/huggingface/hub: set it to what lemond's environment says)")
    reg.add_argument("--no-download", action="store_true",
                     help="do not let Lemonade download a model this machine lacks; register it only")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    for p in (reg, exp):
        p.add_argument("--variant", choices=tuple(VARIANT_ROUTES), default="cpu",
                       help="the llama.cpp variant Lemonade runs the models on (cpu)")
    for p in (reg, unreg, exp):
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

    tok = sub.add_parser(
        "tokenize", help="the token ids and pieces a model's tokenizer makes of a text",
        description="Tokenize TEXT as MODEL does: a folder's tokenizer.json (onnx, mlx, npu, a "
        "downloaded HF id) through Hugging Face tokenizers; a GGUF through llama-server's own "
        "/tokenize (started on the CPU for the call, then stopped). By default the tokens the "
        "model adds around a text (BOS/EOS) are added and special-token text such as "
        "<|im_start|> is that token, as the executors tokenize a prompt.",
        epilog="example: 1bit tokenize SmolLM2-135M-Instruct-1bit '<|im_start|>user' --json")
    tok.add_argument("model", metavar="MODEL",
                     help="a GGUF file, a model folder, a catalog name or a downloaded HF id")
    tok.add_argument("text", metavar="TEXT", help="the text; `-` reads it from stdin (also for a "
                     "text that starts with `-`)")
    tok.add_argument("--no-add-special", dest="add_special", action="store_false",
                     help="add no BOS/EOS or other tokens the model puts around a text")
    tok.add_argument("--no-parse-special", dest="parse_special", action="store_false",
                     help="encode special-token text (<|im_start|>) as its plain characters")
    tok.add_argument("--json", action="store_true",
                     help="machine-readable: ids, pieces (text, or byte values where a token holds "
                     "part of a character), the tokenizer and its file")

    b = sub.add_parser(
        "bench", help="A/B serve configurations on one model",
        description="A/B `1bit serve` configurations: a fresh serve per config and round, "
        "interleaved. By default prompt and decode tok/s from llama-server timings, best / median, "
        "with the change against the first config; --e2e: time to first token and end-to-end "
        "time by prompt length; --swap: start to first token, cold and warm, against the "
        "executor started alone; --concurrency: aggregate and per-stream decode tok/s and TTFT "
        "p50/p95 with N streams at once.",
        epilog="examples: 1bit bench -m SmolLM2-135M-Instruct-1bit --config base= "
        "--config norepack='-- --no-repack' --rounds 3; 1bit bench -m M.gguf --config "
        "defaults='--device cuda -- -np -1' --config auto='--device cuda' --concurrency 1,8,32 "
        "--decode-tokens 128")
    b.add_argument("-m", "--model", required=True)
    b.add_argument("--config", action="append", required=True, metavar="NAME=ARGS",
                   help="a config: `1bit serve` arguments (after `--`: executor flags); repeat; "
                   "the first is the baseline")
    mode = b.add_mutually_exclusive_group()
    mode.add_argument("--e2e", action="store_true",
                      help="TTFT, decode and end-to-end time by prompt length (streamed)")
    mode.add_argument("--swap", action="store_true",
                      help="start to first token, cold and warm, and serve's share of it")
    mode.add_argument("--concurrency", type=_stream_counts, metavar="N,N,...",
                      help="bursts of N concurrent streams (e.g. 1,8,32): aggregate decode tok/s, "
                      "per-stream tok/s, TTFT p50/p95; each prompt is the first --prompt-tokens "
                      "length, each stream --decode-tokens long")
    b.add_argument("--rounds", type=positive_int, default=3)
    b.add_argument("--prompt-reps", type=positive_int, default=5, metavar="N",
                   help="prompt-speed requests per run (5)")
    b.add_argument("--decode-reps", type=positive_int, default=3, metavar="N",
                   help="passes over the three decode prompts per run (3)")
    b.add_argument("--decode-tokens", type=positive_int, default=256, metavar="N",
                   help="tokens generated per decode or --e2e request (256)")
    b.add_argument("--prompt-tokens", type=_token_counts, default=(128, 512, 2048),
                   metavar="N,N,...", help="--e2e prompt lengths, exact tokens (128,512,2048)")
    b.add_argument("--e2e-reps", type=positive_int, default=3, metavar="N",
                   help="--e2e requests per prompt length per run; medians are reported (3)")
    b.add_argument("--bursts", type=positive_int, default=3, metavar="N",
                   help="--concurrency bursts per level per run, after a warm-up burst (3)")
    b.add_argument("--json", metavar="F", help="write every sample to F")
    b.add_argument("--plot", metavar="FILE.png", help="draw the results (needs matplotlib)")
    b.add_argument("--lock", metavar="F", help="refuse to run while another bench holds F")
    b.add_argument("--log-dir", metavar="DIR", help="serve logs, one per config and round")

    from lemonade_onebit.moe.commands import add_moe_parser

    add_moe_parser(sub)

    from lemonade_onebit.kernels.commands import add_convert_parser

    add_convert_parser(sub)

    from lemonade_onebit.registry.commands import add_registry_parser

    add_registry_parser(sub)

    s = sub.add_parser(
        "serve",
        help="serve one model behind the OpenAI API",
        description="Serve one model behind an OpenAI-compatible API. Arguments after `--` go to "
        "the executor (merged with serve's own: each flag once, yours winning).",
    )
    add_serve_arguments(s)
    return parser


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


def _dispatch(ns: argparse.Namespace, extra: list[str]) -> int:
    if ns.command == "version":
        if not ns.pins:
            print(f"1bit {__version__}")
            return 0
        from lemonade_onebit.pins import version_command

        return version_command(__version__, ns.json)
    if ns.command == "pins":
        from lemonade_onebit.pins import pins_command

        if (ns.action == "bump") != bool(ns.name):
            raise UsageError("`1bit pins bump` needs the NAME of a pin; check and sync take none")
        return pins_command(ns.action, ns.json, ns.index, ns.name, ns.to, ns.check)
    if ns.command == "bench":
        from lemonade_onebit.bench import BenchOptions, run_bench

        return run_bench(BenchOptions(
            model=ns.model, configs=ns.config,
            mode="e2e" if ns.e2e else "swap" if ns.swap else "concurrency" if ns.concurrency
            else "ab", rounds=ns.rounds, concurrency=ns.concurrency or (), bursts=ns.bursts,
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
        from lemonade_onebit.lemonade import commands as lemonade

        if ns.action == "export":
            return lemonade.export_command(ns.folder, ns.variant, ns.only)
        if ns.action == "unregister":
            return lemonade.unregister_command(ns.url, ns.only)
        if ns.action == "status":
            return lemonade.status_command(ns.url, ns.hf_cache, ns.json)
        return lemonade.register_command(ns.url, ns.variant, ns.only, not ns.no_download,
                                         ns.hf_cache)
    if ns.command == "tokenize":
        from lemonade_onebit.tokenizer import tokenize_command

        return tokenize_command(ns.model, ns.text, ns.add_special, ns.parse_special, ns.json)
    if ns.command == "route":
        from lemonade_onebit.laya import commands as laya

        if ns.classify is not None:
            return laya.classify_command(ns.classify, ns.route_policy, ns.json)
        if ns.eval is not None:
            return laya.eval_command(ns.eval, ns.json)
        return laya.export_lemonade_command(ns.export_lemonade or None)
    if ns.command == "registry":
        from lemonade_onebit.registry.commands import run as registry

        return registry(ns)
    if ns.command == "moe":
        from lemonade_onebit.moe.commands import run as moe

        return moe(ns)
    if ns.command == "convert":
        from lemonade_onebit.kernels.commands import run as convert

        return convert(ns)
    if ns.command == "devices":
        from lemonade_onebit.report import devices_report

        if ns.rpc:
            from lemonade_onebit.report import rpc_report

            return rpc_report(ns.rpc, ns.json)
        return devices_report(ns.json)
    if ns.command == "rpc-worker":
        from lemonade_onebit.console import say
        from lemonade_onebit.rpc import run_worker

        return run_worker(ns.host, ns.port, ns.device, ns.threads, ns.cache, ns.rpc_server,
                          lambda text: say("1bit rpc-worker", text))
    if ns.command == "serve":
        from lemonade_onebit.serve import run

        return run(serve_config(ns, extra))
    return 2


