"""A Gym on another host: ``--gym-url https://...`` behind an authenticating proxy.

The stand-in Gym (tests/helpers/standin.py: a head and an agent) serves https with a self-signed
certificate made here and answers 401 to any request without ``Authorization: Bearer <token>``. The run
reads the token from an environment variable (``--gym-header Authorization=VAR``) and trusts the
certificate through ``--gym-ca-file``; the token appears nowhere the run writes.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

# At import, not in the test: pytester drops modules first imported during a test, and a re-imported
# cryptography no longer matches its Rust extension ("curve must be an EllipticCurve instance").
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pytest_gym.core.access import gym_access
from tests.helpers.standin import StandinGym, serving

TOKEN = "Bearer tok-pytestgym-REMOTE-5d1e8b"
TOKEN_VAR = "MY_TOKEN_VAR"
AGENT = "remote_agent"
ROW = '{"responses_create_params": {"input": [{"role": "user", "content": "q%d"}]}}\n'


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA: (cert.pem, key.pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pytest-gym test Gym")])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[StandinGym, Path]]:
    """Gym's head and one agent behind TLS and a bearer-token check."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with serving(AGENT, tls=context, require={"Authorization": TOKEN}) as server:
        yield server, cert


@pytest.fixture
def dataset(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    pytester.makeini("[pytest]\n")
    path = pytester.path / "data.jsonl"
    path.write_text("".join(ROW % i for i in range(4)), encoding="utf-8")
    return path


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run",
        "--junitxml", "report.xml", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args,
    )  # fmt: skip


def token_nowhere(pytester: pytest.Pytester, result: pytest.RunResult) -> None:
    secret = TOKEN.split()[1]
    assert secret not in result.stdout.str() + result.stderr.str()
    files = [p for p in pytester.path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert [str(p) for p in files if secret.encode() in p.read_bytes()] == []


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_https_gym_behind_auth_proxy(
    pytester: pytest.Pytester, dataset: Path, remote: tuple[StandinGym, Path], workers: list[str]
) -> None:
    gym, cert = remote
    result = run(pytester, gym, "--gym-header", f"Authorization={TOKEN_VAR}", "--gym-ca-file", str(cert), *workers)
    result.assert_outcomes(passed=4)
    assert gym.refused == 0
    assert gym.calls["/run"] == 4
    assert gym.calls["/server_instances"] >= 1
    assert gym.calls["/aggregate_metrics"] == 1
    rewards = [json.loads(line)["reward"] for line in (pytester.path / "run" / "rollouts.jsonl").open()]
    assert rewards == [1.0] * 4
    ET.parse(pytester.path / "report.xml")
    token_nowhere(pytester, result)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_without_the_header_401_is_shown(
    pytester: pytest.Pytester, dataset: Path, remote: tuple[StandinGym, Path], workers: list[str]
) -> None:
    gym, cert = remote
    result = run(pytester, gym, "--gym-ca-file", str(cert), *workers)
    assert result.ret == 1
    out = result.stdout.str()
    assert "HTTP 401" in out, out[-3000:]
    assert "--gym-header NAME=ENVVAR" in out, out[-3000:]
    assert "/run" not in gym.calls
    token_nowhere(pytester, result)


def test_without_the_ca_a_tls_error_names_the_option(
    pytester: pytest.Pytester, dataset: Path, remote: tuple[StandinGym, Path]
) -> None:
    gym, _ = remote
    result = run(pytester, gym, "--gym-header", f"Authorization={TOKEN_VAR}")
    assert result.ret == 1
    out = result.stdout.str()
    assert "CERTIFICATE_VERIFY_FAILED" in out, out[-3000:]
    assert "--gym-ca-file PATH" in out, out[-3000:]
    assert gym.calls == {}
    token_nowhere(pytester, result)


def test_missing_variable_is_a_usage_error(
    pytester: pytest.Pytester, dataset: Path, remote: tuple[StandinGym, Path]
) -> None:
    gym, cert = remote
    result = run(pytester, gym, "--gym-header", "Authorization=NOT_SET_ANYWHERE", "--gym-ca-file", str(cert))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "environment variable NOT_SET_ANYWHERE is not set" in result.stderr.str()
    assert gym.calls == {}
    assert gym.refused == 0


@pytest.mark.parametrize("where", ["cli", "ini"])
def test_a_literal_value_is_refused_unquoted(
    pytester: pytest.Pytester, dataset: Path, remote: tuple[StandinGym, Path], where: str
) -> None:
    gym, _ = remote
    literal = "Authorization=Bearer lit-SECRET-93ac"
    if where == "ini":
        pytester.makeini(f"[pytest]\ngym_header =\n    {literal}\n")
        result = run(pytester, gym)
    else:
        result = run(pytester, gym, "--gym-header", literal)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "holds a credential" in err, err
    assert "NAME=ENVVAR" in err, err
    assert "lit-SECRET" not in result.stdout.str() + err
    assert gym.calls == {}
    assert gym.refused == 0


def test_access_checks(tmp_path: Path) -> None:
    access = gym_access(["X-Api=SOME_VAR"], environ={"SOME_VAR": "v1"})
    assert dict(access.headers) == {"X-Api": "v1"}
    assert access.ssl_context is None
    assert "v1" not in repr(access)
    with pytest.raises(ValueError, match="not a file"):
        gym_access(ca_file=str(tmp_path / "none.pem"))
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match="not a PEM CA bundle"):
        gym_access(ca_file=str(tmp_path / "junk.pem"))
    with pytest.raises(ValueError, match="line break"):
        gym_access(["X-Api=SOME_VAR"], environ={"SOME_VAR": "v1\r\nX-Evil: 1"})
    with pytest.raises(ValueError, match="given twice"):
        gym_access(["X-Api=A", "x-api=B"], environ={"A": "a", "B": "b"})
