# torchrun lab. `make help` lists the targets; each installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
.DEFAULT_GOAL := help
.PHONY: help venv host-deps lab-up lab-down lab-status exercise chaos lint test test-fast bench wheels wheels-cuda images soak test-cuda-image mutation golden
NAME ?= kill-worker

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

$(BIN)/lab: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/lab ## create the project's virtual environment in .venv

host-deps: ## install the host tools (iproute2, iptables, prometheus, etcd, docker) when root
	@scripts/host-deps.sh

# In containers when a Docker daemon answers (building the images first), else on netns hosts.
lab-up: venv host-deps ## start the lab: a 2-node x 2-process DDP job, then the result table
	@if docker info >/dev/null 2>&1; then \
		TARGETS=cpu scripts/build-images.sh && $(BIN)/lab up --runtime docker; \
	else \
		echo "no Docker daemon answers: the lab runs on this machine's own hosts"; $(BIN)/lab up; \
	fi

lab-down: venv ## stop and remove everything the lab started
	$(BIN)/lab down

lab-status: venv ## show the lab's nodes
	@$(BIN)/lab status || [ $$? -eq 3 ]

exercise: venv host-deps ## run a fault-injection drill: make exercise NAME=kill-worker (see lab exercise list)
	$(BIN)/lab exercise run $(NAME)

chaos: venv host-deps ## a long chaos campaign: 100 faults at random (mean 15 s apart) beside 2 busy processes; the ledger (docs/chaos.md)
	$(BIN)/lab chaos --count 100 --mtbf 15s --load 2 --seed $${SEED:-1}

wheels: venv ## download every wheel the node image needs into docker/wheels/ (for OFFLINE=1 builds)
	$(BIN)/pip wheel --quiet --wheel-dir docker/wheels torch==2.13.0 -r docker/requirements-node.txt -r docker/requirements-ray.txt

wheels-cuda: venv ## download the cuda image's wheels (torch 2.14.1's CUDA build, about 3 GB) into docker/wheels-cuda/
	$(BIN)/pip wheel --quiet --wheel-dir docker/wheels-cuda torch==2.14.1 -r docker/requirements-node.txt

images: venv ## build the images: TARGETS="cpu cuda" (default; also ray), BASE_IMAGE=..., OFFLINE=1, REGISTRY=HOST:PORT [PUSH=1]
	REGISTRY="$(REGISTRY)" PUSH="$(PUSH)" scripts/build-images.sh

mutation: venv ## mutation-test the code that decides (pyproject's [tool.mutmut]) against the unit tests; scores in docs/mutation.md
	$(BIN)/pip install --quiet 'mutmut==3.8.1'
	rm -rf mutants
	$(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

golden: ## rewrite the Kubernetes golden renderings (tests/golden/k8s/) after an intended change: read the diff
	@for overlay in k8s/overlays/*/; do name=$$(basename $$overlay); \
	  kubectl kustomize $$overlay > tests/golden/k8s/$$name.yaml && echo "rewrote tests/golden/k8s/$$name.yaml"; done

lint: venv ## ruff (lint and format) and mypy, as configured in pyproject.toml
	$(BIN)/ruff check lab tests
	$(BIN)/ruff format --check lab tests
	$(BIN)/mypy

# Both tiers run three tests at a time on the two cores: much of a test is waiting (a timeout
# to fire, a container, a paced step), and a third test fills it. Measured side by side: the
# fast tier (units on recorded runs, goldens, the CLI's refusals) 53-55 s against 60-61 s at
# two, the system tier (real jobs, containers, Ray) 16 min against 18. Four at a time gained
# nothing (18 min 19 s, every test slower: the two cores are full) and a Ray machine under test
# then failed to join its cluster in 120 s. Each system test's lab
# is its own (run dir, hosts, subnet), its leak checks count only that lab's, and tests that
# share a fixed resource (loopback ports, the test Ray cluster) share an xdist group. A test that
# counts what is left on the whole machine (marked alone) runs last, with nothing beside it.
# The images build beside the system tier's first tests (scripts/with-images-building.sh).
FAST := -m "not slow and not docker"
SYSTEM := -m "(slow or docker) and not alone"
test: venv host-deps lint ## the whole test suite (what CI runs)
	$(BIN)/pytest -q -n 3 --dist worksteal $(FAST)
	scripts/with-images-building.sh $(BIN)/pytest -q -n 3 --dist loadgroup $(SYSTEM) --durations=40
	$(BIN)/pytest -q -m alone

test-cuda-image: venv host-deps ## build the cuda image (about 3 GB of wheels, minutes) and check what it carries; not in make test
	LAB_BUILD_CUDA_IMAGE=1 $(BIN)/pytest -q tests/test_docker_images.py -k cuda_image

test-fast: venv lint ## the quick inner loop: no multi-process jobs, no containers
	$(BIN)/pytest -q -n 3 --dist worksteal $(FAST)

soak: venv host-deps ## 20 kill-worker + 5 kill-node drills on netns hosts, 5 kill-node in containers; count leaks (about 25 min)
	@if docker info >/dev/null 2>&1; then TARGETS=cpu scripts/build-images.sh; fi
	$(BIN)/python -m lab.soak --cycles kill-worker=20 kill-node=5 docker:kill-node=5 --json docs/bench/soak.json --markdown docs/reliability.md

BENCH_OUT := docs/bench
bench: venv host-deps ## measure everything (about three hours: three 100-fault campaigns) and write docs/benchmarks.md
	$(BIN)/lab bench collectives --out $(BENCH_OUT)
	$(BIN)/lab bench recovery --worlds 4,8,16 --out $(BENCH_OUT) $$(docker info >/dev/null 2>&1 && echo --runtimes local,docker)
	$(BIN)/lab bench recovery --styles tuned,in-process --hosts netns --load 2 --out $(BENCH_OUT)
	$(BIN)/lab bench startup --out $(BENCH_OUT)
	$(BIN)/lab bench startup --load 2 --out $(BENCH_OUT)
	$(BIN)/lab bench chaos --out $(BENCH_OUT)
	$(BIN)/lab bench chaos --runtime docker --out $(BENCH_OUT)
	$(BIN)/lab bench chaos --target plain-train --mtbf 10s --out $(BENCH_OUT)
	$(BIN)/lab bench goodput --out $(BENCH_OUT) --chaos-json $(BENCH_OUT)/chaos.json
	$(BIN)/lab bench detection --out $(BENCH_OUT)
	$(BIN)/lab bench diagnosis --hosts netns --out $(BENCH_OUT)
	$(BIN)/lab bench natural --out $(BENCH_OUT)
	$(BIN)/lab bench stragglers --hosts netns --out $(BENCH_OUT)
	$(BIN)/lab bench coordinators --out $(BENCH_OUT) $$(docker info >/dev/null 2>&1 && echo --runtimes local,docker,ray)
	$(BIN)/lab bench scale --out $(BENCH_OUT)
	$(BIN)/lab bench overhead --out $(BENCH_OUT)
	$(BIN)/lab bench doctor --bound 90 --out $(BENCH_OUT)
	if docker info >/dev/null 2>&1; then $(BIN)/lab bench doctor --runtime docker --bound 90 --out $(BENCH_OUT); fi
	$(BIN)/lab bench docs --out $(BENCH_OUT) --output docs/benchmarks.md
