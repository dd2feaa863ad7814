"""The speculation engine: a library with no UI imports (no Textual, no Rich, no printing).

Load with :func:`loader.load_speculator`, then iterate :meth:`Speculator.run`
for immutable events (:mod:`events`).
"""
