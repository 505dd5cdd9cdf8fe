"""A channel whose service is down rests in each process's delivery worker (issue 27, D15): what
the request path's wake-up and the worker's claim do while it rests. The whole behaviour against a
real mail server is tests/server/test_notify_outbox.py."""

from __future__ import annotations

from types import SimpleNamespace

from grantd.core.clock import ManualClock
from grantd.hookspecs import DeliveryResult
from grantd.services.notify_delivery import PER_CHANNEL, REST_FIRST_MS, REST_MAX_MS, DeliveryWorker


def worker() -> tuple[DeliveryWorker, ManualClock]:
    clock = ManualClock(1_800_000_000_000)
    return DeliveryWorker(SimpleNamespace(clock=clock)), clock  # type: ignore[arg-type]


def test_rows_only_of_resting_channels_do_not_wake_the_worker():
    w, clock = worker()
    w._heard("mail", DeliveryResult.down("cannot reach the mail server"), clock.now_ms())
    w.wake({"mail"})
    assert not w.woken.is_set()  # nothing of it may be sent now: no claim per written row
    w.wake({"mail", "chat"})
    assert w.woken.is_set()  # chat answers: look
    w.woken.clear()
    w.wake(None)  # rows of any channel (an escalation sweep): look
    assert w.woken.is_set()
    w.woken.clear()
    clock.advance(REST_FIRST_MS / 1000)
    w.wake({"mail"})
    assert w.woken.is_set()  # the rest is over: a probe may go


def test_a_rest_doubles_while_probes_fail_and_ends_with_a_notice_the_service_took():
    w, clock = worker()
    now = clock.now_ms()
    w._heard("mail", DeliveryResult.down("refused"), now)
    assert w._room_on("mail", now) == 0 and w._room_on("chat", now) == PER_CHANNEL
    w._heard("mail", DeliveryResult.down("refused"), now + 10)  # began before the rest: no longer rest
    assert w.resting["mail"].until == now + REST_FIRST_MS
    lengths = []
    for _ in range(6):
        now = w.resting["mail"].until
        assert w._room_on("mail", now) == 1  # one probe at a time
        w._heard("mail", DeliveryResult.down("refused"), now)
        lengths.append(w.resting["mail"].length)
    assert lengths == [10_000, 20_000, 40_000, REST_MAX_MS, REST_MAX_MS, REST_MAX_MS]
    now = w.resting["mail"].until
    # a failure decided before the service was asked says nothing of it: the rest stands
    w._heard("mail", DeliveryResult.failed("the person opted out of this channel", retryable=False), now)
    assert w._room_on("mail", now) == 1
    w._heard("mail", DeliveryResult.sent(), now)
    assert "mail" not in w.resting and w._room_on("mail", now) == PER_CHANNEL
