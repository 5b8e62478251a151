"""The search engine, TF-free: decision identity (call-site keys from the
compiler's inline remarks), batched evaluation of decision sets, ``tune``
and its directory.  Below ``evaluation/``, ``learning/`` and ``training/``, which evaluate and
learn from what it finds.

The batched flip search measures many flips per compile, each flip's gain
read from the functions it touches; its parts:

* :mod:`.state`: the flip, its outcome and the state the parts share;
* :mod:`.candidates`: which flips and groups to try, in the prior's order;
* :mod:`.attribution`: one compile read into each flip's gain, and the
  checks that split a batch;
* :mod:`.copies` (and :mod:`.copytext`): flips measured in copies of their
  function;
* :mod:`.reference`: the reference flips are measured against;
* :mod:`.batches`: one batch measured, split when it cannot be read;
* :mod:`.scheduling`: packing flips into batches, which batch next, what
  the compiles afford;
* :mod:`.driver`: :class:`~.driver.BatchedSearch` and
  :func:`~.driver.search_module_batched`;
* :mod:`.result`: what ``tune`` stores (:func:`~.result.result_of`);
* :mod:`.tunedir`: the tune directory, written as ``tune`` searches and
  read by builds, ``eval`` and ``serve``.
"""
