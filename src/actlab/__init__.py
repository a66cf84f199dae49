"""actlab: train, profile and evaluate action-chunking robot policies with the GPU kept busy.

Importing ``actlab`` is cheap: subpackages (and torch) load only when used.
"""

__version__ = "0.1.0"
