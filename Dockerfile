# syntax=docker/dockerfile:1
# skald-telegram: build a wheel-installed virtualenv, then run it as a non-root user.

FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY templates ./templates
RUN /opt/venv/bin/pip install --no-cache-dir '.[mcp,postgresql]'

FROM python:3.11.11-slim-bookworm
RUN useradd --create-home --uid 10001 skald \
    && mkdir -p /state /config \
    && chown skald:skald /state \
    && chmod 0700 /state
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SKALD_TELEGRAM_CONFIG=/config/skald-telegram.toml \
    SKALD_TELEGRAM_STATE_DIR=/state
USER skald
WORKDIR /home/skald
VOLUME ["/state"]
# The bot rewrites a status file every 30 s while it runs; stale or missing means unhealthy.
HEALTHCHECK --interval=60s --timeout=10s --start-period=60s --retries=3 \
    CMD ["skald-telegram", "health"]
CMD ["skald-telegram", "run"]
