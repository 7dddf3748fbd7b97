"""Workloads: request traces and arrival processes for LLM inference clusters.

A :class:`Trace` holds one entry per request (arrival time in s, prompt and output
tokens). :func:`azure_trace` loads the shipped Azure 2023 traces (CC-BY 4.0, see
``workloads/data/SOURCE.md``), :func:`read_trace_csv` reads a CSV trace, and
:class:`TraceGenerator` draws every trace the project simulates (nested across rates),
and :func:`make_workload` is its trace at one rate:

>>> from workloads import make_workload
>>> trace = make_workload("coding", 70, duration_s=120)
>>> len(trace), trace.rate_rps
(8400, 70.0)
"""

from hardware_catalog import decode_text   # public here too: workloads' readers were its first users
from workloads._arrivals import MAX_TRACE_REQUESTS, gamma_arrivals, poisson_arrivals, replay_arrivals
from workloads._generate import (ARRIVAL_PROCESSES, DEFAULT_DURATION_S, WINDOW_MEASURES, TraceGenerator,
                                 default_arrival, shipped_name)
from workloads._profile import ProfileFormatError, RateProfile, diurnal_profile, read_profile_csv
from workloads._readers import WORKLOAD_NAMES, azure_trace, read_trace_csv
from workloads._trace import Trace
from workloads._workload import make_workload
from workloads.errors import TraceFormatError, UnknownWorkloadError, WorkloadError

__all__ = [
    "ARRIVAL_PROCESSES",
    "DEFAULT_DURATION_S",
    "MAX_TRACE_REQUESTS",
    "ProfileFormatError",
    "RateProfile",
    "TraceGenerator",
    "WINDOW_MEASURES",
    "WORKLOAD_NAMES",
    "Trace",
    "TraceFormatError",
    "UnknownWorkloadError",
    "WorkloadError",
    "azure_trace",
    "decode_text",
    "default_arrival",
    "diurnal_profile",
    "shipped_name",
    "gamma_arrivals",
    "make_workload",
    "poisson_arrivals",
    "read_profile_csv",
    "read_trace_csv",
    "replay_arrivals",
]
