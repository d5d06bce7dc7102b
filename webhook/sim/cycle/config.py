"""The parts of a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) the emulator obeys.

Read: the first profile's ``schedulerName``, its NodeResourcesFit args (``scoringStrategy`` type
``MostAllocated`` or ``LeastAllocated`` with resource weights, default LeastAllocated over cpu and
memory at weight 1; ``ignoredResources``; ``ignoredResourceGroups``), the profile's score weight for
NodeResourcesFit (``plugins.multiPoint``/``plugins.score``, default 1), and every extender (verbs,
``weight``, ``nodeCacheCapable``, ``managedResources``, ``ignorable``). As in kube-scheduler, an
extender's managed resource with ``ignoredByScheduler: true`` *replaces* NodeResourcesFit's
``ignoredResources``, and ignorable extenders are called after the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.sim.cycle.model import Pod

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
DEFAULT_FIT_WEIGHT = 1
STRATEGIES = ("MostAllocated", "LeastAllocated")


@dataclass(frozen=True)
class FitArgs:
    strategy: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
    ignored: frozenset[str] = frozenset()
    ignored_groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ExtenderConfig:
    url_prefix: str = ""
    filter_verb: str = ""
    prioritize_verb: str = ""
    bind_verb: str = ""
    preempt_verb: str = ""
    weight: int = 1
    node_cache_capable: bool = False
    managed_resources: frozenset[str] = frozenset()
    ignorable: bool = False

    def is_interested(self, pod: Pod) -> bool:
        """Empty ``managedResources``: every pod; else pods whose containers or init containers request or
        limit one of them (DRA claims do not count)."""
        return not self.managed_resources or bool(self.managed_resources & pod.resource_names)


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_name: str = "default-scheduler"
    fit: FitArgs = FitArgs()
    fit_weight: int = DEFAULT_FIT_WEIGHT
    extenders: tuple[ExtenderConfig, ...] = ()


def _fit_weight(plugins: Mapping[str, Any]) -> int:
    weight = DEFAULT_FIT_WEIGHT
    for point in ("multiPoint", "score"):
        for plugin in (plugins.get(point) or {}).get("enabled") or []:
            if plugin.get("name") == "NodeResourcesFit" and plugin.get("weight"):
                weight = int(plugin["weight"])
    return weight


def _fit_args(profile: Mapping[str, Any]) -> FitArgs:
    args: Mapping[str, Any] = {}
    for entry in profile.get("pluginConfig") or []:
        if entry.get("name") == "NodeResourcesFit":
            args = entry.get("args") or {}
    strategy = args.get("scoringStrategy") or {}
    kind = str(strategy.get("type") or "LeastAllocated")
    if kind not in STRATEGIES:
        raise ValueError(f"NodeResourcesFit scoringStrategy.type {kind!r}: the emulator knows {STRATEGIES}")
    resources = tuple((str(r["name"]), int(r.get("weight") or 1)) for r in strategy.get("resources") or [])
    return FitArgs(kind, resources or FitArgs().resources, frozenset(args.get("ignoredResources") or []),
                   frozenset(args.get("ignoredResourceGroups") or []))


def _extender(raw: Mapping[str, Any]) -> ExtenderConfig:
    managed = raw.get("managedResources") or []
    if raw.get("prioritizeVerb") and int(raw.get("weight") or 0) <= 0:
        raise ValueError("extender with a prioritizeVerb: weight must be positive (kube-scheduler refuses the config)")
    return ExtenderConfig(
        url_prefix=str(raw.get("urlPrefix", "")), filter_verb=str(raw.get("filterVerb") or ""),
        prioritize_verb=str(raw.get("prioritizeVerb") or ""), bind_verb=str(raw.get("bindVerb") or ""),
        preempt_verb=str(raw.get("preemptVerb") or ""), weight=int(raw.get("weight") or 0),
        node_cache_capable=bool(raw.get("nodeCacheCapable")),
        managed_resources=frozenset(str(r["name"]) for r in managed), ignorable=bool(raw.get("ignorable")))


def parse_config(raw: Mapping[str, Any]) -> SchedulerConfig:
    profiles = raw.get("profiles") or [{}]
    profile = profiles[0]
    fit = _fit_args(profile)
    extender_list = [e for e in raw.get("extenders") or [] if isinstance(e, Mapping)]
    ignored_by_scheduler = [str(r["name"]) for e in extender_list for r in e.get("managedResources") or []
                            if r.get("ignoredByScheduler")]
    if ignored_by_scheduler:
        fit = FitArgs(fit.strategy, fit.resources, frozenset(ignored_by_scheduler), fit.ignored_groups)
    extenders = [_extender(e) for e in extender_list]
    ordered = [e for e in extenders if not e.ignorable] + [e for e in extenders if e.ignorable]
    return SchedulerConfig(scheduler_name=str(profile.get("schedulerName") or "default-scheduler"), fit=fit,
                           fit_weight=_fit_weight(profile.get("plugins") or {}), extenders=tuple(ordered))
