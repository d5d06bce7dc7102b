"""Operator tools built on the service: ``imex-webhook bench``, ``simulate``, ``soak`` and ``explain``.

A top-level layer beside ``webhook.composition``: it may import anything in ``webhook``; nothing the
service or the agent runs imports it back. One subpackage per tool (``bench``, ``simulate``, ``soak``,
``explain``), none importing another; ``cli`` hosts their command lines, and the two pieces more than one
tool uses sit beside them: ``servers`` (a real ``serve`` as a gunicorn subprocess over TLS: bench, soak)
and ``stats`` (percentiles: bench, soak, simulate). import-linter contracts in ``pyproject.toml`` say so.
"""
