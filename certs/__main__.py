"""``python -m certs``: see :mod:`certs.cli`."""

from certs.cli import main

raise SystemExit(main())
