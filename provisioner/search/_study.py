"""The durable record of an optuna search: every told trial, copied into an RDB study.

The search itself asks its trials of an in-memory study whose TPE sampler is seeded, so
its sequence of trials depends only on the question. With `--study`, each trial is also
written (params, value, SLO constraint, trial number as `seq`) to a study in the
database of `provisioner.store.ResultStore`, named after the question's content hash.
Run again after a kill, the search asks the same trials in the same order; their count
searches take every simulation from the result store, and each replayed trial is
checked against its record, so the resumed search re-uses all that was done and reaches
the answer of an uninterrupted run. Several processes may share one study (PostgreSQL):
a trial recorded twice is recorded identically; the first copy is kept.
"""

from __future__ import annotations

from ..errors import ProvisionerError

__all__ = ["DurableStudy"]


class DurableStudy:
    """An RDB study that mirrors the trials of a search (see the module docstring)."""

    def __init__(self, store, name: str):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = name
        self.study = optuna.create_study(storage=store.optuna_storage, study_name=name, direction="minimize",
                                         load_if_exists=True)
        self.recorded = {}
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            self.recorded.setdefault(t.user_attrs.get("seq"), t)
        self.replayed = 0

    def record(self, trial, value: float, violation: float, attrs: dict) -> None:
        """Write a told trial (an in-memory `optuna.trial.FrozenTrial`), or check it against its record."""
        import optuna

        prev = self.recorded.get(trial.number)
        if prev is not None:
            if prev.params != trial.params or prev.value != value:
                raise ProvisionerError(f"study '{self.name}' recorded trial {trial.number} as {prev.params} -> "
                                       f"{prev.value}, but this search finds {trial.params} -> {value}; the "
                                       f"database holds another search under this name: use a new study",
                                       params=("study",))
            self.replayed += 1
            return
        frozen = optuna.trial.create_trial(params=trial.params, distributions=trial.distributions, value=value,
                                           user_attrs={"seq": trial.number, **attrs},
                                           constraints={"slo_violation": float(violation)})
        self.study.add_trial(frozen)
        self.recorded[trial.number] = frozen
