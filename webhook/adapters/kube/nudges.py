"""The ``Nudger`` on the API server: a pod condition that makes kube-scheduler try the pod again.

kube-scheduler requeues a pod it holds as unschedulable when the pod itself is updated and a plugin that
rejected it cares; the extender counts as such a plugin for every event (docs/SCHEDULER.md). The update
is a strategic merge patch of ``status.conditions`` (merged by condition type, so the scheduler's own
``PodScheduled`` stays), through the ``pods/status`` subresource: the pod's spec, labels and annotations,
which its owner and the user hold, are never touched. The condition also tells a person why the pod was
tried again. Its message carries the time in milliseconds, so every retry is a real change with a new
resourceVersion (the scheduler ignores an update that carries the same one).
"""

from __future__ import annotations

from webhook.adapters.kube.api import STRATEGIC_MERGE_PATCH, Api, ApiError, call_timeout
from webhook.domain import requeue
from webhook.domain.model import Pod
from webhook.errors import DecisionError
from webhook.wire.kinds import PODS
from webhook.wire.timestamps import rfc3339

# Nobody waits on a retry; a slow API server delays it, never a scheduler's request.
TIMEOUT = call_timeout(10.0)


class PodNudger:
    def __init__(self, api: Api) -> None:
        self._api = api

    def nudge(self, pod: Pod, message: str, now: float) -> None:
        body = {
            # The UID precondition: a pod deleted and re-created under the same name is not touched.
            "metadata": {"uid": pod.uid},
            "status": {"conditions": [{
                "type": requeue.CONDITION, "status": "True", "reason": requeue.REASON, "message": message,
                "lastTransitionTime": rfc3339(now, "s"),
            }]},
        }
        try:
            self._api.call("PATCH", PODS.path(pod.namespace, pod.name, "status"), body=body,
                           content_type=STRATEGIC_MERGE_PATCH, timeout=TIMEOUT)
        except ApiError as exc:
            if exc.status == 404:
                return  # gone: nothing to retry
            raise DecisionError(exc.explain(f"update the {requeue.CONDITION} condition of pod {pod.ref}",
                                            "patch", "pods/status")) from exc
