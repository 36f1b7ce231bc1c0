"""The OpenAI-compatible HTTP API of `twin serve` (Starlette on uvicorn: one event loop, no thread
per stream; the engine runs in its own process, twin.serve.relay relays its events). The two
completion routes are plain ASGI (no Starlette response per chunk): a stream's chunks are byte
templates with only the text filled in, each sent with one `send`. Routes: GET /v1/models and
/v1/models/{id}, POST /v1/chat/completions, POST /v1/completions, GET /health, /ping, /version, POST
/tokenize, /detokenize (vLLM's, on the twin's own tokenizer), GET /metrics, GET /twin/status, POST
/twin/fault. Which request fields change what: docs/reference/openai-fields.md. Errors are OpenAI's shape: {"error": {"message", "type",
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
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from twin.live.actions import FAULTS_PER_MIN
from twin.live.budget import LogBudget, RateLimit
from twin.live.controls import ControlError, fault_command
from twin.live.gate import UNLOCK_PER_MIN, Gate
from twin.serve import prompt, tokens
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
MAX_SEQUENCES = 128            # n x prompts of one request (OpenAI's n is 1-128)
MAX_STOPS = 4                  # stop strings of a request (OpenAI's limit)
MAX_STOP_CHARS = 256           # assumption: characters of one stop string
MAX_STOP_IDS = 64              # assumption: stop_token_ids of one request
MAX_REQUEST_ID = 128           # assumption: characters of an X-Request-Id (visible ASCII)
RANGES = (("temperature", 0, 2), ("top_p", 0, 1), ("presence_penalty", -2, 2),
          ("frequency_penalty", -2, 2))   # OpenAI's API reference; accepted, they change nothing here
LOGPROBS = ("logprobs", "top_logprobs", "prompt_logprobs")
STREAM_OPTIONS = ("include_usage", "continuous_usage_stats")
INLINE_CHARS = 16384           # assumption: a longer prompt is tokenized in a thread (~5 ms and more here)
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
VERSION = "0.1.0"              # assumption: the twin has no releases yet; clients only check that /version answers
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


def _num(body: dict, name: str, lo: float, hi: float) -> None:
    v = body.get(name)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi):
        shown = json.dumps(v)[:60] if isinstance(v, (int, float, str, bool)) else f"a {type(v).__name__}"
        raise ApiError(400, f"{name} = {shown}: allowed a number from {lo} to {hi}", name, "invalid_value")


def _flag(body: dict, name: str) -> bool:
    v = body.get(name, False)
    if not isinstance(v, bool):
        raise ApiError(400, f"{name}: allowed true or false", name, "invalid_value")
    return v


def _stop(body: dict) -> prompt.Stop | None:
    """The request's `stop` (a string or up to MAX_STOPS) and `stop_token_ids`, as where they end
    the filler output (None: they never do, or none was given)."""
    stop, ids = body.get("stop"), body.get("stop_token_ids")
    stop = [stop] if isinstance(stop, str) else stop or []
    if not (isinstance(stop, list) and len(stop) <= MAX_STOPS
            and all(isinstance(x, str) and 0 < len(x) <= MAX_STOP_CHARS for x in stop)):
        raise ApiError(400, f"stop: allowed a string or a list of up to {MAX_STOPS} strings of 1 to "
                       f"{MAX_STOP_CHARS} characters", "stop", "invalid_value")
    ids = ids or []
    vocab = tokens.vocab_size()
    if not (isinstance(ids, list) and len(ids) <= MAX_STOP_IDS and all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < vocab for x in ids)):
        raise ApiError(400, f"stop_token_ids: allowed a list of up to {MAX_STOP_IDS} token ids from 0 to {vocab - 1}",
                       "stop_token_ids", "invalid_value")
    return prompt.Stop.find(stop, ids)


@dataclass
class Ask:
    """A completion request, checked."""
    texts: list                    # the prompts (a chat request's one text)
    n: int                         # sequences per prompt
    max_tokens: int | None
    stream: bool
    usage: bool                    # a usage chunk at the end of the stream
    continuous: bool               # usage in every chunk too
    salt: str | None
    stop: prompt.Stop | None
    echo: bool
    timing: bool

    def text(self, start: int, k: int) -> str:
        return self.stop.text(start, k) if self.stop else prompt.filler(start, k)

    def finish(self, s: Stream) -> tuple[str, str | int | None]:
        """finish_reason and vLLM's stop_reason of a stream that has ended."""
        if self.stop and s.made >= self.stop.tokens:
            return "stop", self.stop.reason
        return ("length" if self.max_tokens is not None else "stop"), None


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
        routes = [Route("/v1/models", self.models), Route("/v1/models/{model:path}", self.model),
                  Route("/health", self.health), Route("/ping", self.health, methods=["GET", "POST"]),
                  Route("/version", self.version), Route("/tokenize", self.tokenize, methods=["POST"]),
                  Route("/detokenize", self.detokenize, methods=["POST"]), Route("/metrics", self.prometheus),
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
    def _card(self) -> dict:
        lt = self.live
        return {"id": lt.model, "object": "model", "created": lt.created, "owned_by": "cloudmatrix-twin",
                "root": lt.model, "parent": None, "max_model_len": lt.max_model_len}

    async def models(self, request: Request):
        return JSONResponse({"object": "list", "data": [self._card()]})

    async def model(self, request: Request):
        name = request.path_params["model"]
        if name != self.live.model:
            return ApiError(404, f"The model `{name[:100]}` does not exist; this twin serves `{self.live.model}`",
                            "model", "model_not_found").response()
        return JSONResponse(self._card())

    async def health(self, request: Request):
        """vLLM's: 200 and an empty body while the engine serves, 503 while it (re)starts."""
        return Response(status_code=200 if self.live.ready else 503)

    async def version(self, request: Request):
        return JSONResponse({"version": VERSION})

    async def tokenize(self, request: Request):
        """vLLM's /tokenize on the twin's own tokenizer: {"prompt": text} or {"messages": [...]}
        (the chat text the twin counts), -> {"count", "max_model_len", "tokens", "token_strs"}."""
        try:
            body = await self._tokenizer_body(request)
            chat = "messages" in body
            if not chat and not isinstance(body.get("prompt"), str):
                raise ApiError(400, "prompt: required, a string (or messages: a list of {role, content})", "prompt")
            _flag(body, "add_special_tokens")
            ids = await _ids(self._messages(body["messages"]) if chat else body["prompt"])
            strs = [tokens.tokenizer().id_to_token(i) for i in ids] if _flag(body, "return_token_strs") else None
            return JSONResponse({"count": len(ids), "max_model_len": self.live.max_model_len, "tokens": ids,
                                 "token_strs": strs})
        except ApiError as e:
            return e.response()

    async def detokenize(self, request: Request):
        """vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text}."""
        try:
            body = await self._tokenizer_body(request)
            ids, vocab, limit = body.get("tokens"), tokens.vocab_size(), self.live.max_model_len
            if not (isinstance(ids, list) and len(ids) <= limit and all(
                    isinstance(x, int) and not isinstance(x, bool) and 0 <= x < vocab for x in ids)):
                raise ApiError(400, f"tokens: required, a list of up to {limit} token ids from 0 to {vocab - 1}",
                               "tokens", "invalid_value")
            return JSONResponse({"prompt": tokens.decode(ids)})
        except ApiError as e:
            return e.response()

    async def _tokenizer_body(self, request: Request) -> dict:
        addr = request.client.host if request.client else "?"
        if self.rate.wait_s(addr):
            raise ApiError(429, f"over {REQUESTS_PER_S_ADDRESS} requests a second from this address",
                           code="rate_limit_exceeded", kind="rate_limit_error")
        body = await self._body(request)
        model = body.get("model")
        if model is not None and model != self.live.model:
            raise ApiError(404, f"The model `{str(model)[:100]}` does not exist; this twin serves `{self.live.model}`",
                           "model", "model_not_found")
        return body

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

    def _parse(self, body: dict, chat: bool) -> Ask:
        model = body.get("model")
        if model is not None and (not isinstance(model, str) or not model):
            raise ApiError(400, "model: allowed a string (GET /v1/models lists it), or none for the served one",
                           "model", "invalid_value")
        if model is not None and model != self.live.model:
            raise ApiError(404, f"The model `{model[:100]}` does not exist; this twin serves `{self.live.model}`",
                           "model", "model_not_found")
        if chat:
            texts = [self._messages(body.get("messages"))]
        else:
            p = body.get("prompt")
            texts = [p] if isinstance(p, str) else p
            if not (isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
                raise ApiError(400, "prompt: required, a string or a non-empty list of strings", "prompt")
        for name, lo, hi in RANGES:
            _num(body, name, lo, hi)
        n = _int(body, "n", 1, MAX_SEQUENCES) or 1
        if n * len(texts) > MAX_SEQUENCES:
            raise ApiError(400, f"n x prompts = {n * len(texts)}: allowed at most {MAX_SEQUENCES} sequences a request",
                           "n", "invalid_value")
        for name in LOGPROBS:
            if body.get(name) not in (None, False):
                raise ApiError(400, f"{name}: not supported (the twin's filler text has no probabilities); "
                               "allowed null or false", name, "unsupported_parameter")
        mt = _int(body, "max_completion_tokens", 1, MAX_OUTPUT_TOKENS)
        if mt is None:
            mt = _int(body, "max_tokens", 1, MAX_OUTPUT_TOKENS)
        stream = _flag(body, "stream")
        opts = body.get("stream_options")
        if opts is not None:
            if not stream:
                raise ApiError(400, "stream_options: allowed only when stream is true", "stream_options")
            if not isinstance(opts, dict) or not all(isinstance(opts.get(k, False), bool) for k in STREAM_OPTIONS):
                raise ApiError(400, "stream_options: allowed {\"include_usage\": true|false, "
                               "\"continuous_usage_stats\": true|false}", "stream_options")
        opts = opts or {}
        salt = body.get("cache_salt")
        if salt is not None and not (isinstance(salt, str) and 0 < len(salt) <= MAX_SALT):
            raise ApiError(400, f"cache_salt: allowed a string of 1 to {MAX_SALT} characters", "cache_salt",
                           "invalid_value")
        return Ask(texts, n, mt, stream, bool(opts.get("include_usage")),
                   bool(opts.get("include_usage") and opts.get("continuous_usage_stats")), salt,
                   _stop(body), not chat and _flag(body, "echo"), body.get("twin_timing") is True)

    def _messages(self, msgs) -> str:
        if not isinstance(msgs, list) or not msgs:
            raise ApiError(400, "messages: required, a non-empty list of {role, content}", "messages")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                raise ApiError(400, f"messages[{i}].role: allowed one of {list(ROLES)}", f"messages[{i}].role")
        return "".join(f"{m['role']}: {_content(m, i)}\n" for i, m in enumerate(msgs))

    def _context(self, n: int, asked: int | None, chat: bool) -> None:
        """400 context_length_exceeded (before any work) if a prompt of n tokens and max_tokens do
        not fit the model's context (vLLM's check, its message)."""
        limit = self.live.max_model_len
        if n + (asked or 1) > limit:
            where = "messages" if chat else "prompt"
            raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                           f"{n + (asked or 1)} tokens ({n} in the {where}, {asked or 1} in the completion). Please "
                           f"reduce the length of the {where} or completion.", where, "context_length_exceeded")

    def _hold(self, addr: str, k: int = 1) -> None:
        """k more open sequences from `addr`: 429 past its share, 503 past everyone's."""
        if self.open_by[addr] + k > self.max_open_address:
            raise ApiError(429, f"{MAX_OPEN_PER_ADDRESS} requests are open from this address, the most one address "
                           "may hold; wait for some to finish", code="too_many_open_requests", kind="rate_limit_error")
        if self.open + k > self.max_open:
            raise ApiError(503, f"{MAX_OPEN} requests are open, the most this server holds; retry later",
                           code="server_overloaded", kind="server_error")
        self.open += k
        self.open_by[addr] += k

    def _release(self, addr: str, k: int = 1) -> None:
        self.open -= k
        n = self.open_by[addr] - k
        if n > 0:
            self.open_by[addr] = n
        else:
            del self.open_by[addr]

    async def _complete(self, request: Request, send, chat: bool) -> None:
        received = self.live.now()      # the request's arrival: its body's reading and parsing count in its TTFT
        addr = request.client.host if request.client else "?"
        reply = lambda e: e.response()(request.scope, request.receive, send)   # noqa: E731
        try:
            if not self.live.ready:
                raise ApiError(503, "the twin's engine is starting; retry in a moment", code="engine_restarting",
                               kind="server_error")
            if self.rate.wait_s(addr):
                raise ApiError(429, f"over {REQUESTS_PER_S_ADDRESS} requests a second from this address",
                               code="rate_limit_exceeded", kind="rate_limit_error")
            self._hold(addr)
        except ApiError as e:
            return await reply(e)
        gone, held = None, 1
        try:
            try:
                rid = ("chatcmpl-" if chat else "cmpl-") + _request_id(request)
                ask = self._parse(await self._body(request), chat)
                self._hold(addr, len(ask.texts) * ask.n - 1)
                held = len(ask.texts) * ask.n
                ids = [await _ids(t) for t in ask.texts]
                counts = [prompt.count(i) for i in ids]
                for c in counts:
                    self._context(c, ask.max_tokens, chat)
            except ApiError as e:
                return await reply(e)
            except ClientDisconnect:
                return
            # without max_tokens the engine process draws the output from the scenario's distribution;
            # a stop the filler meets ends it there at most
            out, cap = ask.max_tokens, ask.stop.tokens if ask.stop else None
            if out is not None and cap is not None:
                out, cap = min(out, cap), None
            scope = _scope(request, ask.salt)
            streams = [Stream(counts[p], out, prompt.block_ids(ids[p], self.live.block_size, scope), keep=ask.timing,
                              cap=cap) for p in range(len(ids)) for _ in range(ask.n)]
            gone = asyncio.ensure_future(_disconnected(request.receive))
            await asyncio.sleep(0)          # (one step of `gone`: a client already gone is never submitted)
            if gone.done():
                return
            for s in streams:               # n of a prompt share its prefix blocks: the first one's prefill
                self.live.submit(s, received)   # stores them, the others hit them in the same batch
            decided = asyncio.ensure_future(asyncio.gather(*(s.decision() for s in streams)))
            if await _first(decided, gone):
                return self._abort(streams)
            refused = next((d for d in decided.result() if d != "admitted"), None)
            if refused is not None:
                self._abort(streams)
                status, code, kind, msg = REJECTED[refused]
                return await reply(ApiError(status, msg, code=code, kind=kind))
            if ask.stream:
                return await self._sse(streams, ask, send, rid, chat, counts, gone)
            texts = asyncio.ensure_future(asyncio.gather(*(_collect(s, ask) for s in streams)))
            if await _first(texts, gone):
                return self._abort(streams)
        finally:
            if gone is not None:
                gone.cancel()
            self._release(addr, held)
        end = next((s.end for s in streams if s.end in REJECTED), None)
        if end is not None:
            status, code, kind, msg = REJECTED[end]
            return await reply(ApiError(status, msg, code=code, kind=kind))
        choices = []
        for i, (s, text) in enumerate(zip(streams, texts.result())):
            reason, why = ask.finish(s)
            choices.append({"index": i, "message": {"role": "assistant", "content": text}, "logprobs": None,
                            "finish_reason": reason, "stop_reason": why} if chat else
                           {"index": i, "text": ask.texts[i // ask.n] + text if ask.echo else text,
                            "logprobs": None, "finish_reason": reason, "stop_reason": why})
        doc = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
               "model": self.live.model, "choices": choices, "usage": _usage(streams, counts, ask.n, self.live.block_size)}
        if ask.timing:
            doc["twin_timing"] = _timing(streams)
        await JSONResponse(doc, headers={"x-request-id": rid.split("-", 1)[1]})(request.scope, request.receive, send)

    def _abort(self, streams: list) -> None:
        for s in streams:
            self.live.abort(s)

    async def _sse(self, streams: list, ask: Ask, send, rid: str, chat: bool, counts: list, gone) -> None:
        """The streams as server-sent events: one `send` of pre-built bytes per wake-up. If the client
        goes (`gone`), or a write fails, the engine aborts the requests at once."""
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.live.model}
        base = _event(head)[:-3] + ',"choices":[{"index":%d,'      # 'data: {...' without its closing '}\n\n'
        choices = []
        for i, s in enumerate(streams):
            pre = base % i
            if chat:
                first = pre + '"delta":{"role":"assistant","content":"'
                pre, post = pre + '"delta":{"content":"', '"},"logprobs":null,"finish_reason":null}]'
            else:
                pre = pre + '"text":"'
                first = pre + json.dumps(ask.texts[i // ask.n])[1:-1] if ask.echo else pre
                post = '","logprobs":null,"finish_reason":null}]'
            choices.append(_Choice(s, first.encode(), pre.encode(), post.encode()))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*SSE_HEADERS, (b"x-request-id", rid.split("-", 1)[1].encode())]})
        writer = _Writer(choices, send, ask.text, sum(counts) if ask.continuous else None)
        if await _first(writer.done, gone) or writer.done.exception() is not None:
            return self._abort(streams)          # (nobody reads a tail)
        end = next((s.end for s in streams if s.end in REJECTED), None)
        if end is not None:
            code, kind, msg = REJECTED[end][1:]
            tail = [{"error": {"message": msg, "type": kind, "param": None, "code": code}}]
        else:
            tail = []
            for i, s in enumerate(streams):
                reason, why = ask.finish(s)
                last = {"index": i, "delta": {}} if chat else {"index": i, "text": ""}
                tail.append({**head, "choices": [{**last, "logprobs": None, "finish_reason": reason,
                                                  "stop_reason": why}]})
            if ask.timing:
                tail[-1]["twin_timing"] = _timing(streams)
            if ask.usage:
                tail.append({**head, "choices": [], "usage": _usage(streams, counts, ask.n, self.live.block_size)})
        await send({"type": "http.response.body", "more_body": False,
                    "body": "".join(map(_event, tail)).encode() + b"data: [DONE]\n\n"})


def _request_id(request: Request) -> str:
    """The client's X-Request-Id (vLLM's: the request's id, echoed), or a new one; 400 if it is not
    1 to MAX_REQUEST_ID visible ASCII characters."""
    got = request.headers.get("x-request-id")
    if got is None:
        return secrets.token_hex(12)
    if not (0 < len(got) <= MAX_REQUEST_ID and all("!" <= c <= "~" for c in got)):
        raise ApiError(400, f"X-Request-Id: allowed 1 to {MAX_REQUEST_ID} visible ASCII characters",
                       "X-Request-Id", "invalid_value")
    return got


async def _ids(text: str) -> list[int]:
    """A text's token ids; a long one's in a thread (the tokenizer lets go of the GIL: ~3 s a MB here)."""
    return prompt.ids(text) if len(text) < INLINE_CHARS else await asyncio.to_thread(prompt.ids, text)


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


async def _collect(s: Stream, ask: Ask) -> str:
    return "".join([ask.text(first, k) async for due in s.chunks() for k, first in due])


def _scope(request: Request, salt: str | None) -> bytes:
    """Whose prefix cache a request may hit: its `cache_salt`'s (vLLM's field: clients that share a
    salt share their cached prefixes), else its API key's from its address only, so that
    `cached_tokens` never tells one client what another sent."""
    if salt is not None:
        return b"salt\0" + salt.encode()
    host = request.client.host if request.client else "?"
    return b"key\0" + request.headers.get("authorization", "").encode() + b"\0" + host.encode()


@dataclass(eq=False)
class _Choice:
    """One sequence of a stream and its chunk templates: `first` (the first chunk's start: the role,
    or the echoed prompt), `pre` and `post` around each chunk's text."""
    s: Stream
    first: bytes | None
    pre: bytes
    post: bytes


class _Writer:
    """Writes a response's chunks from the relay's own callback, with no task switch per chunk: each
    stream calls `wake` when it has a chunk, which builds the bytes (pre-built templates, only the
    filler text filled in; all chunks due at once in one write) and steps the ASGI `send` coroutine
    by hand. It finishes at once unless the connection's writing is paused (a slow client): then it
    goes on when the transport says so, and chunks wait meanwhile. `done` is set once every stream
    has ended and everything is written (or holds what `send` raised). With `prompt_tokens` (the
    request's, `continuous_usage_stats`) each chunk carries the usage so far."""

    def __init__(self, choices: list, send, text, prompt_tokens: int | None = None):
        self.choices, self.send, self.text, self.prompt_tokens = choices, send, text, prompt_tokens
        self.busy = False
        self.done = asyncio.get_running_loop().create_future()
        for c in choices:
            c.s.sink = self.wake
        self.wake()                       # what came before the response started

    def _end(self) -> bytes:
        if self.prompt_tokens is None:
            return b"}\n\n"
        p, made = self.prompt_tokens, sum(c.s.made for c in self.choices)
        return f',"usage":{{"prompt_tokens":{p},"completion_tokens":{made},"total_tokens":{p + made}}}}}\n\n'.encode()

    def wake(self) -> None:
        if self.busy or self.done.done():
            return
        parts = []
        for c in self.choices:
            for k, start in c.s.take():   # filler words need no JSON escaping
                text = self.text(start, k)
                if text or c.first:       # (past a stop's cut: nothing to send)
                    parts += (c.first or c.pre, text.encode(), c.post, self._end())
                    c.first = None
        if not parts:
            if all(c.s.end for c in self.choices):
                self.done.set_result(None)
            return
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


def _usage(streams: list, counts: list, n: int, block: int) -> dict:
    """vLLM's usage: each prompt counted once, every sequence's output; the cached tokens of each
    prompt's first sequence, whole blocks only (the engine's hits stop one token short of a prompt)."""
    made = sum(s.made for s in streams)
    cached = sum(s.prefill[2] // block * block if s.prefill else 0 for s in streams[::n])
    return {"prompt_tokens": sum(counts), "completion_tokens": made, "total_tokens": sum(counts) + made,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _timing(streams: list) -> dict | list:
    """The twin's own times of this request (sim seconds): for comparing with a client's (a list,
    one a sequence, when there are several)."""
    out = [{"arrival_s": s.arrival, "chunk_times_s": s.times, "chunk_tokens": s.counts, "worker": WORKER.decode(),
            "cached_tokens": s.prefill[2] if s.prefill else 0} for s in streams]
    return out[0] if len(out) == 1 else out


def build_app(scenario: str = "default", seed: int | None = None, background: bool = False, **kw) -> ServeApp:
    return ServeApp(LiveTwin(scenario, seed=seed, background=background, **kw))
