"""Simulators of the systems the service works with, for tests and tools.

Nothing the service runs imports this package (an import-linter contract says so): these modules stand
in for kube-scheduler and friends, they are not part of the extender.
"""
