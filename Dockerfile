# phasegate worker image. Built by docker-compose.yml (service `worker`).
# Installed exactly as a user installs it: `pip install .` builds a wheel with the
# shipped library as package data, so nothing at run time reads the source tree.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src

# Dependencies first, so code edits do not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); print('\n'.join(d['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY . .
RUN pip install . && cd / && rm -rf /src \
    && python -c "import phasegate, os; assert os.path.isdir(phasegate.SHIPPED_LIBRARY)" \
    && useradd --create-home --uid 10001 phasegate \
    && mkdir -p /data && chown phasegate /data

WORKDIR /data
USER phasegate
CMD ["phasegate", "worker"]
