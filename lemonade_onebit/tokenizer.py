"""`1bit tokenize`: the token ids a model's tokenizer makes of a text, and the piece of text each
one stands for.

A folder that carries `tokenizer.json` (onnx, mlx and npu folders, a downloaded HF snapshot) is read
with Hugging Face `tokenizers`, the pinned library the executors' own tokenizers are checked against
(tests/test_tokenize.py). A GGUF holds its own vocabulary, so it is asked of llama-server itself:
`/tokenize`, on a private loopback port, with no device and no weights repacked or warmed up,
stopped however the command ends.

Both take the same two switches, named as llama-server names them: `add_special` puts the tokens
the model adds around every text (tokenizer.json's post-processor; the GGUF's
`tokenizer.ggml.add_bos_token` and `add_eos_token`), `parse_special` makes special-token text such
as `<|im_start|>` that token (off: its characters are encoded as any other text). Both are on by
default, as the executors tokenize a prompt.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lemonade_onebit.errors import RunError
from lemonade_onebit.modelref import ModelRef

if TYPE_CHECKING:
    from lemonade_onebit.bench.common import Run

MISSING_TOKENIZERS = (
    "`1bit tokenize` reads tokenizer.json with Hugging Face tokenizers, which is not installed: "
    "pip install 'lemonade-onebit[tokenize]' (the onnx and mlx extras bring it too)"
)
FOLDER_KINDS = ("onnx", "mlx", "npu", "hf-id")
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@dataclass(frozen=True)
class Tokens:
    ids: tuple[int, ...]
    pieces: tuple[bytes, ...]  # the bytes each token stands for (part of a character, at times)
    tokenizer: str  # what tokenized: `tokenizers 0.23.3` or `llama-server`
    source: Path  # the tokenizer.json or the GGUF
    add_special: bool = True
    parse_special: bool = True

    def as_json(self) -> dict:
        return {"tokenizer": self.tokenizer, "source": str(self.source),
                "add_special": self.add_special, "parse_special": self.parse_special,
                "count": len(self.ids), "ids": list(self.ids),
                "pieces": [piece_json(p) for p in self.pieces]}


def piece_json(piece: bytes) -> str | list[int]:
    """A piece as JSON: its text, or its byte values where it holds part of a UTF-8 character (as
    llama-server's `/tokenize` writes it)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def piece_text(piece: bytes) -> str:
    """A piece for a terminal: quoted with escapes (spaces and newlines show), or `<0xNN>` bytes."""
    try:
        return json.dumps(piece.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        return "".join(f"<0x{b:02X}>" for b in piece)


def _byte_level_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet (what `ByteLevel` pre-tokenizers write vocabularies in): every
    byte as one printable character; the inverse of `bytes_to_unicode`."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return {c: b for b, c in chars.items()}


def piece_rule(decoder: dict | None) -> Callable[[str], bytes]:
    """How a vocabulary entry becomes the bytes it stands for, read from tokenizer.json's decoder:
    byte-level (GPT-2, Llama 3, Qwen, SmolLM), or SentencePiece-style (`▁` for a space, `<0xNN>`
    byte-fallback tokens); otherwise the entry's own text."""
    steps = decoder.get("decoders", []) if isinstance(decoder, dict) and \
        decoder.get("type") == "Sequence" else [decoder]
    kinds = {step.get("type") for step in steps if isinstance(step, dict)}
    if "ByteLevel" in kinds:
        alphabet = _byte_level_chars()

        def byte_level(entry: str) -> bytes:
            if all(c in alphabet for c in entry):
                return bytes(alphabet[c] for c in entry)
            return entry.encode()

        return byte_level
    spaces = "Metaspace" in kinds or any(
        step.get("type") == "Replace" and (step.get("pattern") or {}).get("String") == "▁"
        for step in steps if isinstance(step, dict))
    fallback = "ByteFallback" in kinds

    def sentencepiece(entry: str) -> bytes:
        byte = _BYTE_TOKEN.fullmatch(entry) if fallback else None
        if byte:
            return bytes([int(byte.group(1), 16)])
        return (entry.replace("▁", " ") if spaces else entry).encode()

    return sentencepiece


class FileTokenizer:
    """A tokenizer.json, read with Hugging Face `tokenizers`."""

    def __init__(self, path: Path) -> None:
        try:
            import tokenizers
        except ImportError:
            raise RunError(MISSING_TOKENIZERS) from None
        self.source = path
        self.name = f"tokenizers {tokenizers.__version__}"
        try:
            raw = path.read_text(encoding="utf-8")
            self._tokenizer = tokenizers.Tokenizer.from_str(raw)
            decoder = json.loads(raw).get("decoder")
        except OSError as exc:
            raise RunError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        except Exception as exc:  # tokenizers raises Exception itself for a file it cannot use
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RunError(f"{path}: not a tokenizer.json tokenizers can read ({reason})") from None
        self._piece = piece_rule(decoder)
        self._added = {i: t.content for i, t in self._tokenizer.get_added_tokens_decoder().items()}

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> Tokens:
        self._tokenizer.encode_special_tokens = not parse_special
        encoding = self._tokenizer.encode(text, add_special_tokens=add_special)
        pieces = tuple(self._added[i].encode() if i in self._added else self._piece(entry)
                       for i, entry in zip(encoding.ids, encoding.tokens))
        return Tokens(tuple(encoding.ids), pieces, self.name, self.source, add_special,
                      parse_special)

    def __enter__(self) -> FileTokenizer:
        return self

    def __exit__(self, *exc) -> None:
        pass


class LlamaServerTokenizer:
    """llama-server's own `/tokenize` for one GGUF: started on enter, stopped on exit (its group
    SIGTERMed, then SIGKILLed; killed by the kernel if this process dies first). Its log is kept,
    and named, only when it fails."""

    name = "llama-server"

    def __init__(self, gguf: Path, executor: str | None = None, timeout: float = 600) -> None:
        self.source = gguf
        self.executor = executor
        self.timeout = timeout
        self.run: Run | None = None
        self._failed = False

    def __enter__(self) -> LlamaServerTokenizer:
        from lemonade_onebit.backends.executors import resolve_executor
        from lemonade_onebit.backends.llamacpp import CpuLauncher
        from lemonade_onebit.bench.common import Run
        from lemonade_onebit.config import ServeConfig
        from lemonade_onebit.serve.process import free_port

        launcher = CpuLauncher()
        executor = self.executor or resolve_executor(launcher, ServeConfig(model=str(self.source)))
        self._key = secrets.token_urlsafe(24)
        env = {**os.environ, launcher.info.auth_env or "LLAMA_API_KEY": self._key}
        port = free_port()
        argv = [executor, "-m", str(self.source), "--host", "127.0.0.1", "--port", str(port),
                "--device", "none", "--fit", "off", "--no-repack", "--no-warmup", "-c", "256",
                "-np", "1", "--no-webui"]
        fd, log = tempfile.mkstemp(prefix="1bit-tokenize-", suffix=".log")
        os.close(fd)
        self._log = Path(log)
        try:
            self.run = Run(argv, port, self._log, env=env, what="llama-server")
        except OSError as exc:
            self._log.unlink(missing_ok=True)
            raise RunError(f"cannot start {executor}: {exc.strerror or exc}") from None
        try:
            self.run.wait_ready()
        except RunError:
            self._stop(keep_log=True)
            reason = _first_error(self._log)
            if reason is None:
                raise
            raise RunError(f"llama-server cannot load {self.source}: {reason} "
                           f"(log: {self._log})") from None
        except BaseException:
            self._stop(keep_log=False)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stop(self._failed)

    def _stop(self, keep_log: bool) -> None:
        if self.run is not None:
            self.run.stop()
        if not keep_log:
            self._log.unlink(missing_ok=True)

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> Tokens:
        from lemonade_onebit import httpclient

        if self.run is None:
            raise RuntimeError("use LlamaServerTokenizer in a `with` block")
        body = {"content": text, "add_special": add_special, "parse_special": parse_special,
                "with_pieces": True}
        try:
            reply = httpclient.post_json(self.run.url + "/tokenize", body, timeout=self.timeout,
                                         headers={"Authorization": f"Bearer {self._key}"})
            ids, pieces = _tokens_reply(reply)
        except (httpclient.HTTPError, OSError, ValueError, RunError) as exc:
            self._failed = True  # the log stays, for what llama-server said
            raise RunError(f"llama-server /tokenize: {exc} (log: {self._log})") from None
        return Tokens(ids, pieces, self.name, self.source, add_special, parse_special)


def _first_error(log: Path) -> str | None:
    """The first error line of a llama-server log, without its timestamp and level."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"^[\d.]+ E (.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else None


def _tokens_reply(reply) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
    """`{"tokens": [{"id": N, "piece": TEXT | [BYTE, ...]}, ...]}`, checked before it is trusted."""
    tokens = reply.get("tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, list):
        raise RunError("the answer has no `tokens` list")
    ids, pieces = [], []
    for token in tokens:
        ident = token.get("id") if isinstance(token, dict) else None
        piece = token.get("piece") if isinstance(token, dict) else None
        if isinstance(piece, list) and all(type(b) is int and 0 <= b < 256 for b in piece):
            piece = bytes(piece)
        elif isinstance(piece, str):
            piece = piece.encode()
        if type(ident) is not int or ident < 0 or not isinstance(piece, bytes):
            raise RunError(f"a token of the answer is not {{id, piece}}: {str(token)[:80]}")
        ids.append(ident)
        pieces.append(piece)
    return tuple(ids), tuple(pieces)


def tokenizer_for(model: ModelRef) -> FileTokenizer | LlamaServerTokenizer:
    """The tokenizer of a resolved model: its GGUF's (through llama-server) or its folder's
    tokenizer.json; not started until entered."""
    if model.kind == "gguf":
        return LlamaServerTokenizer(model.path)
    if model.kind not in FOLDER_KINDS:
        raise RunError(f"{model.path}: a .{model.kind} file; `1bit tokenize` reads GGUF files and "
                       "folders with a tokenizer.json")
    folder = model.path
    if model.kind == "hf-id":
        from lemonade_onebit.catalog.hubcache import snapshot

        cached = snapshot(model.source)
        if cached is None:
            raise RunError(f"{model.source} is not downloaded: `1bit pull {model.source}`, or "
                           "name a file or folder")
        folder = cached
    path = folder / "tokenizer.json"
    if not path.is_file():
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        hint = f"name its GGUF instead ({folder / ggufs[0]})" if ggufs else \
            "`1bit tokenize` reads a folder's tokenizer.json or a GGUF file"
        raise RunError(f"{folder}: no tokenizer.json; {hint}")
    return FileTokenizer(path)


def tokenize(spec: str, text: str, add_special: bool = True, parse_special: bool = True) -> Tokens:
    """What MODEL (a path, a catalog name or a downloaded HF id) makes of `text`."""
    from lemonade_onebit.catalog.resolve import resolve_model

    with tokenizer_for(resolve_model(spec)) as tokenizer:
        return tokenizer.encode(text, add_special, parse_special)


def tokenize_command(spec: str, text: str, add_special: bool, parse_special: bool,
                     as_json: bool) -> int:
    if text == "-":
        text = sys.stdin.read()
    tokens = tokenize(spec, text, add_special, parse_special)
    if as_json:
        print(json.dumps({"model": spec, **tokens.as_json()}, ensure_ascii=False))
        return 0
    width = max((len(str(i)) for i in tokens.ids), default=1)
    for ident, piece in zip(tokens.ids, tokens.pieces):
        print(f"{ident:>{width}}  {piece_text(piece)}")
    print(f"{len(tokens.ids)} tokens ({tokens.tokenizer}: {tokens.source})")
    return 0
