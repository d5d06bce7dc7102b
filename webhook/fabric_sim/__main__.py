"""``python -m webhook.fabric_sim``: the same as ``imex-webhook fabric-sim``."""

import sys

from webhook.fabric_sim.cli import main

sys.exit(main())
