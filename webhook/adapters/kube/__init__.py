"""The Kubernetes API server adapter, the only code that talks to it: ``api`` (raw JSON calls with
deadlines) and ``resources`` (the one table of the kinds they address, each a ``webhook.wire.kinds.Kind``);
``watch`` (the reflector) feeds ``cache.WatchedCache`` (the generic watched cache) behind ``attachments``
(FabricAttachments), ``reservations`` and ``ledgers`` (DomainReservations and their compare-and-swap) and
``node_agent`` (the node agent's port); ``leader`` (the reconciler's Lease); ``events``/``event_series``
(Events) and ``node_labels`` (the domain label on Nodes); ``backend`` puts the extender's side together."""
