"""A stateful DMTF Redfish Composition Service simulator (``imex-webhook fabric-sim``).

Serves PCIe/CXL GPU ResourceBlocks in ResourceZones and expandable ComputerSystems (one per Kubernetes
node), with the real composition semantics that the public emulators lack: the block state machine
(Unused, Composing, Composed, Failed, Unavailable), zone and availability checks with registry
MessageIds, ETags and If-Match, tasks with task monitors, and fault injection for client tests.

Modules: ``inventory`` (file format, built-in demo), ``messages`` (registry messages and errors),
``state`` and ``compose`` (the model), ``payloads`` (Redfish JSON), ``app`` (Flask views), ``server``
(HTTP/HTTPS, in-process start/stop) and ``cli`` (the command). See docs/FABRIC.md.
"""
