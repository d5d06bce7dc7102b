"""``imex-webhook demo``: the built-in demo cluster, the jobs it submits, and the driver that checks the answers."""
