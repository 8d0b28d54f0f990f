"""The stall and stop-drain keys: defaults on, bad values named."""

from __future__ import annotations

import pytest

from t3orch.config import ConfigError, parse_config


def test_the_stall_timeout_and_the_drain_are_on_by_default() -> None:
    d = parse_config({}).daemon
    assert (d.stall_warning_s, d.stall_timeout_s, d.stop_drain_s) == (60.0, 600.0, 30.0)


def test_zero_turns_the_stall_timeout_and_the_drain_off() -> None:
    d = parse_config({"daemon": {"stall_timeout_s": 0, "stop_drain_s": 0}}).daemon
    assert (d.stall_timeout_s, d.stop_drain_s) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("daemon", "message"),
    [
        ({"stop_drain_s": -1}, "daemon.stop_drain_s: must be 0 (off) or positive, got -1"),
        ({"stall_timeout_s": -5}, "daemon.stall_timeout_s: must be 0 (off) or positive"),
        ({"stall_warning_s": 0}, "daemon.stall_warning_s: must be positive, got 0"),
        ({"stall_timeout_s": 30}, "daemon.stall_timeout_s: 30.0 is below daemon.stall_warning_s"),
        ({"stop_drain_s": "30"}, "daemon.stop_drain_s: expected a number"),
    ],
)
def test_bad_values_name_the_key(daemon: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"daemon": daemon})
    assert message in str(info.value)


def test_codex_threads_per_process_defaults_to_16_and_is_named_when_bad() -> None:
    assert parse_config({}).providers.codex.max_threads_per_process == 16
    codex = {"max_threads_per_process": 1}
    assert (
        parse_config({"providers": {"codex": codex}}).providers.codex.max_threads_per_process == 1
    )
    for bad, message in (
        (0, "providers.codex.max_threads_per_process: must be at least 1, got 0"),
        ("4", "providers.codex.max_threads_per_process: expected an integer"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_config({"providers": {"codex": {"max_threads_per_process": bad}}})
        assert message in str(info.value)
