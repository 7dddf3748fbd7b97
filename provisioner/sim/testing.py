"""The engines' building blocks, for white-box tests and benchmarks (as `optuna.testing`
is for optuna's): not the user-facing API, which is `provisioner.sim.simulate`.

- `run_fluid(inputs, ...)`, `run_des(inputs)`: one engine on `SimInputs` (`build_inputs`).
- `des_iteration_s(coef, ...)`: the discrete-event engine's scalar iteration time.
- `des_simulate_design(inputs, d)`: one design run to the end; its cluster state.
- `DesMachine`: the discrete-event engine's machine (its `start` admits work).
- `DesTokenMachine`: a token machine under an on-demand scheduler (split designs; its
  `take_work` admits transfers and migrations).
- `DesOnDemandMachine`: a machine under an on-demand scheduler (baselines; its
  `swap_out` puts a preempted request's KV in host memory).
- `ScalingController`: the closed-loop autoscaling controller (`advance(t)` runs its
  samples and ticks up to t on a cluster's state).
- `scaling_machine_usage(cl, s)`: the (virtual usage, requests) the controller reads on
  server s of cluster `cl`.
- `percentiles_into(a, n_finite, n, out)`: the fluid kernel's p50/p90/p99.
- `recorded_des_iterations()`: a context manager listing the arguments of every
  iteration the discrete-event engine runs meanwhile (for checks such as "no iteration
  carries more prompt tokens than the chunk budget").

Importing this module loads numba (the fluid kernel).
"""

from contextlib import contextmanager

from . import _des_machine
from ._des_scalar import iteration_s as des_iteration_s
from ._des_machine import Machine as DesMachine
from ._des_split_on_demand import TokenMachine as DesTokenMachine
from ._des_llumnix import OnDemandMachine as DesOnDemandMachine
from ._control import Controller as ScalingController
from ._control import machine_usage as scaling_machine_usage
from ._des import _simulate as des_simulate_design
from ._des import run_des
from ._fluid import _percentiles_into as percentiles_into
from ._fluid import run_fluid
from ._inputs import build_inputs

__all__ = ["run_fluid", "run_des", "des_iteration_s", "des_simulate_design", "DesMachine", "DesTokenMachine",
           "DesOnDemandMachine", "ScalingController", "scaling_machine_usage",
           "percentiles_into", "build_inputs", "recorded_des_iterations"]


@contextmanager
def recorded_des_iterations():
    """Yield a list that gets (prefill_tokens, prefill_sq_tokens, prefill_seqs, decode_batch,
    decode_context_tokens) of every iteration of the discrete-event engines built inside the
    block (each machine binds its iteration-time function when it is built)."""
    log = []
    real = _des_machine.iteration_fn

    def recording_fn(c):
        timed = real(c)

        def recording(*quantities):
            log.append(quantities)
            return timed(*quantities)
        return recording

    _des_machine.iteration_fn = recording_fn
    try:
        yield log
    finally:
        _des_machine.iteration_fn = real
