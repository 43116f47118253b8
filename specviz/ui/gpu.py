"""The ZeroGPU decorator: on Hugging Face Spaces (``spaces`` installed) a callback holds a GPU only
while it generates; anywhere else the decorator returns the callback unchanged."""

from __future__ import annotations

try:
    import spaces

    gpu = spaces.GPU(duration=120)
except ImportError:

    def gpu(fn):
        """No ZeroGPU here: ``fn`` itself."""
        return fn
