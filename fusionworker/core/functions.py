"""Jobs name their function as ``module:function``; this module guards that name.

Invariant 6 (no code execution from data): **default deny.** A job may run
only a function that is

* registered in the running process (``@fusionworker.job`` / ``register()``,
  see :mod:`fusionworker.registry`): its exact ``module:qualname``, or
* defined in a module on the allow-list ``FUSIONWORKER_ALLOWED_MODULES``
  (matching on whole dotted components: ``app`` admits ``app`` and
  ``app.tasks`` but not ``apple``).

An *allowed* tuple mixes both: entries with a ``:`` are exact registered
references, the others module prefixes. Empty: nothing may run.

The attribute path after the ``:`` is walked one component at a time and
every step is checked, so a name cannot escape through what an allowed
module happens to import: a component may not start with ``_`` (no dunders,
no privates), may not be a module (``app:os.system``, ``app:sub.attr``), and
must have been *defined* in an allowed module (its ``__module__``;
``app:system`` after ``from os import system`` in app names ``posix.system``
and is refused). A registered reference must lead to the very function that
was registered (same ``__module__:__qualname__``).

What a walk through the allow-list may end on: a *function* (``def`` or
``async def``, at module level or a ``staticmethod`` reached through its
class) or an ``@job`` handle. A class (a ``subprocess.Popen`` subclass would
run its constructor with the job's arguments), a method bound to an instance or
a class (``classmethod``), and any other callable object are refused unless
the allowed tuple holds :data:`CALLABLES` (the setting
``FUSIONWORKER_ALLOW_CALLABLES``). A registered reference names its function
exactly and is not restricted further.

The check runs at enqueue (nothing is written for a refused name; for the
walk the producer imports an allowed module, and checks only the name if it
cannot), again in the worker before forking (:func:`verify_loaded`: the name,
and the walk if the module is imported there; both remember a walk that
passed) and in the horse (all): by the horse itself, or, once the fork server
preloaded the function's module, by the server, whose result every horse it
forks inherits with the very module state it was computed on
(``forkserver._remember``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from ..exceptions import FunctionNotAllowed, InvalidFunction

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ATTR = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$")


def func_ref(func: str | Callable[..., Any]) -> str:
    """``"module:name"`` for a reference string or a module-level callable."""
    if isinstance(func, str):
        parse_func_ref(func)
        return func
    owner = getattr(func, "__self__", None)
    if isinstance(func, types.MethodType) and not isinstance(owner, type):
        # the instance would be lost: the reference names the class's plain function
        raise InvalidFunction(
            f"{func!r} is a bound method: a job is run by name, without its instance; "
            "enqueue a module-level function (or a staticmethod/classmethod) and pass "
            "the instance's data as arguments"
        )
    if type(func).__name__ == "Callback" and callable(getattr(func, "func", None)):
        raise InvalidFunction(f"{func!r} is RQ's Callback: pass the function itself "
                              f"(on_success=f); its run takes the job's id")
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if module == "__main__" and qualname and "<" not in qualname:
        raise InvalidFunction(
            f"{qualname} is defined in the script being run (__main__): a worker imports a "
            f"job's function by its module's name, which a script does not have; move it "
            f"to a module the worker imports (app/tasks.py, worker --import app.tasks), or "
            f"run the script as a module (python -m app.script)")
    if not module or not qualname or "<" in qualname or module == "__main__":
        raise InvalidFunction(
            f"{func!r} is not a module-level callable importable by name; pass 'module:function'"
        )
    return f"{module}:{qualname}"


def parse_func_ref(ref: str) -> tuple[str, str]:
    """Split ``module:attr``; raise :class:`InvalidFunction` on anything else."""
    module, sep, attr = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not _MODULE.match(module) or not _ATTR.match(attr):
        dotted = ref.rpartition(".") if isinstance(ref, str) and not sep else ("", "", "")
        hint = (f"; did you mean '{dotted[0]}:{dotted[2]}'?" if _MODULE.match(dotted[0])
                and _ATTR.match(dotted[2]) else "")
        raise InvalidFunction(
            f"invalid function reference {ref!r}: expected 'module:function' "
            f"(e.g. 'app.tasks:send_sms'; private names are not callable as jobs){hint}"
        )
    return module, attr


#: the entry of an *allowed* tuple that lets allow-listed classes, bound methods and
#: callable objects run too (``FUSIONWORKER_ALLOW_CALLABLES``); never a module name
CALLABLES = "+callables"


def _matches(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def split_allowed(allowed: Iterable[str]) -> tuple[tuple[str, ...], frozenset[str]]:
    """(module prefixes, exact registered references) of an *allowed* tuple."""
    return _split(tuple(allowed))


@functools.lru_cache(maxsize=64)
def _split(allowed: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]]:
    return (tuple(a for a in allowed if ":" not in a and a != CALLABLES),
            frozenset(a for a in allowed if ":" in a))


#: the one line a refusal ends with: what to set
HOW_TO_ALLOW = ("register the function with @fusionworker.job (and name its module in "
                "FUSIONWORKER_IMPORTS for the worker) or set FUSIONWORKER_ALLOWED_MODULES")


def check_allowed(ref: str, allowed: Iterable[str] = ()) -> tuple[str, str]:
    """Validate ``ref`` by name against ``allowed`` (default deny; no import)."""
    module, attr = parse_func_ref(ref)
    prefixes, refs = split_allowed(allowed)
    if ref in refs or _matches(module, prefixes):
        return module, attr
    if not prefixes and not refs:
        raise FunctionNotAllowed(f"{ref!r} is not allowed: nothing is (default deny); "
                                 + HOW_TO_ALLOW)
    listed = ",".join(prefixes) or "(unset)"
    raise FunctionNotAllowed(
        f"{ref!r} is neither a registered job function nor in an allowed module "
        f"(FUSIONWORKER_ALLOWED_MODULES={listed})")


def _walk(ref: str, module_obj: Any, attr: str, allowed: Iterable[str]) -> Any:
    """Follow ``attr`` from the module, checking every step (module docstring)."""
    allowed = tuple(allowed)
    prefixes, refs = split_allowed(allowed)
    registered = ref in refs
    obj = module_obj
    for part in attr.split("."):
        if part.startswith("_"):
            raise FunctionNotAllowed(f"{ref!r}: private or dunder name {part!r}")
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidFunction(f"{ref!r}: no attribute {part!r}") from None
        if isinstance(obj, types.ModuleType):
            raise FunctionNotAllowed(f"{ref!r}: {part!r} is a module, not a function")
        owner = getattr(obj, "__module__", None)
        if not registered and (not isinstance(owner, str) or not _matches(owner, prefixes)):
            raise FunctionNotAllowed(
                f"{ref!r}: {part!r} is defined in {owner!r}, not in an allowed module")
    if registered:
        here = f"{getattr(obj, '__module__', None)}:{getattr(obj, '__qualname__', None)}"
        if here != ref:
            raise FunctionNotAllowed(f"{ref!r} leads to {here!r}, not the registered function")
    if not callable(obj):
        raise InvalidFunction(f"{ref!r} is not callable")
    if not registered and not _a_function(obj) and CALLABLES not in allowed:
        raise FunctionNotAllowed(
            f"{ref!r} is {_kind(obj)}, not a function: only functions of allowed modules run "
            "as jobs (FUSIONWORKER_ALLOW_CALLABLES=1 admits classes, methods and callable "
            "objects too)")
    return obj


def _a_function(obj: Any) -> bool:
    """A plain function (``def``/``async def``; a staticmethod read through its class)
    or an ``@job`` handle of one."""
    return isinstance(obj, types.FunctionType) or (
        getattr(type(obj), "is_job_handle", False) is True
        and isinstance(getattr(obj, "func", None), types.FunctionType))


def _kind(obj: Any) -> str:
    if isinstance(obj, type):
        return "a class"
    if isinstance(obj, types.MethodType):
        return ("a classmethod" if isinstance(obj.__self__, type)
                else "a method bound to an instance")
    if isinstance(obj, types.BuiltinFunctionType):
        return "a built-in function"
    return f"a callable {type(obj).__name__} object"


#: (ref, allowed) pairs whose full walk passed in this process (bulk enqueue repeats them)
_WALKED: set[tuple[str, tuple[str, ...]]] = set()
_WALKED_MAX = 4096


#: modules this process must not import to check a name (:func:`keep_out`), and those
#: it could not import (:func:`verify`: not tried again, each try searches sys.path)
_KEPT_OUT: set[str] = set()
_KEPT_OUT_MAX = 4096


#: job modules :func:`verify` imported into this process to check a reference
_IMPORTED: set[str] = set()


def forget_loaded() -> None:
    """A reload (a worker's SIGHUP: new code on disk): drop the job modules
    :func:`verify` imported here, and every walk learnt from them, so the next check
    imports the code afresh. A worker that enqueued a callback held such a copy from
    then on, and refused a function added to its module after it, reload or not."""
    for name in _IMPORTED:     # and its submodules (a package re-exporting one)
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            sys.modules.pop(loaded, None)
    _IMPORTED.clear()
    _WALKED.clear()


def keep_out(modules: Iterable[str]) -> None:
    """A worker's ``--import`` modules, which its own process never imports (models
    loaded once: ``runtime/imports.py``): :func:`verify` checks their references by name
    only there (the horse checks them in full)."""
    _KEPT_OUT.update(modules)


def verify(ref: str, allowed: Iterable[str] = ()) -> None:
    """The producer's check: by name, then the attribute walk.

    The walk needs the module: an allowed one is imported here (once per
    process; it is trusted code by the allow-list's definition). If the
    producer cannot import it (the job code is deployed on the workers
    only), only the name is checked here and the worker checks the rest.
    A walk that passed is remembered for the same ``allowed`` (a module's
    functions do not move once imported), and so is a module that could not be
    imported (its references are checked by name from then on, without searching
    ``sys.path`` again at every enqueue); the worker checks every job again.
    """
    allowed = tuple(allowed)
    if (ref, allowed) in _WALKED:
        return
    module_name, attr = check_allowed(ref, allowed)
    module_obj = sys.modules.get(module_name)
    if module_obj is None:
        if module_name in _KEPT_OUT:      # a worker's --import module: checked by name
            return
        try:
            module_obj = importlib.import_module(module_name)
        except ImportError:
            if len(_KEPT_OUT) < _KEPT_OUT_MAX:
                _KEPT_OUT.add(module_name)
            return
        _IMPORTED.add(module_name)
    _walk(ref, module_obj, attr, allowed)
    if len(_WALKED) < _WALKED_MAX:
        _WALKED.add((ref, allowed))


def verify_loaded(ref: str, allowed: Iterable[str] = ()) -> None:
    """The worker parent's check before forking: by name, and the attribute walk
    if the module is imported in this process already (:func:`verify` imported it to
    check a callback this process enqueued; dropped on reload, :func:`forget_loaded`).
    Never imports: job code is imported in horses.

    A full walk that passed is remembered (as :func:`verify` does): this early
    refusal only spares a fork; the horse checks every job in full (:func:`resolve`).
    """
    allowed = tuple(allowed)
    if (ref, allowed) in _WALKED:
        return
    module_name, attr = check_allowed(ref, allowed)
    module_obj = sys.modules.get(module_name)
    if module_obj is not None:
        _walk(ref, module_obj, attr, allowed)
        if len(_WALKED) < _WALKED_MAX:
            _WALKED.add((ref, allowed))


def resolve(ref: str, allowed: Iterable[str] = ()) -> Callable[..., Any]:
    """Import and return the callable ``ref`` names, after every check."""
    module_name, attr = check_allowed(ref, allowed)
    found: Callable[..., Any] = _walk(ref, importlib.import_module(module_name), attr, allowed)
    return found


#: callback references whose function was seen to take the job id (:func:`takes_job_id`)
_CALLBACKS_OK: set[str] = set()


def takes_job_id(option: str, ref: str, func: Any) -> None:
    """ValueError when the callback ``ref`` (given as ``func``) cannot take the one
    argument a callback is called with, the job id: RQ's take ``(job, connection,
    result)``; refused at enqueue, before anything is written, not when it runs. What
    is checked is what a worker will call: the function the reference names, when its
    module is loaded (a ``functools.wraps`` adapter is named, and so called, as what it
    wraps), else ``func``; neither readable (a builtin, a name): taken as given."""
    if ref in _CALLBACKS_OK:              # (its signature read once: a producer's loop)
        return
    module, _, name = ref.partition(":")
    target = getattr(sys.modules.get(module), name, None)
    try:
        signature = inspect.signature(target if callable(target) else func,
                                      follow_wrapped=False)
    except (TypeError, ValueError):
        return
    try:
        signature.bind("job-id")
    except TypeError:
        raise ValueError(
            f"{option}={ref}{signature}: a callback is called with one argument, the "
            f"job id (RQ's callbacks take job, connection, result); give it one "
            f"parameter and read the job with Job.fetch(job_id)") from None
    if len(_CALLBACKS_OK) < 4096:
        _CALLBACKS_OK.add(ref)
