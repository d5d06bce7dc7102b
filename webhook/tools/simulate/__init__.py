"""``imex-webhook simulate``: placement policies compared on one simulated cluster and job stream
(docs/SIMULATE.md).

``workload`` makes the cluster's shape and the job stream, ``faults`` the node failures and fabric
degradations it suffers, ``cluster`` holds the simulated cluster's ground truth, ``policies`` places pods
(the imex-webhook policy through kube-scheduler's emulated ``cycle``), ``simulation`` runs the discrete
events into an ``outcome`` per policy, and ``report`` turns the outcomes into metrics, ``report.md``,
``metrics.json`` and plots.
"""
