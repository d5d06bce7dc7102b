"""The /preempt decision: on which of kube-scheduler's preemption candidates a group pod may evict pods.

kube-scheduler's preemption (the DefaultPreemption PostFilter) dry-runs evictions against its in-tree
filters only; an extender takes part solely through ``preemptVerb``. Without it a group pod could evict
pods on a node outside its group's NVLink domain, be nominated there, and then be refused by /filter:
pods evicted for nothing.

The scheduler sends every candidate node with the victims its dry run picked (the lower-priority pods
whose eviction lets the pod fit, as few as it could). A pod outside any group keeps every candidate,
unchanged. For a group pod a candidate is kept only when, once its victims are gone, /filter could send
the pod there:

- the node lies in the group's domain: its reservation (stored, or proposed by an earlier /filter), else
  the domain the group would be given now. When no domain can host the group now (the usual case: the
  cluster is full, which is why the pod preempts), the same domain choice runs on the cluster as it
  would be once every candidate's victims are gone, so preemption makes room in one domain that can
  host the whole group instead of nowhere. If no domain can host the group even then, no candidate is
  kept and nothing is evicted. A domain chosen here is not recorded: the pod's next /filter chooses and
  stores the group's domain as always, and once the victims are gone the same choice comes out;
- the node is not held by another ComputeDomain once its victims are gone (the NVIDIA DRA driver allows
  one per node), and does not already run a member of the same ComputeDomain (one channel per node);
- while the pod's fabric GPUs are being attached to one node, only that node.
A node name we do not know is dropped: we cannot tell its domain.

Victims are passed through unchanged; we never add any (kube-scheduler looks each UID up on that node and
fails the preemption if it is not there). Removing victims would not help either: the scheduler does not
re-run its filters on our reply, its dry run already spared every victim it could while the pod still
fits, and a smaller set would leave the pod nominated to a node it does not fit. So the decision is
only which nodes.

On the wire (webhook.http.extender) ``ExtenderPreemptionResult`` has no ``Error`` field. A malformed
request gets a 400 as on every verb (kube-scheduler never sends one). Our own failure answers 200 with an
empty ``NodeNameToMetaVictims``: the scheduler then preempts nothing for this pod in this cycle and
retries it later, which is safe with any extender setting. A non-200 would be just as safe with
``ignorable: false`` (our configuration: preemption fails for that pod), but with ``ignorable: true`` the
scheduler skips the extender and preempts anywhere, out of the domain included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from webhook.domain.groups import segments
from webhook.domain.inputs import DecisionInputs
from webhook.domain.jobs import resolution
from webhook.domain.jobs.resolution import Context
from webhook.domain.model import Pod
from webhook.domain.placement import capacity, placement, vacated

# What a /preempt decision came to, as the decisions metric and the decision log label it:
# pass-through (not a group pod) | kept (some candidate kept) | none-kept (no candidate lies where the group
# may go, or the domain could not be reserved) | no-domain (none can host the group, even after evictions) |
# invalid-group (the group's definition is inconsistent).
PreemptResult = Literal["pass-through", "kept", "none-kept", "no-domain", "invalid-group"]
# Where the domain came from: reserved (stored) | proposed (by an earlier /filter) | chosen (now) |
# chosen-after-eviction (only once the victims are gone) | reserve-failed (that choice could not be stored,
# webhook.engine.preempt); or, without a domain: not-a-group | no-domain | invalid-group.
PreemptReasonClass = Literal["not-a-group", "reserved", "proposed", "chosen", "chosen-after-eviction",
                             "reserve-failed", "no-domain", "invalid-group"]


@dataclass(frozen=True, slots=True)
class PreemptOutcome:
    kept: tuple[str, ...]  # candidate nodes the pod may evict on, in the order they were sent
    dropped: dict[str, str] = field(default_factory=dict)  # node -> why not
    context: Context | None = None  # the group and domain the decision rests on (None: not a group pod)
    outcome: PreemptResult = "pass-through"
    reason_class: PreemptReasonClass = "not-a-group"


def preempt(pod: Pod, candidates: Mapping[str, Sequence[str]], victims: Mapping[str, Pod],
            inputs: DecisionInputs) -> PreemptOutcome:
    """Which ``candidates`` (node -> victim pod UIDs) the pod may preempt on.

    ``victims``: the victim pods we know, by UID (from the caches, or sent whole by the scheduler); a
    victim we do not know frees nothing in our accounting.
    """
    ctx = resolution.resolve(pod, inputs)
    if ctx is None:
        return PreemptOutcome(tuple(candidates))
    if ctx.resolution.problems:
        return _none_kept(candidates, ctx, "invalid-group")
    group = ctx.group
    assert group is not None
    after = vacated.without_victims(inputs.snapshot, candidates, victims, inputs.policy)
    source: PreemptReasonClass
    if ctx.proposal is not None:
        source = "chosen"
    elif ctx.reservation is not None:
        source = "reserved" if ctx.reservation.version else "proposed"
    else:
        later = resolution.resolve(pod, inputs.at(after))
        if later is None or later.domain is None:
            why = f"even once the candidates' victims are evicted, {later.reason if later else ctx.reason}"
            return _none_kept(candidates, replace(ctx, reason=why), "no-domain")
        ctx = replace(later, reason=f"once the candidates' victims are evicted: {later.reason}")
        source = "chosen-after-eviction"

    domain = ctx.domain
    attaching = capacity.own_attachment(pod.uid, inputs.snapshot)
    other_domain = f"node is outside domain {domain}, which holds the whole group {group.namespace}/{group.name}"
    kept: list[str] = []
    dropped: dict[str, str] = {}
    for name in candidates:
        node = after.nodes.get(name)
        if node is None:
            dropped[name] = "node is not in imex-webhook's cache; its domain is unknown"
        elif attaching is not None and name != attaching.node:
            dropped[name] = f"fabric GPUs are being attached to node {attaching.node} for this pod; it binds there"
        elif node.domain != domain:
            dropped[name] = other_domain if node.domain else "node has no NVLink or fabric domain label"
        elif not placement.eligible(node, group, after):
            dropped[name] = ("node stays held by another ComputeDomain after the evictions (the NVIDIA DRA "
                             "driver allows one per node)")
        elif group.one_pod_per_node and segments.runs_member(group, after.node_groups.get(name, frozenset())):
            dropped[name] = "node already runs a pod of this ComputeDomain (one IMEX channel per node)"
        else:
            kept.append(name)
    return PreemptOutcome(tuple(kept), dropped, ctx, "kept" if kept else "none-kept", source)


def _none_kept(candidates: Mapping[str, Sequence[str]], ctx: Context,
               outcome: Literal["no-domain", "invalid-group"]) -> PreemptOutcome:
    return PreemptOutcome((), {name: ctx.reason for name in candidates}, ctx, outcome, outcome)
