"""Preloaded by ``MathChecker``'s fork server, never imported by the project itself.

Importing it imports ``math_equivalence`` (math-verify, SymPy) and grades one pair, which builds
math-verify's parsers (about 0.15 s, lazily on a first comparison); every worker forked from the
server then starts with them built.
"""

from workflow_scripts.evaluate.math_equivalence import verify_pair

verify_pair("\\frac{1}{2}", "0.5")
