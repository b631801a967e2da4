"""Issue 34: what a submission's process can see, what bounds it, and what the checking
process accepts from it. Each test is a reproducer of one class of attack of the issue's
probe, run on the containment this machine has (bubblewrap where it is installed, the
fallback otherwise: ``LNCOURSE_SANDBOX=none`` forces it)."""

import json
import os
import re
import socket
import threading
import time

import pytest

from lncourse.grading import contain, wire
from lncourse.grading.sandbox import Learner, Sandbox


TEMPLATE = None


@pytest.fixture(params=["bubblewrap", "template", "fallback"])
def sandboxing(request, monkeypatch):
    """The ways the grader contains a learner: a fresh bubblewrap sandbox; a learner forked
    from the class's template (the default; in bubblewrap, or without it as root); and a
    fresh learner in the fallback without bubblewrap."""
    global TEMPLATE
    from lncourse.grading.template import fallback_template
    if request.param == "fallback":
        monkeypatch.setenv("LNCOURSE_SANDBOX", "none")
    elif request.param == "bubblewrap" and contain.bwrap() is None:
        pytest.skip("no bubblewrap here")
    elif contain.bwrap() is None and not fallback_template():
        pytest.skip("no template here (no bubblewrap, not root)")
    contain.bwrap.cache_clear()
    if request.param == "template":
        from lncourse.grading.template import Template
        TEMPLATE = Template.start([], (), 300.0)
        assert TEMPLATE is not None
    yield request.param
    if TEMPLATE is not None:
        TEMPLATE.close()
        TEMPLATE = None
    contain.bwrap.cache_clear()


def new_learner(hide=()):
    return Learner(list(hide), template=TEMPLATE)


def run(source, *args, memory_mb=512, seconds=30.0, hide=()):
    """Call ``probe(*args)`` defined by ``source`` in a sandbox; returns its answer."""
    learner = new_learner(hide)
    sandbox = Sandbox([("probe.py", source, [0])], "probe", seconds, memory_mb, learner)
    try:
        return sandbox.function(sandbox.start())(*args)
    finally:
        sandbox.close()
        learner.kill()


# ----------------------------------------------------------------- what it can read
READ = '''
def probe(paths):
    out = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.read(16)
            out[path] = "read"
        except OSError as err:
            out[path] = type(err).__name__
    import importlib.util
    out["packages"] = [importlib.util.find_spec(m) is not None for m in ("nbformat", "lncourse.norms")]
    return out
'''


def test_a_submission_reads_no_file_of_the_teachers(sandboxing, tmp_path):
    """The class folder beside the submissions (last week's sheet, feedback, roster, the LMS
    zip), the teacher's home, and the system's secrets stay unread; Python's packages and
    lncourse can still be imported."""
    klass = tmp_path / "class"
    (klass / "submissions").mkdir(parents=True)
    (klass / "feedback").mkdir()
    secrets = [klass / "grades.csv", klass / "roster.csv", klass / "feedback" / "zoe.md",
               klass / "lms.zip"]
    for path in secrets:
        path.write_text("secret\n")
    paths = [str(p) for p in secrets] + ["/etc/shadow", "/etc/gshadow", "/dev/kmsg",
                                         "/proc/kmsg", os.path.expanduser("~/.bashrc"),
                                         os.path.expanduser("~/.ssh/id_rsa")]
    seen = run(READ, paths, hide=[klass / "submissions"])
    assert seen.pop("packages") == [True, True]
    leaked = {p: how for p, how in seen.items() if how == "read"}
    assert not leaked, f"the submission read {sorted(leaked)}"


CAPS = '''
def probe():
    import ctypes
    status = {line.split(":")[0]: line.split()[1] for line in open("/proc/self/status")
              if line.startswith(("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs"))}
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(4096)
    klog = libc.klogctl(3, buffer, 4096)       # SYSLOG_ACTION_READ_ALL: the kernel log
    return {"status": status, "klog": int(klog)}
'''


def test_no_capabilities_and_no_kernel_log(sandboxing):
    seen = run(CAPS)
    assert seen["status"] == {"CapEff": "0" * 16, "CapPrm": "0" * 16, "CapBnd": "0" * 16,
                              "CapAmb": "0" * 16, "NoNewPrivs": "1"}
    assert seen["klog"] < 0, "the submission read the kernel log"


SOCKETS = '''
def probe(unix_path, port):
    import socket
    out = {}
    for name, family, address in (("unix", socket.AF_UNIX, unix_path),
                                  ("tcp", socket.AF_INET, ("127.0.0.1", port))):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(address)
            s.sendall(b"hello from a submission")
            out[name] = "connected"
        except OSError as err:
            out[name] = type(err).__name__
    return out
'''


def test_no_socket_on_disk_or_on_the_network_is_reachable(sandboxing, tmp_path):
    heard = []
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "teacher.sock"))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    for s in (unix, tcp):
        s.listen(4)
        s.settimeout(20)

    def accept(s):
        try:
            heard.append(s.accept()[0].recv(64))
        except OSError:
            pass
    threads = [threading.Thread(target=accept, args=(s,), daemon=True) for s in (unix, tcp)]
    for t in threads:
        t.start()
    try:
        seen = run(SOCKETS, str(tmp_path / "teacher.sock"), tcp.getsockname()[1])
    finally:
        unix.close()
        tcp.close()
    assert seen == {"unix": seen["unix"], "tcp": seen["tcp"]}
    assert "connected" not in seen.values() and not heard, seen


# ----------------------------------------------------------------- one memory bound
CHILDREN = '''
def probe(n, mb):
    import os, select, time
    read, write = os.pipe()
    children = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                block = bytearray(mb * 2**20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                os.write(write, b"1")
                time.sleep(20)
            finally:
                os._exit(0)
        children.append(pid)
    got, deadline = 0, time.monotonic() + 15
    while got < n and time.monotonic() < deadline:
        if select.select([read], [], [], 0.5)[0]:
            got += len(os.read(read, 16))
    # how many hold their memory at once
    return sum(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in children)
'''
FILES = '''
def probe(mb):
    import os
    written = 0
    block = b"x" * 2**20
    for where in (".", os.environ.get("TMPDIR", "/tmp"), "/tmp", "/dev/shm"):
        for k in range(mb):
            try:
                with open(os.path.join(where, f"f{k}"), "ab") as f:
                    f.write(block)
                written += 1
            except OSError:
                break
    return written
'''


def test_one_memory_limit_for_all_of_a_submissions_processes(sandboxing):
    """Four children of 200 MB each under a 256 MB limit: the limit holds for all of them
    together (they are killed, and the message names the limit), not for each one."""
    try:
        alive = run(CHILDREN, 4, 200, memory_mb=256)
    except AssertionError as err:
        assert "memory limit" in str(err), err
        return
    assert alive * 200 <= 256, f"{alive} children held 200 MB each under a 256 MB limit"


def test_temporary_files_count_against_the_memory_limit(sandboxing):
    """Files written anywhere the submission may write (its folder, /tmp, /dev/shm) are
    bounded by the same limit as its memory."""
    try:
        written = run(FILES, 400, memory_mb=256)
    except AssertionError as err:
        assert "memory limit" in str(err), err
        return
    assert written <= 256 + 64, f"the submission wrote {written} MB under a 256 MB limit"


# ----------------------------------------------------------------- what the checker decodes
def test_a_message_of_many_small_objects_is_refused_before_it_is_built():
    """``[object()] * 1_800_000`` was a 63 MB message that built 1.8 million classes in the
    checker: the count of items in a message is bounded before anything is built."""
    blobs: list[bytes] = []
    tree = wire.encode([object()] * (wire.MAX_ITEMS + 1), blobs)
    frame = wire.pack({"out": tree}, blobs)
    header, views = wire.unpack(frame[8:])
    with pytest.raises(wire.WireError, match="items"):
        wire.decode(header["out"], views)
    small = wire.decode(wire.encode([object()] * 1000, []), [])
    assert len({type(x) for x in small}) == 1    # one stand-in type, not one per item


def test_a_header_larger_than_its_bound_is_refused_unparsed():
    big = json.dumps({"blobs": [], "pad": "x" * (wire.MAX_HEADER + 1)}).encode()
    body = len(big).to_bytes(4, "big") + big
    with pytest.raises(wire.WireError, match="header"):
        wire.unpack(body)


def test_the_checker_is_bounded_in_memory():
    """The process that checks a submission has a memory bound of its own."""
    import resource
    import subprocess
    import sys
    code = ("from lncourse.grading.contain import limit_checker; import resource; "
            "limit_checker(); print(resource.getrlimit(resource.RLIMIT_AS)[0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) not in (0, resource.RLIM_INFINITY)


# ----------------------------------------------------------------- reading a notebook
def test_reading_a_notebook_has_its_own_time_limit(tmp_path):
    """500,000 one-line statements (2 MB) cost a minute and more than a GB in the main
    grader: reading and analysing a notebook runs in a bounded process of its own."""
    start = time.monotonic()
    with pytest.raises(contain.Exceeded, match="time limit"):
        contain.bounded(time.sleep, 60, seconds=2, memory_mb=256)
    assert time.monotonic() - start < 10
    with pytest.raises(contain.Exceeded, match="memory limit"):
        contain.bounded(bytearray, 600 * 2**20, seconds=30, memory_mb=256)
    assert contain.bounded(sum, [1, 2, 3], seconds=30, memory_mb=256) == 6


# ----------------------------------------------------------------- rules it cannot switch off
HEADER = "import torch\nimport torch.nn.functional as F\n"
BYPASSES = {
    "patched guard": (HEADER + "import contextlib, lncourse.guard\n"
                      "lncourse.guard.forbid = lambda paths, fn=None: contextlib.nullcontext()\n"
                      "def layer_norm_fgh(x, gamma, beta, eps):\n"
                      "    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)\n"),
    "kept in a dict, modes popped": (
        HEADER + "from torch.utils._python_dispatch import _disable_current_modes\n"
        "KEPT = {'ln': F.layer_norm}\n"
        "def layer_norm_fgh(x, gamma, beta, eps):\n"
        "    with _disable_current_modes():\n"
        "        return KEPT['ln'](x, x.shape[-1:], gamma, beta, eps)\n"),
    "instance norm": (
        HEADER + "def layer_norm_fgh(x, gamma, beta, eps):\n"
        "    flat = x.reshape(1, -1, x.shape[-1])\n"
        "    return F.instance_norm(flat, eps=eps).reshape(x.shape) * gamma + beta\n"),
    "batch norm": (
        HEADER + "def layer_norm_fgh(x, gamma, beta, eps):\n"
        "    flat = x.reshape(-1, x.shape[-1]).T\n"
        "    out = F.batch_norm(flat, None, None, training=True, eps=eps)\n"
        "    return out.T.reshape(x.shape) * gamma + beta\n"),
    "a name built at run time": (
        HEADER + "def layer_norm_fgh(x, gamma, beta, eps):\n"
        "    ln = getattr(F, 'layer' + '_norm')\n"
        "    return ln(x, x.shape[-1:], gamma, beta, eps)\n"),
    "another process": (
        HEADER + "def layer_norm_fgh(x, gamma, beta, eps):\n"
        "    import subprocess, sys, pickle\n"
        "    code = ('import sys, pickle, torch; x, g, b, e = pickle.load(sys.stdin.buffer); '\n"
        "            'pickle.dump(torch.nn.functional.layer_norm(x, x.shape[-1:], g, b, e), sys.stdout.buffer)')\n"
        "    done = subprocess.run([sys.executable, '-c', code], input=pickle.dumps((x, gamma, beta, eps)),\n"
        "                          capture_output=True)\n"
        "    return pickle.loads(done.stdout)\n"),
}
ENGINE = (HEADER + "from torch.autograd import Variable\n"
          "def layer_norm_jacobian(x, gamma, eps):\n"
          "    rows = []\n"
          "    for i in range(x.shape[-1]):\n"
          "        v = x.detach().clone().requires_grad_(True)\n"
          "        y = F.layer_norm(v, v.shape, gamma, None, eps)\n"
          "        grad, = Variable._execution_engine.run_backward((y[i],), (torch.ones(()),),\n"
          "                                                        False, False, (v,), False)\n"
          "        rows.append(grad)\n"
          "    return torch.stack(rows)\n")




def statements(source):
    import ast
    return list(range(len(ast.parse(source).body)))


def checked(check, sandbox, info):
    """The check, then the rules read in this process (as the grader does): the first
    AssertionError's message, or None."""
    try:
        check(sandbox.function(info), hidden=False)
    except AssertionError as err:
        return str(err)
    return sandbox.audit()


@pytest.mark.parametrize("name", sorted(BYPASSES))
def test_forbidden_calls_cannot_be_switched_off(sandboxing, name):
    """The probe's routes around the rule "write LayerNorm yourself": each is refused, by a
    check made in the checker's process (the submission's code never ran there)."""
    from lncourse import checks
    source = BYPASSES[name]
    learner = new_learner()
    sandbox = Sandbox([("exercise.py", source, statements(source))], "layer_norm_fgh", 60.0,
                      1024, learner)
    try:
        info = sandbox.start()
        message = checked(checks.check_layer_norm_fgh, sandbox, info)
        assert re.search("asks you to write LayerNorm yourself|may not", message or ""), message
    finally:
        sandbox.close()
        learner.kill()


def test_autograds_engine_is_autograd(sandboxing):
    from lncourse import checks
    learner = new_learner()
    sandbox = Sandbox([("exercise.py", ENGINE, statements(ENGINE))], "layer_norm_jacobian",
                      60.0, 1024, learner)
    try:
        info = sandbox.start()
        message = checked(checks.check_layer_norm_jacobian, sandbox, info)
        assert re.search("without autograd|may not", message or ""), message
    finally:
        sandbox.close()
        learner.kill()


def test_a_notebook_too_long_to_analyse_is_refused_in_its_time(tmp_path, monkeypatch):
    """The probe's 500,000 one-line statements: refused with a note naming the limit,
    within it, and the main grader's memory untouched."""
    import nbformat
    from lncourse.grading import grade as grading
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x=1\n" * 500_000)]     # 2 MB, under the size cap
    nb.metadata["lncourse"] = {"chapter": "01_layernorm_geometry"}
    path = tmp_path / "long.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setattr(grading, "READ_SECONDS", 3.0)
    start = time.monotonic()
    sub = grading._read(path)
    assert time.monotonic() - start < 15
    assert "time limit of 3 s" in (sub.refused or ""), sub.notes
    assert any("time limit" in n for n in sub.notes)


# ----------------------------------------------------------------- teacher-only inputs
def test_teacher_only_inputs_come_from_a_secret(tmp_path, capsys):
    """The hidden inputs were code in the public repository (hard-coding them scored
    7/7): their random values are now drawn from a key given at grading time, and the
    command line refuses --hidden without one."""
    import torch
    from lncourse import checks
    from lncourse.checks import _core
    from lncourse.grading.grade import main

    def inputs(key):
        seen = []

        def layer_norm_fgh(x, gamma, beta, eps):
            seen.append(x.clone())
            c = x - x.mean(-1, keepdim=True)
            return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta
        _core.HIDDEN_KEY = key
        try:
            checks.check_layer_norm_fgh(layer_norm_fgh, hidden=True)
        finally:
            _core.HIDDEN_KEY = None
        return seen

    public, a, a_again, b = inputs(None), inputs("one key"), inputs("one key"), inputs("another")
    assert len(public) == len(a) == len(b)
    same = lambda u, v: all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(u, v))  # noqa: E731
    assert same(a, a_again)                      # a key gives the same inputs again
    assert not same(public, a) and not same(a, b)
    nb = tmp_path / "x.ipynb"
    nb.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        main([str(nb), "--out", str(tmp_path / "g.csv"), "--hidden"])
    assert stop.value.code == 2
    assert "--hidden-key" in capsys.readouterr().err


# ----------------------------------------------------------------- the solution edition
def test_the_solution_edition_is_recognised_by_its_code(tmp_path):
    """Its metadata and its markers removed, and its variables renamed, the solution
    edition is still flagged; the student edition is not."""
    import re as regex

    import nbformat
    from lncourse.grading import grade as grading
    from lncourse.grading.exercises import chapter as find_chapter
    from .test_grade import editions

    ch = find_chapter("01_layernorm_geometry")
    books = editions(ch.stem)
    solution = books["solution"]
    solution.metadata.get("lncourse", {}).pop("edition", None)
    for cell in solution.cells:
        cell.metadata.pop("lncourse", None) if "exercise" not in cell.metadata.get(
            "lncourse", {}) else None
        if cell.cell_type == "code":
            cell.source = "\n".join(line for line in cell.source.splitlines()
                                    if "SOLUTION" not in line)
            cell.source = regex.sub(r"\bcentred\b", "xc", cell.source)
    flags = {}
    for name, nb in (("solution", solution), ("student", books["student"])):
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(nb, path)
        sub = grading._read(path)
        g = grading.Graded(str(path), {}, [], name)
        assert not sub.solution_edition or name == "student"
        grading._programs(sub, ch, g)
        flags[name] = g.flags
    assert "solution edition" in flags["solution"]
    assert "solution edition" not in flags["student"]
