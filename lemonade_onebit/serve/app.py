"""The HTTP front of `1bit serve`: OpenAI routes, llama-server extras, auth, and the relay.

One handler dispatches on (method, path) from a table, so the request path is a dict lookup; bodies
are checked once and forwarded as the client sent them; SSE is relayed chunk by chunk as it arrives.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import time

import aiohttp
from aiohttp import web

from lemonade_onebit.config import ServeConfig
from lemonade_onebit.serve.backend import Backend
from lemonade_onebit.serve.errors import error_event, error_response, not_supported
from lemonade_onebit.serve.laya import ROUTE
from lemonade_onebit.serve.metrics import CONTENT_TYPE, executor_families, render_families, usage_of
from lemonade_onebit.serve.pool import DeviceState, ExecutorPool
from lemonade_onebit.serve.relay import StreamRelay, UpstreamError
from lemonade_onebit.serve.reply import with_model
from lemonade_onebit.serve.supervisor import State

HEALTH_PATHS = frozenset({"/health", "/v1/health"})
MODELS_PATHS = frozenset({"/v1/models", "/models"})

# path -> (upstream path, fields the JSON body must carry, serve option that enables it)
OPENAI_ROUTES: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "/v1/chat/completions": ("/v1/chat/completions", ("messages",), None),
    "/chat/completions": ("/v1/chat/completions", ("messages",), None),
    "/v1/completions": ("/v1/completions", ("prompt",), None),
    "/completions": ("/v1/completions", ("prompt",), None),
    "/v1/embeddings": ("/v1/embeddings", ("input",), "embedding"),
    "/embeddings": ("/v1/embeddings", ("input",), "embedding"),
    "/v1/rerank": ("/v1/rerank", ("query", "documents"), "reranking"),
    "/rerank": ("/v1/rerank", ("query", "documents"), "reranking"),
}
# llama-server's own words for a mode it was not started in, and what a Lemonade user does about it.
NOT_ENABLED = {
    "embedding": "This server does not support embeddings. Start it with `--embeddings` "
                 "(1bit serve --embedding; in Lemonade, a model with the `embeddings` label)",
    "reranking": "This server does not support reranking. Start it with `--reranking` "
                 "(1bit serve --reranking; in Lemonade, a model with the `reranking` label)",
}
REWRITE_MODEL = frozenset({"/v1/chat/completions", "/v1/completions"})

LLAMA_EXTRAS: dict[str, str] = {
    "/v1/responses": "POST",
    "/tokenize": "POST",
    "/detokenize": "POST",
    "/apply-template": "POST",
    "/slots": "GET",
    "/props": "GET",
}
SLOT_ACTION = re.compile(r"^/slots/\d+$")
METRICS_PATH = "/metrics"
# The `path` label of a request: a route's own path, else `other` (any path a client makes up
# would otherwise be a series of its own).
LABELLED_PATHS = frozenset({*HEALTH_PATHS, *MODELS_PATHS, *OPENAI_ROUTES, *LLAMA_EXTRAS,
                            METRICS_PATH})
EXECUTOR_METRICS_TIMEOUT_S = 2.0

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ServeApp:
    def __init__(
        self,
        config: ServeConfig,
        pool: ExecutorPool,
        served_id: str,
        session: aiohttp.ClientSession,
        router=None,
    ) -> None:
        self.config = config
        self.pool = pool  # owns the executors; /health and /v1/models speak for its primary
        self.info = pool.primary.launcher.info
        self.router = router  # a LayaRouter with --laya: picks the backend per conversation
        self.served_id = served_id
        self.session = session
        self.created = int(time.time())
        self._api_key = f"Bearer {config.api_key}".encode() if config.api_key else None
        self.metrics = pool.metrics
        self._executor_metrics_timeout = aiohttp.ClientTimeout(total=EXECUTOR_METRICS_TIMEOUT_S)

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    # -- dispatch -------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """Answer the request and count it by its route and status."""
        started = time.monotonic()
        try:
            resp = await self._dispatch(request, started)
        except asyncio.CancelledError:  # the client left before its reply
            self.metrics.requests.inc(path_label(request.path), 499)
            raise
        except Exception:
            self.metrics.requests.inc(path_label(request.path), 500)
            raise
        self.metrics.requests.inc(path_label(request.path), resp.status)
        return resp

    async def _dispatch(self, request: web.Request, started: float) -> web.StreamResponse:
        path, method = request.path, request.method
        if path in HEALTH_PATHS:
            return self.health() if method in ("GET", "HEAD") else _method_not_allowed(path)
        if self.pool.closing:
            return _shutting_down()
        if self._api_key is not None and not self._authorized(request):
            return error_response(401, "invalid or missing API key", "invalid_api_key")
        if path == METRICS_PATH:
            return await self.metrics_reply() if method in ("GET", "HEAD") else \
                _method_not_allowed(path)
        if path in MODELS_PATHS:
            return self.models() if method == "GET" else _method_not_allowed(path)
        route = OPENAI_ROUTES.get(path)
        primary = self.pool.primary
        if (self.pool.state(primary.device) is DeviceState.RESTARTING
                and self._for_primary(path, route)):
            await self.pool.settle(primary)  # the request waits for the restart, not a 502
        if route is not None:
            if method != "POST":
                return _method_not_allowed(path)
            upstream_path, required, option = route
            if option is not None and not getattr(self.config, option):
                return not_supported(NOT_ENABLED[option])
            resp = await self.openai(request, upstream_path, required, started)
            routed = ROUTE.get()
            if routed is not None and not resp.prepared:  # an error the front made itself
                resp.headers.setdefault("X-1bit-Route", routed)
            return resp
        extra_method = LLAMA_EXTRAS.get(path) or ("POST" if SLOT_ACTION.match(path) else None)
        if extra_method is not None:
            if not self.info.llama_server_api:
                return not_supported(
                    f"{path} is served on llama-server routes only; this model runs on the "
                    f"{self.info.device} route")
            if method != extra_method:
                return _method_not_allowed(path)
            return await self.extra(request)
        return error_response(404, f"no route for {method} {path}", "not_found")

    def _for_primary(self, path: str, route) -> bool:
        """Whether the request goes to the primary's executor (with --laya, chat and completions
        go where the router sends them)."""
        if route is not None:
            return self.router is None or route[0] not in REWRITE_MODEL
        return path in LLAMA_EXTRAS or SLOT_ACTION.match(path) is not None

    def _authorized(self, request: web.Request) -> bool:
        """The key as llama-server takes it: `Authorization`, else `x-api-key`, either with or
        without `Bearer `. A header that is not valid text never matches."""
        given = request.headers.get("Authorization") or request.headers.get("x-api-key") or ""
        if not given.startswith("Bearer "):
            given = "Bearer " + given
        try:
            raw = given.encode()
        except UnicodeEncodeError:  # aiohttp keeps undecodable bytes as lone surrogates
            return False
        return self._api_key is not None and hmac.compare_digest(raw, self._api_key)

    # -- local routes ---------------------------------------------------------------------

    def health(self) -> web.Response:
        """200 `{"status": "ok"}` while the primary serves (Lemonade reads only the status
        code); with --laya, `backends` gives each device's state."""
        primary = self.pool.primary
        state, status = self.pool.state(primary.device), primary.status
        body: dict
        if self.pool.closing:
            body = {"status": "stopping"}
        elif state is DeviceState.READY and status.state is State.READY:
            body = {"status": "ok"}
        elif state is DeviceState.UNUSABLE:
            body = {"status": "error", "message": self.pool.reason(primary.device)}
        elif state is DeviceState.RESTARTING or status.state is State.FAILED:
            body = {"status": "restarting",
                    "message": status.failure or self.pool.reason(primary.device)}
        else:
            body = {"status": "loading"}
        if self.router is not None:
            body["backends"] = self.pool.states()
        return web.json_response(body, status=200 if body["status"] == "ok" else 503)

    def models(self) -> web.Response:
        return web.json_response({
            "object": "list",
            "data": [{
                "id": self.served_id,
                "object": "model",
                "created": self.created,
                "owned_by": "1bit",
                "device": self.info.device,
            }],
        })

    async def metrics_reply(self) -> web.Response:
        """Serve's own metrics, then each ready llama-server's (each sample labelled with its
        device); an executor that does not answer within `EXECUTOR_METRICS_TIMEOUT_S` is left
        out, and serve's own still answer."""
        backends = self.pool.ready_backends()
        texts = await asyncio.gather(*(self._executor_metrics(b) for b in backends
                                       if b.launcher.info.llama_server_api))
        families: dict = {}
        for device, text in texts:
            if text:
                executor_families(text, device, families)
        body = self.metrics.render(self.pool.states()) + render_families(families,
                                                                         self.metrics.names)
        return web.Response(body=body.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def _executor_metrics(self, backend: Backend) -> tuple[str, str | None]:
        try:
            async with self.session.get(backend.base_url + METRICS_PATH, headers=backend.headers,
                                        timeout=self._executor_metrics_timeout) as up:
                if up.status != 200:  # e.g. 501: started without --metrics
                    return backend.device, None
                return backend.device, (await up.read()).decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return backend.device, None

    # -- forwarded routes -----------------------------------------------------------------

    def _not_ready(self, backend: Backend) -> web.Response | None:
        """None when `backend` can take the request, else the reply that says why not."""
        if self.pool.closing:
            return _shutting_down()
        state, status = self.pool.state(backend.device), backend.status
        if state is DeviceState.UNUSABLE:
            return error_response(502, f"executor failed: {self.pool.reason(backend.device)}",
                                  "executor_failed")
        if state is DeviceState.RESTARTING or status.state is State.FAILED:
            why = status.failure or self.pool.reason(backend.device)
            return error_response(503, f"the executor is restarting after it died: {why}",
                                  "executor_restarting")
        if status.state is State.READY:
            return None
        if status.state is State.LOADING:
            return error_response(503, "the model is still loading", "model_loading")
        return error_response(502, f"executor failed: {status.state.value}", "executor_failed")

    async def _read_body(self, request: web.Request) -> bytes | web.Response:
        length = request.content_length
        if length is not None and length > self.config.max_body:
            return _too_large(self.config.max_body)
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(self.config.max_body)
        except web.RequestPayloadError as exc:  # e.g. a Content-Encoding its bytes do not match
            return error_response(400, f"the request body cannot be read: {exc}", "invalid_body")

    async def openai(
        self, request: web.Request, upstream_path: str, required: tuple[str, ...],
        started: float,
    ) -> web.StreamResponse:
        body = await self._read_body(request)
        if isinstance(body, web.Response):
            return body
        try:
            payload = json.loads(body)
        except RecursionError:  # json's own depth guard: nothing on the path of a normal body
            return _too_deep()
        except (ValueError, UnicodeDecodeError):
            return error_response(400, "the request body is not valid JSON", "invalid_json")
        if not isinstance(payload, dict):
            return error_response(400, "the request body must be a JSON object", "invalid_json")
        missing = [f for f in required if f not in payload]
        if missing:
            return error_response(
                400, f"missing required field: {', '.join(missing)}", "missing_field"
            )
        backend, extra_headers = self.pool.primary, {}
        if self.router is not None and upstream_path in REWRITE_MODEL:
            backend, header = await self.router.route(payload)
            extra_headers = {"X-1bit-Route": header}
        busy = self._not_ready(backend)
        if busy is not None:
            return busy
        rewritten = backend.rewrite_body(payload)
        if rewritten is not None:
            try:
                body = json.dumps(rewritten).encode()
            except RecursionError:
                return _too_deep()
        if payload.get("stream") is True:
            resp = await self._relay_stream(request, backend, upstream_path, body, extra_headers,
                                            started)
        else:
            resp = await self._relay(backend, backend.base_url + upstream_path, "POST", body,
                                     rewrite=upstream_path in REWRITE_MODEL, headers=extra_headers)
        if resp.status >= 400 and isinstance(resp, web.Response) and isinstance(resp.body, bytes):
            shaped = backend.launcher.upstream_error(resp.status, resp.body)
            if shaped is not None:
                resp.set_status(shaped[0])
                resp.body = shaped[1]
                resp.content_type = "application/json"
        return resp

    async def extra(self, request: web.Request) -> web.StreamResponse:
        body = b""
        if request.method == "POST":
            read = await self._read_body(request)
            if isinstance(read, web.Response):
                return read
            body = read
        primary = self.pool.primary
        busy = self._not_ready(primary)
        if busy is not None:
            return busy
        url = primary.base_url + request.rel_url.path_qs
        return await self._relay(primary, url, request.method, body, rewrite=False)

    async def _send(self, backend: Backend, method: str, url: str,
                    body: bytes) -> aiohttp.ClientResponse:
        """Send upstream; retry once when a pooled keep-alive connection turns out closed."""
        for attempt in (0, 1):
            try:
                return await self.session.request(
                    method, url, data=body or None, headers=backend.headers
                )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if attempt or isinstance(exc, aiohttp.ClientConnectorError):
                    raise
        raise AssertionError("unreachable")

    async def _relay(self, backend: Backend, url: str, method: str, body: bytes, rewrite: bool,
                     headers: dict | None = None) -> web.Response:
        try:
            up = await self._send(backend, method, url, body)
            try:
                data = await up.read()
            finally:
                up.release()
        except asyncio.TimeoutError:
            return error_response(502, self._silence(), "executor_timeout")
        except aiohttp.ClientError as exc:
            return error_response(502, self._upstream_failure(backend, exc), "executor_failed")
        status, ctype = up.status, up.headers.get("Content-Type", "application/json")
        if rewrite and status == 200:  # a completion: its tokens, then the served id
            self.metrics.tokens(backend.device, usage_of(data))
            data = self._rewrite_model(data)
        return web.Response(status=status, body=data,
                            headers={"Content-Type": ctype, **(headers or {})})

    def _rewrite_model(self, data: bytes) -> bytes:
        return with_model(data, self.served_id)

    async def _relay_stream(
        self, request: web.Request, backend: Backend, upstream_path: str, body: bytes,
        extra_headers: dict, started: float,
    ) -> web.StreamResponse:
        relay = StreamRelay(self._request_bytes(backend, upstream_path, body))
        try:
            await relay.open("127.0.0.1", backend.port)
        except OSError as exc:
            return error_response(502, self._upstream_failure(backend, exc), "executor_failed")
        try:
            try:
                await self._quiet_wait(relay, relay.head)
                if relay.status != 200:
                    relay.collect()
                    await self._quiet_wait(relay, relay.done)
                    ctype = relay.headers.get("content-type", "application/json")
                    return web.Response(status=relay.status, body=relay.collected(),
                                        headers={"Content-Type": ctype, **extra_headers})
            except asyncio.TimeoutError:
                return error_response(502, self._silence(), "executor_timeout")
            except UpstreamError as exc:
                return error_response(502, self._upstream_failure(backend, exc),
                                      "executor_failed")
            resp = web.StreamResponse(status=200, headers={**STREAM_HEADERS, **extra_headers})
            resp.content_type = relay.headers.get("content-type", "text/event-stream").split(";")[0]
            resp.enable_chunked_encoding()
            await resp.prepare(request)  # sends the head now, so raw body bytes follow it
            if request.transport is None or request.transport.is_closing():
                return resp
            relay.forward_to(request.transport)
            try:
                finished = await self._quiet_wait(relay, relay.done)
                failure = None if finished else self._upstream_failure(
                    backend, UpstreamError("the executor closed the stream before its end"))
            except asyncio.TimeoutError:
                failure = self._silence()
            self._record_stream(backend, relay, started, failure is None)
            if failure is not None:
                if not relay.at_chunk_boundary():  # no way to finish a chunk cut in half
                    request.transport.abort()
                    return resp
                await _write_quietly(resp, error_event(failure))
            await _write_eof_quietly(resp)
            return resp
        finally:
            relay.close()

    def _record_stream(self, backend: Backend, relay: StreamRelay, started: float,
                       finished: bool) -> None:
        """A stream's time to first event; once it finished, its tokens and decode rate."""
        if not relay.first_body:
            return
        usage = usage_of(relay.tail()) if finished else None
        self.metrics.stream(backend.device, relay.first_body - started,
                            relay.last_body - relay.first_body, usage)

    @staticmethod
    def _request_bytes(backend: Backend, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{backend.port}\r\n"
            f"Authorization: {backend.headers['Authorization']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode("latin-1") + body

    async def _quiet_wait(self, relay: StreamRelay, waited: asyncio.Future):
        """Wait for `waited` while the executor keeps sending; TimeoutError once it goes silent."""
        limit = self.config.executor_timeout
        closed = self.pool.closed
        assert closed is not None
        while True:
            left = relay.last_data + limit - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({waited, closed}, timeout=left,
                                         return_when=asyncio.FIRST_COMPLETED)
            if waited in done:
                return waited.result()
            if done:  # serve is stopping: the stream ends now, through its failure path
                relay.close()
                return await waited

    def _silence(self) -> str:
        return f"executor sent nothing for {self.config.executor_timeout:g} s"

    def _upstream_failure(self, backend: Backend, exc: BaseException) -> str:
        if self.pool.closing:  # the executor was stopped under the request
            return "serve is shutting down"
        why = backend.supervisor.failure or f"{type(exc).__name__}: {exc}".rstrip(": ")
        return f"executor failed: {why}"


def path_label(path: str) -> str:
    if path in LABELLED_PATHS:
        return path
    return "/slots/{id}" if SLOT_ACTION.match(path) else "other"


def _method_not_allowed(path: str) -> web.Response:
    return error_response(405, f"method not allowed on {path}", "method_not_allowed")


def _too_deep() -> web.Response:
    return error_response(400, "the request body is nested too deeply", "invalid_json")


def _shutting_down() -> web.Response:
    resp = error_response(503, "serve is shutting down", "shutting_down")
    resp.force_close()
    return resp


def _too_large(limit: int) -> web.Response:
    resp = error_response(
        413, f"request body exceeds the {limit // (1024 * 1024)} MiB limit", "body_too_large"
    )
    resp.force_close()
    return resp


async def _write_quietly(resp: web.StreamResponse, data: bytes) -> None:
    try:
        await resp.write(data)
    except ConnectionError:
        pass


async def _write_eof_quietly(resp: web.StreamResponse) -> None:
    try:
        await resp.write_eof()
    except ConnectionError:
        pass
