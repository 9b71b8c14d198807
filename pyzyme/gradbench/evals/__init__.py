"""The GradBench evals pyzyme implements, one module each, named as GradBench names them.

Each module defines ``FUNCTIONS``: a dict from the function names the eval asks for
(``"objective"``, ``"jacobian"``, ...) to :class:`pyzyme.gradbench.protocol.Function` rows.
"""

#: eval name -> the module that implements it
EVALS = {
    "ba": "pyzyme.gradbench.evals.ba",
    "det": "pyzyme.gradbench.evals.det",
    "gmm": "pyzyme.gradbench.evals.gmm",
    "hello": "pyzyme.gradbench.evals.hello",
    "ht": "pyzyme.gradbench.evals.ht",
    "kmeans": "pyzyme.gradbench.evals.kmeans",
    "llsq": "pyzyme.gradbench.evals.llsq",
    "lse": "pyzyme.gradbench.evals.lse",
    "lstm": "pyzyme.gradbench.evals.lstm",
    "ode": "pyzyme.gradbench.evals.ode",
    "particle": "pyzyme.gradbench.evals.particle",
    "saddle": "pyzyme.gradbench.evals.saddle",
}
