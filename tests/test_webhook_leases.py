"""The per-endpoint cap on webhook attempts in flight, on the session's real Redis."""

from dashboard.alerts.leases import endpoint_slot, lease_seconds
from gpulse.keys import Keys


def test_a_slot_is_refused_past_the_cap_and_free_again_once_released(redis_client, settings):
    settings.GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY = 2
    with endpoint_slot(7) as first, endpoint_slot(7) as second:
        with endpoint_slot(7) as third, endpoint_slot(8) as other_endpoint:
            assert (first, second, third, other_endpoint) == (True, True, False, True)
    with endpoint_slot(7) as again:
        assert again
    assert redis_client.zcard(Keys().webhook_leases(7)) == 0


def test_the_lease_of_a_worker_that_died_mid_attempt_expires(redis_client, settings):
    settings.GPULSE_WEBHOOK_ENDPOINT_CONCURRENCY = 1
    key = Keys().webhook_leases(7)
    seconds, micros = redis_client.time()
    now_ms = seconds * 1000 + micros // 1000
    redis_client.zadd(key, {"died-holding-it": now_ms + 60_000})
    with endpoint_slot(7) as held:
        assert not held
    redis_client.zadd(key, {"died-holding-it": now_ms - 1})  # its lease ran out
    with endpoint_slot(7) as held:
        assert held
        expires_in = redis_client.pttl(key) / 1000
        assert lease_seconds() - 2 < expires_in <= lease_seconds()
    assert redis_client.zcard(key) == 0
