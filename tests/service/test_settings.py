"""``imex-webhook serve`` settings: every validation rule of ``settings.from_args``, one row each with the
exact one-line message naming the flag, the edge values each rule still accepts, the defaults (held once, by
``Settings``), and the exit status 2 a refused command line gets before anything starts. ``--workers`` above
1 is refused in both modes: each worker would hold its own caches and state (Kubernetes mode scales with
Deployment replicas, embedded mode with threads)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from webhook import cli, errors
from webhook.agent import settings as agent_settings
from webhook.domain.fabric_plan import Timeouts
from webhook.domain.limits import DEFAULT_MAX_BODY, DEFAULT_MAX_RESPONSE, DEFAULT_POD_TTL
from webhook.domain.policy import MIN_TTL, Policy
from webhook.service import settings


def _from(argv: list[str]) -> settings.Settings:
    return settings.from_args(cli.parser().parse_args(["serve", *argv]))


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    return {"cluster": str(cluster), "kubeconfig": str(kubeconfig), "missing": str(tmp_path / "nope.yaml")}


WORKERS_IN_KUBERNETES = (
    "--workers {n}: Kubernetes mode runs one worker per replica, since each worker would hold its own caches, "
    "watches and choose-and-record lock; scale with Deployment replicas, which share state through the API "
    "server (more threads: --threads)")
WORKERS_EMBEDDED = ("--workers {n}: the embedded cluster lives in one process, since each worker would hold its "
                    "own copy of it, bindings and reservations; use --threads for concurrency")
BIND_BUDGET = "expected seconds in (0, 120), under the worker timeout (and the extender's httpTimeout)"
LABEL_KEY = ("expected a Kubernetes label key: [PREFIX/]NAME, NAME at most 63 letters, digits, '-', '_' and '.', "
             "beginning and ending with a letter or digit, PREFIX a DNS-1123 subdomain")
SUBDOMAIN = ("expected a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', beginning and "
             "ending with a letter or digit")
SCHEDULER_NAME = f"{SUBDOMAIN}, as kube-scheduler requires of a profile's schedulerName"
HUGE = str(10 ** 30)
LONG_KEY = "k\n" + "y" * 200
TTL_10 = ("--reservation-ttl 10: reservation TTL 10s is shorter than 360s: pods of a gang wait at Permit up to "
          "300s (kube-scheduler 1.35+) before they bind, and a reservation that expires meanwhile lets another "
          "group take the domain")
LONG_PORT = "127.0.0.1:" + "9" * 40
FULLWIDTH = "127.0.0.1:\uff18\uff14\uff14\uff13"

RESERVED_CAP = "expected a number of GPUs (0 to 999999999) or a percentage (0% to 100%)"
YIELD = "(0: holds never give way)"
UNTIL = "a job must be held for before it stops giving way"
REFUSED = [
    # TLS files
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-dir", "d"],
     "give either --tls-cert/--tls-key or --tls-dir, not both"),
    # cluster source
    (["--kubeconfig", "{kubeconfig}", "--in-cluster"], "give either --kubeconfig or --in-cluster, not both"),
    (["--kubeconfig", "{kubeconfig}", "--cluster", "{cluster}"],
     "--cluster files are for the embedded mode; drop them or drop --kubeconfig/--in-cluster"),
    (["--in-cluster", "--cluster", "{cluster}"],
     "--cluster files are for the embedded mode; drop them or drop --kubeconfig/--in-cluster"),
    (["--cluster", "{missing}"], "--cluster {missing}: no such file"),
    # workers and threads
    (["--workers", "0"], "--workers and --threads must be at least 1"),
    (["--threads", "0"], "--workers and --threads must be at least 1"),
    (["--threads", "-3"], "--workers and --threads must be at least 1"),
    (["--threads", "1025"], "--threads 1025: at most 1024 (each is an operating-system thread)"),
    (["--threads", HUGE], "--threads 10000000000000000000...: at most 1024 (each is an operating-system thread)"),
    (["--kubeconfig", "{kubeconfig}", "--workers", "2"], WORKERS_IN_KUBERNETES.format(n=2)),
    (["--in-cluster", "--workers", "4"], WORKERS_IN_KUBERNETES.format(n=4)),
    (["--workers", "2"], WORKERS_EMBEDDED.format(n=2)),
    (["--cluster", "{cluster}", "--workers", "3"], WORKERS_EMBEDDED.format(n=3)),
    # --bind
    (["--bind", "localhost"], "--bind 'localhost': expected HOST:PORT"),
    (["--bind", "localhost:http"], "--bind 'localhost:http': expected HOST:PORT"),
    (["--bind", "localhost:"], "--bind 'localhost:': expected HOST:PORT"),
    (["--bind", FULLWIDTH], f"--bind {FULLWIDTH!r}: expected HOST:PORT"),  # digits, but not ASCII ones
    (["--bind", "evil\n:http"], "--bind 'evil\\n:http': expected HOST:PORT"),  # the newline stays escaped
    (["--bind", "127.0.0.1:0"], "--bind '127.0.0.1:0': port 0 is out of range (1-65535)"),
    (["--bind", "127.0.0.1:65536"], "--bind '127.0.0.1:65536': port 65536 is out of range (1-65535)"),
    (["--bind", LONG_PORT], f"--bind {LONG_PORT!r}: port 999999999999... is out of range (1-65535)"),
    (["--bind", "h" * 5000 + ":0"], f"--bind {'h' * 60!r}: port 0 is out of range (1-65535)"),
    # request limits and client deadlines
    (["--max-body", "0"], "--max-body 0: expected bytes in [1, 1 GiB]"),
    (["--max-body", str(1024 ** 3 + 1)], "--max-body 1073741825: expected bytes in [1, 1 GiB]"),
    (["--max-body", HUGE], "--max-body 10000000000000000000...: expected bytes in [1, 1 GiB]"),
    (["--bind-budget", "0"], f"--bind-budget 0: {BIND_BUDGET}"),
    (["--bind-budget", "-1"], f"--bind-budget -1: {BIND_BUDGET}"),
    (["--bind-budget", "120"], f"--bind-budget 120: {BIND_BUDGET}"),
    (["--bind-budget", "nan"], f"--bind-budget nan: {BIND_BUDGET}"),
    (["--bind-budget", "inf"], f"--bind-budget inf: {BIND_BUDGET}"),
    (["--max-body", "4096", "--max-buffered", "4095"],
     "--max-buffered 4095: must hold at least one body (--max-body 4096)"),
    (["--handshake-timeout", "0"], "--handshake-timeout 0: expected seconds in (0, 3600]"),
    (["--header-timeout", "-1"], "--header-timeout -1: expected seconds in (0, 3600]"),
    (["--body-timeout", "3601"], "--body-timeout 3601: expected seconds in (0, 3600]"),
    (["--body-timeout", "nan"], "--body-timeout nan: expected seconds in (0, 3600]"),
    # fabric
    (["--fabric", "redfish"], "--fabric 'redfish': expected a URL, 'embedded' or 'none'"),
    (["--fabric", "https://bmc:8443"], "--fabric URL needs --fabric-credentials FILE ('user:password' or YAML)"),
    (["--fabric", "http://bmc"], "--fabric URL needs --fabric-credentials FILE ('user:password' or YAML)"),
    (["--fabric-refresh", "0"], "--fabric-refresh 0: expected seconds in (0, 3600]"),
    (["--fabric-refresh", "1e30"], "--fabric-refresh 1e+30: expected seconds in (0, 3600]"),
    (["--attach-timeout", "-1"], "--attach-timeout -1: expected seconds in (0, 86400]"),
    (["--attach-timeout", "nan"], "--attach-timeout nan: expected seconds in (0, 86400]"),
    (["--orphan-grace", "-1"], "--orphan-grace -1: expected seconds in [0, 86400]"),
    (["--orphan-grace", "inf"], "--orphan-grace inf: expected seconds in [0, 86400]"),
    # housekeeping, pods, watches, reservations
    (["--housekeeping-interval", "0"], "--housekeeping-interval 0: expected seconds in (0, 3600]"),
    (["--housekeeping-interval", "3601"], "--housekeeping-interval 3601: expected seconds in (0, 3600]"),
    (["--pod-ttl", "0"], "--pod-ttl 0: expected seconds in (0, 86400]"),
    (["--pod-ttl", "86401"], "--pod-ttl 86401: expected seconds in (0, 86400]"),
    (["--pod-ttl", "nan"], "--pod-ttl nan: expected seconds in (0, 86400]"),
    (["--watch-stall-timeout", "0"], "--watch-stall-timeout 0: expected seconds in (0, 86400]"),
    (["--watch-stall-timeout", "-5"], "--watch-stall-timeout -5: expected seconds in (0, 86400]"),
    (["--watch-stall-timeout", "1e10"], "--watch-stall-timeout 1e+10: expected seconds in (0, 86400]"),
    (["--reservation-ttl", "10"], TTL_10),
    (["--reservation-ttl", "nan"], "--reservation-ttl nan: expected seconds in [360, 86400]"),
    (["--reservation-ttl", "86401"], "--reservation-ttl 86401: expected seconds in [360, 86400]"),
    # Kubernetes names
    (["--domain-label", ""], f"--domain-label '': {LABEL_KEY}"),
    (["--domain-label", "bad key!"], f"--domain-label 'bad key!': {LABEL_KEY}"),
    (["--domain-label", "example.com/"], f"--domain-label 'example.com/': {LABEL_KEY}"),
    (["--domain-label=-zone"], f"--domain-label '-zone': {LABEL_KEY}"),
    (["--domain-label", "x" * 64], f"--domain-label {'x' * 64!r}: {LABEL_KEY}"),
    (["--domain-label", "Example.com/zone"], f"--domain-label 'Example.com/zone': {LABEL_KEY}"),
    (["--domain-label", "ok", "--domain-label", "a/b/c"], f"--domain-label 'a/b/c': {LABEL_KEY}"),
    (["--domain-label", LONG_KEY], f"--domain-label {LONG_KEY[:80] + '...'!r}: {LABEL_KEY}"),  # escaped, clipped
    (["--scheduler-name", ""], f"--scheduler-name '': {SCHEDULER_NAME}"),
    (["--scheduler-name", "Imex"], f"--scheduler-name 'Imex': {SCHEDULER_NAME}"),
    (["--scheduler-name", "a..b"], f"--scheduler-name 'a..b': {SCHEDULER_NAME}"),
    (["--scheduler-name", "a" * 254], f"--scheduler-name {'a' * 80 + '...'!r}: {SCHEDULER_NAME}"),
    (["--channel-device-class", "Channels!"], f"--channel-device-class 'Channels!': {SUBDOMAIN}"),
    (["--block-label", "bad key!"], f"--block-label 'bad key!': {LABEL_KEY}"),
    ([a for i in range(9) for a in ("--block-label", f"l{i}")], "--block-label given 9 times: at most 8 levels"),
    # What a namespace may hold for pods not created yet
    *((["--max-reserved-gpus-per-namespace", value], f"--max-reserved-gpus-per-namespace {value!r}: {RESERVED_CAP}")
      for value in ("", "-1", "101%", "1.5", "50 %", "1e9", "\u0663", "9" * 10, "%", "half")),
    # Holds for the groups that wait longest
    (["--max-holds", "-1"], "--max-holds -1: expected 0 (no holds) to 64"),
    (["--max-holds", str(2**70)], f"--max-holds {2**70}: expected 0 (no holds) to 64"),
    (["--hold-after", "-5"], "--hold-after -5: expected seconds in [0, 86400]"),
    (["--hold-after", "nan"], "--hold-after nan: expected seconds in [0, 86400]"),
    (["--hold-timeout", "30"], "--hold-timeout 30: expected seconds in [60, 86400]"),
    (["--hold-timeout", "inf"], "--hold-timeout inf: expected seconds in [60, 86400]"),
    (["--hold-yield-after", "-1"], f"--hold-yield-after -1: expected seconds in [0, 86400] {YIELD}"),
    (["--hold-yield-after", "nan"], f"--hold-yield-after nan: expected seconds in [0, 86400] {YIELD}"),
    (["--hold-yield-after", "1e400"], f"--hold-yield-after inf: expected seconds in [0, 86400] {YIELD}"),
    (["--hold-yield-until", "300"],
     f"--hold-yield-until 300: expected seconds in [--hold-after (600), 86400]: {UNTIL}"),
    (["--hold-after", "900", "--hold-yield-until", "600"], "--hold-yield-until 600: expected seconds in "
                                                            f"[--hold-after (900), 86400]: {UNTIL}"),
    (["--hold-yield-until", "nan"],
     f"--hold-yield-until nan: expected seconds in [--hold-after (600), 86400]: {UNTIL}"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSED, ids=[" ".join(a)[:60] for a, _ in REFUSED])
def test_each_rule_refuses_its_command_line_with_one_exact_line(
        argv: list[str], message: str, files: dict[str, str]) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        _from([a.format(**files) for a in argv])
    assert str(caught.value) == message.format(**files)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


ACCEPTED = [
    [],
    ["--workers", "1", "--threads", "1"],
    ["--workers", "1", "--threads", "32"],
    ["--kubeconfig", "{kubeconfig}", "--workers", "1"],
    ["--in-cluster"],
    ["--cluster", "{cluster}", "--cluster", "{cluster}"],
    ["--tls-cert", "c.pem", "--tls-key", "k.pem"],
    ["--tls-dir", "d"],
    ["--bind", "127.0.0.1:1"],
    ["--bind", "[::1]:65535", "--client-ca", "ca.crt"],
    ["--bind", "0.0.0.0:000080"],  # leading zeros: still port 80
    ["--max-body", "1"],
    ["--max-body", "10", "--max-buffered", "10"],
    ["--handshake-timeout", "0.001", "--header-timeout", "3600", "--body-timeout", "1", "--exit-with-parent"],
    ["--fabric", "none"],
    ["--fabric", "embedded"],
    ["--fabric", "https://bmc:8443", "--fabric-credentials", "creds"],
    ["--fabric-refresh", "0.001", "--attach-timeout", "0.001", "--orphan-grace", "0"],
    ["--housekeeping-interval", "3600"],
    ["--housekeeping-interval", "0.001"],
    ["--pod-ttl", "86400"],
    ["--pod-ttl", "0.001"],
    ["--watch-stall-timeout", "0.001"],
    ["--reservation-ttl", f"{MIN_TTL:g}"],
    ["--reservation-ttl", "86400"],
    ["--threads", "1024", "--max-body", str(1024 ** 3)],
    ["--bind-budget", "0.001"],
    ["--bind-budget", "119.9"],
    ["--fabric-refresh", "3600", "--attach-timeout", "86400", "--orphan-grace", "86400"],
    ["--watch-stall-timeout", "86400"],
    ["--domain-label", "zone", "--domain-label", "nvidia.com/gpu.clique", "--domain-label", "a" * 63],
    ["--domain-label", "Zone_1.x", "--domain-label", f"{'p' * 63}.example/{'n' * 63}"],
    ["--scheduler-name", "a", "--channel-device-class", "compute-domain-default-channel.nvidia.com"],
    ["--scheduler-name", "my-scheduler.v2"],
    ["--housekeeping-interval", "3600", "--orphan-grace", "0"],
    ["--handshake-timeout", "0.5", "--header-timeout", "3600", "--body-timeout", "1", "--exit-with-parent"],
    ["--bind", "[::1]:65535", "--client-ca", "ca.crt", "--max-body", "10", "--max-buffered", "10"],
]


@pytest.mark.parametrize("argv", ACCEPTED, ids=[" ".join(a) or "(defaults)" for a in ACCEPTED])
def test_edge_values_are_accepted(argv: list[str], files: dict[str, str]) -> None:
    config = _from([a.format(**files) for a in argv])
    assert config.server.workers == 1


def test_the_defaults_are_the_ones_settings_holds() -> None:
    parsed = _from([])
    # The two values made at start-up: the TLS directory under $XDG_STATE_HOME, this process's holder name.
    unmade = dataclasses.replace(parsed, tls=dataclasses.replace(parsed.tls, dir=None),
                                 cluster=dataclasses.replace(parsed.cluster, holder="h"))

    assert unmade == settings.Settings(cluster=settings.ClusterSettings(holder="h"))
    assert parsed.tls.dir == settings.default_tls_dir()
    assert parsed.policy == Policy()


def test_the_defaults_come_from_their_owners_not_copies_of_their_numbers() -> None:
    defaults = settings.Settings()

    assert defaults.fabric.timeouts == Timeouts()
    assert defaults.cluster.pod_ttl == DEFAULT_POD_TTL
    assert defaults.limits.max_body == DEFAULT_MAX_BODY and defaults.fabric.max_response == DEFAULT_MAX_RESPONSE


def test_the_policy_flags_build_the_policy() -> None:
    config = _from(["--domain-label", "a/b", "--domain-label", "c/d", "--channel-device-class", "x",
                    "--scheduler-name", "mine", "--reservation-ttl", "900"])

    assert config.policy == Policy(domain_labels=("a/b", "c/d"), channel_device_classes=("x",),
                                   scheduler_name="mine", reservation_ttl=900.0)


def test_one_settings_error_for_every_command() -> None:
    assert settings.SettingsError is agent_settings.SettingsError is errors.SettingsError
    assert issubclass(errors.SettingsError, errors.ImexWebhookError)


def test_the_workers_message_says_why_and_how_to_scale(files: dict[str, str]) -> None:
    with pytest.raises(settings.SettingsError) as caught:
        _from(["--kubeconfig", files["kubeconfig"], "--workers", "2"])
    text = str(caught.value)
    for words in ("own caches, watches and choose-and-record lock", "Deployment replicas",
                  "share state through the API server"):
        assert words in text


@pytest.mark.parametrize("mode", [["--kubeconfig", "{kubeconfig}"], ["--in-cluster"], []],
                         ids=["kubeconfig", "in-cluster", "embedded"])
def test_serve_with_several_workers_exits_2_before_starting(
        mode: list[str], files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on a bound address would fail to start; the refusal comes first, with one line on stderr.
    argv = ["serve", "--bind", "127.0.0.1:1", *[a.format(**files) for a in mode], "--workers", "2"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("imex-webhook serve: --workers 2: "), err


def test_a_value_argparse_cannot_read_is_a_usage_error_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--threads", "many"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: imex-webhook serve ") and "--threads: invalid int value: 'many'" in err


def test_block_labels_reach_the_policy_lowest_level_first() -> None:
    got = _from(["--block-label", "network.example.com/block", "--block-label", "network.example.com/spine"])
    assert got.policy.block_labels == ("network.example.com/block", "network.example.com/spine")


@pytest.mark.parametrize(("value", "gpus", "share"), [
    (None, None, 0.5), ("0", 0, 0.5), ("64", 64, 0.5), ("999999999", 999_999_999, 0.5), ("0%", None, 0.0),
    ("25%", None, 0.25), ("100%", None, 1.0),
])
def test_the_reserved_gpus_bound_is_a_number_or_a_share(value: str | None, gpus: int | None, share: float) -> None:
    got = _from(["--max-reserved-gpus-per-namespace", value] if value is not None else []).policy
    assert (got.max_reserved_gpus, got.max_reserved_share) == (gpus, share)


def test_packing_plain_gpu_pods_is_off_unless_asked_for() -> None:
    assert _from([]).policy.pack_plain_gpu_pods is False
    assert _from(["--pack-plain-gpu-pods"]).policy.pack_plain_gpu_pods is True


def test_holds_are_set_by_their_flags_and_default_to_the_policys() -> None:
    default, policy = _from([]).policy, Policy()
    assert (default.max_holds, default.hold_after, default.hold_timeout, default.hold_yield_after,
            default.hold_yield_until) == (policy.max_holds, policy.hold_after, policy.hold_timeout,
                                          policy.hold_yield_after, policy.hold_yield_until)
    got = _from(["--max-holds", "3", "--hold-after", "120", "--hold-timeout", "7200", "--hold-yield-after", "0",
                 "--hold-yield-until", "120"]).policy
    assert (got.max_holds, got.hold_after, got.hold_timeout, got.hold_yield_after, got.hold_yield_until) == (
        3, 120.0, 7200.0, 0.0, 120.0)


def test_backfill_takes_any_stated_walltime_unless_only_enforced_ones_are_asked_for() -> None:
    assert _from([]).policy.backfill_enforced_only is False
    assert _from(["--backfill-walltimes", "enforced"]).policy.backfill_enforced_only is True
    with pytest.raises(SystemExit):
        _from(["--backfill-walltimes", "trust-me"])
