"""The forbidden-call rules, checked where the submission's code never ran: in the checker,
on the source of the statements an exercise runs.

``lncourse.guard`` stops a forbidden call inside the learner's process while the function
runs, and says which call it was; but that process runs the submission's code, which can
switch the guard off (patch ``lncourse.guard.forbid``, pop PyTorch's dispatch modes, keep
the forbidden function under another name, drive autograd's engine directly, start another
Python). ``audit`` reads the same statements the learner's process runs, before any of
its answers is accepted, and refuses:

- the forbidden calls themselves, by name, and their equivalents (``EQUIVALENTS``: the
  normalisations that compute LayerNorm for a rule against LayerNorm, the whole of
  autograd for a rule against autograd), as an attribute (``F.instance_norm``), an
  imported name, or a name the code uses without binding it (a star import);
- whatever reaches a callable by a name built at run time, or code outside the learner's
  process: ``getattr`` and its relatives, ``eval``/``exec``, private attributes and
  modules (``torch._C``, ``_disable_current_modes``, ``Variable._execution_engine``), the
  modules that start processes or load code (``os``, ``subprocess``, ``importlib``,
  ``pickle``, ...), and ``lncourse``'s guard, checks and grader.

A correct solution needs none of these (the solution editions are graded through it).
``audit`` returns the first problem as a sentence (with the rule's reason), or None.
"""

from __future__ import annotations

import ast

# dynamic access: a callable reached by a name built at run time
DYNAMIC = frozenset({
    "eval", "exec", "compile", "getattr", "setattr", "delattr", "globals", "locals", "vars",
    "__import__", "breakpoint", "attrgetter", "methodcaller", "getattr_static", "getmembers",
    "load", "loads", "hub", "library", "modules", "import_module"})
# modules (and attributes of that name) that load code or run it in another process
MODULES = frozenset({
    "os", "sys", "subprocess", "multiprocessing", "concurrent", "ctypes", "importlib",
    "builtins", "inspect", "gc", "pickle", "marshal", "types", "code", "codeop", "runpy",
    "pty", "posix", "socket", "shelve", "dill", "cloudpickle", "joblib", "pkgutil", "site",
    "signal", "threading", "_thread", "ast", "dis", "platform"})
PRIVATE_OK = frozenset({"__init__", "__call__", "__name__", "__doc__", "__len__", "__iter__",
                        "__next__", "__getitem__", "__repr__", "__str__", "__enter__",
                        "__exit__", "__eq__", "__hash__", "__main__"})
LNCOURSE = ("lncourse.guard", "lncourse.checks", "lncourse.grading")

_NORMS = frozenset({
    "layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm",
    "batch_norm", "native_batch_norm", "rms_norm", "LayerNorm", "GroupNorm", "RMSNorm",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "BatchNorm1d", "BatchNorm2d",
    "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
    "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d", "FactorizedLayerNorm",
    "local_response_norm", "LocalResponseNorm", "cudnn_batch_norm", "miopen_batch_norm"})
_AUTOGRAD = frozenset({
    "autograd", "func", "functorch", "backward", "grad", "jacobian", "hessian", "vjp", "jvp",
    "hvp", "vhp", "jacrev", "jacfwd", "linearize", "grad_and_value", "run_backward",
    "forward_ad", "make_dual", "unpack_dual", "dual_level", "requires_grad_",
    "requires_grad", "enable_grad", "Function", "gradcheck"})
# a rule naming one of the keys forbids every name of its family
EQUIVALENTS = ((frozenset({"layer_norm", "native_layer_norm", "group_norm", "rms_norm"}), _NORMS),
               (frozenset({"grad", "backward", "jacobian"}), _AUTOGRAD))


def forbidden_names(paths) -> dict[str, tuple[str, bool]]:
    """The names a rule's dotted ``paths`` forbid: name -> (the path it stands for,
    whether it is that path's own name rather than an equivalent's)."""
    names: dict[str, tuple[str, bool]] = {}
    for path in paths:
        parts = str(path).split(".")
        last = parts[-2] if parts[-1] == "forward" and len(parts) > 1 else parts[-1]
        names.setdefault(last, (str(path), True))
    for keys, family in EQUIVALENTS:
        hit = next((names[k][0] for k in keys if k in names), None)
        if hit is not None:
            for name in family:
                names.setdefault(name, (hit, False))
    return names


def _bound(tree: ast.AST) -> set[str]:
    """The names the code binds itself (assignments, definitions, parameters, imports)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def _module_problem(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] in MODULES or any(p.startswith("_") for p in parts):
        return f"the module `{module}`"
    if any(module == m or module.startswith(m + ".") for m in LNCOURSE):
        return f"the module `{module}` (the grader's own)"
    return None


def audit(cells, forbidden) -> str | None:
    """The first use of a forbidden or dynamic name in the statements ``cells`` selects
    ((file name, source, statement indices), as ``lncourse.grading.sandbox.Sandbox``
    takes them), as a sentence; None if there is none."""
    names = forbidden_names(forbidden or ())
    trees = []
    for filename, source, indices in cells:
        try:
            body = ast.parse(source, filename).body
        except SyntaxError:
            continue
        trees += [(filename, body[i]) for i in indices if 0 <= i < len(body)]
    bound = set().union(*(_bound(t) for _, t in trees)) if trees else set()
    for filename, tree in trees:
        for node in ast.walk(tree):
            found = None
            if isinstance(node, ast.Attribute):
                attr = node.attr
                if attr in names:
                    found = (attr, names[attr])
                elif attr in DYNAMIC or attr in MODULES:
                    found = (f"`.{attr}`", None)
                elif attr.startswith("_") and attr not in PRIVATE_OK:
                    found = (f"the private attribute `.{attr}`", None)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in names and node.id not in bound:
                    found = (node.id, names[node.id])
                elif node.id in DYNAMIC and node.id not in bound:
                    found = (f"`{node.id}`", None)
                elif node.id.startswith("__") and node.id not in PRIVATE_OK:
                    found = (f"`{node.id}`", None)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    problem = _module_problem(alias.name)
                    if problem:
                        found = (problem, None)
                        break
            elif isinstance(node, ast.ImportFrom):
                problem = _module_problem(node.module or "") if node.level == 0 else None
                if problem:
                    found = (problem, None)
                for alias in node.names:
                    if found:
                        break
                    if alias.name in names:
                        found = (alias.name, names[alias.name])
                    elif alias.name in DYNAMIC or alias.name in MODULES or (
                            alias.name.startswith("_") and alias.name not in PRIVATE_OK):
                        found = (f"`{alias.name}`", None)
            if found is None:
                continue
            what, rule = found
            line = getattr(node, "lineno", "?")
            where = f"{filename}, line {line}"
            if rule is not None:
                path, own = rule
                reason = dict(forbidden).get(path) or "this exercise forbids it"
                if own:
                    return (f"your function called {path} (as `{what}`, {where}); {reason}. "
                            "(The grader reads this in your code, where no patch reaches.)")
                return (f"your function called `{what}` ({where}), which computes what "
                        f"{path} computes; {reason}")
            return (f"your code uses {what} ({where}), which an exercise with forbidden "
                    "calls may not use: it can reach a call by a name built at run time, "
                    "or run code where the grader's rules do not reach. Write the "
                    "computation out with tensor operations")
    return None
