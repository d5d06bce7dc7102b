"""The wire formats exactly as the peers send them (TypedDicts named after the upstream types)."""
