"""The wire formats exactly as the peers send them (TypedDicts named after the upstream types), each with
its codec: parsing raises ``webhook.errors.WireError`` naming the offending field. The lowest layer: it
imports only the standard library and ``webhook.errors``."""

# The API group of our custom resources, and the prefix of every label and annotation the project owns.
PREFIX = "imex-webhook.io"
