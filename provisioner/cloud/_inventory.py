"""Cloud inventories (TOML): rented nodes, their prices and the network between them.

An inventory lists `[[nodes]]` entries, each a catalog machine (`type = "a40-8x"`) or an
inline GPU node (`name`, `gpu = "a100-80gb"`, `gpus = 8`), with `count` (default 1),
`price_usd_per_h` (default: the catalog's price of the node), `available` (a price
list's limit for `--goal cost`; then `count` defaults to 0), `intra_link_gb_per_s`
(default: the GPU's intra-node link; its TP all-reduces, KV sends and pipeline hand-offs
inside the node run over it) and `nic_gbps` (the node's network card, each
direction, shared by all its inter-node links; default `[network] nic_gbps`, else none:
each node pair's link is its own). `[network]` gives `inter_node_gbps` (each node pair's
link) and `inter_node_latency_ms`, or a full `bandwidth_gbps` matrix over the expanded
nodes, and optionally `nic_gbps`. The matrix is directed: row i, column j is the link
from node i to node j (i's egress towards j), read so by every use (a prefill node's KV
to its decode node, a pipeline stage's activations to the next), so an asymmetric matrix
(egress limits) is honoured as given; its diagonal is not read (the intra-node link).
At most `MAX_GPUS` GPUs; numbers within physical ranges (`GBPS_RANGE`, ...). Every error
names the file, the line and the field.
"""

from __future__ import annotations

import itertools
import re
import tomllib
import unicodedata
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from hardware_catalog import Catalog, decode_text, load_catalog, read_input

from .._validation import PRICE_USD_PER_H_RANGE, toml_float
from ..errors import ProvisionerError

_SHIPPED_DIR = resources.files("hardware_catalog") / "data" / "inventories"
# The examples `--inventory NAME` finds: every TOML file in the catalog's inventories folder.
SHIPPED = tuple(sorted((f.name[:-len(".toml")] for f in _SHIPPED_DIR.iterdir() if f.name.endswith(".toml")),
                       key=lambda name: (name != "thunderserve-32gpu", name)))
_NODE_KEYS = {"type", "name", "gpu", "gpus", "count", "price_usd_per_h", "available", "intra_link_gb_per_s",
              "nic_gbps"}
_NET_KEYS = {"inter_node_gbps", "inter_node_latency_ms", "bandwidth_gbps", "nic_gbps"}
# Physical ranges of the numbers (beyond them the model's arithmetic overflows, and no
# cluster network is 1 Mbps or 100 Tbps per link, or takes 10 s per message).
GBPS_RANGE = (1e-3, 1e5)              # inter-node links and NICs, Gbps
LINK_GB_PER_S_RANGE = (1e-3, 1e5)     # intra-node links, GB/s per GPU
LATENCY_MS_RANGE = (0.0, 1e4)
# GPUs of an inline node: a node is cut into tensor-parallel groups of 1, 2, 4 or 8 GPUs
# that divide it (real cloud nodes have 1, 2, 4, 8 or 16)
NODE_GPUS = (1, 2, 4, 8, 16)
# The tabu search's time grows ~5x per doubling of GPUs (2 cores: 64 GPUs ~15 s, 128 ~70 s,
# 256 more than 12 minutes): an inventory is at most this many GPUs (counts, and `available`).
MAX_GPUS = 128
# The fewest replicas an inventory's nodes make (two nodes of up to 8 GPUs in a pipeline, a
# 16-GPU node two TP-8 replicas) is at most the search's `_search.MAX_GROUPS`: 128 one-GPU
# nodes, at least 64 replicas, ran past 300 s.
MAX_FEWEST_REPLICAS = 48


@dataclass(frozen=True)
class NodeType:
    """One kind of node of an inventory (a `[[nodes]]` entry)."""

    name: str
    gpu: str                    # catalog GPU name
    gpus: int                   # GPUs per node
    count: int                  # nodes in the inventory
    price_usd_per_h: float      # per node
    available: int | None       # price list: how many may be rented (None: no limit given)
    intra_link_gb_per_s: float  # per GPU, per direction
    nic_gbps: float | None = None   # the node's NIC, per direction, shared by its inter-node links


@dataclass(frozen=True)
class Inventory:
    """Node types and the network; `nodes` expands the counts (one entry per rented node)."""

    name: str
    types: tuple[NodeType, ...]
    inter_node_gbps: float
    inter_node_latency_s: float
    bandwidth_gbps: np.ndarray | None = None   # (nodes, nodes) when given in full
    bandwidth_at: str | None = None            # "file:line" of the matrix, for errors
    removed: tuple[str, ...] = ()              # nodes taken out (`without`): the others keep their names

    @property
    def nodes(self) -> list[tuple[str, int]]:
        """(node name, type index) per node: `a40-8x-0`, `a40-8x-1`, ... in file order,
        skipping the names of removed nodes (so `a6000-4x-1` stays `a6000-4x-1`)."""
        out = []
        for i, t in enumerate(self.types):
            names = (f"{t.name}-{k}" for k in itertools.count())
            out += [(n, i) for n in itertools.islice((n for n in names if n not in self.removed), t.count)]
        return out

    @property
    def n_gpus(self) -> int:
        return sum(t.gpus * t.count for t in self.types)

    @property
    def cost_usd_per_h(self) -> float:
        return sum(t.price_usd_per_h * t.count for t in self.types)

    def rentable_counts(self) -> list[int]:
        """Per node type, how many nodes may be rented: `available` where the price list gives
        it, else the count (what the inventory has)."""
        return [t.count if t.available is None else t.available for t in self.types]

    def link_gbps(self) -> np.ndarray:
        """(nodes, nodes) inter-node bandwidth, Gbps (diagonal: inf, the intra-node link is separate)."""
        n = len(self.nodes)
        bw = np.full((n, n), float(self.inter_node_gbps)) if self.bandwidth_gbps is None else self.bandwidth_gbps.copy()
        np.fill_diagonal(bw, np.inf)
        return bw

    def nic_gbps(self) -> np.ndarray:
        """(nodes,) each node's NIC bandwidth per direction, Gbps (inf: none given, only the
        pair links bind)."""
        return np.array([np.inf if self.types[ti].nic_gbps is None else self.types[ti].nic_gbps
                         for _, ti in self.nodes])

    def network_text(self) -> str:
        """The network in words, for the answer: '40 Gbps per node pair, 0.5 ms; network cards
        of 40 Gbps' (or each type's card; or 'no network cards': each pair's link its own)."""
        links = (f"a bandwidth matrix ({self.bandwidth_at})" if self.bandwidth_gbps is not None and self.bandwidth_at
                 else "a bandwidth matrix" if self.bandwidth_gbps is not None
                 else f"{self.inter_node_gbps:g} Gbps per node pair")
        cards = {t.name: t.nic_gbps for t in self.types if t.count}
        if all(v is None for v in cards.values()):
            nic = "no network cards (each node pair's link its own)"
        elif len(set(cards.values())) == 1:
            nic = f"network cards of {next(iter(cards.values())):g} Gbps"
        else:
            nic = "network cards " + ", ".join(f"{n} {'none' if v is None else f'{v:g} Gbps'}" for n, v in cards.items())
        return f"{links}, {self.inter_node_latency_s * 1e3:g} ms; {nic}"

    def with_counts(self, counts) -> "Inventory":
        """The same node types with other counts (a full matrix no longer applies)."""
        types = tuple(replace(t, count=int(c)) for t, c in zip(self.types, counts))
        return replace(self, types=types, bandwidth_gbps=None)

    def with_bandwidth(self, gbps: float) -> "Inventory":
        """Every node pair's link at `gbps` (`--inter-node-gbps`; a matrix no longer applies)."""
        return replace(self, inter_node_gbps=_gbps(gbps, "inter_node_gbps"), bandwidth_gbps=None)

    def with_nic(self, gbps: float) -> "Inventory":
        """Every node's NIC at `gbps` per direction (`--nic-gbps`)."""
        gbps = _gbps(gbps, "nic_gbps")
        return replace(self, types=tuple(replace(t, nic_gbps=gbps) for t in self.types))

    def without(self, node: str) -> tuple["Inventory", int]:
        """The inventory less one named node; also that node's index in `nodes`."""
        node = unicodedata.normalize("NFC", node)
        names = [n for n, _ in self.nodes]
        if node not in names:
            raise ProvisionerError(f"without: no node '{node}' in inventory {self.name}; its nodes are "
                                   f"{', '.join(names)}", params=("without",))
        if len(names) == 1:
            raise ProvisionerError(f"without: {node} is the only node of inventory {self.name}, so nothing is "
                                   f"left to re-plan on; drop without, or add nodes to the inventory",
                                   params=("without",))
        k = names.index(node)
        ti = self.nodes[k][1]
        counts = [t.count - (i == ti) for i, t in enumerate(self.types)]
        bw = None
        if self.bandwidth_gbps is not None:
            keep = [i for i in range(len(names)) if i != k]
            bw = self.bandwidth_gbps[np.ix_(keep, keep)]
        return replace(self.with_counts(counts), bandwidth_gbps=bw, removed=self.removed + (node,)), k


def load_inventory(spec: str | Path, catalog=None) -> Inventory:
    """An inventory from a TOML path or a shipped example's name (`thunderserve-32gpu`), its
    node types looked up in `catalog` (a `hardware_catalog.Catalog`; None: the shipped one)."""
    catalog = _catalog(catalog)
    if not str(spec).strip():   # '' is the current directory to Path
        raise ProvisionerError(f"--inventory is empty: give a TOML file or a shipped example: {', '.join(SHIPPED)}")
    path = Path(str(spec))
    if str(spec) in SHIPPED and not path.exists():
        text, where = (_SHIPPED_DIR / f"{spec}.toml").read_text(encoding="utf-8"), f"{spec}.toml"
    else:
        try:   # a BOM (Notepad) or UTF-16 (PowerShell's `>`) reads as written, as every file a user gives
            text, where = decode_text(read_input(path), universal_newlines=True), str(path)
        except OSError as exc:
            raise ProvisionerError(f"--inventory: cannot read '{spec}' ({exc.strerror or exc}); "
                                   f"give a TOML file or a shipped example: {', '.join(SHIPPED)}") from None
        except UnicodeDecodeError:
            raise ProvisionerError(f"--inventory: '{spec}' is not UTF-8 or UTF-16 text; save it as a UTF-8 "
                                   f"TOML file") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(where, text, exc) from None
    except ValueError:   # Python refuses to read an integer of over 4,300 digits
        raise ProvisionerError(f"{where}: a number has over 4,300 digits; give a real value") from None
    return _parse(raw, _Locator(where, text), catalog, default_name=path.stem)


def _catalog(catalog) -> Catalog:
    """None is the shipped catalog, as for `LatencyModel`; anything else not a catalog was
    refused only at the first node, as "nodes[1].type: 'NoneType' object has no attribute 'machine'"."""
    if catalog is None:
        return load_catalog()
    if not isinstance(catalog, Catalog):
        raise ProvisionerError(f"catalog must be a hardware_catalog.Catalog, e.g. perf.catalog or load_catalog(), "
                               f"got {catalog!r:.40}", params=("catalog",))
    return catalog


def _syntax_error(where: str, text: str, exc: Exception) -> ProvisionerError:
    """`file:line: key: not valid TOML (...)`: the line tomllib names, and the key on it."""
    at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
    if at is None:
        return ProvisionerError(f"{where}: not valid TOML ({exc}); fix the syntax")
    line = int(at.group(1))
    lines = text.splitlines()
    key = re.match(r"^\s*([A-Za-z0-9_-]+)\s*=", lines[line - 1]) if 0 < line <= len(lines) else None
    field = f" {key.group(1)}:" if key else ""
    why = str(exc)[:at.start()].strip()
    if why == "Cannot overwrite a value" and key:
        why = f"'{key.group(1)}' is given twice in one table; keep one"
    return ProvisionerError(f"{where}:{line}:{field} not valid TOML ({why}); fix the syntax")


def _is_header(line: str, name: str, array: bool = False) -> bool:
    """Whether `line` opens the table `[name]` (`[[name]]` with `array`); spaces inside the
    brackets and a trailing comment are valid TOML (`[[ nodes ]]  # big`)."""
    opening, closing = (r"\[\[", r"\]\]") if array else (r"\[", r"\]")
    return re.match(rf"^\s*{opening}\s*{re.escape(name)}\s*{closing}\s*(#.*)?$", line) is not None


class _Locator:
    """File:line of a field: the line of `key =` in the k-th `[[nodes]]` (or `[network]`)."""

    def __init__(self, where: str, text: str):
        self.where, self.lines = where, text.splitlines()

    def error(self, field: str, message: str, node: int | None = None, section: str | None = None) -> ProvisionerError:
        line = self._line(field.split(".")[-1], node, section)
        return ProvisionerError(f"{self.where}:{line}: {field}: {message}")

    def _line(self, key: str, node: int | None, section: str | None) -> int:
        start, seen = 0, -1
        for i, text in enumerate(self.lines):
            if node is not None and _is_header(text, "nodes", array=True):
                seen += 1
                if seen == node:
                    start = i
            elif section is not None and _is_header(text, section):
                start = i
        if node is not None and seen < node:
            start = 0
        pattern = re.compile(rf"^\s*({re.escape(key)}\s*=|\[\[?\s*{re.escape(key)}\s*\]\]?\s*(#.*)?$)")
        for i in range(start, len(self.lines)):
            if pattern.match(self.lines[i]):
                return i + 1
        return start + 1


def _parse(raw: dict, loc: _Locator, catalog, default_name: str) -> Inventory:
    unknown = set(raw) - {"name", "source", "network", "nodes"}
    if unknown:
        key = sorted(unknown)[0]
        raise loc.error(key, "unknown field; an inventory has name, source, [network] and [[nodes]]")
    nodes = raw.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise loc.error("nodes", "no [[nodes]] entries: list at least one node type")
    if "name" in raw and not _is_name(raw["name"]):
        raise loc.error("name", f"must be a non-empty string without control characters (got {raw['name']!r})")
    net = raw.get("network", {})
    if not isinstance(net, dict):
        raise loc.error("network", "must be a table [network]")
    for key in sorted(set(net) - _NET_KEYS):
        raise loc.error(f"network.{key}", f"unknown field; use {', '.join(sorted(_NET_KEYS))}", section="network")
    nic = None if "nic_gbps" not in net else _number(net["nic_gbps"], "network.nic_gbps", loc, None, "network",
                                                       bounds=GBPS_RANGE, unit="Gbps")
    types = tuple(_node(entry, k, loc, catalog, nic) for k, entry in enumerate(nodes))
    for what, per_type in (("count", lambda t: t.count), ("available", lambda t: t.available or 0)):
        total = small = big = 0
        for k, t in enumerate(types):
            total += t.gpus * per_type(t)
            if total > MAX_GPUS:
                # the field that crossed the limit: count or available if given, else an inline
                # node's gpus; a catalog node of default count 1 is one node too many
                key = what if what in nodes[k] or what == "available" else ("gpus" if "gpus" in nodes[k] else "type")
                fix = f"lower {key}" if key != "type" else "list fewer nodes"
                raise loc.error(f"nodes[{k + 1}].{key}", f"the inventory reaches {total} GPUs here; provision "
                                f"cloud plans at most {MAX_GPUS} (the search's time grows ~5x per doubling): "
                                f"{fix} or split the inventory", node=k)
            small, big = (small, big + per_type(t)) if t.gpus > 8 else (small + per_type(t), big)
            fewest = (small + 1) // 2 + 2 * big
            if fewest > MAX_FEWEST_REPLICAS:   # a node too many: its count, else the entry (a default count of 1)
                key = what if what in nodes[k] or what == "available" else ("gpu" if "gpu" in nodes[k] else "type")
                fix = f"lower {key}" if key in ("count", "available") else "list fewer nodes"
                raise loc.error(f"nodes[{k + 1}].{key}", f"the inventory's nodes make at least {fewest} replicas here "
                                f"(two nodes of up to 8 GPUs in a pipeline, a 16-GPU node two); provision cloud plans "
                                f"at most {MAX_FEWEST_REPLICAS}: {fix}, use larger nodes, or split the inventory",
                                node=k)
    names = [t.name for t in types]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        second = len(names) - 1 - names[::-1].index(dup)
        key = "name" if "name" in nodes[second] else "type" if "type" in nodes[second] else "gpu"
        raise loc.error(f"nodes[{second + 1}].{key}", f"'{dup}' appears twice: give one entry a different "
                        f"name, or raise the first entry's count", node=second)
    gbps = _number(net.get("inter_node_gbps", 40.0), "network.inter_node_gbps", loc, None, "network",
                   bounds=GBPS_RANGE, unit="Gbps")
    lat_ms = _number(net.get("inter_node_latency_ms", 0.5), "network.inter_node_latency_ms", loc, None, "network",
                     allow_zero=True, bounds=LATENCY_MS_RANGE, unit="ms")
    inv = Inventory(name=str(raw.get("name", default_name)), types=types, inter_node_gbps=gbps,
                    inter_node_latency_s=lat_ms / 1e3)
    if "bandwidth_gbps" in net:
        if "inter_node_gbps" in net:   # one of them would be ignored
            raise loc.error("network.inter_node_gbps", "give either inter_node_gbps (every node pair) or a "
                            "bandwidth_gbps matrix, not both", section="network")
        inv = replace(inv, bandwidth_gbps=_matrix(net["bandwidth_gbps"], len(inv.nodes), loc),
                      bandwidth_at=f"{loc.where}:{loc._line('bandwidth_gbps', None, 'network')}")
    return inv


def _gbps(gbps, param: str) -> float:
    """A bandwidth given to the Python API or a flag, within GBPS_RANGE."""
    lo, hi = GBPS_RANGE
    if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not lo <= gbps <= hi:
        raise ProvisionerError(f"{param} must be between {lo:g} and {hi:g} Gbps (got {gbps!r})", params=(param,))
    return float(gbps)


def _is_name(value) -> bool:
    """A non-empty string of one line: no control or format characters (a newline, a tab, a
    right-to-left override) to break or disguise the tables and errors that print it."""
    return (isinstance(value, str) and value.strip() != ""
            and not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in value))


def _node(entry, k: int, loc: _Locator, catalog, default_nic_gbps: float | None) -> NodeType:
    field = f"nodes[{k + 1}]"
    if not isinstance(entry, dict):
        raise loc.error(field, "must be a table [[nodes]]", node=k)
    for key in sorted(set(entry) - _NODE_KEYS):
        raise loc.error(f"{field}.{key}", f"unknown field; use {', '.join(sorted(_NODE_KEYS))}", node=k)
    if "type" in entry:
        try:
            machine = catalog.machine(str(entry["type"]))
        except Exception as exc:
            raise loc.error(f"{field}.type", str(exc).splitlines()[0], node=k) from None
        name, gpu_name, gpus = entry.get("name", machine.name), machine.gpu, machine.gpus_per_machine
        price = machine.cost_usd_per_h
        if "gpu" in entry or "gpus" in entry:
            raise loc.error(f"{field}.gpu", "give either type (a catalog node) or gpu + gpus (inline)", node=k)
    elif "gpu" in entry:
        gpu_name, name = str(entry["gpu"]), entry.get("name", f"{entry['gpu']}-node")
        allowed = ", ".join(map(str, NODE_GPUS))
        if "gpus" not in entry:
            raise loc.error(f"{field}.gpus", f"missing: an inline node gives gpu and gpus (GPUs per node: "
                            f"{allowed})", node=k)
        gpus = entry["gpus"]
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus not in NODE_GPUS:
            raise loc.error(f"{field}.gpus", f"must be one of {allowed} (got {gpus!r}): a node is cut into "
                            f"tensor-parallel groups of 1, 2, 4 or 8 GPUs that divide it; list an odd node's "
                            f"GPUs as nodes of those sizes", node=k)
        gpus = int(gpus)
        price = None
    else:
        raise loc.error(f"{field}.type", "missing: give type (a catalog node such as a40-8x) or gpu + gpus",
                        node=k)
    if not _is_name(name):
        raise loc.error(f"{field}.name", f"must be a non-empty string without control characters, the node's "
                        f"name in --without and the answer (got {name!r})", node=k)
    try:
        gpu = catalog.gpu(gpu_name)
    except Exception as exc:
        raise loc.error(f"{field}.gpu", str(exc).splitlines()[0], node=k) from None
    if "price_usd_per_h" in entry or price is None:
        if "price_usd_per_h" not in entry:
            price = gpu.price_usd_per_h * gpus if getattr(gpu, "price_usd_per_h", None) else None
        else:
            price = _number(entry["price_usd_per_h"], f"{field}.price_usd_per_h", loc, k, allow_zero=True,
                            bounds=PRICE_USD_PER_H_RANGE, unit="$/h")
        if price is None:
            raise loc.error(f"{field}.price_usd_per_h", "missing: the catalog has no price for this GPU", node=k)
    available = None if "available" not in entry else _integer(entry["available"], f"{field}.available", loc, k,
                                                               low=0)
    count = _integer(entry.get("count", 1 if available is None else 0), f"{field}.count", loc, k, low=0)
    if available is not None and count > available:
        raise loc.error(f"{field}.count", f"{count} nodes but only {available} available: lower count",
                        node=k)
    link = _number(entry.get("intra_link_gb_per_s", gpu.intra_link_bandwidth_gb_per_s),
                   f"{field}.intra_link_gb_per_s", loc, k, bounds=LINK_GB_PER_S_RANGE, unit="GB/s")
    nic = default_nic_gbps if "nic_gbps" not in entry else _number(
        entry["nic_gbps"], f"{field}.nic_gbps", loc, k, bounds=GBPS_RANGE, unit="Gbps")
    # one spelling of a name: 'café' typed as é or as e + combining accent was two nodes,
    # and which one --without removed hung on how the shell encoded it
    return NodeType(name=unicodedata.normalize("NFC", str(name)), gpu=gpu.name, gpus=gpus, count=count,
                    price_usd_per_h=float(price),
                    available=available, intra_link_gb_per_s=link, nic_gbps=nic)


def _number(value, field, loc, node, section=None, allow_zero=False, bounds=None, unit="") -> float:
    number = toml_float(value)
    if number is None or number < 0 or (number == 0 and not allow_zero):
        bound = f"between {bounds[0]:g} and {bounds[1]:g} {unit}" if bounds else ">= 0" if allow_zero else "> 0"
        raise loc.error(field, f"must be a finite number {bound} (got {_shown(value)})", node=node, section=section)
    if bounds is not None and not bounds[0] <= number <= bounds[1]:
        raise loc.error(field, f"must be between {bounds[0]:g} and {bounds[1]:g} {unit} (got {_shown(value)})",
                        node=node, section=section)
    return number


def _shown(value) -> str:
    """The value as written, a long integer cut to its digit count (one short line)."""
    text = repr(value)
    return f"{text[:6]}... ({len(text)} digits)" if isinstance(value, int) and len(text) > 20 else text


def _integer(value, field, loc, node, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise loc.error(field, f"must be a whole number >= {low} (got {_shown(value)})", node=node)
    return int(value)


def _matrix(value, n: int, loc: _Locator) -> np.ndarray:
    field = "network.bandwidth_gbps"
    rows = value if isinstance(value, list) else [value]
    for row in rows:
        for x in (row if isinstance(row, list) else [row]):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise loc.error(field, f"must be a {n}x{n} matrix of numbers (Gbps; got {x!r})", section="network")
    try:
        m = np.array(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise loc.error(field, f"must be a {n}x{n} matrix of numbers (Gbps)", section="network") from None
    if m.shape != (n, n):
        raise loc.error(field, f"must be {n}x{n} (one row per node, in file order; got shape {m.shape})",
                        section="network")
    off = m[~np.eye(n, dtype=bool)]
    if np.any(~np.isfinite(off)) or np.any(off < GBPS_RANGE[0]) or np.any(off > GBPS_RANGE[1]):
        raise loc.error(field, f"every off-diagonal bandwidth must be between {GBPS_RANGE[0]:g} and "
                        f"{GBPS_RANGE[1]:g} Gbps", section="network")
    diagonal = np.diag(m)
    if np.any(~np.isfinite(diagonal)) or np.any(diagonal < 0):   # unread, but a typo there is one elsewhere too
        raise loc.error(field, "the diagonal must be finite and >= 0, e.g. 0: it is not read (a node's GPUs talk "
                        "over its intra-node link, the node type's)", section="network")
    return m
