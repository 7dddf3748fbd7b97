"""Build the notebooks of this folder from their cell sources (run: python notebooks/_build.py).

capacity_planning.ipynb's cells are below; reproduce_splitwise.ipynb's are in
`_reproduce_splitwise.py`, cloud_planning.ipynb's in `_cloud_planning.py`. The .ipynb files are generated, without outputs, so that a
review reads the sources and the notebooks never drift from them (tests/test_notebooks.py
checks they are up to date and executes them). Edit the sources, then rebuild.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def md(text: str):
    return new_markdown_cell(text.strip("\n"))


def code(text: str, *tags: str):
    cell = new_code_cell(text.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


# --------------------------------------------------------------------------- capacity planning
CAPACITY_PLANNING = [
    md("""
# Capacity planning with the Python API

One provisioning question end to end, with the same calls the `provision` command makes:

1. load a workload,
2. set the latency SLOs,
3. search every design family for the cheapest cluster that meets them,
4. compare the families,
5. see what 2x load growth costs,
6. export the plan as a table (and as the HTML report).

The default settings below run in well under a minute on a laptop (30-s traces, three
families, one short verification run). Set `FULL_STUDY = True` for the paper-scale
question (2-minute traces, all ten families, the default verification); that takes
several minutes.
"""),
    md("## Settings"),
    code('''
# ---- switch to the full study here ------------------------------------------------
FULL_STUDY = False

WORKLOAD = "coding"          # Azure 2023 coding trace (or a CSV path)
MODEL = "bloom-176b"
RPS = 70.0                   # requests/s to serve (Splitwise Fig. 12 uses 70)
SEED = 0

if FULL_STUDY:
    from provisioner import FAMILIES
    DURATION_S = 120.0
    SEARCH_FAMILIES = FAMILIES
    VERIFY = {}                                   # DES on two 240-s traces, seeds 1 and 2 (the default)
else:
    DURATION_S = 30.0
    SEARCH_FAMILIES = ("baseline-h100", "splitwise-aa", "splitwise-hh")
    VERIFY = {"verify_duration_s": 30.0, "verify_seeds": (1,)}   # one short DES run
''', "parameters"),
    code('''
import pandas as pd
import plotly.express as px

from provisioner import SLO, make_design, simulate
from provisioner.search import ProvisionRequest, provision
from reports import report_data, write_report
from workloads import make_workload

pd.set_option("display.precision", 3)
pd.set_option("display.width", 160)
'''),
    md("""
## 1. Load a workload

`make_workload` draws `RPS x DURATION_S` requests: sizes (prompt and output tokens) resampled
jointly from the shipped Azure trace, Poisson arrivals at the requested rate. The seed fixes
both. It is the trace the search scores at that rate (one generator, `workloads.TraceGenerator`,
draws every trace); a CSV path instead replays the file request by request.
"""),
    code('''
trace = make_workload(WORKLOAD, RPS, duration_s=DURATION_S, seed=SEED)
print(trace)
trace.to_frame().describe(percentiles=[0.5, 0.9, 0.99]).T
'''),
    code('''
sizes = trace.to_frame().melt(value_vars=["prompt_tokens", "output_tokens"], var_name="tokens of", value_name="tokens")
px.ecdf(sizes, x="tokens", color="tokens of", log_x=True, title=f"{WORKLOAD}: request sizes", height=330)
'''),
    md("""
## 2. Set the SLOs

An SLO is a slowdown limit: a request's latency divided by the same request's latency alone
on one DGX-A100. Splitwise's Table VI is the default; `SLO(...)` takes other limits and
`.scaled(f)` loosens (f > 1) or tightens them all.
"""),
    code('''
slo = SLO()
limits = pd.DataFrame(slo.limits(), index=["TTFT", "TBT", "E2E"], columns=["p50", "p90", "p99"])
limits
'''),
    md("One design checked against them, before any search — the paper's Fig. 12 optimum:"),
    code('''
one = simulate(make_design("splitwise-hh", 27, 3), trace, MODEL, slo=slo).iloc[0]
pd.Series({k: one[k] for k in ["slo_met", "binding_slo", "min_margin", "ttft_p99_s", "tbt_p99_s", "e2e_p99_s",
                              "cost_usd_per_h", "power_kw"]})
'''),
    md("""
## 3. Search

`provision` answers the question per family: the integer program bounds the answer, the
frontier search walks the count grid through batched fluid simulations, and the finalists are
re-checked with the discrete-event engine. `ProvisionRequest` validates everything up front.
"""),
    code('''
request = ProvisionRequest(goal="cost", rps=RPS, workload=WORKLOAD, model=MODEL, families=SEARCH_FAMILIES,
                          duration_s=DURATION_S, seed=SEED, slo=slo, **VERIFY)
result = provision(request)
print(f"searched {len(result.evaluated)} designs in {result.elapsed_s:.1f} s; winner: {result.winner_family}")
'''),
    md("## 4. Compare the families"),
    code('''
COLUMNS = ["family", "feasible", "prompt_machines", "token_machines", "cost_usd_per_h", "power_kw",
           "binding_slo", "min_margin", "evaluations", "gap_to_bound_pct"]
plan = result.best[COLUMNS].sort_values("cost_usd_per_h", ignore_index=True)
plan
'''),
    md("""
The report's plot data is a plain table too (`reports.report_data`): here each family's answer
normalized to the baseline (Splitwise Figs. 18-19) and one family's design space (Fig. 12).
"""),
    code('''
data = report_data(result.to_json())
summary = data.summary.pivot(index="family", columns="label", values="normalized")
print(f"normalized to {data.baseline}")
summary
'''),
    code('''
fig = px.bar(data.summary, x="label", y="normalized", color="family", barmode="group", height=360,
             labels={"label": "", "normalized": f"x {data.baseline}"}, title="Each family's answer, normalized")
fig.add_hline(y=1, line_dash="dot")
fig
'''),
    code('''
h = data.heatmaps["splitwise-hh"]
px.imshow(h.masked_cost, x=h.prompt_counts, y=h.token_counts, origin="lower", aspect="auto", height=380,
          labels={"x": "prompt machines", "y": "token machines", "color": "$/h"},
          title=f"splitwise-hh designs meeting every SLO (blank: misses one or not evaluated); optimum {h.optimum}")
'''),
    md("""
## 5. Sensitivity: 2x load growth

The same question at twice the load. A family whose cost more than doubles is paying for a
bottleneck that does not split well; less than double, for batching that gets better with load.
"""),
    code('''
result_2x = provision(request.replace(rps=2 * RPS))
growth = plan[["family", "prompt_machines", "token_machines", "cost_usd_per_h"]].merge(
    result_2x.best[["family", "prompt_machines", "token_machines", "cost_usd_per_h", "feasible"]],
    on="family", suffixes=("", "_2x"))
growth["cost_growth"] = growth.cost_usd_per_h_2x / growth.cost_usd_per_h
growth
'''),
    code('''
for row in growth.itertuples():
    print(f"{row.family:16s} x2 load -> x{row.cost_growth:.2f} cost "
          f"({row.prompt_machines}+{row.token_machines} -> {row.prompt_machines_2x}+{row.token_machines_2x} machines)")
'''),
    md("""
## 6. Export

The plan as CSV, and the whole answer as one self-contained HTML report (it opens offline;
`provision report result.json --out report.html` makes the same file from a saved result).
"""),
    code('''
table = plan.merge(growth[["family", "cost_usd_per_h_2x", "cost_growth"]], on="family")
table.to_csv("capacity_plan.csv", index=False)
report = write_report(result.to_json(), "capacity_report.html", force=True)
print(f"wrote capacity_plan.csv ({len(table)} rows) and {report} ({report.stat().st_size / 1e6:.1f} MB)")
'''),
]


# --------------------------------------------------------------------------- Splitwise reproduction
def _load_cells(filename: str) -> list:
    """The cells of another notebook, from its own source file in this folder."""
    spec = importlib.util.spec_from_file_location(f"notebooks_{Path(filename).stem}", HERE / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [md(text) if kind == "md" else code(text, *tags) for kind, text, *tags in module.CELLS]


REPRODUCE_SPLITWISE = _load_cells("_reproduce_splitwise.py")
CLOUD_PLANNING = _load_cells("_cloud_planning.py")


NOTEBOOKS = {"capacity_planning.ipynb": CAPACITY_PLANNING, "reproduce_splitwise.ipynb": REPRODUCE_SPLITWISE,
             "cloud_planning.ipynb": CLOUD_PLANNING}


def build(name: str) -> nbformat.NotebookNode:
    nb = new_notebook(cells=NOTEBOOKS[name])
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids, so a rebuild is byte-identical
        cell["id"] = f"{Path(name).stem[:12]}-{i:02d}"
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in NOTEBOOKS:
        path = HERE / name
        text = render(name)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"stale notebooks (run python notebooks/_build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
