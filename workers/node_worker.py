"""Celery entry point of a GPU node's worker: `celery -A workers.node_worker worker -Q node.<name>`.

Its tasks run benchmark ranks and touch no database, so Django is never imported.
"""

from workers import node_tasks  # noqa: F401  (registers the tasks)
from workers.celery_app import app

__all__ = ["app"]
