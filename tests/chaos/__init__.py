"""Seeded chaos runs of the extender (issue 12, item 3): not collected by the suite yet.

The files are named ``chaos_*.py`` so that a plain ``pytest`` does not collect them: they found product
bugs that are still open (under API faults and replica kills, a domain's reservations can promise more GPUs
than it has, and with no in-tree NodeResourcesFit in front of the extender a node was over-committed once
in a few runs), so they fail intermittently. Run them on purpose:

    pytest tests/chaos/chaos_kube.py tests/chaos/chaos_fabric.py

They join CI once those bugs are fixed and the runs pass every time.
"""
