"""The Redfish Composition Service adapter: ``fabric.RedfishFabric`` (the engine's ``FabricManager``, the
one object callers hold) builds and holds ``http`` (transport and sessions), ``inventory`` (discovery and
cached reads) and ``converger`` (attach and detach that never compose a block twice, waiting with
``tasks``); ``payloads`` parses, ``origin`` and ``limits`` bound where the transport goes and how much and
how long it reads."""
