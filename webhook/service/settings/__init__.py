"""Settings for ``imex-webhook serve``: read once at start-up from the command line, then frozen.

:mod:`.groups` holds :class:`Settings`, one frozen group per concern with its defaults; :mod:`.flags` the
command line that shows them; :mod:`.checks` the rules a command line must pass and the Settings it builds.
None of them imports the web server, the Kubernetes client or the Redfish client, so ``serve --help`` and
the tools that read a default (``explain``'s ``--bind``) load none of those.
"""

from webhook.errors import SettingsError
from webhook.service.settings.checks import from_args
from webhook.service.settings.flags import add_arguments
from webhook.service.settings.groups import (
    DEFAULT_BIND,
    DEFAULT_BIND_BUDGET,
    KEEPALIVE,
    OPERATOR_SUBJECT,
    SCHEDULER_SUBJECT,
    WORKER_TIMEOUT,
    ClusterSettings,
    FabricSettings,
    LimitSettings,
    LogSettings,
    ServerSettings,
    Settings,
    TlsSettings,
    default_max_buffered,
    default_tls_dir,
)

__all__ = [
    "DEFAULT_BIND",
    "DEFAULT_BIND_BUDGET",
    "KEEPALIVE",
    "OPERATOR_SUBJECT",
    "SCHEDULER_SUBJECT",
    "WORKER_TIMEOUT",
    "ClusterSettings",
    "FabricSettings",
    "LimitSettings",
    "LogSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "TlsSettings",
    "add_arguments",
    "default_max_buffered",
    "default_tls_dir",
    "from_args",
]
