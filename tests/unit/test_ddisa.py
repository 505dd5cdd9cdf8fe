"""DDISA discovery (grantd.sp.ddisa, D9, peer-facts §3.7): the record parser, the IdP URL rule
(peer bug 8), nameserver and domain parsing, and lookups against a real DNS server on 127.0.0.1
(tests/dns_server.py) with the TTL cache — positive and negative answers (peer bug 15), bounded —
on a ManualClock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from grantd.core.clock import ManualClock
from grantd.sp.ddisa import (
    DdisaRecord,
    Discovery,
    choose,
    email_domain,
    parse_nameserver,
    parse_record,
    valid_idp_url,
)

from dns_server import TxtDnsServer


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- the parser -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "idp", "mode", "priority"),
    [
        (
            "v=ddisa1 idp=https://idp.example.com; mode=open",
            "https://idp.example.com",
            "open",
            10,
        ),  # peer form
        (
            "v=ddisa1; idp=https://idp.example.com; priority=5",
            "https://idp.example.com",
            None,
            5,
        ),  # spec-repo form
        (
            "v=ddisa1 idp=https://idp.example.com mode=bogus",
            "https://idp.example.com",
            None,
            10,
        ),  # bad mode dropped
        (
            "V=DDISA1;IDP=https://idp.example.com/;MODE=Deny",
            "https://idp.example.com",
            "deny",
            10,
        ),  # keys any case
        (
            "  v=ddisa1\tidp=https://idp.example.com:8443/tenant ;; priority=0  ",
            "https://idp.example.com:8443/tenant",
            None,
            0,
        ),
        (
            "v=ddisa1 idp=https://a.example.com; idp=https://b.example.com",
            "https://a.example.com",
            None,
            10,
        ),  # first wins
        ("v=ddisa1 idp=https://idp.example.com; priority=high", "https://idp.example.com", None, 10),
        ("v=ddisa1 idp=https://idp.example.com; priority=-1", "https://idp.example.com", None, 10),
        (
            "v=ddisa1 idp=https://idp.example.com; priority=1000000",
            "https://idp.example.com",
            None,
            1_000_000,
        ),
        (
            "v=ddisa1 idp=https://idp.example.com; priority=" + "9" * 30,
            "https://idp.example.com",
            None,
            10**18,
        ),
        ("v=ddisa1 idp=https://idp.example.com; priority=²", "https://idp.example.com", None, 10),
        (
            "v=ddisa1 idp=https://idp.example.com; mode=allowlist-user; policy_endpoint=https://x",
            "https://idp.example.com",
            "allowlist-user",
            10,
        ),
    ],
)
def test_records_in_both_spellings_parse(record: str, idp: str, mode: str | None, priority: int) -> None:
    assert parse_record(record) == DdisaRecord(idp, mode, priority)


@pytest.mark.parametrize(
    "record",
    [
        "",
        "v=ddisa2 idp=https://idp.example.com",
        "idp=https://idp.example.com v=ddisa1",
        "v=ddisa1",
        "v=ddisa1 mode=open",
        "v=ddisa1 idp=http://idp.example.com",  # http: only when allowed
        "v=ddisa1 idp=javascript:alert(1)",
        "v=ddisa1 idp=data:text/html,x",
        "v=ddisa1 idp=//idp.example.com",
        "v=ddisa1 idp=https://user:pw@idp.example.com",
        "v=ddisa1 idp=https://user@idp.example.com",
        "v=ddisa1 idp=https://idp.exаmple.com",  # Cyrillic a: a homograph
        "v=ddisa1 idp=https://idp.example.com?x=1",
        "v=ddisa1 idp=https://idp.example.com#frag",
        "v=ddisa1 idp=https://idp.example.com:99999",
        "v=ddisa1 idp=https://",
        "v=ddisa1 idp=https://idp.example.com\x00",
    ],
)
def test_unsafe_or_foreign_records_are_ignored(record: str) -> None:
    assert parse_record(record) is None


def test_http_idps_only_when_allowed() -> None:
    assert parse_record("v=ddisa1 idp=http://127.0.0.1:9999") is None
    assert parse_record("v=ddisa1 idp=http://127.0.0.1:9999", allow_http=True) == DdisaRecord(
        "http://127.0.0.1:9999", None, 10
    )
    assert not valid_idp_url("ftp://idp.example.com", allow_http=True)
    assert valid_idp_url("https://idp.example.com") and valid_idp_url(
        "http://idp.example.com", allow_http=True
    )


def test_the_lowest_priority_wins_and_ties_keep_the_first() -> None:
    a, b, c = (
        DdisaRecord("https://a", None, 5),
        DdisaRecord("https://b", None, 1),
        DdisaRecord("https://c", None, 1),
    )
    assert choose([a, b, c]) is b
    assert choose([]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.0.0.1", ("10.0.0.1", 53)),
        ("127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("::1", ("::1", 53)),
        ("[::1]:5353", ("::1", 5353)),
        ("[::1]", ("::1", 53)),
        ("dns.example.com", None),
        ("1.2.3.4:0", None),
        ("1.2.3.4:70000", None),
        ("1.2.3.4:x", None),
        ("[::1]x", None),
        ("", None),
    ],
)
def test_nameservers_are_addresses_with_optional_ports(value: str, expected: tuple[str, int] | None) -> None:
    assert parse_nameserver(value) == expected


@pytest.mark.parametrize(
    ("email", "domain"),
    [
        ("Alice@Example.ORG", "example.org"),
        ("a@example.org.", "example.org"),
        ("a@bücher.example", "xn--bcher-kva.example"),
        ("a@", None),
        ("a@bad..domain", None),
        ("a@-x.example", None),
        ("a@" + "x" * 64 + ".example", None),
        ("a@exa mple.org", None),
        ("a@example.org/x", None),
    ],
)
def test_email_domains(email: str, domain: str | None) -> None:
    assert email_domain(email) == domain


# -- lookups against a real DNS server ---------------------------------------------------------------

RECORDS = {
    "_ddisa.example.org": [
        "v=ddisa1 idp=https://backup.example.org; priority=20",
        "v=ddisa1 idp=https://idp.example.org; priority=1",
        "v=ddisa1 idp=http://plain.example.org; priority=0",
    ],  # invalid (http): ignored
    "_ddisa.spec.test": ["v=ddisa1; idp=https://idp.spec.test; mode=open"],
    "_ddisa.http.test": ["v=ddisa1 idp=http://127.0.0.1:9999"],
    "_ddisa.denied.test": ["v=ddisa1 idp=https://idp.denied.test; mode=deny"],
    "_ddisa.junk.test": ["v=spf1 -all", "v=ddisa1 idp=javascript:alert(1)"],
}


@pytest.fixture()
def dns() -> Any:
    with TxtDnsServer(RECORDS) as server:
        yield server


def test_lookups_take_the_lowest_valid_priority_in_either_spelling(dns: TxtDnsServer) -> None:
    async def go() -> None:
        d = Discovery([dns.address], clock=ManualClock())
        assert await d.discover("Alice@Example.org") == DdisaRecord("https://idp.example.org", None, 1)
        assert await d.discover("bob@spec.test") == DdisaRecord("https://idp.spec.test", "open", 10)
        assert await d.discover("eve@denied.test") == DdisaRecord("https://idp.denied.test", "deny", 10)
        assert await d.discover("x@junk.test") is None  # records, none of them a valid DDISA one
        assert await d.discover("x@http.test") is None
        assert await Discovery([dns.address], allow_http=True).discover("x@http.test") == DdisaRecord(
            "http://127.0.0.1:9999", None, 10
        )
        assert await d.discover("x@nowhere.test") is None
        assert await d.discover("not-an-email") is None
        assert "_ddisa.example.org" in dns.queries and "_ddisa.spec.test" in dns.queries

    run(go())


def test_answers_are_cached_positive_for_the_ttl_and_negative_for_60_seconds(dns: TxtDnsServer) -> None:
    async def go() -> None:
        clock = ManualClock()
        d = Discovery([dns.address], cache_ttl=300, negative_ttl=60, clock=clock)
        for _ in range(5):
            assert (await d.discover("a@example.org")) is not None
            assert (await d.discover("a@nowhere.test")) is None  # bug 15: not a query per login
        assert dns.queries.count("_ddisa.example.org") == 1 and dns.queries.count("_ddisa.nowhere.test") == 1
        clock.advance(59)
        await d.discover("a@nowhere.test")
        assert dns.queries.count("_ddisa.nowhere.test") == 1
        clock.advance(2)  # the negative answer is 61 s old: asked again
        await d.discover("a@nowhere.test")
        assert dns.queries.count("_ddisa.nowhere.test") == 2
        # the record's TTL (60 s, tests/dns_server.py) is shorter than dns_cache_ttl: it decides
        await d.discover("a@example.org")
        assert dns.queries.count("_ddisa.example.org") == 2
        clock.advance(30)
        await d.discover("a@example.org")
        assert dns.queries.count("_ddisa.example.org") == 2

    run(go())


def test_a_changed_record_is_seen_once_the_cache_lapses(dns: TxtDnsServer) -> None:
    async def go() -> None:
        clock = ManualClock()
        d = Discovery([dns.address], clock=clock)
        assert (await d.discover("a@spec.test")).idp == "https://idp.spec.test"  # type: ignore[union-attr]
        dns.records["_ddisa.spec.test"] = ["v=ddisa1 idp=https://moved.spec.test"]
        assert (await d.discover("a@spec.test")).idp == "https://idp.spec.test"  # type: ignore[union-attr]
        clock.advance(61)
        assert (await d.discover("a@spec.test")).idp == "https://moved.spec.test"  # type: ignore[union-attr]

    run(go())


def test_the_cache_is_bounded(dns: TxtDnsServer) -> None:
    async def go() -> None:
        d = Discovery([dns.address], clock=ManualClock(), max_entries=3)
        for i in range(6):
            await d.discover(f"a@d{i}.test")
        assert len(d._cache) == 3 and "d5.test" in d._cache and "d0.test" not in d._cache

    run(go())


def test_a_dead_nameserver_is_no_record_and_is_not_asked_again_at_once() -> None:
    async def go() -> None:
        clock = ManualClock()
        d = Discovery(["127.0.0.1:9"], timeout=0.5, clock=clock)
        assert await d.discover("a@example.org") is None
        assert await d.discover("a@example.org") is None
        assert d.queries == 1

    run(go())
