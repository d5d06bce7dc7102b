"""``imex-webhook explain``'s words (webhook/tools/explain/words.py): from an ``/inspect`` answer and a
NAME to text, the answer made by the service's own ``inspection.summarize`` over built clusters. Which
NAME finds which group, what a person is told for each state, and what happens with hostile names and
answers of the wrong shape."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tests import builders as b
from webhook.domain import keys
from webhook.domain.model import Reservation
from webhook.domain.policy import Policy
from webhook.domain.views import inspection
from webhook.tools.explain.words import MAX_MEMBERS, AnswerError, explain_name

RACK = "11111111-2222-3333-4444-555555555555.7"
NOW = 1_000_000.0


def _answer() -> dict[str, Any]:
    two = Reservation(group_id=f"cd:{b.cd_uid('two')}", group_name="two", namespace="ml", domain=RACK, size=2,
                      gpus_per_pod=4, one_pod_per_node=True, created_at=NOW - 90, placed_at=NOW - 30,
                      version="7", holder="replica-a")
    ghost = Reservation(group_id="ann:ml/ghost", group_name="ghost", namespace="ml", domain=RACK, size=1,
                        gpus_per_pod=1, one_pod_per_node=False, created_at=NOW - 5)
    objects = [*b.rack("a", RACK, 4), *b.cd_objects("two", 2), *b.cd_objects("five", 5),
               b.pod("two-0", "two", node="a-00", phase="Running"), b.pod("two-1", "two", node="a-01", phase="Running"),
               *[b.pod(f"five-{i}", "five") for i in range(5)],
               *[b.pod("x", None, annotations={keys.GROUP_ANNOTATION: "x"}, namespace=ns) for ns in ("blue", "red")]]
    snap = b.snapshot(objects, {two.group_id: two})
    body = inspection.summarize(snap, {ghost.group_id: ghost}, Policy(), NOW)
    body["attachments"] = [{"name": "fa-1", "pod": "ml/two-0", "node": "a-00", "zone": "z", "gpus": 2,
                            "phase": "Composing", "message": "AddResourceBlock requested", "since": "",
                            "blocks": []}]
    answer: dict[str, Any] = orjson.loads(orjson.dumps(body))  # exactly what the wire carries
    return answer


ANSWER = _answer()

# (case, NAME, exit status, words the text must hold, in order)
CASES: list[tuple[str, str, int, tuple[str, ...]]] = [
    ("a placed group by namespace/name", "ml/two", 0,
     ("Group ml/two (compute-domain group, id cd:", "State:     placed: 2 of 2 pods placed",
      f"Reserved:  reserved in domain {RACK} (NVLink clique, 4 nodes, 8 of 16 GPUs free)",
      "for 2 pods x 4 GPUs, one pod per node; since 1970-01-12 13:45:10Z (90 s ago) by replica-a",
      "last pod placed 1970-01-12 13:46:10Z (30 s ago)", "Members:   2 of 2 placed (2 known)",
      "ml/two-0  a-00  (4 GPUs)", "Fabric:    ml/two-0 on a-00: 2 GPUs Composing (AddResourceBlock requested)")),
    ("a pod by its bare name marks it and says where it runs", "two-1", 0,
     ("Pod ml/two-1 runs on node a-01; it is a member of group ml/two.", "Group ml/two", "*ml/two-1  a-01")),
    ("a waiting group says why, in the scheduler's words", "five", 0,
     ("Group ml/five", "State:     pending: 0 of 5 pods placed", "Why:       no domain can host 5 pods",
      "Reserved:  no domain reserved for the group", "Members:   0 of 5 placed (5 known)", "five-0  not placed",
      # 8 GPUs free, 1 promised to ghost: a new group gets one 4-GPU pod, three of 2 or seven of 1 GPU.
      "Room now:  the most pods one new group could get in one domain: 1 of 4 GPUs, 3 of 2, 7 of 1",
      f"most room for 4-GPU pods: {RACK} (1)")),
    ("a waiting pod says it waits with its group", "ml/five-3", 0,
     ("Pod ml/five-3 is not placed yet: it waits with its group; it is a member of group ml/five.",
      "*ml/five-3  not placed")),
    ("a group by its id", f"cd:{b.cd_uid('five')}", 0, ("Group ml/five",)),
    ("a proposed reservation whose pods are not known yet", "ghost", 0,
     ("Group ml/ghost (id ann:ml/ghost)", "Why:       no pod of the group is known yet",
      "Reserved:  proposed (not stored yet) in domain", f"most room for 1-GPU pods: {RACK} (7)")),
    ("a name in two namespaces is ambiguous", "x", 2, ("'x' is ambiguous", "group blue/x", "group red/x", "pod blue/x",
                                                       "pod red/x")),
    ("a namespace picks one of them", "red/x", 0, ("Group red/x (annotation group, id ann:red/x)",)),
    ("an unknown name lists the groups", "ml/nothing", 1,
     ("no group and no pod of a group is named 'ml/nothing'", "(groups: blue/x, red/x, ml/five, ml/two, ml/ghost)")),
    ("an empty name", "  ", 2, ("NAME is empty",)),
    ("a huge name", "n" * 100_000, 2, ("NAME is 100000 characters",)),
    ("a name with a terminal escape", "ml/\x1b[2Jtwo", 2, ("'ml/\\x1b[2Jtwo' holds control characters",)),
]


@pytest.mark.parametrize(("name", "status", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_explain_finds_the_group_a_name_means_and_tells_a_person_about_it(
        name: str, status: int, words: tuple[str, ...]) -> None:
    code, text = explain_name(ANSWER, name, NOW)
    assert code == status, text
    at = 0
    for word in words:
        found = text.find(word, at)
        assert found >= 0, f"{word!r} not after position {at} in:\n{text}"
        at = found + len(word)
    if status:
        assert "\n" not in text.strip()  # a failure is one line


def test_strings_from_the_cluster_cannot_drive_the_terminal_and_are_cut() -> None:
    answer = copy.deepcopy(ANSWER)
    group = next(g for g in answer["groups"] if g["name"] == "ml/five")
    group["name"] = "ml/five\x1b]0;owned\x07\u202e"
    group["reason"] = "r" * 50_000
    group["pods"][0]["pod"] = "ml/five-0\r\x1b[1A"
    code, text = explain_name(answer, f"cd:{b.cd_uid('five')}", NOW)
    assert code == 0
    assert not any(c in text for c in "\x1b\x07\r\u202e")
    assert "\\x1b]0;owned\\x07\\u202e" in text and "(50000 characters)" in text
    assert len(text) < 10_000


def test_a_large_group_lists_its_first_members_and_counts_the_rest() -> None:
    answer = copy.deepcopy(ANSWER)
    group = next(g for g in answer["groups"] if g["name"] == "ml/five")
    group["pods"] = [{"pod": f"ml/five-{i}", "node": None, "gpus": 4} for i in range(500)]
    code, text = explain_name(answer, "ml/five", NOW)
    assert code == 0 and f"... and {500 - MAX_MEMBERS} more" in text
    assert text.count("not placed  (4 GPUs)") == MAX_MEMBERS


def _racks(rooms: dict[str, dict[str, int]]) -> dict[str, Any]:
    """ANSWER with these domains, each with its room for a new group, and the largest room among them."""
    answer = copy.deepcopy(ANSWER)
    template = answer["domains"][0]
    answer["domains"] = [{**template, "domain": name, "fitPods": fits} for name, fits in rooms.items()]
    answer["largestGroupFits"] = {g: max(f[g] for f in rooms.values()) for g in ("1", "2", "4")}
    return answer


def test_the_room_names_the_domains_with_the_most_room_for_pods_of_the_groups_size() -> None:
    rooms = {f"rack-{i}": {"1": 4 * i, "2": 2 * i, "4": i} for i in range(6)}
    rooms["rack-\x1b[2J"] = {"1": 40, "2": 20, "4": 0}
    code, text = explain_name(_racks(rooms), "ml/two", NOW)
    assert code == 0
    assert "the most pods one new group could get in one domain: 5 of 4 GPUs, 20 of 2, 40 of 1" in text
    assert "most room for 4-GPU pods: rack-5 (5), rack-4 (4), rack-3 (3) and 2 more domains\n" in text
    code, text = explain_name(_racks(rooms), "ghost", NOW)  # 1-GPU pods: the hostile name has the most room
    assert "most room for 1-GPU pods: rack-\\x1b[2J (40), rack-5 (20)" in text and "\x1b" not in text


def test_with_no_room_anywhere_the_room_says_so() -> None:
    code, text = explain_name(_racks({RACK: {"1": 0, "2": 0, "4": 0}}), "five", NOW)
    assert code == 0
    assert "one domain: 0 of 4 GPUs, 0 of 2, 0 of 1\n             no domain has room for one 4-GPU pod\n" in text


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


# (case, how the answer is spoiled, words the error names)
BAD_ANSWERS: list[tuple[str, Any, str]] = [
    ("not an object", [], "the answer is not a JSON object"),
    ("groups is an object", {"groups": {"a": 1}}, "answer.groups is not a list"),
    ("a group is a string", {"groups": ["cd:1"]}, "groups[0] is not an object"),
    ("a group without its id", {"groups": [{"pods": []}]}, "groups[0].group is missing"),
    ("GPUs as a string", {"groups": [{"group": "g", "pods": [{"pod": "a/b", "node": None, "gpus": "4"}]}]},
     "groups[0].pods[0].gpus is not a number"),
    ("a count that is a boolean", {"groups": [{"group": "g", "pods": [], "placed": True}]},
     "groups[0].placed is not a number"),
    ("deep nesting", {"groups": _deep(5_000)}, "groups[0] is not an object"),
    ("a reservation without a domain", {"reservations": [{"group": "g", "name": "a/g", "size": 1}]},
     "reservations[0].domain is missing"),
    ("room as text", {"domains": [{"domain": "d", "fitPods": {"4": "16"}}]}, "domains[0].fitPods.4 is not a number"),
    ("the largest room as a list", {"largestGroupFits": [16]}, "answer.largestGroupFits is not a object"),
    ("a huge number where a count goes", {"groups": [{"group": "g", "pods": [], "placed": 10**400}]}, ""),
]


@pytest.mark.parametrize(("answer", "words"), [c[1:] for c in BAD_ANSWERS], ids=[c[0] for c in BAD_ANSWERS])
def test_an_answer_of_the_wrong_shape_is_an_error_naming_the_field(answer: Any, words: str) -> None:
    if words:
        with pytest.raises(AnswerError, match=words.replace("[", r"\[").replace("]", r"\]")):
            explain_name(answer, "g", NOW)
    else:  # a count too big to be real is still a count: explained, not a crash
        code, text = explain_name(answer, "g", NOW)
        assert code == 0 and "pods placed" in text


def test_an_answer_from_before_the_map_fields_still_explains() -> None:
    answer = copy.deepcopy(ANSWER)
    for g in answer["groups"]:
        for key in ("name", "kind", "state", "reason", "expectedPods", "placedDomains"):
            g.pop(key, None)
    for d in answer["domains"]:
        d.pop("kind")
        d.pop("fitPods")
    answer.pop("largestGroupFits")
    code, text = explain_name(answer, "ml/two-0", NOW)
    assert code == 0 and "Pod ml/two-0 runs on node a-00" in text and "Reserved:  reserved in domain" in text
    assert "Room now" not in text
