"""Everything the web app's Profile view draws, computed from one workspace into one record
(`ChartData`); each chart's query and record live in the sibling module named for it.
"""

from __future__ import annotations

from pydantic import Field

from core.records import Record
from profiler.analysis.chart_data.arrivals import ArrivalSeries, arrival_series
from profiler.analysis.chart_data.distributions import (
    Heatmap,
    LogHistogram,
    interarrival_histogram,
    length_heatmap,
    length_histogram,
)
from profiler.analysis.chart_data.model_split import ModelShare, model_split
from profiler.analysis.chart_data.reuse import ReuseCurve, reuse_curve
from profiler.workspace import Workspace


class ChartData(Record):
    """Everything the Profile view draws, computed from one workspace."""

    arrivals_1s: ArrivalSeries | None
    arrivals_60s: ArrivalSeries | None
    interarrival_s: LogHistogram | None
    input_tokens: LogHistogram
    output_tokens: LogHistogram
    lengths_2d: Heatmap
    prefix_reuse: ReuseCurve | None
    models: list[ModelShare] | None = Field(
        default=None, description="per-model split; None unless two or more models appear")


def chart_data(workspace: Workspace) -> ChartData:
    """Every chart record of the workspace's current trace (opened read-only).

    Raises:
        WorkspaceError: the workspace does not exist.
    """
    with workspace.connect(read_only=True) as con:
        return ChartData(
            arrivals_1s=arrival_series(con, 1.0),
            arrivals_60s=arrival_series(con, 60.0),
            interarrival_s=interarrival_histogram(con),
            input_tokens=length_histogram(con, "input_tokens"),
            output_tokens=length_histogram(con, "output_tokens"),
            lengths_2d=length_heatmap(con),
            prefix_reuse=reuse_curve(con),
            models=model_split(con),
        )
