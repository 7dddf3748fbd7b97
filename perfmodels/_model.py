"""`LatencyModel`: per-phase latency of any catalog model on any catalog GPU.

Follows the estimator contract: ``__init__`` stores settings (a calibration, a
catalog), the public methods work on arrays and never mutate state. The roofline
physics is in `_roofline`; this module turns catalog entries into its inputs.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from hardware_catalog import GPU, LLM

from ._constants import Calibration, load_calibration
from ._power import clock_fraction
from ._roofline import N_COEF, HardwareArrays, ModelShape, iteration_time_s, roofline_coefficients
from .errors import PerfModelError

GB = 1e9
TP_DEGREES = (1, 2, 4, 8)


class LatencyModel:
    """Calibrated roofline latency model.

    Parameters
    ----------
    calibration : fitted constants per GPU (a `Calibration`, or the path of a calibration
        TOML, read here; default: the shipped calibration).
    catalog : a `hardware_catalog.Catalog` (default: the shipped catalog).

    Models and GPUs may be given as catalog names or catalog objects.
    """

    n_coef = N_COEF   # length of the vectors `coefficients` returns (the simulator's per-pool layout)

    def __init__(self, calibration: Calibration | None = None, catalog=None):
        self.calibration = _calibration(calibration)
        if catalog is None:
            from hardware_catalog import load_catalog
            catalog = load_catalog()
        self.catalog = catalog

    # -- catalog resolution -------------------------------------------------
    def llm(self, model):
        if isinstance(model, str):
            return self.catalog.model(model)
        if not isinstance(model, LLM):   # None was an AttributeError deep in the roofline
            raise PerfModelError(f"model must be a catalog model name such as 'llama2-70b' or an LLM "
                                 f"(got {model!r:.60})")
        return model

    def gpu(self, gpu):
        if isinstance(gpu, str):
            return self.catalog.gpu(gpu)
        if not isinstance(gpu, GPU):
            raise PerfModelError(f"gpu must be a catalog GPU name such as 'h100-80gb' or a GPU (got {gpu!r:.60})")
        return gpu

    def shape(self, model) -> ModelShape:
        return _shape_cached(self.llm(model))

    def hardware(self, gpu, tp=8, power_cap=1.0) -> HardwareArrays:
        """Hardware arrays for one GPU type, broadcast over `tp` and `power_cap` arrays."""
        g = self.gpu(gpu)
        tp = check_tp_degrees(float_array(tp, "tensor_parallel"), "tensor_parallel")
        c = self.calibration.for_gpu(g.name)
        return HardwareArrays(
            peak_flops=np.asarray(g.dense_fp16_tflops * 1e12),
            hbm_bytes_per_s=np.asarray(g.hbm_bandwidth_gb_per_s * GB),
            hbm_capacity_bytes=np.asarray(g.hbm_capacity_gb * GB),
            link_bytes_per_s=np.asarray(g.intra_link_bandwidth_gb_per_s * GB),
            tp=tp,
            clock=clock_fraction(power_cap),
            compute_efficiency=np.asarray(c.compute_efficiency),
            memory_efficiency=np.asarray(c.memory_efficiency),
            allreduce_step_s=np.asarray(c.allreduce_step_s),
            allreduce_link_efficiency=np.asarray(c.allreduce_link_efficiency),
            allreduce_knee_tokens=np.asarray(c.allreduce_knee_tokens),
            allreduce_slowdown=np.asarray(self._knee_slowdown(g, c)),
            prefill_layer_overhead_s=np.asarray(c.prefill_layer_overhead_s),
            decode_layer_overhead_s=np.asarray(c.decode_layer_overhead_s),
            prefill_seq_overhead_s=np.asarray(c.prefill_seq_overhead_s),
            decode_seq_overhead_s=np.asarray(c.decode_seq_overhead_s),
        )

    def _knee_slowdown(self, g, c) -> float:
        """The all-reduce knee's slowdown, unless a PCIe card borrows it from another link.

        The shipped knee was fitted on NVSwitch machines (DGX profiles). A PCIe card that
        borrows constants from a GPU on another kind of link keeps the link efficiency but
        not the slowdown: nothing measured says large all-reduces slow down on PCIe (NCCL's
        bus bandwidth there rises with message size to the link's), and a 5.6x slowdown of
        a 10x slower link would cap its TP prefill at ~4 GB/s of all-reduce. Other links
        (Infinity Fabric) keep the lender's knee: nothing measured says either way."""
        lender = self.calibration.borrowed.get(g.name)
        if lender is None or g.name in self.calibration.per_gpu or g.intra_link != "pcie":
            return c.allreduce_slowdown
        try:
            lender_link = self.catalog.gpu(lender).intra_link
        except KeyError:   # a lender missing from a custom catalog: keep the fitted value
            return c.allreduce_slowdown
        return c.allreduce_slowdown if lender_link == "pcie" else 1.0

    # -- phase latencies ------------------------------------------------------
    def prefill_time_s(self, model, gpu, tp, prompt_tokens, batch_size=1, power_cap=1.0):
        """Time (s) of one prefill pass over `batch_size` prompts of `prompt_tokens` each."""
        s = float_array(prompt_tokens, "prompt_tokens")
        b = float_array(batch_size, "batch_size")
        _check_positive(s, "prompt_tokens")
        _check_positive(b, "batch_size")
        _check_broadcast(prompt_tokens=s.shape, batch_size=b.shape, tensor_parallel=np.shape(tp),
                         power_cap=np.shape(power_cap))
        return self.iteration_time_s(model, gpu, tp, power_cap, prefill_tokens=s * b, prefill_sq_tokens=s * s * b,
                                     prefill_seqs=b)

    def decode_time_s(self, model, gpu, tp, batch_size, context_tokens, power_cap=1.0):
        """Time (s) of one decode iteration of `batch_size` requests with `context_tokens` each."""
        b = float_array(batch_size, "batch_size")
        ctx = float_array(context_tokens, "context_tokens")
        _check_positive(b, "batch_size")
        if np.any(~np.isfinite(ctx)) or np.any(ctx < 0):
            raise PerfModelError(f"context_tokens must be >= 0 (got {np.min(ctx):g})")
        _check_broadcast(batch_size=b.shape, context_tokens=ctx.shape, tensor_parallel=np.shape(tp),
                         power_cap=np.shape(power_cap))
        return self.iteration_time_s(model, gpu, tp, power_cap, decode_batch=b, decode_context_tokens=ctx * b)

    def iteration_time_s(self, model, gpu, tp=8, power_cap=1.0, **batch):
        """Time (s) of a general (possibly mixed) pass; see `_roofline.iteration_time_s`. The
        phase methods above go through it, so a model that overrides it (measured profiles)
        changes them too."""
        return iteration_time_s(self.shape(model), self.hardware(gpu, tp, power_cap), **batch)

    def coefficients(self, model, gpu, tp=8, power_cap=1.0) -> np.ndarray:
        """Roofline per-unit costs, shape broadcast(tp, power_cap) + (N_COEF,); see `_roofline`."""
        return roofline_coefficients(self.shape(model), self.hardware(gpu, tp, power_cap))

    # -- one request alone (the SLO reference) ---------------------------------
    def solo_request_s(self, model, gpu, tp, prompt_tokens, output_tokens, power_cap=1.0):
        """TTFT, TBT and E2E (s) of requests each running alone on one replica.

        The first token comes out of the prefill pass; each later token takes one
        decode iteration at batch 1 with its growing context (mean context used:
        decode time is affine in context, so the sum equals n x the mean term).
        """
        s, n = solo_request_tokens(prompt_tokens, output_tokens)
        ttft = self.prefill_time_s(model, gpu, tp, s, 1, power_cap)
        mean_ctx = s + n / 2.0
        tbt = self.decode_time_s(model, gpu, tp, 1, mean_ctx, power_cap)
        e2e = ttft + np.maximum(n - 1.0, 0.0) * tbt
        return ttft, tbt, e2e


def solo_request_tokens(prompt_tokens, output_tokens) -> tuple[np.ndarray, np.ndarray]:
    """The token counts of `solo_request_s` as float arrays; one line for outputs below 1 (0 or
    -3 gave an E2E of the TTFT alone) or shapes that do not broadcast (was numpy's error)."""
    s = float_array(prompt_tokens, "prompt_tokens")
    n = float_array(output_tokens, "output_tokens")
    if np.any(~np.isfinite(n)) or np.any(n < 1):
        raise PerfModelError(f"output_tokens must be >= 1: every request makes its first token (got {np.min(n):g})")
    _check_broadcast(prompt_tokens=s.shape, output_tokens=n.shape)
    return s, n


def _calibration(calibration) -> Calibration:
    """A `Calibration` as given, or read from a path now: a path kept as is failed at the first
    latency asked ('str' object has no attribute 'for_gpu'), far from where it was given."""
    if calibration is None:
        return load_calibration()
    if isinstance(calibration, Calibration):
        return calibration
    if isinstance(calibration, (str, os.PathLike)):
        return load_calibration(calibration)
    raise PerfModelError(f"calibration must be a perfmodels.Calibration or the path of a calibration TOML, got "
                         f"{calibration!r:.60}")


def float_array(values, name: str) -> np.ndarray:
    """`values` as a float array; one line for what is not numbers (numpy reads the string
    '512' as 512.0, and ['a'] is its own ValueError)."""
    try:
        raw = np.asarray(values)
    except ValueError:   # ragged nested lists
        raw = np.asarray(None)
    if raw.dtype.kind not in "iuf":
        raise PerfModelError(f"{name} must be a number or an array of numbers, got {values!r:.60}")
    return raw.astype(float)


@lru_cache(maxsize=64)
def _shape_cached(llm) -> ModelShape:
    return ModelShape.of(llm)


def machine_tp_degrees(gpus_per_machine: int) -> tuple[int, ...]:
    """The TP_DEGREES that divide a machine's `gpus_per_machine` (>= 1) GPUs, largest first:
    the replica sizes it can be cut into (at most 8 GPUs each, whatever the machine's count)."""
    return tuple(tp for tp in sorted(TP_DEGREES, reverse=True) if gpus_per_machine % tp == 0)


def check_tp_degrees(tp: np.ndarray, name: str) -> np.ndarray:
    """`tp` (a float array) when every degree is one of TP_DEGREES: attention heads and FFN
    columns split evenly over 1, 2, 4 or 8 GPUs of one machine."""
    bad = tp[~np.isin(tp, TP_DEGREES)]
    if bad.size:
        raise PerfModelError(f"{name} must be 1, 2, 4 or 8 (got {bad.flat[0]:g})")
    return tp


def _check_positive(x: np.ndarray, name: str) -> None:
    if np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise PerfModelError(f"{name} must be positive (got {np.min(x):g})")


def _check_broadcast(**shapes) -> None:
    """One line naming the arguments whose shapes numpy cannot broadcast (was numpy's
    'operands could not be broadcast together with shapes (3,) (2,)' from inside the roofline)."""
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        shapes = ", ".join(f"{k} {shape}" for k, shape in shapes.items() if shape)
        raise PerfModelError(f"the array arguments must have one shape or broadcast to one (got {shapes})") from None
