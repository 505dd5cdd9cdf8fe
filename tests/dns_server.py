"""A real, tiny authoritative DNS server on 127.0.0.1 for discovery tests (UDP, TXT records).

Queries are parsed and answered with dnspython's message classes; anything unknown gets NXDOMAIN.
"""

from __future__ import annotations

import socket
import threading

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


class TxtDnsServer:
    def __init__(self, records: dict[str, list[str]]):
        self.records = {name.rstrip(".").lower(): values for name, values in records.items()}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.queries: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._running = True

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TxtDnsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False
        self.sock.close()

    def _serve(self) -> None:
        while self._running:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            query = dns.message.from_wire(data)
            response = dns.message.make_response(query)
            response.flags |= dns.flags.AA
            question = query.question[0]
            name = question.name.to_text().rstrip(".").lower()
            self.queries.append(name)
            values = self.records.get(name)
            if values is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype == dns.rdatatype.TXT:
                quoted = ['"' + v.replace('"', '\\"') + '"' for v in values]
                response.answer.append(dns.rrset.from_text(question.name, 60, "IN", "TXT", *quoted))
            try:
                self.sock.sendto(response.to_wire(), peer)
            except OSError:
                return
