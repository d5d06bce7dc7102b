"""imex-webhook: keep every pod of a multi-node-NVLink job inside one NVLink (IMEX) domain."""

__version__ = "0.1.0"
