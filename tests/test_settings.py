"""Settings read from the environment: bad values are refused by name, the key file is private."""

import os
import stat
import subprocess
import sys
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from research import settings as canopy_settings
from research.settings import envdecimal
from tests.conftest import PROJECT


def test_envdecimal_reads_money_exactly_and_refuses_words(monkeypatch):
    monkeypatch.setenv("SOME_CAP_USD", "0.10")
    assert envdecimal("SOME_CAP_USD", "0") == Decimal("0.10")
    monkeypatch.setenv("SOME_CAP_USD", "")
    assert envdecimal("SOME_CAP_USD", "2.5") == Decimal("2.5")
    for bad in ("abc", "NaN", "Infinity"):
        monkeypatch.setenv("SOME_CAP_USD", bad)
        with pytest.raises(ImproperlyConfigured, match=f"SOME_CAP_USD must be .*{bad!r}"):
            envdecimal("SOME_CAP_USD", "0")


def test_a_bad_tree_cost_cap_stops_the_start_naming_the_variable():
    result = subprocess.run(
        [sys.executable, "-c", "import research.settings"],
        cwd=PROJECT,
        env={**os.environ, "RESEARCH_TREE_COST_CAP_USD": "abc"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: RESEARCH_TREE_COST_CAP_USD must be a number, not 'abc'"
        in result.stderr
    )


def test_the_generated_secret_key_is_private_and_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setattr(canopy_settings, "BASE_DIR", tmp_path)
    old_umask = os.umask(0o022)  # a usual umask: files are world-readable unless made private
    try:
        key = canopy_settings._secret_key()
    finally:
        os.umask(old_umask)

    path = tmp_path / ".secret_key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) > 40
    assert canopy_settings._secret_key() == key  # read back, not generated again
    assert [p.name for p in tmp_path.iterdir()] == [".secret_key"]  # no temporary left


def test_a_second_writer_keeps_the_first_key(tmp_path):
    path = tmp_path / ".secret_key"

    canopy_settings._write_private(path, "first")
    canopy_settings._write_private(path, "second")

    assert path.read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == [".secret_key"]


@pytest.mark.parametrize(
    ("layer", "backend"),
    [
        ("", "channels_redis.pubsub.RedisPubSubChannelLayer"),
        ("lists", "channels_redis.core.RedisChannelLayer"),
    ],
)
def test_the_redis_channel_layer_is_pub_sub_unless_told_lists(layer, backend):
    result = _settings_of({"REDIS_URL": "redis://127.0.0.1:6379/9", "REDIS_CHANNEL_LAYER": layer})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == backend


def test_a_redis_channel_layer_of_another_name_stops_the_start_naming_the_variable():
    result = _settings_of({"REDIS_URL": "redis://127.0.0.1:6379/9", "REDIS_CHANNEL_LAYER": "zset"})
    assert result.returncode != 0
    assert "REDIS_CHANNEL_LAYER must be pubsub or lists, not 'zset'" in result.stderr


def test_a_writer_linger_out_of_range_stops_the_start_naming_the_variable():
    result = _settings_of({"RESEARCH_WRITER_LINGER_MS": "-1"})
    assert result.returncode != 0
    assert "RESEARCH_WRITER_LINGER_MS must be from 0 to 1000, not -1.0" in result.stderr


def _settings_of(variables: dict[str, str]) -> subprocess.CompletedProcess:
    code = "import research.settings as s; print(s.CHANNEL_LAYERS['default']['BACKEND'])"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT,
        env={**os.environ, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )
