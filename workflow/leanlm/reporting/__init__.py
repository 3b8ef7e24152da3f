"""leanlm.reporting: aggregation, tables, figures.

The chapters' tables, figures and analytic items register themselves in the registries of
``render`` and ``analytic`` (those modules import them at their end). Importing both here first
means any entry point (``import leanlm.reporting.render_ch2``, say) loads the registries before a
chapter module asks for them, instead of meeting a half-initialised module in an import cycle.
"""

from leanlm.reporting import render, analytic  # noqa: F401  (order matters: see above)
