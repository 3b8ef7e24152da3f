#!/usr/bin/env bash
# Set up leanlm on a fresh machine: a virtual environment in .venv with the package and its pinned
# dependencies (torch through constraints.txt), and, when missing, pdflatex (Debian TeX Live) for
# tables.pdf. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${LEANLM_EXTRAS:-dev,dvc,lmeval}

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi

# Reinstall only when pyproject.toml / constraints.txt / the extras changed since the last install.
stamp="$VENV/.leanlm-installed"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)-$EXTRAS
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing leanlm[$EXTRAS] (torch pinned by constraints.txt)"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip 2>/dev/null || true
    "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[$EXTRAS]"
    echo "$want" > "$stamp"
fi

# pdflatex for paper_tables/<profile>/tables.pdf (booktabs is in texlive-latex-recommended); Chromium and its
# driver for the browser test of paper_tables/<profile>/report.html (tests/test_report_page.py) and
# `leanlm report-page --screenshot`.
if ! command -v pdflatex >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
        echo "setup: installing TeX Live (pdflatex, booktabs), chromium and chromium-driver with apt-get"
        if $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            texlive-latex-base texlive-latex-recommended texlive-fonts-recommended chromium chromium-driver >/dev/null; then
            :
        else
            echo "setup: could not install TeX Live or Chromium; tables.pdf is skipped without pdflatex (the .tex files are still built), the browser test without Chromium" >&2
        fi
    else
        echo "setup: no apt-get; install TeX Live (pdflatex) for tables.pdf and chromium + chromedriver for the browser test" >&2
    fi
fi
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
