"""The GradBench evals pyzyme implements, one module each, named as GradBench names them.

Each module defines ``FUNCTIONS``: a dict from the function names the eval asks for
(``"objective"``, ``"jacobian"``, ...) to :class:`pyzyme.gradbench.protocol.Function` rows.
"""

#: eval name -> the module that implements it
EVALS = {
    "hello": "pyzyme.gradbench.evals.hello",
    "particle": "pyzyme.gradbench.evals.particle",
    "saddle": "pyzyme.gradbench.evals.saddle",
}
