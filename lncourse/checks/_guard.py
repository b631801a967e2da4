"""The guard the checks call the learner's function through (``lncourse.guard``:
it lives outside ``lncourse.checks`` so that the learner's process, which may not import
the checks, can use it)."""

from lncourse.guard import *  # noqa: F401,F403
from lncourse.guard import _Stop, _is_stub, ForbiddenCall, TimeLimit  # noqa: F401
