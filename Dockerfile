# Production image: one image, three roles (web, worker, beat), chosen by the command.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OAKEN_DATA_DIR=/data \
    OAKEN_BIND=0.0.0.0 \
    OAKEN_PORT=8000

WORKDIR /app
RUN useradd --create-home --uid 10001 oaken && mkdir -p /data && chown oaken /data

COPY pyproject.toml README.md ./
COPY config ./config
COPY apps ./apps
COPY templates ./templates
COPY static ./static
COPY manage.py ./
RUN pip install --no-cache-dir .

USER oaken
EXPOSE 8000
# web: migrations run once, from the web role, before it serves
CMD ["sh", "-c", "oaken migrate --noinput && exec gunicorn config.wsgi:application --bind ${OAKEN_BIND}:${OAKEN_PORT} --workers ${OAKEN_WEB_WORKERS:-4} --worker-class gthread --threads 4 --access-logfile -"]
