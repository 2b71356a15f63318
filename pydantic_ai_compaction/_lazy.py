"""Names of a package loaded on first use (PEP 562), shared by the package's `__init__` modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(
    package: str, where: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for *package*: each name in *where* is imported from its module when first read.

    Args:
        package: The package's `__name__`, for error messages.
        where: Name → module it is defined in.
        namespace: The package's `globals()`; a loaded name is stored there so later reads skip this.
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f'module {package!r} has no attribute {name!r}')
        loaded = importlib.import_module(module)
        # Bind every name this module provides, not only the one asked for: importing a submodule binds
        # it on its package, and a submodule named like one of its functions would then shadow that name.
        for other, where_from in where.items():
            if where_from == module:
                namespace[other] = getattr(loaded, other)
        return namespace[name]

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
