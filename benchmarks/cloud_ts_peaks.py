"""The cloud plans with ThunderServe's own GPU peaks (issue 13: why our plans differ from its Table 3).

ThunderServe's Table 1 gives the RTX A6000 38.7 TFLOPS and the RTX A5000 27.8: their FP32
(non-tensor) peaks. The catalog uses their dense FP16 tensor peaks from NVIDIA's datasheets
(154.8 and 111.1), at which the A6000 computes as fast as the A40. This benchmark copies the
catalog to a temporary directory, puts Table 1's two numbers in it, and plans
`thunderserve-32gpu` (llama-30b, seed 0) as `benchmarks/cloud.py` does: split and non-split
plans, each the best of the tabu search's five finalists by the DES-sustained rate at 99%
attainment on 600-s traces.

    python benchmarks/cloud_ts_peaks.py   # writes benchmarks/results/cloud_ts_peaks.md
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from cloud import _machine, comparison_row, split_and_non_split, write_results
from hardware_catalog import load_catalog
from perfmodels import LatencyModel
from provisioner.cloud import load_inventory

CATALOG = Path(__file__).resolve().parents[1] / "hardware_catalog" / "data"
TS_TABLE_1_TFLOPS = {"a6000": 38.7, "a5000": 27.8}   # [TS] Table 1, as FACTS.md quotes it


def ts_catalog(root: Path):
    """The shipped catalog with Table 1's peaks for the A6000 and A5000, loaded from `root`."""
    shutil.copytree(CATALOG, root, dirs_exist_ok=True)
    for gpu, tflops in TS_TABLE_1_TFLOPS.items():
        path = root / "gpus" / f"{gpu}.toml"
        text, n = re.subn(r"(?m)^dense_fp16_tflops = [0-9.]+$", f"dense_fp16_tflops = {tflops}", path.read_text())
        assert n == 1, path
        path.write_text(text)
    return load_catalog(root)


def main() -> None:
    machine = _machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, catalog in (("datasheet (shipped)", load_catalog()), ("TS Table 1", ts_catalog(Path(tmp)))):
            perf = LatencyModel(catalog=catalog)
            inv = load_inventory("thunderserve-32gpu", catalog)
            for workload in ("coding", "conversation"):
                rows.append(comparison_row((label, workload), *split_and_non_split(inv, perf, workload)))
    write_results("cloud_ts_peaks", "Cloud plans with ThunderServe's Table 1 peaks", machine, __doc__,
                  ["A6000 / A5000 peaks", "workload", "split rps", "non-split rps", "ratio", "split replicas P / D",
                   "GPUs prefill / decode"], rows)

if __name__ == "__main__":
    main()
