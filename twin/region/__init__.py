"""A region: several supernodes (each a full twin engine) behind one global router, joined by a
scale-out network, run in one process or one group of supernodes per Dask worker, in windows.

spec.py      the `regions` catalog table
routing.py   the router's policies (a registry) and its view: loads, health, prefix index, sessions
member.py    the worker side: a group of engines fed the router's arrivals at window edges
workers.py   where the groups run: in this process, or as Dask actors
driver.py    the window loop, faults and fail-over, prefix fetches, the regional report and audit
"""
from twin.region.driver import Region, parse_fault, run_region
from twin.region.routing import REGISTRY as ROUTERS
from twin.region.spec import names, region

__all__ = ["ROUTERS", "Region", "names", "parse_fault", "region", "run_region"]
