"""The Kubernetes API server adapter: raw JSON calls, watches, and the objects the service keeps there."""
