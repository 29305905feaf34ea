"""`.env`: a fresh process reads it, and a variable set in the environment wins over it."""

import json
import os
import subprocess
import sys

from tests.conftest import PROJECT

PRINT_SETTINGS = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps([s.RESEARCH_MAX_AGENTS, s.RESEARCH_MODEL, s.RESEARCH_TOPIC_MAX_CHARS]))"
)


def settings_of_a_process(env_file, **env: str) -> list:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RESEARCH_MAX_AGENTS", "RESEARCH_MODEL", "RESEARCH_TOPIC_MAX_CHARS")
    }
    environment.update(
        DJANGO_SETTINGS_MODULE="research.settings", CANOPY_ENV_FILE=str(env_file), **env
    )
    output = subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS],
        cwd=PROJECT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(output)


def test_the_env_file_fills_in_what_the_environment_leaves_unset(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# a comment\nRESEARCH_MAX_AGENTS=7\nRESEARCH_MODEL='from-the-file'\n"
        "RESEARCH_TOPIC_MAX_CHARS=500\n"
    )
    assert settings_of_a_process(env_file) == [7, "from-the-file", 500]


def test_the_environment_wins_over_the_env_file(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("RESEARCH_MAX_AGENTS=7\nRESEARCH_MODEL=from-the-file\n")
    assert settings_of_a_process(env_file, RESEARCH_MODEL="from-the-environment")[:2] == [
        7,
        "from-the-environment",
    ]


def test_a_bad_value_in_the_env_file_is_named_like_one_in_the_environment(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("RESEARCH_MAX_AGENTS=many\n")
    try:
        settings_of_a_process(env_file)
    except subprocess.CalledProcessError as error:
        assert "RESEARCH_MAX_AGENTS must be an integer, not 'many'" in error.stderr
    else:
        raise AssertionError("a bad RESEARCH_MAX_AGENTS in .env was accepted")
