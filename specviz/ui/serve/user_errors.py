"""The page's one error translator: the library's errors become a ``gr.Error`` with one sentence.

A request that fails validation, a model that cannot load or pair, logits that are not finite, a
prompt longer than the context, or a file that cannot be read: the visitor (or API caller) reads one
line saying what is wrong, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import gradio as gr

from specviz.core.engine import ContextLengthError
from specviz.models.errors import IncompatiblePairError, ModelLoadError
from specviz.run.request import RequestError
from specviz.core.sampling import NonFiniteLogitsError
from specviz.ui.draw.escape import as_text

logger = logging.getLogger("specviz.app")

#: The errors a visitor's input or choice of models can cause (RequestError, ContextLengthError and
#: NonFiniteLogitsError are ValueErrors; they are listed for the reader).
USER_ERRORS = (RequestError, ModelLoadError, NonFiniteLogitsError, ContextLengthError, ValueError, OSError)


def sentence(text: str) -> str:
    """``text`` with a capital first letter and a final full stop."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def refused(message: str) -> gr.Error:
    """The ``gr.Error`` to raise for a visitor's mistake: logged as one line ("refused: …"), and
    marked so that gradio prints no traceback for it (a traceback is for the app's own faults).

    ``message`` is text (it often quotes what the visitor sent: a value, a model's name, a trace's
    field); the page's pop-up reads HTML, so it is shown through
    :func:`specviz.ui.draw.escape.as_text`, here and nowhere before."""
    logger.info("refused: %s", message)
    return gr.Error(as_text(message), print_exception=False)


@contextlib.contextmanager
def user_errors(hint: Callable[[Exception], str] | None = None) -> Iterator[None]:
    """Turn :data:`USER_ERRORS` raised in the block into ``gr.Error`` (one sentence, no traceback).

    Args:
        hint: optional; given the error, returns text appended to the sentence (e.g. what to try).

    Raises:
        gr.Error: "These models cannot be paired: …" for an IncompatiblePairError, else the error's
            own message as a sentence.
    """
    try:
        yield
    except gr.Error:  # already a sentence for the visitor (gr.Error is a ValueError too)
        raise
    except IncompatiblePairError as err:
        raise refused(f"These models cannot be paired: {err}") from None
    except USER_ERRORS as err:
        raise refused(sentence(str(err)) + (hint(err) if hint else "")) from None
