# The shortterm sidecar as a container image: `shortterm serve` on 0.0.0.0:8765 as a non-root
# user, with the sidecar, postgres and redis extras. Off loopback the sidecar refuses to start
# without SHORTTERM_TOKEN, so give it one (and the store and cache, or it uses SQLite in
# /var/lib/shortterm):
#
#   docker build -t shortterm-sidecar .
#   docker run --rm -p 127.0.0.1:8765:8765 -e SHORTTERM_TOKEN=... \
#       -e SHORTTERM_STORE=postgresql://... -e SHORTTERM_CACHE=redis://... shortterm-sidecar
#
# docker-compose.yml runs two replicas of it behind HAProxy (`--profile sidecar`).
#
# No image is built by this repository's tests (the machines they run on have no Docker
# engine). Instead tests/deploy/test_dockerfile.py reads this file and runs its steps in a
# fresh virtualenv: every RUN (except the user creation, which it checks instead), then CMD,
# then the HEALTHCHECK command against it, with the image's paths mapped into a temporary
# directory. Keep each step a plain shell command that works there too.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
# A virtualenv of its own: the image's system Python stays as shipped.
RUN python -m venv /opt/shortterm && \
    /opt/shortterm/bin/python -m pip install --quiet '.[sidecar,postgres,redis]'

RUN useradd --system --uid 10001 --home-dir /var/lib/shortterm --create-home shortterm
USER shortterm
WORKDIR /var/lib/shortterm

ENV PATH=/opt/shortterm/bin:$PATH \
    SHORTTERM_HOST=0.0.0.0 \
    SHORTTERM_PORT=8765
EXPOSE 8765

# Liveness only: the process answers. Readiness (the store and the cache answer) is /readyz,
# for the load balancer (deploy/haproxy.cfg) or the orchestrator's readiness probe.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['SHORTTERM_PORT'] + '/healthz', timeout=2)"]

CMD ["shortterm", "serve"]
