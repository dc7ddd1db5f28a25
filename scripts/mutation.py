"""Mutation testing of the runner's core against the simulator (issue 23).

How much of the runner's core (``runner/_core.py`` and the modules it is made of:
``_core_base.py``, ``_housekeeping.py``, ``_serves.py``, ``_calls.py``) and of
``store/_rules.py`` does the simulator pin down? Each mutant (one small change, made by
mutmut 3's generator) is "killed" when the simulator fails on a fixed list of seeds that
pass on the unmutated code, and "survives" otherwise.

    nice -n 10 python scripts/mutation.py               # setup, baseline, every mutant, summary
    python scripts/mutation.py --every 3                # a deterministic sample: every 3rd mutant
    python scripts/mutation.py --only '*_rules*'        # these mutants again (fnmatch on names)
    python scripts/mutation.py --summary                # print the summary of the last run
    python scripts/mutation.py --pick-seeds 20          # rewrite the seed list (see below)

Run it from the repository's root with the dev dependencies installed (mutmut>=3.8, which
brings coverage). Everything it writes is under ``.mutation/`` (ignored by git); results
are kept per mutant in ``.mutation/results.jsonl``, so a run that is cut short resumes where
it stopped (``--fresh`` starts over).

The seed list (tests/sim/mutation_seeds.txt) is chosen by ``--pick-seeds N``: among the
first ``--candidates`` seeds, those that pass on the unmutated code, greedily, each adding
the most branches (arcs between lines) of the mutated files not taken by the seeds
before it (coverage.py), until no seed adds one; then the lowest other passing seeds,
up to N. Seeds that take every branch kill more mutants than as many seeds that
repeat each other; the others vary the values that flow through those branches.

1. setup: copy ``src/`` to ``.mutation/src`` and rewrite the files of ``MUTATED`` with
   mutmut's generator: each function becomes a trampoline that calls its original or one
   of its mutants, chosen by the ``MUTANT_UNDER_TEST`` environment variable.
2. baseline: with no mutant active, every seed of the seed list must pass (exit 2 if not);
   coverage.py records which lines of the original files the simulator reaches, and the
   run's CPU time sets each mutant's CPU budget.
3. run: for each mutant this process (which has imported the mutated code and the
   simulator once) forks; the child activates the mutant and runs
   ``python -m tests.sim --seed-list SEEDS --jobs 1 --fail-fast`` in-process. Exit code 0:
   survived; any other: killed; over its CPU or wall-time budget: timeout (killed too, as
   mutmut counts it: a mutant that hangs the runner is caught).
4. summary: the score per file, then every survivor as ``file:line`` with the line before
   and after the mutation, and whether the simulator reaches that line at all.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import fnmatch
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
RESULTS = WORK / "results.jsonl"
MUTANTS = WORK / "mutants.json"
BASELINE = WORK / "baseline.json"
#: The files mutated, relative to the repository's root.
MUTATED = (
    "src/openagentcore/runner/_core.py",
    "src/openagentcore/runner/_core_base.py",
    "src/openagentcore/runner/_housekeeping.py",
    "src/openagentcore/runner/_serves.py",
    "src/openagentcore/runner/_calls.py",
    "src/openagentcore/store/_rules.py",
)
DEFAULT_SEEDS = ROOT / "tests" / "sim" / "mutation_seeds.txt"
#: A mutant may use this many times the CPU of the unmutated run (plus a constant)
#: before it counts as hung; the wall-time budget is a multiple of that, for a loaded machine.
CPU_FACTOR = 3.0
CPU_CONSTANT = 5.0
WALL_FACTOR = 8.0


@dataclasses.dataclass
class Mutant:
    name: str  # module.mangled_function__mutmut_N, as MUTANT_UNDER_TEST names it
    file: str
    line: int
    before: str
    after: str


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed-list", type=Path, default=DEFAULT_SEEDS)
    parser.add_argument("--every", type=int, default=1, help="run every k-th mutant only")
    parser.add_argument("--only", nargs="*", default=None, help="fnmatch patterns of names")
    parser.add_argument("--fresh", action="store_true", help="forget earlier results")
    parser.add_argument(
        "--retry-survivors",
        action="store_true",
        help="run the survivors on reached lines again (after the simulator learned a check)",
    )
    parser.add_argument(
        "--upto", default=None, help="with --retry-survivors: only mutants up to this name"
    )
    parser.add_argument("--summary", action="store_true", help="only print the summary")
    parser.add_argument("--markdown", type=Path, default=None, help="also write it to this file")
    parser.add_argument("--pick-seeds", type=int, default=None, help="choose N seeds; see above")
    parser.add_argument("--candidates", type=int, default=300)
    args = parser.parse_args()
    os.chdir(ROOT)
    if args.pick_seeds is not None:
        _pick_seeds(args.pick_seeds, args.candidates, args.seed_list)
        return 0
    if args.summary:
        _summary(_load_mutants(), args)
        return 0
    if args.fresh and WORK.exists():
        shutil.rmtree(WORK)
    mutants = _setup()
    baseline = _baseline(args.seed_list)
    _run(mutants, baseline, args)
    _summary(mutants, args)
    return 0


def _pick_seeds(count: int, candidates: int, out: Path) -> None:
    """Write the seeds that reach most of the mutated files' lines, in few seeds."""
    import coverage

    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
    from tests.sim._soak import check_seed

    reach: dict[int, set[tuple[str, int, int]]] = {}
    failing = []
    for seed in range(candidates):
        cov = coverage.Coverage(
            data_file=None, branch=True, include=[str(ROOT / p) for p in MUTATED]
        )
        cov.start()
        _, error, _ = check_seed(seed)
        cov.stop()
        if error is not None:
            failing.append(seed)
            continue
        data = cov.get_data()
        reach[seed] = {(f, *arc) for f in data.measured_files() for arc in data.arcs(f) or ()}
    chosen: list[int] = []
    reached: set[tuple[str, int, int]] = set()
    while len(chosen) < count and reach:
        best = max(reach, key=lambda seed: (len(reach[seed] - reached), -seed))
        if not reach[best] - reached:
            break
        chosen.append(best)
        reached |= reach.pop(best)
    covering = len(chosen)
    everything = set().union(reached, *reach.values())
    chosen += sorted(reach)[: count - covering]
    out.write_text(
        "# Seeds for scripts/mutation.py, chosen by `python scripts/mutation.py --pick-seeds "
        f"{count} --candidates {candidates}`:\n# greedily, each taking the most branches of the "
        "mutated files not yet taken, among the\n# seeds that pass on the unmutated code, "
        f"then the lowest others. The first {covering} take {len(reached)}\n# branches "
        f"(in the order picked: {' '.join(map(str, chosen[:covering]))}); all "
        f"{len(reach) + covering} passing candidates together take {len(everything)}. "
        "Failing candidates left out: "
        f"{' '.join(map(str, failing)) or 'none'}.\n" + " ".join(map(str, sorted(chosen))) + "\n"
    )
    print(out.read_text())


def _setup() -> list[Mutant]:
    """Copy src/ and write the mutated files, unless the copy is already up to date."""
    from mutmut.mutation.file_mutation import mutate_file_contents

    stamp = {path: (ROOT / path).read_text() for path in MUTATED}
    if MUTANTS.exists():
        sources = json.loads(MUTANTS.read_text())["sources"]
        if all(sources.get(path) == text for path, text in stamp.items()):
            return _load_mutants()
    if (WORK / "src").exists():
        shutil.rmtree(WORK / "src")
    if RESULTS.exists():
        RESULTS.unlink()  # the mutants changed: earlier verdicts mean nothing now
    WORK.mkdir(exist_ok=True)
    shutil.copytree(ROOT / "src", WORK / "src", ignore=shutil.ignore_patterns("__pycache__"))
    mutants: list[Mutant] = []
    for path in MUTATED:
        source = (ROOT / path).read_text()
        mutated = mutate_file_contents(path, source)
        (WORK / path).write_text(mutated.code)
        module = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
        for name in mutated.mutant_names:
            mutants.append(_describe(path, module, name, source, mutated))
    MUTANTS.write_text(
        json.dumps(
            {"sources": stamp, "mutants": [dataclasses.asdict(m) for m in mutants]}, indent=1
        )
    )
    print(f"setup: {len(mutants)} mutants in {len(MUTATED)} files", flush=True)
    return mutants


def _describe(path: str, module: str, name: str, source: str, mutated: object) -> Mutant:
    """Where a mutant changes the original file, and how (the first line it changes)."""
    code = mutated.code.splitlines()  # type: ignore[attr-defined]
    spans = mutated.line_span_by_function_name  # type: ignore[attr-defined]
    mangled = name.partition("__mutmut_")[0]
    func = mangled.rsplit("ǁ", 1)[-1].removeprefix("x_")
    orig_span, span = spans[mangled + "__mutmut_orig"], spans[name]
    orig = [
        line.replace(mangled + "__mutmut_orig", func)
        for line in code[orig_span.start - 1 : orig_span.end]
    ]
    mutant = [line.replace(name, func) for line in code[span.start - 1 : span.end]]
    opcodes = difflib.SequenceMatcher(None, orig, mutant, autojunk=False).get_opcodes()
    _, i1, i2, j1, j2 = next(op for op in opcodes if op[0] != "equal")
    before = "\n".join(line.strip() for line in orig[i1:i2])
    after = "\n".join(line.strip() for line in mutant[j1:j2])
    # The generated copy of the original function is its source verbatim from `def` on.
    lines = source.splitlines()
    line = 0
    for start, text in enumerate(lines):
        if text.strip() == orig[0].strip() and lines[start : start + len(orig)] == orig:
            line = start + 1 + i1
            break
    return Mutant(f"{module}.{name}", path, line, before, after)


def _load_mutants() -> list[Mutant]:
    return [Mutant(**m) for m in json.loads(MUTANTS.read_text())["mutants"]]


def _sim_command(seed_list: Path) -> list[str]:
    return ["--seed-list", str(seed_list), "--jobs", "1", "--fail-fast"]


def _baseline(seed_list: Path) -> dict[str, object]:
    """Check the seeds pass unmutated; record the CPU they take and the lines they reach."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    data = WORK / ".coverage"
    run = subprocess.run(
        [sys.executable, "-m", "coverage", "run", f"--data-file={data}",
         "--include=" + ",".join(str(ROOT / p) for p in MUTATED),
         "-m", "tests.sim", *_sim_command(seed_list)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    print("baseline (coverage):", run.stdout.strip().splitlines()[-1:], flush=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr, file=sys.stderr)
        sys.exit(2)
    report = WORK / "coverage.json"
    subprocess.run(
        [sys.executable, "-m", "coverage", "json", f"--data-file={data}", "-o", report],
        check=True, capture_output=True,
    )  # fmt: skip
    files = json.loads(report.read_text())["files"]
    reached = {
        path: files.get(str(ROOT / path), files.get(path, {})).get("executed_lines", [])
        for path in MUTATED
    }
    # The CPU a clean run of the mutated copy takes, trampolines included: the budget's base.
    clean = _fork_and_run("", seed_list, cpu_limit=None, wall_limit=None)
    cpu = clean["cpu"]
    if clean["status"] != "survived":
        print(
            f"baseline: the seeds fail on the copy with no mutant active: {clean}", file=sys.stderr
        )
        sys.exit(2)
    result = {"cpu": cpu, "reached": reached, "seeds": seed_list.read_text()}
    if BASELINE.exists() and json.loads(BASELINE.read_text()).get("seeds") != result["seeds"]:
        RESULTS.unlink(missing_ok=True)  # other seeds: earlier verdicts mean nothing now
    BASELINE.write_text(json.dumps(result))
    print(f"baseline: seeds pass, {cpu:.1f} s CPU per clean run", flush=True)
    return result


def _prepare_imports() -> None:
    """Import the mutated copy and the simulator once, before any fork."""
    if "tests.sim.__main__" in sys.modules:
        return
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "src"]
    sys.path.insert(0, str(WORK / "src"))
    sys.path.insert(1, str(ROOT))
    import tests.sim.__main__  # noqa: F401

    import openagentcore

    if not Path(openagentcore.__file__).resolve().is_relative_to(WORK / "src"):
        sys.exit(f"imported {openagentcore.__file__}, not the mutated copy: unset PYTHONPATH")


def _fork_and_run(
    name: str, seed_list: Path, *, cpu_limit: float | None, wall_limit: float | None
) -> dict[str, object]:
    """One simulator run in a forked child with ``name`` active: its verdict and CPU."""
    _prepare_imports()
    from mutmut.mutation.trampoline import set_mutant_under_test

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 3
        try:
            set_mutant_under_test(name)
            if cpu_limit is not None:
                limit = int(cpu_limit) + 1
                resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            from tests.sim.__main__ import main as sim_main

            code = sim_main(_sim_command(seed_list))
        finally:
            os._exit(code)
    status = None
    while status is None:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = wait_status
        elif wall_limit is not None and time.monotonic() - began > wall_limit:
            os.kill(pid, signal.SIGKILL)
        else:
            time.sleep(0.01)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if os.WIFSIGNALED(status):
        verdict = "timeout"
    elif os.WEXITSTATUS(status) == 0:
        verdict = "survived"
    else:
        verdict = "killed"
    return {"status": verdict, "cpu": round(cpu, 3), "wall": round(time.monotonic() - began, 3)}


def _reached(mutant: Mutant, baseline: dict[str, Any]) -> bool:
    """Whether the seeds run the statement the mutant changes (coverage.py names a
    statement by its first line; a mutant may change a later one of it)."""
    return _statement_start(mutant.file, mutant.line) in baseline["reached"].get(mutant.file, [])


@functools.cache
def _statement_starts(path: str) -> dict[int, int]:
    """For each line of a source file, the first line of the innermost statement on it."""
    starts: dict[int, int] = {}
    tree = ast.parse((ROOT / path).read_text())
    nodes = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.stmt)),
        key=lambda node: (node.end_lineno or node.lineno) - node.lineno,
        reverse=True,
    )
    for node in nodes:  # outer statements first, inner ones overwrite them
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            starts[line] = node.lineno
    return starts


def _statement_start(path: str, line: int) -> int:
    return _statement_starts(path).get(line, line)


def _selected(mutants: list[Mutant], args: argparse.Namespace) -> list[Mutant]:
    chosen = mutants[:: args.every]
    if args.only:
        chosen = [m for m in mutants if any(fnmatch.fnmatchcase(m.name, p) for p in args.only)]
    return chosen


def _load_results() -> dict[str, dict[str, object]]:
    if not RESULTS.exists():
        return {}
    rows = (json.loads(line) for line in RESULTS.read_text().splitlines() if line)
    return {row["name"]: row for row in rows}


def _run(mutants: list[Mutant], baseline: dict[str, object], args: argparse.Namespace) -> None:
    done = _load_results()
    todo = _selected(mutants, args)
    if args.retry_survivors:
        if args.upto is not None:
            todo = todo[: [m.name for m in todo].index(args.upto) + 1]
        todo = [
            m
            for m in todo
            if done.get(m.name, {}).get("status") == "survived" and _reached(m, baseline)
        ]
    elif not args.only:
        todo = [m for m in todo if m.name not in done]
    cpu_limit = float(baseline["cpu"]) * CPU_FACTOR + CPU_CONSTANT  # type: ignore[arg-type]
    began = time.monotonic()
    with RESULTS.open("a") as out:
        for index, mutant in enumerate(todo, 1):
            row = _fork_and_run(
                mutant.name, args.seed_list, cpu_limit=cpu_limit, wall_limit=cpu_limit * WALL_FACTOR
            )
            row["name"] = mutant.name
            out.write(json.dumps(row) + "\n")
            out.flush()
            if index % 25 == 0 or index == len(todo):
                elapsed = time.monotonic() - began
                print(
                    f"run: {index}/{len(todo)} mutants in {elapsed:.0f} s "
                    f"(~{elapsed / index * (len(todo) - index):.0f} s left)",
                    flush=True,
                )


def _summary(mutants: list[Mutant], args: argparse.Namespace) -> None:
    """Print the score and the survivors; with --markdown, write them as tables too."""
    from mutation_notes import classify

    results = _load_results()
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"reached": {}}
    tested = [m for m in _selected(mutants, args) if m.name in results]
    lines = [f"{len(tested)} of {len(mutants)} mutants tested", ""]
    lines += ["| file | killed | of | score | by timeout |", "| --- | --- | --- | --- | --- |"]
    for path in (*MUTATED, None):
        rows = [results[m.name]["status"] for m in tested if path in (None, m.file)]
        killed = sum(status != "survived" for status in rows)
        timeouts = sum(status == "timeout" for status in rows)
        share = f"{100 * killed / len(rows):.1f}%" if rows else "-"
        lines.append(f"| {path or 'total'} | {killed} | {len(rows)} | {share} | {timeouts} |")
    survivors = [m for m in tested if results[m.name]["status"] == "survived"]
    kinds: dict[str, int] = {}
    themes: dict[str, int] = {}
    table = ["| where | mutation | reached | class | why, or the scenario that would kill it |"]
    table.append("| --- | --- | --- | --- | --- |")
    for m in sorted(survivors, key=lambda m: (m.file, m.line, m.name)):
        reached = _reached(m, baseline)
        kind, why = classify(m.name, m.file, m.line, m.before, m.after, reached)
        kinds[kind] = kinds.get(kind, 0) + 1
        theme = _theme(kind, why, reached)
        themes[theme] = themes.get(theme, 0) + 1
        change = f"{_cell(m.before)} → {_cell(m.after)}"
        where = f"{Path(m.file).name}:{m.line}"
        table.append(f"| {where} | {change} | {'yes' if reached else 'no'} | {kind} | {why} |")
    lines += ["", "Survivors by class: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))]
    lines += ["", "| survivors | theme |", "| --- | --- |"]
    lines += [f"| {n} | {t} |" for t, n in sorted(themes.items(), key=lambda tn: -tn[1])]
    text = "\n".join([*lines, "", *table]) + "\n"
    if args.markdown is not None:
        _write_between_markers(args.markdown, text)
    print(text if args.markdown is None else "\n".join(lines))


def _theme(kind: str, why: str, reached: bool) -> str:
    """The kind of survivor, for the summary: a [tag] of the notes, or the rule."""
    if kind == "equivalent":
        return "equivalent"
    if not reached:
        return "gap: line not reached"
    if why.startswith("["):
        return "gap: " + why[: why.index("]") + 1]
    for rule in ("message text", "inside a log call", "not yet analysed"):
        if rule in why:
            return f"gap: {rule}"
    return "gap: other (see the row)"


#: Where ``--markdown`` writes in a page that has them (docs/mutation.md); elsewhere it
#: writes the whole file.
BEGIN, END = "<!-- begin: scripts/mutation.py --markdown -->", "<!-- end -->"


def _write_between_markers(page: Path, text: str) -> None:
    old = page.read_text() if page.exists() else ""
    if BEGIN in old and END in old.partition(BEGIN)[2]:
        head, _, rest = old.partition(BEGIN)
        text = f"{head}{BEGIN}\n\n{text}\n{END}{rest.partition(END)[2]}"
    page.write_text(text)


def _cell(code: str, limit: int = 90) -> str:
    """Code for a Markdown table cell: one line, pipes escaped, long ones cut."""
    one = " / ".join(part for part in code.splitlines() if part) or "(nothing)"
    if len(one) > limit:
        one = one[: limit - 1] + "…"
    return "`" + one.replace("|", "\\|").replace("`", "'") + "`"


if __name__ == "__main__":
    sys.exit(main())
