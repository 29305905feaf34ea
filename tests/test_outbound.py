"""research.outbound: one client per purpose per process, whatever the threads."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from research import outbound
from research.outbound.sdk import openai_http_client


@pytest.mark.parametrize("purpose", ["pages", "callbacks", "search"])
def test_threads_share_one_client_per_purpose(purpose):
    with ThreadPoolExecutor(8) as pool:
        clients = list(pool.map(lambda _: outbound.client(purpose), range(32)))

    assert len({id(client) for client in clients}) == 1
    assert clients[0] is outbound.client(purpose)


def test_the_model_and_the_openai_search_provider_have_a_client_each():
    assert openai_http_client("llm") is openai_http_client("llm")
    assert openai_http_client("llm") is not openai_http_client("search")


def test_a_purpose_it_does_not_know_is_refused():
    with pytest.raises(ValueError, match="no outbound purpose 'ftp'"):
        outbound.client("ftp")


def test_a_changed_allowed_list_builds_the_guarded_clients_anew(settings):
    before = outbound.client("pages")
    settings.READ_PAGE_ALLOWED_HOSTS = ["intranet.example:8080"]

    assert outbound.client("pages") is not before
