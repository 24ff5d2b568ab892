"""The lag chart: a group's lag over time, drawn by plotly in the browser.

The figure is built here with plotly's Python package and embedded as a ``<div>`` plus the
script that draws it; plotly.js itself (``plotly.min.js``, shipped inside the Python
package) is served by the console at ``/static/plotly.min.js``, never from a CDN, so the
console works without internet access.
"""

from __future__ import annotations

import datetime
import functools

import plotly.graph_objects as go
import plotly.offline
from markupsafe import Markup

from spark_mq.console.sampler import LagPoint

#: Partitions drawn as their own line; a group with more shows only its total.
MAX_PARTITION_LINES = 20


@functools.cache
def plotly_js() -> str:
    """plotly.min.js from the installed plotly package (read once, about 5 MB)."""
    return str(plotly.offline.get_plotlyjs())


def lag_chart(points: list[LagPoint], div_id: str = "lag-chart") -> Markup:
    """A ``<div>`` and ``<script>`` drawing the total lag and each partition's lag in
    records over the sampled times (the script needs plotly.js loaded first)."""
    times = [datetime.datetime.fromtimestamp(p.time_s, tz=datetime.UTC) for p in points]
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(x=times, y=[p.total_lag for p in points], mode="lines+markers", name="total")
    )
    partitions = sorted({name for p in points for name in p.lag_by_partition})
    if 1 < len(partitions) <= MAX_PARTITION_LINES:
        for name in partitions:
            figure.add_trace(
                go.Scatter(
                    x=times,
                    y=[p.lag_by_partition.get(name) for p in points],
                    mode="lines",
                    name=name,
                )
            )
    figure.update_layout(
        height=320,
        margin={"l": 50, "r": 20, "t": 30, "b": 40},
        xaxis_title="time (UTC)",
        yaxis_title="lag (records)",
        yaxis_rangemode="tozero",
    )
    # No plotly logo: its link leads off the console, which may run without internet.
    html = figure.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"displaylogo": False},
    )
    # plotly's own output, trusted as markup: the data in it are numbers, times and
    # partition names (topic names allow only letters, digits, '.', '_' and '-').
    return Markup(html)
