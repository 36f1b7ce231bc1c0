"""Component ids of a topology: generated here and parsed here, nowhere else.

Every id the twin shows or accepts (dies, NPUs, CPUs, switches, NICs, racks, links) is built by one
of the functions below and split back into its fields by `parse`. Node numbers are zero-padded to
two digits but parsed as whole numbers, so "n100" works for systems with 100 or more nodes.
"""
from __future__ import annotations

import re

VPC_SWITCH = "vpc/switch"
STORAGE = "storage/obs"


def node_label(node: int) -> str:
    """Id of a server node ("n07"); also a failure group meaning everything on that node."""
    return f"n{node:02d}"


def die_id(node: int, npu: int, die: int) -> str:
    """A die: the unit of compute ("n07/npu3/d1"). On a cluster, npu = GPU and die is always 0."""
    return f"n{node:02d}/npu{npu}/d{die}"


def npu_id(node: int, npu: int) -> str:
    """An accelerator package ("n07/npu3"): a failure group of its dies, not a graph node."""
    return f"n{node:02d}/npu{npu}"


def cpu_id(node: int, cpu: int) -> str:
    return f"n{node:02d}/cpu{cpu}"


def l1_id(node: int, k: int) -> str:
    """L1 UB switch chip k of a node; it belongs to sub-plane k."""
    return f"n{node:02d}/l1-{k}"


def l2_id(subplane: int, j: int) -> str:
    return f"sp{subplane}/l2-{j}"


def subplane_id(k: int) -> str:
    """Failure group: the L2 chips of sub-plane k."""
    return f"sp{k}"


def rdma_nic_id(node: int, npu: int) -> str:
    return f"n{node:02d}/rdma{npu}"


def vpc_nic_id(node: int) -> str:
    return f"n{node:02d}/vpc"


def nvswitch_id(node: int) -> str:
    return f"n{node:02d}/nvswitch"


def rack_id(rack: int) -> str:
    return f"r{rack:02d}"


def comm_rack_id(rack: int) -> str:
    return f"c{rack:02d}"


def leaf_id(rack: int) -> str:
    return f"rdma/leaf-r{rack:02d}"


def spine_id(index: int = 0) -> str:
    return f"rdma/spine-{index}"


def link_id(u: str, v: str) -> str:
    """A link's string id ("n07/l1-4--sp4/l2-11"); node ids never contain "--"."""
    return f"{u}--{v}"


_ID_FORMS: tuple[tuple[str, str, str], ...] = (
    ("die", r"n(?P<node>\d+)/npu(?P<npu>\d+)/d(?P<die>\d+)", "n07/npu3/d1"),
    ("npu", r"n(?P<node>\d+)/npu(?P<npu>\d+)", "n07/npu3 (group: its dies)"),
    ("cpu", r"n(?P<node>\d+)/cpu(?P<cpu>\d+)", "n07/cpu2"),
    ("l1", r"n(?P<node>\d+)/l1-(?P<subplane>\d+)", "n07/l1-4"),
    ("rdma_nic", r"n(?P<node>\d+)/rdma(?P<npu>\d+)", "n07/rdma3"),
    ("vpc_nic", r"n(?P<node>\d+)/vpc", "n07/vpc"),
    ("nvswitch", r"n(?P<node>\d+)/nvswitch", "n07/nvswitch"),
    ("node", r"n(?P<node>\d+)", "n07 (group: the whole node)"),
    ("l2", r"sp(?P<subplane>\d+)/l2-(?P<index>\d+)", "sp4/l2-11"),
    ("subplane", r"sp(?P<subplane>\d+)", "sp4 (group: its L2 chips)"),
    ("rack", r"r(?P<rack>\d+)", "r02 (group: a compute rack)"),
    ("comm_rack", r"c(?P<rack>\d+)", "c01 (group: a communication rack)"),
    ("rdma_switch", r"rdma/leaf-r(?P<rack>\d+)", "rdma/leaf-r02"),
    ("rdma_switch", r"rdma/spine-(?P<index>\d+)", "rdma/spine-0"),
    ("vpc_switch", re.escape(VPC_SWITCH), VPC_SWITCH),
    ("storage", re.escape(STORAGE), STORAGE),
    ("link", r"(?P<u>.+?)--(?P<v>.+)", "n07/l1-4--sp4/l2-11 (a link)"),
)
_ID_RES = tuple((kind, re.compile(rx + r"\Z"), ex) for kind, rx, ex in _ID_FORMS)


class TopologyError(ValueError):
    """A bad topology request (unknown plane, endpoint not on a plane, bad factor); says what is allowed."""


class UnknownElementError(TopologyError, KeyError):
    """An id that names no element; the message names it and lists valid forms."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def parse(element: str) -> dict:
    """Split an id into its kind and integer fields, by syntax only (existence: `validate_target`)."""
    if isinstance(element, str):
        for kind, rx, _ in _ID_RES:
            m = rx.match(element)
            if m:
                out: dict = {"kind": kind}
                for key, val in m.groupdict().items():
                    out[key] = val if key in ("u", "v") else int(val)
                return out
    forms = "; ".join(ex for _, _, ex in _ID_FORMS)
    raise UnknownElementError(f"topology id {element!r} is not well formed (allowed forms: {forms})")



def kind_of(element: str) -> str | None:
    """The kind of a well-formed id ("die", "node", "subplane", "link", ...), or None."""
    try:
        return parse(element)["kind"]
    except UnknownElementError:
        return None


def node_of(element: str) -> int | None:
    """The server node an id belongs to (its number), or None (switches, sub-planes, links)."""
    try:
        return parse(element).get("node")
    except UnknownElementError:
        return None


def subplane_of(element: str) -> int | None:
    """The UB sub-plane an id belongs to (an L1 or L2 chip, a sub-plane), or None."""
    try:
        return parse(element).get("subplane")
    except UnknownElementError:
        return None
