"""Server availability windows (autoscaling): which servers take new work when.

A server takes new requests only at arrival times in its window [from, until); outside
it the routing skips it, and a server whose window has closed finishes (drains) what it
already holds. Both engines read the windows from `SimInputs`; the default (None) is
every server always available, which changes nothing. Only routing at arrival reads
them, so they apply to designs whose requests pick one machine at arrival: baselines
(one mixed pool) and Splitwiser (co-located servers). Splitwise's two pools with
lending are refused (SEMANTICS.md, "Availability windows").
"""

from __future__ import annotations

import numpy as np

from ..errors import ProvisionerError

__all__ = ["server_windows", "check_windows", "windowed_cluster", "server_drained_s"]


def check_windows(inputs) -> None:
    """Refuse windows a design cannot honour, in one line: wrong shape, a split design
    (two pools with lending), or a time when no server takes new work."""
    if inputs.active_from_s is None and inputs.active_until_s is None:
        return
    if inputs.active_from_s is None or inputs.active_until_s is None:
        raise ProvisionerError("availability windows need both active_from_s and active_until_s")
    lo, hi = np.asarray(inputs.active_from_s, float), np.asarray(inputs.active_until_s, float)
    servers = inputs.n_machines.sum(axis=1)
    if lo.shape != hi.shape or lo.ndim != 2 or lo.shape[0] != inputs.n_designs or lo.shape[1] < servers.max():
        raise ProvisionerError(f"availability windows must be (designs, servers) = ({inputs.n_designs}, "
                               f">= {int(servers.max())}) arrays, got {lo.shape} and {hi.shape}")
    split = (inputs.n_machines[:, 1] > 0) & (inputs.mps_share <= 0)
    if split.any():
        raise ProvisionerError("availability windows (autoscaling) apply to designs whose requests pick one "
                               "machine at arrival (baseline and splitwiser families), not to Splitwise's two "
                               "pools with lending")
    for d in range(inputs.n_designs):
        n = int(inputs.n_machines[d, 0])   # baseline servers, or Splitwiser's machines (prompt servers)
        _check_covered(lo[d, :n], hi[d, :n], float(inputs.arrival_s[0]) if len(inputs.arrival_s) else 0.0,
                       float(inputs.arrival_s[-1]) if len(inputs.arrival_s) else 0.0)


def _check_covered(lo: np.ndarray, hi: np.ndarray, first_s: float, last_s: float) -> None:
    """Some server is available at every time from the first arrival to the last."""
    if np.any(hi <= lo):
        raise ProvisionerError("every availability window needs active_until_s > active_from_s")
    order = np.argsort(lo, kind="stable")
    reach = first_s
    for start, end in zip(lo[order], hi[order]):
        if start > reach:
            break
        reach = max(reach, end)
    if reach <= last_s:
        raise ProvisionerError(f"no server is available at {reach:g} s (availability windows leave a gap while "
                               f"requests arrive); keep at least one server available")


def server_windows(inputs, idx: np.ndarray) -> np.ndarray:
    """(len(idx), max servers, 2) float64 [from, until) per server of the designs idx."""
    check_windows(inputs)
    servers = int(inputs.n_machines[idx].sum(axis=1).max()) if len(idx) else 1
    window = np.empty((len(idx), max(servers, 1), 2))
    window[:, :, 0], window[:, :, 1] = 0.0, np.inf
    if inputs.active_from_s is not None:
        window[:, :, 0] = np.asarray(inputs.active_from_s, float)[idx, :servers]
        window[:, :, 1] = np.asarray(inputs.active_until_s, float)[idx, :servers]
    # Splitwiser: routing picks machine j through its prefill server j; its decode server n + j
    # shares the machine and its window.
    return np.ascontiguousarray(window)


class _Windowed:
    """Mixed into a discrete-event cluster: servers outside their window have infinite
    prompt work, so the least-loaded routing never picks them. Which servers take new
    requests is cached between window edges (routing asks at every arrival); whoever
    changes `window` calls `windows_changed`."""

    window: np.ndarray
    mask_from_s = mask_until_s = 0.0

    def available(self, t):
        if not self.mask_from_s <= t < self.mask_until_s:
            n = len(self.machines)
            lo, hi = self.window[:n, 0], self.window[:n, 1]
            self.mask = (lo <= t) & (t < hi)
            edges = np.concatenate([lo[lo > t], hi[hi > t]])
            self.mask_from_s, self.mask_until_s = t, float(edges.min()) if len(edges) else np.inf
        return self.mask

    def windows_changed(self):
        self.mask_until_s = -np.inf

    def prompt_work(self, t):
        work = super().prompt_work(t)
        return np.where(self.available(t)[:len(work)], work, np.inf)


def windowed_cluster(base, inputs, d: int):
    """The discrete-event cluster of design d, with its availability windows if any."""
    if inputs.active_from_s is None:
        return base(inputs, d)
    window = server_windows(inputs, np.array([d]))[0]
    cl = type("Windowed" + base.__name__, (_Windowed, base), {})(inputs, d)
    cl.window = window
    return cl


def server_drained_s(prefill_on, decode_on, finish_s, n_servers: int) -> np.ndarray:
    """(n_servers,) when each server's last request finished (0 for a server never used)."""
    drained = np.zeros(n_servers)
    finish = np.asarray(finish_s, float)
    np.maximum.at(drained, np.asarray(prefill_on, np.int64), finish)
    np.maximum.at(drained, np.asarray(decode_on, np.int64), finish)
    return drained
