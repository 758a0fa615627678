"""Which workloads a session knows, and where each came from (pytest side).

A workload joins the catalog, without editing scalegate, in one of three ways (docs/your-model.md):

- an import path in ``--scaling-models`` (or in ``@pytest.mark.scaling_matrix(models=[...])``):
  ``mypkg.models:MyWorkload``, imported from the rootdir or sys.path;
- the ``pytest_scaling_workloads()`` hook in a conftest.py, returning classes (``harness/scalegate/hookspec.py``);
- an entry point in the group ``scalegate.workloads`` of an installed package (``name = "pkg.mod:Class"``).

Each is checked when it is registered (a ``Workload`` subclass with a name and presets) and its name must be
new: a built-in's name or another registration's is refused, naming both. What the ranks need to import it
again (a reference and absolute directories) goes into every case's spec (``CaseSpec.workload``,
``CaseSpec.import_paths``), where ``scalegate.workloads.resolve`` finds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from scalegate.contract.errors import SpecError

if TYPE_CHECKING:
    from scalegate.workloads.base import Workload

ENTRY_POINT_GROUP = "scalegate.workloads"


def _fixtures():
    from scalegate import (
        workloads,
    )  # imports torch: only the plugin builds a catalog; options.py needs Registered alone

    return workloads


@dataclass(frozen=True, kw_only=True)
class Registered:
    """One workload the session can run: what a spec needs to find it again in any process."""

    name: str
    ref: str = ""  # "" built in; "package.module:Class"; "hf:<model_type>"
    import_paths: tuple[str, ...] = ()  # absolute directories the ranks put in front of sys.path
    source: str = "built-in"  # where it was registered, for error messages


class Catalog:
    """The built-in workloads plus every registered one, by name."""

    def __init__(self, search_paths: Sequence[str] = ()) -> None:
        self.search_paths = tuple(dict.fromkeys(search_paths))  # where import paths are looked up: the rootdir
        self._entries: dict[str, Registered] = {n: Registered(name=n) for n in _fixtures().names()}
        self._classes: dict[str, "type[Workload]"] = {}  # the registered ones (built-ins load lazily)

    def names(self) -> list[str]:
        return list(self._entries)

    def defaults(self) -> list[str]:
        """What ``--scaling-models all`` runs: every workload but the built-ins that run only when named."""
        return [n for n in self._entries if n not in _fixtures().OPT_IN]

    def registered(self) -> tuple[Registered, ...]:
        """The workloads that are not built in."""
        return tuple(e for e in self._entries.values() if e.ref)

    def add_class(self, cls: Any, source: str) -> Registered:
        """Register a class the pytest side holds (a hook returned it)."""
        cls = _fixtures().validate(cls, source)
        ref, root = _fixtures().reference_for(cls, source)
        return self._add(cls, Registered(name=cls.name, ref=ref, import_paths=self._paths(root), source=source))

    def add_ref(self, ref: str, source: str) -> Registered:
        """Register an import path (``package.module:Class``) or ``hf:<model_type>``."""
        cls = _fixtures().load(ref, self.search_paths, where=source)
        if ref.startswith(_fixtures().HF_PREFIX):  # built from its config again in each rank
            return self._add(cls, Registered(name=cls.name, ref=ref, source=source))
        _, root = _fixtures().reference_for(cls, source)  # the directory it was actually found in
        return self._add(cls, Registered(name=cls.name, ref=ref, import_paths=self._paths(root), source=source))

    def model(self, item: Any, source: str) -> str:
        """The name of the model ``item`` names: a registered name, or a reference or class it registers."""
        if isinstance(item, type):
            return self.add_class(item, source).name
        if not isinstance(item, str) or not item.strip():
            raise SpecError(
                f"{source}: {item!r} is not a workload name, import path or class",
                "name a workload (cnn), an import path (mypkg.models:MyWorkload) or a Workload class",
            )
        item = item.strip()
        if _fixtures().is_reference(item):
            return self.add_ref(item, source).name
        if item not in self._entries:
            raise SpecError(
                f"{source}: unknown workload {item!r}",
                f"pick from: {', '.join(self._entries)}, or name a Workload class as "
                "package.module:Class (docs/your-model.md)",
            )
        return item

    def _paths(self, root: str) -> tuple[str, ...]:
        # the module's own sys.path entry, then the rootdir: a module found beside conftest.py may import
        # its siblings through the rootdir pytest put on sys.path
        return tuple(dict.fromkeys(p for p in (root, *self.search_paths) if p))

    def _add(self, cls: "type[Workload]", entry: Registered) -> Registered:
        known = self._entries.get(entry.name)
        if known is not None:
            same = (
                self._classes.get(entry.name) is cls
                if known.ref
                # a built-in, compared without importing it
                else f"{cls.__module__}:{cls.__qualname__}" == _fixtures().BUILTIN[entry.name]
            )
            if same:  # the same class again (a hook and an option, or scalegate.workloads.cnn:CNN): one workload
                return known
            what = "a built-in workload" if not known.ref else f"the workload registered by {known.source}"
            raise SpecError(
                f"{entry.source}: workload name {entry.name!r} is already taken by {what}",
                f'give {cls.__qualname__} another name (name = "my_{entry.name}"), or register it once',
            )
        self._entries[entry.name] = entry
        self._classes[entry.name] = cls
        return entry


def discover(hook_impls: Iterable[Any], search_paths: Sequence[str]) -> Catalog:
    """The session's catalog: built-ins, then installed entry points, then conftest hooks (pluggy ``HookImpl``s
    of ``pytest_scaling_workloads``: each called on its own, so an error names its conftest)."""
    catalog = Catalog(search_paths)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        catalog.add_ref(ep.value, f"entry point {ep.name!r} ({ENTRY_POINT_GROUP}{f' of {dist}' if dist else ''})")
    for impl in hook_impls:
        source = f"pytest_scaling_workloads() in {getattr(impl.plugin, '__file__', None) or impl.plugin_name}"
        try:
            returned = impl.function()
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(
                f"{source} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                "fix the hook (it must return a list of Workload subclasses)",
            ) from None
        if returned is None:
            continue
        if isinstance(returned, (str, type)) or not isinstance(returned, (list, tuple)):
            raise SpecError(
                f"{source} returned {returned!r}, not a list of workload classes", "return a list, e.g. [MyWorkload]"
            )
        for cls in returned:
            catalog.add_class(cls, source)
    return catalog
