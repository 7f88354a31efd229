"""tierank: rank documents with LLM judges when no ground-truth labels exist."""

__version__ = "0.1.0"
