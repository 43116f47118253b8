"""The page's server side: what a generation goes through before, during and after it runs.

One recipe for a generating endpoint (``feature``), its one GPU entry point and ZeroGPU budget
(``gpu``, ``gpu_budget``, ``placement``, ``deltas``), what each visitor keeps apart (``visitors``,
``state``), the run's fields and what the page offers (``fields``, ``settings``), threads, and the
one translator of the library's errors into ``gr.Error`` (``user_errors``).
"""
