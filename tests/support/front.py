"""The repository's nginx front (docker/nginx.conf) rendered for loopback ports and run as this test's own process.

The shipped file names the compose nodes (`server node-a:8000;`) and the public ports (`listen 5683 udp;`); the
rendering keeps every other line as shipped, so what the tests check is the file operators run: each upstream's
servers become the given nodes' loopback ports for that upstream's role (its port in the file: 8000 HTTP, 5683 CoAP,
5684 DTLS, 5685 CoAP/TCP, 5686 CoAP/TLS), each `listen` a free loopback port, and the paths nginx writes go to a
temporary directory. Debian builds the stream module as a dynamic module: it is loaded when present.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from support.ports import free_tcp_port, free_udp_port
from support.redis_server import redis_server
from support.service import ServiceProcess
from support.waiting import wait_until

CONFIG = Path(__file__).resolve().parents[2] / "docker" / "nginx.conf"
STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")
LOG_TAIL = 80  # lines of each node's log shown with a failure
HTTP, COAP, COAPS, COAP_TCP, COAPS_TCP = 8000, 5683, 5684, 5685, 5686

_UPSTREAM = re.compile(r"(upstream\s+\S+\s*\{)(.*?)(\})", re.S)
_SERVER = re.compile(r"^[ \t]*server\s+[^:\s]+:(\d+)([^;]*);\s*\n", re.M)
_LISTEN = re.compile(r"listen\s+(\d+)((?:\s+udp)?(?:\s+reuseport)?);")


@dataclass
class Front:
    """The addresses nginx listens on, by the public port they stand for (`(5683, "udp")`: CoAP over UDP)."""

    ports: dict[tuple[int, str], int]
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[(HTTP, 'tcp')]}"

    @property
    def coap_uri(self) -> str:
        return f"coap://127.0.0.1:{self.ports[(COAP, 'udp')]}"

    @property
    def coap_tcp_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[(COAP, "tcp")])

    @property
    def coap_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[(COAP, "udp")])


def render(nodes: Sequence[Mapping[int, int]], listen: Mapping[tuple[int, str], int], workdir: Path) -> str:
    """docker/nginx.conf with `nodes` (each: role port → the node's loopback port; a role a node lacks is left out
    of that upstream) and `listen` (public port and protocol → loopback port)."""
    text = CONFIG.read_text()

    def upstream(match: re.Match[str]) -> str:
        body = match.group(2)
        first = _SERVER.search(body)
        assert first is not None, body
        role, parameters = int(first.group(1)), first.group(2)
        kept = _SERVER.sub("", body)
        servers = "".join(f"    server 127.0.0.1:{node[role]}{parameters};\n" for node in nodes if role in node)
        return match.group(1) + kept.rstrip(" ") + servers + "  " + match.group(3)

    def listener(match: re.Match[str]) -> str:
        protocol = "udp" if "udp" in match.group(2) else "tcp"
        return f"listen 127.0.0.1:{listen[(int(match.group(1)), protocol)]}{match.group(2) or ''};"

    unused = [name for name, port in _roles(text).items() if not any(port in node for node in nodes)]
    for name in unused:  # a role no node has (DTLS with no credentials): its upstream and its server go
        text = re.sub(rf"\n  upstream\s+{name}\s*\{{.*?\}}\n", "\n", text, flags=re.S)
        text = re.sub(rf"\n  server\s*\{{[^}}]*proxy_pass\s+{name};[^}}]*\}}\n", "\n", text, flags=re.S)
    text = _UPSTREAM.sub(upstream, text)
    text = _LISTEN.sub(listener, text)
    temp = "".join(
        f"  {kind}_temp_path {workdir / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace("http {\n", f"http {{\n  access_log off;\n{temp}", 1)
    if STREAM_MODULE.exists():
        text = f"load_module {STREAM_MODULE};\n" + text
    return text


def _roles(text: str) -> dict[str, int]:
    """Stream upstream name → its role (the port its servers have in the file)."""
    roles = {}
    for match in _UPSTREAM.finditer(text):
        server = _SERVER.search(match.group(2))
        if server is not None:
            roles[match.group(1).split()[1]] = int(server.group(1))
    return roles


def _listens() -> list[tuple[int, str]]:
    return [(int(port), "udp" if "udp" in rest else "tcp") for port, rest in _LISTEN.findall(CONFIG.read_text())]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def nginx_front(nodes: Sequence[Mapping[int, int]], workdir: Path) -> Iterator[Front]:
    """Run nginx with the rendered front until the block ends (stopped by its pid: SIGTERM, then SIGKILL)."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise RuntimeError("nginx is not installed (Debian: nginx-light libnginx-mod-stream)")
    workdir.mkdir(parents=True, exist_ok=True)
    listen = {key: (free_udp_port() if key[1] == "udp" else free_tcp_port()) for key in _listens()}
    conf = workdir / "nginx.conf"
    conf.write_text(render(nodes, listen, workdir))
    listen = {key: port for key, port in listen.items() if f":{port}" in conf.read_text()}
    directives = f"daemon off; master_process on; pid {workdir / 'nginx.pid'}; error_log stderr notice;"
    process = subprocess.Popen(
        [binary, "-p", str(workdir), "-c", str(conf), "-g", directives],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    front = Front(listen, process)
    reader = threading.Thread(target=_drain, args=(process, front.output), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: process.poll() is not None or _answers(listen[(HTTP, "tcp")]),
            within=10,
            what="nginx listening",
        )
        if process.poll() is not None:
            raise RuntimeError("nginx did not start:\n" + "".join(front.output))
        yield front
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # fast shutdown: a graceful one waits out UDP sessions (1 h)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()


def _drain(process: subprocess.Popen[str], output: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line)


class ThreeNodes:
    def __init__(self, redis_url: str, nodes: list[ServiceProcess], front: Front) -> None:
        self.redis_url, self.nodes, self.front = redis_url, nodes, front

    def holders(self) -> dict[str, str]:
        """Device id → the node id holding it (issue 31 #1's holder records)."""
        client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        try:
            keys = list(client.scan_iter("devicehub:holder:*"))  # holder:{dev:<id>} (store/redis/keys.py)
            return {key.rsplit(":", 1)[1].rstrip("}"): str(client.get(key)) for key in keys}
        finally:
            client.close()


def start_nodes(tmp_path: Path, url: str, count: int = 3) -> list[tuple[ServiceProcess, int]]:
    """`count` nodes on `url`, sharing the first one's development key; behind a front, the per-host CoAP limit
    would count the whole fleet as one host (the nodes see nginx's address). Each with its CoAP/TCP port."""
    nodes: list[tuple[ServiceProcess, int]] = []
    for n in range(count):
        name = "abc"[n]
        data_dir = tmp_path / name
        if nodes:
            data_dir.mkdir()
            (data_dir / "dev-api-key").write_text(nodes[0][0].api_key + "\n")
        tcp_port = free_tcp_port()
        args = ("--redis-url", url, "--node-id", f"node-{name}", "--coap-host-rate-limit", "0")
        node = ServiceProcess(data_dir=data_dir, extra_args=(*args, "--coap-tcp-port", str(tcp_port)))
        nodes.append((node, tcp_port))
        node.start()
    return nodes


@contextmanager
def three_nodes_behind_the_front(tmp_path: Path) -> Iterator[ThreeNodes]:
    """redis-server, three nodes on it (each with CoAP over UDP and TCP), and nginx in front of them."""
    with redis_server() as url:
        nodes: list[tuple[ServiceProcess, int]] = []
        try:
            nodes = start_nodes(tmp_path, url)
            roles = [{HTTP: n.http_port, COAP: n.coap_port, COAP_TCP: tcp} for n, tcp in nodes]
            with nginx_front(roles, tmp_path / "nginx") as front:
                yield ThreeNodes(url, [n for n, _ in nodes], front)
        except BaseException:  # a failure comes with what each node logged (pytest shows it beside the assertion)
            for node, _ in nodes:
                print(f"--- the last log lines of the node at {node.base_url}:\n" + "".join(node.output[-LOG_TAIL:]))
            raise
        finally:
            for node, _ in reversed(nodes):
                node.stop()
