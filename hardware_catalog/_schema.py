"""Frozen dataclasses of the hardware catalog: GPUs, machines, LLMs and the catalog.

Units are in the field names. GB = 1e9 bytes; memory and intra-machine links in GB/s
(one direction), networks in Gbit/s, power in W, prices in US dollars per hour.

Each field's metadata holds the rule the loader checks (``"rule"``: text and predicate)
or says the loader fills the field itself (``"derived"``: from what), so the schema and
its validation live in one place. Dict fields are left out of the hash, so entries can
be dict keys or ``lru_cache`` arguments.
"""

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import CatalogError, UnknownNameError


def _rule(text: str, ok: Callable[[Any], bool]) -> dict:
    return {"rule": (text, ok)}


def _is_date(text: str) -> bool:
    """``YYYY`` or a real calendar date ``YYYY-MM-DD``."""
    if re.fullmatch(r"\d{4}", text):
        return True
    try:
        return len(text) == 10 and bool(datetime.date.fromisoformat(text))
    except ValueError:
        return False


def _one_of(*choices: str) -> dict:
    return _rule("one of " + ", ".join(map(repr, choices)), lambda v: v in choices)


_POSITIVE = _rule("> 0", lambda v: v > 0)
_FRACTION = _rule("in (0, 1]", lambda v: 0 < v <= 1)
_DATE = _rule("a date 'YYYY-MM-DD' or a year 'YYYY'", _is_date)
_CITED = _rule("a non-empty table of citations", bool)
_PRICES = _rule("a non-empty table of prices > 0", lambda d: bool(d) and all(v > 0 for v in d.values()))
_FROM_FILE_NAME = {"derived": "the file name"}


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator as deployed in its usual server.

    ``dense_fp16_tflops`` is the dense (no sparsity) fp16/bf16 tensor-core peak in TFLOP/s;
    ``intra_link_bandwidth_gb_per_s`` is per GPU and per direction; ``nic_bandwidth_gbps``
    is the inter-machine network per GPU in Gbit/s; ``price_usd_per_h`` is a cloud price per
    GPU-hour, or None where none is published. ``sources`` maps a field name (or "*" for
    the whole entry) to its citation; ``as_of`` is "YYYY-MM-DD" or "YYYY".
    """

    name: str = field(metadata=_FROM_FILE_NAME)
    display_name: str
    vendor: str
    dense_fp16_tflops: float = field(metadata=_POSITIVE)
    hbm_bandwidth_gb_per_s: float = field(metadata=_POSITIVE)
    hbm_capacity_gb: float = field(metadata=_POSITIVE)
    tdp_w: float = field(metadata=_POSITIVE)
    intra_link: str = field(metadata=_one_of("nvlink", "pcie", "infinity-fabric"))
    intra_link_bandwidth_gb_per_s: float = field(metadata=_POSITIVE)
    nic_bandwidth_gbps: float = field(metadata=_POSITIVE)
    price_usd_per_h: float | None = field(metadata=_POSITIVE)
    sources: dict[str, str] = field(hash=False, metadata=_CITED)
    as_of: str = field(metadata=_DATE)


@dataclass(frozen=True, slots=True)
class Machine:
    """One server: ``gpus_per_machine`` GPUs of type ``gpu`` (a GPU name in the catalog).

    ``cost_usd_per_h`` is the price of the whole machine under ``default_cost_option``, one
    of the labelled alternatives in ``cost_options_usd_per_h`` (label -> $/machine-hour).
    ``rated_power_w`` is the provisioned machine power with uncapped GPUs, and
    ``gpu_power_fraction`` the share of it drawn by the GPUs (see ``power_w``).
    ``nic_bandwidth_gbps_per_gpu`` is the inter-machine network per GPU in Gbit/s.
    ``host_memory_gb`` is the machine's CPU memory (DRAM) and ``host_link_gb_per_s_per_gpu``
    each GPU's link to it (PCIe, one direction), GB/s: where swap preemption puts KV caches.
    """

    name: str = field(metadata=_FROM_FILE_NAME)
    display_name: str
    gpu: str
    gpus_per_machine: int = field(metadata=_POSITIVE)
    cost_usd_per_h: float = field(metadata={"derived": "cost_options_usd_per_h[default_cost_option]"})
    cost_options_usd_per_h: dict[str, float] = field(hash=False, metadata=_PRICES)
    default_cost_option: str
    rated_power_w: float = field(metadata=_POSITIVE)
    gpu_power_fraction: float = field(metadata=_FRACTION)
    nic_bandwidth_gbps_per_gpu: float = field(metadata=_POSITIVE)
    inter_node_link: str = field(metadata=_one_of("infiniband", "ethernet"))
    sources: dict[str, str] = field(hash=False, metadata=_CITED)
    as_of: str = field(metadata=_DATE)
    # Host side (swap preemption: KV copied to CPU memory); None where not catalogued.
    host_memory_gb: float | None = field(default=None, metadata=_POSITIVE)
    host_link_gb_per_s_per_gpu: float | None = field(default=None, metadata=_POSITIVE)

    def power_w(self, power_cap):
        """Machine power in W with every GPU capped to ``power_cap`` of its TDP.

        ``power_cap`` is a scalar or array of fractions in (0, 1]; the result has its shape.
        Only the GPU share scales: ``rated * (1 - gpu_power_fraction * (1 - power_cap))``,
        e.g. DGX-H100 at 0.5 gives 0.7 x rated (Splitwise's Hcap machine).
        """
        cap = np.asarray(power_cap, dtype=float)
        bad = cap[~((cap > 0) & (cap <= 1))]
        if bad.size:
            raise ValueError(
                f"power_cap must be in (0, 1], a fraction of the GPU TDP (got {bad.flat[0]:g}"
                f"{f' and {bad.size - 1} more' if bad.size > 1 else ''})"
            )
        return self.rated_power_w * (1.0 - self.gpu_power_fraction * (1.0 - cap))


@dataclass(frozen=True, slots=True)
class LLM:
    """A decoder-only transformer served with ``bytes_per_param`` bytes per weight.

    ``ffn_type`` is "swiglu" (3 FFN matrices) or "gelu" (2); ``published_params`` is the
    parameter count as published (e.g. 70e9). The derived counts below ignore norms and
    biases (well under 0.1% of the weights of every shipped model).
    """

    name: str = field(metadata=_FROM_FILE_NAME)
    display_name: str
    n_layers: int = field(metadata=_POSITIVE)
    hidden_size: int = field(metadata=_POSITIVE)
    n_heads: int = field(metadata=_POSITIVE)
    n_kv_heads: int = field(metadata=_POSITIVE)
    ffn_size: int = field(metadata=_POSITIVE)
    ffn_type: str = field(metadata=_one_of("swiglu", "gelu"))
    vocab_size: int = field(metadata=_POSITIVE)
    bytes_per_param: float = field(metadata=_POSITIVE)
    tied_embeddings: bool
    published_params: float = field(metadata=_POSITIVE)
    sources: dict[str, str] = field(hash=False, metadata=_CITED)
    as_of: str = field(metadata=_DATE)

    @property
    def head_dim(self) -> int:
        """Width of one attention head: hidden_size // n_heads."""
        return self.hidden_size // self.n_heads

    @property
    def attn_params_per_layer(self) -> int:
        """Q and O projections (hidden x heads*head_dim each) plus K and V (hidden x kv_heads*head_dim each)."""
        q_width, kv_width = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        return 2 * self.hidden_size * q_width + 2 * self.hidden_size * kv_width

    @property
    def ffn_params_per_layer(self) -> int:
        """3 (SwiGLU: gate, up, down) or 2 (GeLU: up, down) matrices of hidden x ffn_size."""
        return (3 if self.ffn_type == "swiglu" else 2) * self.hidden_size * self.ffn_size

    @property
    def matmul_params(self) -> int:
        """Weights read by the per-token GEMMs of all layers (embeddings excluded)."""
        return self.n_layers * (self.attn_params_per_layer + self.ffn_params_per_layer)

    @property
    def params(self) -> int:
        """matmul_params plus the embedding (and, if untied, the LM head): vocab x hidden each."""
        return self.matmul_params + (1 if self.tied_embeddings else 2) * self.vocab_size * self.hidden_size

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights: params x bytes_per_param."""
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes_per_param."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_param


@dataclass(frozen=True, eq=False)
class Catalog:
    """GPUs, machines and models by name (each dict sorted by name). Treat as read-only:
    the default catalog is shared by every caller of ``load_catalog()``."""

    gpus: dict[str, GPU]
    machines: dict[str, Machine]
    models: dict[str, LLM]

    def gpu(self, name: str) -> GPU:
        """The GPU called ``name``; UnknownNameError (with suggestions) if there is none."""
        return _lookup(self.gpus, "gpu", name)

    def machine(self, name: str) -> Machine:
        """The machine called ``name``; UnknownNameError (with suggestions) if there is none."""
        return _lookup(self.machines, "machine", name)

    def model(self, name: str) -> LLM:
        """The LLM called ``name``; UnknownNameError (with suggestions) if there is none."""
        return _lookup(self.models, "model", name)

    def machine_for_gpu(self, gpu: str) -> Machine:
        """The default server of GPU ``gpu``: its 8-GPU machine if there is one, else the
        machine with the most GPUs; ties go to the first name."""
        self.gpu(gpu)
        holders = [m for m in self.machines.values() if m.gpu == gpu]
        if not holders:
            raise CatalogError(f"no machine in the catalog holds gpu {gpu!r}; add one under machines/")
        return min(holders, key=lambda m: (m.gpus_per_machine != 8, -m.gpus_per_machine, m.name))


def _lookup(entries: dict, kind: str, name: str):
    try:
        return entries[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise UnknownNameError(kind, name, entries) from None
