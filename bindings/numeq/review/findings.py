"""One finding of a port review: which rubric criterion it bears on, whether it passes, the rule
or check behind it, the buffer / instruction / output it names, and its evidence.

Every part of a review (correctness, tiling and memory, performance) speaks in findings, so that
the rubric table, the Markdown and the HTML report are one rendering of one list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["CRITERIA", "STATUSES", "ReviewFinding", "criterion_status"]

# The rubric's criteria, in the order the report lists them, with what each asks.
CRITERIA: dict[str, str] = {
    "preserved_behaviour": "the port computes the same operation: each output is explained by its platform's model",
    "numerical_standard": "the numerical standard is stated (a tolerance derived from the model) and met",
    "assumptions": "the verdict does not rest on an unsupported assumption about the hardware",
    "tiling_limits": "every tile fits the NeuronCore's documented instruction limits",
    "memory_hierarchy": "SBUF, PSUM and DMA use fit the capacities and follow the documented efficiency rules",
    "performance_claim": "the claimed speedup is supported by the supplied timings and profiles",
}

# pass: the rule holds; fail: it is broken; warn: holds, but costs performance or rests on an
# assumption; info: a measurement without a judgement.
STATUSES = ("pass", "fail", "warn", "info")


@dataclass(frozen=True)
class ReviewFinding:
    """One finding: ``criterion`` (a key of ``CRITERIA``), ``status`` (one of ``STATUSES``),
    ``rule`` (a short name of the rule or check), ``subject`` (the buffer, instruction, output or
    timing series it names), ``message`` (the finding in words) and ``evidence`` (where the rule's
    numbers come from: "documented: <source>", "assumed: <why>", "measured: <what>")."""

    criterion: str
    status: str
    rule: str
    subject: str
    message: str
    evidence: str = ""

    def __post_init__(self) -> None:
        if self.criterion not in CRITERIA:
            raise ValueError(f"criterion: {self.criterion!r} is not one of {', '.join(CRITERIA)}")
        if self.status not in STATUSES:
            raise ValueError(f"status: {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict:
        return asdict(self)


def criterion_status(findings: list[ReviewFinding], criterion: str) -> str:
    """The rubric's cell for ``criterion``: "fail" if any finding fails, else "pass" if any
    judges it (pass or warn), else "not assessed"."""
    mine = [f for f in findings if f.criterion == criterion]
    if any(f.status == "fail" for f in mine):
        return "fail"
    if any(f.status in ("pass", "warn") for f in mine):
        return "pass"
    return "not assessed"
