"""The words a page uses for the system it shows: "NPU" or "GPU" for one accelerator package,
"supernode" or "cluster" for the machine. Every page takes them from here, so a GPU deployment is
never described in CloudMatrix384's terms (issue 23). The system comes from the viewed twin's
snapshot (`SystemInfo`) or, for a chart drawn from the perf model, from the catalog entry of the
deployment; None (not known yet, e.g. a layout drawn before the first tick) gives neutral words."""
from __future__ import annotations

from twin.model.config import catalog

from twin.ui.lang import N_, _

CHIP = {"NPU": N_("NPU"), "GPU": N_("GPU"), None: N_("chip")}
SYSTEM = {"supernode": N_("supernode"), "cluster": N_("cluster"), None: N_("system")}
WHOLE = {"supernode": N_("whole supernode"), "cluster": N_("whole cluster"), None: N_("whole system")}


def kind(system) -> tuple[str | None, str | None]:
    """("NPU" | "GPU", "supernode" | "cluster") of a SystemInfo or a deployment name (None: unknown)."""
    if isinstance(system, str):
        c = catalog()
        dep = c.deployments.get(system)
        if dep is None:
            return None, None
        s = c.systems[dep.system]
        return ("NPU" if c.chip(s.accelerator).kind == "npu" else "GPU"), s.kind
    if system is None:
        return None, None
    return system.accelerator, system.kind


def words(system) -> dict:
    """Message arguments in the viewer's language: chip ("NPU"), system ("supernode") and whole
    ("whole supernode"), for `_("... per %(chip)s ...") % words(info)`."""
    acc, k = kind(system)
    return {"chip": _(CHIP[acc]), "system": _(SYSTEM[k]), "whole": _(WHOLE[k])}


def served(deployment: str) -> dict:
    """The model deployment `deployment` serves, as the pages name it: {"model", "params", "dep"}."""
    cat = catalog()
    try:
        m = cat.model(cat.deployment(deployment).model)
        name = cat.deployment(deployment).model
    except (KeyError, ValueError):
        return {"model": deployment, "params": "?", "dep": deployment}
    return {"model": m.title or name, "params": f"{m.params_b:g}", "dep": deployment}
