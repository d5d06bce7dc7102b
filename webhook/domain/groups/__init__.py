"""Which group a pod belongs to, of what size, in which segment, with how many spares: the group sources and
their resolution."""
