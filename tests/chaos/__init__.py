"""Seeded chaos runs of the extender: Kubernetes mode with two replicas against the API-server fake under
API faults, restarts and replica kills (``test_chaos_kube``), and the fabric failing mid-attach
(``test_chaos_fabric``). What each injects and checks: docs/CHAOS.md."""
