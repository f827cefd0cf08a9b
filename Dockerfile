# phasegate worker image: docker-compose.yml's `worker`, and docker-compose.sealed.yml's
# `verify` and `mcp`. Installed exactly as a user installs it: `pip install .` builds a
# wheel with the shipped library as package data, and the source tree is removed before
# the image checks itself, so nothing at run time reads it. What the image holds, how to
# add your project's test dependencies, and the uids: docs/docker.md.
#
# Debian bookworm, pinned, so `git` is the version the checks were tested with (2.39).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# What the shipped gates' verify checks run: git for `git_changed` (and the base commit a
# session records at start), pytest for test_generation_v3's test check
# (`python3 -m pytest`). Your project's own test dependencies go in EXTRA_APT_PACKAGES and
# EXTRA_PIP_PACKAGES (docker-compose.yml passes PHASEGATE_EXTRA_APT, PHASEGATE_EXTRA_PIP).
ARG EXTRA_APT_PACKAGES=""
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates $EXTRA_APT_PACKAGES \
    && rm -rf /var/lib/apt/lists/*

# uid 10001 runs the worker by default; docker-compose.yml's `user:` runs it as your uid
# instead (PHASEGATE_UID), so that it writes a bind-mounted workspace as its owner and git
# trusts the repository. uid 10002 runs the sealed deployment's verify checks on a
# workspace another uid owns; git refuses such repositories ("dubious ownership") unless
# told otherwise, so that user alone trusts every repository (safe.directory, in a
# root-owned ~/.gitconfig). The checks it runs are the workspace's own code anyway.
# /data (PHASEGATE_HOME) is writable by whichever uid runs the worker.
RUN useradd --create-home --uid 10001 phasegate \
    && useradd --create-home --uid 10002 phasegate-verify \
    && git config --file /home/phasegate-verify/.gitconfig --add safe.directory '*' \
    && mkdir -p /data && chown phasegate:phasegate /data && chmod 1777 /data

WORKDIR /src

# Dependencies first, so code edits do not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); print('\n'.join(d['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt "pytest>=8"

ARG EXTRA_PIP_PACKAGES=""
RUN if [ -n "$EXTRA_PIP_PACKAGES" ]; then pip install $EXTRA_PIP_PACKAGES; fi

COPY . .
# phasegate-image-check (deploy/image-check.sh) fails the build when git, pytest or a
# shipped workflow is missing from the installed package.
RUN pip install . \
    && install -m 0755 deploy/image-check.sh /usr/local/bin/phasegate-image-check \
    && cd / && rm -rf /src \
    && phasegate-image-check

WORKDIR /data
USER phasegate
CMD ["phasegate", "worker"]
