"""`python -m twin.cli.bench_serve` (`make bench-serve`): AIPerf against a local `twin serve`, the
client's figures next to the twin's own.

AIPerf runs from an environment of its own (`make bench-serve` installs it under .bench/, never into
the project's venv) with a Hugging Face tokenizer (`--tokenizer`), at each concurrency in turn:
synthetic prompts of INPUT_TOKENS, outputs of OUTPUT_TOKENS, REQUESTS_PER_STREAM requests a stream.
The twin's side comes from its /metrics, read before and after each run and every SAMPLE_S during
it: TTFT (the mean of `vllm:time_to_first_token_seconds`), ITL per token (the mean of
`vllm:request_time_per_output_token_seconds`: a request's decode time over its tokens after the first,
AIPerf's definition of inter-token latency) and output throughput (`vllm:generation_tokens_total` over
the twin's sim time from the last sample before its first token to the last that saw one). Prints
each pair and the client/twin ratio, with the load average before and after.
"""
from __future__ import annotations

import argparse
import json
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

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "twin" / "serve" / "tokenizer"       # the shipped tokenizer (twin/serve/tokenizer/)
AIPERF = ROOT / ".bench" / "aiperf" / "bin" / "aiperf"
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


def twin_state(base: str) -> dict:
    """The few series the comparison reads: (sum, count) of the two histograms, tokens, sim time."""
    fams = {f.name: f for f in text_string_to_metric_families(_get(base + "/metrics").decode())}
    value = lambda fam, name: sum(s.value for s in fams[fam].samples if s.name == name)   # noqa: E731
    out = {n: (value(n, n + "_sum"), value(n, n + "_count")) for n in SERIES}
    out["tokens"] = value("vllm:generation_tokens", "vllm:generation_tokens_total")
    out["sim_time"] = value("twin:sim_time_seconds", "twin:sim_time_seconds")
    return out


def twin_side(before: dict, after: dict, samples: list) -> dict:
    """The twin's TTFT and ITL means (ms) over a run and its output tokens a second."""
    mean = lambda n: ((after[n][0] - before[n][0]) / (after[n][1] - before[n][1]) * 1e3   # noqa: E731
                      if after[n][1] > before[n][1] else float("nan"))
    moving = [s for i, s in enumerate(samples) if i and s["tokens"] > samples[i - 1]["tokens"]]
    first = next((samples[i - 1] for i, s in enumerate(samples) if i and s["tokens"] > samples[i - 1]["tokens"]), None)
    span = moving[-1]["sim_time"] - first["sim_time"] if moving else 0.0
    tps = (moving[-1]["tokens"] - first["tokens"]) / span if span > 0 else float("nan")
    return {"ttft_ms": mean(SERIES[0]), "itl_ms": mean(SERIES[1]), "tokens_per_s": tps,
            "tokens": after["tokens"] - before["tokens"]}


def aiperf_cmd(aiperf: str, base: str, model: str, tokenizer: str, c: int, out: str) -> list:
    return [aiperf, "profile", "--model", model, "--url", base, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", tokenizer, "--concurrency", str(c), "--request-count", str(c * REQUESTS_PER_STREAM),
            "--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
            "--ui-type", "none", "--random-seed", "1", "--artifact-dir", out]


def aiperf_side(out: str) -> dict:
    """AIPerf's TTFT and ITL means (ms), output tokens a second and count (its JSON export)."""
    doc = json.loads(next(Path(out).rglob("profile_export_aiperf.json")).read_text())
    pick = lambda k, stat="avg": doc[k][stat]   # noqa: E731
    return {"ttft_ms": pick("time_to_first_token"), "itl_ms": pick("inter_token_latency"),
            "tokens_per_s": pick("output_token_throughput"),
            "tokens": doc.get("output_token_count", {}).get("avg", float("nan")) if isinstance(
                doc.get("output_token_count"), dict) else float("nan"),
            "requests": pick("request_count") if "request_count" in doc else float("nan")}


def run_one(tool: str, cmd: list, parse, base: str, out: str, log) -> dict:
    """One tool run, the twin's metrics sampled meanwhile; {client, twin, load} or {error}."""
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(twin_state(base))
            stop.wait(SAMPLE_S)
    before, load0 = twin_state(base), os.getloadavg()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=out)
    stop.set()
    th.join()
    time.sleep(0.3)                 # the last requests' "times" events (their prefill) follow their last token
    after, load1 = twin_state(base), os.getloadavg()
    if done.returncode:
        return {"error": f"{tool} exited {done.returncode} (its output: {log.name})"}
    return {"client": parse(out), "twin": twin_side(before, after, samples + [after]), "load": (load0[0], load1[0])}


def show(tool: str, c: int, r: dict, out=sys.stdout) -> None:
    if "error" in r:
        print(f"{tool} {c:>4} streams: {r['error']}", file=out)
        return
    cl, tw = r["client"], r["twin"]
    cells = "  ".join(f"{name} {cl[k]:.1f} / {tw[k]:.1f} ({cl[k] / tw[k]:.3f})"
                      for name, k in (("TTFT ms", "ttft_ms"), ("ITL ms", "itl_ms"), ("out tok/s", "tokens_per_s")))
    print(f"{tool} {c:>4} streams: {cells}  load {r['load'][0]:.1f}-{r['load'][1]:.1f}", file=out, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=str(TOKENIZER), help="a Hugging Face tokenizer directory")
    ap.add_argument("--concurrency", default="10,50,100", help="comma-separated stream counts")
    ap.add_argument("--workers", type=int, default=2, help="twin serve's HTTP workers (default 2)")
    ap.add_argument("--aiperf", default=str(AIPERF))
    a = ap.parse_args(argv)
    if not Path(a.tokenizer, "tokenizer.json").is_file():
        print(f"{a.tokenizer}: no tokenizer.json (allowed: a Hugging Face tokenizer directory)", file=sys.stderr)
        return 2
    if not shutil.which(a.aiperf):
        print(f"no AIPerf at {a.aiperf} (`make bench-serve` installs it)", file=sys.stderr)
        return 2
    port, tmp = _free_port(), tempfile.mkdtemp(prefix="twin-bench-serve-")
    base = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen([sys.executable, "-m", "twin", "serve", "--port", str(port), "--seed", "1",
                              "--workers", str(a.workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.time() + START_S
        while _get(base + "/twin/status", 5) is None:
            if time.time() > deadline:
                raise RuntimeError("twin serve did not start")
            time.sleep(0.5)
        model = json.loads(_get(base + "/v1/models"))["data"][0]["id"]
        print(f"twin serve --workers {a.workers} on {base}; {INPUT_TOKENS} prompt and {OUTPUT_TOKENS} output tokens, "
              f"{REQUESTS_PER_STREAM} requests a stream; client / twin (ratio), means; tokenizer {a.tokenizer}")
        for c in (int(x) for x in a.concurrency.split(",")):
            out = os.path.join(tmp, f"aiperf-{c}")
            os.makedirs(out)
            with open(os.path.join(out, "log.txt"), "w") as log:
                r = run_one("aiperf", aiperf_cmd(a.aiperf, base, model, a.tokenizer, c, out), aiperf_side, base, out, log)
            show("aiperf", c, r)
        print(f"(artifacts in {tmp})")
        return 0
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(30)


if __name__ == "__main__":
    sys.exit(main())
