"""The machine room: the NeuronCore as data and state, the ground floor of ``numeq.nki`` (it
imports nothing above it; the review reads its targets and rule book from here).

- ``targets``: each generation's limits and rates, every value with its evidence and source.
- ``assumptions``: the one typed table of undocumented behaviours (alternatives, default,
  meaning, source).
- ``rules``: the one rule book (an id per limit, shared with manifest reviews) and the checks a
  run makes.
- ``dtypes``, ``memory`` (allocations and views with their written-bytes masks), ``views``
  (indexing), ``psum`` (accumulation chains), ``registers`` (the engines' accumulators).
- ``arithmetic`` (casts, PE/PSUM plans, function model: numeq's one implementation), ``alu`` (the
  engines' fp32 operators), ``precision`` (where a run loses precision), ``context`` (one run's
  state: findings, trace, allocations).
"""
