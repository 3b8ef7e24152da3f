"""The thesis's claims as verdicts with their uncertainty (params/claims.yaml -> `leanlm claims`).

- :mod:`leanlm.claims.stats`: paired bootstrap over evaluation examples and seeds; verdicts (pure numpy)
- :mod:`leanlm.claims.spec`: params/claims.yaml, validated against its schema and the experiment matrix
- :mod:`leanlm.claims.results`: what a claim reads from a profile's results (per-example data included)
- :mod:`leanlm.claims.verdicts`: each claim's parts -> effect, 95% interval, verdict
- :mod:`leanlm.claims.report`: claims.{csv,md,tex} and the summary line
"""
