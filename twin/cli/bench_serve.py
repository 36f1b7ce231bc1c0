"""`python -m twin.cli.bench_serve` (`make bench-serve`): AIPerf and GuideLLM against a local
`twin serve`, each client's figures next to the twin's own.

The tools run from environments of their own (`make bench-serve` installs them under .bench/, never
into the project's venv) with the shipped Hugging Face tokenizer (twin/serve/tokenizer/) and the Hub
pointed at a closed port (NO_HUB), so a run that finishes used no network. At each concurrency in
turn: synthetic prompts of INPUT_TOKENS, outputs of OUTPUT_TOKENS, REQUESTS_PER_STREAM requests a
stream. The twin's side comes from its /metrics, read before and after each run and every SAMPLE_S
during it: TTFT (the mean of `vllm:time_to_first_token_seconds`), ITL per token (the mean of
`vllm:request_time_per_output_token_seconds`: a request's decode time over its tokens after the first,
both tools' definition of inter-token latency), output throughput (`vllm:generation_tokens_total` over
the twin's sim time from the last sample before its first token to the last that saw one) and the
prompt and output tokens it counted, which must equal the client's (the exit status says if not).
Prints each pair and the client/twin ratio, with the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "twin" / "serve" / "tokenizer"       # the shipped tokenizer (twin/serve/tokenizer/)
BENCH = ROOT / ".bench"
NO_HUB = "http://127.0.0.1:9"   # the discard port, closed here: any Hugging Face download fails at once
INPUT_TOKENS = 512      # assumption: a short chat turn's prompt
OUTPUT_TOKENS = 200     # assumption: long enough for a stream's ITL to dominate its TTFT
REQUESTS_PER_STREAM = 3  # assumption: enough for a steady state, short enough to run three loads in minutes
SAMPLE_S = 0.2          # assumption: the twin's tokens are sampled this often (throughput: +-SAMPLE_S each end)
START_S = 240           # `twin serve` builds its engine within this
SERIES = ("vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 30) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except OSError:
        return None


def twin_state(base: str) -> dict | None:
    """The few series the comparison reads: (sum, count) of the two histograms, tokens, sim time
    (None if /metrics did not answer within _get's timeout: a sample is skipped, never the run)."""
    body = _get(base + "/metrics")
    if body is None:
        return None
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    value = lambda fam, name: sum(s.value for s in fams[fam].samples if s.name == name)   # noqa: E731
    out = {n: (value(n, n + "_sum"), value(n, n + "_count")) for n in SERIES}
    out["tokens"] = value("vllm:generation_tokens", "vllm:generation_tokens_total")
    out["prompt_tokens"] = value("vllm:prompt_tokens", "vllm:prompt_tokens_total")
    out["sim_time"] = value("twin:sim_time_seconds", "twin:sim_time_seconds")
    return out


def twin_side(before: dict, after: dict, samples: list) -> dict:
    """The twin's TTFT and ITL means (ms) over a run, its output tokens a second and the tokens it counted."""
    mean = lambda n: ((after[n][0] - before[n][0]) / (after[n][1] - before[n][1]) * 1e3   # noqa: E731
                      if after[n][1] > before[n][1] else float("nan"))
    moving = [s for i, s in enumerate(samples) if i and s["tokens"] > samples[i - 1]["tokens"]]
    first = next((samples[i - 1] for i, s in enumerate(samples) if i and s["tokens"] > samples[i - 1]["tokens"]), None)
    span = moving[-1]["sim_time"] - first["sim_time"] if moving else 0.0
    tps = (moving[-1]["tokens"] - first["tokens"]) / span if span > 0 else float("nan")
    return {"ttft_ms": mean(SERIES[0]), "itl_ms": mean(SERIES[1]), "tokens_per_s": tps,
            "tokens": after["tokens"] - before["tokens"],
            "prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"]}


def tokens_agree(client: dict, twin: dict) -> bool:
    """The client's prompt and output token counts (its tokenizer's) are the twin's usage counts."""
    return client["prompt_tokens"] == twin["prompt_tokens"] and client["tokens"] == twin["tokens"]


def aiperf_cmd(exe: str, base: str, model: str, tokenizer: str, c: int, out: str) -> list:
    """AIPerf 0.13's profile, each request on a connection of its own: its pool keeps idle connections
    300 s, the twin 5 s (uvicorn's default, guard.KEEP_ALIVE_S), and a client starved of CPU writes its next
    request into one the twin has closed ('Cannot write to closing transport'; 19 of 300 at 100 streams)."""
    return [exe, "profile", "--connection-reuse-strategy", "never", "--model", model, "--url", base,
            "--endpoint-type", "completions", "--streaming", "--tokenizer", tokenizer, "--concurrency", str(c), "--request-count", str(c * REQUESTS_PER_STREAM),
            "--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
            "--ui-type", "none", "--random-seed", "1", "--artifact-dir", out]


def aiperf_side(out: str) -> dict:
    """AIPerf's means (ms) of TTFT, of TTFT after its request was sent (`http_req_waiting`: without its
    own connect and send) and of ITL; output tokens a second; its token counts (its tokenizer's)."""
    doc = json.loads(next(Path(out).rglob("profile_export_aiperf.json")).read_text())
    stat = lambda k, s="avg": doc[k][s] if k in doc else 0   # noqa: E731  (a count nothing added to is absent)
    return {"ttft_ms": stat("time_to_first_token"), "ttft_sent_ms": stat("http_req_waiting"),
            "itl_ms": stat("inter_token_latency"), "tokens_per_s": stat("output_token_throughput"),
            "prompt_tokens": stat("input_sequence_length", "sum"), "tokens": stat("output_token_count", "sum"),
            "requests": stat("request_count"), "errors": stat("error_request_count")}


def guidellm_cmd(exe: str, base: str, model: str, tokenizer: str, c: int, out: str) -> list:
    """GuideLLM 0.8's run with its default backend validation (GET /health, then /v1/models)."""
    return [exe, "run", "--backend", f"kind=openai_http,target={base},model={model},request_format=/v1/completions",
            "--profile", f"kind=concurrent,streams={c}",
            "--constraint", f"kind=max_requests,count={c * REQUESTS_PER_STREAM}",
            "--tokenizer", f"kind=hf_auto,model={tokenizer}",
            "--data", f"kind=synthetic_text,prompt_tokens={INPUT_TOKENS},output_tokens={OUTPUT_TOKENS}",
            "--output", f"kind=json,path={out}/benchmarks.json", "--disable-progress"]


def guidellm_side(out: str) -> dict:
    """GuideLLM's TTFT and ITL means (ms) over its successful requests, output tokens a second, and
    its token counts over every request it sent (a cut one's tokens were counted by the twin too)."""
    m = json.loads(Path(out, "benchmarks.json").read_text())["benchmarks"][0]["metrics"]
    n = m["request_totals"]
    return {"ttft_ms": m["time_to_first_token_ms"]["successful"]["mean"], "ttft_sent_ms": float("nan"),
            "itl_ms": m["inter_token_latency_ms"]["successful"]["mean"],
            "tokens_per_s": m["output_tokens_per_second"]["successful"]["mean"],
            "prompt_tokens": m["prompt_token_count"]["total"]["total_sum"],
            "tokens": m["output_token_count"]["total"]["total_sum"],
            "requests": n["successful"], "errors": n["errored"] + n["incomplete"]}


# tool: (executable under .bench, command, parser, environment). AIPerf 0.13 cannot load a local
# tokenizer directory with HF_HUB_OFFLINE=1, so for it the closed Hub port alone proves no network.
TOOLS = {"aiperf": ("aiperf", aiperf_cmd, aiperf_side, {"HF_ENDPOINT": NO_HUB}),
         "guidellm": ("guidellm", guidellm_cmd, guidellm_side, {"HF_ENDPOINT": NO_HUB, "HF_HUB_OFFLINE": "1"})}


def worker_connections(serve_pid: int, port: int) -> int:
    """The most open connections one of `twin serve`'s processes holds on `port` (its per-address
    budget is guard.MAX_CONNS_PER_ADDRESS over its workers)."""
    most = 0
    for p in psutil.Process(serve_pid).children(recursive=True):
        try:
            most = max(most, sum(1 for k in p.net_connections("tcp")
                                 if k.laddr and k.laddr.port == port and k.status == psutil.CONN_ESTABLISHED))
        except psutil.Error:
            continue
    return most


def run_one(cmd: list, env: dict, parse, base: str, serve_pid: int, out: str, log) -> dict:
    """One tool run, the twin's metrics sampled meanwhile; {client, twin, load, conns} or {error}."""
    samples, conns, stop = [], [0], threading.Event()
    port = int(base.rsplit(":", 1)[1])

    def sample():
        while not stop.is_set():
            if (s := twin_state(base)) is not None:
                samples.append(s)
            conns[0] = max(conns[0], worker_connections(serve_pid, port))
            stop.wait(SAMPLE_S)
    before, load0 = twin_state(base), os.getloadavg()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=out, env={**os.environ, **env})
    stop.set()
    th.join()
    time.sleep(0.3)                 # the last requests' "times" events (their prefill) follow their last token
    after, load1 = twin_state(base), os.getloadavg()
    if done.returncode:
        return {"error": f"exited {done.returncode} (its output: {log.name})"}
    return {"client": parse(out), "twin": twin_side(before, after, samples + [after]), "load": (load0[0], load1[0]),
            "conns": conns[0]}


def show(tool: str, c: int, r: dict, out=sys.stdout) -> None:
    """Two lines a run: the figures and their ratios; requests, connections and the token counts."""
    if "error" in r:
        print(f"{tool} {c:>4} streams: {r['error']}", file=out)
        return
    cl, tw = r["client"], r["twin"]
    cells = "  ".join(f"{name} {cl[k]:.1f} / {tw[k]:.1f} ({cl[k] / tw[k]:.3f})"
                      for name, k in (("TTFT ms", "ttft_ms"), ("ITL ms", "itl_ms"), ("out tok/s", "tokens_per_s")))
    sent = "" if math.isnan(cl["ttft_sent_ms"]) else (
        f"  TTFT after send {cl['ttft_sent_ms']:.1f} ({cl['ttft_sent_ms'] / tw['ttft_ms']:.3f})")
    print(f"{tool} {c:>4} streams: {cells}{sent}  load {r['load'][0]:.1f}-{r['load'][1]:.1f}", file=out)
    agree = "equal" if tokens_agree(cl, tw) else "DIFFER"
    print(f"{'':>{len(tool) + 14}}{cl['requests']:.0f} requests finished, {cl['errors']:.0f} failed; most connections "
          f"a twin worker held {r['conns']}; tokens client / twin: prompt {cl['prompt_tokens']:.0f} / "
          f"{tw['prompt_tokens']:.0f}, output {cl['tokens']:.0f} / {tw['tokens']:.0f}: {agree}", file=out, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=str(TOKENIZER), help="a Hugging Face tokenizer directory")
    ap.add_argument("--concurrency", default="10,50,100", help="comma-separated stream counts")
    ap.add_argument("--workers", type=int, default=2, help="twin serve's HTTP workers (default 2)")
    ap.add_argument("--tools", default="aiperf,guidellm", help="comma-separated, of: " + ", ".join(TOOLS))
    a = ap.parse_args(argv)
    tools, tokenizer = a.tools.split(","), str(Path(a.tokenizer).resolve())   # the tools run in their artifact dirs
    if not Path(tokenizer, "tokenizer.json").is_file():
        print(f"{a.tokenizer}: no tokenizer.json (allowed: a Hugging Face tokenizer directory)", file=sys.stderr)
        return 2
    for t in tools:
        if t not in TOOLS:
            print(f"unknown tool {t!r} (allowed: {', '.join(TOOLS)})", file=sys.stderr)
            return 2
        if not shutil.which(str(BENCH / t / "bin" / TOOLS[t][0])):
            print(f"no {t} at {BENCH / t} (`make bench-serve` installs it)", file=sys.stderr)
            return 2
    port, tmp = _free_port(), tempfile.mkdtemp(prefix="twin-bench-serve-")
    base = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen([sys.executable, "-m", "twin", "serve", "--port", str(port), "--seed", "1",
                              "--workers", str(a.workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    ok = True
    try:
        deadline = time.time() + START_S
        while _get(base + "/health", 5) is None:
            if time.time() > deadline:
                raise RuntimeError("twin serve did not start")
            time.sleep(0.5)
        model = json.loads(_get(base + "/v1/models"))["data"][0]["id"]
        print(f"twin serve --workers {a.workers} on {base}; {INPUT_TOKENS} prompt and {OUTPUT_TOKENS} output tokens, "
              f"{REQUESTS_PER_STREAM} requests a stream; client / twin (ratio), means; tokenizer {tokenizer}; "
              f"Hugging Face Hub at {NO_HUB} (closed)")
        for c in (int(x) for x in a.concurrency.split(",")):
            for t in tools:
                exe, cmd, parse, env = TOOLS[t]
                out = os.path.join(tmp, f"{t}-{c}")
                os.makedirs(out)
                with open(os.path.join(out, "log.txt"), "w") as log:
                    r = run_one(cmd(str(BENCH / t / "bin" / exe), base, model, tokenizer, c, out), env, parse,
                                base, serve.pid, out, log)
                show(t, c, r)
                ok = ok and "error" not in r and tokens_agree(r["client"], r["twin"])
        print(f"(artifacts in {tmp})")
        return 0 if ok else 1
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(30)


if __name__ == "__main__":
    sys.exit(main())
