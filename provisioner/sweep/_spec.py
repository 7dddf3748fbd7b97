"""A sweep spec: a TOML file naming a grid of provisioning questions.

    goals = ["cost"]                   # cost | power (take `rps`), throughput (takes a budget)
    models = ["bloom-176b"]
    workloads = ["coding", "conversation"]     # or CSV trace paths (relative to the spec; ~ expanded)
    rps = [20, 40, 70]                 # goals cost and power
    power_budget_kw = [455]            # goal throughput, iso-power (or cost_budget_usd_per_h)
    families = ["splitwise-hh", "baseline-h100"]   # every question searches all of them
    seeds = [0, 1]
    duration_s = 60                    # the other ProvisionRequest settings, one value each
    scheduler = "llumnix"              # least-work (default) | jsq | llumnix-dispatch | llumnix
    preemption = "swap"                # recompute (default) | swap (an on-demand scheduler's preemption)
    swap_space_gb = 4                  # swap: host memory per GPU, GiB (vLLM's --swap-space; default 4)
    verify = false

    [price_lists]                      # optional; default one list, "catalog" (shipped prices)
    catalog = {}
    spot = { dgx-h100 = 20.0, dgx-a100 = 9.0 }     # $/machine-hour overrides
    table-v = "sw-table-v"             # a cost option of the catalog, for every machine that has it

The grid is goals x models x workloads x (rates or budgets) x price lists x seeds; each
point is one `ProvisionRequest`, validated when the spec is read (every error: one line
naming the file, the key and the fix). The seeds apply to the questions they change
(`_seeded`: drawn arrivals, or searcher optuna); a question on a replayed trace is asked
once, under the first seed (every seed would ask it again). `load_sweep_spec` also takes
scheduler, preemption, swap_space_gb, arrival and cv (the CLI's flags) for every question: a spec
key of the same name must agree with them, or the spec is refused. An error names where
its values came from: the spec's keys after the file's quoted path, a value given as a
parameter by that parameter's name (`params` on the error: the CLI prints its flag).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from hardware_catalog import CatalogError, decode_text, load_catalog, read_input
from workloads import ARRIVAL_PROCESSES, WorkloadError, default_arrival, shipped_name

from .._validation import PRICE_USD_PER_H_RANGE, Interval, Options, Real, shown, toml_float, validate_params
from ..designs import FAMILIES, family_spec
from ..errors import ProvisionerError
from ..files import resolved
from ..schedulers import DEFAULT_SCHEDULER, PREEMPTION_MODES, SCHEDULERS, scheduler_applies_to
from ..search import ProvisionRequest

__all__ = ["SweepSpec", "Question", "load_sweep_spec", "price_catalog"]

# $/machine-hour of a price list, at most the cloud inventories' cap: past it no machine is
# rented, and the search's solver overflows or takes the price for infinite (cost inf, feasible)
MAX_PRICE_USD_PER_H = PRICE_USD_PER_H_RANGE[1]

GRID_KEYS = ("goals", "models", "workloads", "rps", "power_budget_kw", "cost_budget_usd_per_h", "families",
             "seeds")
# One value each, passed to every ProvisionRequest (name in the spec -> request field).
SETTINGS = {"duration_s": "duration_s", "arrival": "arrival", "cv": "cv", "slo_scale": "slo_scale",
            "searcher": "searcher", "verify": "verify", "verify_duration_s": "verify_duration_s",
            "max_machines": "max_machines", "trials": "n_trials", "scheduler": "scheduler",
            "preemption": "preemption", "swap_space_gb": "swap_space_gb"}
DEFAULT_PRICE_LIST = "catalog"
# The settings `load_sweep_spec` also takes as parameters (the CLI's flags), checked as
# `ProvisionRequest` checks them, before the spec: an error names the parameter (the flag),
# not a spec key the value never came from.
_POSITIVE = Interval(Real, 0, None, closed="neither")
_OVERRIDES = {"scheduler": [None, Options(SCHEDULERS)], "preemption": [None, Options(PREEMPTION_MODES)],
              "swap_space_gb": [None, _POSITIVE], "arrival": [None, Options(ARRIVAL_PROCESSES)],
              "cv": [None, _POSITIVE]}


@dataclass(frozen=True)
class Question:
    """One point of the grid: its number, the request and the price list it runs with."""

    index: int
    request: ProvisionRequest
    price_list: str
    prices: dict = field(default_factory=dict)   # machine -> $/h overrides

    def columns(self) -> dict:
        """The question's columns of the sweep table."""
        r = self.request
        cols = {"question": self.index, "goal": r.goal, "model": r.model, "workload": str(r.workload),
                "rps": r.rps if r.goal != "throughput" else None, "power_budget_kw": r.power_budget_kw,
                "cost_budget_usd_per_h": r.cost_budget_usd_per_h, "price_list": self.price_list, "seed": r.seed}
        if r.scheduler != DEFAULT_SCHEDULER:   # a least-work sweep keeps its columns
            cols["scheduler"] = r.scheduler
        if r.preemption != "recompute":        # and so does a recompute one
            cols["preemption"] = r.preemption
            cols["swap_space_gb"] = float(r.swap_space_gb)
        if r.arrival != _default_arrival(r.workload):   # and one on each workload's own arrivals
            cols["arrival"] = r.arrival
            if r.arrival == "gamma":
                cols["cv"] = float(r.cv)
        return cols


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    questions: tuple[Question, ...]


def load_sweep_spec(path, scheduler: str | None = None, preemption: str | None = None,
                    swap_space_gb: float | None = None, arrival: str | None = None,
                    cv: float | None = None) -> SweepSpec:
    """Read and validate a sweep spec; `ProvisionerError` (file, key, fix) on any problem.
    `scheduler` (None: the spec's own `scheduler` key, else least-work), `preemption`
    (None: the spec's, else recompute), `swap_space_gb` (None: the spec's, else 4),
    `arrival` (None: the spec's, else each workload's default) and `cv` (None: the spec's,
    else 2) apply to every question; a spec that names another value is refused."""
    overrides = {"scheduler": scheduler, "preemption": preemption, "swap_space_gb": swap_space_gb,
                 "arrival": arrival, "cv": cv}
    validate_params(overrides, _OVERRIDES)   # named as parameters, not spec keys
    path = Path(path)
    try:
        # a BOM (Notepad) or UTF-16 (PowerShell's `>`) reads as written, as every file a user gives
        raw = tomllib.loads(decode_text(read_input(path), universal_newlines=True))
    except FileNotFoundError:
        raise ProvisionerError(f"'{path}': no such sweep spec; give a TOML file (see provision sweep --help)") from None
    except OSError as exc:
        raise ProvisionerError(f"'{path}': cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:   # before ValueError, which it is
        raise ProvisionerError(f"'{path}': not UTF-8 or UTF-16 text; save it as a UTF-8 TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProvisionerError(f"'{path}': not valid TOML ({exc}); fix the syntax") from None
    except ValueError:   # Python refuses to read an integer of over 4,300 digits
        raise ProvisionerError(f"'{path}': a number has over 4,300 digits; give a real value") from None
    known = set(GRID_KEYS) | set(SETTINGS) | {"price_lists"}
    for key in raw:
        if key not in known:
            from hardware_catalog.errors import close_matches
            near = close_matches(key, known)
            hint = f"did you mean '{near[0]}'?" if near else f"known keys: {', '.join(sorted(known))}"
            raise ProvisionerError(f"'{path}': unknown key '{key}'; {hint}")
    grid = {k: _list(path, k, raw[k]) for k in GRID_KEYS if k in raw}
    settings = {SETTINGS[k]: raw[k] for k in SETTINGS if k in raw}
    for key, value in overrides.items():
        if value is None:
            continue
        if key in settings and settings[key] != value:
            raise ProvisionerError(f"'{path}': the spec asks for '{settings[key]}' and {key} '{value}' was given; "
                                   f"give it in one place", params=(key,))
        settings[key] = value
    # the values given as parameters only (a spec key that agrees is the spec's: errors name the key)
    passed = {key for key, value in overrides.items() if value is not None and key not in raw}
    if "cv" in passed and settings.get("arrival") != "gamma":
        # the CLI's rule for --cv: it sets gamma arrivals' burstiness only (the spec's own key: below)
        if "arrival" in raw:
            raise ProvisionerError(f"'{path}': key 'arrival' is {shown(raw['arrival'])}, and cv sets the burstiness "
                                   f"of gamma arrivals: set arrival = \"gamma\" in the spec, or drop cv",
                                   params=("cv",))
        raise ProvisionerError("cv sets the burstiness of gamma arrivals: give arrival gamma, or drop cv",
                               params=("cv", "arrival"))
    if "swap_space_gb" in settings and settings.get("preemption", "recompute") != "swap":
        # the same rule as the CLI's --swap-space-gb: it sizes swap preemption's host memory only
        _refuse_idle_swap_space(path, settings, passed)
    prices = _price_lists(path, raw.get("price_lists", {DEFAULT_PRICE_LIST: {}}))
    questions = _questions(path, grid, settings, prices, (passed, set(raw)))
    return SweepSpec(path, tuple(questions))


def _refuse_idle_swap_space(path: Path, settings: dict, passed: set) -> None:
    """swap_space_gb without preemption swap, in one line naming each value where it was
    given: a spec key, or a parameter (`params`: the CLI says its flag)."""
    what = "sets the host memory of KV swapping"
    if "swap_space_gb" not in passed:
        if "preemption" in passed:
            raise ProvisionerError(f"'{path}': key 'swap_space_gb' {what}, which preemption {settings['preemption']} "
                                   f"does not use: give preemption swap, or drop swap_space_gb from the spec",
                                   params=("preemption",))
        raise ProvisionerError(f"'{path}': swap_space_gb {what}: set preemption = \"swap\" in the spec, or drop "
                               f"swap_space_gb")
    if "preemption" in settings and "preemption" not in passed:
        raise ProvisionerError(f"'{path}': key 'preemption' is {shown(settings['preemption'])}, and swap_space_gb "
                               f"{what}: set preemption = \"swap\" in the spec, or drop swap_space_gb",
                               params=("swap_space_gb",))
    raise ProvisionerError(f"swap_space_gb {what}: give preemption swap, or drop swap_space_gb",
                           params=("swap_space_gb", "preemption"))


def _list(path: Path, key: str, value) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ProvisionerError(f"'{path}': key '{key}' is an empty list; give at least one value or drop the key")
    seen = []
    for v in values:   # a repeated value would ask the same questions twice (duplicate rows, twice the time)
        if any(v == w and isinstance(v, bool) == isinstance(w, bool) for w in seen):   # 10 and 10.0 too
            raise ProvisionerError(f"'{path}': key '{key}' lists {shown(v)} twice; give each value once")
        seen.append(v)
    return values


def _questions(path: Path, grid: dict, settings: dict, prices: dict, origin: tuple[set, set]) -> list[Question]:
    """The grid's questions; origin: (the settings given as parameters, the spec's keys)."""
    goals = grid.get("goals", ["cost"])
    scheduler = settings.get("scheduler", DEFAULT_SCHEDULER)
    preemption = settings.get("preemption", "recompute")
    default = tuple(f for f in FAMILIES if scheduler_applies_to(scheduler, f, preemption))   # those they apply to
    families = tuple(grid.get("families", default))
    _refuse_idle_keys(path, goals, grid, settings)
    _check_names(path, "families", families, family_spec)
    _check_names(path, "models", grid.get("models", []), load_catalog().model)
    _refuse_same_workloads(path, grid.get("workloads", []))
    out = []
    for goal in goals:
        if goal in ("cost", "power"):
            loads = [{"rps": r} for r in _needed(path, grid, "rps", goal)]
        elif goal == "throughput":
            loads = [{"power_budget_kw": b} for b in grid.get("power_budget_kw", [])]
            loads += [{"cost_budget_usd_per_h": b} for b in grid.get("cost_budget_usd_per_h", [])]
            if not loads:
                raise ProvisionerError(f"'{path}': goal throughput needs key 'power_budget_kw' or "
                                       f"'cost_budget_usd_per_h' (a list of budgets)")
        else:
            raise ProvisionerError(f"'{path}': key 'goals': unknown goal '{goal}'; use cost, power or throughput")
        seeds = grid.get("seeds", [0])
        combos = itertools.product(grid.get("models", ["bloom-176b"]), grid.get("workloads", ["coding"]), loads,
                                   prices.items(), seeds)
        for model, workload, load, (pname, plist), seed in combos:
            request = _request(path, dict(goal=goal, model=model, workload=_workload(path, workload), seed=seed,
                                          families=families, **load, **settings), origin)
            if seed != seeds[0] and not _seeded(request):   # built all the same: a bad seed is still refused
                continue   # the first seed's question, asked again: the same run, the same rows
            out.append(Question(len(out), request, pname, plist))
    _refuse_idle_seeds(path, grid, out)
    return out


def _seeded(request: ProvisionRequest) -> bool:
    """Whether the request's seed changes its answer: it draws the trace's arrivals and sizes
    (poisson, gamma) and seeds optuna's sampler. A replayed trace draws nothing, and a
    sweep's families (fixed machines) are searched on a grid unless searcher is optuna: such
    a question is the same under every seed, so a sweep asks it once, under its first seed."""
    return request.arrival != "replay" or request.searcher == "optuna"


def _refuse_idle_seeds(path: Path, grid: dict, questions: list) -> None:
    """Several seeds when no question is seeded (every workload replayed: no random draws):
    the key would change nothing. Checked once the requests have read their workloads, so a
    mistyped name is its own error, not this one."""
    seeds = grid.get("seeds", [0])
    if len(seeds) > 1 and not any(_seeded(q.request) for q in questions):
        raise ProvisionerError(f"'{path}': key 'seeds' lists {len(seeds)} seeds, and every workload is "
                               f"replayed (no random draws: each seed asks the same question again); give one "
                               f"seed, or draw arrivals with arrival = \"poisson\" or \"gamma\"")


def _refuse_idle_keys(path: Path, goals: list, grid: dict, settings: dict) -> None:
    """A key that no question reads would change nothing: refused, as the CLI refuses such flags."""
    for goal in goals:
        if goal not in ("cost", "power", "throughput"):
            raise ProvisionerError(f"'{path}': key 'goals': unknown goal '{goal}'; use cost, power or throughput")
    listed = ", ".join(map(str, goals))
    if "rps" in grid and not any(g in ("cost", "power") for g in goals):
        raise ProvisionerError(f"'{path}': key 'rps' is read by goals cost and power only (goals: {listed}); add "
                               f"one of them to 'goals', or drop 'rps'")
    for key in ("power_budget_kw", "cost_budget_usd_per_h"):
        if key in grid and "throughput" not in goals:
            raise ProvisionerError(f"'{path}': key '{key}' is a budget of goal throughput only (goals: {listed}); "
                                   f"add throughput to 'goals', or drop '{key}'")
    if "cv" in settings and settings.get("arrival") != "gamma":
        raise ProvisionerError(f"'{path}': key 'cv' sets the burstiness of gamma arrivals: set arrival = \"gamma\", "
                               f"or drop 'cv'")
    if not any(g in ("cost", "power") for g in goals):   # goal throughput races every affordable design
        for key, field in (("searcher", "searcher"), ("trials", "n_trials")):
            if field in settings:
                raise ProvisionerError(f"'{path}': key '{key}' steers the search of goals cost and power (goals: "
                                       f"{listed}); goal throughput races every design the budget affords: drop "
                                       f"'{key}'")
    if "n_trials" in settings and settings.get("searcher") != "optuna":   # a sweep's families have fixed machines
        raise ProvisionerError(f"'{path}': key 'trials' sets the optuna search, which runs for searcher = "
                               f"\"optuna\" only here: set searcher = \"optuna\", or drop 'trials'")
    if "verify_duration_s" in settings and settings.get("verify") is False:
        raise ProvisionerError(f"'{path}': key 'verify_duration_s' sets the discrete-event re-check, which "
                               f"verify = false turns off: drop one of them")


def _check_names(path: Path, key: str, names, lookup) -> None:
    for name in names:
        if not isinstance(name, str):
            raise ProvisionerError(f"'{path}': key '{key}' must list names (strings); got {name!r}")
        try:
            lookup(name)
        except (ProvisionerError, CatalogError) as exc:
            raise ProvisionerError(f"'{path}': key '{key}': {exc}") from None


def _needed(path: Path, grid: dict, key: str, goal: str) -> list:
    if key not in grid:
        raise ProvisionerError(f"'{path}': goal {goal} needs key '{key}' (a list of request rates, requests/s)")
    return grid[key]


def _refuse_same_workloads(path: Path, workloads: list) -> None:
    """Two spellings of one workload (a name and its alias, two paths to one file) would
    ask the same questions twice, as a value listed twice would (`_list`)."""
    seen: dict = {}
    for w in workloads:
        if not isinstance(w, str):   # a mistyped value: the request's check names it
            continue
        key = shipped_name(w) or _workload(path, w)
        if isinstance(key, str) and key in seen:
            raise ProvisionerError(f"'{path}': key 'workloads' lists {shown(seen[key])} and {shown(w)}, one "
                                   f"workload ({key}); give it once")
        seen[key] = w


def _workload(path: Path, workload):
    """A shipped name as it is; a trace path (it ends in .csv, any case, names a folder or
    `~`, or is a file beside the spec) relative to the spec's directory, `~` expanded and
    resolved by `files.resolved` as every path the provisioner reads or writes: a loop of
    symbolic links is one line naming the key. Anything else is left for the request's
    check, which names the nearest shipped name."""
    if not isinstance(workload, str) or not workload.strip() or _default_arrival(workload) != "replay":
        return workload   # '' would be the spec's own directory to Path: left for the request's check
    looks_like_path = (workload.lower().endswith(".csv") or "/" in workload or os.sep in workload
                       or workload.startswith("~") or (path.parent / workload).exists())
    if not looks_like_path:
        return workload
    target = Path(workload) if workload.startswith("~") else path.parent / workload   # an absolute path stays
    return str(resolved(target, f"'{path}': key 'workloads':"))


def _request(path: Path, kwargs: dict, origin: tuple[set, set]) -> ProvisionRequest:
    try:
        return ProvisionRequest(**kwargs)
    except (ProvisionerError, CatalogError, WorkloadError, TypeError, ValueError) as exc:
        params = getattr(exc, "params", ()) or (("workload",) if isinstance(exc, WorkloadError) else ())
        raise _located(path, str(exc).splitlines()[0], params, *origin) from None


def _located(path: Path, message: str, params, passed: set, written: set) -> ProvisionerError:
    """A request's error (`message`, naming the Python parameters `params`) said where its
    values came from: a spec key (`written`, or a grid key's default) after the file's
    quoted path; a value given as a parameter (`passed`: the CLI's flag) by its name, kept
    in `params` so that the CLI says the flag. A parameter-only setting left at its default
    is named as the parameter too when no spec key is at fault: a flag is then as good a
    fix as a key."""
    fields = {**SETTINGS, **_GRID_FIELDS}
    keys = [k for k, v in fields.items()
            if v in params and v not in passed and (k in written or v not in _OVERRIDES)]
    keys.sort(key=lambda k: k not in written)   # a key the spec wrote before one left at its default
    flags = tuple(p for p in params if p in passed)
    if keys:   # the message in the spec's words: its key for the field (trials, not n_trials), TOML's booleans
        # every key the spec wrote that the error names (rps = [1e308] over duration_s = 10 named
        # duration_s alone), in the error's order; else the first left at its default
        named = sorted((k for k in keys if k in written), key=lambda k: list(params).index(fields[k])) or keys[:1]
        for key in named:
            message = re.sub(rf"(?<![\w-]){re.escape(fields[key])}(?![\w-])", key, message)
        label = f"key '{named[0]}'" if len(named) == 1 else "keys " + " and ".join(f"'{k}'" for k in named)
        return ProvisionerError(f"'{path}': {label}: {message.replace('True or False', 'true or false')}",
                                params=flags)
    if flags:
        return ProvisionerError(message, params=tuple(p for p in params if p in _OVERRIDES))
    key = next((k for k, v in fields.items() if v in params), None)
    return ProvisionerError(f"'{path}': {f'key {key!r}' if key else 'a question'}: {message}")


_GRID_FIELDS = {"goals": "goal", "models": "model", "workloads": "workload", "rps": "rps",
                "power_budget_kw": "power_budget_kw", "cost_budget_usd_per_h": "cost_budget_usd_per_h",
                "families": "families", "seeds": "seed"}


def _default_arrival(workload) -> str | None:
    try:
        return default_arrival(workload)
    except (WorkloadError, TypeError, ValueError):
        return None   # the request's own check words the error


def _price_lists(path: Path, raw) -> dict[str, dict]:
    """name -> {machine: $/h}; every machine name and price checked against the catalog."""
    if not isinstance(raw, dict) or not raw:
        raise ProvisionerError(f"'{path}': key 'price_lists' must be a table of named price lists, e.g. "
                               f"[price_lists] spot = {{ dgx-h100 = 20.0 }}")
    catalog = load_catalog()
    out = {}
    for name, entry in raw.items():
        key = f"price_lists.{name}"
        if isinstance(entry, str):
            prices = {m: v.cost_options_usd_per_h[entry] for m, v in catalog.machines.items()
                      if entry in v.cost_options_usd_per_h}
            if not prices:
                raise ProvisionerError(f"'{path}': key '{key}': no machine of the catalog has cost option "
                                       f"'{entry}'; give a table of machine = $/h instead")
        elif isinstance(entry, dict):
            prices = {}
            for machine, price in entry.items():
                try:
                    catalog.machine(machine)
                except CatalogError as exc:
                    raise ProvisionerError(f"'{path}': key '{key}.{machine}': {exc}") from None
                number = toml_float(price)
                if number is None or not 0 < number <= MAX_PRICE_USD_PER_H:
                    raise ProvisionerError(f"'{path}': key '{key}.{machine}' must be a price > 0 and at most "
                                           f"{MAX_PRICE_USD_PER_H:g} in $/machine-hour (got {shown(price)})")
                prices[machine] = number
        else:
            raise ProvisionerError(f"'{path}': key '{key}' must be a table of machine = $/h or the name of a cost "
                                   f"option (got {entry!r})")
        out[str(name)] = prices
    return out


def price_catalog(prices: dict):
    """The shipped catalog with machine prices replaced by `prices` (machine -> $/h)."""
    catalog = load_catalog()
    if not prices:
        return catalog
    machines = {name: dataclasses.replace(m, cost_usd_per_h=prices[name]) if name in prices else m
                for name, m in catalog.machines.items()}
    return dataclasses.replace(catalog, machines=machines)
