"""Autoscaling: what scaling machines in and out saves over a day against buying for the peak.

    from provisioner.autoscale import AutoscalePolicy, autoscale
    result = autoscale("baseline-a100", day_trace, peak_trace, "bloom-176b", AutoscalePolicy(), perf=perf)
    result.saving_pct, result.to_json()

`plan_scaling` is the controller (causal, on observed arrivals); `size_for_windows` the
static cluster (the fewest machines meeting the SLOs on the day's busiest windows, by the
`Evaluator`; `size_for_peak` on one);
`calibrate` the closed-loop controller's `auto` thresholds from the sizing run.
The rules are in `provisioner/sim/SEMANTICS.md`, "Autoscaling".
"""

from ._calibrate import SCALE_IN_FACTOR, calibrate
from ._policy import SCALE_ON, AutoscalePolicy, ScalingSchedule, plan_scaling
from ._run import (AutoscaleResult, ClusterDay, Sizing, autoscale, check_floor, machine_hours, run_closed_loop,
                   measures_text, saving_caveat, saving_parts, saving_text, size_for_peak,
                   size_for_windows)

__all__ = ["SCALE_ON", "AutoscalePolicy", "ScalingSchedule", "plan_scaling", "AutoscaleResult", "ClusterDay",
           "autoscale", "check_floor", "machine_hours", "size_for_peak", "size_for_windows", "Sizing",
           "run_closed_loop", "measures_text", "saving_caveat", "saving_text", "saving_parts", "calibrate",
           "SCALE_IN_FACTOR"]
