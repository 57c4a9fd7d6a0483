"""Connection URLs, masking, and real connects: plain Redis, a Cluster, a Sentinel failover."""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace

import pytest
import redis
from redis.cluster import RedisCluster
from redis.sentinel import SentinelConnectionPool

from fusionworker.core.connection import (
    FollowSentinelMaster,
    connect,
    is_cluster,
    mask_url,
    new_pubsub_connection,
    parse_url,
    refresh_master,
)
from tests.redis_servers import (
    ClusterServers,
    SentinelServers,
    free_port,
    redis_cluster,
    redis_sentinel,
)
from tests.waiting import wait_for

__all__ = ["redis_cluster", "redis_sentinel"]  # fixtures used below


# ---------------------------------------------------------------- parsing (no server)


def test_parse_sentinel_url_with_every_part() -> None:
    parsed = parse_url(
        "redis+sentinel://user:s%3Acret@10.0.0.1:26380,10.0.0.2,[::1]:26381/mymaster/3"
        "?sentinel_password=sp&socket_timeout=2.5"
    )
    assert parsed.kind == "sentinel"
    assert parsed.hosts == (("10.0.0.1", 26380), ("10.0.0.2", 26379), ("::1", 26381))
    assert parsed.master_name == "mymaster"
    assert parsed.db == 3
    assert (parsed.username, parsed.password) == ("user", "s:cret")
    assert parsed.options == {"sentinel_password": "sp", "socket_timeout": 2.5}


def test_parse_sentinel_url_minimal() -> None:
    parsed = parse_url("redis+sentinel://sentinel.local/fw")
    assert parsed.hosts == (("sentinel.local", 26379),)
    assert (parsed.master_name, parsed.db, parsed.password) == ("fw", 0, None)


def test_parse_cluster_url() -> None:
    parsed = parse_url("redis+cluster://:pw@h1:7000,h2:7001,h3")
    assert parsed.kind == "cluster"
    assert parsed.hosts == (("h1", 7000), ("h2", 7001), ("h3", 6379))
    assert parsed.password == "pw"
    assert parse_url("redis+cluster://h1:7000/0").db == 0
    assert parse_url("rediss+cluster://h1:7000").kind == "cluster"


@pytest.mark.parametrize("url", [
    "redis://localhost:6379/0", "redis://:pw@10.1.2.3", "rediss://user:pw@redis.example:6380/1",
    "unix:///run/redis/redis.sock?db=2", "REDIS://localhost",
])
def test_plain_urls_are_left_to_redis_py(url: str) -> None:
    assert parse_url(url).kind == "redis"


@pytest.mark.parametrize(("url", "message"), [
    ("http://localhost:6379", "unsupported Redis URL scheme 'http'"),
    ("redis+memcached://h:1", "unsupported Redis URL scheme"),
    ("localhost:6379", "no scheme"),
    ("127.0.0.1", "no scheme"),
    ("redis+sentinel://h:26379", "names the master"),
    ("redis+sentinel://h:26379/", "names the master"),
    ("redis+sentinel://h:26379/m/1/2", "names the master"),
    ("redis+sentinel://h:26379/m/one", "bad database number"),
    ("redis+sentinel:///m", "no host"),
    ("redis+sentinel://h:26379,/m", "empty host"),
    ("redis+sentinel://h:notaport/m", "bad port"),
    ("redis+sentinel://h:70000/m", "bad port"),
    ("redis+sentinel://::1:26379/m", "IPv6"),
    ("redis+sentinel://h/m?bogus=1", "unknown option 'bogus'"),
    ("redis+sentinel://h/m?socket_timeout=soon", "bad value for 'socket_timeout'"),
    ("redis+cluster://h:7000/1", "only database 0"),
    ("redis+cluster://h:7000?sentinel_password=x", "for Sentinel URLs"),
    ("unix://", "without a socket path"),
    # issue 30: redis-py read these as database 0
    ("redis://h:6379/abc", "bad database 'abc'"),
    ("redis://h:6379/1.5", "bad database '1.5'"),
    ("redis://h:6379/0/extra", "bad database '0/extra'"),
    ("rediss://h/-1", "bad database '-1'"),
    ("unix:///run/r.sock?db=two", "bad database 'two'"),
    ("redis://h:6379/0#frag", "no '#' part"),
    ("redis://:pa/ss@h:6379/0", "percent-encode"),
    ("redis://:pa#ss@h:6379/0", "percent-encode"),
    ("redis://u:pa?ss@h:6379/0", "percent-encode"),
    ("redis+sentinel://:pa/ss@h:26379/m", "percent-encode"),
])
def test_malformed_urls_raise_value_error(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)
    with pytest.raises(ValueError, match=message):
        connect(url)


@pytest.mark.parametrize("url", [
    "redis://:se/cr?et@h:6379/0", "redis://:se#cr/et@h:6379/abc", "redis://u:se?c=r@h/0",
    "redis://:secret@h:6379/abc", "redis+sentinel://:se/cret@h:26379/m",
    "redis+cluster://:se?cret@h:7000",
])
def test_a_password_is_masked_however_it_is_written(url: str) -> None:
    """Issue 30: an unencoded '/', '?' or '#' in the password ended the URL's authority
    early, and the error line printed the password twice."""
    with pytest.raises(ValueError) as info:
        connect(url)
    for piece in ("se/cr", "cr?et", "se#cr", "se?c", "secret", "se/cret", "se?cret"):
        assert piece not in str(info.value)
    assert "***" in str(info.value)
    for piece in ("se/cr", "cr?et", "se#cr", "se?c", "secret", "se/cret", "se?cret"):
        assert piece not in mask_url(url)


def test_errors_never_show_the_password() -> None:
    with pytest.raises(ValueError) as info:
        connect("redis+sentinel://:hunter2@h:bad/m")
    assert "hunter2" not in str(info.value)
    assert ":***@" in str(info.value)


@pytest.mark.parametrize(("url", "masked"), [
    ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://user:hunter2@h/0", "redis://user:***@h/0"),
    ("rediss://user:p%40ss@h", "rediss://user:***@h"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://s3cretPW@h", "redis://***@h"),     # a password written as the user name
    # no scheme:// (a typo): nothing before the last '@' is shown
    (":s3cretPW@127.0.0.1:6391/0", "***@127.0.0.1:6391/0"),
    ("redis:/:s3cretPW@h:6391/0", "redis:/***@h:6391/0"),
    ("redis//:s3cretPW@h/0", "***@h/0"),
    ("redis:s3c/ret@h/0", "redis:***@h/0"),
    ("h/0?password=s3cret", "h/0?password=***"),
    ("unix://:pw@/run/r.sock?db=1", "unix://:***@/run/r.sock?db=1"),
    ("redis+sentinel://:pw@a:1,b:2/m/1?sentinel_password=spw&socket_timeout=1",
     "redis+sentinel://:***@a:1,b:2/m/1?sentinel_password=***&socket_timeout=1"),
    ("redis+cluster://u:pw@a:7000,b:7001", "redis+cluster://u:***@a:7000,b:7001"),
    ("redis://h/0?password=secret", "redis://h/0?password=***"),
    ("redis://:pw@[::1:6379/0", "redis://:***@[::1:6379/0"),  # unparseable: regex fallback
])
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_an_unknown_option_of_a_plain_url_is_named_before_any_connection() -> None:
    """redis-py passes a query option it does not know on to the connection, which
    failed at the first command with "AbstractConnection.__init__() got an unexpected
    keyword argument 'foo'" (found by a trial)."""
    with pytest.raises(ValueError, match=r"unknown option 'client_nme' in Redis URL "
                       r"redis://:\*\*\*@h:6379/0\?client_nme=x \(did you mean 'client_name'\?\)"):
        parse_url("redis://:pw@h:6379/0?client_nme=x")
    with pytest.raises(ValueError, match="unknown option 'ssl_keyfile'"):   # TLS only
        parse_url("redis://h/0?ssl_keyfile=k.pem")
    for fine in ("redis://h/0?client_name=a&socket_keepalive=true&max_connections=5",
                 "rediss://h/0?ssl_cert_reqs=none&health_check_interval=5",
                 "unix:///run/r.sock?db=1&socket_timeout=2"):
        assert parse_url(fine).kind == "redis"


def test_connect_plain_forms_without_io() -> None:
    unix = connect("unix:///tmp/fw-no-such.sock?db=2")
    kwargs = unix.connection_pool.connection_kwargs
    assert (kwargs["path"], kwargs["db"], kwargs["decode_responses"]) == ("/tmp/fw-no-such.sock", 2, True)
    tls = connect("rediss://:pw@redis.example:6380/1")
    assert issubclass(tls.connection_pool.connection_class, redis.SSLConnection)
    assert tls.connection_pool.connection_kwargs["password"] == "pw"


def test_connect_sentinel_keeps_passwords_apart_without_io() -> None:
    client = connect("redis+sentinel://:masterpw@s1:26379,s2:26380/fwmaster/4?sentinel_password=spw")
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "fwmaster"
    assert pool.connection_kwargs["db"] == 4
    assert pool.connection_kwargs["password"] == "masterpw"
    assert pool.connection_kwargs["decode_responses"] is True
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in sentinels] == [("s1", 26379), ("s2", 26380)]
    for sentinel in sentinels:
        assert sentinel.connection_pool.connection_kwargs["password"] == "spw"
    assert not is_cluster(client)


def test_decode_responses_cannot_be_turned_off() -> None:
    with pytest.raises(ValueError, match="decode_responses"):
        connect("redis://localhost", decode_responses=False)


# ---------------------------------------------------------------- real servers


def test_real_connect_to_local_redis() -> None:
    client = connect("redis://127.0.0.1:6379/0", socket_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    key = f"fw-test:{uuid.uuid4().hex}"
    try:
        client.set(key, "é", ex=30)
        assert client.get(key) == "é"  # decoded str, not bytes
    finally:
        client.delete(key)
    assert not is_cluster(client)
    pubsub = new_pubsub_connection(client, ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(key)
        client.publish(key, "wake")
        assert _next_message(pubsub)["data"] == "wake"
    finally:
        pubsub.close()


def test_the_clients_made_here_pack_commands_as_redis_py_does_in_one_step(r) -> None:
    """``connect()`` and the decoding twin of a bytes client pack with ``Packer``:
    hiredis at once, the same bytes as redis-py's own serializer, the same errors, and
    redis-py's way for what hiredis refuses (a bytearray) or a two-word command."""
    from redis.connection import HiredisRespSerializer
    from redis.exceptions import DataError

    from fusionworker.core.redis_client import decoding
    from fusionworker.core.redis_wire import PACKER, Packer

    ref = HiredisRespSerializer()
    for args in [("EVALSHA", "a" * 40, 2, "k1", "k2", 1, 2.5, -0.0, 10**20, b"raw", "é"),
                 ("SET", memoryview(b"mv"), bytearray(b"ba")), ("CLIENT SETNAME", "x"),
                 (b"CLIENT SETNAME", "x"), (b"GET", "k")]:
        assert PACKER.pack(*args) == ref.pack(*args), args
    for bad in (None, True, object()):
        with pytest.raises(DataError):
            PACKER.pack("SET", "k", bad)
    made = connect("redis://127.0.0.1:6379/0")
    twin = decoding(redis.Redis(connection_pool=redis.ConnectionPool(
        **{**r.connection_pool.connection_kwargs, "decode_responses": False})))
    for client in (made, twin):
        conn = client.connection_pool.get_connection()
        try:
            assert isinstance(conn._command_packer, Packer)
        finally:
            client.connection_pool.release(conn)
        key = f"fw-test:{uuid.uuid4().hex}"
        try:     # a round trip: a script call with every kind of argument
            assert client.eval("return {ARGV[1], ARGV[2], ARGV[3], ARGV[4]}", 1, key,
                               "é", 7, 2.5, memoryview(b"mv")) == ["é", "7", "2.5", "mv"]
        finally:
            client.delete(key)


def test_the_pool_of_the_clients_made_here_keeps_redis_pys_checks(r, monkeypatch) -> None:
    """``LeanPool`` (the clients of ``connect()`` and the decoding twin of a bytes client)
    checks a connection out and back in one step each, and keeps what redis-py's pool
    checks: one connection for one caller at a time, a connection returned with a reply
    unread is not handed out as it is, a forked child makes its own. Where something
    listens to the steps it leaves out, the pool is redis-py's own (``lean`` false)."""
    import os

    from fusionworker.core import redis_wire
    from fusionworker.core.redis_client import decoding
    from fusionworker.core.redis_wire import LeanPool

    made = connect("redis://127.0.0.1:6379/0")
    twin = decoding(redis.Redis(connection_pool=redis.ConnectionPool(
        **{**r.connection_pool.connection_kwargs, "decode_responses": False})))
    for client in (made, twin):
        pool = client.connection_pool
        assert type(pool) is LeanPool and pool.lean
        ids = {client.client_id() for _ in range(3)}
        assert len(ids) == 1 and pool._created_connections == 1      # reused
        (old,) = ids
        with client.pipeline() as pipe:
            assert pipe.ping().client_id().execute() == [True, old]
        left = pool.get_connection()
        left.send_command("ECHO", "unread")         # its reply is never read
        assert left.can_read(timeout=5)             # it has come
        pool.release(left)
        assert not pool._in_use_connections
        # redis-py 8.1's own pool skips this check ("auto" maintenance notifications
        # read as on) and answers the next command with the unread reply
        assert client.execute_command("ECHO", "fresh") == "fresh"
        first = client.client_id()
        assert first != old and client.client_id() == first        # a new connection
        pid = os.fork()
        if pid == 0:                                # the child's own connection
            code = 0 if client.client_id() != first else 1
            os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
        assert client.client_id() == first          # the parent's is untouched
    assert not LeanPool(protocol=3).lean
    assert not LeanPool(credential_provider=redis.UsernamePasswordCredentialProvider("u")).lean
    monkeypatch.setattr(redis_wire, "_telemetry_off", lambda: False)
    plain = connect("redis://127.0.0.1:6379/0")       # redis-py's metrics on: its way
    assert not plain.connection_pool.lean and plain.ping()
    assert plain.connection_pool._in_use_connections == set()


def _next_message(pubsub: redis.client.PubSub, timeout: float = 5.0) -> dict:
    def message() -> dict | None:
        got = pubsub.get_message(timeout=0.2)
        return got if got is not None and got["type"] in ("message", "smessage") else None
    return wait_for(message, timeout=timeout, interval=0, what="a pub/sub message")


@pytest.mark.slow
def test_cluster_url_reaches_every_shard(redis_cluster: ClusterServers) -> None:
    client = connect(redis_cluster.url)
    assert isinstance(client, RedisCluster) and is_cluster(client)
    keys = [f"fw-test:{uuid.uuid4().hex}:{i}" for i in range(30)]
    owners = {client.get_node_from_key(k).port for k in keys}
    assert len(owners) == 3, "30 random keys should land on all three shards"
    try:
        for i, key in enumerate(keys):
            client.set(key, str(i))
        assert [client.get(k) for k in keys] == [str(i) for i in range(len(keys))]
    finally:
        for key in keys:
            client.delete(key)


def test_cluster_one_startup_node_and_hash_tagged_script(redis_cluster: ClusterServers) -> None:
    client = connect(f"redis+cluster://127.0.0.1:{redis_cluster.ports[0]}")
    assert len(client.get_nodes()) == 3  # the rest was discovered
    queue = uuid.uuid4().hex[:8]
    pending, seq = f"fw:{{{queue}}}:pending", f"fw:{{{queue}}}:seq"
    assert client.keyslot(pending) == client.keyslot(seq)
    # A multi-key Lua script is fine when every key shares the queue's hash tag.
    push = client.register_script(
        "local n = redis.call('INCR', KEYS[2]) "
        "redis.call('ZADD', KEYS[1], n, ARGV[1]) return n"
    )
    try:
        assert push(keys=[pending, seq], args=["job-a"]) == 1
        assert push(keys=[pending, seq], args=["job-b"]) == 2
        assert client.zrange(pending, 0, -1) == ["job-a", "job-b"]
    finally:
        client.delete(pending)
        client.delete(seq)


def test_cluster_pubsub_receives_publish_from_any_node(redis_cluster: ClusterServers) -> None:
    client = connect(redis_cluster.url)
    channel = f"fw:{{{uuid.uuid4().hex[:8]}}}:wake"
    pubsub = new_pubsub_connection(client, ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(channel)
        _wait_subscribed(pubsub)
        for port in redis_cluster.ports:  # PUBLISH is broadcast over the cluster bus
            with redis.Redis("127.0.0.1", port, decode_responses=True) as node:
                node.publish(channel, f"from {port}")
            assert _next_message(pubsub)["data"] == f"from {port}"
    finally:
        pubsub.close()


def _wait_subscribed(pubsub: redis.client.PubSub) -> None:
    # get_message with ignore_subscribe_messages consumes the confirmation
    wait_for(lambda: (pubsub.get_message(timeout=0.1), pubsub.subscribed)[1], timeout=5,
             interval=0, what="the subscription")


@pytest.mark.slow
def test_sentinel_client_follows_a_failover(
    redis_sentinel: SentinelServers, caplog: pytest.LogCaptureFixture
) -> None:
    client = connect(redis_sentinel.url, socket_timeout=2)
    old_master = redis_sentinel.master_port
    assert client.connection_pool.get_master_address()[1] == old_master
    client.set("before", "1")
    assert client.get("before") == "1"
    redis_sentinel.wait_replicated()    # a manual failover does not wait for the replica

    new_master = redis_sentinel.failover()
    assert new_master != old_master
    # The old master is still up (a manual failover): without a refresh the
    # pooled connection would keep writing to it until Sentinel demotes it.
    # The worker's FollowSentinelMaster middleware notices on its next tick.
    follow = FollowSentinelMaster(interval=5.0)
    with caplog.at_level(logging.INFO, logger="fusionworker.connection"):
        follow.on_tick(SimpleNamespace(connection=client))
    assert f"Redis master moved to 127.0.0.1:{new_master}" in caplog.text
    assert refresh_master(client) is False  # already up to date
    _assert_follows(client, new_master)
    assert client.get("before") == "1"  # replicated before the failover


@pytest.mark.slow
def test_sentinel_client_follows_when_the_master_dies(redis_sentinel: SentinelServers) -> None:
    client = connect(redis_sentinel.url, socket_timeout=2)
    client.set("before", "1")
    redis_sentinel.wait_replicated()
    new_master = redis_sentinel.kill_master()
    _assert_follows(client, new_master)  # no refresh needed: the old connection breaks
    assert client.get("before") == "1"


def test_refresh_master_is_a_noop_for_other_clients() -> None:
    assert refresh_master(connect("redis://127.0.0.1:6379/0")) is False
    assert refresh_master(None) is False


@pytest.mark.slow
def test_follow_sentinel_master_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    nobody = connect(f"redis+sentinel://127.0.0.1:{free_port()}/fwmaster",
                     socket_connect_timeout=0.5)
    worker = SimpleNamespace(connection=nobody)
    follow = FollowSentinelMaster(interval=5.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="fusionworker.connection"):
        follow.on_tick(worker)       # asks: every sentinel is down -> one warning
        follow.on_tick(worker)       # within the interval: does not ask again
        clock.now += 5
        follow.on_tick(worker)       # asks again, still down: no second warning
    warnings = [r for r in caplog.records if "Cannot ask the Redis sentinels" in r.getMessage()]
    assert len(warnings) == 1
    FollowSentinelMaster().on_tick(SimpleNamespace(connection=connect("redis://127.0.0.1:6379")))


def _assert_follows(client: redis.Redis, new_master: int) -> None:
    """The same client object reaches the new master within a few seconds.

    Commands racing the switchover may fail with ConnectionError for a moment.
    """
    def reached() -> bool:
        token = uuid.uuid4().hex
        client.set("after", token)
        with redis.Redis("127.0.0.1", new_master, decode_responses=True) as direct:
            return direct.get("after") == token and client.get("after") == token

    wait_for(reached, timeout=10, interval=0.1, what="the client reaching the new master",
             ignore=(redis.ConnectionError, redis.ReadOnlyError))

    assert client.connection_pool.get_master_address()[1] == new_master
    with redis.Redis("127.0.0.1", new_master, decode_responses=True) as direct:
        assert direct.info("replication")["role"] == "master"
