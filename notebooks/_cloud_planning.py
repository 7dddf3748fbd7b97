"""Cell sources of cloud_planning.ipynb (built by `_build.py`: edit here, then rebuild).

CELLS: one (kind, source, *tags) per cell, kind "md" or "code".
"""

CELLS = [
    ("md", """
# Planning rented cloud GPUs (ThunderServe's question)

A team rents what the cloud has: a few 4x A6000 and 4x A5000 nodes, an 8x A40, two 4x RTX
3090 Ti, with PCIe inside a node and Ethernet between nodes. Which GPUs hold which replica
of the model, which replicas prefill and which decode, and how are requests routed between
them? The same calls `provision cloud` makes:

1. load the inventory and plan it for a rate (the split plan, its routing, its bound);
2. compare it with the best non-split plan on the same GPUs;
3. re-plan after a node leaves, and after the request mix changes;
4. choose what to rent from a price list for a rate;
5. write the HTML report.

The default settings run in about a minute (60-s traces, no chunked-prefill comparison).
Set `FULL_STUDY = True` for the CLI's defaults (120-s traces, both non-split comparisons).
"""),
    ("md", "## Settings"),
    ("code", '''
# ---- switch to the full study here ------------------------------------------------
FULL_STUDY = False

INVENTORY = "thunderserve-32gpu"   # a shipped example, or a path to your inventory TOML
PRICE_LIST = "cloud-prices"        # a shipped price list with availability limits
MODEL = "llama-30b"
WORKLOAD = "conversation"          # Azure 2023 conversation trace (or a CSV path)
NEW_MIX = "coding"                 # the mix the requests shift to (step 3)
LOST_NODE = "a6000-4x-0"           # the node that leaves (step 3)
RPS = 6.0                          # requests/s, where the SLOs bind on these 32 GPUs
RENT_RPS = 2.0                     # requests/s the rental must serve (step 4)
SEED = 0

if FULL_STUDY:
    DURATION_S, CHUNKED = 120.0, {}                         # the CLI's defaults
else:
    DURATION_S, CHUNKED = 60.0, {"prefill_chunk_tokens": 0}  # no chunked non-split comparison
''', "parameters"),
    ("code", '''
import pandas as pd

from perfmodels import LatencyModel
from provisioner.cloud import (REPLAN_METRICS, REPLICA_COLUMNS, load_inventory, plan_cloud, rented_text,
                               replan_rows, replica_cells)
from reports import write_cloud_report
from workloads import TraceGenerator

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", None)
perf = LatencyModel()
llm = perf.llm(MODEL)


def trace(workload, rps):
    """Poisson arrivals at `rps` with the workload's request sizes (the CLI's default)."""
    return TraceGenerator(workload, DURATION_S, SEED, arrival="poisson", rps=rps)


def replicas(reps):
    """A plan's replica groups as the CLI's table."""
    return pd.DataFrame([replica_cells(r) for r in reps], columns=REPLICA_COLUMNS)


def replans(answer):
    """The re-plan table as the CLI and the report show it: share of requests within each SLO limit."""
    return pd.DataFrame([{"case": r["name"], **{m: f"{r['attainment'][m]:.1%}" for m in REPLAN_METRICS},
                          "re-plan s": r["took"], "what changed": r["changed"]} for r in replan_rows(answer)])


inventory = load_inventory(INVENTORY, perf.catalog)
pd.DataFrame([{"node": name, "type": inventory.types[k].name, "gpus": inventory.types[k].gpus,
               "gpu": inventory.types[k].gpu, "usd_per_h": inventory.types[k].price_usd_per_h}
              for name, k in inventory.nodes])
'''),
    ("md", """
## 1. The split plan

The tabu search scores many plans analytically (per-replica roofline rates, a routing LP
with each KV transfer over its actual links), then the discrete-event simulator re-scores
its five best by the highest rate at which 99% of requests meet every SLO deadline. The
node loss is re-planned in the same call (step 3).
"""),
    ("code", '''
answer = plan_cloud(inventory, llm, perf, trace(WORKLOAD, RPS), rps=RPS, seed=SEED, without=LOST_NODE, **CHUNKED)
print(f"planned in {answer['elapsed_s']:.1f} s: predicted {answer['throughput_rps']:.2f} req/s "
      f"(LP bound {answer['upper_bound_rps']:.2f}, gap {answer['gap']:.1%}); the simulation sustains "
      f"{answer['sustained_rps']:.2f} req/s at 99% attainment")
print("attainment at", RPS, "req/s:", {m: f"{v:.1%}" for m, v in answer["slo_attainment"].items()})
replicas(answer["replicas"])
'''),
    ("md", """
## 2. Against the best non-split plan on the same GPUs

Every replica prefills and decodes (HexGen's arrangement, ThunderServe's comparison point),
searched and re-scored the same way. ThunderServe reports 1.5x (coding) and 1.3x
(conversation) for the split plan.
"""),
    ("code", '''
ns = answer["non_split"]
print(f"sustained at 99% attainment: split {answer['sustained_rps']:.2f} req/s, non-split "
      f"{ns['sustained_rps']:.2f}: split over non-split {answer['split_over_non_split_sustained']:.2f}x")
replicas(ns["replicas"])
'''),
    ("md", """
## 3. Re-planning

A lightweight re-plan flips replica phases and re-routes (no model is reloaded); a full
re-plan searches again. Both are compared with doing nothing, on the same trace at the same
rate. First the node loss planned above, then a shift of the mix: the requests become
`NEW_MIX`'s.
"""),
    ("code", '''
print(f"without {LOST_NODE}, at {RPS:g} req/s")
replans(answer)
'''),
    ("code", '''
shifted = plan_cloud(inventory, llm, perf, trace(WORKLOAD, RPS), rps=RPS, seed=SEED,
                     new_mix=trace(NEW_MIX, RPS), **CHUNKED)
print(f"the {WORKLOAD} plan when the requests become {NEW_MIX}'s, at {RPS:g} req/s")
replans(shifted)
'''),
    ("md", """
## 4. What to rent

From a price list with availability limits: the cheapest node counts with a split plan that
meets 99% attainment at `RENT_RPS` in the simulation, and the cheapest rental served
non-split beside it.
"""),
    ("code", '''
prices = load_inventory(PRICE_LIST, perf.catalog)
rental = plan_cloud(prices, llm, perf, trace(WORKLOAD, RENT_RPS), goal="cost", rps=RENT_RPS, seed=SEED, **CHUNKED)
nsr = rental["non_split_rental"]
print(f"split: rent {rented_text(rental['rented'])} for {rental['cost_usd_per_h']:.2f} $/h; "
      f"non-split: {rented_text(nsr['rented'])} for {nsr['cost_usd_per_h']:.2f} $/h")
replicas(rental["replicas"])
'''),
    ("md", """
## 5. The report

One self-contained HTML page: the plan drawn as nodes -> replica groups -> routed shares,
the tables above and the re-plan's attainment. From the command line, the whole notebook is

```bash
provision cloud --inventory thunderserve-32gpu --workload conversation --rps 6 --without a6000-4x-0 --report cloud_report.html
provision cloud --inventory thunderserve-32gpu --workload conversation --rps 6 --replan-workload coding
provision cloud --inventory cloud-prices --workload conversation --goal cost --rps 2
```
"""),
    ("code", '''
path = write_cloud_report(answer, "cloud_report.html", force=True)
print("wrote", path)
'''),
]
