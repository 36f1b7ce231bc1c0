"""Record fixed-seed summaries and last-interval traffic for tests/test_speed.py.

Run from a checkout of the engine to compare against (speed_before*.json came from commit 42c7177;
the EMS-loading runs and the traffic were re-recorded after the EMS refit, see tests/test_speed.py):
    PYTHONPATH=. python tests/data/make_speed_before.py tests/data
"""
import json
import sys
from pathlib import Path

import numpy as np

from twin.engine import Engine

RUNS = [("diurnal", dict(duration_s=120)), ("paper-decode", dict(duration_s=60)),
        ("peak-384", dict(duration_s=60)), ("bursty-chat", dict(duration_s=60)),
        ("default", dict(duration_s=60)), ("paper-prefill-cache", dict(duration_s=60)),
        ("mooncake-replay", dict(duration_s=4000, cache_capacity="unlimited"))]


def main(out: Path) -> None:
    summaries = {}
    for name, kw in RUNS:
        eng = Engine(name, seed=0, **kw)
        d = eng.scenario.duration_s
        step = max(eng.scenario.interval_s, min(60.0, d / 20))     # as `python -m twin run`
        while eng.sim_time < d - 1e-9:
            eng.advance(min(step, d - eng.sim_time))
        summaries[name] = {**eng.summary(), "_events": eng.env.processed}
    (out / "speed_before.json").write_text(json.dumps(summaries, indent=1))
    eng = Engine("peak-384", seed=0, duration_s=10)
    eng.advance(10)
    m = eng.metrics
    traffic = {"node_gbps": np.round(m.last_node_gbps, 9).tolist(),
               "rdma_out_gbps": np.round(m.last_rdma_gbps[0], 9).tolist(),
               "rdma_in_gbps": np.round(m.last_rdma_gbps[1], 9).tolist(),
               "plane_gbps": m.last_plane_gbps}
    (out / "speed_before_traffic.json").write_text(json.dumps({"peak-384": traffic}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
