# kref: the two commands a new user needs are `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export JAVA_HOME ?= $(shell [ -d /usr/lib/jvm/java-17-openjdk-amd64 ] && echo /usr/lib/jvm/java-17-openjdk-amd64)
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(PY))

.PHONY: setup run test unit tlc tlc-full spec-mutation bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

# The main job: a local kref on embedded defaults (127.0.0.1:9092, ./kref-data).
run: setup
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

bench: setup
	$(PY) bench/storage.py

clean:
	rm -rf $(VENV) spec/states

# Switch each catalogued bug (kref/mutations.py) into the cores and count what
# the simulator catches: a table and `caught C of N mutations` (a few minutes).
.PHONY: mutation
mutation: setup
	nice -n 10 $(PY) -m kref.sim.mutation
