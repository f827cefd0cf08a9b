#!/bin/sh
# phasegate-image-check: what a phasegate worker needs at run time, checked where it runs.
# The Dockerfile runs it after `pip install .` (and after the source tree is removed), so
# a build without git, pytest or the shipped library fails instead of the first session.
# To look at a running deployment: docker compose run --rm worker phasegate-image-check
set -eu

fail() {
    echo "phasegate-image-check: $*" >&2
    exit 1
}

command -v git >/dev/null 2>&1 ||
    fail "git is not installed: git_changed checks cannot run (apt-get install git)"
python3 -m pytest --version >/dev/null 2>&1 ||
    fail "pytest is not installed for python3: test_generation_v3's test check runs" \
        "\`python3 -m pytest\` (pip install pytest)"
command -v phasegate >/dev/null 2>&1 ||
    fail "the phasegate command is not on PATH (pip install .)"
listed=$(phasegate library list) || fail "\`phasegate library list\` failed"
for wf in spec_execution_v1 test_generation_v3 production_code_v2; do
    echo "$listed" | grep -q "^$wf " ||
        fail "the shipped workflow $wf is not in the installed package: is library/ in" \
            "the wheel (pyproject.toml package-data) and in the build context (.dockerignore)?"
done
echo "phasegate-image-check: git, pytest and the shipped library are installed"
