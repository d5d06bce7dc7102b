"""The application core: the verbs (filter, prioritize, preempt, bind, housekeeping, the retry of refused
groups), the fabric attacher and reconciler, and the ports every adapter implements (``webhook.engine.ports``).

It sits between the adapters, which implement its ports, and the stores and indexes of ``webhook.state``,
which it reads and writes; the decisions themselves are the pure functions of ``webhook.domain``.
"""
