"""The OpenAI-compatible HTTP API of `twin serve` (Starlette on uvicorn: one event loop, no thread
per stream; the engine runs in its own process, twin.serve.relay relays its events). The two
completion routes are plain ASGI (no Starlette response per chunk): a stream's chunks are byte
templates with only the text filled in, each sent with one `send`. Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /metrics,
GET /twin/status, POST /twin/fault. Errors are OpenAI's shape: {"error": {"message", "type",
"param", "code"}}. Budgets (docs/serve.md): body size, open requests, requests per second per address.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from twin.live.actions import FAULTS_PER_MIN
from twin.live.budget import RateLimit
from twin.live.controls import ControlError, fault_command
from twin.serve import prompt
from twin.serve.relay import LiveTwin, Stream

MAX_BODY_BYTES = 2 << 20       # assumption: a 131,072-token prompt is ~512 KB by the prompt rule; 4x that
MAX_OPEN = 2000                # served requests open at once (each holds a few KB); past it: 503
REQUESTS_PER_S_ADDRESS = 500   # new requests per second per client address (a 1,000-stream ramp in 2 s)
MAX_OUTPUT_TOKENS = 32768      # assumption: max_tokens above this is refused (DeepSeek-R1's 32K generation cap)
TOKEN_ENV = "TWIN_INSTRUCTOR_TOKEN"   # if set, POST /twin/fault needs it as a Bearer token
ROLES = ("system", "developer", "user", "assistant", "tool")
REJECTED = {"kv_too_long": (400, "context_length_exceeded", "invalid_request_error",
                            "the prompt plus max_tokens needs more KV cache than one die of the twin holds"),
            "overloaded": (503, "server_overloaded", "server_error",
                           "the twin is overloaded (requests in flight at its limit); retry later"),
            "engine_lost": (503, "engine_restarting", "server_error",
                            "the twin's engine stopped and is restarting; retry in a moment"),
            "worker_stopping": (503, "server_shutting_down", "server_error",
                                "this HTTP worker of the twin is stopping; retry (another worker takes it)")}
WORKER = str(os.getpid()).encode()     # (a spawned worker imports this module afresh: its own pid)
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-twin-worker", WORKER)]
COMPLETION_PATHS = {"/v1/chat/completions": True, "/v1/completions": False}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def _int(body: dict, name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ApiError(400, f"{name} = {json.dumps(v)[:60]}: allowed an integer from {lo} to {hi}", name,
                       "invalid_value")
    return v


def _content(m, i: int) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                                   for p in c):
        return "".join(p["text"] for p in c)
    if c is None and m.get("role") == "assistant":
        return ""
    raise ApiError(400, f"messages[{i}].content: allowed a string or a list of text parts", f"messages[{i}].content")


class ServeApp:
    """The app around one LiveTwin; `app` is the ASGI application."""

    def __init__(self, live: LiveTwin, token: str | None = None, workers: int = 1):
        self.live, self.workers = live, workers
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.open = 0
        # the budgets are the server's; each of `workers` processes holds its share (the kernel spreads
        # connections evenly over them: SO_REUSEPORT hashes each connection's addresses and ports)
        self.max_open = MAX_OPEN // workers
        self.rate = RateLimit(max(REQUESTS_PER_S_ADDRESS // workers, 1), per_s=1.0)
        self.fault_rate = RateLimit(FAULTS_PER_MIN)
        routes = [Route("/v1/models", self.models), Route("/metrics", self.prometheus),
                  Route("/twin/status", self.status), Route("/twin/fault", self.fault, methods=["POST"])]
        self.starlette = Starlette(routes=routes, lifespan=self._lifespan,
                                   exception_handlers={404: self._not_found, 405: self._not_allowed})

        async def app(scope, receive, send):      # a function, so that uvicorn sees ASGI 3
            await self._asgi(scope, receive, send)
        self.app = app

    async def _asgi(self, scope, receive, send):
        """The ASGI application: the completion routes here, the rest through Starlette."""
        chat = COMPLETION_PATHS.get(scope.get("path")) if scope["type"] == "http" else None
        if chat is None:
            return await self.starlette(scope, receive, send)
        if scope["method"] != "POST":
            return await ApiError(405, f"{scope['method']} not allowed on {scope['path']}",
                                  code="method_not_allowed").response()(scope, receive, send)
        await self._complete(Request(scope, receive), send, chat)

    @asynccontextmanager
    async def _lifespan(self, app):
        import asyncio
        self.live.start(asyncio.get_running_loop())
        try:
            await self.live.wait_ready()
            yield
        finally:
            self.live.stop()

    async def _not_found(self, request, exc):
        return ApiError(404, f"no route {request.url.path}", code="not_found").response()

    async def _not_allowed(self, request, exc):
        return ApiError(405, f"{request.method} not allowed on {request.url.path}", code="method_not_allowed").response()

    # ---- plain routes ------------------------------------------------------------------------
    async def models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": self.live.model, "object": "model",
                                                         "created": 0, "owned_by": "cloudmatrix-twin"}]})

    async def prometheus(self, request: Request):
        text = await self.live.metrics()         # the engine process's: every worker's series in one
        if isinstance(text, dict):
            return ApiError(503, text["error"], code="engine_restarting", kind="server_error").response()
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8",
                        headers={"x-twin-worker": WORKER.decode()})

    async def status(self, request: Request):
        lt = self.live
        return JSONResponse({"model": lt.model, "sim_time": round(lt.gauges.get("sim_time", 0.0), 3),
                             "pace": round(lt.achieved(), 4), "open_requests": self.open,
                             "engine_open": lt.gauges.get("open", 0),     # every worker's (2 s old at most)
                             "events_late": lt.late,
                             "lead_s": lt.lead_s, "step_s": lt.step_s, "engine_ready": lt.ready,
                             "engine_pid": lt.engine_pid if lt.ready else None, "worker_pid": os.getpid(),
                             "workers": self.workers,
                             "engine_restarts": lt.restarts, **lt.delays_ms(),
                             "wall0": lt.wall0,     # CLOCK_MONOTONIC at sim time 0 (a client on this machine can align)
                             "engine_behind_ms": {k: float(v) for k, v in lt.gauges.get("behind_ms", {}).items()}})

    async def fault(self, request: Request):
        try:
            if self.token is not None:
                got = request.headers.get("authorization", "")
                if not secrets.compare_digest(got.encode(), f"Bearer {self.token}".encode()):
                    raise ApiError(401, "POST /twin/fault needs the instructor token as 'Authorization: Bearer ...'",
                                   code="invalid_api_key", kind="authentication_error")
            if self.fault_rate.wait_s("faults"):
                raise ApiError(429, f"at most {FAULTS_PER_MIN} faults a minute", code="rate_limit_exceeded",
                               kind="rate_limit_error")
            spec = await self._body(request)
            try:             # checked once, here; the engine decides what the moment does (no at_s: its present)
                cmd = fault_command(spec, self.live.model)
            except ControlError as exc:
                raise ApiError(400, str(exc)) from None
            answer = await self.live.fault(cmd)         # the engine process's ticket, as a dict
            if "error" in answer:
                raise ApiError(503, answer["error"])
            if answer["state"] == "refused":
                raise ApiError(409, f"fault refused: {answer['reason']}", code="refused")
            return JSONResponse({"accepted": cmd.spec, "ticket": answer})
        except ApiError as e:
            return e.response()

    # ---- completions -------------------------------------------------------------------------
    async def _body(self, request: Request) -> dict:
        if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
        raw = b""
        async for part in request.stream():
            raw += part
            if len(raw) > MAX_BODY_BYTES:
                raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
        try:
            body = json.loads(raw)
        except ValueError:
            raise ApiError(400, "the body is not valid JSON", code="invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        return body

    def _parse(self, body: dict, chat: bool) -> tuple[str, int | None, bool, bool]:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "model: required, a string (GET /v1/models lists it)", "model", "missing_model")
        if model != self.live.model:
            raise ApiError(404, f"The model `{model[:100]}` does not exist; this twin serves `{self.live.model}`",
                           "model", "model_not_found")
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise ApiError(400, "messages: required, a non-empty list of {role, content}", "messages")
            for i, m in enumerate(msgs):
                if not isinstance(m, dict) or m.get("role") not in ROLES:
                    raise ApiError(400, f"messages[{i}].role: allowed one of {list(ROLES)}", f"messages[{i}].role")
            text = "".join(f"{m['role']}: {_content(m, i)}\n" for i, m in enumerate(msgs))
        else:
            p = body.get("prompt")
            if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
                p = p[0]
            if not isinstance(p, str):
                raise ApiError(400, "prompt: required, a string (one prompt per request)", "prompt")
            text = p
        if body.get("n", 1) != 1:
            raise ApiError(400, "n: only 1 is supported", "n", "invalid_value")
        mt = _int(body, "max_completion_tokens", 1, MAX_OUTPUT_TOKENS)
        if mt is None:
            mt = _int(body, "max_tokens", 1, MAX_OUTPUT_TOKENS)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "stream: allowed true or false", "stream")
        opts = body.get("stream_options")
        if opts is not None:
            if not stream:
                raise ApiError(400, "stream_options: allowed only when stream is true", "stream_options")
            if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
                raise ApiError(400, "stream_options: allowed {\"include_usage\": true|false}", "stream_options")
        usage = bool(opts and opts.get("include_usage"))
        return text, mt, stream, usage

    async def _complete(self, request: Request, send, chat: bool) -> None:
        received = self.live.now()      # the request's arrival: its body's reading and parsing count in its TTFT
        addr = request.client.host if request.client else "?"
        try:
            if not self.live.ready:
                raise ApiError(503, "the twin's engine is starting; retry in a moment", code="engine_restarting",
                               kind="server_error")
            if self.rate.wait_s(addr):
                raise ApiError(429, f"over {REQUESTS_PER_S_ADDRESS} requests a second from this address",
                               code="rate_limit_exceeded", kind="rate_limit_error")
            if self.open >= self.max_open:
                raise ApiError(503, f"{MAX_OPEN} requests are open, the most this server holds; retry later",
                               code="server_overloaded", kind="server_error")
            body = await self._body(request)
            text, asked, streaming, usage = self._parse(body, chat)
            # without max_tokens the engine process draws the output from the scenario's distribution
            s = Stream(prompt.tokens(text), asked, prompt.block_ids(text, self.live.block_size))
            s.finish_reason = "length" if asked is not None else "stop"
            self.open += 1
            self.live.submit(s, received)
            try:
                verdict = await s.decision()
            except BaseException:
                self.open -= 1
                raise
            if verdict != "admitted":
                self.open -= 1
                status, code, kind, msg = REJECTED[verdict]
                raise ApiError(status, msg, code=code, kind=kind)
        except ApiError as e:
            return await e.response()(request.scope, request.receive, send)
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        timing = body.get("twin_timing") is True
        if streaming:
            return await self._sse(s, send, rid, chat, usage, timing)
        try:
            text_out = "".join([prompt.filler(first, k) async for due in s.due() for k, first in due])
        finally:
            self.open -= 1
        if s.end in REJECTED:
            status, code, kind, msg = REJECTED[s.end]
            return await ApiError(status, msg, code=code, kind=kind).response()(request.scope, request.receive, send)
        reason = s.finish_reason
        choice = ({"index": 0, "message": {"role": "assistant", "content": text_out}, "finish_reason": reason}
                  if chat else {"index": 0, "text": text_out, "finish_reason": reason, "logprobs": None})
        doc = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
               "model": self.live.model, "choices": [choice], "usage": _usage(s)}
        if timing:
            doc["twin_timing"] = _timing(s)
        await JSONResponse(doc)(request.scope, request.receive, send)

    async def _sse(self, s: Stream, send, rid: str, chat: bool, usage: bool, timing: bool) -> None:
        """The stream as server-sent events: one `send` of pre-built bytes per chunk."""
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.live.model}
        pre = _event(head)[:-3] + ',"choices":[{"index":0,'      # 'data: {...' without its closing '}\n\n'
        if chat:
            first_pre, pre = (pre + '"delta":{"role":"assistant","content":"').encode(), (pre + '"delta":{"content":"').encode()
            post = b'"},"finish_reason":null}]}\n\n'
        else:
            pre = first_pre = (pre + '"text":"').encode()
            post = b'","finish_reason":null,"logprobs":null}]}\n\n'
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            writer = _Writer(s, send, first_pre, pre, post)
            await writer.done                  # the relay's callbacks write the chunks (_Writer)
            if s.end in REJECTED:
                code, kind, msg = REJECTED[s.end][1:]
                tail = [{"error": {"message": msg, "type": kind, "param": None, "code": code}}]
            else:
                last = ({"index": 0, "delta": {}, "finish_reason": s.finish_reason} if chat
                        else {"index": 0, "text": "", "finish_reason": s.finish_reason, "logprobs": None})
                tail = [{**head, "choices": [last]}]
                if timing:
                    tail[0]["twin_timing"] = _timing(s)
                if usage:
                    tail.append({**head, "choices": [], "usage": _usage(s)})
            await send({"type": "http.response.body", "more_body": False,
                        "body": "".join(map(_event, tail)).encode() + b"data: [DONE]\n\n"})
        finally:
            self.open -= 1


class _Writer:
    """Writes a stream's chunks from the relay's own callback, with no task switch per chunk: the
    stream calls `wake` when it has a chunk, which builds the bytes (pre-built templates, only the
    filler text filled in; all chunks due at once in one write) and steps the ASGI `send` coroutine
    by hand. It finishes at once unless the connection's writing is paused (a slow client): then it
    goes on when the transport says so, and chunks wait meanwhile. `done` is set once the stream has
    ended and everything is written (or holds what `send` raised)."""

    def __init__(self, s: Stream, send, first_pre: bytes, pre: bytes, post: bytes):
        self.s, self.send, self.pre, self.post, self.first_pre = s, send, pre, post, first_pre
        self.busy = False
        self.done = asyncio.get_running_loop().create_future()
        s.sink = self.wake
        self.wake()                       # what came before the response started

    def wake(self) -> None:
        if self.busy or self.done.done():
            return
        due = self.s.take()
        if not due:
            if self.s.end:
                self.done.set_result(None)
            return
        parts = []
        for k, start in due:              # filler words need no JSON escaping
            parts += (self.first_pre or self.pre, prompt.filler(start, k).encode(), self.post)
            self.first_pre = None
        self.busy = True
        self._step(self.send({"type": "http.response.body", "body": b"".join(parts), "more_body": True}))

    def _step(self, coro) -> None:
        try:
            waiting = coro.send(None)
        except StopIteration:
            self.busy = False
            self.wake()                   # what came meanwhile, or the end
        except BaseException as exc:      # (the client went away: the stream's coroutine ends with it)
            self.busy = False
            if not self.done.done():
                self.done.set_exception(exc)
        else:                             # paused: a future to wait for, as a task would
            if waiting is None:
                asyncio.get_running_loop().call_soon(self._step, coro)
            else:
                waiting._asyncio_future_blocking = False
                waiting.add_done_callback(lambda _: self._step(coro))


def _event(doc: dict) -> str:
    return f"data: {json.dumps(doc, separators=(',', ':'))}\n\n"


def _usage(s: Stream) -> dict:
    made = s.counts[-1] if s.counts else 0
    cached = s.prefill[2] if s.prefill else 0
    return {"prompt_tokens": s.input_tokens, "completion_tokens": made, "total_tokens": s.input_tokens + made,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _timing(s: Stream) -> dict:
    """The twin's own times of this request (sim seconds): for comparing with a client's."""
    return {"arrival_s": s.arrival, "chunk_times_s": s.times, "chunk_tokens": s.counts, "worker": os.getpid()}


def build_app(scenario: str = "default", seed: int | None = None, background: bool = False, **kw) -> ServeApp:
    return ServeApp(LiveTwin(scenario, seed=seed, background=background, **kw))
