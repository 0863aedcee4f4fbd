"""The schedule of a run: its dependency graph (``graph``) and a predicted timeline (``timeline``)
over the NeuronCore's engines and DMA engines. ``Run.graph()`` and ``Run.schedule()`` give them."""

from .graph import Edge, Graph, Region, graph, region
from .timeline import PARAMETERS, Schedule, schedule

__all__ = ["Edge", "Graph", "PARAMETERS", "Region", "Schedule", "graph", "region", "schedule"]
