"""The shape docs/architecture.md promises, read from the source: layers, one declaration per flag,
no runtime named outside its own module, a runtime added in one file, the README's layout."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

LAB = REPO / "lab"

# Top to bottom, as in docs/architecture.md: a module may import from its own layer or below.
LAYERS = [
    ("lab.__main__", "lab.soak", "lab.pytest_plugin"),
    ("lab.cli",),
    ("lab.bench",),
    ("lab.chaos",),
    ("lab.exercises", "lab.lessons", "lab.doctor"),
    ("lab.report", "lab.job", "lab.results", "lab.why"),
    ("lab.runtimes",),
    ("lab.node", "lab.progress"),
    ("lab.workloads", "lab.inprocess"),
    ("lab.health",),
    ("lab.options",),
    ("lab.recovery",),
    ("lab.topology", "lab.gpus"),
    (
        "lab.rundir",
        "lab.ownership",
        "lab.procs",
        "lab.files",
        "lab.output_paths",
        "lab.job_text",
        "lab.nodeenv",
        "lab.errors",
        "lab.kernel_log",
        "lab.node_log",
    ),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in LAB.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The lab modules a file imports, at the top or inside a function (both are arrows)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("lab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lab") and not node.level:
            for alias in node.names:  # `from lab.runtimes import netns` is an arrow to the module
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


def layer(module: str) -> int:
    """The layer of the longest name a module falls under (lab.node.inprocess, the keeper, sits
    above lab.inprocess, the API a script imports)."""
    under = [(len(n), i) for i, names in enumerate(LAYERS) for n in names if module == n or module.startswith(n + ".")]
    if not under:
        raise AssertionError(f"{module} is in no layer of docs/architecture.md")
    return max(under)[1]


GRAPH = {name: imports(path) - {name} for name, path in MODULES.items()}


def test_every_module_sits_in_a_layer():
    for name in MODULES:
        if name != "lab":
            layer(name)


def test_no_import_runs_back_up():
    upward = [
        f"{src} -> {dst}"
        for src, dsts in GRAPH.items()
        if src != "lab"
        for dst in dsts
        if dst != "lab" and layer(dst) < layer(src)
    ]
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_the_import_graph_has_no_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for dst in sorted(GRAPH.get(module, ())):
            if state.get(dst) == 1:
                return [*path, module, dst]
            if dst not in state and (cycle := visit(dst, [*path, module])):
                return cycle
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state:
            cycle = visit(module, [])
            assert cycle is None, " -> ".join(cycle)


def test_the_node_side_never_imports_the_controller():
    """lab.node, lab.inprocess, lab.workloads and lab.health run inside images without Ray or the CLI."""
    controller = ("lab.cli", "lab.bench", "lab.exercises", "lab.lessons", "lab.runtimes", "lab.soak")
    for src, dsts in GRAPH.items():
        if src.startswith(("lab.node", "lab.inprocess", "lab.workloads", "lab.health")):
            assert not [d for d in dsts if d.startswith(controller)], src


def declared_flags() -> list[str]:
    """Every flag the `lab` command declares. The scripts a node runs (lab.node, lab.inprocess, lab.workloads, the
    collectives worker, the scale simulation) are programs of their own, with their own command lines."""
    own_programs = (
        "lab/node/", "lab/inprocess/", "lab/workloads/", "lab/bench/collectives_worker.py", "lab/bench/scale_sim.py",
    )  # fmt: skip
    flags = []
    for path in LAB.rglob("*.py"):
        if not str(path.relative_to(REPO)).startswith(own_programs):
            flags += re.findall(r'(?:add_argument|Option)\(\s*"(--[a-z0-9-]+)"', path.read_text())
    return flags


def test_each_flag_is_declared_once():
    flags = declared_flags()
    assert "--runtime" in flags and "--image" in flags and "--elastic" in flags
    assert sorted({f for f in flags if flags.count(f) > 1}) == []


def test_no_runtime_is_named_outside_its_own_modules():
    """Callers ask the runtime (describe, plan, OPTIONS, DRILLS), never which one it is."""
    from lab import runtimes

    names = set(runtimes.registry())
    alternatives = "|".join(names)
    pattern = re.compile(rf'(?:==|!=)\s*"({alternatives})"|\bin \(\s*"({alternatives})"')
    offenders = []
    controller = [
        p for p in LAB.rglob("*.py") if not str(p.relative_to(LAB)).startswith(("runtimes/", "node/", "workloads/"))
    ]
    for path in controller:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_a_port_is_picked_by_one_function():
    """A socket bound to port 0 and closed hands back a port from the kernel's range for outgoing
    connections' source ports, and one was taken by a connection before the job bound it (a CI run:
    both nodes' "connection to the C10d store has failed"). Ports are picked by lab.bench.free_port,
    above that range; a port-0 bind is allowed only where the socket is kept listening (a busy port)."""
    port_zero = re.compile(r"\.bind\(\([^()]*,\s*0\)\)")
    offenders = []
    for path in [*LAB.rglob("*.py"), *(REPO / "tests").rglob("*.py")]:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if port_zero.search(line) and not any(".listen(" in after for after in lines[number : number + 2]):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


ECHO_RUNTIME = """
from lab.options import Option
from lab.runtimes.base import Node, Runtime

GREETING = Option("--greeting", "what each node would say", "hello")


class EchoNode(Node):
    def __init__(self, index, run_dir):
        self.name, self.index, self.address = f"echo{index}", index, f"10.9.9.{index + 1}"
        self.dir = run_dir / "nodes" / self.name

    def start(self, argv): raise NotImplementedError
    def stop(self, grace_s=10.0): pass
    def exit_code(self): return 0


class EchoRuntime(Runtime):
    name = "echo"
    OPTIONS = (GREETING,)

    def __init__(self, run_dir, *, log=print, greeting="hello"):
        super().__init__(run_dir, log=log)
        self.greeting = greeting

    def describe(self, node):
        return f"an echo that says {self.greeting}"

    def plan(self, topology, script, script_args):
        from lab.runtimes.dry_run import plan_text
        from lab.runtimes.plan import LaunchPlan
        nodes = [EchoNode(i, self.run_dir.path) for i in range(topology.nodes)]
        topology = topology.replace(rdzv_host="10.9.9.1")
        text = plan_text(self, topology, nodes, script, script_args)
        return LaunchPlan(self.name, "echoes", topology, script, script_args, nodes, text)

    def attach(self): return []
    def down(self, grace_s=10.0): return []
"""


def test_a_runtime_written_in_one_file_runs_a_dry_run(tmp_path):
    (tmp_path / "echo_runtime.py").write_text(ECHO_RUNTIME)
    env = {
        "PYTHONPATH": f"{tmp_path}:{REPO}",
        "LAB_RUNTIMES": "echo_runtime",
        "PATH": "/usr/bin:/bin",
        "LAB_RUN_DIR": str(tmp_path / "run"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "lab", "up", "--runtime", "echo", "--greeting", "bonjour", "--nodes", "3", "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("(an echo that says bonjour)") == 3
    assert "# echo2: 10.9.9.3" in out.stdout and "--rdzv-endpoint=10.9.9.1:29400" in out.stdout
    helped = subprocess.run(
        [sys.executable, "-m", "lab", "up", "--help"], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert "--greeting" in helped.stdout and "echo" in helped.stdout
    assert not (tmp_path / "run").exists(), "a dry run makes nothing"


def test_the_readme_layout_names_every_top_level_module():
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    top = sorted(
        {
            p.relative_to(LAB).parts[0].removesuffix(".py")
            for p in LAB.glob("*")
            if p.suffix == ".py" or (p / "__init__.py").exists()
        }
        - {"__init__"}
    )
    missing = [m for m in top if f"lab/{m}" not in layout]
    assert not missing, f"README's layout does not name: {missing}"


def test_the_cli_parses_without_importing_torch():
    """torch takes over a second to import here: `lab --help`, bad flags and dry runs must not wait for it."""
    probe = (
        "import sys, lab.cli; lab.cli.build_parser(); print(sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
