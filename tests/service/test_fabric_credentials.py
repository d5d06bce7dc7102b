"""The ``--fabric-credentials`` file: ``user:password`` or YAML with an optional ``auth`` (auto, session,
basic); every refusal names the file and the problem and never quotes the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.adapters.redfish.fabric import RedfishFabric
from webhook.service.fabric_wiring import FabricConfigError, FabricCredentials, read_credentials

SECRET = "s3cr:et-pw"


@pytest.mark.parametrize(("text", "expected"), [
    (f"ops:{SECRET}\n", FabricCredentials("ops", SECRET, "auto")),
    (f"username: ops\npassword: '{SECRET}'\n", FabricCredentials("ops", SECRET, "auto")),
    (f"username: ops\npassword: '{SECRET}'\nauth: session\n", FabricCredentials("ops", SECRET, "session")),
    (f"{{username: ops, password: '{SECRET}', auth: basic}}", FabricCredentials("ops", SECRET, "basic")),
    ("username: ops\npassword: ''\nauth: auto\n", FabricCredentials("ops", "", "auto")),
])
def test_a_credentials_file_gives_user_password_and_auth_mode(tmp_path: Path, text: str,
                                                              expected: FabricCredentials) -> None:
    path = tmp_path / "creds"
    path.write_text(text)
    assert read_credentials(path) == expected
    assert SECRET not in repr(read_credentials(path))


@pytest.mark.parametrize(("text", "problem"), [
    (f"username: ops\npassword: '{SECRET}'\nauth: kerberos\n", "auth must be one of auto, session, basic"),
    (f"username: ops\npassword: '{SECRET}'\nauth: [session]\n", "auth must be one of auto, session, basic"),
    (f"username: ops\npassword: '{SECRET}'\nauht: session\n", "unknown key 'auht'"),
    (f"username: ops\npasword: '{SECRET}'\n", "expected username and password"),
    ("username: ops\npassword: 12345\n", "expected username and password"),
    (f"- ops\n- '{SECRET}'\n", "expected username and password"),
    (f"username: ops\npassword: [unclosed '{SECRET}'\n", "neither user:password nor YAML (line 2)"),
    ("", "expected username and password"),
])
def test_a_bad_credentials_file_is_refused_without_quoting_the_password(tmp_path: Path, text: str,
                                                                        problem: str) -> None:
    path = tmp_path / "creds"
    path.write_text(text)
    with pytest.raises(FabricConfigError) as err:
        read_credentials(path)
    assert problem in str(err.value) and str(path) in str(err.value)
    assert SECRET not in str(err.value)
    assert err.value.__cause__ is None or SECRET not in str(err.value.__cause__)  # tracebacks show the cause


def test_a_missing_or_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FabricConfigError, match="No such file"):
        read_credentials(tmp_path / "absent")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00ops")
    with pytest.raises(FabricConfigError, match=str(binary)):
        read_credentials(binary)
    with pytest.raises(FabricConfigError, match="needs --fabric-credentials"):
        read_credentials(None)


@pytest.mark.parametrize(("url", "kept"), [
    ("https://admin:s3cret@fm.example.com:8443/", "https://fm.example.com:8443"),
    ("https://admin@fm.example.com", "https://fm.example.com"),
    ("https://a:b%40c@[fd00::1]:443/redfish", "https://[fd00::1]:443/redfish"),
    ("https://fm.example.com", "https://fm.example.com"),
])
def test_credentials_in_the_fabric_url_never_reach_the_client(url: str, kept: str) -> None:
    # The credentials file is where they belong; the URL is logged, shown in /readyz and quoted in errors.
    fabric = RedfishFabric(url, "user", "file-password")
    try:
        assert fabric.http.base_url == kept and "s3cret" not in repr(vars(fabric.http))
    finally:
        fabric.stop()
