"""Operator tools built on the service: ``imex-webhook bench``, ``simulate``, ``soak`` and ``explain``.

A top-level layer beside ``webhook.composition``: it may import anything in ``webhook``; nothing the
service or the agent runs imports it back.
"""
