"""How the engine decides: k and the draft source (``auto``) from measured costs and acceptance,
and how a verify batch is decoded. Pure: no model code."""
