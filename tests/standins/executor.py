"""Stand-ins for executors this machine cannot run, each speaking its real binary's protocol.

    executor.py zinc  -m MODEL -p PORT [-c N]                      stands for ZINC's `zinc`
    executor.py ds4   -m MODEL --host H --port P [--ctx N]         stands for `ds4-server`
    executor.py npu   -m DIR --host H --port P [--ctx-size N]      stands for the NPU lane server
    executor.py llama-server -m MODEL --host H --port P [...]      stands for `llama-server`

zinc answers `/health` and rejects any request body that carries `model` (as ZINC does); ds4-server
has no `/health` and is ready once `/v1/models` answers; the NPU lane answers `/v1/health`;
llama-server answers `/health`, takes its other flags, and wants `$LLAMA_API_KEY` when it is set.
All answer chat completions, streamed or not, and report the argv and the environment variables
the launcher must set, so tests can check them end to end.

Misbehaviours real executors have, for serve's lifecycle tests, by environment variable:
`STANDIN_GRANDCHILD=1` starts a process in its own session that keeps the output pipe open (as a
helper daemon would) and prints `grandchild PID`; `STANDIN_EXIT=N` then exits with code N before
listening, its error line followed by informational lines as llama-server's are;
`STANDIN_EXIT_IF=PATH` does so with code 1 when PATH exists (an executor that cannot come back);
`STANDIN_IGNORE_TERM=1` ignores SIGTERM; `STANDIN_DIE_ON_REQUEST=1` logs a slot line and SIGKILLs
itself on a chat request (as the OOM killer would); `STANDIN_STREAM_FOREVER=1` sends a stream's
first event and then nothing, never ending it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time


def misbehave() -> None:
    """What `STANDIN_*` asks for, before the stand-in listens."""
    if os.environ.get("STANDIN_GRANDCHILD") == "1":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        print(f"grandchild {child.pid}", flush=True)
    code = os.environ.get("STANDIN_EXIT")
    marker = os.environ.get("STANDIN_EXIT_IF")
    if marker and os.path.exists(marker):
        code = "1"
    if code:
        print("error: the stand-in fails on purpose", flush=True)
        print("srv    operator(): operator(): cleaning up before exit...", flush=True)
        print("main: server is listening on http://127.0.0.1:0 - starting the main loop",
              flush=True)
        sys.exit(int(code))
    if os.environ.get("STANDIN_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main() -> None:
    flavour, rest = sys.argv[1], sys.argv[2:]
    print(f"{flavour} stand-in starting", flush=True)
    misbehave()
    from aiohttp import web

    parser = argparse.ArgumentParser(prog=flavour)
    parser.add_argument("-m", required=True)
    if flavour == "zinc":
        parser.add_argument("-p", type=int, required=True)
        parser.add_argument("-c", type=int)
    else:
        parser.add_argument("--host", required=True)
        parser.add_argument("--port", type=int, required=True)
        if flavour != "llama-server":
            parser.add_argument("--ctx-size" if flavour == "npu" else "--ctx", type=int)
    args, unknown = parser.parse_known_args(rest)
    if unknown and flavour != "llama-server":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    key = os.environ.get("LLAMA_API_KEY") if flavour == "llama-server" else None
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
        if key and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": {"message": "Invalid API Key",
                                                 "type": "authentication_error", "code": 401}},
                                     status=401)
        body = await request.json()
        if flavour == "zinc" and "model" in body:
            return web.json_response(
                {"error": {"message": "unknown field: model", "type": "invalid_request_error",
                           "code": 400}}, status=400)
        if os.environ.get("STANDIN_DIE_ON_REQUEST") == "1":
            print("slot launch_slot_: id  0 | task 0 | processing task", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
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
            if os.environ.get("STANDIN_STREAM_FOREVER") == "1":
                await asyncio.Event().wait()
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(_):
        return web.json_response({"object": "list", "data": [{"id": flavour, "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    if flavour in ("zinc", "llama-server"):
        app.router.add_get("/health", lambda _: web.json_response({"status": "ok"}))
    if flavour == "npu":
        app.router.add_get("/v1/health", lambda _: web.json_response({"status": "ok"}))
    print(f"{flavour} stand-in listening on {port}", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None,
                handle_signals=os.environ.get("STANDIN_IGNORE_TERM") != "1")


if __name__ == "__main__":
    main()
