"""The fabric fixtures (``tests.fabric_sims``): Redfish simulators on 127.0.0.1 and the fabric managers that
talk to them."""

from tests.fabric_sims import fabric, sim, start_sim

__all__ = ["fabric", "sim", "start_sim"]
