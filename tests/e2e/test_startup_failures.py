"""Every start-up failure of `devicehub serve|edge|simulate` is one line on stderr and exit code 2 (issue 17 §1–2)."""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devicehub.cli import main
from support.ports import free_tcp_port, free_udp_port
from support.service import ServiceProcess

pytestmark = pytest.mark.e2e


def _popen(args: tuple[str, ...], env: dict[str, str] | None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEHUB_")}
    return subprocess.Popen(
        [sys.executable, "-m", "devicehub", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def _result(process: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def devicehub(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return _result(_popen(args, env), timeout)


def devicehub_all(
    *calls: tuple[str, ...] | tuple[tuple[str, ...], dict[str, str]], timeout: float = 30
) -> list[subprocess.CompletedProcess[str]]:
    """Several `devicehub` runs side by side (each pays the interpreter's start-up once, in parallel)."""
    processes = []
    for call in calls:
        if call and isinstance(call[0], tuple):
            processes.append(_popen(call[0], call[1]))  # type: ignore[arg-type]
        else:
            processes.append(_popen(call, None))  # type: ignore[arg-type]
    return [_result(p, timeout) for p in processes]


def one_line_failure(result: subprocess.CompletedProcess[str], command: str, *fragments: str) -> str:
    """Exit 2, no traceback, and the last stderr line is `devicehub <command>: …` holding every fragment."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"devicehub {command}: "), result.stderr
    for fragment in fragments:
        assert fragment in line, line
    return line


@pytest.fixture
def tcp_in_use() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


@pytest.fixture
def udp_in_use() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def serve_args(data_dir: Path, *extra: str) -> list[str]:
    ports = [] if "--http-port" in extra else ["--http-port", "0", "--coap-port", "0"]
    return ["serve", "--dev", "--data-dir", str(data_dir), *ports, *extra]


def test_serve_http_port_in_use(tmp_path: Path, tcp_in_use: int) -> None:
    result = devicehub(*serve_args(tmp_path, "--http-port", str(tcp_in_use), "--coap-port", "0"))
    one_line_failure(result, "serve", "HTTP API", f"127.0.0.1:{tcp_in_use}", "already in use")


def test_serve_coap_port_in_use(tmp_path: Path, udp_in_use: int) -> None:
    result = devicehub(*serve_args(tmp_path, "--http-port", "0", "--coap-port", str(udp_in_use)))
    one_line_failure(result, "serve", "LwM2M server", f"udp 127.0.0.1:{udp_in_use}", "already in use")


def test_port_out_of_range_is_refused_not_wrapped(tmp_path: Path) -> None:
    one_line_failure(devicehub(*serve_args(tmp_path, "--http-port", "99999")), "serve", "--http-port", "65535", "99999")


def in_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """The same `devicehub` entry point, called in this process: settings checks fail before anything starts."""
    for name in [k for k in os.environ if k.startswith("DEVICEHUB_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        code = main(list(args))
    except SystemExit as exit_:  # argparse's own errors
        code = int(exit_.code or 0)
    finally:  # main() sets up logging for a whole process: give pytest its handlers back
        root.handlers[:], root.level = handlers, level
    out, err = capsys.readouterr()
    for name in env:
        monkeypatch.delenv(name)
    return subprocess.CompletedProcess(args, code, out, err)


def test_bad_ports_log_level_flavor_server_and_environment_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = ("serve", "--data-dir", str(tmp_path), "--coap-port", "0")
    cases: list[tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]] = [
        (
            ("serve", "--data-dir", str(tmp_path), "--http-port", "0"),
            {"DEVICEHUB_COAP_PORT": "70000"},
            ("serve", "DEVICEHUB_COAP_PORT", "70000"),
        ),
        (("edge", "-o", "99999"), {}, ("edge", "--http-port", "99999")),
        (("simulate", "--server", "coap://127.0.0.1:99999"), {}, ("simulate", "--server", "out of range")),
        (tuple(serve_args(tmp_path, "--log-level", "loud")), {}, ("serve", "--log-level", "loud")),
        (tuple(serve_args(tmp_path)), {"DEVICEHUB_LOG_LEVEL": "chatty"}, ("serve", "DEVICEHUB_LOG_LEVEL", "chatty")),
        (tuple(serve_args(tmp_path, "--log-format", "yaml")), {}, ("serve", "--log-format", "yaml")),
        ((*bare, "--http-port", "0"), {"DEVICEHUB_DEV": "maybe"}, ("serve", "DEVICEHUB_DEV", "maybe")),
        (bare, {"DEVICEHUB_HTTP_PORT": "eighty"}, ("serve", "DEVICEHUB_HTTP_PORT", "integer", "eighty")),
        (tuple(serve_args(tmp_path, "--http-port", "x")), {}, ("serve", "--http-port", "'x'")),
        (("simulate", "--flavor", "lwm2m"), {}, ("simulate", "--flavor", "oma, pelion")),
        (("simulate", "--server", "http://127.0.0.1"), {}, ("simulate", "--server", "coap://")),
        (("edge", "--server", "127.0.0.1:5683"), {}, ("edge", "--server", "coap://")),
        (("serve", "--redis-url", "http://127.0.0.1:6379"), {}, ("serve", "--redis-url", "redis://")),
        # issue 32 #5: the simulator's credentials, said before any device starts (they were 38-line tracebacks,
        # and a missing certificate file showed as a server that never answers)
        (("simulate", "--server", "coaps://127.0.0.1:5684"), {}, ("simulate", "needs --psk-key")),
        (("simulate", "--server", "coaps://127.0.0.1:5684", "--psk-key", "zz"), {}, ("simulate", "hexadecimal")),
        (
            ("simulate", "--server", "coaps://127.0.0.1:5684", "--cert", str(tmp_path / "none.pem")),
            {},
            ("simulate", "none.pem", "not found"),
        ),
    ]
    for args, env, (command, *fragments) in cases:
        one_line_failure(in_process(capsys, monkeypatch, *args, **env), command, *fragments)


def test_data_dir_that_is_a_file_or_below_one(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    is_file, below, admin = devicehub_all(
        tuple(serve_args(a_file)),
        tuple(serve_args(a_file / "sub")),
        ("accounts", "list", "--data-dir", str(a_file / "sub")),
    )
    one_line_failure(is_file, "serve", str(a_file), "is a file")
    one_line_failure(below, "serve", str(a_file / "sub"), "not writable")
    one_line_failure(admin, "accounts")


def test_data_dir_the_system_refuses(tmp_path: Path) -> None:
    # mode bits do not stop root (CI runs as root); sysfs refuses a new directory to every user, root included
    refused = Path("/sys") / f"devicehub-{tmp_path.name}"
    one_line_failure(devicehub(*serve_args(refused)), "serve", str(refused), "not writable")


def test_redis_unreachable_or_malformed(tmp_path: Path) -> None:
    closed = free_tcp_port()
    unreachable, admin = devicehub_all(
        ("serve", "--redis-url", f"redis://127.0.0.1:{closed}", "--http-port", "0", "--coap-port", "0"),
        ("keys", "list", "--account", "x", "--redis-url", f"redis://:secret@127.0.0.1:{closed}"),
    )
    one_line_failure(unreachable, "serve", "store", f"redis://127.0.0.1:{closed}", "refused")
    assert "secret" not in one_line_failure(admin, "keys", "refused")


def test_edge_binds_its_ports_before_registering_upstream(tmp_path: Path, tcp_in_use: int) -> None:
    """A failed start sends nothing upstream: no gateway is left registered for a day (issue 17 §1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as upstream:
        upstream.bind(("127.0.0.1", 0))
        server = f"coap://127.0.0.1:{upstream.getsockname()[1]}"
        result = devicehub("edge", "--server", server, "-o", str(tcp_in_use), "-p", str(tmp_path / "pt.sock"))
        one_line_failure(result, "edge", "status API", "already in use")
        not_a_socket = tmp_path / "file"
        not_a_socket.write_text("keep me")
        result = devicehub("edge", "--server", server, "-o", "0", "-p", str(not_a_socket))
        one_line_failure(result, "edge", "not a socket")
        assert not_a_socket.read_text() == "keep me"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as running_edge:  # a live Edge Core's socket
            running_edge.bind(str(tmp_path / "live.sock"))
            running_edge.listen()
            result = devicehub("edge", "--server", server, "-o", "0", "-p", str(tmp_path / "live.sock"))
            one_line_failure(result, "edge", "live.sock", "in use")
            assert (tmp_path / "live.sock").exists()  # neither taken over nor removed on the way out
        result = devicehub("edge", "--server", server, "-o", "0", "-p", str(tmp_path / "missing" / "pt.sock"))
        one_line_failure(result, "edge", "protocol translator API", "no such file")
        upstream.setblocking(False)
        with pytest.raises(BlockingIOError):
            upstream.recvfrom(2048)  # not one Register was sent


def test_simulate_with_nothing_listening_exits_non_zero_and_says_why() -> None:
    server = f"coap://127.0.0.1:{free_udp_port()}"
    result = devicehub("simulate", "--server", server, "--count", "2", "--duration", "1")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"devicehub simulate: no device registered with {server}: no answer"), last


@pytest.mark.parametrize(
    ("server_args", "said"),
    [
        (("--allow-nosec",), "4.03 Forbidden (endpoint not enrolled"),
        # issue 32 #5: the server's reason, not "not enrolled" for every 4.03
        ((), "4.03 Forbidden: DTLS required (use coaps://"),
    ],
    ids=["not-enrolled", "dtls-required"],
)
def test_simulate_counts_refused_registrations(tmp_path: Path, server_args: tuple[str, ...], said: str) -> None:
    """A server without --dev refuses unenrolled endpoints, and plain CoAP without --allow-nosec, with 4.03: counted
    per device and explained by the reason the server gave."""
    service = ServiceProcess(data_dir=tmp_path / "data", dev=False, extra_args=server_args).start()
    try:
        result = devicehub("simulate", "--server", service.coap_uri, "--count", "3", "--duration", "2.5")
    finally:
        service.stop()
    assert result.returncode == 1, result.stderr
    stopped = next(line for line in result.stderr.splitlines() if line.startswith("stopped: "))
    assert "registered 0/3" in stopped
    failures = int(stopped.split("registration failures ")[1].split()[0])
    assert failures >= 3, stopped  # each device was refused at least once
    assert said in result.stderr.strip().splitlines()[-1]
    assert "(3 devices)" in stopped


def test_simulate_that_registered_exits_zero(service: ServiceProcess) -> None:
    result = devicehub("simulate", "--server", service.coap_uri, "--count", "2", "--duration", "1.5")
    assert result.returncode == 0, result.stderr
    assert "registered 2/2" in result.stderr
    assert "registration failures 0" in result.stderr


def test_a_damaged_database_file_is_one_line(tmp_path: Path) -> None:
    """issue 32 #5: a data directory whose SQLite file is not a database stops `serve` in one line, exit 2 (it was a
    35-line traceback and exit 1), and the file is left as it was for the operator to restore."""
    data = tmp_path / "data"
    data.mkdir()
    junk = bytes(range(256)) * 32
    (data / "devicehub.sqlite3").write_bytes(junk)
    result = devicehub("serve", "--data-dir", str(data), "--http-port", "0", "--coap-port", "0", "--coaps-port", "0")
    one_line_failure(result, "serve", "store", "file is not a database")
    assert (data / "devicehub.sqlite3").read_bytes() == junk


def test_simulate_stops_promptly_when_the_server_is_gone(tmp_path: Path) -> None:
    """issue 32 #5: on SIGTERM the simulator de-registers its devices with one send each, so a server that is gone
    cannot hold the exit up for CoAP's retransmission window (it took 84 s)."""
    service = ServiceProcess(data_dir=tmp_path / "data").start()
    simulator = _popen(("simulate", "--server", service.coap_uri, "--count", "3"), None)
    try:
        service.registered_devices(3, within=30)
    finally:
        service.stop(signal.SIGKILL)
    simulator.send_signal(signal.SIGTERM)
    result = _result(simulator, timeout=20)  # well inside the ~93 s a retransmitted De-register would take
    assert result.returncode is not None and result.returncode >= 0, result.stderr
    assert "stopped: " in result.stderr


def _with_open_files(limit: int, hard: int | None = None) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard or limit))

    return apply


def test_simulate_says_when_a_process_cannot_hold_its_devices() -> None:
    """issue 32 #5: each device is one open file; a worker over the limit started what fitted and reported no
    failure. Now the limit is raised as far as allowed, and past that the run is refused in one line, naming
    the --workers that would fit."""
    result = subprocess.run(
        [sys.executable, "-m", "devicehub", "simulate", "--server", "coap://127.0.0.1:5683", "--count", "300"],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=_with_open_files(200),
    )
    one_line_failure(result, "simulate", "300 devices", "limit is 200", "--workers 3")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # a server that never answers
        silent.bind(("127.0.0.1", 0))
        server = f"coap://127.0.0.1:{silent.getsockname()[1]}"
        raised = subprocess.run(
            [sys.executable, "-m", "devicehub", "simulate", "--server", server, "--count", "300", "--duration", "1"],
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=_with_open_files(200, hard=1024),  # the soft limit is raised within the hard one
        )
    assert '"not_started": 0' in raised.stdout and '"devices": 300' in raised.stdout, raised.stderr


def test_simulate_counts_devices_that_could_not_start(service: ServiceProcess) -> None:
    """A device whose socket cannot be opened (here an address this machine does not have) is counted and said."""
    result = devicehub(
        "simulate", "--server", service.coap_uri, "--count", "2", "--duration", "1.5", "--bind", "203.0.113.1"
    )
    assert result.returncode == 1, result.stderr
    assert '"not_started": 2' in result.stdout
    assert "could not start: Cannot assign requested address (2 devices)" in result.stderr.splitlines()[-1]
