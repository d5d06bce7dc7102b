"""Can this node take this pod, and which domain can take this group: capacity, node constraints, candidates,
the domain choice, exclusive domains, repair, plain GPU pods and what a tenant may hold."""
