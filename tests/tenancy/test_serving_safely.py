"""A server refuses to serve an address others can reach without authentication, and says
what to do instead; broken TLS settings fail at start in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tierank.server.app import check_exposure, is_loopback
from tierank.server.settings import ServerSettings


def serve(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierank.server", "--db", str(tmp_path / "t.db"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_auth_on_every_interface_is_refused_before_anything_is_bound(tmp_path):
    done = serve("--listen", "0.0.0.0:0", tmp_path=tmp_path)
    assert done.returncode == 1
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in done.stderr
    assert "--auth keys" in line and "--allow-unauthenticated" in line
    assert not (tmp_path / "t.db").exists()  # refused before the database was touched


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.3.4.5:1", True),
        ("[::1]:50051", True),
        ("localhost:50051", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.1.2.3:50051", False),
        ("tierank.internal:50051", False),
    ],
)
def test_which_addresses_count_as_loopback(address, loopback):
    assert is_loopback(address) is loopback


def test_keys_or_an_explicit_opt_out_allow_any_address():
    check_exposure(ServerSettings(listen="0.0.0.0:50051", auth="keys"))
    check_exposure(ServerSettings(listen="0.0.0.0:50051", allow_unauthenticated=True))
    check_exposure(ServerSettings(listen="127.0.0.1:50051"))


def test_a_tls_key_without_a_certificate_fails_in_one_line(tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("not a key")
    done = serve("--listen", "127.0.0.1:0", "--tls-key", str(key), tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == "tierank: --tls-cert is needed with --tls-key"
