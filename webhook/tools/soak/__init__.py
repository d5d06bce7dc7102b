"""``imex-webhook soak``: a long mixed request stream against a real ``serve`` (docs/SOAK.md).

``stream`` sends what kube-apiserver and kube-scheduler would; ``runner`` starts the service, samples its
resources and latency, and checks the invariants at the end.
"""
