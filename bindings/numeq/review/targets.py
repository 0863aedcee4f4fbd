"""The NeuronCore targets a review checks against: numeq.nki's machine room holds them
(``numeq.nki.machine.targets``); this name stays for reviews and their users."""

from ..nki.machine.targets import TARGETS, Spec, Target, peak_flops, start_partitions, target, target_names  # noqa: F401

__all__ = ["TARGETS", "Spec", "Target", "peak_flops", "start_partitions", "target", "target_names"]
