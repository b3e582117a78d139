"""Options declared once, as fields of pydantic models: type, default, bounds and help.

Everything else is derived from the model: the command lines (`add_options`, `parse_options`),
the flows' parameters (`flow_parameters`), the HTTP body of the search service and the
deployment parameters. So an option's default, bounds or help can never differ between them.

    class SplitSettings(Settings):
        chunk_size: int = option(1000, "characters per chunk", ge=1)

A field's command-line flag is `--chunk-size` unless `option(..., flag="--index")` says
otherwise; `positional()` fields are positional arguments.
"""

from __future__ import annotations

import argparse
import inspect
import types
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")


class Settings(BaseModel):
    """Base of every options model: immutable, and unknown names are an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def options(self) -> dict[str, Any]:
        """The values of the user options (what a flow with `flow_parameters` takes)."""
        return self.model_dump(include=set(option_fields(type(self))))

    def narrow(self, model: type[M]) -> M:
        """The part of these settings that `model` declares (a stage's own settings)."""
        return model.model_validate(self.model_dump(include=set(model.model_fields)))


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    several: bool = False,
    metavar: str | None = None,
    **constraints: Any,
) -> Any:
    """A field with its default, help text and bounds (`ge`, `gt`, `le`, …); see module doc.

    `choices` lists the values of a text option whose type cannot say them (the model still
    validates them). A list option is repeated (`--include A --include B`), or with
    `several` takes several values at once (`--mode vector fts`)."""
    extra: dict[str, Any] = {"flag": flag} if flag else {}
    if choices:
        extra["choices"] = list(choices)
    if several:
        extra["several"] = True
    if metavar:
        extra["metavar"] = metavar
    return Field(default, description=help, json_schema_extra=extra or None, **constraints)


def positional(help: str, **constraints: Any) -> Any:
    """A required field that the command line takes as a positional argument."""
    return Field(..., description=help, json_schema_extra={"positional": True}, **constraints)


def internal(default: Any) -> Any:
    """A field that is part of the settings (and their cache key) but not a user option."""
    return Field(default, json_schema_extra={"internal": True})


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def option_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The fields of `model` that users set: all but the `internal()` ones."""
    return {n: info for n, info in model.model_fields.items() if not _extra(info).get("internal")}


def flag(model: type[BaseModel], name: str) -> str:
    """How the command line spells field `name` of `model`."""
    info = model.model_fields[name]
    if _extra(info).get("positional"):
        return name.upper()
    return str(_extra(info).get("flag") or "--" + name.replace("_", "-"))


def _base_type(annotation: Any) -> Any:
    """`X` for `X | None`, the annotation itself otherwise."""
    if get_origin(annotation) in (Union, types.UnionType):
        kinds = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(kinds) == 1:
            return kinds[0]
    return annotation


def _argument(info: FieldInfo) -> dict[str, Any]:
    """argparse keywords for a field: action or type, choices, help with the default."""
    kind = _base_type(info.annotation)
    default = info.default
    shown = default.value if isinstance(default, Enum) else default
    help_text = info.description or ""
    if default not in (None, False, (), []) and not info.is_required():
        help_text += f" (default: {shown})"
    if kind is bool:
        action = "store_true" if not default else argparse.BooleanOptionalAction
        return {"action": action, "help": help_text}
    if get_origin(kind) is list:
        item = get_args(kind)[0]
        listed = {"nargs": "+"} if _extra(info).get("several") else {"action": "append"}
        if get_origin(item) is Literal:
            return {**listed, "choices": list(get_args(item)), "help": help_text}
        return {**listed, "type": item, "help": help_text}
    if get_origin(kind) is Literal:
        return {"choices": list(get_args(kind)), "help": help_text}
    if isinstance(kind, type) and issubclass(kind, Enum):
        return {"choices": [member.value for member in kind], "help": help_text}
    if _extra(info).get("choices"):
        return {"choices": _extra(info)["choices"], "help": help_text}
    if kind in (int, float, str):
        return {"type": kind, "help": help_text}
    return {"type": str, "help": help_text}  # dates and the like: the model parses the text


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    model: type[BaseModel],
    exclude: tuple[str, ...] = (),
) -> None:
    """Add one command-line argument per option of `model` (except `exclude`)."""
    for name, info in option_fields(model).items():
        if name in exclude:
            continue
        keywords = _argument(info)
        if _extra(info).get("metavar"):
            keywords["metavar"] = _extra(info)["metavar"]
        if _extra(info).get("positional"):  # optional here, so --help and the like need none
            parser.add_argument(name, metavar=name.upper(), nargs="?", **keywords)
            continue
        parser.add_argument(flag(model, name), dest=name, default=None, **keywords)


def parse_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, model: type[M], **fixed: Any
) -> M:
    """The model built from the parsed arguments (options left out take the model's default);
    an invalid value exits through `parser.error`, naming the option as the user typed it."""
    given = {
        name: getattr(args, name)
        for name in option_fields(model)
        if getattr(args, name, None) is not None
    }
    try:
        return model(**given, **fixed)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = error["loc"][0] if error["loc"] else ""
        name = flag(model, str(where)) if where in model.model_fields else ""
        message = error["msg"].removeprefix("Value error, ")
        parser.error(f"{name}: {message}" if name else message)


def flow_parameters(model: type[M]) -> Callable[[Callable[[M], R]], Callable[..., R]]:
    """Give a function of one settings object the model's fields as keyword parameters.

    Prefect reads a flow's parameters from its signature, so the flow shows and takes the
    options one by one (the UI's run form, deployment parameters, `-p name=value`) with the
    model's defaults and help texts, while the body receives one validated settings object.
    """

    def decorate(function: Callable[[M], R]) -> Callable[..., R]:
        def call(**values: Any) -> R:
            return function(model(**values))

        parameters = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if info.is_required() else info.default,
                annotation=info.annotation,
            )
            for name, info in option_fields(model).items()
        ]
        returns = inspect.signature(function).return_annotation
        call.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": returns}
        call.__name__, call.__qualname__ = function.__name__, function.__qualname__
        call.__module__ = function.__module__
        arguments = "\n".join(
            f"    {name}: {info.description}" for name, info in option_fields(model).items()
        )
        call.__doc__ = f"{inspect.getdoc(function) or ''}\n\nArgs:\n{arguments}\n"
        return call

    return decorate
