"""`provision sweep SPEC.toml --out DIR`: a grid of questions (CONTRACTS.md, command 7).

Reads the spec (`provisioner.sweep.load_sweep_spec`), answers every question through
`provisioner.search.provision` in parallel (joblib: local processes, or Dask with
`--dask-scheduler` / `--dask-local`), and writes DIR/results.parquet, DIR/results.csv
(one row per question x family) and DIR/summary.html. `--arrival`, `--cv`,
`--latency-profile` and `--latency-interp` are the main command's (CONTRACTS.md item 6),
applied to every question.
"""

from __future__ import annotations

import io
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path

import typer

from ..errors import ProvisionerError
from ..files import check_output_path, check_path_length, refuse_shipped, write_output
from ._common import (ARRIVAL_HELP, CV_HELP, RichProgress, family_pools, given, input_files,
                      latency_interp_option, latency_model_json, latency_profile_option, load_latency_model,
                      preemption_option, check_study_path, scheduler_option, study_option, swap_space_option)

OUTPUTS = ("results.parquet", "results.csv", "summary.html")
# --jobs / --dask-local: processes per CPU at most. Each is a whole Python process (numba, a
# search's arrays); past the cores they only contend for them, and a mistyped --dask-local 1000
# (or --jobs 1000 over a large grid) started a thousand of them before the first question.
MAX_PROCESSES_PER_CPU = 4
IN_SPEC_TOO = " Applies to every question; a spec whose '{key}' key says otherwise is refused (as --scheduler)."


def sweep_command(
    ctx: typer.Context,
    spec: Path = typer.Argument(..., metavar="SPEC.toml", help="The grid of questions (TOML; see the README)."),
    out: str = typer.Option(None, "--out", help="Directory for results.parquet, results.csv and summary.html "
                                                 "(created if missing)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the output files if they exist."),
    jobs: int = typer.Option(None, "--jobs", help="Questions in parallel on this machine (default: the cores; never more than the questions; "
                                                  "each process gets cores / jobs numba threads)."),
    dask_scheduler: str = typer.Option(None, "--dask-scheduler", metavar="ADDRESS",
                                       help="Run the questions on this Dask cluster (tcp://host:8786)."),
    dask_local: int = typer.Option(None, "--dask-local", metavar="N",
                                   help="Start a local Dask cluster of N worker processes and run on it."),
    study: str = study_option(),
    scheduler: str = scheduler_option(),
    preemption: str = preemption_option(),
    swap_space_gb: float = swap_space_option(),
    arrival: str = typer.Option(None, "--arrival", help=ARRIVAL_HELP + IN_SPEC_TOO.format(key="arrival")),
    cv: float = typer.Option(2.0, "--cv", help=CV_HELP + IN_SPEC_TOO.format(key="cv")),
    latency_profile: str = latency_profile_option(),
    latency_interp: str = latency_interp_option(),
) -> None:
    if out is None:
        raise ProvisionerError("--out DIR is required: the directory for results.parquet, results.csv and "
                               "summary.html")
    if not out.strip():   # Path('') is '.': an empty --out would write into the working directory unasked
        raise ProvisionerError("--out is empty: give the directory for the results, e.g. --out results "
                               "(--out . for the working directory)")
    out = Path(out)
    if dask_scheduler is not None and dask_local is not None:
        raise ProvisionerError("give --dask-scheduler ADDRESS or --dask-local N, not both")
    if jobs is not None and (dask_scheduler is not None or dask_local is not None):
        raise ProvisionerError("--jobs sets local worker processes, which a Dask run does not use; drop it "
                               "(a Dask run uses every worker of its cluster)")
    cpus = os.cpu_count() or 1
    for name, value in (("--jobs", jobs), ("--dask-local", dask_local)):
        if value is not None and value < 1:
            raise ProvisionerError(f"{name} must be >= 1 (got {value})")
        if value is not None and value > MAX_PROCESSES_PER_CPU * cpus:
            raise ProvisionerError(f"{name} must be at most {MAX_PROCESSES_PER_CPU * cpus} ({MAX_PROCESSES_PER_CPU}x "
                                   f"this machine's {cpus} CPUs; got {value}): each is a whole process; leave "
                                   f"it out for one per CPU")
    if str(out) == "-":   # made a directory named '-'
        raise ProvisionerError("--out '-': give a directory (a sweep writes three files there)")
    check_path_length(out, "--out")   # before the stat of `exists`, which would raise ENAMETOOLONG
    if out.exists() and not out.is_dir():
        raise ProvisionerError(f"--out '{out}' is a file; give a directory")
    from ..sweep import load_sweep_spec, run_sweep

    questions = load_sweep_spec(spec, scheduler if given(ctx, "scheduler") else None,
                                preemption if given(ctx, "preemption") else None,
                                swap_space_gb if given(ctx, "swap_space_gb") else None,
                                arrival, cv if given(ctx, "cv") else None).questions
    perf = load_latency_model(latency_profile, latency_interp)   # a bad file: one line, before any question
    check_study_path(study, [out / name for name in OUTPUTS], "--out")
    # the spec, the trace files it names and the profile: an answer must never replace one of them
    inputs = (spec, *input_files(*{str(q.request.workload) for q in questions}, latency_profile))
    if out.is_dir():
        paths = [check_output_path(out / name, flag="--out", force=force, force_hint="--force", inputs=inputs)
                 for name in OUTPUTS]
    else:   # created when the answers are written: a failed or interrupted sweep leaves no empty directory
        _check_creatable(out)
        paths = [out / name for name in OUTPUTS]
    if perf is not None:
        _warn_fallbacks(questions, perf)
    # said up front: a grid of 101 rates x 1,000 seeds started 101,000 questions with no word
    # (a progress bar on a terminal only); --study makes a long one resumable
    typer.echo(f"sweep: {len(questions):,} question{'s' * (len(questions) != 1)}"
               + ("" if study else "; a long sweep resumes after a stop with --study PATH"), err=True)
    # a bar on a terminal; off one, a heartbeat line a minute (a sweep of hours in a log)
    with _cluster(dask_scheduler, dask_local) as cluster, RichProgress(unit="questions") as progress:
        progress.start("sweep", total=len(questions))
        backend, n_jobs, threads = cluster if cluster is not None else ("loky", jobs, None)
        table = run_sweep(questions, study=study, n_jobs=n_jobs, backend=backend, threads=threads,
                          on_answer=lambda _question: progress.advance(1), perf=perf)
    _write(table, paths, force, spec, inputs)


def _warn_fallbacks(questions, perf) -> None:
    """Where the questions leave the measured profile: one `warning:` line each (stderr),
    once per model and set of pools, as `provision` warns for its one question."""
    seen = set()
    for q in questions:
        pools = tuple(family_pools(q.request, perf.catalog))
        if (q.request.model, pools) not in seen:
            seen.add((q.request.model, pools))
            latency_model_json(perf, q.request.model, pools)


def _write(table, paths: list[Path], force: bool, spec: Path, inputs: tuple) -> None:
    from reports import build_sweep_html

    parquet = io.BytesIO()
    table.to_parquet(parquet, index=False)
    data = (parquet.getvalue(), table.to_csv(index=False), build_sweep_html(table, title=f"Sweep: {spec.name}"))
    for path, payload in zip(paths, data):
        write_output(path, payload, flag="--out", force=force, force_hint="--force", inputs=inputs, parents=True)
    feasible = int(table["feasible"].sum())
    typer.echo(f"{table['question'].nunique()} questions, {len(table)} answers ({feasible} feasible): "
               + ", ".join(str(p) for p in paths))


def _check_creatable(out: Path) -> None:
    """Refuse, before any work, a --out directory that could not be created, or one in the
    shipped packages (`refuse_shipped`)."""
    refuse_shipped(out, "--out")

    base = out.absolute()
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise ProvisionerError(f"--out '{out}': '{base}' is a file, so the directory cannot be created; give another "
                               f"directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ProvisionerError(f"--out '{out}': cannot create it in '{base}' (not writable); choose a writable "
                               f"directory")


@contextmanager
def _cluster(scheduler: str | None, local: int | None):
    """(backend, n_jobs, threads) of a Dask client made active for joblib, or None (local)."""
    if scheduler is None and local is None:
        yield None
        return
    from distributed import Client, LocalCluster

    from ..sweep import local_threads
    if local is not None:
        n_workers, threads = local, local_threads(local)
        cluster = LocalCluster(n_workers=local, threads_per_worker=1, processes=True, dashboard_address=None,
                               env={"NUMBA_NUM_THREADS": str(threads)})   # set before numba loads
    else:
        cluster, threads = nullcontext(scheduler), "per-host"
    with cluster as address:
        try:
            client = Client(address, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ProvisionerError(f"--dask-scheduler '{scheduler}': cannot connect ({str(exc).splitlines()[0]}); "
                                   f"start one with `dask scheduler` and `dask worker ADDRESS`") from None
        with client:
            if local is None:
                n_workers = max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
            yield "dask", n_workers, threads
