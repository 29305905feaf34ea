"""Input and output serializers: shapes and field checks, no business logic. One package for
every edge that writes JSON: the REST API's runs, plans and events (`runs`), the knowledge
base (`datasets`), and the research export (`exports`)."""

from research.serializers.clarify import *  # noqa: F403
from research.serializers.datasets import *  # noqa: F403
from research.serializers.exports import *  # noqa: F403
from research.serializers.resume import *  # noqa: F403
from research.serializers.runs import *  # noqa: F403
