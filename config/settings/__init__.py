"""Settings, assembled from one module per concern."""

from .api import *  # noqa: F403
from .base import *  # noqa: F403
from .database import *  # noqa: F403
from .mail import *  # noqa: F403
from .oauth import *  # noqa: F403
from .operations import *  # noqa: F403
from .plugins import *  # noqa: F403
from .queue import *  # noqa: F403
from .search import *  # noqa: F403
from .summaries import *  # noqa: F403
from .webhooks import *  # noqa: F403
