"""``imex-webhook explain POD|GROUP``: where a group is placed and why a pod waits, asked of a running
service (docs/OPERATING.md).

``client`` asks the service's ``GET /inspect`` over TLS; ``words`` turns the answer into text (pure).
"""
