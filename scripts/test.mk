# The tests as tasks, and what each needs. scripts/test.sh runs them with make -j4 -k:
#   bash scripts/test.sh        the README's test command: the tasks of `all`
#   bash scripts/test.sh ci     what CI adds after it (.ci/run): the tasks of `ci`
# Each task is one pytest run (or the site build) through scripts/task.sh, which keeps
# its output in _build/tasks/<task>.log and prints one line when it ends. Four at a
# time on two cores: the run is bound by its total CPU, so what matters is that no core
# waits; the site build goes first because four tasks need it, and the longest tasks
# follow it. A task whose prerequisite failed is not run (make -k goes on with the rest).
#
# all:
#   packages    Debian's bubblewrap and Chromium, if missing (scripts/system_packages.sh)
#   build       the website in fast mode, every chapter executed (scripts/build_site.sh)
#   unit-1      the unit tests of tests/norms, tests/nope and tests/majority
#   unit-2      the other unit tests but the grader's
#   grading     the grader's tests: sandboxed learners, containment, sheets
#   students    the student notebooks of lessons 1 and 5 in full mode scaled down
#   site        every page of the built site in headless Chromium
#   site-other  the rest that reads the build: solution editions against the executed
#               pages, the published notebooks, the stall watchdog
#   nbval       chapters 1 and 5 executed again, their `deterministic` cells compared
# ci:
#   recompute   the stored runs recomputed from their weights or seeds (marker
#               `recompute`), on this CPU's own arithmetic
#   perturbed   every test that reads a stored result, under other numerics
#               (scripts/perturbed.sh: it stands in for the CPUs CI never runs on)
#   colab       the reader's environments: a simulated Colab, requirements.txt's newest set
# The unit and recompute tasks record their margins (TESTING.md, "Margins"), and so
# does the perturbed pass, for scripts/margins.py --check.

PY ?= .venv/bin/python
T := _build/tasks
TASK := bash scripts/task.sh
PYTEST := $(PY) -m pytest -p no:cacheprovider -q
UNIT := -m "not slow and not notebooks and not site and not recompute"
SITE := -m "(notebooks or site) and not slow"
UNIT_1 := tests/norms tests/nope tests/majority
MARGINS := LNCOURSE_MARGINS=$(CURDIR)/_build/margins

TASKS_all := packages build unit-1 grading unit-2 students site site-other nbval
TASKS_ci := recompute perturbed colab
all: $(TASKS_all:%=$(T)/%.rc)
ci: $(TASKS_ci:%=$(T)/%.rc)

$(T)/packages.rc:
	$(TASK) packages bash scripts/system_packages.sh
$(T)/build.rc: $(T)/packages.rc
	TASK_SHOW='^\[(preexec|site)\] ' $(TASK) build bash scripts/build_site.sh
$(T)/unit-1.rc:
	$(TASK) unit-1 env $(MARGINS)/native $(PYTEST) $(UNIT) --durations=5 $(UNIT_1)
$(T)/unit-2.rc:
	$(TASK) unit-2 env $(MARGINS)/native $(PYTEST) $(UNIT) --durations=5 \
	  --ignore=tests/book/test_colab.py --ignore=tests/grading $(UNIT_1:%=--ignore=%)
$(T)/recompute.rc:
	$(TASK) recompute env $(MARGINS)/native $(PYTEST) --durations=5 \
	  -m "recompute and not slow and not notebooks and not site" tests
$(T)/perturbed.rc:
	$(TASK) perturbed env $(MARGINS)/perturbed bash scripts/perturbed.sh
$(T)/grading.rc: $(T)/packages.rc
	$(TASK) grading $(PYTEST) $(UNIT) --durations=5 tests/grading
$(T)/students.rc:
	$(TASK) students $(PYTEST) -m "notebooks and not slow" -k student --durations=0 tests/book
$(T)/colab.rc:
	$(TASK) colab $(PYTEST) -m "not slow" --durations=0 tests/book/test_colab.py
$(T)/site.rc: $(T)/build.rc $(T)/packages.rc
	$(TASK) site $(PYTEST) $(SITE) --durations=5 tests/book/test_site.py
$(T)/site-other.rc: $(T)/build.rc
	$(TASK) site-other $(PYTEST) $(SITE) -k "not student and not deterministic" \
	  --ignore=tests/book/test_site.py --durations=5 tests/book
$(T)/nbval.rc: $(T)/build.rc
	$(TASK) nbval $(PYTEST) -m "notebooks and not slow" -k deterministic --durations=0 tests/book

tasks-%:
	@echo $(TASKS_$*)

.PHONY: all ci
