"""The OpenAI-compatible HTTP API of `twin serve` (Starlette on uvicorn: one event loop, no thread
per stream; the engine runs in its own process, twin.serve.relay relays its events). The two
completion routes are plain ASGI (no Starlette response per chunk): a stream's chunks are byte
templates with only the text filled in, each sent with one `send`. Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /metrics,
GET /twin/status, POST /twin/fault. Errors are OpenAI's shape: {"error": {"message", "type",
"param", "code"}}. Budgets (docs/serve.md, docs/reference/budgets.md): a context limit per model
(`max_model_len`) and the body size it implies, open requests in all and per address, requests
per second per address; connections are budgeted below the app (twin.serve.guard). A client that
goes away has its request aborted in the engine at once. Nothing internal reaches an answer: an
unexpected failure is a 500 in OpenAI's shape and one rate-limited log line, never a traceback.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from collections import Counter
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from twin.live.actions import FAULTS_PER_MIN
from twin.live.budget import LogBudget, RateLimit
from twin.live.controls import ControlError, fault_command
from twin.live.gate import UNLOCK_PER_MIN, Gate
from twin.serve import prompt
from twin.serve.http_metrics import HttpMetrics
from twin.serve.relay import LiveTwin, Stream

JSON_BYTES_PER_TEXT_BYTE = 2   # assumption: JSON escaping at most doubles a prompt's text (heavier escaping: 413)
BODY_SLACK = 64 << 10          # the rest of a body (messages' roles, options), bytes
MAX_OPEN = 2000                # served requests open at once (each holds a few KB); past it: 503
MAX_OPEN_PER_ADDRESS = 500     # ... from one client address; past it: 429, well before MAX_OPEN
REQUESTS_PER_S_ADDRESS = 500   # new requests per second per client address (a 1,000-stream ramp in 2 s)
MAX_OUTPUT_TOKENS = 32768      # assumption: max_tokens above this is refused (DeepSeek-R1's 32K generation cap)
BODY_S = 30.0                  # assumption: a request's body (1 MB at most) arrives within this, or 408
MAX_SALT = 256                 # characters of a cache_salt
LOG_LINES_PER_MIN = 20         # log lines a minute for failed requests; the rest are counted
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
WORKER = secrets.token_hex(4).encode()   # this process's opaque id (a spawned worker imports this module afresh)
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-twin-worker", WORKER)]
COMPLETION_PATHS = {"/v1/chat/completions": True, "/v1/completions": False}
LOOPBACK = ("127.0.0.1", "::1")
log = logging.getLogger("twin.serve")


def max_body_bytes(max_model_len: int) -> int:
    """The body cap a context limit implies: its longest prompt's text by the prompt rule, as JSON."""
    return max_model_len * prompt.BYTES_PER_TOKEN * JSON_BYTES_PER_TEXT_BYTE + BODY_SLACK


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
        shown = json.dumps(v)[:60] if isinstance(v, (int, float, str, bool)) else f"a {type(v).__name__}"
        raise ApiError(400, f"{name} = {shown}: allowed an integer from {lo} to {hi}", name, "invalid_value")
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
        self.gate = Gate(token if token is not None else os.environ.get(TOKEN_ENV) or None)
        self.open = 0
        self.open_by: Counter = Counter()      # open requests per client address
        # the budgets are the server's; each of `workers` processes holds its share (the kernel spreads
        # connections evenly over them: SO_REUSEPORT hashes each connection's addresses and ports)
        self.max_open = MAX_OPEN // workers
        self.max_open_address = max(MAX_OPEN_PER_ADDRESS // workers, 1)
        self.rate = RateLimit(max(REQUESTS_PER_S_ADDRESS // workers, 1), per_s=1.0)
        self.fault_rate = RateLimit(FAULTS_PER_MIN)
        self._log = LogBudget(log, LOG_LINES_PER_MIN)
        routes = [Route("/v1/models", self.models), Route("/metrics", self.prometheus),
                  Route("/twin/status", self.status), Route("/twin/fault", self.fault, methods=["POST"])]
        self.starlette = Starlette(routes=routes, lifespan=self._lifespan,
                                   exception_handlers={404: self._not_found, 405: self._not_allowed})

        async def app(scope, receive, send):      # a function, so that uvicorn sees ASGI 3
            await self._asgi(scope, receive, send)
        self.app = HttpMetrics(app, self.starlette.routes, COMPLETION_PATHS, live.http_done)

    async def _asgi(self, scope, receive, send):
        """The ASGI application: the completion routes here, the rest through Starlette; whatever
        fails unexpectedly is a 500 in OpenAI's shape and one rate-limited log line (no traceback)."""
        try:
            chat = COMPLETION_PATHS.get(scope.get("path")) if scope["type"] == "http" else None
            if chat is None:
                return await self.starlette(scope, receive, send)
            if scope["method"] != "POST":
                return await ApiError(405, f"{scope['method']} not allowed on {scope['path']}",
                                      code="method_not_allowed").response()(scope, receive, send)
            await self._complete(Request(scope, receive), send, chat)
        except Exception as exc:            # (asyncio.CancelledError is not one: a stopping server's)
            self._log(logging.WARNING, "twin serve: %s %s failed: %s", scope.get("method"),
                      str(scope.get("path"))[:80], type(exc).__name__)
            try:
                await ApiError(500, "the server failed to answer this request", code="internal_error",
                               kind="server_error").response()(scope, receive, send)
            except Exception:               # the response had started: the connection just ends
                pass

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
        return JSONResponse({"object": "list", "data": [{"id": self.live.model, "object": "model", "created": 0,
                                                         "owned_by": "cloudmatrix-twin",
                                                         "max_model_len": self.live.max_model_len}]})

    async def prometheus(self, request: Request):
        text = await self.live.metrics()         # the engine process's: every worker's series in one
        if isinstance(text, dict):
            return ApiError(503, text["error"], code="engine_restarting", kind="server_error").response()
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8",
                        headers={"x-twin-worker": WORKER.decode()})

    async def status(self, request: Request):
        """The twin's state; process ids and host clocks never (`wall0`, the engine's clock at sim
        time 0, only to a client on this machine, which shares that clock: serve-replay aligns with it)."""
        lt = self.live
        doc = {"model": lt.model, "max_model_len": lt.max_model_len,
               "sim_time": round(lt.gauges.get("sim_time", 0.0), 3),
               "pace": round(lt.achieved(), 4), "open_requests": self.open,
               "engine_open": lt.gauges.get("open", 0),     # every worker's (2 s old at most)
               "events_late": lt.late,
               "lead_s": lt.lead_s, "step_s": lt.step_s, "engine_ready": lt.ready,
               "engine": lt.engine_id if lt.ready else None, "worker": WORKER.decode(),
               "workers": self.workers,
               "engine_restarts": lt.restarts, **lt.delays_ms(),
               "engine_behind_ms": {k: float(v) for k, v in lt.gauges.get("behind_ms", {}).items()}}
        if request.client and request.client.host in LOOPBACK:
            doc["wall0"] = lt.wall0
        return JSONResponse(doc)

    async def fault(self, request: Request):
        """A fault for the engine. The body is checked first, with the same answer whatever token
        came with it; only a well-formed fault has its token compared, through the instructor gate
        (twin.live.gate: throttled per address, logged), so a malformed request tells nothing about
        the token."""
        addr = request.client.host if request.client else "?"
        try:
            if self.rate.wait_s(addr):
                raise ApiError(429, f"over {REQUESTS_PER_S_ADDRESS} requests a second from this address",
                               code="rate_limit_exceeded", kind="rate_limit_error")
            spec = await self._body(request, 64 << 10)
            try:             # checked once, here; the engine decides what the moment does (no at_s: its present)
                cmd = fault_command(spec, self.live.model)
            except ControlError as exc:
                raise ApiError(400, str(exc)) from None
            if self.gate.locked:
                got = request.headers.get("authorization", "")
                token = got[7:] if got.startswith("Bearer ") else None
                try:
                    ok = self.gate.unlock(token, f"api:{addr}", addr)
                except ControlError as exc:
                    raise ApiError(429, f"instructor token: {exc}", code="rate_limit_exceeded",
                                   kind="rate_limit_error") from None
                if ok is None:
                    raise ApiError(401, "POST /twin/fault needs the instructor token as 'Authorization: Bearer ...' "
                                   f"(at most {UNLOCK_PER_MIN} tries a minute)", code="invalid_api_key",
                                   kind="authentication_error")
            if self.fault_rate.wait_s("faults"):
                raise ApiError(429, f"at most {FAULTS_PER_MIN} faults a minute", code="rate_limit_exceeded",
                               kind="rate_limit_error")
            answer = await self.live.fault(cmd)         # the engine process's ticket, as a dict
            if "error" in answer:
                raise ApiError(503, answer["error"])
            if answer["state"] == "refused":
                raise ApiError(409, f"fault refused: {answer['reason']}", code="refused")
            return JSONResponse({"accepted": cmd.spec, "ticket": answer})
        except ApiError as e:
            return e.response()

    # ---- completions -------------------------------------------------------------------------
    async def _body(self, request: Request, cap: int | None = None) -> dict:
        """The body as a JSON object: 413 past `cap` bytes (default: what the context limit implies),
        408 if it does not arrive within BODY_S, 400 if it is not JSON (too deeply nested included)."""
        why = "" if cap else f" (the model's context of {self.live.max_model_len} tokens as JSON text)"
        cap = cap or max_body_bytes(self.live.max_model_len)
        too_large = ApiError(413, f"request body over {cap} bytes{why}", code="request_too_large")
        try:
            if int(request.headers.get("content-length") or 0) > cap:
                raise too_large
        except ValueError:
            raise ApiError(400, "content-length: allowed a number of bytes", code="invalid_request") from None
        raw = bytearray()

        async def read():
            async for part in request.stream():
                raw.extend(part)
                if len(raw) > cap:
                    raise too_large
        try:
            await asyncio.wait_for(read(), BODY_S)
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {BODY_S:g} s", code="request_timeout") from None
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise ApiError(400, "the body is not valid JSON (or nests too deeply)", code="invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        return body

    def _parse(self, body: dict, chat: bool) -> tuple[str, int | None, bool, bool, str | None]:
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
        salt = body.get("cache_salt")
        if salt is not None and not (isinstance(salt, str) and 0 < len(salt) <= MAX_SALT):
            raise ApiError(400, f"cache_salt: allowed a string of 1 to {MAX_SALT} characters", "cache_salt",
                           "invalid_value")
        usage = bool(opts and opts.get("include_usage"))
        return text, mt, stream, usage, salt

    def _context(self, text: str, asked: int | None, chat: bool) -> int:
        """The prompt's tokens; 400 context_length_exceeded (before any work) if the prompt and
        max_tokens do not fit the model's context (vLLM's check, its message)."""
        n, limit = prompt.tokens(text), self.live.max_model_len
        if n + (asked or 1) > limit:
            where = "messages" if chat else "prompt"
            raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                           f"{n + (asked or 1)} tokens ({n} in the {where}, {asked or 1} in the completion). Please "
                           f"reduce the length of the {where} or completion.", where, "context_length_exceeded")
        return n

    def _hold(self, addr: str) -> None:
        """One more open request from `addr`: 429 past its share, 503 past everyone's."""
        if self.open_by[addr] >= self.max_open_address:
            raise ApiError(429, f"{MAX_OPEN_PER_ADDRESS} requests are open from this address, the most one address "
                           "may hold; wait for some to finish", code="too_many_open_requests", kind="rate_limit_error")
        if self.open >= self.max_open:
            raise ApiError(503, f"{MAX_OPEN} requests are open, the most this server holds; retry later",
                           code="server_overloaded", kind="server_error")
        self.open += 1
        self.open_by[addr] += 1

    def _release(self, addr: str) -> None:
        self.open -= 1
        n = self.open_by[addr] - 1
        if n > 0:
            self.open_by[addr] = n
        else:
            del self.open_by[addr]

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
            self._hold(addr)
        except ApiError as e:
            return await e.response()(request.scope, request.receive, send)
        gone = None
        try:
            try:
                body = await self._body(request)
                text, asked, streaming, usage, salt = self._parse(body, chat)
                n = self._context(text, asked, chat)
            except ApiError as e:
                return await e.response()(request.scope, request.receive, send)
            except ClientDisconnect:
                return
            # without max_tokens the engine process draws the output from the scenario's distribution
            timing = body.get("twin_timing") is True
            s = Stream(n, asked, prompt.block_ids(text, self.live.block_size, _scope(request, salt)), keep=timing)
            s.finish_reason = "length" if asked is not None else "stop"
            gone = asyncio.ensure_future(_disconnected(request.receive))
            await asyncio.sleep(0)          # (one step of `gone`: a client already gone is never submitted)
            if gone.done():
                return
            self.live.submit(s, received)
            decided = asyncio.ensure_future(s.decision())
            if await _first(decided, gone):
                return self.live.abort(s)
            if decided.result() != "admitted":
                status, code, kind, msg = REJECTED[decided.result()]
                return await ApiError(status, msg, code=code, kind=kind).response()(request.scope, request.receive, send)
            rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
            if streaming:
                return await self._sse(s, send, rid, chat, usage, timing, gone)
            text_out = asyncio.ensure_future(_collect(s))
            if await _first(text_out, gone):
                return self.live.abort(s)
        finally:
            if gone is not None:
                gone.cancel()
            self._release(addr)
        if s.end in REJECTED:
            status, code, kind, msg = REJECTED[s.end]
            return await ApiError(status, msg, code=code, kind=kind).response()(request.scope, request.receive, send)
        reason = s.finish_reason
        choice = ({"index": 0, "message": {"role": "assistant", "content": text_out.result()}, "finish_reason": reason}
                  if chat else {"index": 0, "text": text_out.result(), "finish_reason": reason, "logprobs": None})
        doc = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
               "model": self.live.model, "choices": [choice], "usage": _usage(s)}
        if timing:
            doc["twin_timing"] = _timing(s)
        await JSONResponse(doc)(request.scope, request.receive, send)

    async def _sse(self, s: Stream, send, rid: str, chat: bool, usage: bool, timing: bool, gone) -> None:
        """The stream as server-sent events: one `send` of pre-built bytes per chunk. If the client
        goes (`gone`), or a write fails, the engine aborts the request at once."""
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.live.model}
        pre = _event(head)[:-3] + ',"choices":[{"index":0,'      # 'data: {...' without its closing '}\n\n'
        if chat:
            first_pre, pre = (pre + '"delta":{"role":"assistant","content":"').encode(), (pre + '"delta":{"content":"').encode()
            post = b'"},"finish_reason":null}]}\n\n'
        else:
            pre = first_pre = (pre + '"text":"').encode()
            post = b'","finish_reason":null,"logprobs":null}]}\n\n'
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        writer = _Writer(s, send, first_pre, pre, post)
        if await _first(writer.done, gone) or writer.done.exception() is not None:
            return self.live.abort(s)          # (nobody reads a tail)
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


async def _disconnected(receive) -> None:
    """Returns when the client has gone (the request's body already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _first(work: asyncio.Future, gone: asyncio.Future) -> bool:
    """Wait for `work` or the client's going; True if the client went first."""
    await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        return False
    work.cancel()
    return True


async def _collect(s: Stream) -> str:
    return "".join([prompt.filler(first, k) async for due in s.chunks() for k, first in due])


def _scope(request: Request, salt: str | None) -> bytes:
    """Whose prefix cache a request may hit: its `cache_salt`'s (vLLM's field: clients that share a
    salt share their cached prefixes), else its API key's from its address only, so that
    `cached_tokens` never tells one client what another sent."""
    if salt is not None:
        return b"salt\0" + salt.encode()
    host = request.client.host if request.client else "?"
    return b"key\0" + request.headers.get("authorization", "").encode() + b"\0" + host.encode()


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
    made = s.made
    cached = s.prefill[2] if s.prefill else 0
    return {"prompt_tokens": s.input_tokens, "completion_tokens": made, "total_tokens": s.input_tokens + made,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _timing(s: Stream) -> dict:
    """The twin's own times of this request (sim seconds): for comparing with a client's."""
    return {"arrival_s": s.arrival, "chunk_times_s": s.times, "chunk_tokens": s.counts, "worker": WORKER.decode()}


def build_app(scenario: str = "default", seed: int | None = None, background: bool = False, **kw) -> ServeApp:
    return ServeApp(LiveTwin(scenario, seed=seed, background=background, **kw))
