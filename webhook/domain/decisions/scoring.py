"""The /prioritize decision: scores 0..10 (MaxExtenderPriority) for the nodes that passed filter.

Inside the group's domain: nodes that need no fabric attach score 5..10, tighter packing higher (fewer
GPUs left idle on the node keeps whole nodes free for the next job); nodes that need an attach score
1..4; nodes the pod does not fit on score 0. GPU pods outside any group are weighed by
``webhook.domain.placement.plain_pods`` (best fit in domains already in use); other pods get a neutral 0 everywhere, so
the scheduler's own plugins decide for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat

from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import resolution
from webhook.domain.jobs.resolution import Context
from webhook.domain.model import Node, Pod, Snapshot
from webhook.domain.placement import capacity, plain_pods
from webhook.domain.placement.capacity import Verdict
from webhook.wire.extender import MAX_EXTENDER_PRIORITY, MIN_EXTENDER_PRIORITY


def score_node(node: Node, ctx: Context, snapshot: Snapshot) -> int:
    if ctx.domain is None or node.domain != ctx.domain:
        return MIN_EXTENDER_PRIORITY
    fit = capacity.node_fit(node, ctx.demand, snapshot, ctx.pod_uid)
    if fit.verdict is not Verdict.FITS:
        return MIN_EXTENDER_PRIORITY
    if fit.attach:
        # Fewest fabric GPUs to attach first: the zone's pool is shared by every pod still to place, and the
        # reservation counted on the local GPUs of the nodes it chose (a node with more room only because it
        # can take more blocks from the pool would empty it for the group's last pods).
        share = min(fit.attach, ctx.demand.gpus) / max(ctx.demand.gpus, 1)
        return 1 + round(3 * (1.0 - share))
    size = max(node.gpus, 1)
    idle = max(0, fit.local_free - ctx.demand.gpus)
    tightness = 1.0 - min(idle, size) / size
    return 5 + round(5 * tightness)


def prioritize(pod: Pod, candidates: Sequence[str], inputs: DecisionInputs,
               node_view: Mapping[str, Node] | None = None) -> list[tuple[str, int]]:
    """The score of every candidate, in their order."""
    scores = weigh(pod, candidates, inputs, node_view)
    return list(zip(candidates, map(scores.get, candidates, repeat(MIN_EXTENDER_PRIORITY)), strict=True))


def weigh(pod: Pod, candidates: Sequence[str], inputs: DecisionInputs,
          node_view: Mapping[str, Node] | None = None) -> dict[str, int]:
    """The scores of the nodes of the group's domain, those among ``candidates`` at least; a candidate that
    is not in the result scores MIN_EXTENDER_PRIORITY (``prioritize`` lists every candidate)."""
    ctx = resolution.resolve(pod, inputs)
    snapshot = inputs.snapshot
    if ctx is None:
        return plain_pods.weigh(pod, candidates, snapshot, inputs.live, node_view)
    if ctx.domain is None:
        return {}
    nodes = node_view if node_view is not None else snapshot.nodes
    domain = ctx.domain
    # Only nodes inside the group's domain are weighed; filter already refused the others. kube-scheduler sends
    # the few nodes that passed filter: weigh those, not the whole domain.
    members = snapshot.domains.get(domain, ()) if node_view is None else \
        [n for n, node in node_view.items() if node.domain == domain]
    if len(candidates) < len(members):
        inside = frozenset(members)
        members = [name for name in candidates if name in inside]
    scores = {}
    for name in members:
        node = nodes.get(name)
        if node is not None:
            scores[name] = max(MIN_EXTENDER_PRIORITY, min(MAX_EXTENDER_PRIORITY, score_node(node, ctx, snapshot)))
    return scores
