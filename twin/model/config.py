"""Typed, validated catalog: chips, systems, models and deployments from TOML files.

Every value is checked on load; a bad one raises CatalogError naming the file, the table, the
field, the value and what is allowed, so a user editing a TOML file sees exactly what to fix.
"""
from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from twin.model.memory import Geometry

CATALOG_DIR = Path(__file__).parent.parent / "catalog"


class CatalogError(ValueError):
    """A catalog or config value is wrong; the message says where and what is allowed."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Chip(_Strict):
    kind: Literal["npu", "gpu", "cpu"]
    vendor: str
    hbm_gb: float = Field(0, ge=0, le=1024)
    hbm_gbps: float = Field(0, ge=0, le=20000)
    bf16_tflops: float = Field(0, ge=0, le=10000)
    int8_tops: float = Field(0, ge=0, le=20000)
    fp8_tflops: float = Field(0, ge=0, le=20000)
    fp4_tflops: float = Field(0, ge=0, le=40000)      # NVFP4 / MXFP4 tensor cores; 0 = none
    mla_compute_eff: float = Field(0.5, gt=0, le=1)
    mem_eff: float = Field(0.8, gt=0, le=1)
    gemm_eff: float = Field(0.8, gt=0, le=1)
    expert_gemm_eff: float = Field(0, ge=0, le=1)     # grouped expert GEMMs; 0 = gemm_eff
    gemm_mem_eff: float = Field(0, ge=0, le=1)        # weight-streaming (small-M) GEMMs; 0 = mem_eff
    execution: Literal["ascend-two-stream", "sm-overlap"] = "ascend-two-stream"
    sms: int = Field(0, ge=0, le=1024)                # streaming multiprocessors (GPUs)
    cube_cores: int = Field(0, ge=0)
    vector_cores: int = Field(0, ge=0)
    die_to_die_gbps: float = Field(0, ge=0)
    ub_links: int = Field(0, ge=0)
    ub_link_gbps: float = Field(0, ge=0)
    ub_gbps: float = Field(0, ge=0)
    nvlink_gbps: float = Field(0, ge=0)
    rdma_gbps: float = Field(0, ge=0)
    dies_per_package: int = Field(1, ge=1, le=8)
    dram_gb: float = Field(0, ge=0)
    dram_gbps: float = Field(0, ge=0)
    ssd_gb: float = Field(0, ge=0)
    ssd_gbps: float = Field(0, ge=0)
    label: Literal["", "prediction"] = ""             # "prediction": announced, not measured (shown as such)

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for the GEMM precision; 0 means the chip lacks the type."""
        return {"int8": self.int8_tops, "bf16": self.bf16_tflops, "fp8": self.fp8_tflops,
                "nvfp4": self.fp4_tflops, "mxfp4": self.fp4_tflops}[precision]


FABRICS = ("ub-clos-2tier", "nd-fullmesh")   # UB fabrics of a supernode (twin.topology.structure)


class System(_Strict):
    kind: Literal["supernode", "cluster"]
    name: str = ""                    # what pages call it ("" = its catalog id)
    accelerator: str
    cpu: str = ""
    label: Literal["", "prediction", "what-if"] = ""  # announced, not measured / a variant of a real system
    # UB fabric of a supernode: "ub-clos-2tier" (CloudMatrix384: L1 chips per node, sub-planes of L2
    # chips) or "nd-fullmesh" (UB-Mesh: dies fully meshed along each of mesh_dims); "" = the kind's own
    fabric: Literal["", "ub-clos-2tier", "nd-fullmesh"] = ""
    mesh_dims: tuple[int, ...] = ()                   # nd-fullmesh: size of each dimension, innermost first
    mesh_link_gbps: tuple[float, ...] = ()            # nd-fullmesh: GB/s one way of one link, per dimension
    all_optical: bool = False                         # every link between two nodes is optical
    unified_scaleout: bool = False                    # no RDMA NICs, no VPC cards: scale-out rides UB (what-if)
    nodes: int = Field(ge=1, le=4096)
    npus_per_node: int = Field(ge=1, le=64)
    cpus_per_node: int = Field(ge=0, le=16)
    compute_racks: int = Field(0, ge=0)
    comm_racks: int = Field(0, ge=0)
    l1_per_node: int = Field(0, ge=0, le=64)
    subplanes: int = Field(0, ge=0, le=64)
    l2_per_subplane: int = Field(0, ge=0, le=256)
    l1_l2_link_gbps: float = Field(0, ge=0)
    cpu_l1_links: int = Field(0, ge=0)
    switch_latency_us: float = Field(0.2, ge=0, le=100)
    link_latency_us: float = Field(0.05, ge=0, le=100)
    nvlink_gbps: float = Field(0, ge=0)
    nvlink_latency_us: float = Field(0.7, ge=0)
    rdma_nic_gbps: float = Field(gt=0)
    rdma_latency_us: float = Field(3.0, ge=0)
    vpc_gbps: float = Field(gt=0)
    vpc_latency_us: float = Field(10.0, ge=0)
    ub_measured_write_gbps: float = Field(0, ge=0)
    ub_measured_read_gbps: float = Field(0, ge=0)
    ub_cpu_read_gbps: float = Field(0, ge=0)
    ub_latency_us: float = Field(0, ge=0)
    nvlink_domain_gpus: int = Field(0, ge=0, le=4096)   # GPUs on one NVLink domain; 0 = a node
    chip_power_kw: float = Field(gt=0, le=100)          # wall power per accelerator package, all-in
    usd_per_chip_hour: float = Field(gt=0, le=1000)     # cost of one accelerator package per hour

    @property
    def ub_fabric(self) -> str:
        """The supernode's UB fabric ("" on a cluster)."""
        return (self.fabric or FABRICS[0]) if self.kind == "supernode" else ""


class Model(_Strict):
    family: str
    title: str = ""               # the model's name as its makers write it ("DeepSeek-R1"); the id if empty
    params_b: float = Field(gt=0)
    active_params_b: float = Field(gt=0)
    layers: int = Field(ge=1, le=512)
    dense_layers: int = Field(ge=0)
    hidden: int = Field(ge=64)
    heads: int = Field(ge=1)
    attention: Literal["mla", "gqa"]
    q_lora_rank: int = Field(0, ge=0)
    kv_lora_rank: int = Field(0, ge=0)
    rope_dim: int = Field(0, ge=0)
    qk_nope_dim: int = Field(0, ge=0)
    v_head_dim: int = Field(ge=1)
    head_dim: int = Field(0, ge=0)
    kv_heads: int = Field(0, ge=0)
    dense_intermediate: int = Field(0, ge=0)
    moe_intermediate: int = Field(ge=1)
    routed_experts: int = Field(ge=1)
    shared_experts: int = Field(ge=0)
    top_k: int = Field(ge=1)
    vocab: int = Field(ge=1)
    mtp_modules: int = Field(0, ge=0, le=4)
    max_context: int = Field(131072, ge=1, le=1 << 24)   # tokens of prompt + output the model takes
    dispatch_bytes_per_token: float = Field(gt=0)
    combine_bytes_per_token: float = Field(gt=0)


class Pool(_Strict):
    instances: int = Field(ge=0, le=1024)
    dies_per_instance: int = Field(ge=1, le=4096)
    ep: int = Field(ge=1, le=4096)
    redundant_experts: int = Field(0, ge=0)
    shared_expert_dies: int = Field(0, ge=0)
    tokens_per_die: int = Field(0, ge=0, le=1_000_000)
    batch_per_die: int = Field(0, ge=0, le=4096)
    microbatch: bool = True
    comm_sms: int = Field(0, ge=0, le=1024)       # SMs held by all-to-all kernels (GPU overlap)
    # all-to-all kernel: DeepEP's (DeepEP-Ascend's on a supernode) normal or low-latency (V1), DeepEP
    # V2's "normal-v2" (GPU only), or "ub" (the paper's kernels, supernode only); unset: "ub" on a
    # supernode, "normal" on a GPU fabric (twin.predict.comm.KERNELS holds each one's source)
    a2a_kernel: Literal["normal", "low-latency", "normal-v2", "ub"] | None = None


PRECISIONS = ("int8", "bf16", "fp8", "nvfp4", "mxfp4")   # GEMM weight and math types


class Deployment(_Strict):
    description: str
    system: str
    model: str
    precision: Literal["int8", "bf16", "fp8"]
    # routed and shared experts' weights when they differ from `precision` (SGLang GB200: NVFP4 MoE)
    moe_precision: Literal["int8", "bf16", "fp8", "nvfp4", "mxfp4"] | None = None
    # the attention kernel's math (and with kv_dtype_bytes = 1 an FP8 KV cache): BF16 or FP8
    attention_dtype: Literal["bf16", "fp8"] = "bf16"
    kv_dtype_bytes: float = Field(gt=0, le=4)
    mtp: bool = True
    mtp_acceptance: float = Field(0.7, ge=0, le=1)
    # draft tokens a step proposes per sequence with MTP on (SGLang chains the one MTP module: 2-3);
    # 0 = one per MTP module of the model (DeepSeek, CloudMatrix-Infer)
    mtp_draft_steps: int = Field(0, ge=0, le=8)
    # the serving framework schedules step n+1 on the CPU while step n runs (SGLang's overlap
    # scheduler, vLLM's async scheduling); False: the scheduler's time is exposed every step
    overlap_scheduler: bool = True
    prefill: Pool
    decode: Pool
    ems_nodes: int = Field(0, ge=0)
    ems_dram_fraction: float = Field(0.5, ge=0, le=1)
    context_tokens: int = Field(4096, ge=1, le=1_048_576)   # KV length a decode batch must fit
    tpot_slo_ms: float = Field(50, gt=0, le=10_000)
    ttft_slo_ms: float = Field(5000, gt=0, le=600_000)
    kv_transfer_plane: Literal["rdma", "ub"] = "rdma"
    cache_plane: Literal["ub", "vpc"] = "ub"
    fused_attention: bool = False                 # softmax fused into the attention kernel (FlashMLA)
    prediction: bool = False                      # no published figure to check it against


def _choices(annotation) -> list[str] | None:
    """The strings a Literal field allows, also when it is optional (Literal[...] | None)."""
    args = get_args(annotation)
    if args and all(isinstance(a, str) for a in args):
        return list(args)
    out = []
    for a in args:
        sub = get_args(a)
        if a is type(None):
            continue
        if not (sub and all(isinstance(x, str) for x in sub)):
            return None
        out += sub
    return out or None


def _field_hint(model: type[BaseModel], field: str) -> str:
    info = model.model_fields.get(field)
    if info is None:
        return f"allowed fields: {', '.join(model.model_fields)}"
    bounds = []
    for m in info.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                bounds.append(f"{sym} {getattr(m, attr)}")
    choices = _choices(info.annotation)
    if choices:
        return "allowed: " + ", ".join(choices) + (" (or unset)" if type(None) in get_args(info.annotation) else "")
    return "allowed: " + (" and ".join(bounds) if bounds else str(info.annotation.__name__))


def _validate(model: type[BaseModel], data: dict, where: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        value = data
        for part in err["loc"]:
            value = value.get(part, "<missing>") if isinstance(value, dict) else value
        owner = model
        for part in err["loc"][:-1]:
            sub = owner.model_fields.get(str(part))
            owner = sub.annotation if sub and isinstance(sub.annotation, type) else owner
        hint = _field_hint(owner, str(err["loc"][-1]))
        raise CatalogError(f"{where}.{loc} = {value!r}: {err['msg']} ({hint})") from None


def _load_table(name: str, model: type[BaseModel], directory: Path) -> dict:
    path = directory / f"{name}.toml"
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CatalogError(f"{path}: catalog file missing") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: not valid TOML ({exc})") from None
    return {key: _validate(model, val, f"{path.name} [{key}]") for key, val in _with_bases(raw, path.name).items()}


def _with_bases(raw: dict, file: str) -> dict:
    """Resolve `base = "other"`: a variant is its base's table with its own fields laid over it
    (sub-tables such as a deployment's prefill merged field by field), so a what-if names only what
    it changes."""
    out: dict = {}

    def resolve(key: str, seen: tuple) -> dict:
        if key not in out:
            val = raw[key]
            base = val.get("base") if isinstance(val, dict) else None
            if base is None:
                out[key] = val
                return val
            if base not in raw or base in seen or not isinstance(raw[base], dict):
                why = "a cycle" if base in seen else "unknown"
                raise CatalogError(f"{file} [{key}].base = {base!r}: {why} (allowed: another table of "
                                   f"{file}: {', '.join(k for k in raw if k != key)})")
            merged = {k: dict(v) if isinstance(v, dict) else v for k, v in resolve(base, (*seen, key)).items()}
            for k, v in val.items():
                if k != "base":
                    merged[k] = {**merged[k], **v} if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
            out[key] = merged
        return out[key]

    return {key: resolve(key, ()) for key in raw}


class Catalog:
    """All catalog tables, cross-checked (a deployment names an existing system and model)."""

    def __init__(self, directory: Path = CATALOG_DIR):
        self.chips: dict[str, Chip] = _load_table("chips", Chip, directory)
        self.systems: dict[str, System] = _load_table("systems", System, directory)
        self.models: dict[str, Model] = _load_table("models", Model, directory)
        self.deployments: dict[str, Deployment] = _load_table("deployments", Deployment, directory)
        for name, s in self.systems.items():
            _ref(self.chips, s.accelerator, f"systems.toml [{name}].accelerator")
            if s.cpu:
                _ref(self.chips, s.cpu, f"systems.toml [{name}].cpu")
            check_fabric(s, self.chips[s.accelerator].dies_per_package, f"systems.toml [{name}]")
        for name, d in self.deployments.items():
            _ref(self.systems, d.system, f"deployments.toml [{name}].system")
            _ref(self.models, d.model, f"deployments.toml [{name}].model")
            check_deployment(self, name)

    def deployment(self, name: str) -> Deployment:
        return _ref(self.deployments, name, "deployment")

    def system(self, name: str) -> System:
        return _ref(self.systems, name, "system")

    def model(self, name: str) -> Model:
        return _ref(self.models, name, "model")

    def chip(self, name: str) -> Chip:
        return _ref(self.chips, name, "chip")


def _ref(table: dict, key: str, where: str):
    if key not in table:
        raise CatalogError(f"{where} = {key!r}: unknown (allowed: {', '.join(sorted(table))})")
    return table[key]


def check_fabric(s: System, dies_per_package: int, where: str) -> None:
    """Refuse a fabric description the topology cannot build; say which field and what is allowed."""
    if s.kind != "supernode":
        if s.fabric or s.mesh_dims or s.unified_scaleout:
            raise CatalogError(f"{where}.fabric = {s.fabric!r}: a {s.kind} has no UB fabric (allowed: leave "
                               "fabric and mesh_dims unset, or kind = \"supernode\")")
        return
    if s.ub_fabric == "ub-clos-2tier":
        if not (s.l1_per_node and s.l2_per_subplane and s.l1_l2_link_gbps):
            raise CatalogError(f"{where}: fabric ub-clos-2tier needs l1_per_node, subplanes, l2_per_subplane "
                               "and l1_l2_link_gbps > 0")
        if s.l1_per_node != s.subplanes:
            raise CatalogError(f"{where}.l1_per_node = {s.l1_per_node}: must equal subplanes = {s.subplanes} "
                               "(L1 chip k of every node belongs to sub-plane k)")
        if s.mesh_dims or s.mesh_link_gbps:
            raise CatalogError(f"{where}.mesh_dims: only for fabric = \"nd-fullmesh\"")
        return
    dies, per_node = s.nodes * s.npus_per_node * dies_per_package, s.npus_per_node * dies_per_package
    dims = s.mesh_dims
    if not dims or any(d < 2 for d in dims) or len(s.mesh_link_gbps) != len(dims) \
            or any(g <= 0 for g in s.mesh_link_gbps):
        raise CatalogError(f"{where}.mesh_dims = {list(dims)}: fabric nd-fullmesh needs mesh_dims (each >= 2) "
                           f"and mesh_link_gbps > 0 of the same length (got {list(s.mesh_link_gbps)})")
    prod, prefixes = 1, {1}
    for d in dims:
        prod *= d
        prefixes.add(prod)
    if prod != dies or per_node not in prefixes:
        raise CatalogError(f"{where}.mesh_dims = {list(dims)}: the product must equal the {dies} dies and the "
                           f"innermost dimensions must multiply to the {per_node} dies of a node")


def check_deployment(cat: Catalog, name: str, dep: Deployment | None = None) -> None:
    """Refuse deployments that cannot exist: too many dies, experts that do not fit, no FP8 on Ascend."""
    dep = dep or cat.deployments[name]
    sysm, model = cat.systems[dep.system], cat.models[dep.model]
    chip = cat.chips[sysm.accelerator]
    where = f"deployments.toml [{name}]"
    dies_total = sysm.nodes * sysm.npus_per_node * chip.dies_per_package
    used = sum(p.instances * p.dies_per_instance for p in (dep.prefill, dep.decode))
    if used > dies_total:
        raise CatalogError(f"{where}: uses {used} dies but {dep.system} has {dies_total} "
                           f"(allowed: at most {dies_total})")
    for field, value, kinds in (("precision", dep.precision, ("int8", "bf16", "fp8")),
                                ("moe_precision", dep.moe_precision, PRECISIONS),
                                ("attention_dtype", dep.attention_dtype, ("bf16", "fp8"))):
        if value and chip.peak_tflops(value) <= 0:
            raise CatalogError(f"{where}.{field} = {value!r}: {sysm.accelerator} has no such data type "
                               f"(allowed: {', '.join(p for p in kinds if chip.peak_tflops(p) > 0)})")
    for pool_name in ("prefill", "decode"):
        pool: Pool = getattr(dep, pool_name)
        if pool.instances == 0:
            continue
        if pool.ep > pool.dies_per_instance or pool.dies_per_instance % pool.ep:
            raise CatalogError(f"{where}.{pool_name}.ep = {pool.ep}: must divide dies_per_instance "
                               f"= {pool.dies_per_instance}")
        slots = model.routed_experts + pool.redundant_experts + pool.shared_expert_dies
        if slots % pool.ep:
            raise CatalogError(f"{where}.{pool_name}.ep = {pool.ep}: {slots} expert slots "
                               f"({model.routed_experts} routed + {pool.redundant_experts} redundant + "
                               f"{pool.shared_expert_dies} shared-expert dies) cannot be spread evenly over "
                               f"{pool.ep} dies (allowed: a divisor of {slots})")
    if sysm.unified_scaleout and (dep.kv_transfer_plane, dep.cache_plane) != ("ub", "ub"):
        raise CatalogError(f"{where}: {dep.system} has one scale-out plane over UB, no RDMA or VPC "
                           f"(kv_transfer_plane = {dep.kv_transfer_plane!r}, cache_plane = {dep.cache_plane!r}; "
                           "allowed: \"ub\" for both)")
    if dep.ems_nodes > sysm.nodes:
        raise CatalogError(f"{where}.ems_nodes = {dep.ems_nodes}: allowed 0..{sysm.nodes}")
    pm = Geometry(dep, model, chip, constants())
    fits = pm.max_batch_per_die(dep.context_tokens)
    if dep.decode.instances and dep.decode.batch_per_die > fits:
        raise CatalogError(f"{where}.decode.batch_per_die = {dep.decode.batch_per_die}: the KV cache of "
                           f"{dep.context_tokens}-token sequences fits at most {fits} per die "
                           f"({pm.kv_capacity_bytes_per_die() / 1e9:.1f} GB free after weights and buffers)")


@lru_cache(maxsize=1)
def constants() -> dict:
    """The time predictors' own constants (twin/catalog/perf.toml), each sourced or labelled there."""
    return tomllib.loads((CATALOG_DIR / "perf.toml").read_text())


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The packaged catalog, loaded and validated once per process."""
    return Catalog()
