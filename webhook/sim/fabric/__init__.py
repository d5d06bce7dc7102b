"""A stateful DMTF Redfish Composition Service simulator (``imex-webhook fabric-sim``).

Serves PCIe/CXL GPU ResourceBlocks in ResourceZones and expandable ComputerSystems (one per Kubernetes
node), with the real composition semantics that the public emulators lack: the block state machine
(Unused, Composing, Composed, Failed, Unavailable), zone and availability checks with registry
MessageIds, ETags and If-Match, tasks with task monitors, Redfish sessions (HTTP Basic can be refused),
and fault injection for client tests.

Modules: ``inventory`` (file format, built-in demo), ``messages`` (registry messages, errors, request
bodies), ``state`` and ``compose`` (the model), ``sessions`` (login, tokens, timeout), ``payloads``
(Redfish JSON), ``app`` (Flask views), ``admin`` (test endpoints), ``server`` (HTTP/HTTPS, in-process
start/stop) and ``cli`` (the command). See docs/FABRIC.md.
"""
