"""Checks of the files training reads (:mod:`specviz.train.train_draft`): what makes a well-formed
checkpoint or teacher-data file unusable, each refused in one line naming the file: JSON metadata nested too deep, optimiser settings that are not numbers, optimiser moments that
are NaN or negative, and teacher answers that are one token repeated."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import torch

from specviz.drafters.eagle import JsonTooDeepError, loads_bounded

__all__ = ["MIN_ANSWER_TOKENS", "check_answers", "check_moment", "check_param_groups", "diverged", "json_field"]


def json_field(path: Path, meta: dict, name: str, kind: type):
    """The metadata field ``name`` of ``path`` parsed as JSON of type ``kind``, its nesting bounded
    first (:func:`~specviz.drafters.eagle.loads_bounded`).

    Raises:
        ValueError: one line naming the file: nested too deep, not JSON, or not a ``kind``.
    """
    try:
        value = loads_bounded(meta.get(name, ""), f"its {name}")
    except JsonTooDeepError as err:
        raise ValueError(f"{path}: {err}") from None
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, kind):  # a file's content, not an argument's type: a ValueError
        raise ValueError(f"{path}: its {name} is not a JSON {kind.__name__}")  # noqa: TRY004
    return value


#: AdamW's settings and their defaults (their types are what a checkpoint's groups must hold).
_ADAMW_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "amsgrad": False,
                   "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": None,
                   "decoupled_weight_decay": True, "initial_lr": 1e-3}
#: Optimiser state that is a mean of squares, so never negative (AdamW divides by its root).
_SQUARES = ("exp_avg_sq", "max_exp_avg_sq")


def _finite_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_param_groups(path: Path, groups: list) -> None:
    """Every parameter group a dict of AdamW's settings, each of its default's kind: finite
    numbers (``betas`` two of them), flags, ``params`` a list of indices (ValueError naming the
    file and the setting: a string learning rate ended in a bare TypeError at the first step)."""
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("params"), list):
            raise ValueError(f"{path}: a parameter group is not AdamW's (no list of params)")
        for key, value in group.items():
            default = _ADAMW_DEFAULTS.get(key, 0.0)
            if key == "params":
                ok = all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
            elif isinstance(default, tuple):
                ok = isinstance(value, list | tuple) and len(value) == 2 and all(map(_finite_number, value))
            elif isinstance(default, bool) or default is None:
                ok = isinstance(value, bool) or (default is None and value is None)
            else:
                ok = _finite_number(value)
            if not ok:
                raise ValueError(f"{path}: its optimiser setting {key} is {str(value)[:40]!r}, not "
                                 f"{'a list of ids' if key == 'params' else 'of the kind ' + repr(default)}")


def check_moment(path: Path, name: str, key: str, value: torch.Tensor) -> None:
    """One optimiser tensor: finite, and a mean of squares (:data:`_SQUARES`) never negative
    (ValueError naming the file and the tensor: either trained on to a head of NaN weights)."""
    if value.is_floating_point() and not torch.isfinite(value).all():
        raise ValueError(f"{path}: its optimiser state {name} holds NaN or infinite values")
    if key in _SQUARES and (value < 0).any():
        raise ValueError(f"{path}: its optimiser state {name} holds negative values, which a mean of squares "
                         "never has")
    if key == "step" and (value < 0).any():
        raise ValueError(f"{path}: its optimiser state {name} is a negative step count")


#: Teacher answers holding fewer distinct tokens than this teach a head nothing but to repeat one.
MIN_ANSWER_TOKENS = 2


def check_answers(sequences: list[tuple[list[int], int]], where) -> None:
    """Refuse teacher data whose answers (each sequence's ids after its prompt) hold fewer than
    :data:`MIN_ANSWER_TOKENS` distinct tokens: one token repeated trains a head that can only
    propose it (such data trained without a word).

    Raises:
        ValueError: one line naming ``where`` (the file) and the tokens found.
    """
    distinct = Counter(t for ids, prompt_len in sequences for t in ids[prompt_len:])
    if len(distinct) < MIN_ANSWER_TOKENS:
        listed = ", ".join(f"{token} ×{count}" for token, count in distinct.most_common(3)) or "none"
        raise ValueError(f"{where}: its answers hold {len(distinct)} distinct token{'s' if len(distinct) != 1 else ''} "
                         f"({listed}): a head trained on them could only propose "
                         f"{'that one' if distinct else 'nothing'}; it needs at least {MIN_ANSWER_TOKENS}")


def diverged(out: Path, step: int, what: str) -> None:
    """Stop a training whose weights would turn NaN at ``step``, before anything more is written
    (the last checkpoint, if any, stays the last finite one): no NaN head is ever saved.

    Raises:
        ValueError: always, one line naming the output directory ``out`` and ``what`` went wrong.
    """
    raise ValueError(f"{out}: training diverged at step {step} ({what}; NaN or infinite): no head was written, "
                     "and the last checkpoint is the last finite one (try a lower --lr or --grad-clip)")
