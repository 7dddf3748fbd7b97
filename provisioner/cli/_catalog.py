"""`provision catalog`: what hardware and models the planner knows."""

from __future__ import annotations

import typer
from rich.table import Table

from hardware_catalog import load_catalog

from ._common import console as make_console


def catalog_command(
    kind: str = typer.Argument("all", help="gpus, machines, models or all."),
) -> None:
    from ..errors import ProvisionerError

    if kind not in ("all", "gpus", "machines", "models"):
        raise ProvisionerError(f"catalog kind must be gpus, machines, models or all (got '{kind}')")
    cat = load_catalog()
    console = make_console()
    if kind in ("all", "gpus"):
        t = Table(title="GPUs")
        for col in ("name", "fp16 TFLOP/s", "HBM GB", "HBM GB/s", "TDP W", "link", "link GB/s", "$/GPU-h"):
            t.add_column(col, justify="left" if col in ("name", "link") else "right")
        for g in cat.gpus.values():
            price = f"{g.price_usd_per_h:.3f}" if g.price_usd_per_h else "-"
            t.add_row(g.name, f"{g.dense_fp16_tflops:g}", f"{g.hbm_capacity_gb:g}", f"{g.hbm_bandwidth_gb_per_s:g}",
                      f"{g.tdp_w:g}", g.intra_link, f"{g.intra_link_bandwidth_gb_per_s:g}", price)
        console.print(t)
    if kind in ("all", "machines"):
        t = Table(title="Machines")
        for col in ("name", "gpus", "$/h (default)", "other prices", "rated kW", "NIC Gbps/GPU"):
            t.add_column(col, justify="left" if col in ("name", "gpus", "other prices") else "right")
        for m in cat.machines.values():
            others = ", ".join(f"{k} ${v:g}" for k, v in m.cost_options_usd_per_h.items() if k != m.default_cost_option)
            t.add_row(m.name, f"{m.gpus_per_machine}x {m.gpu}", f"{m.cost_usd_per_h:g} ({m.default_cost_option})",
                      others or "-", f"{m.rated_power_w / 1e3:.2f}", f"{m.nic_bandwidth_gbps_per_gpu:g}")
        console.print(t)
    if kind in ("all", "models"):
        t = Table(title="Models")
        for col in ("name", "layers", "hidden", "heads", "kv heads", "FFN", "params (B)", "weights GB", "KV MB/token"):
            t.add_column(col, justify="left" if col == "name" else "right")
        for m in cat.models.values():
            t.add_row(m.name, str(m.n_layers), str(m.hidden_size), str(m.n_heads), str(m.n_kv_heads),
                      f"{m.ffn_size} {m.ffn_type}", f"{m.params / 1e9:.1f}", f"{m.weight_bytes / 1e9:.0f}",
                      f"{m.kv_bytes_per_token / 1e6:.3f}")
        console.print(t)
