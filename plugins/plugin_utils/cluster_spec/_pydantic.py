"""pydantic for the spec package, or inert stand-ins where it is not installed.

The controller needs pydantic (requirements.txt) and every entry point says so clearly
(:data:`HAS_PYDANTIC`, :func:`require_pydantic`). The stand-ins exist for one reason:
ansible-test's import sanity test imports every file under ``plugins/`` in an environment
that has only ansible-core's own requirements. With them each module of this package
imports there; any real use without pydantic raises :class:`MissingPydantic`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError, model_validator
    from pydantic.fields import FieldInfo
    from pydantic_core import PydanticCustomError, PydanticUndefined

    HAS_PYDANTIC = True
    PYDANTIC_IMPORT_ERROR: ImportError | None = None
else:
    try:
        from pydantic import (  # noqa: F401
            BaseModel,
            BeforeValidator,
            ConfigDict,
            Field,
            Strict,
            ValidationError,
            model_validator,
        )
        from pydantic.fields import FieldInfo  # noqa: F401
        from pydantic_core import PydanticCustomError, PydanticUndefined  # noqa: F401

        HAS_PYDANTIC = True
        PYDANTIC_IMPORT_ERROR = None
    except ImportError as exc:
        HAS_PYDANTIC = False
        PYDANTIC_IMPORT_ERROR = exc

        def _inert(*args: Any, **kwargs: Any) -> None:
            return None

        def model_validator(*args: Any, **kwargs: Any) -> Any:
            return lambda function: function

        def Field(*args: Any, **kwargs: Any) -> Any:  # noqa: N802
            return kwargs.get("default")

        class BaseModel:
            model_fields: dict[str, Any] = {}

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise MissingPydantic()

            @classmethod
            def model_validate(cls, *args: Any, **kwargs: Any) -> Any:
                raise MissingPydantic()

        class ValidationError(Exception):
            pass

        class PydanticCustomError(Exception):
            pass

        class FieldInfo:
            pass

        BeforeValidator = Strict = _inert
        ConfigDict = dict
        PydanticUndefined = object()


INSTALL_HINT = ("install pydantic on the controller: aiinfra.datapath validates and plans the cluster spec "
                "there (the nodes need only Python 3), so the Python that runs ansible-playbook needs the "
                "package pydantic v2: python3 -m pip install 'pydantic>=2,<3' (or the collection's "
                "requirements.txt; an execution environment built from execution-environment.yml has it)")


class MissingPydantic(ImportError):
    def __init__(self) -> None:
        import sys
        super().__init__(f"{INSTALL_HINT}; {sys.executable} could not import it: {PYDANTIC_IMPORT_ERROR}")


def require_pydantic() -> None:
    if not HAS_PYDANTIC:
        raise MissingPydantic()
