"""Starting a research (research/services/start.py): every edge counts its starts against
THROTTLE_RESEARCH_START through the one service, and says a refusal in its own words."""

import io

import pytest
import redis
from django.conf import settings as django_settings
from django.core.management import call_command

from research import services
from research.errors import Throttled
from research.models import Run

pytestmark = pytest.mark.django_db

STORY = "# Otters\n\nThey came back in 2019."


@pytest.fixture(autouse=True)
def one_start_a_minute(settings):
    """Counters of earlier tests (whose users had the same ids) are forgotten."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    for key in client.scan_iter(match="canopy:*throttle_*"):
        client.delete(key)
    client.close()
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "research_start": "1/minute"}


def done(run: Run) -> Run:
    services.run_finish(run_id=run.pk, report=STORY)
    run.refresh_from_db()
    return run


def test_a_start_over_the_rate_is_refused_before_anything_is_stored(alice):
    services.run_start(owner=alice, topic="owls")

    with pytest.raises(Throttled) as refused:
        services.run_start(owner=alice, topic="more owls")

    assert 0 < refused.value.wait <= 60
    assert refused.value.message == (
        f"Request was throttled. Expected available in {refused.value.wait} seconds."
    )
    assert list(Run.objects.values_list("topic", flat=True)) == ["owls"]


def test_a_start_the_domain_refuses_still_counts_as_the_apis_throttle_counted_it(api):
    refused = api.post("/v1/gb/research", {"topic": "owls", "model": "no-such"}, format="json")
    assert refused.status_code == 400 and "unknown model" in refused.json()["model"][0]

    response = api.post("/v1/gb/research", {"topic": "owls"}, format="json")

    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert not Run.objects.exists()


def test_the_operators_command_line_is_not_bound_by_the_rate(alice):
    for topic in ("owls", "more owls"):
        call_command(
            "research", "start", topic, "--no-wait", "--user", "alice", stdout=io.StringIO()
        )

    assert Run.objects.filter(owner=alice).count() == 2


def test_a_follow_up_over_the_rate_is_a_429_that_keeps_the_question(client, alice):
    earlier = done(services.run_start(owner=alice, topic="Otters?"))
    client.force_login(alice)

    response = client.post(f"/runs/{earlier.pk}/follow-up", {"question": "What do they eat?"})

    page = response.content.decode()
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert "Too many researches started: try again in" in page
    assert "What do they eat?" in page
    assert Run.objects.count() == 1


def test_running_a_research_again_counts_against_the_same_rate(client, alice):
    earlier = done(services.run_start(owner=alice, topic="Otters?"))
    client.force_login(alice)

    response = client.post(f"/runs/{earlier.pk}/again", follow=True)

    assert "Too many researches started: try again in" in response.content.decode()
    assert Run.objects.count() == 1
