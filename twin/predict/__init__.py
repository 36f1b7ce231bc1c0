"""Time predictors: how long a prefill batch and a decode step take. One module per concern so a
fabric, an accelerator's execution strategy or the EMS cost can be read (and replaced) on its own.
Where a die's HBM goes (weights, buffers, KV cache) is geometry, not time: twin.model.memory.

base.py       the TimePredictor interface (decode_step, prefill_batch, with_net, with_health), NetState,
              Health, StepResult, the largest batch within the TPOT SLO, and a registry by name
roofline.py   PerfModel: the calibrated operator-level model (also `twin.predict.perf.PerfModel`)
constant.py   ConstantPredictor: fixed step times, for exact engine tests
comm.py       MoE all-to-all per fabric: UB (supernode) and NVLink + RDMA (DeepEP normal and
              low-latency kernels on a GPU cluster or NVLink domain)
execution.py  how a layer's compute and communication overlap, per accelerator (named strategies)
ems.py        the physical cost of loading cached KV blocks from EMS
economics.py  per-chip, per-TFLOPS, per-kW and per-million-token figures
"""
