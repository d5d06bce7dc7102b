"""State the decisions read (cluster snapshot, reservations) and the orchestration around them; no I/O libraries."""
