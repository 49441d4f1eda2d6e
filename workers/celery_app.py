"""The Celery application of a GPU node's worker (workers/node_worker.py).

It imports nothing from Django: node workers run tasks that touch no
database. Its settings, queue names and key spaces are the contract it shares
with the control host's app (gpulse/celery_contract.py); the worker moves to
its node's own key space before it connects.
"""

from celery import Celery

from gpulse.celery_contract import celery_settings
from gpulse.redis_url import redis_url_from_environment

app = Celery("gpulse", broker=redis_url_from_environment())  # REDIS_URL or $GPULSE_REDIS_URL_FILE
app.conf.update(**celery_settings())
