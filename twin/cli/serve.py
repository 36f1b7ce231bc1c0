"""`python -m twin serve` (the API on uvicorn) and `python -m twin serve-replay` (the outside client)."""
from __future__ import annotations

from twin.cli.args import name, number

DEFAULT_PORT = 8060


def cmd_serve(a) -> int:
    import logging

    from twin.serve import guard
    from twin.serve.api import build_app
    from twin.serve.engine_proc import LEAD_S
    logging.basicConfig(level=logging.INFO)
    lead = a.lead if a.lead is not None else LEAD_S
    if a.workers > 1:
        from twin.serve.workers import supervise
        print(f"twin serve: scenario {a.scenario}{' with its own traffic' if a.background else ''} on "
              f"http://{a.host}:{a.port}/v1 ({a.workers} HTTP worker processes, one engine process)", flush=True)
        return supervise(a.scenario, a.seed, a.background, lead, a.host, a.port, a.workers, a.loop)
    srv = build_app(a.scenario, seed=a.seed, background=a.background, lead_s=lead)
    print(f"twin serve: scenario {a.scenario}{' with its own traffic' if a.background else ''} "
          f"on http://{a.host}:{a.port}/v1 (the engine starts in its own process)", flush=True)
    # uvloop and httptools: the cheapest loop and HTTP parser uvicorn offers (one chunk per decode step
    # per stream is ~40,000 writes a second at 1,000 streams)
    guard.Server(guard.config(srv.app, host=a.host, port=a.port, loop=a.loop), srv.live).run()
    return 0


def cmd_replay(a) -> int:
    from twin.serve.replay import main
    return main(a)


def add_serve_commands(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible API and Prometheus /metrics backed by a live twin")
    s.add_argument("--scenario", type=name("a scenario name (python -m twin run --help)"), default="default")
    s.add_argument("--seed", type=number(0, 2**32 - 1, integer=True), default=None)
    s.add_argument("--background", action="store_true",
                   help="also run the scenario's own traffic (default: served requests only)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=number(1, 65535, integer=True), default=DEFAULT_PORT)
    s.add_argument("--lead", type=number(0, 1), default=None,
                   help="seconds the engine runs ahead of the wall clock, so each token is known before "
                        "its time (0..1; default 0.03)")
    s.add_argument("--workers", type=number(1, 16, integer=True), default=1,
                   help="HTTP worker processes sharing the port (1..16; default 1: one process relays every "
                        "stream); the engine stays one process")
    s.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="the event loop (default uvloop)")
    s.set_defaults(fn=cmd_serve)

    r = sub.add_parser("serve-replay", help="replay a Mooncake trace against `twin serve` (openai SDK or aiohttp); "
                       "client TTFT/ITL next to the twin's")
    r.add_argument("--base-url", default=f"http://127.0.0.1:{DEFAULT_PORT}/v1")
    r.add_argument("--trace", type=name("a Mooncake JSONL path or a shipped trace name"), default="mooncake_conversation",
                   help="a Mooncake JSONL path, or a shipped trace name (default mooncake_conversation, vendored in twin/traces)")
    r.add_argument("--requests", type=number(1, 100_000, integer=True), default=200)
    r.add_argument("--concurrency", type=number(1, 5000, integer=True), default=100,
                   help="streams open at once (each request starts as soon as one ends)")
    r.add_argument("--max-tokens", type=number(1, 32768, integer=True), default=None,
                   help="cap each request's output (default: the trace's output_length)")
    r.add_argument("--max-input", type=number(1, 131072, integer=True), default=16384,
                   help="cap each prompt, in tokens (default 16384)")
    r.add_argument("--client", choices=("sdk", "aiohttp", "raw"), default="sdk",
                   help="the official openai SDK (default), aiohttp reading the SSE lines (less CPU a chunk), or "
                        "raw: the project's own bare asyncio client (least CPU a chunk)")
    r.add_argument("--procs", type=number(1, 64, integer=True), default=1,
                   help="client processes the streams are split over (default 1)")
    r.add_argument("--nice", type=number(-20, 19, integer=True), default=0,
                   help="run the client processes at this niceness (-20..19; below 0 needs root)")
    r.set_defaults(fn=cmd_replay)
