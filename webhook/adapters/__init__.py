"""Adapters: one subpackage per external system, the only code that talks to it: ``kube`` (the API
server), ``redfish`` (a composition service); ``embedded`` holds cluster objects from files in memory.
NVML's adapter lives with the node agent (``webhook.agent.nvml``), its only user."""
