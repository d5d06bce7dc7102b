"""Pure decisions over plain data: no web framework, no Kubernetes client, no I/O (import-linter enforced)."""
