"""The group sources' one ordered tuple (webhook.domain.groups.group_sources): every table feeds a mapping of the
Catalog, the store names its tables as operators have always seen them, and an object read from a file
goes to the table of its API group."""

from __future__ import annotations

from dataclasses import fields

import pytest

from webhook.domain.groups import group_sources
from webhook.domain.groups.group_sources import TABLES
from webhook.domain.model import Catalog
from webhook.wire.kinds import Kind


def test_every_table_feeds_a_mapping_of_the_catalog() -> None:
    assert {t.view.field for t in TABLES} <= {f.name for f in fields(Catalog)}


def test_the_tables_keep_the_labels_operators_see_and_one_api_kind_each() -> None:
    assert [t.kind.label for t in TABLES] == ["PodGroup", "PodGroup.v1alpha2", "Workload", "JobSet", "PyTorchJob",
                                              "MPIJob"]
    assert len({(t.kind.group, t.kind.version, t.kind.kind) for t in TABLES}) == len(TABLES)


def test_an_api_kind_reads_as_its_api_version_and_kind() -> None:
    assert str(Kind("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups")) == "scheduling.k8s.io/v1beta1 PodGroup"
    assert Kind("", "v1", "Pod", "pods").api_version == "v1"


@pytest.mark.parametrize(("api_version", "kind", "label"), [
    ("scheduling.k8s.io/v1beta1", "PodGroup", "PodGroup"),
    ("scheduling.k8s.io/v1alpha3", "PodGroup", "PodGroup"),  # a version not watched: its group's first table
    ("scheduling.volcano.sh/v1beta1", "PodGroup", "PodGroup"),  # no table of its group: its parser ignores it
    (None, "JobSet", "JobSet"),
    ("kubeflow.org/v2beta1", "MPIJob", "MPIJob"),
    ("v1", "Pod", None),
])
def test_an_object_from_a_file_goes_to_the_first_table_of_its_api_group(api_version: str | None, kind: str,
                                                                        label: str | None) -> None:
    table = group_sources.table_for(api_version, kind)
    assert (table.kind.label if table else None) == label
