"""Reading the cluster's objects: the codecs from the wire's shapes to the model (pods, nodes, claims, workloads,
slices, quantities), and the node domain label they imply."""
