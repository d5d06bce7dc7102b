"""``python -m webhook.sim.fabric``: the same as ``imex-webhook fabric-sim``."""

import sys

from webhook.sim.fabric.cli import main

sys.exit(main())
