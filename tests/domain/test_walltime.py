"""A group's walltime (webhook.domain.groups.walltime, docs/GROUPS.md "Walltime"): the smallest bound the pod's
and its Job's activeDeadlineSeconds, Kueue's max-exec-time-seconds label and the imex-webhook.io/max-runtime
annotation (pods over ComputeDomain) state; a value that is not one is refused at admission and at
scheduling with the reason; /inspect shows the bound and, once the group runs, when it ends at the latest."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders
from webhook.domain import keys
from webhook.domain.admission import mutating
from webhook.domain.decisions import filtering
from webhook.domain.groups import grouping, walltime
from webhook.domain.inputs import DecisionInputs
from webhook.domain.model import Walltime
from webhook.domain.policy import Policy
from webhook.domain.reading import parsing
from webhook.domain.views import inspection

A = "aaaa-1111.7"
NOW = 1_700_000_000.0


@pytest.mark.parametrize(("raw", "seconds"), [
    ("90m", 5400.0), ("4h", 14400.0), ("1h30m", 5400.0), ("2.5h", 9000.0), ("3600s", 3600.0), (" 45s ", 45.0),
    ("1s1h", 3601.0), ("8784h", 8784 * 3600.0), ("8785h", None), ("0s", None), ("0h0m", None), ("-1h", None),
    ("90", None), ("1d", None), ("h", None), ("", None), ("1h" * 20, None), ("9" * 100_000 + "s", None),
    ("1e3s", None), ("\uff11h", None), ("nan", None), ("inf", None), ("1.h", None),
], ids=["minutes", "hours", "hours and minutes", "a fraction", "seconds", "spaces around", "any order",
        "a year", "over a year", "zero", "zero in parts", "negative", "no unit", "days are not a unit", "no number",
        "empty", "too long", "a huge number", "exponent", "full-width digit", "nan", "inf", "a bare dot"])
def test_a_max_runtime_is_a_duration_in_hours_minutes_or_seconds_up_to_a_year(raw: str, seconds: float | None) -> None:
    assert walltime.parse_duration(raw) == seconds


def _job(name: str, deadline: Any = None, max_exec: str | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": name, "namespace": "ml", "uid": f"job-{name}"},
                           "spec": {"parallelism": 2}}
    if deadline is not None:
        job["spec"]["activeDeadlineSeconds"] = deadline
    if max_exec is not None:
        job["metadata"]["labels"] = {keys.KUEUE_MAX_EXEC_LABEL: max_exec}
    return job


def _pod(name: str, *, job: str | None = None, deadline: int | None = None, runtime: str | None = None,
         node: str | None = None, started: str | None = None) -> dict[str, Any]:
    pod = builders.pod(name, "train", node=node, phase="Running" if node else "Pending",
                       annotations={keys.MAX_RUNTIME_ANNOTATION: runtime} if runtime is not None else None)
    if job is not None:
        pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": job, "uid": f"job-{job}", "controller": True}]
    if deadline is not None:
        pod["spec"]["activeDeadlineSeconds"] = deadline
    if started is not None:
        pod["status"]["startTime"] = started
    return pod


def _cd(runtime: str | None = None) -> list[dict[str, Any]]:
    objects = builders.cd_objects("train", 2)
    if runtime is not None:
        objects[0]["metadata"]["annotations"] = {keys.MAX_RUNTIME_ANNOTATION: runtime}
    return objects


def _resolved(pod: dict[str, Any], *objects: dict[str, Any], cd_runtime: str | None = None) -> grouping.GroupResolution:
    snap = builders.snapshot([*_cd(cd_runtime), *objects])
    return grouping.resolve(parsing.pod(pod), snap.catalog, Policy())


@pytest.mark.parametrize(("pod", "objects", "cd_runtime", "expected"), [
    (_pod("p", runtime="2h"), (), None, Walltime(7200.0, "the pod's annotation imex-webhook.io/max-runtime", False)),
    (_pod("p"), (), "3h", Walltime(10800.0, "ComputeDomain ml/train's annotation imex-webhook.io/max-runtime", False)),
    (_pod("p", runtime="1h"), (), "3h", Walltime(3600.0, "the pod's annotation imex-webhook.io/max-runtime", False)),
    (_pod("p", deadline=600), (), None, Walltime(600.0, "the pod's activeDeadlineSeconds", True)),
    (_pod("p", job="j"), (_job("j", deadline=1800),), None,
     Walltime(1800.0, "Job ml/j's activeDeadlineSeconds", True)),
    (_pod("p", job="j"), (_job("j", max_exec="900"),), None,
     Walltime(900.0, "Job ml/j's kueue.x-k8s.io/max-exec-time-seconds", True)),
    (_pod("p", job="j", runtime="10m"), (_job("j", deadline=7200, max_exec="3600"),), None,
     Walltime(600.0, "the pod's annotation imex-webhook.io/max-runtime", False)),
    (_pod("p", job="j", runtime="1h"), (_job("j", max_exec="3600"),), None,
     Walltime(3600.0, "Job ml/j's kueue.x-k8s.io/max-exec-time-seconds", True)),
    (_pod("p", deadline=10**40), (), None, Walltime(float(walltime.MAX_SECONDS), "the pod's activeDeadlineSeconds",
                                                    True)),
    (_pod("p", job="j"), (_job("j", deadline="soon"),), None, None),
    (_pod("p"), (), None, None),
], ids=["the pod's annotation", "the ComputeDomain's annotation", "the pods' annotation wins over the ComputeDomain's",
        "the pod's deadline", "the Job's deadline", "Kueue's maximum execution time", "the smallest bound wins",
        "an enforced bound wins a tie", "a huge deadline counts as a year", "a Job's malformed deadline states nothing",
        "nothing stated"])
def test_the_walltime_is_the_smallest_bound_anything_states(pod: dict[str, Any], objects: tuple[dict[str, Any], ...],
                                                            cd_runtime: str | None, expected: Walltime | None) -> None:
    resolution = _resolved(pod, *objects, cd_runtime=cd_runtime)
    assert not resolution.problems and resolution.group is not None
    assert resolution.group.walltime == expected


@pytest.mark.parametrize(("pod", "objects", "cd_runtime", "problem"), [
    (_pod("p", runtime="forever"), (), None, "the pod's annotation imex-webhook.io/max-runtime='forever' is not a "
                                              "duration"),
    (_pod("p"), (), "0s", "ComputeDomain ml/train's annotation imex-webhook.io/max-runtime='0s' is not a duration"),
    (_pod("p", runtime="9" * 10_000 + "h"), (), None, "is not a duration"),
    (_pod("p", job="j"), (_job("j", max_exec="-5"),), None,
     "Job ml/j's label kueue.x-k8s.io/max-exec-time-seconds='-5' is not a number of seconds"),
], ids=["words", "zero on the ComputeDomain", "a huge number", "a negative Kueue label"])
def test_an_unusable_walltime_makes_the_group_invalid_with_the_reason(pod: dict[str, Any],
                                                                    objects: tuple[dict[str, Any], ...],
                                                                    cd_runtime: str | None, problem: str) -> None:
    resolution = _resolved(pod, *objects, cd_runtime=cd_runtime)
    assert any(problem in p for p in resolution.problems), resolution.problems
    assert all(len(p) < 600 for p in resolution.problems)  # a huge value is shown cut, not whole


def test_admission_denies_a_pod_whose_max_runtime_is_not_a_duration_and_names_it() -> None:
    snap = builders.snapshot([*builders.rack("a", A, 2), *_cd()])
    result = mutating.mutate(_pod("p", runtime="a while"), "ml", snap.catalog, snap.nodes, Policy())
    assert not result.allowed and "imex-webhook.io/max-runtime='a while' is not a duration" in result.message
    fine = mutating.mutate(_pod("p", runtime="45m"), "ml", snap.catalog, snap.nodes, Policy())
    assert fine.allowed, fine.message


def test_the_filter_refuses_a_pod_admitted_before_with_an_unusable_walltime_on_every_node() -> None:
    snap = builders.snapshot([*builders.rack("a", A, 2), *_cd("never")])
    out = filtering.filter_nodes(parsing.pod(_pod("p")), sorted(snap.nodes), DecisionInputs(snap, Policy(), NOW))
    assert out.outcome == "invalid-group" and not out.passed
    assert all("max-runtime='never' is not a duration" in why for why in out.unresolvable.values())


def test_inspect_shows_the_walltime_and_when_a_running_group_ends_at_the_latest() -> None:
    objects = [*builders.rack("a", A, 2), *_cd("2h"),
               _pod("train-0", node="a-00", started="2026-12-07T10:00:00Z"),
               _pod("train-1", node="a-01", started="2026-12-07T10:05:00Z")]
    group = next(g for g in inspection.summarize(builders.snapshot(objects), {}, Policy(), NOW)["groups"]
                 if g["name"] == "ml/train")
    assert group["walltime"] == {"seconds": 7200.0, "source": "ComputeDomain ml/train's annotation "
                                 "imex-webhook.io/max-runtime", "enforced": False}
    assert group["expectedEnd"] == "2026-12-07T12:00:00Z"  # from the first member's start


def test_a_group_that_states_no_walltime_or_has_not_started_has_no_expected_end() -> None:
    waiting = [*builders.rack("a", A, 2), *_cd("2h"), _pod("train-0")]
    group = inspection.summarize(builders.snapshot(waiting), {}, Policy(), NOW)["groups"][0]
    assert group["walltime"]["seconds"] == 7200.0 and group["expectedEnd"] is None
    silent = [*builders.rack("a", A, 2), *_cd(), _pod("train-0", node="a-00", started="2026-12-07T10:00:00Z")]
    group = inspection.summarize(builders.snapshot(silent), {}, Policy(), NOW)["groups"][0]
    assert group["walltime"] is None and group["expectedEnd"] is None


def test_a_start_time_at_the_calendars_end_shows_no_date_instead_of_failing() -> None:
    objects = [*builders.rack("a", A, 2), *_cd("8784h"), _pod("train-0", node="a-00", started="9999-12-31T00:00:00Z")]
    group = inspection.summarize(builders.snapshot(objects), {}, Policy(), NOW)["groups"][0]
    assert group["walltime"]["seconds"] == 8784 * 3600.0 and group["expectedEnd"] is None
