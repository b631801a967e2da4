"""The grader's command line, ``python -m lncourse.grading.grade`` (see ``lncourse.grading.grade``): its
options and their validation (all of it before anything is graded), who each submission
belongs to, and writing the sheets.

Student IDs come from what the teacher controls, in this order: a roster (``--roster``),
a pattern over the file name (``--id-pattern``), the LMS's own naming of its downloads
(``lms_identity``: Moodle's and Canvas's), else the submission's path relative to the
class's folder (``class_folder``; ``alice/nb.ipynb`` gives ``alice/nb``, a flat folder's
``ada.ipynb`` gives ``ada``), less ".ipynb". A regrade into an existing sheet without
``--class-folder`` takes the class's folder from the sheet's names
(``class_folder_from_names``), so that one student's file regraded alone keeps its name. A roster's ``file`` is that relative
path. A notebook's own
``metadata.lncourse.student_id`` is used only with ``--id-from-metadata`` and only where
none of those names the submission; a notebook whose metadata names someone else is
flagged, and so is every ID that two submissions share. Nothing is merged or
overwritten on an ID: every submission keeps a row (and a feedback file) of its own.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lncourse.grading.sheet import (LMS_FORMATS, atomic_write, check_sheet, feedback,
                                    lms_format, submission_names, write_csv, write_lms)

# Moodle (mod/assign, "Download all submissions"): "<full name>_<participant number>_
# assignsubmission_<plugin>_<the file's name>", or with "Download submissions in folders"
# a folder "<full name>_<participant number>_assignsubmission_<plugin>" (Moodle 4 adds
# "_" at its end) holding the file under its own name. Moodle turns "_" in names into
# spaces, so the first "_<digits>_assignsubmission_" ends the name. The participant
# number is the assignment's own (assign_user_mapping): it is what the assignment's
# offline grading worksheet calls "Participant <n>", not the user's ID number.
_MOODLE = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_[a-z]+(?:_|$)")
# Canvas ("Download Submissions"): one flat folder of "<lastfirst>[_LATE]_<user id>_
# <attachment id>_<the file's name>"; lastfirst is the sortable name in lower case,
# letters only; the user ID is Canvas's, the "ID" column of its gradebook CSV.
_CANVAS = re.compile(r"^(?P<name>[^\W_A-Z]+)(?:_LATE)?_(?P<id>\d+)_(?P<attachment>\d+)(?:_|$)")


def lms_identity(path: str | Path) -> tuple[str, str, str] | None:
    """(lms, id, name) from a Moodle or Canvas download's naming of ``path`` (its file
    name, else its folder's), or None. For Moodle the ID is the participant number."""
    path = Path(path)
    # a Moodle folder names the student whatever the file inside is called
    for part, patterns in ((path.parent.name, ("moodle",)), (path.name, ("moodle", "canvas")),
                           (path.parent.name, ("canvas",))):
        for lms in patterns:
            found = (_MOODLE if lms == "moodle" else _CANVAS).match(part)
            if found:
                return lms, found["id"], found["name"].strip()
    return None


def class_folder(paths) -> Path:
    """The class's folder: the folder that holds every submission (their common one)."""
    folders = [os.path.abspath(Path(p).parent) for p in paths]
    return Path(os.path.commonpath(folders)) if folders else Path(".").resolve()


def class_folder_from_names(paths, names) -> Path | None:
    """The class's folder that a sheet's ``names`` (its ``submission`` column) are
    relative to, read from the submissions regraded: a submission whose path ends with
    one of the names (``class/alice/nb.ipynb`` and ``alice/nb.ipynb``) lies that many
    folders below it (``class``). Where none does (late students graded alone), it is
    the nearest folder above a submission that holds files of the sheet's names
    (``class``, holding ``alice/nb.ipynb``). None where neither finds one (a new class, or
    a class folder since removed: their common folder names them, as for a first run).
    ValueError where a path ends with two names (``alice/nb.ipynb`` and ``nb.ipynb``,
    left by a run that named it by its own folder) or the submissions would put the
    class's folder in two places: only the teacher can say which."""
    parsed = ((PurePosixPath(n).parts, n) for n in names if n)
    names = {k: n for k, n in parsed               # relative, as the grader writes them
             if not PurePosixPath(n).is_absolute() and ".." not in k}
    found: dict[Path, list[str]] = defaultdict(list)
    for path in paths:
        parts = Path(os.path.abspath(path)).parts
        ends = [n for k, n in names.items() if len(k) < len(parts) and parts[-len(k):] == k]
        if len(ends) > 1:
            raise ValueError(f"{path} could be the sheet's "
                             + " or its ".join(repr(n) for n in sorted(ends))
                             + ": pass --class-folder FOLDER, the folder its names are "
                             "relative to")
        for n in ends:
            found[Path(*parts[:-len(PurePosixPath(n).parts)])].append(str(path))
    for path in paths if not found else ():          # on disk: the folder holding them
        above = next((folder for folder in Path(os.path.abspath(path)).parents
                      if any((folder / n).is_file() for n in names.values())), None)
        if above is not None:
            found[above].append(str(path))
    if len(found) > 1:
        where = "; ".join(f"{folder} (from {who[0]})" for folder, who in found.items())
        raise ValueError(f"the sheet's names put the submissions in two class folders, "
                         f"{where[:400]}: grade each class into its own sheet, or pass "
                         "--class-folder FOLDER")
    return next(iter(found), None)


def submission_name(path: str | Path, root: str | Path | None = None) -> str:
    """How the sheet names a submission: "folder/file name" where its folder is an LMS's
    folder for one student (their files keep their own names); else its path relative
    to the class's folder ``root`` (``alice/nb.ipynb`` and ``bob/nb.ipynb`` are two
    students), or its file name where it lies outside ``root`` or none is given."""
    path = Path(path)
    parent = path.parent.name
    if parent and (_MOODLE.match(parent) or _CANVAS.match(parent)):
        return f"{parent}/{path.name}"
    if root is not None:
        try:
            return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
        except ValueError:
            pass
    return path.name


_SOURCES = {"roster": "the roster", "pattern": "--id-pattern", "moodle": "Moodle's file name",
            "canvas": "Canvas's file name", "file name": "the file name"}


@dataclass
class Identity:
    id: str
    name: str = ""
    source: str = "file name"       # roster, pattern, moodle, canvas, metadata, file name
    flags: list[str] = field(default_factory=list)

    @property
    def lms(self) -> str | None:
        return self.source if self.source in ("moodle", "canvas") else None


def student_ids(paths, submissions, roster=None, id_pattern=None,
                from_metadata: bool = False, root=None) -> dict[str, Identity]:
    """Each submission's ``Identity`` (see the module's docstring), by ``str(path)``.
    Names are relative to the class's folder ``root`` (default: ``class_folder``): the
    roster is looked up by that name (by the bare file name only where no other
    submission has it), and without an ID from elsewhere it is the ID, less ".ipynb"."""
    root = class_folder(paths) if root is None else root
    ids: dict[str, Identity] = {}
    files = defaultdict(int)
    for path in paths:
        files[Path(path).name] += 1
    for path, sub in zip(paths, submissions):
        name = submission_name(path, root)
        found = re.search(id_pattern, Path(path).name) if id_pattern else None
        lms = lms_identity(path)
        claimed = sub.student_id
        listed = (roster or {}).get(name) or (
            (roster or {}).get(Path(path).name) if files[Path(path).name] == 1 else None)
        if listed:
            who = Identity(listed, lms[2] if lms else "", "roster")
        elif found and found.groups() and found.group(1):
            who = Identity(found.group(1), lms[2] if lms else "", "pattern")
        elif lms:
            who = Identity(f"Participant {lms[1]}" if lms[0] == "moodle" else lms[1],
                           lms[2], lms[0])
        elif from_metadata and claimed:
            who = Identity(claimed, "", "metadata")
        else:
            who = Identity(name.removesuffix(".ipynb"))
        if claimed and who.source != "metadata" and claimed != who.id:
            said = _SOURCES.get(who.source, who.source)
            who.flags.append(
                f"conflict: the notebook's metadata names student {claimed}, {said} "
                f"{who.id}; {who.id} is used" if from_metadata else
                f"the notebook's metadata names student {claimed}, not used ({said} gives "
                f"{who.id})")
        ids[str(path)] = who
    shared = defaultdict(list)
    for path, who in ids.items():
        shared[who.id].append(path)
    for same in shared.values():
        for path in same if len(same) > 1 else ():
            others = ", ".join(submission_name(p, root) for p in same if p != path)
            ids[path].flags.append(f"duplicate ID: also {others[:300]}")
    return ids


def _positive(kind, low):
    def parse(text: str):
        import math

        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or (low == 0 and value == 0):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: give a finite number {'>' if low == 0 else '>='} {low}")
        return value
    return parse


def read_roster(path: str) -> dict[str, str]:
    """A roster CSV with columns ``file`` (the submission's path relative to the class's
    folder: the file's name in a flat folder, "folder/file name" for one folder per
    student or an LMS's folder download) and ``student_id``."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SystemExit(f"--roster {path}: cannot be read ({err})") from None
    if rows and not {"file", "student_id"} <= set(rows[0]):
        raise SystemExit(f"--roster {path}: a roster needs the columns file and student_id")
    roster: dict[str, str] = {}
    for number, r in enumerate(rows, 2):
        if (r["file"] or "") in roster:
            raise SystemExit(f"--roster {path}, line {number}: {r['file']!r} is listed twice")
        roster[r["file"] or ""] = (r["student_id"] or "").strip()
    return roster


def parser(doc: str, timeout: float, memory_mb: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lncourse.grading.grade", description=doc.split("\n\n")[0])
    p.add_argument("submissions", nargs="+", help="submitted notebooks (.ipynb)")
    p.add_argument("--out", required=True, help="the grade sheet (CSV; merged if it exists)")
    p.add_argument("--lms", help="also write a sheet for the LMS's grade import here")
    p.add_argument("--lms-format", choices=sorted(LMS_FORMATS),
                   help="the --lms sheet's format (default: canvas for Canvas's download "
                        "names, moodle-worksheet for Moodle's, else moodle)")
    p.add_argument("--lms-item", help="the grade item's (assignment's) name in the --lms "
                                      "sheet (default: 'Chapter N: title')")
    p.add_argument("--feedback", help="folder for one Markdown feedback file per submission")
    p.add_argument("--timeout", type=_positive(float, 0), default=timeout,
                   help=f"seconds allowed per call of your function (default {timeout:.0f})")
    p.add_argument("--hidden", action="store_true", help="add the checks' teacher-only inputs")
    p.add_argument("--hidden-key", help="the secret the teacher-only inputs' random values are "
                                        "drawn from (any text you keep to yourself; default: "
                                        "the environment variable LNCOURSE_HIDDEN_KEY); "
                                        "required with --hidden")
    p.add_argument("--chapter", help="the class's chapter (default: the one that more "
                                     "than half of the students' files name, one vote "
                                     "per student; otherwise the grader asks for it)")
    p.add_argument("--memory-mb", type=_positive(int, 64), default=memory_mb,
                   help=f"memory cap per exercise, in MB (default {memory_mb})")
    p.add_argument("--workers", type=_positive(int, 1),
                   help="submissions graded at once (default: twice the CPUs, up to 4)")
    p.add_argument("--roster", help="CSV with columns file (the submission's path "
                                    "relative to the class folder) and student_id")
    p.add_argument("--class-folder", help="the folder the submissions' names are relative "
                                          "to (default: on a regrade, the one the sheet's "
                                          "names give; else the one that holds them all)")
    p.add_argument("--id-pattern", help="regular expression whose first group, found in a "
                                        "file name, is the student ID")
    p.add_argument("--id-from-metadata", action="store_true",
                   help="take the student ID from the notebook's metadata "
                        "(lncourse.student_id) where nothing the teacher controls names it")
    p.add_argument("--no-merge", action="store_true",
                   help="overwrite the sheet instead of merging a regrade into it")
    p.add_argument("--assignment", help="the assignment file (TOML): the exercises graded, "
                                        "their points and partial credit, the teacher's "
                                        "own exercises, the written answers "
                                        "(lncourse.grading.assignment)")
    p.add_argument("--written", help="the written answers' marks file (CSV): written with "
                                     "the answers and an empty points column, read back "
                                     "on the next run (lncourse.grading.written)")
    p.add_argument("--fresh-learners", action="store_true",
                   help="start each submission's learner process afresh instead of forking "
                        "it from a pre-started template (slower; for comparison)")
    return p


def _folder_of(p: argparse.ArgumentParser, option: str, path: str) -> None:
    """``path``'s folder exists and can be written, and ``path`` is no folder."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        p.error(f"{option} {path}: is a folder; give the file to write")
    if not folder.is_dir():
        p.error(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        p.error(f"{option} {path}: the folder {folder} cannot be written")


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every argument that can be checked before grading is (``p.error``: exit code 2)."""
    from lncourse.grading.exercises import chapter as find_chapter

    if getattr(args, "hidden_key", None) is None:
        args.hidden_key = os.environ.get("LNCOURSE_HIDDEN_KEY") or None
    if args.hidden and not args.hidden_key:
        p.error("--hidden needs a secret key: pass --hidden-key TEXT or set "
                "LNCOURSE_HIDDEN_KEY (the teacher-only inputs are drawn from it, so that "
                "nobody can compute them from the course's public code)")
    if args.id_pattern:
        try:
            re.compile(args.id_pattern)
        except re.error as err:
            p.error(f"--id-pattern: {err}")
    if args.chapter is not None:
        try:
            find_chapter(args.chapter)
        except KeyError as err:
            p.error(f"--chapter: {err.args[0]}")
    _folder_of(p, "--out", args.out)
    if args.lms:
        _folder_of(p, "--lms", args.lms)
        if Path(args.lms).resolve() == Path(args.out).resolve():
            p.error("--lms and --out name the same file")
    if args.feedback:
        folder = Path(args.feedback)
        if folder.exists() and not folder.is_dir():
            p.error(f"--feedback {args.feedback}: is a file, not a folder")
        if not folder.exists() and not folder.parent.is_dir():
            p.error(f"--feedback {args.feedback}: its parent folder does not exist")
    if getattr(args, "class_folder", None) and not Path(args.class_folder).is_dir():
        p.error(f"--class-folder {args.class_folder}: no such folder")
    if args.roster:
        if not Path(args.roster).is_file():
            p.error(f"--roster {args.roster}: no such file")
        args.roster_ids = read_roster(args.roster)
    if args.lms_item is not None and not args.lms_item.strip():
        p.error("--lms-item: give a name")
    _assignment(p, args)
    missing = [s for s in args.submissions if not os.path.lexists(s)]
    if missing:
        p.error(f"no such file: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    _class_folder_of_the_sheet(p, args)


def _class_folder_of_the_sheet(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A regrade into an existing sheet without ``--class-folder`` names its submissions
    as the sheet does: relative to the class's folder that the sheet's names give
    (``class_folder_from_names``), so that one student's file graded alone replaces
    their own row. ``args.class_folder_note`` says so where that folder is not the one
    that holds the files graded."""
    args.class_folder_note = None
    if getattr(args, "class_folder", None) or getattr(args, "no_merge", False):
        return
    try:
        found = class_folder_from_names(args.submissions, submission_names(args.out))
    except ValueError as err:
        p.error(f"--out {args.out}: {err}")
    if found is not None and found != class_folder(args.submissions):
        args.class_folder = str(found)
        args.class_folder_note = (f"submissions named relative to {found}, the class "
                                  f"folder of {args.out}'s names (--class-folder to "
                                  "choose another)")


def _assignment(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Read ``--assignment`` (and the teacher's files it names) and check ``--written``
    before anything is graded; ``args.assignment_spec`` is the Assignment or None."""
    from lncourse.grading.assignment import AssignmentError, load
    from lncourse.grading.exercises import chapter as find_chapter
    from lncourse.grading.written import WrittenError, read_marks

    args.assignment_spec = None
    if getattr(args, "assignment", None):
        if not Path(args.assignment).is_file():
            p.error(f"--assignment {args.assignment}: no such file")
        try:
            spec = load(args.assignment)
        except AssignmentError as err:
            p.error(f"--assignment: {err}")
        if spec.chapter is not None:
            try:
                number = find_chapter(spec.chapter).number
            except KeyError as err:
                p.error(f"--assignment {args.assignment}: chapter: {err.args[0]}")
            if args.chapter is not None and find_chapter(args.chapter).number != number:
                p.error(f"--chapter {args.chapter} and the assignment's chapter = "
                        f"{spec.chapter} differ")
        known = spec.chapter if spec.chapter is not None else args.chapter
        if known is not None:            # its exercises, checked against the chapter's
            try:
                spec.apply(find_chapter(known))
            except AssignmentError as err:
                p.error(f"--assignment: {err}")
        if spec.written and not getattr(args, "written", None):
            p.error(f"--assignment {args.assignment} declares written answers: pass "
                    "--written FILE (the sheet you mark them in)")
        if spec.title and args.lms_item is None:
            args.lms_item = spec.title
        args.assignment_spec = spec
    if getattr(args, "written", None):
        if args.assignment_spec is None or not args.assignment_spec.written:
            p.error("--written: the assignment file (--assignment) declares no written "
                    "answers ([written.wr-NAME])")
        _folder_of(p, "--written", args.written)
        if Path(args.written).resolve() in {Path(args.out).resolve(),
                                             *([Path(args.lms).resolve()] if args.lms else [])}:
            p.error("--written names the same file as --out or --lms")
        try:
            read_marks(args.written, {k: float(v["points"]) for k, v
                                      in args.assignment_spec.written.items()})
        except WrittenError as err:
            p.error(f"--written: {err}")


def before_grading(args: argparse.Namespace):
    """What ``grade`` calls once it knows the chapter and the IDs, before any exercise
    runs: refuses a sheet of another chapter and an LMS format the IDs cannot fill."""
    def ready(ch, graded) -> None:
        if not args.no_merge:
            check_sheet(ch, args.out)
        if args.lms:
            lms_format(args.lms_format, graded)      # raises SystemExit with the reason
    return ready


def write_outputs(ch, graded, args: argparse.Namespace) -> None:
    write_csv(ch, graded, args.out, merge=not args.no_merge)
    if args.lms:
        write_lms(ch, graded, args.lms, lms_format(args.lms_format, graded), args.lms_item)
    if args.feedback:
        folder = Path(args.feedback)
        folder.mkdir(parents=True, exist_ok=True)
        names = feedback_names([g.student_id or Path(g.submission).stem for g in graded])
        for g, name in zip(graded, names):
            atomic_write(folder / f"{name}.md", feedback(ch, g))


NAME_BYTES = 120   # a feedback file's name, before ".md": far under the 255 bytes file
                   # systems allow, leaving room for atomic_write's temporary name


def feedback_names(ids: list[str]) -> list[str]:
    """One file name per student ID, in order: letters, digits, ``.``, ``-`` and ``_``
    kept (any script's), everything else ``_``; at most NAME_BYTES bytes of UTF-8, cut on
    a character's boundary (83 CJK letters are 249 bytes); never hidden (a leading ``.``
    gets a ``_``); and distinct, where two IDs would give the same name (``a b`` and
    ``a_b``, two long names with the same start, or names that differ only in case), by
    a number."""
    out, taken = [], set()
    for text in ids:
        base = re.sub(r"[^\w.-]", "_", text) or "_"
        if base.startswith("."):
            base = "_" + base
        base = base.encode("utf-8")[:NAME_BYTES].decode("utf-8", "ignore")
        name, k = base, 1
        while name.casefold() in taken:            # Alice and alice: one file on macOS
            k += 1
            tail = f"_{k}"
            name = base.encode("utf-8")[:NAME_BYTES - len(tail)].decode(
                "utf-8", "ignore") + tail
        taken.add(name.casefold())
        out.append(name)
    return out
