"""The client address behind reverse proxies (server.trusted_proxies): the pure rule, then the
access log of a real server honouring X-Forwarded-For only from a trusted peer."""

from __future__ import annotations

import json
import time

import pytest

from grantd.client_address import client_address, limit_key, parse_networks, shared_address_warning


def trusted(*values: str):
    networks, problems = parse_networks(values)
    assert not problems
    return networks


PROXY = trusted("10.0.0.1")
CHAIN = trusted("10.0.0.0/8", "192.168.1.1")


@pytest.mark.parametrize(
    ("peer", "xff", "networks", "expected"),
    [
        # No trusted proxies: always the peer, whatever the header says.
        ("203.0.113.9", "198.51.100.7", (), "203.0.113.9"),
        # A single trusted proxy: the address it appended.
        ("10.0.0.1", "198.51.100.7", PROXY, "198.51.100.7"),
        ("10.0.0.1", " 198.51.100.7 ", PROXY, "198.51.100.7"),
        ("10.0.0.1", None, PROXY, "10.0.0.1"),
        ("10.0.0.1", "", PROXY, "10.0.0.1"),
        # A client's own X-Forwarded-For entries are left of what the proxy appended: never read.
        ("10.0.0.1", "1.2.3.4, 198.51.100.7", PROXY, "198.51.100.7"),
        # A chain: skip every trusted hop from the right; the first untrusted one is the client.
        ("10.0.0.1", "1.2.3.4, 198.51.100.7, 192.168.1.1, 10.2.3.4", CHAIN, "198.51.100.7"),
        # Only trusted hops: the leftmost one.
        ("10.0.0.1", "10.9.9.9, 192.168.1.1", CHAIN, "10.9.9.9"),
        # An untrusted peer sending X-Forwarded-For is ignored.
        ("203.0.113.9", "198.51.100.7", PROXY, "203.0.113.9"),
        ("10.0.0.2", "198.51.100.7", PROXY, "10.0.0.2"),
        # Garbage in the part that is read: the peer.
        ("10.0.0.1", "not-an-ip", PROXY, "10.0.0.1"),
        ("10.0.0.1", "198.51.100.7, evil", PROXY, "10.0.0.1"),
        ("10.0.0.1", "198.51.100.7,", PROXY, "10.0.0.1"),
        ("10.0.0.1", "198.51.100.7\n, 1.1.1.1\r", PROXY, "1.1.1.1"),
        ("10.0.0.1", "<script>", PROXY, "10.0.0.1"),
        ("10.0.0.1", ",".join(["198.51.100.7"] * 100), PROXY, "10.0.0.1"),
        # Garbage left of the first untrusted address is never read.
        ("10.0.0.1", "garbage, 198.51.100.7", PROXY, "198.51.100.7"),
        # Ports as some proxies write them.
        ("10.0.0.1", "198.51.100.7:5555", PROXY, "198.51.100.7"),
        ("10.0.0.1", "[2001:db8::7]:443", PROXY, "2001:db8::7"),
        # IPv6 proxies and clients.
        ("::1", "2001:db8::7", trusted("::1"), "2001:db8::7"),
        ("fd00::5", "2001:db8::7, fd00::9", trusted("fd00::/8"), "2001:db8::7"),
        ("2001:db8::1", "198.51.100.7", trusted("fd00::/8"), "2001:db8::1"),
        ("10.0.0.1", "2001:DB8::0007", PROXY, "2001:db8::7"),
        # An IPv4 proxy seen through an IPv6 socket (IPv4-mapped) still counts as trusted.
        ("::ffff:10.0.0.1", "198.51.100.7", PROXY, "198.51.100.7"),
    ],
)
def test_client_address(peer, xff, networks, expected):
    assert client_address(peer, xff, networks) == expected


def test_parse_networks_names_every_bad_value():
    networks, problems = parse_networks(["10.0.0.0/8", "proxy.local", "10.0.0.1/8", "::1"])
    assert [str(n) for n in networks] == ["10.0.0.0/8", "::1/128"]
    assert len(problems) == 2 and "'proxy.local'" in problems[0] and "'10.0.0.1/8'" in problems[1]


def _access_lines(server, path: str) -> list[dict]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = []
        for line in server.log().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("path") == path:
                    lines.append(record)
        if lines:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"no access line for {path}:\n{server.log()}")


@pytest.mark.parametrize(("proxies", "expected"), [("[]", "127.0.0.1"), ('["127.0.0.1"]', "198.51.100.7")])
def test_access_log_remote_honours_x_forwarded_for_only_from_a_trusted_peer(
    server_factory, proxies, expected
):
    srv = server_factory(log_format="json")
    text = srv.config_path.read_text()
    srv.config_path.write_text(text.replace("[server]\n", f"[server]\ntrusted_proxies = {proxies}\n", 1))
    srv.start()
    with srv.client() as http:
        assert http.get("/healthz", headers={"X-Forwarded-For": "1.2.3.4, 198.51.100.7"}).status_code == 200
    assert [line["remote"] for line in _access_lines(srv, "/healthz")] == [expected]


# -- issue 19 item 6: what per-address limits count, and the warning about a shared address ------------


@pytest.mark.parametrize(
    ("address", "prefix", "expected"),
    [
        ("192.0.2.7", 64, "192.0.2.7"),  # IPv4: one by one
        ("::ffff:192.0.2.7", 64, "192.0.2.7"),  # IPv4-mapped IPv6 counts as the IPv4 address
        ("2001:db8:1:2::1", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", 64, "2001:db8:1:2::/64"),  # the same /64: one client
        ("2001:DB8:1:2:0:0:0:9", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:3::1", 64, "2001:db8:1:3::/64"),  # the next /64: another client
        ("2001:db8:1:2::1", 48, "2001:db8:1::/48"),
        ("2001:db8::1", 128, "2001:db8::1"),
        ("not an address", 64, "not an address"),
    ],
)
def test_limit_key(address, prefix, expected):
    assert limit_key(address, prefix) == expected


@pytest.mark.parametrize(
    ("peer", "proxy_headers", "warns"),
    [
        ("10.1.2.3", False, True),  # a NAT or a proxy on the network
        ("192.168.0.9", True, True),
        ("fd00::7", False, True),  # unique-local IPv6
        ("::ffff:172.16.0.4", False, True),
        ("127.0.0.1", False, False),  # local use: development, tests, a CLI on the server
        ("::1", False, False),
        ("127.0.0.1", True, True),  # a reverse proxy on this host
        ("8.8.8.8", True, False),  # a public peer is its own client
        ("2606:4700::1111", False, False),
    ],
)
def test_shared_address_warning_decides_on_the_peer(peer, proxy_headers, warns):
    warning = shared_address_warning(peer, proxy_headers)
    assert (warning is not None) == warns
    if warning:
        assert "server.trusted_proxies" in warning


def test_a_proxied_request_without_trusted_proxies_warns_once(server_factory):
    """A reverse proxy on this host (a loopback peer sending X-Forwarded-For) with trusted_proxies
    empty: every client shares one address's limits. The server says so once, at the first such
    request; plain local requests before it say nothing."""
    srv = server_factory(log_format="json")
    srv.start()
    warning = "server.trusted_proxies is empty"
    with srv.client() as http:
        assert http.get("/healthz").status_code == 200
        _access_lines(srv, "/healthz")
        assert warning not in srv.log()
        for _ in range(3):
            assert http.get("/healthz", headers={"X-Forwarded-For": "198.51.100.7"}).status_code == 200
        assert http.get("/healthz", headers={"X-Real-IP": "198.51.100.8"}).status_code == 200
    deadline = time.monotonic() + 5
    while srv.log().count(warning) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.log().count(warning) == 1, srv.log()
    assert "private address 127.0.0.1" in srv.log()


def test_trusted_proxies_configured_never_warn(server_factory):
    srv = server_factory(log_format="json")
    text = srv.config_path.read_text()
    srv.config_path.write_text(text.replace("[server]\n", '[server]\ntrusted_proxies = ["127.0.0.1"]\n', 1))
    srv.start()
    with srv.client() as http:
        assert http.get("/healthz", headers={"X-Forwarded-For": "198.51.100.7"}).status_code == 200
    _access_lines(srv, "/healthz")
    assert "server.trusted_proxies is empty" not in srv.log()


def test_the_access_log_never_shows_a_links_secret(server_factory):
    """A review or deny link's token (D15) and an MCP consent's poll secret (D17) are credentials in
    the path: the access log shows the route with ``[secret]`` in their place, never the value."""
    from grantd.web.app import logged_path

    srv = server_factory(log_format="json")
    srv.start()
    secret = "qGiClAwsVoL139x7v5QQ909cZ5ekwWRQMqIO8D7r7Sg"
    with srv.client() as http:
        http.get(f"/r/{secret}")
        http.post(f"/r/{secret}/deny")
        http.post(f"/r/{secret}/options")
        http.get(f"/authorize/poll/{secret}")
    for path in ("/r/[secret]", "/r/[secret]/deny", "/r/[secret]/options", "/authorize/poll/[secret]"):
        assert _access_lines(srv, path)
    assert secret not in srv.log()
    assert logged_path("/api/grants/x") == "/api/grants/x"
    assert logged_path("/rx/abc") == "/rx/abc"
