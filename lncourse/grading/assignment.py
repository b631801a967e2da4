"""The teacher's assignment file: which exercises are graded, their points, partial credit,
the teacher's own exercises and the written answers (``--assignment FILE``).

A TOML file (``tomllib``); every key is checked, and anything it cannot use is refused
with the file, the line (where TOML gives one) or the key, before anything is graded::

    chapter = 1                  # optional: the class's chapter (as --chapter)
    title = "Lab 1"              # optional: the grade item's name in the LMS sheet

    [exercises]                  # the chapter's exercises graded, by number or label;
    "1.1" = 2                    # the others are not graded; points >= 0
    "1.5" = { points = 4, partial = true }   # partial: the share of inputs passed

    [teacher.softmax_rows]       # a teacher's exercise (lncourse.grading.teacher)
    file = "my_exercises.py"     # beside this file (a path relative to it)
    points = 3
    partial = true               # optional
    title = "Softmax by rows"    # optional

    [written.wr-majority-scale]  # a written answer: its cell's marker in the notebook
    points = 2
    title = "Scale or projection?"   # optional

Without ``[exercises]`` every exercise of the chapter is graded at its usual points. The
sheets then have one column per graded item, in this order: the chapter's exercises
(in the chapter's order), the teacher's, the written answers.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from lncourse.grading.exercises import Chapter, Exercise

__all__ = ["Assignment", "Assigned", "WrittenQuestion", "AssignmentError", "load",
           "earned", "points_text"]


class AssignmentError(ValueError):
    """An assignment file the grader cannot use; the message names the file and key."""


@dataclass(frozen=True)
class Assigned(Exercise):
    """An exercise as the assignment grades it: its points, and partial credit."""
    partial: bool = False
    teacher: object = None      # a teacher's exercise (lncourse.grading.teacher.Spec)


@dataclass(frozen=True)
class WrittenQuestion(Exercise):
    """A written answer, marked by hand (``lncourse.grading.written``): never run."""
    written: bool = True


WRITTEN_LABEL = re.compile(r"wr-[a-z0-9][a-z0-9-]{0,60}")
FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,60}")


@dataclass
class Assignment:
    path: Path
    chapter: int | None = None
    title: str | None = None
    exercises: dict[str, dict] | None = None     # number or label -> {points, partial}
    teacher: dict[str, dict] = field(default_factory=dict)    # function -> settings
    written: dict[str, dict] = field(default_factory=dict)    # label -> settings
    specs: dict[str, object] = field(default_factory=dict)    # function -> teacher.Spec

    def private(self) -> tuple[str, ...]:
        """Folders that hold the teacher's files: the learner never sees them."""
        files = [self.path, *(Path(t["file"]) for t in self.teacher.values())]
        return tuple(sorted({str(f.resolve().parent) for f in files}))

    def apply(self, ch: Chapter) -> Chapter:
        """``ch`` as this assignment grades it (a Chapter whose exercises are the items
        graded, with their points). AssignmentError for an exercise the chapter lacks."""
        if self.chapter is not None and self.chapter != ch.number:
            raise AssignmentError(f"{self.path}: chapter = {self.chapter}, but the class "
                                  f"is graded as chapter {ch.number}")
        chosen: list[Exercise] = []
        if self.exercises is None:
            chosen = [Assigned(e.label, e.number, e.title, e.function, e.points)
                      for e in ch.exercises]
        else:
            known = {k: e for e in ch.exercises for k in (e.number, e.label)}
            for key, settings in self.exercises.items():
                if key not in known:
                    raise AssignmentError(
                        f"{self.path}: [exercises] \"{key}\": chapter {ch.number} has no "
                        f"such exercise; its exercises are "
                        + ", ".join(f"{e.number} ({e.label})" for e in ch.exercises))
            order = {e.label: k for k, e in enumerate(ch.exercises)}
            picked = {known[key].label: (known[key], s) for key, s in self.exercises.items()}
            if len(picked) < len(self.exercises):
                raise AssignmentError(f"{self.path}: [exercises] names one exercise twice "
                                      "(by its number and by its label)")
            for label in sorted(picked, key=order.get):
                e, s = picked[label]
                chosen.append(Assigned(e.label, e.number, e.title, e.function,
                                       s["points"], s.get("partial", False)))
        taken = {e.function for e in ch.exercises}
        for k, (function, t) in enumerate(self.teacher.items(), 1):
            if function in taken:
                raise AssignmentError(f"{self.path}: [teacher.{function}]: chapter "
                                      f"{ch.number}'s exercise already asks for "
                                      f"`{function}`; give yours another name")
            spec = self.specs[function]
            chosen.append(Assigned(f"ex-teacher-{function.replace('_', '-')}", f"T{k}",
                                   t.get("title") or spec.title or function, function,
                                   t["points"], t.get("partial", False), spec))
        for k, (label, w) in enumerate(self.written.items(), 1):
            chosen.append(WrittenQuestion(label, f"W{k}", w.get("title") or label, "",
                                          w["points"]))
        return replace(ch, exercises=tuple(chosen))


def _number(where: str, value, what: str = "points") -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise AssignmentError(f"{where}: {what} must be a number >= 0, not {value!r}")
    return value


def _table(where: str, value, allowed: dict[str, type], required=("points",)) -> dict:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"points": value}
    if not isinstance(value, dict):
        raise AssignmentError(f"{where}: give the points (a number) or a table such as "
                              "{ points = 2, partial = true }, not " + repr(value)[:80])
    for key, v in value.items():
        if key not in allowed:
            raise AssignmentError(f"{where}: unknown key {key!r}; the keys are "
                                  + ", ".join(allowed))
        if key == "points":
            _number(f"{where}.points", v)
        elif not isinstance(v, allowed[key]) or isinstance(v, bool) != (allowed[key] is bool):
            raise AssignmentError(f"{where}.{key}: must be {allowed[key].__name__}, "
                                  f"not {v!r}"[:200])
    for key in required:
        if key not in value:
            raise AssignmentError(f"{where}: give its {key}")
    return dict(value)


def load(path: str | Path) -> Assignment:
    """Read and check an assignment file, and load its teacher's exercises."""
    from lncourse.grading import teacher as teacher_module

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise AssignmentError(f"{path}: cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise AssignmentError(f"{path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise AssignmentError(f"{path}: is not valid TOML: {err}") from None
    top = {"chapter", "title", "exercises", "teacher", "written"}
    for key in data:
        if key not in top:
            raise AssignmentError(f"{path}: unknown key {key!r}; the keys are "
                                  + ", ".join(sorted(top)))
    a = Assignment(path)
    if "chapter" in data:
        if isinstance(data["chapter"], bool) or not isinstance(data["chapter"], int):
            raise AssignmentError(f"{path}: chapter must be a chapter's number, "
                                  f"not {data['chapter']!r}")
        a.chapter = data["chapter"]
    if "title" in data:
        if not isinstance(data["title"], str) or not data["title"].strip():
            raise AssignmentError(f"{path}: title must be a non-empty text")
        a.title = data["title"].strip()
    if "exercises" in data:
        if not isinstance(data["exercises"], dict):
            raise AssignmentError(f"{path}: exercises must be a table, [exercises]")
        a.exercises = {str(k): _table(f"{path}: [exercises] \"{k}\"", v,
                                      {"points": float, "partial": bool})
                       for k, v in data["exercises"].items()}
    for section, store in (("teacher", a.teacher), ("written", a.written)):
        value = data.get(section, {})
        if not isinstance(value, dict):
            raise AssignmentError(f"{path}: {section} must be tables, [{section}.NAME]")
        for name, v in value.items():
            where = f"{path}: [{section}.{name}]"
            if section == "teacher":
                if not FUNCTION.fullmatch(name):
                    raise AssignmentError(f"{where}: the name must be the function's, a "
                                          "Python name")
                t = _table(where, v, {"file": str, "points": float, "partial": bool,
                                      "title": str}, ("file", "points"))
                file = Path(t["file"])
                t["file"] = str(file if file.is_absolute() else path.parent / file)
                store[name] = t
            else:
                if not WRITTEN_LABEL.fullmatch(name):
                    raise AssignmentError(f"{where}: a written question's name is its "
                                          "cell's marker, wr- then lower-case letters, "
                                          "digits and -")
                store[name] = _table(where, v, {"points": float, "title": str})
    if a.exercises is not None and not (a.exercises or a.teacher or a.written):
        raise AssignmentError(f"{path}: nothing to grade ([exercises] is empty, and there "
                              "is no [teacher.NAME] or [written.NAME])")
    for name, t in a.teacher.items():
        try:
            a.specs[name] = teacher_module.load(t["file"], name)
        except teacher_module.TeacherError as err:
            raise AssignmentError(f"{path}: [teacher.{name}]: {err}") from None
    return a


def earned(e: Exercise, outcome) -> float | int | None:
    """The points ``outcome`` earns on ``e``: all of them if it passed, the share of the
    inputs it passed with partial credit, the teacher's mark for a written answer (None:
    not yet marked)."""
    if getattr(outcome, "pending", False):
        return None
    score = getattr(outcome, "score", None)
    if outcome.passed:
        return e.points
    if score is None:
        return 0
    value = round(e.points * score, 2)
    return int(value) if value == int(value) else value


def points_text(value) -> str:
    """Points as a sheet shows them: 3, 1.5, 0.67; "" for none."""
    if value is None:
        return ""
    value = round(float(value), 2)
    return str(int(value)) if value == int(value) else f"{value:g}"
