"""`python -m twin.cli.prom_check` (`make prom-check`): a real Prometheus scrapes a live `twin serve`
under a short load, then every expression of the kept vLLM dashboards (docs/grafana/) is queried
through Prometheus's HTTP API, with Grafana's variables filled in as a dashboard showing everything
would. Prints each dashboard's count of expressions that returned data (a finite value), the ones
that cannot apply to the twin (NOT_APPLICABLE, with the reason) and any that returned nothing;
exits 1 if one that applies returned nothing.

Prometheus is Debian's `prometheus` (`make prometheus` installs it); it runs with its own
temporary storage on a free port, scraping every SCRAPE_S.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana"
DASHBOARDS = ("vllm-overview-targets.json", "vllm-performance-statistics.json", "vllm-query-statistics.json",
              "vllm-grafana.json")
NOT_APPLICABLE = {
    "vllm:external_prefix_cache_hits_total": "vLLM has it only with a KV connector; the twin's prefix cache (EMS) is "
                                             "vllm:prefix_cache_*",
    "vllm:external_prefix_cache_queries_total": "(as external_prefix_cache_hits)",
    "vllm:mm_cache_hits_total": "the multimodal cache: the twin serves a text-only model",
    "vllm:mm_cache_queries_total": "(as mm_cache_hits)",
}
SCRAPE_S = 1          # Prometheus scrapes this often (assumption: short, so that a short load has many samples)
VARIABLES = {"$__rate_interval": "15s", "$__interval": "5s", "$__range": "5m", "$job": "twin",
             "$ttft_slo": "1.0", "$tpot_slo": "0.1"}     # and the served model and instance (a dashboard's choice)
START_S = 240         # `twin serve` builds its engine within this


def expressions(node):
    """Every PromQL expression (`expr`) in a dashboard's JSON."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                yield v
            else:
                yield from expressions(v)
    elif isinstance(node, list):
        for v in node:
            yield from expressions(v)


def metric_names(expr: str) -> set:
    """The series names an expression reads (vLLM's and the HTTP ones)."""
    return set(re.findall(r"\b(vllm:[a-zA-Z0-9_:]+|http_[a-z_]+)", expr))


def fill(expr: str, model: str, instance: str) -> str:
    """The expression as Grafana sends it, its variables set to this twin's job, model and instance."""
    values = {**VARIABLES, "$model_name": model, "$Deployment_id": model, "$instance": instance}
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace(k, values[k])
    return expr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, body: dict | None = None, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def _wait(what, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if what():
            return True
        time.sleep(0.2)
    return False


def _load(base: str, model: str, stop: threading.Event) -> None:
    """A light, steady load: streamed and plain completions of a few lengths, a model listing, a
    path no route has (a 404), and a stream its client drops (an abort)."""
    i = 0
    while not stop.is_set():
        i += 1
        body = {"model": model, "prompt": f"request {i} " * (20 + 40 * (i % 5)), "max_tokens": 8 + 8 * (i % 4),
                "stream": i % 2 == 0}
        _get(base + "/v1/completions", body)
        if i % 5 == 0:
            _get(base + "/v1/models")
            _get(base + "/no/such/route")
        if i % 7 == 0:                    # a client that goes away mid-stream
            c = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
            data = json.dumps({"model": model, "prompt": "gone " * 30, "max_tokens": 500, "stream": True}).encode()
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: %d\r\n\r\n" % len(data) + data)
            c.recv(4096)
            c.close()


def check(prometheus: str, load_s: float, out=sys.stdout) -> dict:
    """Run twin serve and Prometheus, load, query; {dashboard: {"data": n, "not_applicable": [...],
    "empty": [...]}}."""
    tmp = tempfile.mkdtemp(prefix="twin-prom-")
    serve_port, prom_port = _free_port(), _free_port()
    procs = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "twin", "serve", "--port", str(serve_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        base = f"http://127.0.0.1:{serve_port}"
        if not _wait(lambda: _get(base + "/twin/status", timeout=5)[0] == 200, START_S):
            raise RuntimeError("twin serve did not start")
        model = json.loads(_get(base + "/v1/models")[1])["data"][0]["id"]
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
                       f"scrape_configs:\n  - job_name: twin\n    static_configs:\n"
                       f"      - targets: ['127.0.0.1:{serve_port}']\n")
        procs.append(subprocess.Popen([prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/data",
                                       f"--web.listen-address=127.0.0.1:{prom_port}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        api = f"http://127.0.0.1:{prom_port}/api/v1/query?query="
        if not _wait(lambda: _get(api + "up", timeout=5)[0] == 200, 60):
            raise RuntimeError(f"{prometheus} did not start")
        stop = threading.Event()
        loader = threading.Thread(target=_load, args=(base, model, stop), daemon=True)
        loader.start()
        time.sleep(load_s)                # the load goes on while the queries run: rates are current
        report = {}
        for name in DASHBOARDS:
            exprs = list(expressions(json.loads((GRAFANA / name).read_text())))
            r = report[name] = {"expressions": len(exprs), "data": 0, "not_applicable": [], "empty": []}
            for e in exprs:
                if metric_names(e) & NOT_APPLICABLE.keys():
                    r["not_applicable"].append(e)
                    continue
                code, body = _get(api + urllib.parse.quote(fill(e, model, f"127.0.0.1:{serve_port}")))
                result = json.loads(body)["data"]["result"] if code == 200 else []
                if any(math.isfinite(float(x["value"][1])) for x in result):
                    r["data"] += 1
                else:
                    r["empty"].append(e)
            print(f"{name}: {r['data']} of {r['expressions']} expressions returned data; "
                  f"{len(r['not_applicable'])} cannot apply; {len(r['empty'])} returned nothing", file=out)
            for e in r["empty"]:
                print(f"  nothing: {e}", file=out)
        stop.set()
        loader.join(30)
        return report
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus",
                    help="the prometheus binary (default: on PATH)")
    ap.add_argument("--load-seconds", type=float, default=20.0, help="seconds of load before the queries")
    a = ap.parse_args(argv)
    if not shutil.which(a.prometheus):
        print(f"no prometheus at {a.prometheus!r}: `make prometheus` installs Debian's", file=sys.stderr)
        return 2
    report = check(a.prometheus, a.load_seconds)
    print("cannot apply to a text-only simulated model:")
    for metric, why in NOT_APPLICABLE.items():
        print(f"  {metric}: {why}")
    return 1 if any(r["empty"] for r in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
