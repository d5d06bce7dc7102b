"""Simulators of the systems the service works with: kube-scheduler's cycle (``cycle``), a Redfish
composition service (``fabric``), NVML (``nvml``), a node's sysfs and procfs (``host``), a GPU node's
scenario (``node_scenario``), simulated node agents (``agents``), NVIDIA's DRA objects and an extender
over HTTP for the emulator.

No production package imports them: ``webhook.composition`` is the one module that hands them to the
service and the agent (``serve`` without a cluster, ``agent --nvml-sim``), besides the demo and the tools;
import-linter contracts in ``pyproject.toml`` say so.
"""
