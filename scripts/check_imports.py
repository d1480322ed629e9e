"""The package's import contracts, over every import statement (inside functions too):

- no import cycle between modules;
- `lemonade_onebit.cli` is imported by nothing but `__main__` (it is the top of the layers);
- `backends` (the launchers) import, even through other modules, none of `catalog`, `serve`,
  `cli`, `lemonade`, `bench`, `laya`: a launcher knows how to start its executor, nothing about
  requests or downloads;
- `catalog` imports, even through other modules, none of `serve`, `cli`, `lemonade`, `bench`.

Imports under `if TYPE_CHECKING:` are left out: they never run. Exit 1 with every finding.
"""

from __future__ import annotations

import sys

import grimp

PACKAGE = "lemonade_onebit"
FORBIDDEN = {
    "backends": ("catalog", "serve", "cli", "lemonade", "bench", "laya"),
    "catalog": ("serve", "cli", "lemonade", "bench"),
}


def _inside(module: str, part: str) -> bool:
    name = f"{PACKAGE}.{part}"
    return module == name or module.startswith(name + ".")


def cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    imported = graph.find_modules_directly_imported_by(child)
                    work.append((child, iter(sorted(imported))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        item = stack.pop()
                        on_stack.discard(item)
                        component.append(item)
                        if item == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def main() -> int:
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=True)
    problems = []
    for component in cycles(graph):
        problems.append("import cycle: " + " <-> ".join(component))
    for importer in sorted(graph.find_modules_that_directly_import(f"{PACKAGE}.cli")):
        if importer != f"{PACKAGE}.__main__":
            problems.append(f"{importer} imports {PACKAGE}.cli (nothing may)")
    for layer, banned in FORBIDDEN.items():
        for b in banned:
            chains = graph.find_shortest_chains(importer=f"{PACKAGE}.{layer}",
                                                imported=f"{PACKAGE}.{b}", as_packages=True)
            for chain in sorted(chains):
                problems.append(f"{layer} may not import {b}, even through others: "
                                + " -> ".join(chain))
    for line in problems:
        print(line)
    print(f"import contracts: {len(problems)} finding(s) in {len(graph.modules)} modules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
