"""The three conversions `1bit convert` runs: --rotate, --hadamard-q4-0 and --ternary-q4-0.

Each reads the source tensor by tensor, writes under a temporary name and renames at the end,
and records what it did: `onebit.transform`, `onebit.rotation` (and `onebit.rotation_seed`),
`onebit.source_sha256`; the H32 file also carries `onebit.hadamard_q4_0 = 32`, the stamp serve
routes to `rocm --lean`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lemonade_onebit.errors import RunError, UsageError
from lemonade_onebit.kernels import compute, gguffile, plan, tools
from lemonade_onebit.kernels.hadamard import Rotation

H32_KEY = "onebit.hadamard_q4_0"  # ggufmeta.STAMP_KEY: serve routes the file by it
CHUNK_VALUES = {"numpy": 1 << 18, "torch": 1 << 25}  # values per piece of a tensor in flight
IMATRIX_CTX = 512


@dataclass
class Report:
    transform: str
    source: str
    out: str
    backend: str
    source_sha256: str = ""
    rotation: str = ""
    seed: int | None = None
    type: str = ""
    tensors: int = 0
    transformed: int = 0
    out_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        parts = [f"{self.out}: {self.transform}", f"{self.transformed} of {self.tensors} tensors"]
        if self.rotation:
            parts.append(self.rotation + (f" seed {self.seed}" if self.seed is not None else ""))
        if self.type:
            parts.append(self.type)
        parts.append(f"{self.out_bytes / 1e6:.1f} MB in {sum(self.seconds.values()):.1f} s "
                     f"({self.backend})")
        return ", ".join(parts)


class _Progress:
    """A tqdm bar over bytes on stderr (none when quiet or not a terminal)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar = None

    def start(self, total: int, what: str):
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(total=total, desc=what, unit="B", unit_scale=True, leave=False,
                        disable=True if self.quiet else None)
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _open(path: Path) -> gguffile.Source:
    try:
        return gguffile.Source(path)
    except ValueError as exc:
        raise RunError(str(exc)) from None


def _check_space(out: Path, need: int) -> None:
    free = shutil.disk_usage(out.parent).free
    if free < need:
        raise RunError(f"{out.parent}: {free / 1e9:.1f} GB free, the conversion needs about "
                       f"{need / 1e9:.1f} GB: free some space or write elsewhere")


def _source_hash(src: gguffile.Source, progress: _Progress, report: Report) -> str:
    start = time.perf_counter()
    bar = progress.start(src.path.stat().st_size, "sha256 of the source")
    digest = gguffile.sha256(src.path, bar)
    report.seconds["sha256"] = round(time.perf_counter() - start, 3)
    report.source_sha256 = digest
    return digest


def _requantised_note(src: gguffile.Source, report: Report) -> None:
    kinds = sorted({t.qtype.name for t in src.tensors.values()
                    if len(t.shape) > 1 and not t.float})
    if kinds:
        report.notes.append(f"the source is already quantised ({', '.join(kinds)}): its weights "
                            "are dequantised first, which keeps their rounding error; convert "
                            "from F16, BF16 or F32 for the best result")


# --- rotate ---------------------------------------------------------------------------------


def _rows(x: np.ndarray, xp: compute.Backend) -> int:
    return max(1, CHUNK_VALUES["torch" if xp.name.startswith("torch") else "numpy"]
               // max(1, x.shape[-1]))


def rotated_values(xp: compute.Backend, src: gguffile.Source, step: plan.Step,
                   rots: dict[str, Rotation]) -> np.ndarray:
    """The float32 data of one output tensor of the rotation (see plan.Step)."""
    t = src.tensors[step.source]
    if step.ones:
        return np.ones(t.shape, dtype=np.float32)
    w = t.values()
    if not step.rotated:
        return np.ascontiguousarray(w, dtype=np.float32)
    shape = w.shape
    rot_in, rot_out = step.rotate_in, step.rotate_out
    if w.ndim == 1:  # a bias: the vector itself is rotated
        w, rot_in, rot_out = w[None, :], rot_in or rot_out, None
    w = w.reshape(-1, w.shape[-1]) if rot_out is None else w
    gain = None if step.gain is None else src.tensors[step.gain].values()

    def along(x, kind: str | None):
        if kind is None:
            return x
        rot = rots[kind]
        if kind == "residual":
            return compute.rotate(xp, x, rot)
        return compute.rotate(xp, x.reshape(-1, rot.n), rot).reshape(x.shape)

    out = np.empty(w.shape, dtype=np.float32)
    if rot_out is None:
        step_rows = _rows(w, xp)
        g = None if gain is None else xp.vector(gain)
        for r in range(0, w.shape[0], step_rows):
            x = xp.load(w[r:r + step_rows])
            if g is not None:
                x = x * g
            out[r:r + step_rows] = xp.float32(along(x, rot_in))
    elif rot_in is None and gain is None:
        step_cols = _rows(w.T, xp)
        for c in range(0, w.shape[1], step_cols):
            x = xp.load(w[:, c:c + step_cols].T)
            out[:, c:c + step_cols] = xp.float32(along(x, rot_out)).T
    else:
        x = xp.load(w)
        if gain is not None:
            x = x * xp.vector(gain)
        x = xp.transpose(along(x, rot_in))
        out[:] = xp.float32(along(x, rot_out)).T
    return out.reshape(shape)


def rotation_for(src: gguffile.Source, seed: int) -> tuple[dict[str, Rotation], list[plan.Step]]:
    """The rotations of this model (residual, and per head when its head size has one) and the
    plan; plan.Unsupported when it cannot be rotated exactly."""
    plan.check_architecture(src.arch)
    n_embd = src.number("embedding_length")
    n_head = src.number("attention.head_count")
    if n_embd is None or n_head is None:
        raise plan.Unsupported(f"no {src.arch}.embedding_length or attention.head_count")
    head_v = src.number("attention.value_length") or n_embd // n_head
    rng = np.random.default_rng(seed)
    try:
        rots = {"residual": Rotation.build(n_embd, rng)}
    except ValueError as exc:
        raise plan.Unsupported(f"n_embd {n_embd}: {exc}") from None
    try:
        rots["head"] = Rotation.build(head_v, rng)
    except ValueError:
        pass
    steps = plan.rotation_plan(src.arch, list(src.tensors), "head" in rots)
    for s in steps:  # shapes the rotations must fit
        t = src.tensors[s.source]
        for kind, axis in ((s.rotate_in, -1), (s.rotate_out, 0)):
            if kind is None:
                continue
            size = t.shape[axis] if len(t.shape) > 1 else t.shape[0]
            if size % rots[kind].n:
                raise plan.Unsupported(f"tensor {s.source} {t.shape}: {size} values do not split "
                                       f"into rotations of {rots[kind].n}")
    return rots, steps


def rotate(source: Path, out: Path, qtype: str = "Q4_0", imatrix_text: Path | None = None,
           seed: int = 0, device: str = "auto", quiet: bool = False) -> Report:
    """A rotated copy of `source`, quantised to `qtype` with llama-quantize (F32: not quantised)."""
    from gguf.constants import GGMLQuantizationType as T
    from gguf.constants import LlamaFileType

    if qtype != "F32":
        known = tools.quant_types()
        if qtype not in known:
            raise UsageError(f"--type {qtype}: the installed llama-quantize does not know it "
                             f"(it knows {', '.join(known)})")
    xp = compute.backend(device)
    src = _open(source)
    try:
        rots, steps = rotation_for(src, seed)
    except plan.Unsupported as exc:
        raise RunError(f"{source}: {exc}") from None
    report = Report("rotate", str(source), str(out), xp.name, seed=seed, type=qtype,
                    rotation=" + ".join(f"{k} {r.name}" for k, r in rots.items()))
    _requantised_note(src, report)
    n_values = sum(int(np.prod(src.tensors[s.source].shape)) for s in steps)
    _check_space(out, 4 * n_values + (0 if qtype == "F32" else 2 * n_values))
    progress = _Progress(quiet)
    try:
        digest = _source_hash(src, progress, report)
        extra = {gguffile.TRANSFORM_KEY: "rotate",
                 gguffile.ROTATION_KEY: f"randomized-hadamard {report.rotation}",
                 gguffile.SEED_KEY: seed, gguffile.SOURCE_KEY: digest}
        tensors = [gguffile.OutTensor(s.name, src.tensors[s.source].shape, T.F32,
                                      lambda s=s: rotated_values(xp, src, s, rots))
                   for s in steps]
        report.tensors = len(steps)
        report.transformed = sum(s.rotated for s in steps)
        bar = progress.start(sum(t.nbytes() for t in tensors), "rotating")
        start = time.perf_counter()
        if qtype == "F32":
            with gguffile.atomic(out) as tmp:
                gguffile.write(tmp, src, tensors, extra, LlamaFileType.ALL_F32, bar)
            report.seconds["rotate"] = round(time.perf_counter() - start, 3)
        else:
            with gguffile.scratch(out, "rotated-f32") as f32:
                gguffile.write(f32, src, tensors, extra, LlamaFileType.ALL_F32, bar)
                report.seconds["rotate"] = round(time.perf_counter() - start, 3)
                quantise(f32, out, qtype, imatrix_text, progress, report)
        report.out_bytes = out.stat().st_size
    finally:
        progress.close()
    return report


def quantise(f32: Path, out: Path, qtype: str, imatrix_text: Path | None,
             progress: _Progress, report: Report) -> None:
    """llama-quantize f32 -> out (atomically), with an importance matrix of `imatrix_text`
    computed by llama-imatrix on f32 first when given. The tools' logs are kept only when they
    fail (the error names them)."""
    argv = [tools.tool("llama-quantize")]
    with gguffile.scratch(out, "imatrix") as imatrix:
        if imatrix_text is not None:
            start = time.perf_counter()
            progress.start(0, "importance matrix (llama-imatrix)")
            log = gguffile.temporary(out, "imatrix-log")
            tools.run([tools.tool("llama-imatrix"), "-m", str(f32), "-f", str(imatrix_text),
                       "-o", str(imatrix), "-c", str(IMATRIX_CTX), "--no-ppl"], log)
            log.unlink()
            report.seconds["imatrix"] = round(time.perf_counter() - start, 3)
            argv += ["--imatrix", str(imatrix)]
        start = time.perf_counter()
        bar = progress.start(0, f"quantising to {qtype} (llama-quantize)")

        def on_line(line: str) -> None:
            m = tools.TENSOR_LINE.match(line)
            if m and bar is not None:
                bar.total = int(m.group(2))
                bar.unit = "tensor"
                bar.n = int(m.group(1))
                bar.refresh()

        log = gguffile.temporary(out, "quantize-log")
        with gguffile.atomic(out) as tmp:
            tools.run([*argv, str(f32), str(tmp), qtype], log, on_line)
        log.unlink()
        report.seconds["quantize"] = round(time.perf_counter() - start, 3)


# --- H32 ------------------------------------------------------------------------------------


def h32_values(xp: compute.Backend, w: np.ndarray) -> np.ndarray:
    """The Q4_0 bytes of W·H32 (each 32-value block of each row rotated), rows kept."""
    return q4_0_values(xp, w, compute.wht32)


def q4_0_values(xp: compute.Backend, w: np.ndarray, transform=None) -> np.ndarray:
    """The Q4_0 bytes of W's rows (of `transform(xp, rows)` first, where given), rows kept,
    a step of rows at a time."""
    rows = w.reshape(-1, w.shape[-1])
    out = np.empty((rows.shape[0], rows.shape[1] // compute.QK4_0 * compute.Q4_0_BYTES),
                   dtype=np.uint8)
    step = _rows(rows, xp)
    for r in range(0, rows.shape[0], step):
        block = xp.load(rows[r:r + step])
        out[r:r + step] = xp.q4_0(transform(xp, block) if transform else block)
    return out


def hadamard_q4_0(source: Path, out: Path, device: str = "auto", quiet: bool = False) -> Report:
    """Every matrix but the embeddings as Q4_0 of W·H32 along its rows; the embeddings as plain
    Q4_0 (they are looked up, not multiplied); vectors and odd shapes copied."""
    from gguf.constants import GGMLQuantizationType as T

    xp = compute.backend(device)
    src = _open(source)
    report = Report("hadamard-q4_0", str(source), str(out), xp.name, rotation="walsh-hadamard-32",
                    type="Q4_0")
    _requantised_note(src, report)
    names = list(src.tensors)
    tied = "output.weight" not in src.tensors and "token_embd.weight" in src.tensors
    layout = []  # (output name, source name, kind: h32 | q4_0 | copy)
    for name in names:
        t = src.tensors[name]
        fits = len(t.shape) > 1 and t.shape[-1] % compute.QK4_0 == 0
        kind = "copy" if not fits else "q4_0" if name == "token_embd.weight" else "h32"
        layout.append((name, name, kind))
        if name == "token_embd.weight" and tied and fits:
            layout.append(("output.weight", name, "h32"))
    if not any(kind == "h32" for *_, kind in layout):
        raise RunError(f"{source}: no matrix whose rows split into blocks of 32")
    progress = _Progress(quiet)

    def make(src_name: str, kind: str):
        t = src.tensors[src_name]
        if kind == "copy":
            return lambda: np.asarray(t.data)
        if kind == "q4_0":
            return lambda: q4_0_values(xp, t.values())
        return lambda: h32_values(xp, t.values())

    tensors = [gguffile.OutTensor(name, src.tensors[s].shape,
                                  src.tensors[s].qtype if kind == "copy" else T.Q4_0, make(s, kind))
               for name, s, kind in layout]
    _check_space(out, sum(t.nbytes() for t in tensors))
    report.tensors = len(tensors)
    report.transformed = sum(kind == "h32" for *_, kind in layout)
    extra = {gguffile.TRANSFORM_KEY: "hadamard-q4_0", gguffile.ROTATION_KEY: "walsh-hadamard-32",
             gguffile.SOURCE_KEY: None, H32_KEY: 32}
    return _write_q4_0(src, out, tensors, extra, "rotating and quantising", progress, report)


# --- ternary --------------------------------------------------------------------------------


def ternary_q4_0(source: Path, out: Path, quiet: bool = False) -> Report:
    """Every TQ1_0 / TQ2_0 tensor as Q4_0 (lossless), everything else copied byte for byte."""
    from gguf.constants import GGMLQuantizationType as T

    from lemonade_onebit.kernels.ternary import q4_0_from_ternary

    src = _open(source)
    report = Report("ternary-q4_0", str(source), str(out), "numpy", type="Q4_0")
    ternary = {name for name, t in src.tensors.items() if t.qtype in (T.TQ1_0, T.TQ2_0)}
    if not ternary:
        raise RunError(f"{source}: no ternary tensor (TQ1_0 or TQ2_0) to convert")

    def make(t: gguffile.SourceTensor):
        if t.name in ternary:
            return lambda: q4_0_from_ternary(t.data, t.qtype)
        return lambda: np.asarray(t.data)

    tensors = [gguffile.OutTensor(t.name, t.shape, T.Q4_0 if t.name in ternary else t.qtype, make(t))
               for t in src.tensors.values()]
    _check_space(out, sum(t.nbytes() for t in tensors))
    report.tensors = len(tensors)
    report.transformed = len(ternary)
    extra = {gguffile.TRANSFORM_KEY: "ternary-q4_0", gguffile.SOURCE_KEY: None}
    return _write_q4_0(src, out, tensors, extra, "repacking", _Progress(quiet), report)


def _write_q4_0(src: gguffile.Source, out: Path, tensors: list, extra: dict, what: str,
                progress: _Progress, report: Report) -> Report:
    """The source's sha256 into `extra`'s SOURCE_KEY (its place kept), then the tensors as a Q4_0
    file under OUT, atomically."""
    from gguf.constants import LlamaFileType

    try:
        extra = {**extra, gguffile.SOURCE_KEY: _source_hash(src, progress, report)}  # in place
        start = time.perf_counter()
        with gguffile.atomic(out) as tmp:
            bar = progress.start(sum(t.nbytes() for t in tensors), what)
            gguffile.write(tmp, src, tensors, extra, LlamaFileType.MOSTLY_Q4_0, bar)
        report.seconds["convert"] = round(time.perf_counter() - start, 3)
        report.out_bytes = out.stat().st_size
    finally:
        progress.close()
    return report
