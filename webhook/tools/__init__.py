"""Operator tools built on the service: ``imex-webhook bench`` and ``imex-webhook simulate``.

A top-level layer like ``webhook.cli``: it may import anything in ``webhook``; nothing in
``webhook.domain``, ``webhook.state`` or the service imports it back.
"""
