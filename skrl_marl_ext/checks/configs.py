"""Checks of a Runner config (skrl's YAML format) before anything is built from it: nothing in a config runs as code.

skrl's Runner calls ``eval()`` on the strings of some fields (``state_preprocessor: RunningStandardScaler``) and its
model instantiators turn a model's ``network`` and ``output`` into Python source that they ``exec``. Here:

- a class named in a config resolves from an explicit table (:data:`CLASSES`, and the Runner's model table);
- a model ``network``/``output`` is parsed with :mod:`ast` and allowed only when made of the tokens, calls and layer
  definitions skrl documents, so the source skrl generates from it holds nothing else;
- every value is checked against the annotation of the field or argument it sets (the agent's config dataclass, a
  model's, memory's or trainer's signature), and a string such as ``1e-3`` (which YAML 1.1 reads as a string) is taken
  as the number where a number is expected.

Every error is one line naming the field, what it expects and what it got, with the closest known name to an unknown
one (:func:`did_you_mean`, the package's one) and, for a key written in another section's place, the section that
takes it; a value is shown cut short (:func:`shown`), and a config whose YAML aliases expand past :data:`MAX_VALUES`
values is refused before anything expands them (:func:`check_size`). This module imports only the standard library
at import time (the command line reads it before its distributed setup); skrl classes are imported on use.
"""

from __future__ import annotations

import ast
import collections.abc
import copy
import dataclasses
import difflib
import importlib
import inspect
import keyword
import re
import reprlib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

# ---------------------------------------------------------------------------------------------------- numbers

YAML_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
"""Numbers such as ``1e-3`` or ``5.0e-4``, which YAML 1.1 (PyYAML) reads as strings."""


def yaml_float(value: Any) -> Any:
    """``value`` as a float when it is a string YAML 1.1 left unread (``'1e-3'``), else ``value`` itself."""
    return float(value) if isinstance(value, str) and YAML_FLOAT.fullmatch(value.strip()) else value


# ---------------------------------------------------------------------------------------------------- sizes

MAX_VALUES = 100_000
"""The most values a config, or one value of the command line, may hold, counted as they are met once YAML aliases
(``*name``) are expanded: a Runner config holds a few hundred, while nine levels of nine aliases make a file of under
1 KB hold 387 million."""

MAX_DEPTH = 100
"""The deepest a config may nest (a Runner config nests a few levels)."""

_CONTAINERS = (dict, list, tuple, set, frozenset)


def _items(node: Any) -> Iterable[tuple[Any, Any]]:
    return node.items() if isinstance(node, dict) else enumerate(node)


def _path(at: str, key: Any, node: Any) -> str:
    if isinstance(node, dict):
        return f"{at}.{key}" if at else str(key)
    return f"{at}[{key}]"


def check_size(where: str, value: Any, *, limit: int = MAX_VALUES, depth: int = MAX_DEPTH) -> None:
    """Refuse a value that holds more than ``limit`` values once its aliases are expanded, nests deeper than
    ``depth``, or holds itself (an alias inside its own anchor). Nothing is expanded: each shared part is counted
    once and its count reused, so the check takes the time of the text as written.

    :param where: The value's name in the message (``agent.rollouts``; empty for a whole config).

    :raises ValueError: ``<where and the path to the part>: ...``, one line.
    """
    if not isinstance(value, _CONTAINERS):
        return
    too_big = "holds more than {} values once its YAML aliases (*name) are expanded; a config holds a few hundred: "
    too_big += "write the values out, or alias fewer of them"
    counted: dict[int, int] = {}  # id of a container -> the values it holds, aliases expanded
    opened = {id(value)}  # the containers being counted: one met again holds itself
    stack = [[value, iter(_items(value)), 1, where]]  # a container, its items left, its count so far, its path
    while stack:
        frame = stack[-1]
        node, items, _, at = frame
        child = None
        for key, item in items:
            if not isinstance(item, _CONTAINERS):
                frame[2] += 1
            elif id(item) in counted:
                frame[2] += counted[id(item)]
            elif id(item) in opened:
                raise ValueError(
                    f"{_path(at, key, node)}: holds itself (a YAML alias *name inside its own &name "
                    "anchor); write the value out"
                )
            elif len(stack) >= depth:
                outer = stack[min(len(stack) - 1, 2)][3] or "the config"  # a long path cut to its outer part
                raise ValueError(f"{outer}: nested more than {depth} deep; a config nests a few levels")
            else:
                child = [item, iter(_items(item)), 1, _path(at, key, node)]
                break
            if frame[2] > limit:
                raise ValueError(f"{at or 'the config'}: {too_big.format(limit)}")
        if child is not None:
            opened.add(id(child[0]))
            stack.append(child)
            continue
        stack.pop()  # counted whole
        opened.discard(id(node))
        counted[id(node)] = frame[2]
        if stack:
            stack[-1][2] += frame[2]
            if stack[-1][2] > limit:
                raise ValueError(f"{stack[-1][3] or 'the config'}: {too_big.format(limit)}")


# ---------------------------------------------------------------------------------------------------- class names

CLASSES: dict[str, dict[str, str]] = {
    "preprocessor": {
        "RunningStandardScaler": "skrl.resources.preprocessors.torch:RunningStandardScaler",
        "ValueNorm": "skrl_marl_ext.preprocessors:ValueNorm",
    },
    "scheduler": {
        "KLAdaptiveLR": "skrl.resources.schedulers.torch:KLAdaptiveLR",
        # torch's schedulers that take the optimiser and plain numbers and step without arguments
        **{
            name: f"torch.optim.lr_scheduler:{name}"
            for name in (
                "StepLR",
                "MultiStepLR",
                "ExponentialLR",
                "LinearLR",
                "ConstantLR",
                "PolynomialLR",
                "CosineAnnealingLR",
                "CosineAnnealingWarmRestarts",
                "CyclicLR",
                "OneCycleLR",
            )
        },
    },
    "noise": {
        "GaussianNoise": "skrl.resources.noises.torch:GaussianNoise",
        "OrnsteinUhlenbeckNoise": "skrl.resources.noises.torch:OrnsteinUhlenbeckNoise",
    },
    "memory": {"RandomMemory": "skrl.memories.torch:RandomMemory"},
    "trainer": {"SequentialTrainer": "skrl.trainers.torch:SequentialTrainerCfg"},  # its arguments: the config's
}
"""The classes a config may name, by kind: ``name -> "module:attribute"`` (imported on use, never evaluated).
A name is matched case-insensitively, or as its full dotted path (``torch.optim.lr_scheduler.LinearLR``)."""

CLASS_FIELDS = {
    "learning_rate_scheduler": "scheduler",
    "observation_preprocessor": "preprocessor",
    "state_preprocessor": "preprocessor",
    "shared_state_preprocessor": "preprocessor",  # skrl 1.x name, mapped by skrl's Runner
    "value_preprocessor": "preprocessor",
    "amp_observation_preprocessor": "preprocessor",
    "exploration_noise": "noise",
    "smooth_regularization_noise": "noise",
}
"""Agent fields whose value is a class: the fields skrl's Runner evaluates, each with its kind in :data:`CLASSES`."""

FILLED_ARGUMENTS = {
    "preprocessor": {"size", "device"},
    "scheduler": {"optimizer"},
    "noise": {"device"},
    "memory": {"num_envs", "device"},
    "model": {"observation_space", "state_space", "action_space", "device", "return_source"},
}
"""Arguments the Runner or the agent passes itself, so a config does not set them."""

SKRL_INSTANTIATORS = (
    "GaussianMixin",
    "DeterministicMixin",
    "CategoricalMixin",
    "MultiCategoricalMixin",
    "MultivariateGaussianMixin",
)
"""Model classes built by skrl's model instantiators from a ``network`` and an ``output`` (checked below)."""

EXPLORATION_SCHEDULER = (
    "agent.exploration_scheduler: a config never runs code, so a scheduler expression is not read; MADDPG's "
    "exploration noise scale goes linearly from exploration_initial_scale to exploration_final_scale over "
    "exploration_timesteps: set those instead"
)


def _unknown(what: str, word: str, choices: Iterable[str]) -> str:
    """``unknown <what> 'word'. Did you mean 'x'?`` (the hint only when one is close)."""
    hint = did_you_mean(word, choices)
    return f"unknown {what} '{word}'.{hint}" if hint else f"unknown {what} '{word}'"


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` closest to ``word`` (ignoring case), None when none is close: the package's one
    did-you-mean, for every unknown name (env, scenario, class, key, option, command)."""
    lower = {str(choice).lower(): str(choice) for choice in choices}
    close = difflib.get_close_matches(str(word).lower(), list(lower), n=1)
    return lower[close[0]] if close else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` with ``x`` the :func:`closest` of ``choices`` to ``word``; empty when none is close."""
    close = closest(word, choices)
    return f" Did you mean '{close}'?" if close is not None else ""


def unknown_key_error(owner: str, key: str, known: list[str]) -> ValueError:
    """``owner: unknown config key 'key'. Did you mean '<closest>'? Valid keys: ...`` (the Runner's check uses it too)."""
    return ValueError(
        f"{owner}: unknown config key '{key}'.{did_you_mean(key, known)} Valid keys: {', '.join(sorted(known))}"
    )


def _import(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def lookup_name(where: str, name: str, known: Iterable[str], *, paths: Mapping[str, str] | None = None) -> str:
    """The known name ``name`` stands for (ignoring case; or its dotted path in ``paths``).

    :raises ValueError: On another name: ``where: unknown class 'x'. Did you mean 'y'? Known: ...``.
    """
    known = list(known)
    wanted = name.strip().lower()
    for candidate in known:
        dotted = (paths or {}).get(candidate, "").replace(":", ".").lower()
        if wanted in (candidate.lower(), dotted):
            return candidate
    raise ValueError(f"{where}: unknown class '{name}'.{did_you_mean(name, known)} Known: {', '.join(known)}")


def resolve_class(where: str, value: Any, kind: str) -> Any:
    """The class a config value names, from :data:`CLASSES` ``[kind]``; lists (pairs) and per-agent dicts of names
    resolve item by item; None (or ``"None"``/``"null"``) and classes given from Python stay as they are.

    :raises ValueError: On an unknown name (naming the closest) or a value that is no name.
    """
    if value is None or isinstance(value, type):
        return value
    if isinstance(value, (list, tuple)):
        return [resolve_class(f"{where}[{i}]", item, kind) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: resolve_class(f"{where}.{key}", item, kind) for key, item in value.items()}
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected the name of a {kind} class or null, got {shown(value)}")
    if value.strip() in ("None", "none", "null", ""):
        return None
    table = CLASSES[kind]
    return _import(table[lookup_name(where, value, table, paths=table)])


def resolve_classes(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` (a copy) with the :data:`CLASS_FIELDS` at any depth resolved to classes and ``*_kwargs: null`` made
    ``{}``: what skrl's ``Runner._process_cfg`` does with ``eval``, done with the tables."""
    cfg = dict(cfg)
    for key, value in cfg.items():
        if key in CLASS_FIELDS:
            cfg[key] = resolve_class(key, value, CLASS_FIELDS[key])
        elif isinstance(value, dict):
            cfg[key] = resolve_classes(value)
        elif key.endswith("_kwargs") and value is None:
            cfg[key] = {}
    return cfg


# ---------------------------------------------------------------------------------------------------- value types

_NAMES = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "true/false values"),
    str: ("a string", "strings"),
    dict: ("a mapping", "mappings"),
    list: ("a list", "lists"),
    type: ("a class name", "class names"),
    type(None): ("null", "nulls"),
}
_SEQUENCES = (list, tuple, collections.abc.Iterable, collections.abc.Sequence)


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 3, 80, 80
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 8


def brief(value: Any) -> str:
    """``repr(value)`` with long strings and big or deep containers cut short (``[1, 2, ...]``): a message stays one
    short line, and costs little, whatever the value (YAML aliases can make a small file a huge value)."""
    return _BRIEF.repr(value)


def shown(value: Any) -> str:
    """A received value as an error shows it (:func:`brief`): strings with their type, as a quoted number looks like
    a number."""
    return f"{brief(value)} (str)" if isinstance(value, str) else brief(value)


def describe(annotation: Any, plural: bool = False) -> str:
    """What an annotation accepts, in words (``int | dict[str, int]``: "an integer or a mapping of names to
    integers")."""
    if annotation in _NAMES:
        return _NAMES[annotation][plural]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(arg, plural) for arg in args))
    if origin is Literal:
        return repr(args[0]) if len(args) == 1 else "one of " + ", ".join(repr(arg) for arg in args)
    if origin is dict:
        return "mappings" if plural else f"a mapping of names to {describe(args[1], True)}"
    if origin is tuple and len(args) == 2 and args[1] is not Ellipsis and args[0] == args[1]:
        return "pairs" if plural else f"a pair of {describe(args[0], True)}"
    if origin in _SEQUENCES:
        return "lists" if plural else f"a list of {describe(args[0], True)}"
    if annotation is collections.abc.Callable or origin is collections.abc.Callable:
        return "callables" if plural else "a callable (set it from Python)"
    if annotation is Any:
        return "values" if plural else "any value"
    return f"{getattr(annotation, '__name__', annotation)} values" if plural else getattr(annotation, "__name__", "?")


def _match(value: Any, annotation: Any) -> tuple[bool, Any]:
    """``(whether value fits annotation, the value as it fits)``: YAML 1.1 float strings become floats where a number
    is expected, lists stand for tuples (YAML has none); an annotation not understood here accepts anything."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True, value
    if annotation is None or annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        value = yaml_float(value)
        return isinstance(value, (int, float)) and not isinstance(value, bool), value
    if annotation in (str, dict, list):
        return isinstance(value, annotation), value
    if annotation is type:
        return isinstance(value, type), value
    if annotation is collections.abc.Callable:
        return callable(value) and not isinstance(value, (str, type(None))), value
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            ok, fitted = _match(value, arg)
            if ok:
                return True, fitted
        return False, value
    if origin is Literal:
        return any(value == arg and type(value) is type(arg) for arg in args), value
    if origin is type:
        return isinstance(value, type), value
    if origin is collections.abc.Callable:
        return callable(value) and not isinstance(value, str), value
    if origin is dict or origin in _SEQUENCES:
        return _match_items(value, origin, args)
    if isinstance(annotation, type):
        return isinstance(value, annotation), value
    return True, value


def _match_items(value: Any, origin: Any, args: tuple) -> tuple[bool, Any]:
    """:func:`_match` for ``dict[str, X]`` and for lists/tuples (``tuple[X, Y]`` of that length, else any length)."""
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            return False, value
        keys, items = list(value), list(value.values())
        annotations = [args[1] if args else Any] * len(items)
    else:
        if not isinstance(value, (list, tuple)):
            return False, value
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        if fixed and len(value) != len(args):
            return False, value
        keys, items = None, list(value)
        annotations = list(args) if fixed else [args[0] if args else Any] * len(items)
    fitted = []
    for item, annotation in zip(items, annotations, strict=True):
        ok, item = _match(item, annotation)
        if not ok:
            return False, value
        fitted.append(item)
    return True, dict(zip(keys, fitted, strict=True)) if keys is not None else type(value)(fitted)


def check_value(where: str, value: Any, annotation: Any) -> Any:
    """``value`` as it fits ``annotation`` (``'1e-3'`` becomes 0.001 where a number is expected).

    :raises ValueError: ``where: expected <what annotation accepts>, got <value>``, with the reason for a string that
        was meant as a number.
    """
    ok, fitted = _match(value, annotation)
    if ok:
        return fitted
    why = ""
    if isinstance(value, str) and any(_match(number, annotation)[0] for number in (1.5, 1)):
        try:
            number = float(value)
        except ValueError:
            why = ", which is not a number"
        else:  # a quoted number, or one YAML read as a string where an integer is expected ('1e5')
            whole = number.is_integer() and not _match(number, annotation)[0]
            why = f"; write {int(number)}" if whole else "; write the number without quotes"
    elif isinstance(value, str):  # a misspelt choice
        hint = did_you_mean(value, [arg for arg in _literals(annotation) if isinstance(arg, str)])
        why = f".{hint}" if hint else ""
    raise ValueError(f"{where}: expected {describe(annotation)}, got {shown(value)}{why}")


def _literals(annotation: Any) -> list[Any]:
    """The ``Literal`` choices in ``annotation`` (also inside a union)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return list(args)
    if origin in (typing.Union, types.UnionType):
        return [choice for arg in args for choice in _literals(arg)]
    return []


# ---------------------------------------------------------------------------------------------------- arguments


@dataclasses.dataclass(frozen=True)
class Argument:
    """One keyword argument of a class or function, or one field of a config dataclass."""

    annotation: Any
    required: bool


_TYPING_NAMES = {
    "Iterable": collections.abc.Iterable,
    "Callable": collections.abc.Callable,
    "Sequence": collections.abc.Sequence,
}


def _inferred(default: Any) -> Any:
    """The annotation an unannotated argument's default implies (``(64, 64)``: a list of integers)."""
    if isinstance(default, (bool, int, float, str)):
        return type(default)
    if isinstance(default, (list, tuple)) and default:
        kinds = {type(item) for item in default}
        if len(kinds) == 1 and kinds <= {int, float}:
            return list[kinds.pop()]
    return Any


def arguments(owner: Any) -> dict[str, Argument]:
    """The keyword arguments of a class or function (a dataclass: its fields), with their annotations (inferred
    from the default where there is none)."""
    if dataclasses.is_dataclass(owner):
        hints = typing.get_type_hints(owner)
        return {
            field.name: Argument(
                hints.get(field.name, Any),
                field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING,
            )
            for field in dataclasses.fields(owner)
        }
    function = owner.__init__ if isinstance(owner, type) else owner
    try:
        hints = typing.get_type_hints(function, localns=_TYPING_NAMES)
    except Exception:  # an annotation this Python cannot read: check those arguments by their defaults
        hints = {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    result = {}
    for name, parameter in inspect.signature(owner).parameters.items():
        if parameter.kind in kinds and name != "self":
            empty = parameter.default is inspect.Parameter.empty
            result[name] = Argument(hints.get(name, Any if empty else _inferred(parameter.default)), empty)
    return result


def check_arguments(
    where: str,
    values: dict[str, Any],
    owner: Any,
    *,
    label: str,
    filled: Iterable[str] = (),
    required: bool = False,
    annotations: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``values`` (keyword arguments of ``owner``) checked by name and type; returns them as they fit.

    :param where: The section, e.g. ``models.policy``.
    :param label: The class as the error names it.
    :param filled: Arguments the Runner or the agent passes itself (refused).
    :param required: Also refuse a missing argument that has no default.
    :param annotations: Annotations that refine the signature's (an argument's accepted names, say).

    :raises ValueError: ``models.policy.hidden_sizez: GaussianMLP takes no argument 'hidden_sizez'. Did you mean
        'hidden_sizes'? Its arguments: ...``, or a type error from :func:`check_value`.
    """
    filled = set(filled)
    known = {name: argument for name, argument in arguments(owner).items() if name not in filled}
    fitted = {}
    for key, value in values.items():
        if key in filled:
            raise ValueError(f"{where}.{key}: the Runner sets {key} of {label} itself; leave it out")
        if key not in known:
            raise _UnknownKey(
                f"{where}.{key}: {label} takes no argument '{key}'.{did_you_mean(key, known)} "
                f"Its arguments: {', '.join(sorted(known))}",
                section=where,
                key=key,
            )
        annotation = (annotations or {}).get(key, known[key].annotation)
        fitted[key] = check_value(f"{where}.{key}", value, annotation)
    missing = [name for name, argument in known.items() if required and argument.required and name not in values]
    if missing:
        raise ValueError(f"{where}: {label} needs {', '.join(repr(name) for name in missing)}")
    return fitted


# ---------------------------------------------------------------------------------------------------- networks

NETWORK_TOKENS = (
    "OBSERVATIONS",
    "STATES",
    "ACTIONS",
    "ONE",
    "OBSERVATION_SPACE",
    "STATE_SPACE",
    "ACTION_SPACE",
    "NUM_OBSERVATIONS",
    "NUM_STATES",
    "NUM_ACTIONS",
)
"""The names skrl's instantiators substitute in a ``network``'s ``input`` and a model's ``output``."""

SKRL_ACTIVATIONS = ("elu", "leaky_relu", "relu", "selu", "sigmoid", "softmax", "softplus", "softsign", "tanh")
"""skrl's activation names (``skrl.utils.model_instantiators.torch.common._get_activation_function``)."""

INPUT_CALLS = ("concatenate", "permute", "one_hot_encoding")
OUTPUT_CALLS = ("concatenate", "one_hot_encoding", *SKRL_ACTIVATIONS)

_RESERVED = {"self", "inputs", "role", "output", "observations", "states", "taken_actions", "torch", "nn"}
"""Names in the code skrl generates, which a container's name would shadow."""

_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)

_LAYER_KEYS = {
    "linear": {"out_features", "features", "in_features", "bias", "use_bias"},
    "conv2d": {
        "out_channels",
        "features",
        "in_channels",
        "kernel_size",
        "stride",
        "strides",
        "padding",
        "dilation",
        "groups",
        "bias",
        "use_bias",
        "padding_mode",
    },
    "flatten": {"start_dim", "end_dim"},
}
"""Per layer kind, the keyword arguments skrl writes into its source as ``key=value``."""

_LAYER_WORDS = {
    "out_features": {"ONE", "NUM_OBSERVATIONS", "NUM_STATES", "NUM_ACTIONS", "OBSERVATIONS", "STATES", "ACTIONS"},
    "in_features": {"ONE", "NUM_OBSERVATIONS", "NUM_STATES", "NUM_ACTIONS", "OBSERVATIONS", "STATES", "ACTIONS"},
    "features": {"ONE", "NUM_OBSERVATIONS", "NUM_STATES", "NUM_ACTIONS", "OBSERVATIONS", "STATES", "ACTIONS"},
    "padding": {"same", "valid"},
    "padding_mode": {"zeros", "reflect", "replicate", "circular"},
}
"""The strings a layer argument may hold (skrl maps the sizes to ``self.num_*``, quotes the conv2d words)."""


def _refusal(node: ast.AST, names: set[str], calls: tuple[str, ...], *, index: bool = False) -> str | None:
    """Why ``node`` may not be in a network expression; None when it may. ``index``: inside a subscript, where a
    string key (a Dict space's entry) and ``...`` may also appear."""

    def first(*children: ast.AST | None, index: bool = False) -> str | None:
        return next((r for c in children if c is not None and (r := _refusal(c, names, calls, index=index))), None)

    if isinstance(node, ast.Name):
        return None if node.id in names else _unknown("name", node.id, names)
    if isinstance(node, ast.Constant):
        value = node.value
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        allowed = number or (index and (isinstance(value, str) or value is Ellipsis))
        return None if allowed else f"constant {brief(value)}"
    if isinstance(node, (ast.Tuple, ast.List)):
        return first(*node.elts, index=index)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        return first(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
        return first(node.left, node.right)
    if isinstance(node, ast.Call):
        function = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        if function not in calls:
            return _unknown("function", function, calls)
        if any(keyword.arg is None for keyword in node.keywords):
            return "'**' in a call"
        return first(*node.args, *(keyword.value for keyword in node.keywords))
    if isinstance(node, ast.Subscript):
        return first(node.value) or first(node.slice, index=True)
    if isinstance(node, ast.Slice) and index:
        return first(node.lower, node.upper, node.step)
    return f"'{ast.unparse(node)}' is not allowed there"


def check_expression(where: str, text: Any, *, names: Iterable[str], calls: tuple[str, ...]) -> str:
    """A network ``input`` or ``output`` allowed only when it is made of ``names`` (skrl's tokens, earlier
    containers), numbers, tuples/lists, arithmetic, subscripts and calls of ``calls``.

    :raises ValueError: Naming the field, the expression and the first part that is not allowed.
    """
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected an expression such as OBSERVATIONS (a string), got {shown(text)}")
    names = set(names)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        reason = "it does not parse"
    else:
        reason = _refusal(tree.body, names, calls)
    if reason:
        raise ValueError(
            f"{where}: {brief(text)} is not a network expression skrl documents ({reason}); a config never runs code: use "
            f"{', '.join(sorted(names))}, numbers, arithmetic, subscripts and {', '.join(calls)}(...)"
        )
    return text


def _check_layer(where: str, layer: Any) -> None:
    """A ``layers`` entry: a width, ``flatten``, or ``{linear|conv2d|flatten: width | [values] | {key: value}}``."""
    expected = "a width (positive integer), 'flatten', or {linear|conv2d|flatten: arguments}"
    if isinstance(layer, int) and not isinstance(layer, bool) and layer > 0 or layer == "flatten":
        return
    if not (isinstance(layer, dict) and len(layer) == 1 and next(iter(layer)) in _LAYER_KEYS):
        raise ValueError(f"{where}: expected {expected}, got {shown(layer)}")
    kind, spec = next(iter(layer.items()))
    at = f"{where}.{kind}"
    plain = int | bool | list[int] | tuple[int, ...]  # what a list form holds (skrl writes the items as they are)
    if kind == "linear" and isinstance(spec, int) and not isinstance(spec, bool) and spec > 0:
        return
    if isinstance(spec, list):
        limit = {"linear": 2, "conv2d": 5, "flatten": 2}[kind]
        if len(spec) > limit:
            raise ValueError(f"{at}: a {kind} list holds at most {limit} values, got {shown(spec)}")
        for i, item in enumerate(spec):
            check_value(f"{at}[{i}]", item, plain)
        return
    if not isinstance(spec, dict):
        raise ValueError(f"{at}: expected a list or a mapping of {kind} arguments, got {shown(spec)}")
    for key, value in spec.items():
        if key not in _LAYER_KEYS[kind]:
            raise ValueError(
                f"{at}.{key}: not a {kind} argument skrl reads.{did_you_mean(str(key), _LAYER_KEYS[kind])} "
                f"Arguments: {', '.join(sorted(_LAYER_KEYS[kind]))}"
            )
        words = _LAYER_WORDS.get(key)
        if words and isinstance(value, str):
            if value in words or (key.startswith("padding") and value.lower() in words):
                continue
            raise ValueError(
                f"{at}.{key}: expected an integer or one of {', '.join(sorted(words))}, got {shown(value)}"
            )
        check_value(f"{at}.{key}", value, plain)


def _check_activations(where: str, activations: Any, layers: int) -> None:
    if isinstance(activations, str):
        activations = [activations]
    if not isinstance(activations, list):
        raise ValueError(f"{where}: expected an activation name or a list of them, got {shown(activations)}")
    if len(activations) not in (0, 1, layers):
        raise ValueError(
            f"{where}: give one activation for all layers or one per layer ({layers}), got {shown(activations)}"
        )
    for i, name in enumerate(activations):
        if not (isinstance(name, str) and name.lower() in SKRL_ACTIVATIONS):
            raise ValueError(
                f"{where}[{i}]: unknown activation {shown(name)}.{did_you_mean(str(name), SKRL_ACTIVATIONS)} "
                f"skrl's: {', '.join(SKRL_ACTIVATIONS)}"
            )


def check_network(where: str, network: Any) -> list[str]:
    """A skrl instantiator ``network`` (containers of ``name``, ``input``, ``layers``, ``activations``); returns the
    container names (which the ``output`` may use).

    :raises ValueError: On anything skrl would write into its source that is not a documented token, layer or name.
    """
    if not isinstance(network, list) or not network:
        raise ValueError(
            f"{where}: expected a list of containers ({{name, input, layers, activations}}), got {shown(network)}"
        )
    keys = ("name", "input", "layers", "activations")
    names: list[str] = []
    for i, container in enumerate(network):
        at = f"{where}[{i}]"
        if not isinstance(container, dict):
            raise ValueError(
                f"{at}: expected a container ({{name, input, layers, activations}}), got {shown(container)}"
            )
        for key in container:
            if key not in keys:
                raise ValueError(
                    f"{at}.{key}: not a container key.{did_you_mean(str(key), keys)} Keys: {', '.join(keys)}"
                )
        for key in keys[:3]:
            if key not in container:
                raise ValueError(f"{at}: a container needs '{key}'")
        name = container["name"]
        if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)):
            raise ValueError(f"{at}.name: expected a Python identifier (letters, digits, _), got {shown(name)}")
        if name in _RESERVED or name in names or any(token in name for token in NETWORK_TOKENS):
            raise ValueError(
                f"{at}.name: '{name}' is taken (an earlier container, a token or a name in skrl's generated code); "
                "choose another, e.g. net or features"
            )
        check_expression(f"{at}.input", container["input"], names=[*NETWORK_TOKENS, *names], calls=INPUT_CALLS)
        layers = container["layers"]
        if not isinstance(layers, list):
            raise ValueError(f"{at}.layers: expected a list of layers, got {shown(layers)}")
        for j, layer in enumerate(layers):
            _check_layer(f"{at}.layers[{j}]", layer)
        _check_activations(f"{at}.activations", container.get("activations", []), len(layers))
        names.append(name)
    return names


# ---------------------------------------------------------------------------------------------------- a Runner config

SECTIONS = ("seed", "models", "memory", "agent", "trainer")

RUNNER_AGENT_KEYS: dict[str, Any] = {"rewards_shaper_scale": float | None}  # the Runner makes it a rewards_shaper
"""Agent keys a Runner config may hold besides its config dataclass's fields."""

LEGACY_AGENT_KEYS: dict[str, Any] = {
    "lambda": float,
    "clip_predicted_values": bool,
    "shared_state_preprocessor": type | None | dict,
    "shared_state_preprocessor_kwargs": dict,
    "random_timesteps": int,
    "learning_starts": int,
}
"""skrl 1.x agent keys, which skrl's Runner maps (random_timesteps and learning_starts: dropped for on-policy agents)."""

MADDPG_AGENT_KEYS: dict[str, Any] = {"exploration_noise_kwargs": dict, "smooth_regularization_noise_kwargs": dict}
"""skrl 2.x DDPG/TD3 keys: the noise class's arguments (the Runner builds the noise)."""


def _section_error(where: str, value: Any) -> ValueError:
    return ValueError(f"{where}: expected a section (a mapping of keys to values), got {shown(value)}")


def _section(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _section_error(where, value)
    return value


class _UnknownKey(ValueError):
    """A key its section does not take (``section`` empty: a top-level key); :func:`check_config` names the section
    that takes it, if one does."""

    def __init__(self, message: str, *, section: str, key: Any) -> None:
        super().__init__(message)
        self.section, self.key = section, key


_KINDS = {
    "agent": "an agent key",
    "agent.experiment": "a key of agent.experiment",
    "memory": "a memory argument",
    "trainer": "a trainer argument",
    "models.policy": "a model argument",
}
"""The sections :func:`places_of` finds a key in, as a message names what the key is there."""


def _misplaced(error: _UnknownKey, *, cfg_class: type, models: Mapping[str, Any]) -> str | None:
    """``trainer.learning_rate: 'learning_rate' is an agent key: write it as agent.learning_rate`` for a key that
    ``error``'s section does not take and another section does; None when no other section takes it."""
    section, key = error.section, str(error.key)
    role = section.startswith("models.") and section.count(".") == 1  # models.<role>: a model's arguments
    if not (role or section in ("", "models", *_KINDS)):
        return None  # the arguments of a class a key names (agent.learning_rate_scheduler_kwargs)
    here = "models.policy" if role else section
    places = [
        place
        for place in places_of(key, cfg_classes=[cfg_class], models=models, close=False)
        if place.rpartition(".")[0] != here
    ]
    if not places:
        return None
    what = " and ".join(dict.fromkeys(_KINDS[place.rpartition(".")[0]] for place in places))
    writes = [f"{place} (or under another model)" if place.startswith("models.") else place for place in places]
    return f"{f'{section}.{key}' if section else key}: '{key}' is {what}: write it as {' or '.join(writes)}"


def _class_name(where: str, section: dict[str, Any], known: Mapping[str, Any]) -> str:
    """The known class ``section["class"]`` names, spelled as ``known`` spells it."""
    name = section["class"]
    if not isinstance(name, str):
        raise ValueError(f"{where}.class: expected a class name, got {shown(name)}")
    return lookup_name(f"{where}.class", name, known)


def check_agent(
    section: Any, *, owner: str, cfg_class: type, algorithm: str, possible_agents: Iterable[str] = ()
) -> dict[str, Any]:
    """The ``agent`` section checked key by key against ``cfg_class`` (and the Runner's own keys); class names
    resolved; ``*_kwargs: null`` made ``{}``; each class's arguments checked.

    :raises ValueError: On an unknown key (``MAPPO: unknown config key 'x'. Did you mean 'y'?``), an unknown class, a
        value of another type, or a class argument it does not take.
    """
    from skrl.multi_agents.torch import ExperimentCfg

    section = _section("agent", section)
    fields = {name: argument.annotation for name, argument in arguments(cfg_class).items()}
    current = {**RUNNER_AGENT_KEYS, **(MADDPG_AGENT_KEYS if algorithm == "maddpg" else {}), **fields}
    known = {**LEGACY_AGENT_KEYS, **current}
    fitted: dict[str, Any] = {}
    for key, value in section.items():
        where = f"agent.{key}"
        if key == "class":
            fitted[key] = value
            continue
        if key == "exploration_scheduler":
            raise ValueError(EXPLORATION_SCHEDULER)
        if key not in known:
            raise _UnknownKey(str(unknown_key_error(owner, key, list(current))), section="agent", key=key)
        if key in CLASS_FIELDS:
            value = resolve_class(where, value, CLASS_FIELDS[key])
        elif key.endswith("_kwargs") and value is None:
            value = {}
        if key == "experiment":  # a section of its own (None: the defaults)
            if value is not None and not isinstance(value, ExperimentCfg):
                value = _check_experiment(_section(where, value), owner=owner, cfg_class=ExperimentCfg)
            fitted[key] = value
            continue
        fitted[key] = check_value(where, value, known[key])
    agents = set(possible_agents)
    for field, kind in CLASS_FIELDS.items():
        cls, kwargs = fitted.get(field), fitted.get(f"{field}_kwargs") or {}
        per_agent = isinstance(kwargs, dict) and kwargs and set(kwargs) <= agents
        if isinstance(cls, type) and isinstance(kwargs, dict) and not per_agent:
            where = f"agent.{field}_kwargs"
            fitted_kwargs = check_arguments(
                where, kwargs, cls, label=cls.__name__, filled=FILLED_ARGUMENTS[kind], required=True
            )
            if f"{field}_kwargs" in fitted:
                fitted[f"{field}_kwargs"] = fitted_kwargs
    return fitted


def _check_experiment(section: dict[str, Any], *, owner: str, cfg_class: type) -> dict[str, Any]:
    known = arguments(cfg_class)
    fitted = {}
    for key, value in section.items():
        if key not in known:
            error = unknown_key_error(f"{owner} cfg.experiment", key, list(known))
            raise _UnknownKey(str(error), section="agent.experiment", key=key)
        fitted[key] = check_value(f"agent.experiment.{key}", value, known[key].annotation)
    return fitted


def check_models(
    section: Any, *, models: Mapping[str, Any], allow_null: bool = False, activations: Iterable[str] = ()
) -> dict[str, Any]:
    """The ``models`` section: ``separate``/``share_across_agents``/``team_critic`` flags and one section per model
    role, each with a known ``class`` (written back as the table spells it) and arguments of that class.

    :param models: Model class name -> the function or class whose signature lists its arguments.
    :param allow_null: Roles may be null (MADDPG: a left-out critic_2).
    :param activations: The ``activation`` names this package's own models take.

    :raises ValueError: On a role that is no identifier, an unknown class, an argument the class does not take or
        of another type, or a skrl ``network``/``output`` that is not made of skrl's documented parts.
    """
    section = _section("models", section)
    ours = {"activation": Literal[tuple(activations)]} if activations else {}
    fitted: dict[str, Any] = {}
    for role, value in section.items():
        where = f"models.{role}"
        if role in ("separate", "share_across_agents", "team_critic"):
            fitted[role] = check_value(where, value, bool)
            continue
        if not (isinstance(role, str) and role.isidentifier() and not keyword.iskeyword(role)):
            raise ValueError(
                f"{where}: a model role must be a Python identifier (letters, digits, _), got {brief(role)}"
            )
        if value is None and allow_null:
            fitted[role] = None
            continue
        if not isinstance(value, dict):  # a key of another section, maybe (models: {rollouts: 64})
            raise _UnknownKey(str(_section_error(where, value)), section="models", key=role)
        if "class" not in value:  # the Runner's builders say which role needs one
            fitted[role] = value
            continue
        name = _class_name(where, value, models)
        owner = models[name]
        values = {key: item for key, item in value.items() if key != "class"}
        skrl = name in SKRL_INSTANTIATORS
        label = name if skrl else getattr(owner, "__name__", name)
        args = check_arguments(
            where, values, owner, label=label, filled=FILLED_ARGUMENTS["model"], annotations=None if skrl else ours
        )
        if skrl:
            containers = check_network(f"{where}.network", args.get("network"))
            output = args.get("output", "")
            if output != "":  # skrl's default: the last container's output
                names = [*NETWORK_TOKENS, *containers]
                check_expression(f"{where}.output", output, names=names, calls=OUTPUT_CALLS)
        fitted[role] = {"class": name, **args}
    if fitted.get("separate") is False:
        for role, value in fitted.items():
            if isinstance(value, dict) and value.get("class") not in SKRL_INSTANTIATORS:
                raise ValueError(
                    f"models.{role}.class: with models.separate false skrl builds one shared model from its "
                    f"instantiators, so the class must be one of {', '.join(SKRL_INSTANTIATORS)}; got "
                    f"{brief(value.get('class'))} (or set separate: true)"
                )
    return fitted


def check_config(
    cfg: Any,
    *,
    owner: str,
    cfg_class: type,
    algorithm: str,
    models: Mapping[str, Any],
    possible_agents: Iterable[str] = (),
    activations: Iterable[str] = (),
) -> dict[str, Any]:
    """A checked copy of a Runner config: every section's keys and values by name and type, class names resolved
    (agent fields) or spelled as the tables spell them (models, memory, trainer). Nothing in it is evaluated.

    :param owner: The agent class's name (``MAPPO``), as errors name it.
    :param cfg_class: Its config dataclass.
    :param algorithm: ``mappo``, ``ippo``, ``happo`` or ``maddpg``.
    :param models: Model class name -> the function or class whose signature lists its arguments.
    :param possible_agents: Agent names (keys of per-agent dicts).
    :param activations: The ``activation`` names this package's own models take.

    :raises ValueError: One line naming the field, what it expects and what it got; for a key another section takes
        (``trainer.learning_rate``), that section (``write it as agent.learning_rate``); for a config of more than
        :data:`MAX_VALUES` values once its aliases are expanded, the part that holds them.
    """
    if not isinstance(cfg, dict):
        raise ValueError(f"config: expected a mapping of sections ({', '.join(SECTIONS)}), got {shown(cfg)}")
    check_size("", cfg)
    checked = copy.copy(cfg)
    for key, value in cfg.items():
        try:
            checked[key] = _check_section(
                key,
                value,
                owner=owner,
                cfg_class=cfg_class,
                algorithm=algorithm,
                models=models,
                possible_agents=possible_agents,
                activations=activations,
            )
        except _UnknownKey as e:
            raise ValueError(_misplaced(e, cfg_class=cfg_class, models=models) or str(e)) from None
    return checked


def _check_section(
    key: Any,
    value: Any,
    *,
    owner: str,
    cfg_class: type,
    algorithm: str,
    models: Mapping[str, Any],
    possible_agents: Iterable[str],
    activations: Iterable[str],
) -> Any:
    """One top-level entry of a Runner config, checked as :func:`check_config` says."""
    if key not in SECTIONS:
        raise _UnknownKey(
            f"{key}: unknown config section.{did_you_mean(str(key), SECTIONS)} Sections: {', '.join(SECTIONS)}",
            section="",
            key=key,
        )
    if key == "seed":
        return check_value("seed", value, int | None)
    if key == "models":
        return check_models(value, models=models, allow_null=algorithm == "maddpg", activations=activations)
    if key == "agent":
        return check_agent(
            value, owner=owner, cfg_class=cfg_class, algorithm=algorithm, possible_agents=possible_agents
        )
    section = dict(_section(key, value))  # memory, trainer: a class and its arguments
    table = CLASSES[key]
    if "class" in section:
        section["class"] = _class_name(key, section, table)
    label = section.get("class") or next(iter(table))
    values = {k: v for k, v in section.items() if k != "class"}
    args = check_arguments(key, values, _import(table[label]), label=label, filled=FILLED_ARGUMENTS.get(key, ()))
    return {**({"class": section["class"]} if "class" in section else {}), **args}


def places_of(key: str, *, cfg_classes: Iterable[type], models: Mapping[str, Any], close: bool = True) -> list[str]:
    """Where a Runner config takes ``key`` (or, when nowhere, the closest key) as dotted paths: ``agent.<key>`` (a field
    of one of ``cfg_classes``), ``agent.experiment.<key>``, ``memory.<key>``, ``trainer.<key>``, or
    ``models.policy.<key>`` for a model argument. For a key written without its section.

    :param cfg_classes: The agents' config dataclasses.
    :param models: Model class name -> the function or class whose signature lists its arguments.
    :param close: Whether to look for the closest key when none is ``key``.
    """
    from skrl.multi_agents.torch import ExperimentCfg

    agent = {*RUNNER_AGENT_KEYS, *MADDPG_AGENT_KEYS}.union(*(arguments(cls) for cls in cfg_classes))
    sections = {
        "agent": agent,
        "agent.experiment": set(arguments(ExperimentCfg)),
        "memory": set(arguments(_import(CLASSES["memory"]["RandomMemory"]))) - FILLED_ARGUMENTS["memory"],
        "trainer": set(arguments(_import(CLASSES["trainer"]["SequentialTrainer"]))),
        "models.policy": {name for owner in models.values() for name in arguments(owner)} - FILLED_ARGUMENTS["model"],
    }
    every = sorted(set().union(*sections.values()))
    if key not in every:
        near = closest(key, every) if close else None
        if near is None:
            return []
        key = near
    return [f"{section}.{key}" for section, keys in sections.items() if key in keys]
