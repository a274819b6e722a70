# Entry points. `make test` is the one test command; `make demo` the main job.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
VENV ?= .venv

.PHONY: help test unit lint tools venv cluster-up cluster-down cluster-status node-up node-down node-status e2e demo clean

help:
	@echo "make demo          - summarize sample agent sessions end to end (local control plane + Chroma)"
	@echo "make test          - install what is needed, then lint, type-check and run every test tier"
	@echo "make unit          - unit tests only (no servers)"
	@echo "make cluster-up    - start a local etcd + kube-apiserver; prints the exports (KUBECONFIG; PATH with kubectl, summaryctl)"
	@echo "make cluster-down  - stop it"
	@echo "make node-up       - a local single-node cluster (containerd, kubelet, ...; root); prints the KUBECONFIG"
	@echo "make node-down     - stop it and undo its host changes"
	@echo "make e2e           - end to end: the image in real Pods (kind with Docker, else the local node)"

test:
	bash hack/test.sh

venv: $(VENV)/.installed

$(VENV)/.installed: hack/install-python.sh pyproject.toml requirements.lock $(wildcard requirements/*.lock)
	VENV=$(VENV) bash hack/install-python.sh

tools:
	bash hack/install-tools.sh

unit: venv
	$(VENV)/bin/python -m pytest tests/unit

lint: venv
	$(VENV)/bin/ruff check controller devenv tests bench
	$(VENV)/bin/ruff format --check controller devenv tests bench
	$(VENV)/bin/mypy

cluster-up: venv tools
	$(VENV)/bin/python -m devenv.controlplane up

cluster-down:
	$(VENV)/bin/python -m devenv.controlplane down

cluster-status:
	$(VENV)/bin/python -m devenv.controlplane status

node-up: venv tools
	bash hack/install-node.sh >/dev/null
	$(VENV)/bin/python -m devenv.node up

node-down:
	$(VENV)/bin/python -m devenv.node down

node-status:
	$(VENV)/bin/python -m devenv.node status

e2e: venv tools
	bash hack/e2e.sh

demo: venv tools
	$(VENV)/bin/python -m devenv.demo

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
