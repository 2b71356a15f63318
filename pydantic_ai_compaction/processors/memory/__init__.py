"""Memory: tools and stores that remember what compaction moved out of the request.

`Archive`, `Notes` and `Recall` share tool results through `results` (ids, originals, archiving), never
through each other's modules; `Archive`'s changes to the history go through `runtime.project`.
"""
