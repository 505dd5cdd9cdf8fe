"""Helpers for the MCP tests (D17): a private certificate authority, an https server on localhost
serving Client ID Metadata Documents (and other JSON) that grantd fetches with ``[oauth] ca_file``,
and the config of a server with MCP resources."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

RESOURCE = "https://mcp.example.com/mcp"
OTHER_RESOURCE = "https://other.example.com/mcp"
MCP_SECRET = "mcp-introspect-secret-0123456789"
OTHER_SECRET = "other-introspect-secret-0123456789"
CALLBACK = "http://127.0.0.1:7777/callback"


def make_ca(directory: Path) -> tuple[Path, Path, Path]:
    """A CA (its PEM at ``ca.pem``) and a leaf for localhost/127.0.0.1 signed by it: (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "grantd test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


class DocumentServer:
    """https://localhost:<port>/<name>: the JSON in ``documents[name]`` (404 otherwise);
    ``drip``: the body one byte a second (each read is quick, the whole is slow); ``hits`` counts
    requests by path."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.documents: dict[str, Any] = {}
        self.hits: dict[str, int] = {}
        self.drip = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                owner.hits[path] = owner.hits.get(path, 0) + 1
                document = owner.documents.get(path)
                if document is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not owner.drip:
                    self.wfile.write(body)
                    return
                for index in range(len(body)):
                    try:
                        self.wfile.write(body[index : index + 1])
                        self.wfile.flush()
                    except OSError:  # grantd gave up (its deadline): the connection is gone
                        return
                    time.sleep(1.0)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"https://localhost:{self.port}{path}"

    def client(self, path: str, redirect_uri: str = CALLBACK, **fields: Any) -> str:
        """Publish a Client ID Metadata Document at ``path``; its URL (the client_id)."""
        client_id = self.url(path)
        self.documents[path] = {
            "client_id": client_id,
            "client_name": "An MCP client",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            **fields,
        }
        return client_id

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def mcp_config(extra: str = "") -> str:
    """The config of a server with two resources (the first with a grant-gated scope), trusting the
    test CA (``ca.pem`` beside the config) for Client ID Metadata Documents on localhost."""
    return f"""
[limits]
failed_bearer_per_address = 0
passkey_per_address = 0
token_per_address = 0

[oauth]
access_token_ttl = 600
allow_private_metadata_hosts = true
ca_file = "ca.pem"

[[mcp.resources]]
resource = "{RESOURCE}"
name = "Deploy tools"
scopes = ["tools:read", "tools:deploy"]
credential = "file:mcp-secret"
[mcp.resources.grant_scopes]
"tools:deploy" = {{ grant_type = "once" }}

[[mcp.resources]]
resource = "{OTHER_RESOURCE}"
name = "Other tools"
scopes = ["other:read"]
credential = "file:other-secret"
{extra}
"""


def prepare(directory: Path) -> tuple[Path, Path]:
    """The CA, the resources' credentials: (leaf cert, key) for a DocumentServer."""
    _, cert, key = make_ca(directory)
    for name, secret in (("mcp-secret", MCP_SECRET), ("other-secret", OTHER_SECRET)):
        (directory / name).write_text(secret + "\n")
        (directory / name).chmod(0o600)
    return cert, key
