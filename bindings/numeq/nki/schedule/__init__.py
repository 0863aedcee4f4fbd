"""The schedule of a run: its dependency graph (``graph``), the compiler's spills where its tiles
overflow SBUF (``spill``) and a predicted timeline (``timeline``) over the NeuronCore's engines and
DMA engines. ``Run.graph()`` and ``Run.schedule()`` give them."""

from .graph import Edge, Graph, Region, graph, region
from .spill import Transfer, spills
from .timeline import PARAMETERS, Schedule, schedule

__all__ = ["Edge", "Graph", "PARAMETERS", "Region", "Schedule", "Transfer", "graph", "region", "schedule", "spills"]
