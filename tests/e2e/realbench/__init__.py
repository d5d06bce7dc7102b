"""The real kube-scheduler at scale: ``python -m tests.e2e.realbench --nodes 5000 --out DIR``.

The real kube-apiserver and kube-scheduler of tests/e2e (Kubernetes ``controlplane.RELEASE``), N fake Nodes
in NVL72 cliques with half the cliques busy, and three schedulers run in turn on the same cluster: (a) the
shipped ``imex-scheduler`` profile with ``imex-webhook serve`` as its extender, (b) the same profile with a
pass-through extender, (c) kube-scheduler's default plugins with no extender. ``bench.py`` drives the rounds,
``run.py`` one run, ``report.py`` turns what was seen into the figures and the table.
"""
