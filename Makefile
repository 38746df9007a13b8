# kref: the two commands a new user needs are `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export JAVA_HOME ?= $(shell [ -d /usr/lib/jvm/java-17-openjdk-amd64 ] && echo /usr/lib/jvm/java-17-openjdk-amd64)
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(PY))

.PHONY: setup run test unit tlc tlc-full spec-mutation bench soak clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh kref/records/_cwalker.c kref/spark/_csource.c kref/spark/_csink.c
	bash scripts/setup.sh

# The main job: a local kref cluster on embedded defaults (3 combined KRaft
# nodes, clients on 127.0.0.1:9092-9094, ./kref-cluster); Ctrl-C stops it.
run: setup
	$(VENV)/bin/kref cluster --port 9092

# One broker on 127.0.0.1:9092 with its data in ./kref-data.
.PHONY: run-single
run-single: setup
	$(VENV)/bin/kref broker

# The whole test suite: pytest (unit, storage, real clients, Spark) and TLC.
test: setup
	$(PY) -m pytest -n 2 -q
	$(MAKE) --no-print-directory tlc

unit: setup
	$(PY) -m pytest -n 2 -q

tlc: setup
	$(PY) spec/run_tlc.py

tlc-full: setup
	$(PY) spec/run_tlc.py --full

# Break the specs one rule at a time and count what the default models catch
# (about 15-25 minutes with one TLC worker; docs/spec.md has the table).
spec-mutation: setup
	nice -n 10 $(PY) spec/spec_mutation.py

# Longer seeded fault schedules on three real nodes (docs/faults.md): SOAK_RUNS clean
# runs of SOAK_SECONDS each from SOAK_SEED (random if unset), then one unclean run.
SOAK_RUNS ?= 5
SOAK_SECONDS ?= 60
soak: setup
	$(PY) -m tests.faults.run --runs $(SOAK_RUNS) --seconds $(SOAK_SECONDS) $(if $(SOAK_SEED),--seed $(SOAK_SEED)) --dir $(or $(SOAK_DIR),/tmp/kref-soak)
	$(PY) -m tests.faults.run --mode unclean --seconds 20 $(if $(SOAK_SEED),--seed $(SOAK_SEED)) --dir $(or $(SOAK_DIR),/tmp/kref-soak)

bench: setup
	$(PY) bench/storage.py

clean:
	rm -rf $(VENV) spec/states

# Switch each catalogued bug (kref/mutations.py) into the cores and count what
# catches it: the simulator's invariants, TLC on the seeds' traces (trace
# validation) or the interaction scripts; a table and `caught C of N mutations`.
.PHONY: mutation
mutation: setup
	nice -n 10 $(PY) -m kref.sim.mutation
