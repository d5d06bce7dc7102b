"""The Redfish Composition Service adapter: ``client.RedfishClient`` (the facade callers hold) over ``http``
(transport and sessions), ``inventory`` (discovery and cached reads) and ``converger`` (attach and detach
that never compose a block twice, waiting with ``tasks``); ``payloads`` parses, ``fabric`` adapts the client
to the attacher's port."""
