"""A headless Chromium driven by selenium for the cluster map tests: Debian's ``chromium`` and
``chromium-driver``, started so that it makes no connection of its own (the network is closed; without
these flags it waits on them) and trusts exactly the test server's key."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

QUIET_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
               "--no-default-browser-check", "--disable-extensions")


def binaries() -> tuple[str, str]:
    """(chromium, chromedriver); skipped when absent, a failure in CI (.ci/run installs them)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = "chromium and chromium-driver are needed (apt-get install -y chromium chromium-driver)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def spki_pin(cert_pem: bytes) -> str:
    """base64(sha256(SubjectPublicKeyInfo)): what --ignore-certificate-errors-spki-list takes."""
    key = x509.load_pem_x509_certificate(cert_pem).public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@contextlib.contextmanager
def chromium(profile: Path, server_cert: Path, width: int = 1600, height: int = 1000) -> Iterator[Any]:
    """A fresh headless Chromium that trusts the key of ``server_cert`` only (no blanket
    --ignore-certificate-errors), with its console kept for ``get_log("browser")``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*QUIET_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                 f"--ignore-certificate-errors-spki-list={spki_pin(server_cert.read_bytes())}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        driver.set_page_load_timeout(30)
        driver.set_script_timeout(30)
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """SEVERE console entries since the last call (failed loads, CSP refusals, uncaught exceptions)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
