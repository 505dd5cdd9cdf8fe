"""The client address behind reverse proxies (server.trusted_proxies): the pure rule, then the
access log of a real server honouring X-Forwarded-For only from a trusted peer."""

from __future__ import annotations

import json
import time

import pytest

from grantd.client_address import client_address, parse_networks


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
def test_access_log_remote_honours_x_forwarded_for_only_from_a_trusted_peer(server_factory, proxies, expected):
    srv = server_factory(log_format="json")
    text = srv.config_path.read_text()
    srv.config_path.write_text(text.replace("[server]\n", f"[server]\ntrusted_proxies = {proxies}\n", 1))
    srv.start()
    with srv.client() as http:
        assert http.get("/healthz", headers={"X-Forwarded-For": "1.2.3.4, 198.51.100.7"}).status_code == 200
    assert [line["remote"] for line in _access_lines(srv, "/healthz")] == [expected]
