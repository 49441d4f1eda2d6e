# Two images from one Dockerfile, two targets:
#   node     the collector and the node worker on GPU nodes: requirements-node.txt
#            only (no Django), and only collectors/, workers/ and gpulse/.
#   control  web, ingest and the control worker: the node image plus
#            requirements.txt and the whole app (the default target).
#
# TORCH_VARIANT chooses the torch==2.13.0 build (requirements-node.txt pins the version):
#   cpu    (default) control-host images: nothing there runs CUDA, and the CPU wheel
#          is a fraction of the size.
#   cu128  (or another CUDA variant the node's driver supports) GPU-node images:
#          the node worker runs NCCL all-reduce ranks on the GPUs.
#   docker build --target node --build-arg TORCH_VARIANT=cu128 -t gpulse:node .
#   docker build --target control -t gpulse:control .

# Plotly.js for the control image's charts, built as `make plotly-js` builds it: npm ci
# installs the exact versions of vendor/plotly/package-lock.json and checks each one's
# sha512, build.js bundles the trace types the pages draw.
FROM node:20-slim AS plotly-js
WORKDIR /plotly
COPY vendor/plotly/package.json vendor/plotly/package-lock.json vendor/plotly/index.js vendor/plotly/build.js ./
RUN npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && node build.js

# uPlot for the node and usage pages' charts, as `make uplot-js` builds it.
FROM node:20-slim AS uplot-js
WORKDIR /uplot
COPY vendor/uplot/package.json vendor/uplot/package-lock.json vendor/uplot/index.js vendor/uplot/build.js ./
RUN npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && node build.js


FROM python:3.11-slim AS node

ARG TORCH_VARIANT=cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so a code change does not reinstall them. The extra index
# offers torch 2.13.0+<variant>, which pip prefers to PyPI's 2.13.0 of the same pin.
COPY requirements-node.txt .
RUN pip install --extra-index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" -r requirements-node.txt \
    && groupadd --system --gid 10001 gpulse \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/gpulse --shell /usr/sbin/nologin gpulse

# The code stays owned by root, read-only to the app.
COPY collectors collectors
COPY workers workers
COPY gpulse gpulse

# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001

CMD ["python", "-m", "collectors", "--source", "nvml"]


FROM node AS control

ARG TORCH_VARIANT=cpu
USER root
ENV DJANGO_SETTINGS_MODULE=dashboard.settings

COPY requirements.txt .
RUN pip install --extra-index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" -r requirements.txt

COPY . .
COPY --from=plotly-js /plotly/dist vendor/plotly/dist
COPY --from=uplot-js /uplot/dist vendor/uplot/dist
# Static files are collected into the image.
RUN python manage.py collectstatic --noinput --verbosity 0
# docker-compose.yml's redis-acl service writes Redis's users file here, as this user:
# a new named volume mounted on it takes the folder's owner.
RUN install -d -m 0755 -o 10001 -g 10001 /var/lib/gpulse-acl

USER 10001:10001
EXPOSE 8000

# The web service's check; docker-compose.yml gives every other service its own.
# The Host header must be one ALLOWED_HOSTS accepts.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD python -c "import os, urllib.request as u; h = os.environ.get('ALLOWED_HOSTS', 'localhost').split(',')[0].strip().lstrip('.').replace('*', 'localhost'); u.urlopen(u.Request('http://127.0.0.1:8000/healthz', headers={'Host': h}), timeout=5)"

# A shell, to read GPULSE_FORWARDED_ALLOW_IPS: the proxies whose X-Forwarded-For uvicorn trusts.
CMD ["sh", "-c", "exec uvicorn dashboard.asgi:application --host 0.0.0.0 --port 8000 --lifespan off --ws-per-message-deflate false --forwarded-allow-ips \"${GPULSE_FORWARDED_ALLOW_IPS:-127.0.0.1,::1}\""]
