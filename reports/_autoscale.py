"""The page of an autoscaling day (`provision autoscale --report`, and `provision report`
on its saved JSON): the signal the controller scaled on and the machines over the day,
beside the static cluster sized for the peak."""

from __future__ import annotations

import math

from provisioner.autoscale import measures_text, saving_caveat, saving_text
from provisioner.files import check_output_path, write_output

from ._schema import SCALE_ON_SERIES

__all__ = ["build_autoscale_html", "write_autoscale_report"]

# The timeline column each scaling signal is drawn from, and its axis title.
_TITLES = {"rate": "observed request rate (req/s)", "freeness": "cluster freeness (decode steps)",
           "queue": "requests queued or in service per machine"}
METRIC_TITLES = {on: (series, _TITLES[on]) for on, series in SCALE_ON_SERIES.items()}   # the schema's series


def build_autoscale_html(answer: dict) -> str:
    """One self-contained HTML page (plotly.js inlined) of an autoscale answer's JSON."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    _check_day(answer)
    tl = answer["timeline"]
    hours = [t / 3600.0 for t in tl["time_s"]]
    metric, title = METRIC_TITLES[answer["scale_on"]]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=(title, "machines (serving or loading)"))
    fig.add_trace(go.Scatter(x=hours, y=tl[metric], name=title), row=1, col=1)
    fig.add_trace(go.Scatter(x=hours, y=tl["machines"], name="autoscaled", line_shape="hv"), row=2, col=1)
    fig.add_trace(go.Scatter(x=[0, answer["duration_s"] / 3600.0], y=[answer["static"]["machines"]] * 2,
                             name="static (given)" if answer["static"].get("given") else "static (peak)",
                             line_dash="dash"), row=2, col=1)
    fig.update_xaxes(title_text="hour", row=2, col=1)
    fig.update_layout(title=f"Autoscaling {answer['family']}: {saving_text(answer)}"
                            f"{saving_caveat(answer)}")
    _shade_sizing_windows(fig, answer)
    # a fixed id (plotly's default is a random UUID): the same answer, the same bytes
    return fig.to_html(include_plotlyjs=True, full_html=True, div_id="chart-0")


def _check_day(answer: dict) -> None:
    """Refuse (ValueError, one line by `write_command_page`) values a hand-edited answer may
    hold that would draw a wrong page without a word: a day of no finite length, a static
    cluster of no machines, a timeline whose columns differ in length, no sizing window."""
    timeline, duration_s, machines = answer["timeline"], answer["duration_s"], answer["static"]["machines"]
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s is {duration_s!r:.40}, not a positive number of seconds")
    if not (isinstance(machines, int) and machines >= 1):
        raise ValueError(f"static machines is {machines!r:.40}, not a count of one or more")
    lengths = {name: len(column) for name, column in timeline.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError("the timeline's columns differ in length ("
                         + ", ".join(f"{name} {n}" for name, n in lengths.items()) + ")")
    if answer.get("sizing_windows") == []:
        raise ValueError("sizing_windows is empty: the static cluster was sized on at least one window")


def _shade_sizing_windows(fig, answer: dict) -> None:
    """A replayed day's busiest windows, where the static cluster was sized (red: the one that
    set its count; grey: the others; all grey when --static-machines gave it), said in a
    subtitle. Drawn arrivals are sized on the stream at the peak, no part of the day. Answers
    saved before `sizing_windows` existed shade their one `sizing` window."""
    if answer.get("trace", {}).get("arrival") != "replay" or "sizing" not in answer:
        return
    chosen = answer["sizing"]
    given = not chosen.get("sized", True)   # --static-machines: no window sized the cluster
    window_s, end_h = answer["trace"]["duration_s"], answer["duration_s"] / 3600.0
    said = []
    for window in answer.get("sizing_windows", [chosen]):
        start_h = window["start_s"] / 3600.0
        sized = window["start_s"] == chosen["start_s"] and not given
        for row in (1, 2):
            label = {"annotation_text": "static sized here", "annotation_position": "top left"} \
                if sized and row == 1 else {}   # (an annotation_position alone writes plotly's "new text")
            fig.add_vrect(x0=start_h, x1=min(start_h + window_s / 3600.0, end_h), line_width=0, row=row, col=1,
                          fillcolor="firebrick" if sized else "gray", opacity=0.25 if sized else 0.12, **label)
        said.append(f"{'red' if sized else 'grey'}: by {measures_text(window.get('by', ['requests']))}")
    sized_on = "its size given (--static-machines)" if given else "sized on the red one"
    fig.update_layout(title_text=f"{fig.layout.title.text}<br><sup>shaded: the day's busiest {window_s:g}-s "
                                 f"windows ({'; '.join(said)}), the static cluster {sized_on}</sup>")


def write_autoscale_report(answer: dict, path, *, force: bool = False, flag: str = "--report", inputs=(),
                           force_hint: str = "force=True"):
    """Write the page atomically (refusing an existing file unless `force`)."""
    check_output_path(path, flag=flag, force=force, force_hint=force_hint, inputs=inputs)
    return write_output(path, build_autoscale_html(answer), flag=flag, force=force, force_hint=force_hint,
                        inputs=inputs)
