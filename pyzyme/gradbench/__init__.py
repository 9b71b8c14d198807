"""pyzyme as a GradBench tool: ``python -m pyzyme.gradbench``.

`GradBench <https://github.com/gradbench/gradbench>`_ compares automatic differentiation tools
on a shared set of problems ("evals": gmm, ba, ht, lstm, ...). An eval drives a tool through
one JSON object per line on the tool's stdin and stdout (:mod:`pyzyme.gradbench.protocol`);
each eval pyzyme implements is a module of :mod:`pyzyme.gradbench.evals`, written as a Numba
user writes it (``@njit`` loops) and differentiated by pyzyme, with no hand-written derivative.

Run it under GradBench's intermediary from a GradBench checkout::

    gradbench run --eval "./gradbench eval gmm" --tool "python -m pyzyme.gradbench"

or drive an eval's ``run.py`` with ``python -m pyzyme.gradbench`` as its tool process. Pass
``--multithreaded`` to let Numba use every core (GradBench's published figures use one thread).
"""
