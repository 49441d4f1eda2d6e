"""Redis ACL users per role: which process may touch which keys (see keys.py).

Without them every process shares one password, so any GPU node could forge
another node's telemetry, a benchmark's results or a Celery task. Roles:

  node-<name>        a GPU node's collector: XADD to its own telemetry and
                     probe streams, SET its own ``node:<name>`` (and EXISTS on
                     it), push its own ``probes:<name>``; no reads, no Celery, no job keys, no
                     key of another node (so ingest takes the stream a sample
                     came in for who sent it)
  simulator          the demo's simulated collector: the node role for every
                     node named ``<name prefix>*``, plus reading the faults hash
  simulator-faults   reads the faults hash, nothing else: the demo's node run the
                     production way (its own node-<name> user) takes its faults with it
  simulated-nodeworker  the demo's one benchmark worker for all those nodes,
                     in the one simulated broker key space
  nodeworker-<name>  a GPU node's Celery worker: only its own broker key space
                     ``nodeq:<name>:*`` (its queue, bindings, unacked hash), its
                     own events stream, claim and cancel flag of each job
                     (``job:*:events:<name>``, ``job:*:claimed:<name>``,
                     ``job:*:cancel:<name>``) and its own heartbeat
                     ``worker:<name>``; no pub/sub channel, nothing of the
                     control host's Celery keys
  ingest             the telemetry consumer group, node state it derives,
                     the channel layer, Celery producer on the webhooks and
                     scheduler queues
  web                reads what the pages and the API show, the channel layer,
                     its cache, the simulator faults, websocket counts, job
                     events streams and cancel flags (the control one and each
                     node's), Celery producer on the control queue
  control            the control, webhook and scheduler workers: the control
                     host's Celery keys, every node's broker key space (it sends
                     node tasks), job keys, worker heartbeats, webhook leases,
                     the channel layer

The rules are written for Redis 6.2 (the embedded server; they hold on 7.x),
where a user's key patterns allow every command the user has: so the roles
that must not write what they read list their commands one by one, and every
key a node worker reaches is its own (kombu's unacknowledged hash included,
under its own broker prefix). Known limits: docs/security-redis.md.

`python -m gpulse.redis_acl --node gpu-01 --node gpu-02` prints a users.acl
file; each password comes from an environment variable (never from here).
"""

import argparse
import hashlib
import os
import re
import secrets
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from gpulse.keys import DEFAULT_PREFIX
from gpulse.schema import valid_node_name

# Characters that are special in Redis glob patterns.
GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")

# Every user may open a connection; nothing else comes for free.
CONNECT = ("-@all", "+hello", "+auth", "+ping", "+select")
TRANSACTIONS = ("+multi", "+exec", "+discard")
# What kombu's Redis transport runs, found by MONITOR on a worker and a
# producer: queues, binding sets, the unacked hash, Lua scripts (which run
# under the caller's ACL, hence +time) and pub/sub events. -@dangerous drops
# KEYS, FLUSH*, CONFIG, CLIENT, INFO, SORT, RESTORE and the other admin commands.
CELERY_WORKER = (
    "+@read", "+@write", "+@pubsub", *TRANSACTIONS, "+watch", "+unwatch",
    "+eval", "+evalsha", "+script|load", "+script|exists", "+time", "-@dangerous",
)


def _celery_channels(p: str, db: int) -> tuple[str, ...]:
    # Workers PSUBSCRIBE to the remote-control broadcast, and Redis 6.2 matches
    # a PSUBSCRIBE pattern literally against the user's channel rules; events
    # and replies are PUBLISHed under the prefix.
    return (f"&{p}celery:/{db}.celery.pidbox", f"&{p}celery:*")


# A producer: declares the queue (LLEN, SADD to its bindings), looks the
# bindings up and LPUSHes.
CELERY_PRODUCER = ("+lpush", "+llen", "+sadd", "+smembers")


@dataclass(frozen=True)
class AclUser:
    name: str
    rules: tuple[str, ...]

    @property
    def password_variable(self) -> str:
        """Environment variable the CLI reads this user's password from."""
        return "GPULSE_REDIS_PASSWORD_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper())


def _user(name: str, keys: Iterable[str], channels: Iterable[str], commands: Iterable[str]) -> AclUser:
    """Only these keys, channels and commands (each listed once)."""
    rules = ("resetkeys", "resetchannels", *keys, *channels, *CONNECT, *dict.fromkeys(commands))
    return AclUser(name, rules)


def _pattern(text: str) -> str:
    return GLOB_SPECIAL.sub(r"\\\1", text)


def _check_prefix(prefix: str) -> None:
    if not prefix or any(ch.isspace() for ch in prefix):
        raise ValueError(f"key prefix must be non-empty without spaces (one ACL token), not {prefix!r}")


def _check_node(name: str) -> None:
    if not valid_node_name(name):
        raise ValueError(f"node name {name!r} is not allowed in an ACL user: the sample contract's node name rule")


def _node_keys(p: str, nodes: str) -> tuple[str, ...]:
    """The keys of the nodes matching the pattern ``nodes`` that their collector writes."""
    return (f"~{p}telemetry:{nodes}", f"~{p}probe-results:{nodes}", f"~{p}node:{nodes}", f"~{p}probes:{nodes}")


def node_user(prefix: str, name: str) -> AclUser:
    _check_prefix(prefix)
    _check_node(name)
    keys = _node_keys(_pattern(prefix), _pattern(name))
    # EXISTS: a healthcheck asks whether the collector keeps its own node key alive.
    return _user(f"node-{name}", keys, (), ("+xadd", "+set", "+lpush", "+ltrim", "+exists", *TRANSACTIONS))


def simulator_user(prefix: str, name_prefix: str) -> AclUser:
    _check_prefix(prefix)
    _check_node(name_prefix)
    p = _pattern(prefix)
    keys = (*_node_keys(p, _pattern(name_prefix) + "*"), f"~{p}simulator:faults")
    commands = ("+xadd", "+set", "+lpush", "+ltrim", *TRANSACTIONS, "+hgetall")
    return _user("simulator", keys, (), commands)


def faults_reader_user(prefix: str) -> AclUser:
    """The demo's simulated faults, read-only: for a simulated collector that logs in as a node's own
    user (which reads nothing) and still follows the faults set from the simulator page."""
    _check_prefix(prefix)
    return _user("simulator-faults", (f"~{_pattern(prefix)}simulator:faults",), (), ("+hgetall",))


# A node worker's Celery commands: kombu's consumer (BRPOP, the unacked hash, its
# Lua scripts) on its own queue, with remote control and events off, hence no pub/sub.
NODE_CELERY_WORKER = tuple(command for command in CELERY_WORKER if command != "+@pubsub")


def _nodeworker(prefix: str, user: str, broker: str, nodes: str) -> AclUser:
    """A benchmark worker's user: the broker key space ``broker`` (a literal name) and the
    job keys of the nodes matching the pattern ``nodes``."""
    _check_prefix(prefix)
    p = _pattern(prefix)
    keys = (f"~{p}nodeq:{_pattern(broker)}:*", f"~{p}job:*:events:{nodes}", f"~{p}job:*:cancel:{nodes}",
            f"~{p}job:*:claimed:{nodes}", f"~{p}worker:{nodes}")
    return _user(user, keys, (), NODE_CELERY_WORKER)


# The demo's simulated node worker's broker name (gpulse/celery_contract.py node_broker).
SIMULATED_BROKER = "@simulated"


def nodeworker_user(prefix: str, name: str, db: int = 0) -> AclUser:
    _check_node(name)
    return _nodeworker(prefix, f"nodeworker-{name}", name, _pattern(name))


def simulated_nodeworker_user(prefix: str, name_prefix: str, db: int = 0) -> AclUser:
    """The demo's one benchmark worker for every simulated node named ``<name_prefix>*``."""
    _check_node(name_prefix)
    return _nodeworker(prefix, "simulated-nodeworker", SIMULATED_BROKER, _pattern(name_prefix) + "*")


def _producer_keys(p: str) -> tuple[str, ...]:
    # The control-host queues (a producer declares every queue of the app when
    # it sends), their priority lists (<queue>\x06\x16<n>) and binding sets.
    return tuple(key for queue in ("control", "webhooks", "scheduler")
                 for key in (f"~{p}celery:{queue}*", f"~{p}celery:_kombu.binding*.{queue}"))


def ingest_user(prefix: str) -> AclUser:
    _check_prefix(prefix)
    p = _pattern(prefix)
    keys = (f"~{p}telemetry:*", f"~{p}node:*", f"~{p}nodes", f"~{p}health", f"~{p}recent:*", f"~{p}frame:snapshot",
            f"~{p}usage:idle", f"~{p}sm-idle", f"~{p}ingest:heartbeat", f"~{p}probe-results:*", f"~{p}probes:*",
            *_producer_keys(p))
    # SCAN finds new nodes' streams (it names keys, reads none); XTRIM holds each stream to its cap
    # whatever its node asked; pruning forgets nodes (HDEL, DEL of their lists and streams) and idle
    # consumers of the group.
    commands = ("+scan", "+xreadgroup", "+xgroup|create", "+xgroup|delconsumer", "+xinfo|consumers", "+xautoclaim",
                "+xack", "+xtrim", "+xrevrange", "+xread", "+hgetall", "+hset", "+hdel", "+del", "+mget", "+get",
                "+set", "+lpush", "+ltrim", "+lrange", "+publish", *TRANSACTIONS, *CELERY_PRODUCER)
    return _user("ingest", keys, (f"&{p}asgi*",), commands)


def web_user(prefix: str) -> AclUser:
    _check_prefix(prefix)
    p = _pattern(prefix)
    keys = (f"~{p}node:*", f"~{p}nodes", f"~{p}health", f"~{p}recent:*", f"~{p}frame:snapshot", f"~{p}usage:idle",
            f"~{p}sm-idle", f"~{p}ingest:heartbeat", f"~{p}probes:*", f"~{p}job:*:events", f"~{p}job:*:cancel",
            f"~{p}job:*:events:*", f"~{p}job:*:cancel:*",
            f"~{p}simulator:faults", f"~{p}cache:*", f"~{p}worker:*", f"~{p}websockets:*", *_producer_keys(p))
    # Reads for the pages, the API and the job websocket; writes only through
    # the cache (Django's RedisCache), the faults hash, a cancelled job's flag and
    # final event, the per-user websocket sets and the producer.
    commands = ("+@read", "+@pubsub", "+set", "+del", "+incrby", "+expire", "+hset", "+hdel", "+zadd", "+zrem", "+xadd",
                "+zremrangebyscore", *TRANSACTIONS, "-@dangerous", *CELERY_PRODUCER)
    return _user("web", keys, (f"&{p}asgi*",), commands)


def control_user(prefix: str, db: int = 0) -> AclUser:
    """The control and webhook workers: the control host's Celery keys, every node's
    broker key space, job keys, node-worker heartbeats and the per-endpoint webhook leases."""
    _check_prefix(prefix)
    p = _pattern(prefix)
    keys = (f"~{p}celery:*", f"~{p}nodeq:*", f"~{p}job:*", f"~{p}worker:*", f"~{p}webhook:*")
    return _user("control", keys, (*_celery_channels(p, db), f"&{p}asgi*"), CELERY_WORKER)


def acl_users(prefix: str, nodes: Iterable[str] = (), simulator_prefix: str | None = None,
              db: int = 0) -> list[AclUser]:
    """Return every gpulse user for this key prefix and Redis database (the
    one in REDIS_URL): the shared roles, then one node and one nodeworker user
    per GPU node, then the demo's simulated collector, benchmark worker and faults reader."""
    users = [ingest_user(prefix), web_user(prefix), control_user(prefix, db)]
    for name in nodes:
        users += [node_user(prefix, name), nodeworker_user(prefix, name, db)]
    if simulator_prefix is not None:
        users += [simulator_user(prefix, simulator_prefix), simulated_nodeworker_user(prefix, simulator_prefix, db),
                  faults_reader_user(prefix)]
    names = [user.name for user in users]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"node named twice: {', '.join(duplicates)}")
    return users


def admin_user() -> AclUser:
    """An operator's account: everything, for ACL LOAD, backups and debugging."""
    return AclUser("admin", ("~*", "&*", "+@all"))


def acl_file(users: Iterable[AclUser], passwords: Mapping[str, str]) -> str:
    """Return a users.acl file; passwords are stored only as SHA-256 hashes.

    Its first line turns the default user off: a file without one makes Redis
    create it on, with no password and every permission.
    """
    lines = ["user default off"]
    for user in users:
        digest = hashlib.sha256(passwords[user.name].encode()).hexdigest()
        lines.append(" ".join(("user", user.name, "on", f"#{digest}", *user.rules)))
    return "\n".join(lines) + "\n"


def create_users(client: redis.Redis, users: Iterable[AclUser], passwords: Mapping[str, str]) -> None:
    """Create (or reset to these rules) each user on a running server."""
    for user in users:
        client.execute_command("ACL", "SETUSER", user.name, "reset", "on", f">{passwords[user.name]}", *user.rules)


def create_role_users(redis_url: str, prefix: str, nodes: Iterable[str] = (),
                      simulator_prefix: str | None = None) -> dict[str, str]:
    """Create every user on the server at ``redis_url`` (an administrator's
    URL) with a fresh random password; return each user's URL. For the demo
    and the tests, where nothing outlives the server."""
    admin = redis.Redis.from_url(redis_url)
    try:
        db = admin.connection_pool.connection_kwargs.get("db", 0)
        users = acl_users(prefix, nodes, simulator_prefix, db)
        passwords = {user.name: secrets.token_urlsafe(24) for user in users}
        create_users(admin, users, passwords)
    finally:
        admin.close()
    return {user.name: user_url(redis_url, user.name, passwords[user.name]) for user in users}


def user_url(redis_url: str, user: str, password: str) -> str:
    """Return ``redis_url`` logging in as ``user``: redis://user:pass@host:port/db."""
    parts = urlsplit(redis_url)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def passwords_from_environment(users: Iterable[AclUser], environ: Mapping[str, str]) -> dict[str, str]:
    """Return each user's password from its variable; raise naming every missing one."""
    missing = [user.password_variable for user in users if not environ.get(user.password_variable)]
    if missing:
        raise ValueError("set a password in each of: " + ", ".join(missing))
    return {user.name: environ[user.password_variable] for user in users}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpulse.redis_acl",
        description="Print a Redis users.acl file with one user per gpulse role and GPU node. Each password is "
                    "read from GPULSE_REDIS_PASSWORD_<USER> (user name upper-cased, '-' and '.' as '_').",
    )
    parser.add_argument("--prefix", default=os.environ.get("GPULSE_REDIS_PREFIX", DEFAULT_PREFIX),
                        help="gpulse's key prefix, GPULSE_REDIS_PREFIX (default %(default)s)")
    parser.add_argument("--node", action="append", default=[], metavar="NAME",
                        help="a GPU node's name as its collector reports it; repeat per node")
    parser.add_argument("--db", type=int, default=0,
                        help="the database number in gpulse's REDIS_URL (default %(default)s)")
    parser.add_argument("--simulator", metavar="NAME_PREFIX",
                        help="also a user for a simulated collector whose nodes are named NAME_PREFIX*")
    parser.add_argument("--admin", action="store_true",
                        help="also an 'admin' user with every permission, for operators (ACL LOAD, backups)")
    parser.add_argument("--list-variables", action="store_true",
                        help="print the password variables to set, one a line, and exit")
    args = parser.parse_args(argv)
    try:
        users = acl_users(args.prefix, args.node, args.simulator, args.db)
        if args.admin:
            users.append(admin_user())
        if args.list_variables:
            print("\n".join(user.password_variable for user in users))
            return 0
        sys.stdout.write(acl_file(users, passwords_from_environment(users, os.environ)))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
