"""KV transfers from prefill to decode instances: one fluid flow per prefill batch over the
deployment's KV plane (RDMA NICs, or UB uplinks), shared max-min fairly (flows.py). The flow's
end hands the batch to the decode instance (a callback, not a process per transfer); until then
the flow holds the batch. Without a path the batch waits for the network to change, held in
`_waiting`; `transfers` shows both to the lifecycle audit."""
from __future__ import annotations

import numpy as np

from twin.i18n import N_
from twin.engine.flows import FlowNet
from twin.engine.ports import NetworkHost
from twin.engine.requests import TRANSFER


class KvTransfers:
    def __init__(self, eng: NetworkHost):
        self.eng = eng
        # a transfer's end waits for the decode instances' step boundaries while all of them step
        self.flows = FlowNet(eng.env, defer=self._all_stepping)
        self._waiting: dict[int, np.ndarray] = {}    # transfers waiting for a path: key -> request ids
        self._seq = 0
        self._cut: dict[tuple[int, int], tuple[int, bool]] = {}   # (src, dst) -> (topology version, partitioned)
        rdma = eng.dep.kv_transfer_plane == "rdma"
        self.plane = "rdma" if rdma else "ub"
        self.latency_s = (eng.system.rdma_latency_us if rdma else eng.system.ub_latency_us) * 1e-6
        self.net_event = eng.env.event()
        # bytes started per (src, dst) slot: kept only for a fabric shared with other engines (twin.cloud.maas)
        self.sent: dict[tuple[int, int], float] | None = None
        self.set_capacities()

    def set_capacities(self) -> None:
        """KV transfer links: each instance's RDMA NICs (or its UB uplinks), scaled by health."""
        eng, topo = self.eng, self.eng.topo
        for inst in eng.instances:
            if self.plane == "rdma":
                bw = sum(topo.rdma_bandwidth(int(n)) for n in inst.nodes) * len(inst.dies) \
                    / (len(inst.nodes) * eng.dies_per_node)
            else:
                bw = sum(topo.node_uplink_gbps(int(n)) for n in inst.nodes)
            self.flows.set_capacity(inst.name, bw * 1e9)

    @property
    def transfers(self) -> dict:
        """KV transfers under way (flowing, or waiting for a path): key -> request ids."""
        flowing = {("flow", k): f.args[0] for k, f in self.flows.flows.items()}
        return flowing | {("wait", k): ids for k, ids in self._waiting.items()}

    @property
    def landed(self) -> int:
        """Transfers landed (Compare's what-ifs report their mean time)."""
        return self.flows.landed

    @property
    def landed_s(self) -> float:
        """Their seconds together, start to last byte landed."""
        return self.flows.landed_s

    def _all_stepping(self) -> bool:
        """Every decode instance is stepping (reads its inbox at step boundaries only)."""
        for d in self.eng.decode:
            if not d.stepping:
                return False
        return True

    def network_changed(self) -> None:
        """New capacities, and a wake-up for the transfers waiting for a path."""
        self.set_capacities()
        if not self.net_event.triggered:
            self.net_event.succeed()
        self.net_event = self.eng.env.event()

    def send(self, ids: np.ndarray, src, tokens: int | None = None) -> None:
        """Ship the KV of `ids` (`tokens`: their prompt tokens, when the caller has the sum)."""
        eng, req = self.eng, self.eng.req
        if len(ids) == 1:                   # most batches: one id, no fancy index
            row = ids.item(0) - req.base
            req.state.a[row] = TRANSFER
            if tokens is None:
                tokens = int(req.input.a[row])
        else:
            rows = req.rows(ids)
            req.state.a[rows] = TRANSFER
            if tokens is None:              # (a small batch adds up faster in Python: the same int)
                inputs = req.input.a[rows]
                tokens = sum(inputs.tolist()) if len(inputs) <= 16 else int(np.add.reduce(inputs))
        live = eng.live()[1]
        dst = eng.policies.kv_placement.choose(live) if live else eng.decode[0]
        if self._partitioned(src, dst):
            self._seq += 1
            self._waiting[self._seq] = ids
            eng.env.process(self._when_routed(self._seq, src, dst, tokens))
        else:
            self._start(ids, src, dst, tokens)

    def _partitioned(self, src, dst) -> bool:
        """Whether src and dst have no path on the plane, cached per topology version."""
        key, version = (src.slot, dst.slot), self.eng.topo.version
        known = self._cut.get(key)
        if known is None or known[0] != version:
            known = self._cut[key] = (version, self._route(src, dst).partitioned)
        return known[1]

    def _route(self, src, dst):
        """The path from src's first live die to dst's: an instance restarted beside a dead NPU
        (it runs until the hardware repair) sends its KV from the dies it has left."""
        return self.eng.topo.route(self._end(src), self._end(dst), self.plane)

    def _end(self, inst) -> str:
        topo = self.eng.topo
        ids = topo.die_ids
        return next((ids[d] for d in inst.dies if topo.alive(ids[d])), ids[inst.dies[0]])

    def _when_routed(self, key: int, src, dst, tokens: int):
        self.eng.log("partition", N_("KV transfer %(src)s -> %(dst)s: no %(plane)s path; %(n)s request(s) wait "
                                     "for the network"), src=src.name, dst=dst.name,
                     plane=self._route(src, dst).plane, n=len(self._waiting[key]))
        while self._partitioned(src, dst):
            yield self.net_event
        self._start(self._waiting.pop(key), src, dst, tokens)

    def _start(self, ids: np.ndarray, src, dst, tokens: int) -> None:
        """The flow of `ids`' KV (`tokens` prompt tokens); its end calls `dst.deliver(ids, landing time)`."""
        eng = self.eng
        nbytes = float(tokens) * eng.kv_bytes
        eng.acct.kv_transfer(src, dst, nbytes, self.plane)
        if self.sent is not None:
            key = (src.slot, dst.slot)
            self.sent[key] = self.sent.get(key, 0.0) + nbytes
        self.flows.start(nbytes, (src.name, dst.name), self.latency_s, dst.deliver, ids)
