"""Predictors behind twin.perf.PerfModel: one module per concern so a fabric, an accelerator's
execution strategy or the EMS cost can be read (and replaced) on its own.

comm.py       MoE all-to-all per fabric: UB (supernode) and NVLink + RDMA (DeepEP normal and
              low-latency kernels on a GPU cluster or NVLink domain)
execution.py  how a layer's compute and communication overlap, per accelerator (named strategies)
ems.py        the physical cost of loading cached KV blocks from EMS
economics.py  per-chip, per-TFLOPS, per-kW and per-million-token figures
"""
