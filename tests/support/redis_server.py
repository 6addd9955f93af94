"""A real `redis-server` (Debian package) on a free loopback port, for tests that need Redis; and a Redis Cluster of
three primaries on loopback (issue 31 #2), which the store and the nodes reach through any one of them."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from support.ports import free_tcp_port
from support.waiting import wait_until

STARTUP_TIMEOUT = 10.0


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


CLUSTER_PRIMARIES = 3
CLUSTER_TIMEOUT = 30.0


@contextmanager
def redis_server(*extra: str, port: int | None = None) -> Iterator[str]:
    """Start redis-server without persistence in a temporary directory; yield its URL; always stop it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (scripts/test.sh installs the Debian package)")
    port = port or free_tcp_port()
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--protected-mode",
                "yes",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_started(process, port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _cluster_port() -> int:
    """A free port whose cluster bus port (the port + 10000) is free too."""
    while True:
        port = free_tcp_port()
        if port + 10000 < 65536:
            try:
                with socket.socket() as bus:
                    bus.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                continue


def _cluster_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"CLUSTER INFO\r\n")
            return b"cluster_state:ok" in conn.recv(4096)
    except OSError:
        return False


@contextmanager
def redis_cluster() -> Iterator[str]:
    """Start a Redis Cluster of three primaries without replicas on loopback (`redis-server --cluster-enabled yes`,
    `redis-cli --cluster create`); yield the URL of its first node (a client finds the others from it); always stop
    it."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not installed (the Debian package redis-tools)")
    with ExitStack() as nodes, tempfile.TemporaryDirectory() as workdir:
        ports = [_cluster_port() for _ in range(CLUSTER_PRIMARIES)]
        urls = [
            nodes.enter_context(
                redis_server(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    f"{workdir}/nodes-{port}.conf",
                    "--cluster-node-timeout",
                    "5000",
                    port=port,
                )
            )
            for port in ports
        ]
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=CLUSTER_TIMEOUT,
        )
        for port in ports:
            wait_until(
                lambda p=port: _cluster_ok(p), within=CLUSTER_TIMEOUT, what=f"cluster_state:ok on {port}", every=0.05
            )
        yield urls[0]


def _wait_started(process: subprocess.Popen[bytes], port: int) -> None:
    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited at start")
        return _answers_ping(port)

    wait_until(ready, within=STARTUP_TIMEOUT, what=f"redis-server answering on port {port}", every=0.02)


class RedisProcess:
    """A redis-server on one fixed port that a test may stop and start again (its append-only file keeps the data
    across a restart) or freeze (SIGSTOP) and thaw (SIGCONT): the faults a node must survive."""

    def __init__(self, workdir: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test.sh installs the Debian package)")
        self.port = free_tcp_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                      "--appendfsync", "always", "--dir", workdir, "--protected-mode", "yes"]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        self.process = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_started(self.process, self.port)
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)  # a frozen server must run to exit
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


def flush_cluster(url: str) -> None:
    """Empty every primary of the cluster `url` names (a session's cluster shared by tests that each start clean)."""
    import redis

    client = redis.RedisCluster.from_url(url)
    try:
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    finally:
        client.close()
        # redis-py's close can leave open the connection a call to several nodes took from a node's pool: its
        # socket's ResourceWarning then surfaces in whichever test collects it
        for node in client.get_nodes():
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()
