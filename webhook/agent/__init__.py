"""The node agent (``imex-webhook agent --node NAME``): one per GPU node, as a DaemonSet.

It reads the node's GPUs through NVML (``nvml``, the only module importing pynvml), decides the node's
NVLink clique and fabric health (``clique``, pure), publishes them with a GPU inventory on the Node
(``inventory``), prepares fabric GPUs that the extender attached (``hotplug``) and removes them safely
before they are detached (``release``). ``sysfs`` is the only module touching /sys and /proc; the
Kubernetes side is ``webhook.adapters.kube.node_agent``. ``webhook.sim.nvml`` and ``webhook.sim.host``
fake pynvml and the kernel from one scenario file, so tests and the embedded ``serve`` mode run the real
code paths (handed in by ``webhook.composition``; the agent never imports a simulator).
"""
