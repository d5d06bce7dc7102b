"""Adapters: one module per external system (Kubernetes API, embedded files, fabric manager, NVML)."""
