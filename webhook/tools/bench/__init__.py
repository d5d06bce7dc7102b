"""``imex-webhook bench``: the service against a trivial baseline in the same run (docs/BENCHMARKS.md).

``runner`` runs it: the A/B scenarios over HTTP (``loadgen``), the serial scheduling cycle (``serial``)
and the in-process micro-benchmarks (``micro``), against the ``baseline`` app, with the cluster and bodies
of ``payloads``; ``report`` writes ``bench.json`` and ``bench.md``.
"""
