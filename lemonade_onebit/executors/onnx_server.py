"""`onebit-onnx-server`: an OpenAI-compatible server over ONNX Runtime GenAI.

It plays the role `ryzenai-server` plays upstream, with its command line (`-m DIR --port P
[--ctx-size N]`), for machines where that binary is absent. One generation runs at a time; others
wait their turn in arrival order. Generation runs in a worker thread and hands each piece of text to
the event loop as it is decoded, so streams flow token by token and `/health` stays fast.

With `$ONEBIT_ONNX_API_KEY` set, every route but `/health` answers only to `Authorization: Bearer
<key>` (llama-server's `LLAMA_API_KEY` rule): serve sets a per-run key, so its private port answers
only to serve. A client that leaves stops its generation at the next token, queued or running.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

API_KEY_ENV = "ONEBIT_ONNX_API_KEY"
OPEN_PATHS = frozenset({"/health"})  # what answers without the key: serve's readiness probe
STREAM_WINDOW = 32  # pieces a stream's generation may run ahead of its writes


@dataclass
class Job:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    stop: list[str]
    ignore_eos: bool = False  # llama-server's extension: always generate max_tokens
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass
class Result:
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str = "length"
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0


class Engine:
    """The loaded model and the one generation loop that uses it."""

    def __init__(self, folder: Path, ctx_size: int | None) -> None:
        import onnxruntime_genai as og

        self.og = og
        self.model = og.Model(str(folder))
        self.tokenizer = og.Tokenizer(self.model)
        config = json.loads((folder / "genai_config.json").read_text())
        self.ctx = ctx_size or config.get("model", {}).get("context_length", 2048)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """The folder's own chat template (tokenizer_config.json or chat_template.jinja)."""
        text = self.tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
        return list(self.tokenizer.encode(text))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def generate(self, job: Job, emit) -> Result:
        """Run one job, calling `emit(text)` for each new piece of text that is safe to send."""
        og = self.og
        result = Result()
        budget = min(job.max_tokens, self.ctx - len(job.prompt_ids))
        if budget <= 0:
            raise ValueError(f"the prompt ({len(job.prompt_ids)} tokens) fills the context "
                             f"({self.ctx}); it exceeds the available context size")
        params = og.GeneratorParams(self.model)
        greedy = job.temperature <= 0
        options: dict[str, float] = {"max_length": len(job.prompt_ids) + budget,
                                     "do_sample": not greedy}
        if job.ignore_eos:
            options["min_length"] = options["max_length"]
        if not greedy:
            options.update(temperature=job.temperature, top_p=job.top_p)
        params.set_search_options(**options)
        generator = og.Generator(self.model, params)
        stream = self.tokenizer.create_stream()
        start = time.perf_counter()
        generator.append_tokens(job.prompt_ids)
        result.prompt_ms = (time.perf_counter() - start) * 1000
        held = ""  # text that might be the start of a stop sequence
        decode_start = time.perf_counter()
        while not generator.is_done() and not job.cancelled.is_set():
            generator.generate_next_token()
            token = generator.get_next_tokens()[0]
            result.completion_tokens += 1
            held += stream.decode(token)
            cut = _find_stop(held, job.stop)
            if cut is not None:
                held = held[:cut]
                result.finish_reason = "stop"
                break
            safe = len(held) - _partial_stop(held, job.stop)
            if safe:
                emit(held[:safe])
                result.text += held[:safe]
                held = held[safe:]
        else:
            if generator.is_done() and result.completion_tokens < budget:
                result.finish_reason = "stop"
        if held:
            emit(held)
            result.text += held
        result.predicted_ms = (time.perf_counter() - decode_start) * 1000
        return result


def _find_stop(text: str, stops: list[str]) -> int | None:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def _partial_stop(text: str, stops: list[str]) -> int:
    """How many trailing characters of `text` could begin a stop sequence."""
    longest = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:n]):
                longest = n
                break
    return longest


def _error(status: int, message: str, code: str) -> web.Response:
    kind = ("authentication_error" if status == 401 else
            "invalid_request_error" if status < 500 else "server_error")
    return web.json_response({"error": {"message": message, "type": kind, "code": code}},
                             status=status)


def _say(message: str) -> None:
    print(f"onebit-onnx-server: {message}", flush=True)


def key_guard(key: str):
    """A middleware refusing every route but OPEN_PATHS without `Authorization: Bearer <key>`.
    The header is compared as bytes (`surrogatepass` encodes any header text, even one aiohttp
    decoded from invalid UTF-8), in constant time."""
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        if request.path not in OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogatepass")
            if not hmac.compare_digest(given, expected):
                return _error(401, "invalid or missing API key", "invalid_api_key")
        return await handler(request)

    return guard


class OnnxServer:
    def __init__(self, folder: Path, ctx_size: int | None, served_id: str) -> None:
        self.folder = folder
        self.ctx_size = ctx_size
        self.served_id = served_id
        self.engine: Engine | None = None
        self.failure: str | None = None
        self.turn = asyncio.Lock()  # one generation at a time, waiters served in order

    def app(self, api_key: str | None = None) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024,
                              middlewares=[key_guard(api_key)] if api_key else [])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        return app

    async def load(self) -> None:
        try:
            self.engine = await asyncio.to_thread(Engine, self.folder, self.ctx_size)
        except Exception as exc:  # noqa: BLE001 - reported through /health and the log
            self.failure = f"cannot load {self.folder}: {exc}"
            print(f"onebit-onnx-server: error: {self.failure}", flush=True)
            os._exit(1)  # nothing to serve: exit at once so the supervisor reports the line
        print(f"onebit-onnx-server: loaded {self.folder}", flush=True)

    async def health(self, _: web.Request) -> web.Response:
        if self.engine is None:
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ok"})

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.served_id, "object": "model", "owned_by": "onnxruntime-genai"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if self.engine is None:
            return _error(503, "the model is still loading", "model_loading")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not valid JSON", "invalid_json")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object", "invalid_json")
        try:
            job = self._job(body, chat)
        except (KeyError, TypeError, ValueError) as exc:
            return _error(400, f"bad request: {exc}", "invalid_request")
        kind = "chat.completion" if chat else "text_completion"
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        if body.get("stream"):
            return await self._stream(request, job, chat, kind, rid, created,
                                      bool((body.get("stream_options") or {}).get("include_usage")))
        await self._take_turn()
        work = None
        try:
            work = asyncio.get_running_loop().run_in_executor(
                None, self.engine.generate, job, lambda _: None)
            result = await asyncio.shield(work)
        except asyncio.CancelledError:  # the client left (aiohttp cancels its handler)
            await self._stop(job, work)
            raise
        except ValueError as exc:
            return _error(400, str(exc), "context_length_exceeded")
        except Exception as exc:  # noqa: BLE001 - the runtime's own failure, in OpenAI shape
            return _error(500, f"generation failed: {exc}", "generation_failed")
        finally:
            job.cancelled.set()
            self.turn.release()
        choice = ({"index": 0, "message": {"role": "assistant", "content": result.text},
                   "finish_reason": result.finish_reason} if chat else
                  {"index": 0, "text": result.text, "finish_reason": result.finish_reason})
        return web.json_response({
            "id": rid, "object": kind, "created": created, "model": self.served_id,
            "choices": [choice], "usage": _usage(job, result), "timings": _timings(job, result),
        })

    def _job(self, body: dict, chat: bool) -> Job:
        assert self.engine is not None
        if chat:
            messages = body["messages"]
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
            ids = self.engine.encode_chat(messages)
        else:
            prompt = body["prompt"]
            if not isinstance(prompt, str):
                raise ValueError("prompt must be a string")
            ids = self.engine.encode(prompt)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 256
        return Job(ids, int(max_tokens), float(body.get("temperature", 0.8)),
                   float(body.get("top_p", 0.95)), stop, bool(body.get("ignore_eos", False)))

    async def _take_turn(self) -> None:
        """Wait for the one generation slot, in arrival order; a client that leaves while
        queued gives up its place."""
        try:
            await self.turn.acquire()
        except asyncio.CancelledError:
            _say("request cancelled: the client left while queued")
            raise

    async def _stop(self, job: Job, work: asyncio.Future[Result] | None, wake=None) -> None:
        """End the generation of a client that left at its next token, and hold the turn until
        the worker thread is out of the model, so two generations never run at once. `wake`
        frees a worker that waits for room in its stream's window."""
        job.cancelled.set()
        if wake is not None:
            wake()
        interrupted = False  # aiohttp cancels the handler once more when the connection goes
        while work is not None and not work.done():
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                interrupted = True
            except Exception:  # noqa: BLE001 - its outcome is nobody's now
                break
        tokens = 0
        if work is not None and not work.cancelled() and work.exception() is None:
            tokens = work.result().completion_tokens
        _say(f"request cancelled: the client left; generation stopped after {tokens} tokens")
        if interrupted:
            raise asyncio.CancelledError

    async def _stream(self, request, job, chat, kind, rid, created, include_usage):
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})

        def event(payload: dict) -> bytes:
            return b"data: " + json.dumps(payload).encode() + b"\n\n"

        def chunk(delta_or_text, finish=None) -> dict:
            choice = ({"index": 0, "delta": delta_or_text, "finish_reason": finish} if chat else
                      {"index": 0, "text": delta_or_text, "finish_reason": finish})
            return {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created,
                    "model": self.served_id, "choices": [choice]}

        # The generation runs at most STREAM_WINDOW pieces ahead of what the client was sent:
        # a client that stops reading stops it, and one that leaves is seen within the window.
        window = threading.Semaphore(STREAM_WINDOW)

        def emit(text: str) -> None:
            if not job.cancelled.is_set():  # once cancelled, nobody frees room any more
                window.acquire()
                loop.call_soon_threadsafe(pieces.put_nowait, text)

        await self._take_turn()
        work = None
        try:
            try:
                await resp.prepare(request)  # the 200 goes out when this request's turn comes
                work = loop.run_in_executor(None, self.engine.generate, job, emit)
                work.add_done_callback(
                    lambda _: loop.call_soon_threadsafe(pieces.put_nowait, None))
                if chat:
                    await resp.write(event(chunk({"role": "assistant", "content": ""})))
                while (text := await pieces.get()) is not None:
                    await resp.write(event(chunk({"content": text} if chat else text)))
                    window.release()
                try:
                    result = await work
                except Exception as exc:  # noqa: BLE001 - reported as one error event
                    code = ("context_length_exceeded" if isinstance(exc, ValueError)
                            else "generation_failed")
                    await resp.write(event({"error": {"message": str(exc),
                                                      "type": "server_error", "code": code}}))
                    await resp.write_eof()
                    return resp
                last = chunk({} if chat else "", result.finish_reason)
                last["timings"] = _timings(job, result)
                await resp.write(event(last))
                if include_usage:
                    await resp.write(event({"id": rid, "object": kind + ".chunk",
                                            "created": created, "model": self.served_id,
                                            "choices": [], "usage": _usage(job, result)}))
                await resp.write(b"data: [DONE]\n\n")
                await resp.write_eof()
            except ConnectionError:  # the client left: a write found the connection gone
                await self._stop(job, work, wake=window.release)
            except asyncio.CancelledError:  # the client left (aiohttp cancels its handler)
                await self._stop(job, work, wake=window.release)
                raise
        finally:
            job.cancelled.set()
            window.release()  # a worker waiting for room wakes, sees the cancel and ends
            self.turn.release()
        return resp


def _usage(job: Job, result: Result) -> dict:
    return {"prompt_tokens": len(job.prompt_ids), "completion_tokens": result.completion_tokens,
            "total_tokens": len(job.prompt_ids) + result.completion_tokens}


def _timings(job: Job, result: Result) -> dict:
    n, ms = result.completion_tokens, result.predicted_ms
    return {"prompt_n": len(job.prompt_ids), "prompt_ms": result.prompt_ms,
            "prompt_per_second": len(job.prompt_ids) / (result.prompt_ms / 1000)
            if result.prompt_ms else 0.0,
            "predicted_n": n, "predicted_ms": ms,
            "predicted_per_second": n / (ms / 1000) if ms else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onebit-onnx-server", description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", required=True, help="folder with genai_config.json")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ctx-size", type=int)
    parser.add_argument("--alias")
    args = parser.parse_args(argv)
    folder = Path(args.model)
    if not (folder / "genai_config.json").is_file():
        print(f"onebit-onnx-server: error: {folder} has no genai_config.json", flush=True)
        return 1
    server = OnnxServer(folder, args.ctx_size, args.alias or folder.resolve().name)

    async def start(app: web.Application) -> None:
        app["load"] = asyncio.ensure_future(server.load())

    app = server.app(os.environ.get(API_KEY_ENV) or None)
    app.on_startup.append(start)
    # handler_cancellation: a client that leaves cancels its handler, which stops its generation.
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None,
                handler_cancellation=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
