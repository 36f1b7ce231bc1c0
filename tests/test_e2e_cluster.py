"""End to end in headless Chromium: a viewer switches the twin to a GPU cluster (deployment
deepseek-h800, DeepSeek's 18-server H800 decode unit) and every page draws and names that system:
NVLink inside a server, RDMA between servers, 18 servers, no UB. A fault demo then switches back to
CloudMatrix and the Failures picker follows. Screenshots land in test-artifacts/e2e/cluster-*.png."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.e2e

H800 = "GPU cluster of 18 servers x 8 NVIDIA H800"


def wait_text(pg, selector: str, pattern: str, timeout: float = 20_000) -> None:
    pg.wait_for_function(
        "([sel, pat]) => { const el = document.querySelector(sel); return !!el && new RegExp(pat, 'i').test(el.innerText); }",
        arg=[selector, pattern], timeout=timeout)


def wait_live(pg) -> None:
    wait_text(pg, "#ctl-status-state", "live")


def pick(pg, dropdown: str, label: str) -> None:
    """Choose the option labelled `label` in a dcc.Dropdown, as a viewer does (open it, click it)."""
    pg.click(f"#{dropdown}")
    exact = re.compile(f"^{re.escape(label)}$")
    ids = pg.locator(".dd-id", has_text=exact)          # a deployment's option: its id over its description
    (pg.locator("[role=option]", has=ids) if dropdown == "ctl-deployment"
     else pg.locator("[role=option]", has_text=exact)).click()
    wait_text(pg, f"#{dropdown}", f"^{re.escape(label)}$")


def cy_count(pg, cy: str, selector: str) -> int:
    return pg.evaluate("([id, sel]) => { const el = document.getElementById(id); "
                       "return el && el._cyreg ? el._cyreg.cy.elements(sel).length : -1; }", [cy, selector])


def wait_cy(pg, cy: str, selector: str, n: int, timeout: float = 20_000) -> None:
    pg.wait_for_function("([id, sel, n]) => { const el = document.getElementById(id); "
                         "return !!el && !!el._cyreg && el._cyreg.cy.elements(sel).length === n; }",
                         arg=[cy, selector, n], timeout=timeout)


def test_a_gpu_cluster_is_drawn_and_named_on_every_page(browser_page, live_server, artifacts):
    pg = browser_page
    _, reg = live_server
    tw = reg.shared()
    run = tw.run
    pg.goto(pg.base_url + "/")
    wait_live(pg)
    try:
        pg.click("#ctl-setup summary")
        pick(pg, "ctl-scenario", "paper-decode")         # decode only: the H800 unit has no prefill pool
        pick(pg, "ctl-deployment", "deepseek-h800")
        pg.click("#ctl-reset")
        wait_text(pg, "#ctl-msg", "deployment deepseek-h800")
        wait_text(pg, "#ov-scenario", H800)             # the overview names the system it runs
        assert tw.run == run + 1 and tw.snapshot.system.kind == "cluster"
        wait_text(pg, "#ctl-status-time", r"t = [1-9]")  # the new run has produced snapshots
        pg.screenshot(path=str(artifacts / "cluster-overview.png"), full_page=True)

        pg.goto(pg.base_url + "/topology")
        wait_text(pg, "#topo-caption", H800)
        wait_text(pg, "#topo-crumbs", "^Cluster$")
        wait_cy(pg, "topo-cy", 'node[kind = "node"]', 18)
        assert cy_count(pg, "topo-cy", 'node[kind = "subplane"]') == 0           # no UB sub-planes
        help_text = pg.inner_text("#topo-help")
        assert "NVLink" in help_text and "RDMA" in help_text and "UB" not in help_text
        assert "48 nodes" not in pg.inner_text("main")
        pg.wait_for_function("() => document.getElementById('topo-cy')._cyreg.cy.edges('.p-rdma')"
                             ".some(e => e.data('util') > 0)")                    # all-to-all rides RDMA
        pg.screenshot(path=str(artifacts / "cluster-topology.png"), full_page=True)
        pick(pg, "topo-select", "node n03")
        wait_text(pg, "#topo-crumbs", "Cluster › node n03")
        wait_cy(pg, "topo-cy", 'node[kind = "die"]', 8)                            # 8 GPUs
        assert cy_count(pg, "topo-cy", 'node[kind = "nvswitch"]') == 1
        assert cy_count(pg, "topo-cy", "edge.p-nvlink") == 8
        pg.screenshot(path=str(artifacts / "cluster-topology-server.png"), full_page=True)

        pg.goto(pg.base_url + "/traffic")
        wait_text(pg, "#tr-now", r"^NVLink [\d.,k]+ GB/s · RDMA [\d.,k]+ GB/s · VPC")
        assert "UB" not in pg.inner_text("#tr-now") + pg.inner_text("main h3")
        rdma = re.search(r"RDMA ([\d.,]+)(k?) GB/s", pg.inner_text("#tr-now"))
        assert rdma and float(rdma.group(1).replace(",", "")) > 0                   # not 0 GB/s any more
        wait_text(pg, "main", "Server-to-server traffic")
        wait_text(pg, "main", "NVLink: expert all-to-all inside a server")      # issue 36 (9): the header's two
        wait_text(pg, "main", "RDMA: all-to-all between servers and KV transfers")   # figures, one chart each
        pg.wait_for_function("() => { const gd = document.querySelector('#tr-matrix .js-plotly-plot'); "
                             "return gd && gd.data && gd.data[0].z && gd.data[0].z.length === 18; }")
        pg.screenshot(path=str(artifacts / "cluster-traffic.png"), full_page=True)

        pg.goto(pg.base_url + "/tradeoffs")
        wait_text(pg, "#to-live", "deepseek-h800")
        wait_text(pg, "#to-live", H800)
        wait_text(pg, "#to-answer", "deepseek-h800")
        pg.screenshot(path=str(artifacts / "cluster-tradeoffs.png"), full_page=True)

        pg.goto(pg.base_url + "/failures")
        wait_text(pg, "#fl-demo-line", H800)
        wait_cy(pg, "fl-cy", 'node[kind = "node"]', 18)
        wait_text(pg, "#fl-picker-help", "whole cluster shows its servers")
        wait_text(pg, "#fl-view-select", "Whole cluster")
        assert cy_count(pg, "fl-cy", 'node[kind = "subplane"]') == 0
        assert pg.input_value("#fl-target") == "n00/npu0/d0"                      # a part this system has
        wait_text(pg, "#fl-target-hint", r"^144 GPUs \(e\.g\. n00/npu0/d0\)")
        pg.screenshot(path=str(artifacts / "cluster-failures.png"), full_page=True)

        pg.click(".demos button:has-text('L2 switch lost')")                   # a CloudMatrix demo
        wait_text(pg, "#fl-msg", "L2 switch lost")
        wait_text(pg, "#fl-demo-line", "cloudmatrix384: supernode of 48 nodes")
        wait_cy(pg, "fl-cy", 'node[kind = "node"]', 48)                            # the picker follows
        wait_cy(pg, "fl-cy", 'node[kind = "subplane"]', 7)
        wait_text(pg, "#fl-picker-help", "UB sub-planes")
        pg.screenshot(path=str(artifacts / "cluster-then-demo-failures.png"), full_page=True)
        assert pg.errors == []
    finally:
        tw.control("reset", {"scenario": "default", "deployment": None, "trace": None, "seed": 0})
