"""Stand-ins for executors this machine cannot run, each speaking its real binary's protocol.

    executor.py zinc  -m MODEL -p PORT [-c N]                      stands for ZINC's `zinc`
    executor.py ds4   -m MODEL --host H --port P [--ctx N]         stands for `ds4-server`
    executor.py npu   -m DIR --host H --port P [--ctx-size N]      stands for the NPU lane server

zinc answers `/health` and rejects any request body that carries `model` (as ZINC does); ds4-server
has no `/health` and is ready once `/v1/models` answers; the NPU lane answers `/v1/health`. Both answer chat completions, streamed or
not, and report the argv and the environment variables the launcher must set, so tests can check
them end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from aiohttp import web


def main() -> None:
    flavour, rest = sys.argv[1], sys.argv[2:]
    parser = argparse.ArgumentParser(prog=flavour)
    parser.add_argument("-m", required=True)
    if flavour == "zinc":
        parser.add_argument("-p", type=int, required=True)
        parser.add_argument("-c", type=int)
    else:
        parser.add_argument("--host", required=True)
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--ctx-size" if flavour == "npu" else "--ctx", type=int)
    args = parser.parse_args(rest)
    port = args.p if flavour == "zinc" else args.port
    seen = {"argv": sys.argv[1:], "RADV_PERFTEST": os.environ.get("RADV_PERFTEST")}

    def reply(body: dict, content: str, stream: bool):
        base = {"id": "x", "created": int(time.time()), "model": flavour,
                "system_fingerprint": json.dumps(seen)}
        if not stream:
            return web.json_response({**base, "object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        return None

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if flavour == "zinc" and "model" in body:
            return web.json_response(
                {"error": {"message": "unknown field: model", "type": "invalid_request_error",
                           "code": 400}}, status=400)
        words = ["hello", " from", f" {flavour}"]
        plain = reply(body, "".join(words), body.get("stream", False))
        if plain is not None:
            return plain
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for w in words:
            chunk = {"id": "x", "object": "chat.completion.chunk", "model": flavour,
                     "system_fingerprint": json.dumps(seen),
                     "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(_):
        return web.json_response({"object": "list", "data": [{"id": flavour, "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    if flavour == "zinc":
        app.router.add_get("/health", lambda _: web.json_response({"status": "ok"}))
    if flavour == "npu":
        app.router.add_get("/v1/health", lambda _: web.json_response({"status": "ok"}))
    print(f"{flavour} stand-in listening on {port}", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


if __name__ == "__main__":
    main()
