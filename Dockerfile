# phasegate worker image. Built by docker-compose.yml (service `worker`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so code edits do not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); print('\n'.join(d['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# The repository: packages, worker.py and the shipped library/ (found next to
# the code, so it must stay in /app).
COPY . .
RUN pip install . && useradd --create-home --uid 10001 phasegate \
    && mkdir -p /data && chown phasegate /data

USER phasegate
CMD ["python", "worker.py"]
