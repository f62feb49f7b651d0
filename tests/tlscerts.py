"""Test credentials made on the spot: a CA, server and client certificates (cryptography), and
a Cyrus sasldb with its ``qdrouterd.conf`` (saslpasswd2).

``make_pki(dir)`` writes PEM files and returns their paths:

* ``ca`` (ca.pem): the trusted CA; ``other_ca`` (other-ca.pem): a CA nobody trusts;
* ``server`` / ``server_key``: CN=localhost, SAN localhost and 127.0.0.1, signed by ``ca``;
  ``server_enc_key``: the same key encrypted with ``KEY_PASSWORD``;
* ``client`` / ``client_key``: C=US, ST=Ohio, L=Columbus, O=Acme, OU=QA, CN=client1;
* ``wrongname`` / ``wrongname_key``: CN=elsewhere.example (SAN only that name), signed by ``ca``;
* ``expired`` / ``expired_key``: a server certificate valid only in 2020;
* ``rogue`` / ``rogue_key``: a client certificate signed by ``other_ca``.
"""
from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "s3cret-key"
SASL_DOMAIN = "qdtest"


def _name(**fields: str) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME,
            "L": NameOID.LOCALITY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in fields.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key, password: str | None = None) -> str:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8, enc))
    path.chmod(0o600)
    return str(path)


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _ca(cn: str):
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(CN=cn)).issuer_name(_name(CN=cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca, subject: x509.Name, names: list[str], *, server: bool, expired: bool = False):
    ca_key, ca_cert = ca
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    if expired:
        start, end = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc), \
            datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc)
    else:
        start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    alt: list = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                   critical=False))
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def make_pki(directory: Path) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    out: dict = {}
    ca = _ca("Test CA")
    other = _ca("Rogue CA")
    out["ca"] = _write_cert(directory / "ca.pem", ca[1])
    out["other_ca"] = _write_cert(directory / "other-ca.pem", other[1])
    leaves = {
        "server": (ca, _name(CN="localhost"), ["localhost", "127.0.0.1"], True, False),
        "client": (ca, _name(C="US", ST="Ohio", L="Columbus", O="Acme", OU="QA", CN="client1"),
                   [], False, False),
        "wrongname": (ca, _name(CN="elsewhere.example"), ["elsewhere.example"], True, False),
        "expired": (ca, _name(CN="localhost"), ["localhost", "127.0.0.1"], True, True),
        "rogue": (other, _name(CN="rogue"), [], False, False),
    }
    for label, (issuer, subject, names, server, expired) in leaves.items():
        key, cert = _leaf(issuer, subject, names, server=server, expired=expired)
        out[label] = _write_cert(directory / f"{label}.pem", cert)
        out[label + "_key"] = _write_key(directory / f"{label}-key.pem", key)
        if label == "server":
            out["server_enc_key"] = _write_key(directory / "server-enc-key.pem", key,
                                               KEY_PASSWORD)
        out[label + "_cert_obj"] = cert
    return out


def fingerprint(cert: x509.Certificate, algorithm: str = "sha256") -> str:
    algo = {"sha1": hashes.SHA1(), "sha256": hashes.SHA256(), "sha512": hashes.SHA512()}
    return cert.fingerprint(algo[algorithm]).hex()


def have_saslpasswd2() -> bool:
    return shutil.which("saslpasswd2") is not None or Path("/usr/sbin/saslpasswd2").exists()


def make_sasldb(directory: Path, users: dict, mechs: str = "PLAIN SCRAM-SHA-1 SCRAM-SHA-256 "
                "DIGEST-MD5", name: str = "qdrouterd") -> Path:
    """A sasldb with ``users`` (name -> password) in realm SASL_DOMAIN, and ``NAME.conf`` for
    Cyrus beside it (auxprop over that sasldb, ``mech_list: mechs``); returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "qdrouterd.sasldb"
    tool = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
    for user, password in users.items():
        subprocess.run([tool, "-c", "-p", "-f", str(db), "-u", SASL_DOMAIN, user],
                       input=password.encode(), check=True, timeout=30)
    (directory / f"{name}.conf").write_text(
        "pwcheck_method: auxprop\nauxprop_plugin: sasldb\n"
        f"sasldb_path: {db}\nmech_list: {mechs}\n")
    return directory
