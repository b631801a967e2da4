# The test command's tasks and what each needs, run by scripts/test.sh as
#   make -f scripts/test.mk -j4 -k -s all
# Each task is one pytest run (or the site build) through scripts/task.sh, which keeps
# its output in _build/tasks/<task>.log and prints one line when it ends. Four at a
# time on two cores: the run is bound by its total CPU, so what matters is that no core
# waits; the site build goes first because four tasks need it, and the longest tasks
# follow it. A task whose prerequisite failed is not run (make -k goes on with the rest).
#
#   packages    Debian's bubblewrap and Chromium, if missing (scripts/system_packages.sh)
#   build       the website in fast mode, every chapter executed (scripts/build_site.sh)
#   unit-1      the unit tests of tests/norms, tests/nope and tests/majority
#   unit-2      the other unit tests but the grader's
#   grading     the grader's tests: sandboxed learners, containment, sheets
#   students    the student notebooks of lessons 1 and 5 in full mode scaled down
#   colab       the reader's environments: a simulated Colab, requirements.txt's newest set
#   site        every page of the built site in headless Chromium
#   site-other  the rest that reads the build: solution editions against the executed
#               pages, the published notebooks, the stall watchdog
#   nbval       chapters 1 and 5 executed again, their `deterministic` cells compared
# The unit tests record their margins (TESTING.md, "Margins") for scripts/margins.py.

PY ?= .venv/bin/python
T := _build/tasks
TASK := bash scripts/task.sh
PYTEST := $(PY) -m pytest -p no:cacheprovider -q
UNIT := -m "not slow and not notebooks and not site"
SITE := -m "(notebooks or site) and not slow"
UNIT_1 := tests/norms tests/nope tests/majority
MARGINS := LNCOURSE_MARGINS=$(CURDIR)/_build/margins/native

TASKS := packages build unit-1 grading unit-2 colab students site site-other nbval
all: $(TASKS:%=$(T)/%.rc)

$(T)/packages.rc:
	$(TASK) packages bash scripts/system_packages.sh
$(T)/build.rc: $(T)/packages.rc
	TASK_SHOW='^\[(preexec|site)\] ' $(TASK) build bash scripts/build_site.sh
$(T)/unit-1.rc:
	$(TASK) unit-1 env $(MARGINS) $(PYTEST) $(UNIT) --durations=5 $(UNIT_1)
$(T)/unit-2.rc:
	$(TASK) unit-2 env $(MARGINS) $(PYTEST) $(UNIT) --durations=5 \
	  --ignore=tests/book/test_colab.py --ignore=tests/grading $(UNIT_1:%=--ignore=%)
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

tasks:
	@echo $(TASKS)

.PHONY: all tasks
