"""Fitted constants of the roofline latency model, one set per GPU type.

The constants are few and physical: efficiencies (fractions of a datasheet peak),
latencies (seconds) and one slowdown factor. They are stored in a small TOML file
with provenance, so a calibration can be inspected, diffed and shipped.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from hardware_catalog import decode_text, read_input

from .errors import PerfModelError

DEFAULT_CALIBRATION = "calibration.toml"
# The file `LatencyModel()` loads by default (`provision perf calibrate` refreshes it).
DEFAULT_CALIBRATION_PATH = Path(__file__).resolve().parent / "data" / DEFAULT_CALIBRATION


@dataclass(frozen=True)
class GpuConstants:
    """Fitted constants of one GPU type (all dimensionless or in seconds).

    Attributes
    ----------
    compute_efficiency : fraction of the dense fp16 tensor peak reached by GEMMs.
    memory_efficiency : fraction of the HBM bandwidth reached by weight/KV reads.
    allreduce_step_s : latency of one ring step of a tensor-parallel all-reduce.
    allreduce_link_efficiency : fraction of the intra-machine link bandwidth an
        all-reduce reaches on small passes.
    allreduce_knee_tokens : tokens per forward pass beyond which the all-reduce of the
        extra tokens slows down (Splitwise Sec. III: prompt throughput drops beyond
        ~2048 batched tokens; the profiles locate the drop in communication, since it
        grows with the tensor-parallel degree).
    allreduce_slowdown : how many times slower the bytes beyond the knee move. Not lent
        to a PCIe card from a GPU on another link: it moves them at 1x
        (`LatencyModel._knee_slowdown`).
    prefill_layer_overhead_s, decode_layer_overhead_s : fixed time per transformer
        layer per forward pass (kernel launches, synchronisation).
    prefill_seq_overhead_s, decode_seq_overhead_s : fixed time per sequence per pass
        (scheduling, sampling, cache bookkeeping on the host).
    kv_transfer_setup_s : fixed cost of one KV-cache transfer between machines.
    calibrated_on : what the constants were fitted on, or where they were borrowed from.
    """

    compute_efficiency: float
    memory_efficiency: float
    allreduce_step_s: float
    allreduce_link_efficiency: float
    allreduce_knee_tokens: float
    allreduce_slowdown: float
    prefill_layer_overhead_s: float
    decode_layer_overhead_s: float
    prefill_seq_overhead_s: float
    decode_seq_overhead_s: float
    kv_transfer_setup_s: float
    calibrated_on: str = ""

    @classmethod
    def fitted_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("calibrated_on", "kv_transfer_setup_s"))


@dataclass(frozen=True)
class Calibration:
    """Constants per GPU plus provenance.

    ``borrowed`` maps an uncalibrated GPU to the calibrated GPU whose efficiencies and
    overheads it uses (same vendor/generation); its own datasheet peaks still apply.
    """

    per_gpu: dict[str, GpuConstants]
    borrowed: dict[str, str] = field(default_factory=dict)
    source: str = ""
    holdout_mape_pct: dict[str, float] = field(default_factory=dict)

    def for_gpu(self, gpu_name: str) -> GpuConstants:
        if gpu_name in self.per_gpu:
            return self.per_gpu[gpu_name]
        if gpu_name in self.borrowed:
            return self.per_gpu[self.borrowed[gpu_name]]
        known = ", ".join(sorted(set(self.per_gpu) | set(self.borrowed)))
        raise PerfModelError(
            f"no latency constants for gpu '{gpu_name}': calibrate it or add it to [borrowed] "
            f"of the calibration file (the installed one: {DEFAULT_CALIBRATION_PATH}; known: {known})"
        )

    def is_calibrated(self, gpu_name: str) -> bool:
        return gpu_name in self.per_gpu


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Read a calibration TOML (default: the one shipped with the package)."""
    if path is None:
        text = resources.files("perfmodels").joinpath("data", DEFAULT_CALIBRATION).read_text(encoding="utf-8")
        where = f"perfmodels/data/{DEFAULT_CALIBRATION}"
    else:
        try:
            raw_bytes = read_input(path)
        except OSError as exc:
            raise PerfModelError(f"cannot read calibration '{path}': {exc.strerror}") from None
        try:   # a BOM (Notepad) or UTF-16 (PowerShell's `>`) reads as written, as every file a user gives
            text = decode_text(raw_bytes, universal_newlines=True)
        except UnicodeDecodeError:
            raise PerfModelError(f"calibration '{path}' is not UTF-8 or UTF-16 text; save it as UTF-8, as "
                                 f"`provision perf calibrate` writes it") from None
        where = str(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PerfModelError(f"calibration '{where}' is not valid TOML: {exc}") from None
    except ValueError:   # Python refuses to read an integer of over 4,300 digits
        raise PerfModelError(f"calibration '{where}': a number has over 4,300 digits; give a real value") from None
    per_gpu = {gpu: _gpu_constants(table, where, gpu) for gpu, table in _table(raw, "gpu", where).items()}
    if not per_gpu:   # else "no latency constants for gpu ..." at the first latency asked, naming no file
        raise PerfModelError(f"calibration '{where}' has no [gpu.\"NAME\"] table of constants; give a file "
                             f"written by `provision perf calibrate`")
    borrowed = _table(raw, "borrowed", where)
    for gpu, lender in borrowed.items():
        if lender not in per_gpu:   # else a KeyError at the first latency of that GPU
            raise PerfModelError(f"calibration '{where}': [borrowed] '{gpu}' = {lender!r:.40} names no [gpu] table "
                                 f"(have: {', '.join(sorted(per_gpu))}); borrow from one of those")
    meta = _table(raw, "meta", where)
    return Calibration(
        per_gpu=per_gpu,
        borrowed=dict(borrowed),
        source=meta.get("source", ""),
        holdout_mape_pct=dict(_table(meta, "holdout_mape_pct", where, parent="meta.")),
    )


def _table(raw: dict, key: str, where: str, parent: str = "") -> dict:
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise PerfModelError(f"calibration '{where}': '{parent}{key}' must be a table ([{parent}{key}]), "
                             f"got {table!r:.40}")
    return table


# What each constant can be: a fraction of a peak is in (0, 1] (0 made every latency NaN, a
# negative one a negative time), the knee's slowdown at least 1x, the rest times or sizes >= 0.
_FRACTIONS = ("compute_efficiency", "memory_efficiency", "allreduce_link_efficiency")
_CONSTANT_RANGE = {**{name: (0.0, 1.0, "a fraction of the peak, so > 0 and <= 1") for name in _FRACTIONS},
                   "allreduce_slowdown": (1.0, math.inf, "how many times slower bytes past the knee move, so >= 1")}


def _gpu_constants(table, where: str, gpu: str) -> GpuConstants:
    """One [gpu."NAME"] table: every fitted constant a finite number (a string was kept, and
    failed inside numpy at the first latency asked)."""
    if not isinstance(table, dict):
        raise PerfModelError(f"calibration '{where}': gpu '{gpu}' must be a table of constants, got {table!r:.40}")
    names = {f.name for f in dataclasses.fields(GpuConstants)}
    missing = names - set(table) - {"calibrated_on"}
    if missing:
        raise PerfModelError(f"calibration '{where}': gpu '{gpu}' lacks {sorted(missing)}")
    for name in sorted(names - {"calibrated_on"}):
        value = table[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise PerfModelError(f"calibration '{where}': gpu '{gpu}' {name} must be a finite number, "
                                 f"got {value!r:.40}")
        low, high, meaning = _CONSTANT_RANGE.get(name, (0.0, math.inf, "a time or size, so >= 0"))
        if not (low < value <= high if name in _FRACTIONS else low <= value <= high):
            raise PerfModelError(f"calibration '{where}': gpu '{gpu}' {name} is {meaning} (got {value!r}); give "
                                 f"a file written by `provision perf calibrate`")
    return GpuConstants(**{k: table[k] for k in names if k in table})


def dump_calibration(cal: Calibration) -> str:
    """Serialise a calibration to TOML text (stdlib has no TOML writer; the format is flat)."""
    lines = ["# Fitted constants of perfmodels' roofline latency model.",
             "# Written by `provision perf calibrate`; see perfmodels/_constants.py for meanings.", "",
             "[meta]", f"source = {_toml_value(cal.source)}"]
    if cal.holdout_mape_pct:
        lines.append("[meta.holdout_mape_pct]")
        lines += [f'"{k}" = {v:.3f}' for k, v in sorted(cal.holdout_mape_pct.items())]
    for gpu, c in sorted(cal.per_gpu.items()):
        lines += ["", f'[gpu."{gpu}"]']
        lines += [f"{k} = {_toml_value(v)}" for k, v in dataclasses.asdict(c).items()]
    lines += ["", "# Uncalibrated GPUs borrow the constants of a calibrated GPU of the same generation.",
              "[borrowed]"]
    lines += [f'"{k}" = "{v}"' for k, v in sorted(cal.borrowed.items())]
    return "\n".join(lines) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(float(v))


def merge_calibration(new: Calibration, old: Calibration) -> tuple[Calibration, list[str]]:
    """`new`, plus the GPUs only `old` has constants for, and `old`'s borrowings of any GPU
    with constants now (a `[borrowed]` line added by hand outlives a refit of its lender;
    it wins over `new`'s default borrowing of the same GPU).

    Returns the merged calibration and the GPU names kept from `old`.
    """
    kept = sorted(set(old.per_gpu) - set(new.per_gpu))
    per_gpu = {**{g: old.per_gpu[g] for g in kept}, **new.per_gpu}
    borrowed = {**new.borrowed, **{g: t for g, t in old.borrowed.items() if t in per_gpu}}
    borrowed = {g: t for g, t in borrowed.items() if g not in per_gpu}
    mape = {k: v for k, v in old.holdout_mape_pct.items() if k.split("/")[0] in kept}
    mape.update(new.holdout_mape_pct)
    source = new.source + (f"; constants of {', '.join(kept)} kept from the previous file" if kept else "")
    return replace(new, per_gpu=dict(sorted(per_gpu.items())), borrowed=dict(sorted(borrowed.items())),
                   holdout_mape_pct=mape, source=source), kept
