"""An import-linter contract type the stock ones lack: modules that import nothing but the
standard library and each other (the pure core). Registered in pyproject.toml's
``[tool.importlinter]`` as ``standard_library_only``; ``lint-imports`` runs it in ``make test``."""

from __future__ import annotations

import sys

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules


class StandardLibraryOnly(Contract):
    """``modules`` (packages, with their submodules) import only the standard library and
    themselves. Needs ``include_external_packages = true``, so third-party imports are in the
    graph."""

    type_name = "standard_library_only"

    modules = fields.ListField(subfield=fields.ModuleExpressionField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        roots = [module.name for module in
                 module_expressions_to_modules(graph, self.modules)]  # type: ignore[arg-type]
        members = {name for root in roots
                   for name in {root, *graph.find_descendants(root)}}
        leaks = []
        for importer in sorted(members):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                top = imported.split(".")[0]
                if imported in members or top in sys.stdlib_module_names:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = ", ".join(str(detail["line_number"]) for detail in details)
                leaks.append((importer, imported, lines))
        return ContractCheck(kept=not leaks, metadata={"leaks": leaks})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["leaks"]:
            output.print_error(f"{importer} -> {imported} (l. {lines})", bold=False)
            output.new_line()
        output.print("Only the standard library and these modules themselves may be imported.")
