"""The README's import rules, checked twice: on the package's source (which module names which, by
its import statements) and at run time (what a fresh interpreter loads on `import tinyagent.x`).

The rules: four layers, imports pointing one way: the book's code (the modules of `tinyagent/`)
imports the book's code and the engine's seam (`tinyagent.engine`, its `__init__`) only, neither
the engine's pieces nor `harness/` nor `science/`; the engine (`engine/`) imports, among the
book's modules, only `policy` (the model it computes) and `checks`; the harness imports the book's
code and the engine, not the science; the science imports all three (and nothing imports the
science); the math leaf `kl` imports only torch; the gym never imports the model, nor the model
the gym; Chapter 9's `grpo` never imports Chapter 10's `regularize`; nothing that trains or
evaluates imports `report`, `plots` or `book` (or a claims module); importing one module loads
only what it imports, so the package's `__init__` is a lazy face that imports nothing.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tinyagent"
LAYERS = ("engine", "harness", "science")             # the three folders below the book's code
ENGINE_MAY_IMPORT = {"policy", "checks"}              # the book's modules the engine reads
CLAIMS = "science.claims"                             # a subpackage counted as one module


def _unit(dotted):
    """The module of the graph that a dotted name below the package belongs to (the compiled
    extension `engine._kernels` belongs to `engine.kernels`, which loads it)."""
    if dotted == "engine._kernels":
        return "engine.kernels"
    return CLAIMS if dotted == CLAIMS or dotted.startswith(CLAIMS + ".") else dotted


def _name(path):
    """The dotted name below the package of a file of it ("harness.runs", "science.claims")."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")
MODULES = sorted({_unit(_name(p)) for p in FILES})
TOP = sorted(m for m in MODULES if "." not in m and m not in LAYERS)     # the book's code
TRAINS_OR_EVALUATES = ("grpo", "regularize", "evaluation", "harness.runs", "sampler", "policy",
                       "pretrain", "science.experiments")
PRESENTATION = ("science.report", "science.plots", "science.book", CLAIMS)
FACE = set()                          # what `import tinyagent` imports: nothing (no side effects)
LEAVES = ("science.book", "checks", "kl", "vocab", "engine.kernels", "engine.memory")  # import no package module


# ------------------------------------------------------------------ the source

def _is_module(dotted):
    return (PACKAGE.joinpath(*dotted.split(".")).with_suffix(".py").exists()
            or (PACKAGE.joinpath(*dotted.split(".")) / "__init__.py").exists())


def _module_level(tree):
    """The nodes Python runs when it loads the module: all but those inside functions."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo += [child for child in ast.iter_child_nodes(node)
                 if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


def _package_imports(path, loading=False):
    """The package modules a file names in its import statements, anywhere in the file (with
    `loading`, outside functions only: what loading it imports): relative imports of any level,
    `from tinyagent.x.y import`, `from tinyagent.x import module` and `import tinyagent.x.y`, each
    as the graph's module it reaches."""
    tree = ast.parse(path.read_text())
    return _imported(path, _module_level(tree) if loading else ast.walk(tree))


def _imported(path, nodes):
    """The package modules named by the import statements among `nodes` of the file at `path`."""
    name = _name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
            elif node.module == "tinyagent" or (node.module or "").startswith("tinyagent."):
                base = node.module.split(".")[1:]
                node = ast.ImportFrom(module=None, names=node.names, level=0)
            else:
                continue
            target = [*base, *(node.module.split(".") if node.module else [])]
            for alias in node.names:                                # from .x import module
                if _is_module(".".join([*target, alias.name])):
                    found.add(".".join([*target, alias.name]))
                elif target:
                    found.add(".".join(target))
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".", 1)[1] for alias in node.names
                         if alias.name.startswith("tinyagent."))
    return {_unit(m) for m in found} - {_unit(name)}


def _module_imports(module, loading=False):
    """What a module of the package imports; for a subpackage, what its files import together."""
    return set().union(*(_package_imports(path, loading) for path in FILES
                         if _unit(_name(path)) == module))


SEAM = PACKAGE / "engine" / "__init__.py"


def _start_imports():
    """What `engine.start()` imports inside its body where the kernels compute (the kernels'
    passes, loaded where a run starts); nothing on the torch engine."""
    from tinyagent import engine
    if engine.in_force() != "kernels":
        return set()
    start = next(node for node in ast.parse(SEAM.read_text()).body
                 if isinstance(node, ast.FunctionDef) and node.name == "start")
    return _imported(SEAM, ast.walk(start))


def _starts_the_engine(module):
    """Whether loading `module` calls `engine.start()` (the harness's face does)."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "start" and isinstance(node.func.value, ast.Name)
               and node.func.value.id == "engine"
               for path in FILES if _unit(_name(path)) == module
               for node in _module_level(ast.parse(path.read_text())))


GRAPH = {m: _module_imports(m) for m in MODULES}
# What loading a module imports: its imports outside functions, and what `engine.start()` imports
# where it is called as the module loads.
LOADING = {m: _module_imports(m, loading=True)
           | (_start_imports() if _starts_the_engine(m) else set()) for m in MODULES}


def closure(module, graph=GRAPH):
    """Every package module `module` imports, directly or not (itself excluded)."""
    seen, todo = set(), list(graph[module])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen


def _loaded_with_the_parents(modules):
    """Loading a.b.c loads the packages a and a.b first, and what they import."""
    out = set(modules)
    for m in modules:
        parts = m.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent in LOADING:
                out |= {parent} | closure(parent, LOADING)
    return out


def loaded_by(module):
    """The package modules `import tinyagent.module` loads, from the source: the face, the
    module, what they import outside functions, and the packages above each."""
    found = FACE | {module}
    while True:
        more = _loaded_with_the_parents(found | set().union(*(closure(m, LOADING) for m in found)))
        if more == found:
            return found
        found = more


def _packages(modules):
    """The layer folders a set of modules sits in: importing `harness.runs` loads `harness`."""
    return {m.split(".")[0] for m in modules if "." in m}


def test_every_import_names_a_module_of_the_package():
    for module, imported in GRAPH.items():
        assert imported <= set(MODULES), f"{module} imports {sorted(imported - set(MODULES))}"


def _layer(module):
    """"" for the book's code at the top, else the folder it sits in ("engine", "harness",
    "science"; the seam `engine` is the engine's)."""
    first = module.split(".")[0]
    return first if first in LAYERS else ""


def test_the_layers_are_the_ones_the_design_names():
    assert set(TOP) == {"vocab", "gym", "policy", "sampler", "kl", "grpo", "regularize", "evaluation",
                        "exact", "pretrain", "chapter9", "checks", "files", "checkpoint"}
    assert {m for m in MODULES if _layer(m) == "engine"} == {"engine"} | {
        f"engine.{m}" for m in ("adam", "arithmetic", "gelu", "guard", "kernel_policy", "kernels", "kvcache", "matmul",
                                "memory", "sequence_pass", "softmax", "token_pass", "weights")}
    assert {m for m in MODULES if _layer(m) == "harness"} == {"harness"} | {
        f"harness.{m}" for m in ("fingerprint", "cache", "runs", "cluster", "doctor", "bench",
                                 "contract", "probe", "rebuild", "lab")}
    assert {m for m in MODULES if _layer(m) == "science"} == {"science", CLAIMS} | {
        f"science.{m}" for m in ("experiments", "study", "plan", "placement", "report", "book",
                                 "plots", "diagnostics", "pairs", "episodes", "entropy_collapse",
                                 "clip_batches", "agents", "exercises_exact", "exercise_runs",
                                 "batch_probes", "design_problems", "replication", "plan_parts",
                                 "book_numbers", "book_status", "plan_v2", "replication_v2", "draw3")}


def test_the_books_code_imports_the_engine_through_its_seam_only_and_neither_harness_nor_science():
    for module in TOP:
        below = {m for m in GRAPH[module] if _layer(m)} - {"engine"}
        assert not below, f"{module} (the book's code) imports {sorted(below)}"
    assert "engine" in GRAPH["sampler"] and "engine" in GRAPH["grpo"]     # the seam is used


def test_the_engine_imports_of_the_books_code_only_the_model_and_the_checks():
    engine = [m for m in MODULES if _layer(m) == "engine"]
    for module in engine:
        book = {m for m in GRAPH[module] if not _layer(m)}
        assert book <= ENGINE_MAY_IMPORT, f"{module} (the engine) imports {sorted(book)}"
        assert not {m for m in GRAPH[module] if _layer(m) in ("harness", "science")}, module


def test_the_harness_imports_only_the_books_code_the_engine_and_itself():
    for module in (m for m in MODULES if _layer(m) == "harness"):
        science = {m for m in GRAPH[module] if _layer(m) == "science"}
        assert not science, f"{module} (the harness) imports {sorted(science)}"


def test_the_science_imports_both_and_nothing_imports_the_science():
    science = [m for m in MODULES if _layer(m) == "science"]
    reached = set().union(*(GRAPH[m] for m in science))
    assert {_layer(m) for m in reached} == {"", "engine", "harness", "science"}
    for module in (m for m in MODULES if _layer(m) != "science"):
        assert not {m for m in GRAPH[module] if _layer(m) == "science"}, module


def test_the_direction_holds_at_run_time(fresh):
    """Importing a module of the book's code loads no module of the harness or the science, and
    importing one of the harness loads none of the science (the engine's pins load with the
    package's face, and the engine loads of the book's code only what it may import)."""
    allowed = {"": {"", "engine"}, "engine": {"", "engine"}, "harness": {"", "engine", "harness"},
               "science": {"", "engine", "harness", "science"}}
    for module in MODULES:
        loaded = {_layer(m) for m in fresh[module][0]}
        assert loaded <= allowed[_layer(module)], (module, sorted(fresh[module][0]))


def test_imports_point_one_way():
    """No cycle among the imports run at loading; counting the imports inside functions too, no
    cycle crosses a layer. The one cycle inside a layer: the engine's `arithmetic.torch_threads`
    calls the seam's `start` (imported in the function), which the seam re-exports."""
    cycles = [m for m in MODULES if m in closure(m, LOADING)]
    assert not cycles, f"import cycles at loading through {cycles}"
    for m in MODULES:
        for other in closure(m):
            if m in closure(other):
                assert _layer(m) == _layer(other), f"an import cycle between {m} and {other}"
    inside = sorted(m for m in MODULES if m in closure(m))
    assert inside == ["engine", "engine.arithmetic"], inside


def test_the_leaves_import_no_package_module():
    for leaf in LEAVES:
        if leaf in GRAPH:
            assert not GRAPH[leaf], f"{leaf} is a leaf but imports {sorted(GRAPH[leaf])}"


def test_the_math_leaf_imports_only_torch():
    third_party = set()
    for node in ast.walk(ast.parse((PACKAGE / "kl.py").read_text())):
        if isinstance(node, ast.Import):
            third_party.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            third_party.add(node.module.split(".")[0])
    assert third_party - set(sys.stdlib_module_names) <= {"torch"}, third_party


def test_the_gym_and_the_model_do_not_import_each_other():
    assert "policy" not in closure("gym")
    assert "gym" not in closure("policy")


def test_chapter_9_does_not_import_chapter_10():
    assert "regularize" not in closure("grpo")


@pytest.mark.parametrize("module", TRAINS_OR_EVALUATES)
def test_nothing_that_trains_or_evaluates_imports_tables_figures_or_the_book(module):
    assert not closure(module) & set(PRESENTATION), sorted(closure(module) & set(PRESENTATION))


def test_arithmetic_stays_light():
    """It runs on every import of the package, before torch computes: no package module when it
    loads, and torch only inside its functions."""
    assert not LOADING["engine.arithmetic"], LOADING["engine.arithmetic"]
    tree = ast.parse((PACKAGE / "engine" / "arithmetic.py").read_text())
    top = [alias.name for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
           for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])]
    assert "torch" not in top and not any(name.startswith("torch.") for name in top)


def test_the_package_face_imports_nothing_and_reexports_from_where_names_are_defined():
    face = {node.module for node in ast.walk(ast.parse((PACKAGE / "__init__.py").read_text()))
            if isinstance(node, ast.ImportFrom) and node.level == 1}
    assert face == FACE
    import tinyagent
    for module, names in tinyagent._EXPORTS.items():
        defined = set()
        source = PACKAGE / f"{module}.py"
        source = source if source.exists() else PACKAGE / module / "__init__.py"
        for node in ast.parse(source.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        assert set(names) <= defined, f"{sorted(set(names) - defined)} are not defined in {module}"


# ------------------------------------------------------------------ run time, in fresh interpreters

def _python(code):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


LOADED = ("import sys, json, tinyagent.{module}; print(json.dumps([sorted(m for m in sys.modules "
          "if m.startswith('tinyagent')), 'torch' in sys.modules]))")

# One interpreter imports each module of the package as if it were the first: before each, every
# package module but those `import tinyagent` loaded is dropped from sys.modules (torch, once
# loaded, stays: so `report` goes first, to see whether it loads torch).
EACH_FRESH = """
import importlib, json, sys
import tinyagent
FACE = {m for m in sys.modules if m.startswith("tinyagent.")}
loaded = {}
for module in sys.argv[1:]:
    for name in [m for m in sys.modules if m.startswith("tinyagent.") and m not in FACE]:
        del sys.modules[name]
        parent, _, last = name.rpartition(".")
        if parent in sys.modules:                   # `from . import x` reads the attribute
            vars(sys.modules[parent]).pop(last, None)
    importlib.import_module(f"tinyagent.{module}")
    loaded[module] = [sorted({m.split(".", 1)[1] for m in sys.modules
                              if m.startswith("tinyagent.")}),
                      "torch" in sys.modules]
print(json.dumps(loaded))
"""


@pytest.fixture(scope="module")
def fresh():
    """{module: (package modules loaded by `import tinyagent.module`, whether torch was loaded)}."""
    order = ["science.report"] + [m for m in MODULES if m != "science.report"]
    code = f"import sys; sys.argv[1:] = {order!r}\n" + EACH_FRESH
    return {m: ({_unit(n) for n in mods}, torch) for m, (mods, torch) in _python(code).items()}


def test_import_kl_loads_only_the_math_leaf():
    """In its own interpreter, as a reader would: `import tinyagent.kl` loads the package's face
    and kl, nothing of the trainer, and sets no environment variable."""
    assert loaded_by("kl") == {"kl"}
    code = ("import os, sys, json; before = dict(os.environ); import tinyagent.kl; "
            "print(json.dumps([sorted(m for m in sys.modules if m.startswith('tinyagent')), "
            "'torch' in sys.modules, sorted(set(os.environ.items()) ^ set(before.items()))]))")
    assert _python(code) == [["tinyagent", "tinyagent.kl"], True, []]


def test_import_report_loads_neither_torch_nor_the_trainer():
    face = sorted(f"tinyagent.{m}" for m in loaded_by("kl") - {"kl"})
    assert _python(LOADED.format(module="science.report")) == [
        sorted(["tinyagent", *face, "tinyagent.science", "tinyagent.science.report"]), False]


def test_importing_one_module_loads_only_what_it_imports(fresh):
    assert set(fresh) == set(MODULES)
    for module in MODULES:
        expected = loaded_by(module)
        assert fresh[module][0] == expected, (module, sorted(fresh[module][0] ^ expected))


def test_the_gym_and_the_model_load_apart(fresh):
    assert "policy" not in fresh["gym"][0]
    assert "gym" not in fresh["policy"][0]


def test_grpo_loads_without_regularize(fresh):
    assert "regularize" not in fresh["grpo"][0]


def test_training_and_evaluation_load_no_tables_figures_or_book(fresh):
    for module in TRAINS_OR_EVALUATES:
        assert not fresh[module][0] & set(PRESENTATION), (module, sorted(fresh[module][0]))


def test_the_lazy_face_gives_every_public_name_and_every_module():
    import tinyagent
    for name in tinyagent.__all__:
        value = getattr(tinyagent, name)
        assert value is getattr(sys.modules[f"tinyagent.{tinyagent._DEFINED_IN[name]}"], name)
    top_names = {m.split(".")[0] for m in MODULES}        # the book's modules and the two layers
    assert top_names <= set(dir(tinyagent)) and set(tinyagent.__all__) <= set(dir(tinyagent))
    assert tinyagent.gym is sys.modules["tinyagent.gym"]
    with pytest.raises(AttributeError, match="no_such_name"):
        tinyagent.no_such_name


def test_no_exported_name_is_a_module_name_so_the_face_is_predictable():
    import tinyagent
    assert not set(tinyagent.__all__) & set(MODULES)
    assert type(tinyagent) is type(sys)                  # a plain module, no subclass trick


def test_a_module_imported_under_another_name_is_the_module():
    """`import tinyagent.evaluation as ev; ev.pass_at_k`, and `from tinyagent import evaluate` is
    the function a reader calls, not a module of the same name."""
    code = ("import json, tinyagent.evaluation as ev, tinyagent; "
            "from tinyagent import evaluate; "
            "print(json.dumps([ev.pass_at_k(4, 2, 1), ev is tinyagent.evaluation, "
            "evaluate is ev.evaluate is tinyagent.evaluate, callable(evaluate), "
            "tinyagent.pass_at_k is ev.pass_at_k]))")
    assert _python(code) == [0.5, True, True, True, True]


def test_names_the_notebooks_import_from_the_package_still_import():
    from tinyagent import (RegularizedConfig, RLConfig, load_rl_base,  # noqa: F401
                           pass_at_k, token_logprobs, train_rl)
    from tinyagent import chapter9, checks, pretrain  # noqa: F401
    from tinyagent.harness import runs  # noqa: F401
    from tinyagent.science import claims, diagnostics, experiments, placement, plan, study  # noqa: F401
