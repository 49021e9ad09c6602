# Production image: one image, three roles (web, worker, beat), chosen by the command.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OAKEN_DATA_DIR=/data \
    OAKEN_PLUGIN_ENV=/app/.plugins \
    OAKEN_BIND=0.0.0.0 \
    OAKEN_PORT=8000

WORKDIR /app
# the plugin sandbox (docs/plugins.md): bubblewrap and libseccomp; util-linux (setpriv, prlimit) is in the base
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap libseccomp2 \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 oaken && mkdir -p /data && chown oaken /data

COPY pyproject.toml README.md ./
COPY config ./config
COPY apps ./apps
COPY templates ./templates
COPY static ./static
COPY manage.py ./
RUN pip install --no-cache-dir .
# plugins live in an environment of their own, never in Oaken's (their code runs only in the sandbox)
COPY plugins ./plugins
RUN python -m venv /app/.plugins \
    && /app/.plugins/bin/pip install --no-cache-dir ./plugins/oaken-plugin ./plugins/oaken-calendar

USER oaken
EXPOSE 8000
# web: migrations run once, from the web role, before it serves
CMD ["sh", "-c", "oaken migrate --noinput && exec gunicorn config.wsgi:application --bind ${OAKEN_BIND}:${OAKEN_PORT} --workers ${OAKEN_WEB_WORKERS:-4} --worker-class gthread --threads 4 --access-logfile -"]
