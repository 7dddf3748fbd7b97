"""Fit the roofline constants per GPU on measured profiles (least squares, scipy).

Prefill and decode rows of one GPU are fitted jointly, so the constants the two
phases share (memory efficiency, all-reduce costs) are one set. Residuals are
relative errors with a soft-L1 loss, which is what MAPE measures and keeps a few
noisy points from dominating.

Held-out evaluation: configuration points (hardware, TP, prompt size, batch size,
output size), not rows, are split 80/20, so no repetition of a held-out point is
seen in training. The shipped constants are the ones fitted on the 80% split, so the
held-out MAPE printed by `provision perf calibrate` describes them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources

import numpy as np
import pandas as pd

from ._constants import Calibration, GpuConstants
from ._model import LatencyModel
from ._roofline import ModelShape, iteration_time_s
from .errors import PerfModelError

POINT_COLUMNS = ["hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
REQUIRED_COLUMNS = ["model", *POINT_COLUMNS, "prompt_time_ms", "token_time_ms"]
ARTIFACT_RULE = "batch_size == 64 and tensor_parallel == 2"
ARTIFACT_REASON = ("batch 64 at TP 2 did not hold the whole batch in memory at once "
                   "(prompt time far below batch 32; perfmodels/data/SOURCE.md)")

# name, initial value, lower bound, upper bound
PARAMETERS = [
    ("compute_efficiency", 0.6, 0.05, 1.0),
    ("memory_efficiency", 0.8, 0.1, 1.0),
    ("allreduce_step_s", 5e-6, 0.0, 1e-3),
    ("allreduce_link_efficiency", 0.5, 0.01, 1.0),
    ("allreduce_knee_tokens", 2000.0, 256.0, 16384.0),
    ("allreduce_slowdown", 3.0, 1.0, 30.0),
    ("prefill_layer_overhead_s", 2e-4, 0.0, 5e-3),
    ("decode_layer_overhead_s", 2e-4, 0.0, 5e-3),
    ("prefill_seq_overhead_s", 1e-3, 0.0, 0.1),
    ("decode_seq_overhead_s", 3e-4, 0.0, 0.01),
]

# Fixed cost of one KV transfer, from Splitwise Sec. VI-A: the visible layer-wise
# transfer is ~8 ms on A100 pairs and ~5 ms on H100 pairs for coding prompts
# (BLOOM-176B, ~1,500 tokens). Visible = setup + last layer (6.0 GB / 70 layers over
# 8 x 200 Gbps = 0.43 ms on A100; 0.21 ms over 8 x 400 Gbps on H100).
KV_TRANSFER_SETUP_S = {"a100-80gb": 7.6e-3, "h100-80gb": 4.8e-3}

# Uncalibrated GPUs borrow the constants of the calibrated GPU of their generation.
DEFAULT_BORROWED = {
    "a6000": "a100-80gb", "a5000": "a100-80gb", "a40": "a100-80gb", "rtx3090ti": "a100-80gb",
    "l40s": "a100-80gb", "h200-141gb": "h100-80gb", "b200": "h100-80gb", "mi300x": "h100-80gb",
}


@dataclass(frozen=True)
class CalibrationReport:
    calibration: Calibration
    mape: pd.DataFrame          # gpu, phase, split, mape_pct, points, rows
    excluded_rows: int
    excluded_rule: str
    excluded_reason: str


def shipped_profile() -> pd.DataFrame:
    """The Llama2-70B DGX-A100/H100 profiles shipped with the package."""
    with resources.files("perfmodels").joinpath("data", "llama2-70b_dgx.csv").open(encoding="utf-8") as f:
        return pd.read_csv(f)


def calibrate(profile: pd.DataFrame | None = None, *, catalog=None, holdout_fraction: float = 0.2,
              seed: int = 0, where: str | None = None) -> CalibrationReport:
    """Fit constants per GPU present in `profile`; report MAPE on held-out points.

    where : how an error names the profile, e.g. "--profile 'p.csv'"."""
    if catalog is None:
        from hardware_catalog import load_catalog
        catalog = load_catalog()
    df = shipped_profile() if profile is None else profile
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"profile lacks columns {missing}; expected {REQUIRED_COLUMNS}")
    artifacts = calibration_artifacts(df)
    if artifacts.all():
        raise PerfModelError(f"{where or 'the profile'}: every row is a measurement artifact left out of the fit "
                             f"({ARTIFACT_RULE}: {ARTIFACT_REASON}); add measurements at other batch sizes or "
                             f"TP degrees")
    df = df.loc[~artifacts].copy()
    df["is_test"] = holdout_mask(df, holdout_fraction, seed)
    fitted, rows = {}, []
    for gpu_name, g in df.groupby("hardware"):
        constants = _fit_gpu(catalog, gpu_name, g.loc[~g.is_test])
        fitted[gpu_name] = constants
        rows += _mape_rows(catalog, gpu_name, constants, g)
    borrowed = {k: v for k, v in DEFAULT_BORROWED.items() if v in fitted and k not in fitted}
    mape = pd.DataFrame(rows)
    test = mape[mape.split == "held-out"]
    cal = Calibration(
        per_gpu=fitted, borrowed=borrowed,
        source=(f"least squares on {len(df)} profile rows ({', '.join(sorted(df.model.unique()))}); "
                f"held-out {holdout_fraction:.0%} of points, seed {seed}; excluded: {ARTIFACT_RULE}"),
        holdout_mape_pct={f"{r.gpu}/{r.phase}": r.mape_pct for r in test.itertuples()},
    )
    return CalibrationReport(cal, mape, int(artifacts.sum()), ARTIFACT_RULE, ARTIFACT_REASON)


# The constants only a tensor-parallel all-reduce exercises: a GPU measured at TP 1 alone
# cannot fit them (`fit_roofline` keeps the calibration's).
ALLREDUCE_CONSTANTS = ("allreduce_step_s", "allreduce_link_efficiency", "allreduce_knee_tokens", "allreduce_slowdown")


def _has_constants(calibration, gpu: str) -> bool:
    return gpu in calibration.per_gpu or gpu in calibration.borrowed


def _allreduce_constants(model: LatencyModel, gpu: str) -> dict:
    """The all-reduce constants `model` applies to `gpu`, as its own (a PCIe card borrowing
    a knee fitted on NVSwitch moves the bytes beyond it at 1x: `LatencyModel._knee_slowdown`)."""
    c = model.calibration.for_gpu(gpu)
    out = {name: getattr(c, name) for name in ALLREDUCE_CONSTANTS}
    out["allreduce_slowdown"] = model._knee_slowdown(model.gpu(gpu), c)
    return out


# Configuration points a GPU needs before `fit_roofline` fits its constants: ten constants,
# two residuals a point (prefill, decode), with room to spare. One point fitted all ten
# "perfectly" (0% MAPE) and moved the GPU's TP-8 decode by 0.78x off a TP-2 measurement.
MIN_FIT_POINTS = 10
# A fit whose MAPE exceeds this is flagged (`perf calibrate`, `cloud --latency-profile`): the
# shipped DGX profiles fit within 2-8%; a profile of H100 rows relabelled A40 fit at 200%,
# one in microseconds as milliseconds at 83%, both used without a word.
POOR_FIT_MAPE_PCT = 25.0


@dataclass(frozen=True)
class RooflineFit:
    """The roofline with constants fitted on a measured profile (`fit_roofline`)."""

    model: LatencyModel     # the fitted GPUs' constants in place of the calibration's (borrowers follow)
    fitted: dict            # {gpu: {"points", "prefill_mape_pct", "decode_mape_pct", "tp_degrees"}}: in-sample MAPE
    too_few: dict           # {gpu: configuration points}, fewer than MIN_FIT_POINTS: not fitted
    excluded_rows: int      # artifact rows left out (ARTIFACT_RULE)


def fit_roofline(profile: pd.DataFrame, calibration=None, catalog=None) -> RooflineFit:
    """The roofline with the constants of each GPU the profile measures at `MIN_FIT_POINTS`
    configuration points or more fitted on all its rows (`calibrate`, nothing held out; the
    artifact rows left out), the others as in `calibration` (default: the shipped one), and
    the GPUs that borrow a fitted GPU's constants following it. For a planner whose
    replicas no measured table describes (a cloud group whose pipeline stages mix GPU
    types): the measurements set each GPU's efficiencies and overheads, through the physics.
    A point is a configuration (TP, prompt, batch and output sizes), whatever the models
    measured there, as `calibrate` reports them; a GPU with fewer is not fitted and keeps
    the calibration's constants, or follows the GPU it borrows from if that one is fitted.
    A GPU measured at TP 1 only keeps the calibration's all-reduce constants
    (`ALLREDUCE_CONSTANTS`): no all-reduce runs there, so the fit cannot see them.

    profile : rows as `Profile.frame()` gives them."""
    import warnings

    from ._constants import merge_calibration
    base = LatencyModel(calibration, catalog)
    artifacts = calibration_artifacts(profile)
    kept = profile.loc[~artifacts]
    points = kept.drop_duplicates(POINT_COLUMNS).groupby("hardware").size()
    enough = [str(g) for g, n in points.items() if n >= MIN_FIT_POINTS]
    too_few = {str(g): int(n) for g, n in points.items() if n < MIN_FIT_POINTS}
    if not enough:
        return RooflineFit(base, {}, too_few, int(artifacts.sum()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # the empty held-out split's mean
        report = calibrate(kept.loc[kept.hardware.isin(enough)], catalog=base.catalog, holdout_fraction=0.0)
    tps = kept.groupby("hardware").tensor_parallel.unique()
    per_gpu = dict(report.calibration.per_gpu)
    for gpu, constants in per_gpu.items():
        if list(tps[gpu]) == [1] and _has_constants(base.calibration, gpu):
            per_gpu[gpu] = replace(constants, **_allreduce_constants(base, gpu))
    merged, _ = merge_calibration(replace(report.calibration, per_gpu=per_gpu), base.calibration)
    train = report.mape[report.mape.split == "train"]
    fitted = {str(gpu): {"points": int(g.points.max()),
                         "prefill_mape_pct": float(g.mape_pct[g.phase == "prompt_time"].iloc[0]),
                         "decode_mape_pct": float(g.mape_pct[g.phase == "token_time"].iloc[0]),
                         "tp_degrees": sorted(int(t) for t in tps[gpu])}
              for gpu, g in train.groupby("gpu")}
    return RooflineFit(LatencyModel(merged, base.catalog), fitted, too_few, int(artifacts.sum()))


def calibration_artifacts(df: pd.DataFrame) -> np.ndarray:
    """Which profile rows are measurement artifacts (`ARTIFACT_RULE`), left out of the fit.

    df : profile rows with at least the columns batch_size and tensor_parallel.
    """
    return df.eval(ARTIFACT_RULE).to_numpy(bool)


def holdout_mask(df: pd.DataFrame, fraction: float, seed: int) -> np.ndarray:
    """Mark `fraction` of the configuration points of each GPU as held out."""
    rng = np.random.default_rng(seed)
    points = df[POINT_COLUMNS].drop_duplicates().sort_values(POINT_COLUMNS)
    chosen = []
    for _, p in points.groupby("hardware"):
        k = int(round(fraction * len(p)))
        chosen.append(p.iloc[rng.choice(len(p), size=k, replace=False)])
    test_points = pd.concat(chosen)
    key = pd.MultiIndex.from_frame(df[POINT_COLUMNS])
    return key.isin(pd.MultiIndex.from_frame(test_points)).astype(bool)


def _predict(catalog, gpu_name, constants: GpuConstants, g: pd.DataFrame):
    """Predicted prefill and decode-iteration times (s) for profile rows."""
    llms = {name: catalog.model(name) for name in g.model.unique()}
    model = LatencyModel(Calibration({gpu_name: constants}), catalog)
    prefill = np.empty(len(g))
    decode = np.empty(len(g))
    for name, llm in llms.items():
        sel = (g.model == name).to_numpy()
        x = g.loc[sel]
        tp = x.tensor_parallel.to_numpy(float)
        s = x.prompt_size.to_numpy(float)
        b = x.batch_size.to_numpy(float)
        hw = model.hardware(gpu_name, tp)
        shape = ModelShape.of(llm)
        prefill[sel] = iteration_time_s(shape, hw, prefill_tokens=s * b, prefill_sq_tokens=s * s * b,
                                        prefill_seqs=b)
        # token_time_ms is the mean over the generation, whose context grows from s to s + n.
        mean_ctx = s + x.token_size.to_numpy(float) / 2.0
        decode[sel] = iteration_time_s(shape, hw, decode_batch=b, decode_context_tokens=mean_ctx * b)
    return prefill, decode


def _fit_gpu(catalog, gpu_name: str, train: pd.DataFrame) -> GpuConstants:
    names = [p[0] for p in PARAMETERS]
    points = train.groupby(["model", *POINT_COLUMNS], as_index=False)[["prompt_time_ms", "token_time_ms"]].median()
    y_prefill = points.prompt_time_ms.to_numpy() / 1e3
    y_decode = points.token_time_ms.to_numpy() / 1e3
    setup = KV_TRANSFER_SETUP_S.get(gpu_name, max(KV_TRANSFER_SETUP_S.values()))

    def constants(theta) -> GpuConstants:
        return GpuConstants(**dict(zip(names, map(float, theta))), kv_transfer_setup_s=setup,
                            calibrated_on=f"{gpu_name}: {', '.join(sorted(points.model.unique()))} profiles")

    def residuals(theta):
        p, d = _predict(catalog, gpu_name, constants(theta), points)
        return np.concatenate([(p - y_prefill) / y_prefill, (d - y_decode) / y_decode])

    from scipy.optimize import least_squares   # here: scipy takes ~1 s to import, and only a fit needs it

    fit = least_squares(residuals, [p[1] for p in PARAMETERS],
                        bounds=([p[2] for p in PARAMETERS], [p[3] for p in PARAMETERS]),
                        loss="soft_l1", f_scale=0.05, x_scale="jac")
    return constants(fit.x)


def _mape_rows(catalog, gpu_name, constants, g):
    p, d = _predict(catalog, gpu_name, constants, g)
    rows = []
    for split, mask in (("train", ~g.is_test.to_numpy()), ("held-out", g.is_test.to_numpy())):
        for phase, pred, col in (("prompt_time", p, "prompt_time_ms"), ("token_time", d, "token_time_ms")):
            y = g[col].to_numpy()[mask] / 1e3
            ape = np.abs(pred[mask] - y) / y
            rows.append(dict(gpu=gpu_name, phase=phase, split=split, mape_pct=100 * float(ape.mean()),
                             points=int(g.loc[mask, POINT_COLUMNS].drop_duplicates().shape[0]),
                             rows=int(mask.sum())))
    return rows
