"""The fabric reconciler's decisions: which attachments are released, detached or deleted, and when an
unaccounted composed block counts as an orphan to detach."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests import builders
from webhook.domain.fabric_plan import Act, Timeouts, plan
from webhook.domain.reading import parsing
from webhook.wire.fabric_attachment import Attachment, Block, Condition, Phase

NOW = 10_000.0
T = Timeouts(attach=120, release=300, orphan_grace=60)


def _at(seconds_ago: float) -> str:
    return datetime.fromtimestamp(NOW - seconds_ago, tz=UTC).isoformat().replace("+00:00", "Z")


def _att(phase: Phase, ago: float = 5, blocks: tuple[str, ...] = ("b1",), released: bool | None = None,
         node: str = "fab-00", deleting: bool = False) -> Attachment:
    conditions = () if released is None else (Condition("Released", "True" if released else "False"),)
    return Attachment(name="fa-1", node=node, pod_namespace="ml", pod_name="p", pod_uid="uid-p", zone="pool",
                      gpus=len(blocks), system=f"/redfish/v1/Systems/{node}", phase=phase,
                      blocks=tuple(Block(b) for b in blocks), phase_since=_at(ago), conditions=conditions,
                      deleting=deleting)


def _pod(node: str | None = None, phase: str = "Pending") -> dict[str, object]:
    p = builders.pod("p", node=node, phase=phase)
    p["metadata"]["uid"] = "uid-p"  # type: ignore[index]
    return p


def _plan(att: Attachment, pod: dict[str, object] | None, nodes: tuple[str, ...] = ("fab-00",),
          composed: dict[str, set[str]] | None = None, seen: dict[str, float] | None = None):  # type: ignore[no-untyped-def]
    pods = {"uid-p": parsing.pod(pod)} if pod is not None else {}
    return plan([att], pods, set(nodes), composed or {}, seen or {}, NOW, T)


@pytest.mark.parametrize(("case", "att", "pod", "act", "words"), [
    ("pod gone", _att(Phase.READY), None, Act.RELEASE, "is gone"),
    ("pod bound elsewhere", _att(Phase.READY), _pod("fab-01", "Running"), Act.RELEASE, "bound to node fab-01"),
    ("pod finished", _att(Phase.READY), _pod("fab-00", "Succeeded"), Act.RELEASE, "finishing"),
    ("attach past its deadline", _att(Phase.ATTACHED, ago=121), _pod(), Act.RELEASE, "attach timeout"),
    ("stuck composing after a crash", _att(Phase.COMPOSING, ago=500), _pod(), Act.RELEASE, "phase Composing"),
    ("failed with blocks", _att(Phase.FAILED), _pod(), Act.RELEASE, "attach failed"),
    ("being deleted", _att(Phase.READY, deleting=True), _pod(), Act.RELEASE, "being deleted"),
    ("released by the agent", _att(Phase.RELEASING, released=True), None, Act.DETACH, "agent released"),
    ("node gone long enough", _att(Phase.RELEASING, ago=301, node="gone"), None, Act.DETACH, "is gone"),
    ("detached", _att(Phase.DETACHED), None, Act.DELETE, "nothing left"),
    ("failed with nothing composed, pod gone", _att(Phase.FAILED, blocks=()), None, Act.DELETE, "nothing left"),
])
def test_reconcile_actions(case: str, att: Attachment, pod: dict[str, object] | None, act: Act, words: str) -> None:
    (action,) = _plan(att, pod)
    assert action.act is act and words in action.reason, case


@pytest.mark.parametrize(("case", "att", "pod"), [
    ("ready and waiting for its pod", _att(Phase.READY), _pod()),
    ("ready and bound here", _att(Phase.READY), _pod("fab-00", "Running")),
    ("attaching within the deadline", _att(Phase.ATTACHED, ago=30), _pod()),
    ("releasing, agent not done", _att(Phase.RELEASING, released=False), None),
    ("releasing, node gone but not for long", _att(Phase.RELEASING, ago=10, node="gone"), None),
    ("failed with nothing composed, pod still pending (it may retry)", _att(Phase.FAILED, blocks=()), _pod()),
])
def test_attachments_left_alone(case: str, att: Attachment, pod: dict[str, object] | None) -> None:
    assert _plan(att, pod) == [], case


def test_an_unaccounted_composed_block_is_detached_after_the_grace_period() -> None:
    att = _att(Phase.READY, blocks=("b1",))
    composed = {"/redfish/v1/Systems/fab-00": {"b1", "b9"}}
    assert _plan(att, _pod(), composed=composed, seen={"b9": NOW - 10}) == []
    (orphan,) = _plan(att, _pod(), composed=composed, seen={"b9": NOW - 61})
    assert orphan.act is Act.DETACH_ORPHAN and orphan.block == "b9" and orphan.system.endswith("fab-00")


def test_blocks_of_a_detached_attachment_are_not_accounted_for() -> None:
    att = replace(_att(Phase.DETACHED), blocks=(Block("b1"),))
    actions = _plan(att, None, composed={"/redfish/v1/Systems/fab-00": {"b1"}}, seen={"b1": 0.0})
    assert {a.act for a in actions} == {Act.DELETE, Act.DETACH_ORPHAN}


def test_a_malformed_phase_time_counts_as_just_now() -> None:
    att = replace(_att(Phase.ATTACHED), phase_since="yesterday-ish")
    assert _plan(att, _pod()) == []
