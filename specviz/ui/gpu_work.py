"""What runs on the GPU: the list of the page's work functions for :func:`specviz.ui.gpu.run_job`
(one module-level ``*_work`` function beside each generating tab's callback); the models placed at
import on a ZeroGPU Space are :mod:`specviz.ui.placement`'s.

Each work function takes the job's :class:`~specviz.ui.gpu.JobContext` first and the plain
arguments its callback validated (the callbacks in :mod:`~specviz.ui.run_stream`,
:mod:`~specviz.ui.lossless_check`, :mod:`~specviz.ui.experiments_tab` and
:mod:`~specviz.ui.side_by_side_tab` refuse bad input before any GPU is asked for), reaches the
models through the model cache (:mod:`specviz.models`' module globals: a pair already loaded, or
placed by :func:`specviz.ui.placement.place_at_import`, is reused, and ``prepared.in_use()`` pins it while it runs), and
yields the callback's outputs: strings, figures, dicts and the run's state, all picklable. Stop
(:meth:`~specviz.ui.gpu.JobContext.stopped`) and the deadline
(:meth:`~specviz.ui.gpu.JobContext.past_deadline`) end the loops with what was made kept.

The tab modules do not import this one (a job names its work function directly), so the imports
run one way: this module → the tabs → :mod:`specviz.ui.gpu`.
"""

from __future__ import annotations

from . import experiments_tab, lossless_check, run_stream, side_by_side_tab


#: Every work function a job may name, one per generating tab, each beside the callback that
#: validates its request (tests check each pickles by reference).
WORKS = (run_stream.run_work, lossless_check.lossless_work, experiments_tab.sweep_work, side_by_side_tab.side_by_side_work)
