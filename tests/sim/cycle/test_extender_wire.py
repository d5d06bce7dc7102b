"""The extender protocol as kube-scheduler speaks it: what each verb receives, which nodes reach the
filter, how replies are read (failed calls, unknown names, Go's case-insensitive keys, ignorable)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.cycle import objects as o
from webhook.sim.cycle import ExtenderCallFailed, http_failure, parse_cluster, parse_config, schedule_one

TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
NODES = [o.node("n1"), o.node("n2", taints=[TAINT]), o.node("n3")]
POD = o.pod("p")


def test_with_a_node_cache_the_extender_gets_the_names_of_the_nodes_that_passed_in_tree() -> None:
    fake = o.FakeExtender()
    attempt = schedule_one(o.config(), parse_cluster(NODES), POD, fake)
    verb, args = fake.calls[0]
    assert (verb, args) == ("filter", {"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n3"]})
    assert fake.calls[1] == ("prioritize", {"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n3"]})
    assert fake.calls[2] == ("bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-ml-p",
                                      "Node": attempt.node})


def test_without_a_node_cache_the_extender_gets_a_node_list() -> None:
    fake = o.FakeExtender()
    schedule_one(o.config(cache_capable=False), parse_cluster(NODES), POD, fake)
    assert fake.calls[0][1] == {"Pod": POD, "Nodes": {"metadata": {}, "items": [NODES[0], NODES[2]]},
                                "NodeNames": None}


class Replying(o.FakeExtender):
    def __init__(self, reply: Any = None, failure: ExtenderCallFailed | None = None) -> None:
        super().__init__()
        self.reply, self.failure = reply, failure

    def filter(self, args: dict[str, Any]) -> Any:
        self.calls.append(("filter", args))
        if self.failure is not None:
            raise self.failure
        return self.reply


CONFIG = o.config()


@pytest.mark.parametrize(("fake", "outcome", "message"), [
    pytest.param(Replying(failure=http_failure(CONFIG.extenders[0], "filter", 500)), "error",
                 "failed filter with extender at URL https://imex-webhook.imex-system.svc:443/filter, code 500",
                 id="a non-200 reply aborts the cycle with kube-scheduler's own text"),
    pytest.param(Replying({"NodeNames": ["n9"]}), "error",
                 'extender "https://imex-webhook.imex-system.svc:443" claims a filtered node "n9" which is not '
                 "found in the input node list", id="a kept name that was not sent is an error"),
    pytest.param(Replying({"nodenames": ["n3"], "failednodes": {"n1": "busy"}}), "bound", "",
                 id="reply keys match case-insensitively, as Go's JSON decoder matches them"),
    pytest.param(Replying({"NodeNames": None, "Nodes": None}), "unschedulable",
                 "0/3 nodes are available: 1 node(s) had untolerated taint(s). "
                 "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
                 id="a reply keeping nothing and naming nothing makes the kept nodes vanish from the text"),
])
def test_how_filter_replies_are_read(fake: Replying, outcome: str, message: str) -> None:
    attempt = schedule_one(CONFIG, parse_cluster(NODES), POD, fake)
    assert (attempt.outcome, attempt.message) == (outcome, message)


def test_an_ignorable_extender_that_fails_is_passed_over() -> None:
    raw = {"profiles": [{}], "extenders": [{"urlPrefix": "https://x", "filterVerb": "filter", "bindVerb": "bind",
                                            "nodeCacheCapable": True, "ignorable": True}]}
    fake = Replying(failure=ExtenderCallFailed("down"))
    attempt = schedule_one(parse_config(raw), parse_cluster(NODES), POD, fake)
    assert attempt.outcome == "bound"
