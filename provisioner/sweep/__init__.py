"""Sweeps: a grid of provisioning questions answered through the one search path.

    from provisioner.sweep import load_sweep_spec, run_sweep
    spec = load_sweep_spec("sweep.toml")          # goals x models x workloads x rates x prices x seeds
    table = run_sweep(spec.questions, n_jobs=2)   # one row per question x family (SWEEP_COLUMNS)

Every question is a `ProvisionRequest` answered by `provisioner.search.provision`, in
joblib tasks (local processes or a Dask cluster); `study=` keeps the answers and every
simulation in a `ResultStore`, so a killed sweep run again resumes.
"""

from ._run import SWEEP_COLUMNS, answer_question, local_threads, run_sweep, table_of
from ._spec import Question, SweepSpec, load_sweep_spec, price_catalog

__all__ = ["load_sweep_spec", "SweepSpec", "Question", "run_sweep", "answer_question", "SWEEP_COLUMNS",
           "price_catalog", "local_threads", "table_of"]
