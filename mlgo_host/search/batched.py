"""Batched flip search: many flips measured per compile, each flip's gain
read from the functions it touches.  This module is the search's public
face; the parts live in their own modules:

* :mod:`.state`: the flip, its outcome and the state the parts share;
* :mod:`.candidates`: which flips and groups to try, in the prior's order;
* :mod:`.attribution`: one compile read into each flip's gain, and the
  checks that split a batch;
* :mod:`.copies` (and :mod:`.copytext`): flips measured in copies of their
  function;
* :mod:`.reference`: the reference flips are measured against;
* :mod:`.measure`: one batch measured, split when it cannot be read;
* :mod:`.scheduling`: packing flips into batches, which batch next, what
  the compiles afford;
* :mod:`.driver`: :class:`BatchedSearch` and :func:`search_module_batched`;
* :mod:`.result`: what ``tune`` stores (:func:`result_of`).
"""

from mlgo_host.search.attribution import EH_FRAME_PADDING
from mlgo_host.search.driver import BatchedSearch, search_module_batched, search_of
from mlgo_host.search.result import result_of
from mlgo_host.search.state import Candidate, Outcome

__all__ = ["BatchedSearch", "Candidate", "EH_FRAME_PADDING", "Outcome", "result_of", "search_module_batched",
           "search_of"]
