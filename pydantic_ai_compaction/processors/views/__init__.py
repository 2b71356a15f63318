"""Views: each projects the request sent to the model without touching the persisted history.

`ClearThenSummarize` (tiered), `BoundedSelection` (selection), `CuratedSelection` (curation),
`Orientation` (orientation); `ForgetReasoning` (forget) is the one whose contract is to rewrite the
log, and only the thinking of finished steps. Every request they build goes through
`runtime.project.project` and every rewrite through `runtime.project.rewrite_log` (or `rewrite_log_at`, given
the changed positions), which hold it to the rules a strategy's compaction is held to.
"""
