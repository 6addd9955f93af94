"""Settings: flag beats DEVICEHUB_* environment variable beats field default (style rule 8)."""

from pathlib import Path

import pytest

from devicehub.config import EdgeSettings, ServeSettings
from devicehub.settings_flags import parse


def test_flag_wins_over_environment() -> None:
    s = parse(ServeSettings, ["--http-port", "9001"], {"DEVICEHUB_HTTP_PORT": "9002"})
    assert s.http_port == 9001


def test_environment_wins_over_default() -> None:
    s = parse(ServeSettings, [], {"DEVICEHUB_HTTP_PORT": "9002", "DEVICEHUB_DATA_DIR": "/tmp/x", "DEVICEHUB_DEV": "1"})
    assert (s.http_port, s.data_dir, s.dev) == (9002, Path("/tmp/x"), True)


def test_defaults_match_the_architecture() -> None:
    s = parse(ServeSettings, [], {})
    assert (s.http_port, s.coap_port, s.flush_interval_ms) == (8000, 5683, 100)
    e = parse(EdgeSettings, [], {})
    assert (e.http_port, e.bind, e.keepalive_time, e.keepalive_interval) == (8080, "127.0.0.1", 600.0, 75.0)


def test_edge_short_flags() -> None:
    e = parse(EdgeSettings, ["-o", "9101", "-b", "0.0.0.0"], {})
    assert (e.http_port, e.bind) == (9101, "0.0.0.0")


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="DEVICEHUB_HTTP_PORT"):
        parse(ServeSettings, [], {"DEVICEHUB_HTTP_PORT": "eighty"})
    with pytest.raises(ValueError, match="DEVICEHUB_DEV"):
        parse(ServeSettings, [], {"DEVICEHUB_DEV": "maybe"})


@pytest.mark.parametrize("value", ["0", "60001", "-5"])
def test_a_flush_interval_out_of_range_is_refused_naming_the_flag(value: str) -> None:
    with pytest.raises(ValueError, match="--flush-interval-ms must be between 1 and 60000"):
        parse(ServeSettings, ["--flush-interval-ms", value], {})
