"""``python -m tests.e2e.realbench --nodes 5000 --out DIR``: see tests/e2e/realbench/__init__.py."""

from tests.e2e.realbench.bench import main

raise SystemExit(main())
