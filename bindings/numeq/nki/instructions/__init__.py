"""The NeuronCore's instructions: one table (``table.INSTRUCTIONS``, a row per ``nki.isa``
instruction) and one generic path (``path``) that binds a call's arguments to the row's forms,
checks, reads, computes the row's semantics, writes, traces, costs and records precision sites.
"""
