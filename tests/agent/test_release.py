"""Safe release (``webhook.agent.release``) on a simulated composable node after a hot-add.

Covered: a release is refused while a process holds ``/dev/nvidiaN`` open (found by the fd scan of the
fake /proc) or runs on the GPU (NVML), naming pid and command, and allowed once they exit; persistence
mode goes off and the device is removed through sysfs (or ``nvmlDeviceRemoveGpu_v2`` where offered),
and NVML and sysfs no longer see it; the other GPUs keep their handles, persistence, processes and
drain state, and no changing call touches them; a GPU already gone counts as released; a process whose
open files cannot be read blocks the release; nothing is ever removed while in use.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.agent.conftest import Make, Simulated
from webhook.agent import release
from webhook.agent.sysfs import Host
from webhook.wire.fabric_attachment import RELEASED_CONDITION, Attachment, Block, Phase

C1 = ("GPU-9b000000-0000-4000-8000-0000000000c1", "0000:c1:00.0")
C2 = ("GPU-9b000000-0000-4000-8000-0000000000c2", "0000:c2:00.0")
LOCAL = ("GPU-9b000000-0000-4000-8000-000000000001", "GPU-9b000000-0000-4000-8000-000000000002")


def _releasing(*blocks: tuple[str, str]) -> Attachment:
    return Attachment(name="fa-1", node="cdi-node-02", pod_namespace="ml", pod_name="trainer-0", pod_uid="uid-1",
                      zone="pool-a", gpus=len(blocks), system="/redfish/v1/Systems/cdi-node-02",
                      phase=Phase.RELEASING, blocks=tuple(Block(f"/b/{i}", uuid=u, pci_address=p)
                                                          for i, (u, p) in enumerate(blocks)), version="9")


def _release(node: Simulated) -> release.Release:
    return release.Release(node.nvml, node.host, release.Options(deadlines=node.fast()))


def _released(att: Attachment) -> tuple[str, str, str]:
    cond = att.condition(RELEASED_CONDITION)
    assert cond is not None
    return cond.status, cond.reason, cond.message


def test_a_release_is_refused_while_a_process_holds_the_device_then_allowed_when_it_exits(simulate: Make) -> None:
    node = simulate("composable-attached")
    node.nvml.gpus()
    att = _releasing(C1, C2)

    refused = _release(node).run(att)

    status, reason, message = _released(refused)
    assert (status, reason) == ("False", "InUse")
    assert message == f"{C1[0]} ({C1[1]}) is in use by pid 77 (nv-hostengine)"
    assert node.host.present(C1[1]) and node.host.present(C2[1])
    assert node.fake.calls == []  # nothing changed while refused

    node.sim.end_process(77)
    node.kernel.step()
    allowed = _release(node).run(refused)

    status, reason, message = _released(allowed)
    assert (status, reason) == ("True", "Removed"), message
    assert message.startswith("removed 2 GPUs in ") and C1[0] in message and C2[0] in message
    assert not node.host.present(C1[1]) and not node.host.present(C2[1])
    assert node.nvml.find(C1[0]) is None and node.nvml.find(C2[0]) is None
    assert node.sim.violations == []


def test_a_process_running_on_the_gpu_is_named_from_nvml(simulate: Make) -> None:
    node = simulate("composable-attached")
    node.sim.end_process(77)
    node.sim.start_process(5150, "python3", C2[1])
    node.kernel.step()

    refused = _release(node).run(_releasing(C2))

    assert _released(refused)[2] == f"{C2[0]} ({C2[1]}) is in use by pid 5150 (python3)"


def test_the_other_gpus_keep_running_untouched(simulate: Make) -> None:
    node = simulate("composable-attached")
    node.sim.end_process(77)
    node.kernel.step()
    node.nvml.gpus()
    handles = {u: node.fake.nvmlDeviceGetHandleByUUID(u) for u in LOCAL}
    before = {u: (g.persistence, [p.pid for p in g.processes], g.drained, g.enumerated)
              for u in LOCAL for g in [node.sim.gpu(u)]}

    result = _release(node).run(_releasing(C1, C2))

    assert result.released, _released(result)
    assert {u: node.fake.nvmlDeviceGetHandleByUUID(u) for u in LOCAL} == handles  # same handle objects
    after = {u: (g.persistence, [p.pid for p in g.processes], g.drained, g.enumerated)
             for u in LOCAL for g in [node.sim.gpu(u)]}
    assert after == before == {LOCAL[0]: (True, [1001], False, True), LOCAL[1]: (True, [], False, True)}
    assert {uuid for _, uuid in node.fake.calls} == {C1[0], C2[0]}  # no changing call on another GPU
    assert ("nvmlDeviceSetPersistenceMode", C1[0]) in node.fake.calls  # c1 had persistence on, c2 not
    assert ("nvmlDeviceSetPersistenceMode", C2[0]) not in node.fake.calls
    assert [g.uuid for g in node.nvml.gpus()] == list(LOCAL)
    assert node.host.present("0000:18:00.0") and node.host.present("0000:3a:00.0")


def test_nvml_remove_gpu_v2_is_used_where_the_binding_offers_it(simulate: Make) -> None:
    node = simulate("composable-attached")
    node.sim.remove_gpu_v2 = True
    node.fake.nvmlDeviceRemoveGpu_v2 = node.fake._remove_gpu_v2  # as a binding that has the function
    node.sim.end_process(77)
    node.kernel.step()

    result = _release(node).run(_releasing(C2))

    assert result.released, _released(result)
    assert ("nvmlDeviceRemoveGpu_v2", C2[0]) in node.fake.calls
    assert not node.host.present(C2[1])
    assert node.sim.violations == []


def test_a_gpu_that_is_already_gone_counts_as_released(simulate: Make) -> None:
    node = simulate("composable-attached")

    result = _release(node).run(_releasing(("GPU-gone", "0000:f0:00.0")))

    assert _released(result) == ("True", "Removed", _released(result)[2])
    assert _released(result)[2].endswith("(already gone)")


def test_a_process_whose_open_files_cannot_be_read_blocks_the_release(simulate: Make,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    node = simulate("composable-attached")
    node.sim.end_process(77)
    node.kernel.close()
    node.kernel.step()
    hidden = node.host.proc_root / "4711" / "fd"
    hidden.mkdir(parents=True)
    scandir = os.scandir

    def denied(path: Any) -> Any:  # what a non-root agent without the host PID namespace meets
        if str(path) == str(hidden):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", denied)
    result = _release(node).run(_releasing(C1))

    status, reason, message = _released(result)
    assert (status, reason) == ("False", "InUse")
    assert message.startswith("cannot see the open files of pids 4711: the agent needs root")


def test_the_fd_scan_skips_our_own_process_and_reports_each_holder_once(tmp_path: object) -> None:
    from pathlib import Path

    proc = Path(str(tmp_path)) / "proc"
    for pid, comm, fds in ((10, "self", ["/dev/nvidia0"]), (11, "dcgm", ["/dev/nvidia0", "/dev/nvidia0"]),
                           (12, "shell", ["/dev/nvidiactl"])):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        for n, target in enumerate(fds):
            (proc / str(pid) / "fd" / str(n)).symlink_to(target)
    (proc / "self").mkdir()

    scan = Host(Path(str(tmp_path)) / "sys", proc, own_pid=10).holders(["/dev/nvidia0"])

    assert [str(h) for h in scan.holders] == ["pid 11 (dcgm)"]
    assert scan.unreadable == ()
