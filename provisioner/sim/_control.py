"""Closed-loop autoscaling inside the discrete-event engine (SEMANTICS.md, "Closed-loop autoscaling").

Every `interval_s` the controller reads the cluster's state, Llumnix's pooled freeness
F = (sum M - sum V) / sum B over the serving machines, or the requests B per machine,
and starts machines (serving `startup_s` later: weight loading) or stops the newest one
(it takes no new request, drains, and is released once it holds nothing). It acts only
through the availability windows that routing already reads (`_windows._Windowed`): a
machine slot not started has the empty window [inf, inf), a started one [t + startup, inf),
a stopped one [from, t). Slots are reused once released, so the engine holds at most
`2 x max_machines` machine slots (the serving or loading ones, plus as many draining).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ProvisionerError
from ._windows import _Windowed

__all__ = ["ScalingControl", "SCALE_METRICS", "controlled_cluster", "scaling_log_arrays"]

SCALE_METRICS = ("freeness", "queue")
SAMPLE_S = 1.0   # the controller samples the cluster every second and decides on the interval's mean


@dataclass(frozen=True)
class ScalingControl:
    """The closed-loop controller's settings, in machines (each `servers_per_machine` servers).

    metric : "freeness" (pooled F in decode steps: scale out below `out_threshold`, in when
        F with one machine fewer stays above `in_threshold`) or "queue" (requests queued or
        in service per machine, Llumnix's B: out above `out_threshold`, in when with one
        machine fewer it stays below `in_threshold`). The queue counts decoding requests: a
        least-work cluster sized for its SLOs at the peak holds ~0.003 prompts waiting per
        machine, and TBT degrades with the decode batch before any prompt waits.
    calm_s : scale in only when the scale-in condition has held at every tick for this long
        and no machine is loading (Kubernetes' scale-down stabilization window), then
        again only after another `calm_s`.
    """

    metric: str
    out_threshold: float
    in_threshold: float
    interval_s: float
    startup_s: float
    min_machines: int
    max_machines: int
    initial_machines: int
    servers_per_machine: int
    horizon_s: float
    calm_s: float = 0.0

    def __post_init__(self):
        if self.metric not in SCALE_METRICS:
            raise ProvisionerError(f"metric must be one of {', '.join(SCALE_METRICS)} (got '{self.metric}')")
        if not 1 <= self.min_machines <= self.initial_machines <= self.max_machines:
            raise ProvisionerError(f"machines must satisfy 1 <= min_machines <= initial_machines <= max_machines "
                                   f"(got {self.min_machines}, {self.initial_machines}, {self.max_machines})",
                                   params=("min_machines", "max_machines"))

    @property
    def slots(self) -> int:
        return 2 * self.max_machines


class _Controlled(_Windowed):
    """Mixed into a discrete-event cluster: windows that the controller sets (it calls
    `windows_changed` after each change); the engine files each server's last iteration end
    in `last_end_s` (when a drain ended)."""


def controlled_cluster(base, inputs, d: int):
    """The discrete-event cluster of design d driven by `inputs.scaling` (baselines only)."""
    ctl = inputs.scaling
    servers = int(inputs.n_machines[d, 0])
    if inputs.n_machines[d, 1] > 0 or inputs.mps_share[d] > 0:
        raise ProvisionerError("closed-loop autoscaling (scale_on freeness or queue) scales baseline machines; "
                               "use scale_on rate for a splitwiser family", params=("scale_on",))
    if servers != ctl.slots * ctl.servers_per_machine:
        raise ProvisionerError(f"closed-loop autoscaling needs {ctl.slots * ctl.servers_per_machine} server slots "
                               f"(2 x max machines x servers per machine), got {servers}")
    cl = type("Controlled" + base.__name__, (_Controlled, base), {})(inputs, d)
    cl.window = np.full((servers, 2), np.inf)
    cl.last_end_s = [0.0] * servers
    cl.controller = Controller(cl, ctl)
    return cl


class Controller:
    """Starts and stops machine slots of cluster `cl` at its ticks (k x interval, 0 < t < horizon)."""

    def __init__(self, cl, ctl: ScalingControl):
        self.cl, self.ctl = cl, ctl
        self.rep = ctl.servers_per_machine
        self.kv_per_machine = float(cl.kv_cap[:self.rep].sum())
        self.free_slots = list(range(ctl.slots))[::-1]   # pop() gives the lowest slot
        self.live = []        # started and not stopped: [record index, slot], in start order
        self.draining = []    # stopped, not yet released: [record index, slot]
        self.records = []     # per start: [billed_from_s, serve_from_s, serve_until_s, released_s, slot]
        self.ticks = []       # per tick: (t, metric before the decision, machines serving or loading after)
        self.events = 0       # ticks that started or stopped machines
        self.calm_since_s = None   # first tick of the current run of ticks that would scale in
        for _ in range(ctl.initial_machines):
            self._start(0.0, 0.0)
        self.next_tick_s = ctl.interval_s
        self.sample_s = min(SAMPLE_S, ctl.interval_s)
        self.next_sample_s = self.sample_s
        self.acc = [0.0] * 5   # sums over the samples since the last tick: KV, V, B, machines, samples
        self.next_due_s = self.sample_s   # the engine calls `advance` at its first event at or after this

    def advance(self, t: float) -> None:
        """Run every sample and tick at or before t (the cluster's state is constant between
        events, so one run at the next event reads the state at its own time)."""
        horizon = self.ctl.horizon_s
        while min(self.next_sample_s, self.next_tick_s) <= t:
            now = min(self.next_sample_s, self.next_tick_s)
            if now >= horizon:   # no sample or tick remains: later events need not call again
                self.next_due_s = math.inf
                return
            if self.next_sample_s <= self.next_tick_s:
                self._sample(now)
                self.next_sample_s += self.sample_s
            if now == self.next_tick_s:
                self._tick(now)
                self.next_tick_s += self.ctl.interval_s
        self.next_due_s = min(self.next_sample_s, self.next_tick_s)

    def _sample(self, t: float) -> None:
        """Add the serving machines' KV, virtual usage and requests to the sums the next
        tick averages (one sample per `sample_s`: a tick reads its interval, not one instant)."""
        slots = [slot for k, slot in self.live if self.records[k][1] <= t]
        kv, virtual, requests = self._usage(slots)
        acc = self.acc
        acc[0] += kv
        acc[1] += virtual
        acc[2] += requests
        acc[3] += len(slots)
        acc[4] += 1

    # -- one decision ---------------------------------------------------------------
    def _tick(self, t: float) -> None:
        self._release_empty(t)
        serving = [(k, slot) for k, slot in self.live if self.records[k][1] <= t]
        n_live, n_serving = len(self.live), len(serving)
        value, add, remove = self._decide(n_live)
        add = min(add, self.ctl.max_machines - n_live, len(self.free_slots))
        if not remove or n_serving < n_live:   # a loading machine: the last decision still settling
            self.calm_since_s = None
        elif self.calm_since_s is None:
            self.calm_since_s = t
        stop = (remove and n_serving == n_live and n_serving > self.ctl.min_machines
                and t - self.calm_since_s >= self.ctl.calm_s)
        if add > 0:
            for _ in range(add):
                self._start(t, t + self.ctl.startup_s)
        elif stop:
            self._stop(serving[-1], t)   # the newest serving machine (Llumnix scales in its last instance)
            self.calm_since_s = t
        self.events += add > 0 or stop
        self.ticks.append((t, value, len(self.live)))

    def _decide(self, n_live):
        """(metric, machines to add, whether one machine fewer would do), from the means of
        the interval's samples: Llumnix's avg_load rule, the machines still loading counted
        as capacity (so a tick does not start them again)."""
        ctl, acc = self.ctl, self.acc
        samples = max(acc[4], 1.0)
        virtual, requests = acc[1] / samples, acc[2] / samples
        self.acc = [0.0] * 5
        if ctl.metric == "freeness":
            kv_live = n_live * self.kv_per_machine
            value = (acc[0] - acc[1]) / acc[2] if acc[2] else math.inf
            if requests and (kv_live - virtual) / requests < ctl.out_threshold:
                need = (ctl.out_threshold * requests + virtual - kv_live) / self.kv_per_machine
                return value, max(1, math.ceil(need)), False
            fewer = (kv_live - self.kv_per_machine - virtual) / requests if requests else math.inf
            return value, 0, fewer > ctl.in_threshold
        value = acc[2] / acc[3] if acc[3] else 0.0
        if requests / n_live > ctl.out_threshold:
            return value, max(1, math.ceil(requests / ctl.out_threshold) - n_live), False
        return value, 0, n_live > 1 and requests / (n_live - 1) < ctl.in_threshold

    def _usage(self, slots):
        """(KV M, virtual usage V, requests B) summed over the servers of the machines `slots`."""
        kv = virtual = requests = 0.0
        for slot in slots:
            for s in self._servers(slot):
                v, b = machine_usage(self.cl, s)
                kv += self.cl.kv_cap[s]
                virtual += v
                requests += b
        return kv, virtual, requests

    # -- starting, stopping, releasing ---------------------------------------------------
    def _servers(self, slot):
        return range(slot * self.rep, (slot + 1) * self.rep)

    def _start(self, billed_s: float, serve_s: float) -> None:
        slot = self.free_slots.pop()
        self.records.append([billed_s, serve_s, math.inf, math.inf, slot])
        self.live.append([len(self.records) - 1, slot])
        for s in self._servers(slot):
            self.cl.window[s] = (serve_s, math.inf)
            self.cl.last_end_s[s] = 0.0
        self.cl.windows_changed()

    def _stop(self, entry, t: float) -> None:
        k, slot = entry
        self.live.remove(list(entry))
        self.records[k][2] = t
        self.draining.append([k, slot])
        for s in self._servers(slot):
            self.cl.window[s, 1] = t
        self.cl.windows_changed()

    def _release_empty(self, t: float) -> None:
        """A draining machine holding nothing is released: at its stop, or at its last iteration's end."""
        for entry in list(self.draining):
            k, slot = entry
            if all(_empty(self.cl, s) for s in self._servers(slot)):
                self.records[k][3] = max([self.records[k][2]] + [self.cl.last_end_s[s] for s in self._servers(slot)])
                self.draining.remove(entry)
                self.free_slots.append(slot)

    def finish(self) -> None:
        """After the last event: the remaining ticks (on an empty cluster) and the releases."""
        self.advance(self.ctl.horizon_s)
        self._release_empty(math.inf)


def machine_usage(cl, s: int):
    """(virtual usage V in KV tokens, requests B) of server s, as Llumnix's dispatch freeness
    counts them (on-demand machines); under least-work the KV reserved for whole requests
    plus the queued prompts' `s + n`."""
    mc = cl.machines[s]
    if hasattr(mc, "usage"):   # on-demand KV (SEMANTICS.md, "Schedulers"): the pair its freeness reads
        return mc.usage()
    queue = list(mc.prompt_q)[1:] if mc.head_done else mc.prompt_q   # a partly prefilled head holds its KV
    virtual = mc.kv_used + sum(cl.S[r] + cl.N[r] for r in queue)
    return virtual, mc.running + len(mc.prefilling) + len(mc.prompt_q)


def _empty(cl, s: int) -> bool:
    mc = cl.machines[s]
    return not (mc.busy or mc.start_pending or mc.prompt_q or mc.wait_q or mc.running or getattr(mc, "incoming", 0)
                or getattr(mc, "swapped", None))


def scaling_log_arrays(controller: Controller) -> dict:
    """The controller's record as arrays: per started machine (billed_from_s, serve_from_s,
    serve_until_s, released_s; inf: never; slot), per tick (time_s, metric, machines), events."""
    rec = np.array(controller.records, dtype=float).reshape(-1, 5)
    ticks = np.array(controller.ticks, dtype=float).reshape(-1, 3)
    return {"billed_from_s": rec[:, 0], "serve_from_s": rec[:, 1], "serve_until_s": rec[:, 2],
            "released_s": rec[:, 3], "slot": rec[:, 4].astype(np.int64), "time_s": ticks[:, 0], "metric": ticks[:, 1],
            "machines": ticks[:, 2].astype(np.int64), "events": controller.events}
