"""The Redfish Composition Service adapter: ``client.RedfishClient`` (the facade callers hold) over ``http``
(transport and sessions), ``inventory`` (discovery and cached reads) and ``converger`` (attach and detach
that never compose a block twice, waiting with ``tasks``); ``payloads`` parses, ``origin`` and ``limits``
bound where the transport goes and how much and how long it reads, ``fabric`` adapts the client to the
attacher's port."""
