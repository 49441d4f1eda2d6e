"""gpulse.redis_url: the node side's Redis URL from the environment or a credentials file, never argv (issue 31)."""

import pytest

from gpulse.keys import DEFAULT_REDIS_URL
from gpulse.redis_url import RedisUrlError, has_password, redis_url_from_environment

URL = "redis://node-gpu-01:s3cret@redis.example:6379/0"


def test_the_file_named_by_the_environment_wins_over_redis_url(tmp_path):
    credential = tmp_path / "redis-url"
    credential.write_text(URL + "\n")
    assert redis_url_from_environment({"GPULSE_REDIS_URL_FILE": str(credential), "REDIS_URL": "redis://other"}) == URL
    assert redis_url_from_environment({"REDIS_URL": URL}) == URL
    assert redis_url_from_environment({}) == DEFAULT_REDIS_URL


@pytest.mark.parametrize("content, message", [
    (None, "cannot read the Redis URL from"),
    ("", "is empty"),
    ("s3cret", "does not hold one redis://"),
    (URL + " " + URL, "does not hold one"),
    ("x" * 5000, "more than 4096 bytes"),
])
def test_a_named_file_that_gives_no_url_is_an_error_naming_the_file_and_not_its_content(tmp_path, content, message):
    credential = tmp_path / "redis-url"
    if content is not None:
        credential.write_text(content)
    with pytest.raises(RedisUrlError, match=message) as caught:
        redis_url_from_environment({"GPULSE_REDIS_URL_FILE": str(credential), "REDIS_URL": "redis://fallback"})
    assert str(credential) in str(caught.value) and "s3cret" not in str(caught.value)


def test_the_node_workers_client_and_broker_read_the_file(tmp_path, monkeypatch):
    from workers import redis_client as workers_redis

    credential = tmp_path / "redis-url"
    credential.write_text(URL)
    monkeypatch.setenv("GPULSE_REDIS_URL_FILE", str(credential))
    monkeypatch.setattr(workers_redis, "_client", None)
    client = workers_redis.redis_client()
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["host"], kwargs["username"], kwargs["password"]) == ("redis.example", "node-gpu-01", "s3cret")
    finally:
        workers_redis.close_redis_client()


def test_a_password_is_told_apart_from_a_url_without_one():
    assert has_password(URL) and has_password("unix:///run/redis.sock?password=x")
    assert not has_password("redis://127.0.0.1:6379/0") and not has_password("redis://user@host")
